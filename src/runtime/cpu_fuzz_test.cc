// Differential test of the native CPU runtime: random graphs
// (passes/random_graph.h) executed through Compile(Backend::kCpu) and
// compared with the reference interpreter (ember::Evaluate).
//
// Tolerance: 0 ulp (bit for bit; any NaN equals any NaN), except for outputs
// computed from a vector-math op (exp, log, tanh, erf, ...: libmvec, within
// kVectorMathMaxUlps = 4 ulps per op, codegen/cpu/vector_math.h): those may
// differ by 4 ulps + twice the spread of the interpreter's outputs when every
// vector-math value is perturbed by 4 ulps (4 sign patterns; the spread
// measures how the graph amplifies per-op errors: exp(exp(x)), cancellation),
// or equal one of the perturbed outputs (a compare that a few ulps flips). docs/codegen.md
// guarantees interpreter-identical results for everything else except float add/multiply reductions
// over more than 128 elements; random graphs keep every array at <= 64 elements.
//
// To keep compiles few, graphs are merged side by side in batches (disjoint
// parameters and outputs), ordered so that generated nodes form long runs
// (interpreted nodes — argmax, gather, dot, rng, tuples — in as few waves as
// possible). Part 1 compiles each batch with the runtime's own partitioning
// (maximal runs of codegen-supported nodes); part 2 compiles a few batches
// through the fusion pipeline (CompileOptions::optimize: fusion kernels,
// planned buffers, reuse, in place). Kernels are compiled in fast mode
// (-O1), and the on-disk kernel cache makes reruns cheap.
//
// EMBER_FUZZ_GRAPHS (default 500) graphs from EMBER_FUZZ_SEED (default
// 20261130); the seed, batch, graph index and graph text are printed on a
// mismatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <random>

#include "codegen/cpu/codegen_test_util.h"
#include "codegen/cpu/vector_math.h"
#include "ember/eval/interpreter.h"
#include "ember/ir/attributes.h"
#include "ember/ir/builder.h"
#include "ember/ir/text.h"
#include "ember/runtime/executable.h"
#include "passes/buffer_assignment.h"
#include "passes/random_graph.h"

