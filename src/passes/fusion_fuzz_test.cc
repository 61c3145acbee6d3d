// Property test of the fusion pass: for random valid graphs
// (random_graph.h), the fused graph evaluates bit-identically (any NaN equals
// any NaN) to the unfused one under the interpreter, keeps the calling
// convention, has fusion bodies made only of fusible ops (each body's kind
// matching whether it reduces), leaves no fusible compute node outside a
// fusion, and is left unchanged by a second run. The same holds after the
// whole CpuPipeline.
//
//   EMBER_FUZZ_SEED=<n>    base seed (default: the time; printed at start)
//   EMBER_FUZZ_GRAPHS=<n>  number of graphs (default 500)
// Graph i uses seed base+i; a failure prints "seed S", which reproduces with
// EMBER_FUZZ_SEED=S EMBER_FUZZ_GRAPHS=1.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "ember/eval/interpreter.h"
#include "ember/ir/attributes.h"
#include "ember/ir/text.h"
#include "ember/passes/pass.h"
#include "passes/fusion.h"
#include "passes/fusion_legality.h"
#include "passes/random_graph.h"

namespace ember {
namespace {

uint64_t EnvOr(const char* name, uint64_t def) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return def;
  return std::strtoull(v, nullptr, 10);
}

// Empty when the fused graph's structure is as promised, else what is wrong.
std::string CheckFusedStructure(const Graph& g) {
  for (const Node& n : g.nodes()) {
    if (n.op == OpKind::kFusion) {
      if (!n.called) return "fusion %" + std::to_string(n.id) + " has no body";
      bool reduces = false;
      for (const Node& b : n.called->nodes()) {
        if (b.op == OpKind::kParameter) continue;
        if (!passes::IsFusibleNode(b)) {
          return "fusion %" + std::to_string(n.id) + " body holds non-fusible " +
                 std::string(OpName(b.op)) + " %" + std::to_string(b.id);
        }
        reduces = reduces || b.op == OpKind::kReduce;
      }
      const std::string kind = attr::Kind.Text(n.attrs);
      if (reduces ? kind != "input" && kind != "row" : kind != "loop")
        return "fusion %" + std::to_string(n.id) + " has kind " + kind;
      continue;
    }
    // Outside fusions: only non-fusible nodes and plain constants.
    if (n.op != OpKind::kConstant && passes::IsFusibleNode(n)) {
      return "fusible " + std::string(OpName(n.op)) + " %" + std::to_string(n.id) +
             " is outside every fusion";
    }
  }
  return "";
}

TEST(FusionFuzz, FusedGraphsEvaluateBitIdentically) {
  const uint64_t seed =
      EnvOr("EMBER_FUZZ_SEED",
            static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) %
                1000000007u);
  const uint64_t graphs = EnvOr("EMBER_FUZZ_GRAPHS", 500);
  std::cout << "fusion fuzz: EMBER_FUZZ_SEED=" << seed << " EMBER_FUZZ_GRAPHS=" << graphs
            << std::endl;
  int failures = 0;
  int64_t fusions = 0, compared = 0, input_fusions = 0, row_fusions = 0;
  for (uint64_t i = 0; i < graphs && failures < 3; ++i) {
    const uint64_t graph_seed = seed + i;
    std::mt19937_64 rng(graph_seed);
    StatusOr<Graph> made = fuzz::GenerateRandomGraph(rng);
    ASSERT_TRUE(made.ok()) << "seed " << graph_seed << ": " << made.status().ToString();
    std::vector<Literal> args = fuzz::RandomArguments(*made, rng);
    StatusOr<std::vector<Literal>> want = Evaluate(*made, args);
    for (int variant = 0; variant < 2; ++variant) {
      Graph g = *made;
      std::string what = variant == 0 ? "fusion" : "CpuPipeline";
      if (variant == 0) {
        passes::FusionPass pass;
        StatusOr<bool> ran = pass.Run(g);
        ASSERT_TRUE(ran.ok()) << "seed " << graph_seed << ": " << ran.status().ToString();
        // A second run finds nothing left to fuse.
        Graph again = g;
        StatusOr<bool> twice = pass.Run(again);
        ASSERT_TRUE(twice.ok());
        EXPECT_FALSE(*twice) << "seed " << graph_seed << ": fusion is not idempotent\n"
                             << PrintGraph(g);
      } else {
        StatusOr<bool> ran = CpuPipeline().Run(g);
        ASSERT_TRUE(ran.ok()) << "seed " << graph_seed << ": " << ran.status().ToString();
      }
      std::string problem;
      Status v = Verify(g);
      if (!v.ok()) problem = "invalid graph: " + v.ToString();
      if (problem.empty()) problem = CheckFusedStructure(g);
      if (problem.empty() && g.parameters().size() != made->parameters().size())
        problem = "parameter count changed";
      if (problem.empty() && g.aliases() != made->aliases()) problem = "aliases changed";
      StatusOr<std::vector<Literal>> got = Evaluate(g, args);
      if (problem.empty()) {
        if (want.ok() != got.ok()) {
          problem = "before: " + want.status().ToString() + " after: " + got.status().ToString();
        } else if (want.ok()) {
          if (got->size() != want->size()) problem = "output count differs";
          for (size_t o = 0; problem.empty() && o < want->size(); ++o) {
            std::string why;
            if (!fuzz::BitIdentical((*want)[o], (*got)[o], &why))
              problem = "output " + std::to_string(o) + ": " + why;
          }
          ++compared;
        } else if (want.status().code() != got.status().code()) {
          problem =
              "error codes differ: " + want.status().ToString() + " vs " + got.status().ToString();
        }
      }
      if (!problem.empty()) {
        ++failures;
        ADD_FAILURE() << "seed " << graph_seed << " (EMBER_FUZZ_SEED=" << graph_seed
                      << " EMBER_FUZZ_GRAPHS=1), " << what << ": " << problem << "\noriginal:\n"
                      << PrintGraph(*made) << "after:\n"
                      << PrintGraph(g);
      }
      if (variant == 0) {
        for (const Node& n : g.nodes()) {
          fusions += n.op == OpKind::kFusion;
          input_fusions += n.op == OpKind::kFusion && attr::Kind.Text(n.attrs) == "input";
          row_fusions += n.op == OpKind::kFusion && attr::Kind.Text(n.attrs) == "row";
        }
      }
    }
  }
  std::cout << "fusion fuzz: " << graphs << " graphs, " << compared << " comparisons, " << fusions
            << " fusions (" << input_fusions << " input, " << row_fusions << " row fusions)"
            << std::endl;
  EXPECT_EQ(failures, 0) << "base seed " << seed;
  if (graphs >= 100) {
    EXPECT_GT(fusions, static_cast<int64_t>(graphs));
    EXPECT_GT(input_fusions + row_fusions, 0);
  }
}

}  // namespace
}  // namespace ember
