// Property test of the runtime's partitioning: for random valid graphs
// (passes/random_graph.h), with extern identity custom-calls spliced in at
// random places (so step boundaries fall everywhere, tuples included) and a
// random alias map, the compiled executable returns what the reference
// interpreter returns on the original graph, with and without donation.
// The seed is printed on failure; EMBER_FUZZ_SEED overrides the base seed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "ember/eval/interpreter.h"
#include "ember/ir/builder.h"
#include "ember/ir/text.h"
#include "ember/runtime/executable.h"
#include "passes/random_graph.h"

namespace ember {
namespace {

constexpr int kNumGraphs = 300;

void RegisterFuzzIdentity() {
  static bool done = [] {
    ExternRegistry::Global().Register("test.fuzz-identity", [](ExternCall& c) -> Status {
      if (c.inputs.size() != 1 || c.outputs.size() != 1 ||
          c.inputs[0]->size_bytes() != c.outputs[0]->size_bytes()) {
        return InvalidArgument("test.fuzz-identity: bad call");
      }
      if (c.inputs[0]->size_bytes() > 0) {
        std::memcpy(c.outputs[0]->data(), c.inputs[0]->data(),
                    static_cast<size_t>(c.inputs[0]->size_bytes()));
      }
      return OkStatus();
    });
    return true;
  }();
  (void)done;
}

// Copies `g`, routing some array values through test.fuzz-identity and
// aliasing some outputs to parameters of the same shape (and then often
// reading that parameter again in a final extern step, as an extra output).
StatusOr<Graph> Splice(const Graph& g, std::mt19937_64& rng) {
  GraphBuilder b(g.name());
  std::vector<NodeId> map(g.num_nodes(), kInvalidNode);
  std::bernoulli_distribution splice(0.25);
  for (const Node& n : g.nodes()) {
    std::vector<NodeId> ops;
    for (NodeId o : n.operands) ops.push_back(map[o]);
    NodeId id = b.AddNodeLike(n, ops);
    if (!n.shape.is_tuple() && n.op != OpKind::kParameter && splice(rng)) {
      id = b.CustomCall("test.fuzz-identity", {id}, n.shape);
    }
    map[n.id] = id;
  }
  std::vector<NodeId> outs;
  for (NodeId o : g.outputs()) outs.push_back(map[o]);
  const size_t num_outputs = outs.size();
  std::vector<std::pair<int, int>> aliases;
  std::vector<bool> used(g.parameters().size(), false);
  for (size_t o = 0; o < num_outputs; ++o) {
    for (size_t p = 0; p < g.parameters().size(); ++p) {
      if (!used[p] && g.node(g.parameters()[p]).shape == g.node(g.outputs()[o]).shape &&
          std::bernoulli_distribution(0.6)(rng)) {
        aliases.emplace_back(static_cast<int>(o), static_cast<int>(p));
        used[p] = true;
        // Often read the donated parameter once more, in a last extern step:
        // the in-place write must wait for it.
        if (std::bernoulli_distribution(0.5)(rng)) {
          NodeId param = map[g.parameters()[p]];
          outs.push_back(b.CustomCall("test.fuzz-identity", {param}, b.shape(param)));
        }
        break;
      }
    }
  }
  b.SetOutputs(outs);
  for (const auto& [o, p] : aliases) b.SetAlias(o, p);
  return b.Build();
}

uint64_t BaseSeed() {
  const char* env = std::getenv("EMBER_FUZZ_SEED");
  return env ? std::strtoull(env, nullptr, 10) : 20261130;
}

TEST(RuntimeFuzzTest, ExecutableMatchesInterpreterOnRandomGraphs) {
  RegisterFuzzIdentity();
  const uint64_t base = BaseSeed();
  int donated_runs = 0, aliased_in_place = 0;
  for (int i = 0; i < kNumGraphs; ++i) {
    const uint64_t seed = base + static_cast<uint64_t>(i);
    std::mt19937_64 rng(seed);
    auto original = fuzz::GenerateRandomGraph(rng);
    ASSERT_TRUE(original.ok()) << "seed " << seed << ": " << original.status().ToString();
    auto g = Splice(*original, rng);
    ASSERT_TRUE(g.ok()) << "seed " << seed << ": " << g.status().ToString();
    std::vector<Literal> args = fuzz::RandomArguments(*g, rng);
    auto want = Evaluate(*g, args);
    ASSERT_TRUE(want.ok()) << "seed " << seed << ": " << want.status().ToString();
    // Splicing identities changes no value.
    auto want_original = Evaluate(*original, args);
    ASSERT_TRUE(want_original.ok()) << "seed " << seed;
    for (size_t o = 0; o < want_original->size(); ++o) {
      ASSERT_TRUE(fuzz::BitIdentical((*want)[o], (*want_original)[o])) << "seed " << seed;
    }

    for (bool extern_contractions : {true, false}) {
      CompileOptions copts;
      copts.extern_contractions = extern_contractions;
      auto exe = Compile(*g, copts);
      ASSERT_TRUE(exe.ok()) << "seed " << seed << ": " << exe.status().ToString();
      for (bool donate : {false, true}) {
        std::vector<BufferRef> bufs;
        for (const Literal& a : args) bufs.push_back(Buffer::FromLiteral(a));
        ExecuteOptions eopts;
        eopts.donated.assign(bufs.size(), donate);
        auto got = exe->Run(bufs, eopts);
        ASSERT_TRUE(got.ok()) << "seed " << seed << ": " << got.status().ToString() << "\n"
                              << PrintGraph(*g) << exe->DebugString();
        ASSERT_EQ(got->size(), want->size());
        for (size_t o = 0; o < got->size(); ++o) {
          std::string why;
          ASSERT_TRUE(fuzz::BitIdentical((*got)[o]->literal(), (*want)[o], &why))
              << "seed " << seed << " output " << o << " (donate=" << donate
              << ", extern_contractions=" << extern_contractions << "): " << why << "\n"
              << PrintGraph(*g) << exe->DebugString();
        }
        for (const auto& [o, p] : g->aliases()) {
          const bool same = (*got)[o].get() == bufs[p].get();
          if (g->outputs()[o] == g->parameters()[p]) continue;  // returned as is either way
          EXPECT_EQ(same, donate) << "seed " << seed << " output " << o << " parameter " << p;
          aliased_in_place += same;
        }
        donated_runs += donate;
      }
    }
  }
  // The generator must actually exercise donation.
  EXPECT_GT(aliased_in_place, kNumGraphs / 10);
  std::cout << "runtime fuzz: " << kNumGraphs << " graphs from seed " << base << ", "
            << donated_runs << " donated runs, " << aliased_in_place
            << " outputs written in place\n";
}

}  // namespace
}  // namespace ember
