// Property test of the default pipeline: for random valid graphs
// (random_graph.h), the optimized graph evaluates to bit-identical values
// (any NaN equals any NaN) on random inputs, keeps the calling convention
// (parameters, output shapes, aliases), and never adds rng ops or barriers.
//
//   EMBER_FUZZ_SEED=<n>    base seed (default: the time; printed at start)
//   EMBER_FUZZ_GRAPHS=<n>  number of graphs (default 500)
// Graph i uses seed base+i, so a failure reported as "seed S" reproduces
// with EMBER_FUZZ_SEED=S EMBER_FUZZ_GRAPHS=1.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>

#include "ember/eval/interpreter.h"
#include "ember/ir/text.h"
#include "ember/passes/pass.h"
#include "passes/constant_folding.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/random_graph.h"
#include "passes/simplify.h"

namespace ember {
namespace {

uint64_t EnvOr(const char* name, uint64_t def) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return def;
  return std::strtoull(v, nullptr, 10);
}

// Forwards to a pass and counts the runs that changed the graph.
class CountingPass : public Pass {
 public:
  CountingPass(Pass* inner, int64_t* changes) : inner_(inner), changes_(changes) {}
  std::string name() const override { return inner_->name(); }
  StatusOr<bool> Run(Graph& g) override {
    StatusOr<bool> r = inner_->Run(g);
    if (r.ok() && *r) ++*changes_;
    return r;
  }

 private:
  Pass* inner_;
  int64_t* changes_;
};

int CountOps(const Graph& g, bool (*pred)(OpKind)) {
  int n = 0;
  for (const Node& node : g.nodes()) n += pred(node.op) ? 1 : 0;
  return n;
}
bool IsBarrier(OpKind op) { return op == OpKind::kOptimizationBarrier; }

TEST(PassFuzz, DefaultPipelinePreservesValuesBitExactly) {
  const uint64_t seed =
      EnvOr("EMBER_FUZZ_SEED",
            static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) %
                1000000007u);
  const uint64_t graphs = EnvOr("EMBER_FUZZ_GRAPHS", 500);
  std::cout << "pass fuzz: EMBER_FUZZ_SEED=" << seed << " EMBER_FUZZ_GRAPHS=" << graphs
            << std::endl;

  passes::SimplifyPass simplify;
  passes::ConstantFoldingPass folding;
  passes::CsePass cse;
  passes::DcePass dce;
  std::map<std::string, int64_t> changes;
  std::vector<std::unique_ptr<Pass>> list;
  for (Pass* p : std::vector<Pass*>{&simplify, &folding, &cse, &dce}) {
    list.push_back(std::make_unique<CountingPass>(p, &changes[p->name()]));
  }
  const Pipeline pipeline(std::move(list), DefaultPipeline().max_rounds());
  ASSERT_EQ(pipeline.pass_names(), DefaultPipeline().pass_names());

