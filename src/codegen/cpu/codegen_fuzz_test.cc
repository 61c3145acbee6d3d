// Differential fuzzer: random valid graphs (src/passes/random_graph.h, no
// dot / rng / barrier) compiled to native code vs the reference interpreter,
// bit for bit (any NaN equals any NaN; tolerance 0 ulp: float reductions of
// <= 128 elements follow the interpreter's order exactly and the generator
// keeps arrays at <= 64 elements), except, in optimized builds, outputs
// computed from vector-math ops (kVectorMathMaxUlps + twice the spread of
// the interpreter's outputs with those ops perturbed by 4 ulps). To keep compiles few, 25 graphs
// are merged side by side into one kernel. EMBER_FUZZ_SEED and EMBER_FUZZ_GRAPHS override the seed
// (printed) and the graph count (default 500); EMBER_FUZZ_OPT the optimization flag (default -O0:
// compile time dominates; EMBER_FUZZ_OPT=-O3 checks optimized code, bit-exact as well).
#include <cstdio>
#include <cstdlib>
#include <map>

#include "codegen/cpu/codegen_test_util.h"
#include "codegen/cpu/emitter.h"
#include "codegen/cpu/vector_math.h"
#include "ember/ir/attributes.h"
#include "ember/ir/text.h"
#include "passes/random_graph.h"