namespace ember {
namespace {

constexpr int kBatch = 25;

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

// Roughly the runtime's codegen-supported set (only used for ordering).
bool Generated(const Graph& g, const Node& n) {
  if (n.shape.is_tuple()) return false;
  for (NodeId o : n.operands) {
    if (g.node(o).shape.is_tuple()) return false;
  }
  if (IsElementwise(n.op)) return true;
  switch (n.op) {
    case OpKind::kConstant:
    case OpKind::kIota:
    case OpKind::kBroadcastInDim:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kSlice:
    case OpKind::kReverse:
    case OpKind::kConcatenate:
    case OpKind::kPad:
    case OpKind::kReduce:
      return true;
    default:
      return false;
  }
}

struct Merged {
  Graph graph;
  std::vector<size_t> first_param, first_output;  // per source graph
};

// Side by side; node order by (wave, graph, id): an interpreted node's wave
// is one past the deepest interpreted node before it.
// alias_rng: also pair outputs with parameters of their shape (each
// parameter at most once, probability 0.6), as donation candidates.
StatusOr<Merged> Merge(const std::vector<Graph>& graphs, std::mt19937_64* alias_rng = nullptr) {
  struct Item {
    int key;
    size_t gi;
    NodeId id;
  };
  std::vector<Item> order;
  Merged m;
  size_t params = 0, outputs = 0;
  for (size_t gi = 0; gi < graphs.size(); ++gi) {
    const Graph& g = graphs[gi];
    m.first_param.push_back(params);
    m.first_output.push_back(outputs);
    params += g.parameters().size();
    outputs += g.outputs().size();
    std::vector<int> u(g.num_nodes(), 0);
    for (const Node& n : g.nodes()) {
      int deepest = 0;
      for (NodeId o : n.operands) deepest = std::max(deepest, u[o]);
      const bool gen = Generated(g, n);
      u[n.id] = deepest + (gen ? 0 : 1);
      const int key = n.op == OpKind::kParameter ? -1 : gen ? 2 * u[n.id] : 2 * u[n.id] - 1;
      order.push_back(Item{key, gi, n.id});
    }
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const Item& a, const Item& b) { return a.key < b.key; });
  GraphBuilder b("merged");
  std::vector<NodeId> param_ids(params, kInvalidNode);
  std::vector<std::vector<NodeId>> map(graphs.size());
  for (size_t gi = 0; gi < graphs.size(); ++gi)
    map[gi].assign(graphs[gi].num_nodes(), kInvalidNode);
  for (const Item& it : order) {
    const Graph& g = graphs[it.gi];
    const Node& n = g.node(it.id);
    if (n.op == OpKind::kParameter) {
      const size_t index = m.first_param[it.gi] + static_cast<size_t>(attr::Index(n));
      map[it.gi][it.id] = b.Parameter(static_cast<int64_t>(index), n.shape);
      param_ids[index] = map[it.gi][it.id];
      continue;
    }
    std::vector<NodeId> ops;
    for (NodeId o : n.operands) ops.push_back(map[it.gi][o]);
    map[it.gi][it.id] = b.AddNodeLike(n, ops);
  }
  std::vector<NodeId> outs;
  for (size_t gi = 0; gi < graphs.size(); ++gi) {
    for (NodeId o : graphs[gi].outputs()) outs.push_back(map[gi][o]);
  }
  b.SetOutputs(outs);
  if (alias_rng) {
    std::vector<bool> used(params, false);
    for (size_t o = 0; o < outs.size(); ++o) {
      for (size_t p = 0; p < params; ++p) {
        if (!used[p] && b.shape(param_ids[p]) == b.shape(outs[o]) &&
            std::bernoulli_distribution(0.6)(*alias_rng)) {
          b.SetAlias(static_cast<int>(o), static_cast<int>(p));
          used[p] = true;
          break;
        }
      }
    }
  }
  EMBER_ASSIGN_OR_RETURN(m.graph, b.Build());
  return m;
}

struct Totals {
  int graphs = 0, kernel_steps = 0, interpret_steps = 0, reused = 0, in_place = 0;
  int tolerant_outputs = 0;  // computed from vector math: WithinPerturbation
  int donated_in_place = 0;  // aliased outputs a kernel wrote into the donated buffer
};

// Runs one batch; failures are reported with the seed of each graph.
void RunBatch(uint64_t base, int first, int count, bool optimize, Totals* totals) {
  std::vector<Graph> graphs;
  std::vector<uint64_t> seeds;
  for (int i = first; i < first + count; ++i) {
    const uint64_t seed = base + static_cast<uint64_t>(i);
    std::mt19937_64 rng(seed);
    auto g = fuzz::GenerateRandomGraph(rng);
    ASSERT_TRUE(g.ok()) << "seed " << seed << ": " << g.status().ToString();
    graphs.push_back(std::move(g).value());
    seeds.push_back(seed);
  }
  std::mt19937_64 alias_rng(base + static_cast<uint64_t>(first));
  auto merged = Merge(graphs, optimize ? &alias_rng : nullptr);
  ASSERT_TRUE(merged.ok()) << "graphs from seed " << seeds[0] << ": " << merged.status().ToString();
  std::mt19937_64 arg_rng(base ^ (static_cast<uint64_t>(first) << 20) ^ (optimize ? 1 : 0));
  std::vector<Literal> args = fuzz::RandomArguments(merged->graph, arg_rng);

  CompileOptions options;
  options.backend = Backend::kCpu;
  options.codegen.fast = true;
  options.optimize = optimize;
  options.verify = true;
  auto exe = Compile(merged->graph, options);
  ASSERT_TRUE(exe.ok()) << "graphs from seed " << seeds[0] << " (optimize=" << optimize
                        << "): " << exe.status().ToString();
  auto got = exe->RunLiterals(args);
  ASSERT_TRUE(got.ok()) << "graphs from seed " << seeds[0] << ": " << got.status().ToString()
                        << "\n"
                        << exe->DebugString();
  for (const Step& s : exe->steps()) {
    totals->kernel_steps += s.kind == StepKind::kKernel;
    totals->interpret_steps += s.kind == StepKind::kInterpret;
  }
  if (exe->assignment()) {
    totals->reused += exe->assignment()->stats.reused;
    totals->in_place += exe->assignment()->stats.in_place;
  }
  if (!merged->graph.aliases().empty()) {
    // Every argument donated: each aliased output is written into its
    // parameter's buffer by its kernel where that is safe, or keeps a buffer
    // of its own; the values equal the run without donation, and a
    // parameter no kernel wrote keeps its value.
    std::vector<BufferRef> bufs;
    for (const Literal& a : args) bufs.push_back(Buffer::FromLiteral(a));
    ExecuteOptions donate;
    donate.donated.assign(bufs.size(), true);
    auto donated = exe->Run(bufs, donate);
    ASSERT_TRUE(donated.ok()) << "graphs from seed " << seeds[0] << ": "
                              << donated.status().ToString() << "\n"
                              << exe->DebugString();
    std::vector<bool> written(bufs.size(), false);
    for (const auto& [o, p] : merged->graph.aliases()) {
      written[p] =
          (*donated)[o] == bufs[p] && merged->graph.outputs()[o] != merged->graph.parameters()[p];
      totals->donated_in_place += written[p];
    }
    for (size_t o = 0; o < got->size(); ++o) {
      std::string why;
      EXPECT_TRUE(fuzz::BitIdentical((*donated)[o]->literal(), (*got)[o], &why))
          << "graphs from seed " << seeds[0] << " output " << o << " (donated): " << why << "\n"
          << exe->DebugString();
    }
    for (size_t p = 0; p < bufs.size(); ++p) {
      std::string why;
      if (!written[p]) {
        EXPECT_TRUE(fuzz::BitIdentical(bufs[p]->literal(), args[p], &why))
            << "graphs from seed " << seeds[0] << " parameter " << p << " (donated, not "
            << "written in place) changed: " << why << "\n"
            << exe->DebugString();
      }
    }
  }
  for (size_t gi = 0; gi < graphs.size(); ++gi) {
    std::vector<Literal> own;
    for (size_t p = 0; p < graphs[gi].parameters().size(); ++p) {
      own.push_back(args[merged->first_param[gi] + p]);
    }
    auto want = Evaluate(graphs[gi], own);
    ASSERT_TRUE(want.ok()) << "seed " << seeds[gi] << ": " << want.status().ToString();
    const std::vector<bool> vm = codegen::DependsOnVectorMath(graphs[gi]);
    std::vector<std::vector<Literal>> perturbed;
    for (size_t o = 0; o < want->size(); ++o) {
      if (vm[graphs[gi].outputs()[o]] && perturbed.empty())
        perturbed = codegen::testing::VectorMathPerturbedReferences(graphs[gi], own, seeds[gi]);
    }
    for (size_t o = 0; o < want->size(); ++o) {
      std::string why;
      const Literal& g_out = (*got)[merged->first_output[gi] + o];
      const bool tolerant = vm[graphs[gi].outputs()[o]];
      totals->tolerant_outputs += tolerant;
      std::vector<const Literal*> refs;
      for (const auto& p : perturbed) refs.push_back(&p[o]);
      EXPECT_TRUE(tolerant ? fuzz::WithinPerturbation(g_out, (*want)[o], refs,
                                                      codegen::kVectorMathMaxUlps, &why)
                           : fuzz::BitIdentical(g_out, (*want)[o], &why))
          << "EMBER_FUZZ_SEED=" << base << ": graph seed " << seeds[gi] << " (index "
          << first + static_cast<int>(gi) << ", optimize=" << optimize << ") output " << o << ": "
          << why << "\n"
          << PrintGraph(graphs[gi]);
    }
    ++totals->graphs;
  }
}

TEST(CpuRuntimeFuzz, RandomGraphsMatchTheInterpreterBitForBit) {
  const uint64_t base = static_cast<uint64_t>(EnvInt("EMBER_FUZZ_SEED", 20261130));
  const int n = static_cast<int>(EnvInt("EMBER_FUZZ_GRAPHS", 500));
  std::cout << "cpu runtime fuzz: " << n << " graphs from EMBER_FUZZ_SEED=" << base << "\n";
  const auto t0 = std::chrono::steady_clock::now();
  Totals runtime_partition;
  for (int first = 0; first < n && !HasFatalFailure(); first += kBatch) {
    RunBatch(base, first, std::min(kBatch, n - first), /*optimize=*/false, &runtime_partition);
  }
  EXPECT_EQ(runtime_partition.graphs, n);
  EXPECT_GT(runtime_partition.kernel_steps, 0);
  // Through the fusion pipeline: the first tenth of the graphs again.
  Totals fused;
  const int n_fused = std::max(1, n / 10);
  for (int first = 0; first < n_fused && !HasFatalFailure(); first += kBatch) {
    RunBatch(base, first, std::min(kBatch, n_fused - first), /*optimize=*/true, &fused);
  }
  EXPECT_EQ(fused.graphs, n_fused);
  EXPECT_GT(fused.donated_in_place, 0);  // the in-place path is exercised
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "cpu runtime fuzz: runtime partitioning: " << runtime_partition.graphs << " graphs, "
            << runtime_partition.kernel_steps << " kernel steps, "
            << runtime_partition.interpret_steps
            << " interpret steps; fusion pipeline: " << fused.graphs << " graphs, "
            << fused.kernel_steps << " kernel steps, " << fused.reused << " reused buffers, "
            << fused.in_place << " in place, " << fused.donated_in_place
            << " donated outputs written in place by their kernel; "
            << runtime_partition.tolerant_outputs + fused.tolerant_outputs
            << " outputs from vector math compared within " << codegen::kVectorMathMaxUlps
            << " ulps + 2x their perturbed-reference spread, the rest bit for bit; " << secs
            << " s\n";
}

}  // namespace
}  // namespace ember