  const auto start = std::chrono::steady_clock::now();
  int64_t nodes_before = 0, nodes_after = 0, skipped = 0, compared = 0, failures = 0;
  for (uint64_t i = 0; i < graphs && failures < 3; ++i) {
    const uint64_t graph_seed = seed + i;
    std::mt19937_64 rng(graph_seed);
    StatusOr<Graph> made = fuzz::GenerateRandomGraph(rng);
    ASSERT_TRUE(made.ok()) << "seed " << graph_seed << ": " << made.status().ToString();
    const Graph original = *made;
    Graph optimized = original;
    StatusOr<bool> ran = pipeline.Run(optimized);
    ASSERT_TRUE(ran.ok()) << "seed " << graph_seed << ": " << ran.status().ToString() << "\n"
                          << PrintGraph(original);
    nodes_before += original.num_nodes();
    nodes_after += optimized.num_nodes();

    auto report = [&](const std::string& what) {
      ++failures;
      ADD_FAILURE() << "seed " << graph_seed << " (EMBER_FUZZ_SEED=" << graph_seed
                    << " EMBER_FUZZ_GRAPHS=1): " << what << "\noriginal:\n"
                    << PrintGraph(original) << "optimized:\n"
                    << PrintGraph(optimized);
    };

    // The calling convention is kept.
    bool same_signature = original.parameters().size() == optimized.parameters().size() &&
                          original.outputs().size() == optimized.outputs().size() &&
                          original.aliases() == optimized.aliases();
    for (size_t p = 0; same_signature && p < original.parameters().size(); ++p) {
      same_signature = original.node(original.parameters()[p]).shape ==
                       optimized.node(optimized.parameters()[p]).shape;
    }
    for (size_t o = 0; same_signature && o < original.outputs().size(); ++o) {
      same_signature = original.node(original.outputs()[o]).shape ==
                       optimized.node(optimized.outputs()[o]).shape;
    }
    if (!same_signature) {
      report("parameters, output shapes or aliases changed");
      continue;
    }
    if (CountOps(optimized, IsRng) > CountOps(original, IsRng) ||
        CountOps(optimized, IsBarrier) > CountOps(original, IsBarrier)) {
      report("rng ops or optimization-barriers were added");
      continue;
    }

    for (int draw = 0; draw < 3; ++draw) {
      std::vector<Literal> args = fuzz::RandomArguments(original, rng);
      StatusOr<std::vector<Literal>> want = Evaluate(original, args);
      if (!want.ok()) {
        // A data error in the original (none by construction); dce may drop
        // a dead failing node, so the optimized graph may then succeed.
        // Any other error is a generator or interpreter bug.
        if (want.status().code() != StatusCode::kOutOfRange) {
          report("the original graph fails: " + want.status().ToString());
          break;
        }
        ++skipped;
        continue;
      }
      StatusOr<std::vector<Literal>> got = Evaluate(optimized, args);
      if (!got.ok()) {
        report("the optimized graph fails: " + got.status().ToString());
        break;
      }
      ++compared;
      bool same = want->size() == got->size();
      std::string why = same ? "" : "output count differs";
      for (size_t o = 0; same && o < want->size(); ++o) {
        same = fuzz::BitIdentical((*want)[o], (*got)[o], &why);
        if (!same) why = "output " + std::to_string(o) + ": " + why;
      }
      if (!same) {
        report(why);
        break;
      }
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::cout << "pass fuzz: " << graphs << " graphs, " << compared << " evaluations compared, "
            << skipped << " skipped (data error in the original), nodes " << nodes_before << " -> "
            << nodes_after << ", " << secs << " s\n  graphs changed per pass:";
  for (const auto& [name, n] : changes) std::cout << " " << name << "=" << n;
  std::cout << "\n  simplify rules fired (" << simplify.fired().size() << " of "
            << passes::SimplifyRuleNames().size() << "):";
  for (const auto& [rule, n] : simplify.fired()) std::cout << " " << rule << "=" << n;
  std::cout << std::endl;

  EXPECT_EQ(failures, 0) << "base seed " << seed;
  if (graphs >= 200) {
    // The generator must exercise every pass, and most graphs must run.
    for (const auto& [name, n] : changes) EXPECT_GT(n, 0) << name << " never changed a graph";
    EXPECT_GE(simplify.fired().size(), 15u);
    EXPECT_LT(skipped, compared / 10 + 1);
  }
}

// Each pass run alone (as `ember-opt --passes=<name>` does) on the same
// random graphs keeps values bit-exactly too.
TEST(PassFuzz, EachPassAlonePreservesValuesBitExactly) {
  const uint64_t seed =
      EnvOr("EMBER_FUZZ_SEED",
            static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) %
                1000000007u);
  const uint64_t graphs = EnvOr("EMBER_FUZZ_GRAPHS", 500);
  std::cout << "pass fuzz (single passes): EMBER_FUZZ_SEED=" << seed
            << " EMBER_FUZZ_GRAPHS=" << graphs << std::endl;
  int failures = 0;
  for (uint64_t i = 0; i < graphs && failures < 3; ++i) {
    const uint64_t graph_seed = seed + i;
    std::mt19937_64 rng(graph_seed);
    StatusOr<Graph> made = fuzz::GenerateRandomGraph(rng);
    ASSERT_TRUE(made.ok()) << "seed " << graph_seed << ": " << made.status().ToString();
    std::vector<Literal> args = fuzz::RandomArguments(*made, rng);
    StatusOr<std::vector<Literal>> want = Evaluate(*made, args);
    if (!want.ok()) continue;  // counted by the pipeline test
    for (const std::string& name : AllPassNames()) {
      Graph g = *made;
      StatusOr<std::unique_ptr<Pass>> pass = CreatePass(name);
      ASSERT_TRUE(pass.ok());
      StatusOr<bool> ran = (*pass)->Run(g);
      ASSERT_TRUE(ran.ok()) << "seed " << graph_seed << " pass " << name << ": "
                            << ran.status().ToString();
      ASSERT_TRUE(Verify(g).ok()) << "seed " << graph_seed << " pass " << name;
      StatusOr<std::vector<Literal>> got = Evaluate(g, args);
      bool same = got.ok() && got->size() == want->size();
      std::string why = got.ok() ? "output count differs" : got.status().ToString();
      for (size_t o = 0; same && o < want->size(); ++o) {
        same = fuzz::BitIdentical((*want)[o], (*got)[o], &why);
      }
      if (!same) {
        ++failures;
        ADD_FAILURE() << "seed " << graph_seed << " (EMBER_FUZZ_SEED=" << graph_seed
                      << " EMBER_FUZZ_GRAPHS=1), pass " << name << ": " << why << "\noriginal:\n"
                      << PrintGraph(*made) << "after " << name << ":\n"
                      << PrintGraph(g);
      }
    }
  }
  EXPECT_EQ(failures, 0) << "base seed " << seed;
}

}  // namespace
}  // namespace ember