namespace ember::codegen {
namespace {

uint64_t EnvOr(const char* name, uint64_t def) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : def;
}

// Appends `g` to `b` with parameters renumbered from `first_param`; returns
// the ids of g's outputs in b.
std::vector<NodeId> Append(GraphBuilder& b, const Graph& g, int first_param) {
  std::vector<NodeId> map(g.num_nodes(), kInvalidNode);
  for (const Node& n : g.nodes()) {
    if (n.op == OpKind::kParameter) {
      map[n.id] = b.Parameter(first_param + attr::Index(n), n.shape);
      continue;
    }
    std::vector<NodeId> ops;
    for (NodeId o : n.operands) ops.push_back(map[o]);
    map[n.id] = b.AddNodeLike(n, ops);
  }
  std::vector<NodeId> outs;
  for (NodeId o : g.outputs()) outs.push_back(map[o]);
  return outs;
}

TEST(CodegenFuzz, RandomGraphsMatchInterpreterBitForBit) {
  const uint64_t seed = EnvOr("EMBER_FUZZ_SEED", 20261130);
  const int total = static_cast<int>(EnvOr("EMBER_FUZZ_GRAPHS", 500));
  constexpr int kPerKernel = 25;
  std::printf("codegen fuzz: seed %llu, %d graphs (rerun: EMBER_FUZZ_SEED=%llu)\n",
              static_cast<unsigned long long>(seed), total, static_cast<unsigned long long>(seed));
  testing::TempDir dir;
  fuzz::RandomGraphOptions gopts;
  gopts.allow_dot = false;
  gopts.allow_rng = false;
  gopts.allow_barrier = false;
  struct Case {
    uint64_t seed;
    Graph graph;
    std::vector<Literal> args;
    std::vector<Literal> want;
  };
  std::vector<std::vector<Case>> batches;
  std::vector<Graph> merged;
  int compared = 0, skipped = 0;
  std::map<std::string, int> skip_reasons;
  for (int first = 0; first < total; first += kPerKernel) {
    std::vector<Case> cases;
    for (int i = first; i < std::min(total, first + kPerKernel); ++i) {
      const uint64_t gseed = seed * 1000003 + static_cast<uint64_t>(i);
      std::mt19937_64 rng(gseed);
      auto g = fuzz::GenerateRandomGraph(rng, gopts);
      ASSERT_TRUE(g.ok()) << "graph seed " << gseed << ": " << g.status().ToString();
      if (Status st = CheckKernelSupported(*g); !st.ok()) {
        ++skipped;
        // "cpu codegen: gather %7 is not ..." -> "gather"
        std::string op = st.message().substr(std::string("cpu codegen: ").size());
        ++skip_reasons[op.substr(0, op.find(' '))];
        continue;
      }
      std::vector<Literal> args = fuzz::RandomArguments(*g, rng);
      auto want = Evaluate(*g, args);
      ASSERT_TRUE(want.ok()) << "graph seed " << gseed << ": " << want.status().ToString();
      cases.push_back({gseed, std::move(*g), std::move(args), std::move(*want)});
    }
    if (cases.empty()) continue;
    GraphBuilder b("fuzz");
    std::vector<NodeId> outs;
    int params = 0;
    for (const Case& c : cases) {
      for (NodeId o : Append(b, c.graph, params)) outs.push_back(o);
      params += static_cast<int>(c.args.size());
    }
    b.SetOutputs(outs);
    auto m = b.Build();
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    merged.push_back(std::move(*m));
    batches.push_back(std::move(cases));
  }
  // Semantics only: -O0 halves the compile time (-O3 exactness is tested in
  // codegen_elementwise_test).
  CodegenOptions opts = testing::FastOptions(dir.path());
  const char* opt = std::getenv("EMBER_FUZZ_OPT");  // e.g. -O3
  opts.extra_flags = {opt && *opt ? opt : "-O0"};
  std::vector<const Graph*> graphs;
  for (const Graph& g : merged) graphs.push_back(&g);
  auto kernels = CompileKernels(graphs, opts, 2);
  // At -O0 nothing is vectorized: transcendentals call scalar libm, like the
  // interpreter, so every output is compared bit for bit. Optimized code
  // calls libmvec's vector variants: outputs computed from them may differ by
  // kVectorMathMaxUlps + twice the spread of the perturbed references
  // (fuzz::WithinPerturbation; VectorMathPerturbedReferences).
  const bool vectorizes = opts.extra_flags[0] != "-O0";
  int tolerant_outputs = 0;
  for (size_t kb = 0; kb < batches.size(); ++kb) {
    const std::vector<Case>& cases = batches[kb];
    ASSERT_TRUE(kernels[kb].ok()) << "graphs from seed " << cases[0].seed << ": "
                                  << kernels[kb].status().ToString();
    std::vector<Literal> args;
    for (const Case& c : cases) {
      for (const Literal& a : c.args) args.push_back(a);
    }
    auto got = testing::RunKernel(*kernels[kb].value(), args,
                                  (kb % 2) ? ThreadParallelFor(2) : ParallelFor());
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    size_t j = 0;
    for (const Case& c : cases) {
      const std::vector<bool> vm = DependsOnVectorMath(c.graph);
      std::vector<std::vector<Literal>> perturbed;
      for (size_t o = 0; o < c.want.size(); ++o) {
        if (vectorizes && vm[c.graph.outputs()[o]] && perturbed.empty())
          perturbed = testing::VectorMathPerturbedReferences(c.graph, c.args, c.seed);
      }
      for (size_t o = 0; o < c.want.size(); ++o, ++j) {
        std::string why;
        const bool tolerant = vectorizes && vm[c.graph.outputs()[o]];
        tolerant_outputs += tolerant;
        std::vector<const Literal*> refs;
        for (const auto& p : perturbed) refs.push_back(&p[o]);
        EXPECT_TRUE(tolerant ? fuzz::WithinPerturbation((*got)[j], c.want[o], refs,
                                                        kVectorMathMaxUlps, &why)
                             : fuzz::BitIdentical((*got)[j], c.want[o], &why))
            << "EMBER_FUZZ_SEED=" << seed << " EMBER_FUZZ_OPT=" << opts.extra_flags[0]
            << ": graph seed " << c.seed << " output " << o << ": " << why << "\n"
            << PrintGraph(c.graph);
      }
      ++compared;
    }
  }
  const size_t num_kernels = kernels.size();
  std::printf(
      "codegen fuzz: %d graphs compared in %d kernels (%s), %d skipped "
      "(unsupported ops)\n",
      compared, static_cast<int>(num_kernels),
      vectorizes ? (std::to_string(tolerant_outputs) + " outputs from vector math within " +
                    std::to_string(kVectorMathMaxUlps) +
                    " ulps + 2x the perturbed spread, the rest bit for bit")
                       .c_str()
                 : "bit for bit",
      skipped);
  for (const auto& [op, count] : skip_reasons)
    std::printf("  skipped for %s: %d\n", op.c_str(), count);
  // Most generated graphs must be in tier 1's op set, or the fuzzer tests little.
  EXPECT_GE(compared, total * 3 / 4);
}

}  // namespace
}  // namespace ember::codegen
