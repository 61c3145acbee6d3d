// Native kernel steps (Backend::kCpu): results equal the interpreter,
// fallback of unsupported nodes, data errors as OutOfRange naming step and
// node, donation, concurrency, the runtime thread pool, the executable
// cache and EMBER_DEBUG_DIR dumps.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "ember/eval/interpreter.h"
#include "ember/ir/hash.h"
#include "ember/ir/text.h"
#include "ember/runtime/executable.h"
#include "ember/runtime/executable_cache.h"
#include "ember/runtime/thread_pool.h"
#include "ember/version.h"
#include "passes/random_graph.h"

namespace ember {
namespace {

// Kernels with scalar libm (CodegenOptions::vector_math off): these tests
// check steps, buffers, caching and concurrency bit for bit against the
// interpreter, including an argmax of a softmax, whose ties vector math
// (a few ulps, position-dependent) could break differently;
// codegen_vector_math_test and the fuzzers cover vector math.
CompileOptions CpuOptions(bool optimize = false) {
  CompileOptions o;
  o.backend = Backend::kCpu;
  o.codegen.fast = true;
  o.codegen.vector_math = false;
  o.optimize = optimize;
  return o;
}

Graph Parse(const std::string& text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : Graph();
}

void ExpectSame(const std::vector<Literal>& got, const std::vector<Literal>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    std::string why;
    EXPECT_TRUE(fuzz::BitIdentical(got[i], want[i], &why)) << "output " << i << ": " << why;
  }
}

constexpr char kSoftmaxAndArgmax[] = R"(graph main(%p0: f32[8,33], %p1: f32[8,33]) {
  %0 = f32[8,33] parameter(0)
  %1 = f32[8,33] parameter(1)
  %2 = f32[8,33] multiply(%0, %1)
  %3 = f32[8] reduce(%2), dimensions={1}, to_apply=maximum
  %4 = f32[8,33] broadcast-in-dim(%3), dimensions={0}
  %5 = f32[8,33] subtract(%2, %4)
  %6 = f32[8,33] exponential(%5)
  %7 = f32[8] reduce(%6), dimensions={1}, to_apply=add
  %8 = f32[8,33] broadcast-in-dim(%7), dimensions={0}
  %9 = f32[8,33] divide(%6, %8)
  %10 = s32[8] argmax(%9), dimension=1
  %11 = s32[8] add(%10, %10)
  ROOT (%9, %11)
})";

TEST(KernelSteps, MixedGraphMatchesInterpreterWithAndWithoutFusionPipeline) {
  Graph g = Parse(kSoftmaxAndArgmax);
  std::mt19937_64 rng(7);
  auto args = fuzz::RandomArguments(g, rng);
  auto want = Evaluate(g, args);
  ASSERT_TRUE(want.ok());
  for (bool optimize : {false, true}) {
    auto exe = Compile(g, CpuOptions(optimize));
    ASSERT_TRUE(exe.ok()) << exe.status().ToString();
    int kernels = 0, interpreted = 0;
    for (const Step& s : exe->steps()) {
      kernels += s.kind == StepKind::kKernel;
      interpreted += s.kind == StepKind::kInterpret;
    }
    EXPECT_GE(kernels, 2) << exe->DebugString();
    EXPECT_GE(interpreted, 1) << exe->DebugString();  // argmax is not generated
    auto got = exe->RunLiterals(args);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSame(*got, *want);
  }
}

// Horizontal fusion: per-tensor pieces of an optimizer-like update (two
// independent elementwise fusions and two reductions over different
// tensors) run as one kernel; the fusion reading merged results (%7..%10),
// and the softmax row fusion, get kernels of their own. Values equal the
// interpreter's bit for bit either way.
TEST(KernelSteps, IndependentFusionsShareOneKernel) {
  Graph g = Parse(R"(graph main(%p0: f32[64,32], %p1: f32[64], %p2: f32[8,33]) {
  %0 = f32[64,32] parameter(0)
  %1 = f32[64] parameter(1)
  %2 = f32[8,33] parameter(2)
  %3 = f32[64,32] multiply(%0, %0)
  %4 = f32[64] multiply(%1, %1)
  %5 = f32[] reduce(%0), dimensions={0,1}, to_apply=add
  %6 = f32[] reduce(%1), dimensions={0}, to_apply=maximum
  %7 = f32[] add(%5, %6)
  %8 = f32[] sqrt(%7)
  %9 = f32[64] broadcast-in-dim(%8), dimensions={}
  %10 = f32[64] divide(%1, %9)
  %11 = f32[8] reduce(%2), dimensions={1}, to_apply=maximum
  %12 = f32[8,33] broadcast-in-dim(%11), dimensions={0}
  %13 = f32[8,33] subtract(%2, %12)
  %14 = f32[8,33] exponential(%13)
  %15 = f32[8] reduce(%14), dimensions={1}, to_apply=add
  %16 = f32[8,33] broadcast-in-dim(%15), dimensions={0}
  %17 = f32[8,33] divide(%14, %16)
  ROOT (%3, %4, %5, %6, %10, %17)
})");
  std::mt19937_64 rng(11);
  auto args = fuzz::RandomArguments(g, rng);
  auto want = Evaluate(g, args);
  ASSERT_TRUE(want.ok());
  int kernels_merged = 0, kernels_single = 0;
  for (bool merge : {true, false}) {
    CompileOptions o = CpuOptions(/*optimize=*/true);
    o.merge_fusions = merge;
    auto exe = Compile(g, o);
    ASSERT_TRUE(exe.ok()) << exe.status().ToString();
    int kernels = 0, interpreted = 0, widest = 0;
    for (const Step& s : exe->steps()) {
      kernels += s.kind == StepKind::kKernel;
      interpreted += s.kind == StepKind::kInterpret;
      if (s.kind == StepKind::kKernel) widest = std::max<int>(widest, s.writes.size());
    }
    EXPECT_EQ(interpreted, 0);
    (merge ? kernels_merged : kernels_single) = kernels;
    if (merge) EXPECT_EQ(widest, 4) << "the squares and both reductions share one kernel";
    auto got = exe->RunLiterals(args);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSame(*got, *want);
  }
  EXPECT_LT(kernels_merged, kernels_single);
  // Unmerged: %3, %4, the two reductions, the norm (sqrt(%5 + %6), then
  // the division: the sqrt is not recomputed per element), the softmax.
  EXPECT_EQ(kernels_single, 7);
  // Merged: {%3, %4, %5, %6}, then the norm's two, then the softmax (alone).
  EXPECT_EQ(kernels_merged, 4);

  // A data error inside a merged kernel is still OutOfRange, naming the
  // fusion whose division failed; the other results are not returned.
  Graph d = Parse(R"(graph main(%p0: s32[4], %p1: s32[4]) {
  %0 = s32[4] parameter(0)
  %1 = s32[4] parameter(1)
  %2 = s32[4] add(%0, %0)
  %3 = s32[4] divide(%0, %1)
  ROOT (%2, %3)
})");
  auto exe = Compile(d, CpuOptions(/*optimize=*/true));
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  int kernels = 0;
  for (const Step& s : exe->steps()) kernels += s.kind == StepKind::kKernel;
  EXPECT_EQ(kernels, 1);
  auto r = exe->RunLiterals({Literal::FromInts(Shape(DType::kS32, {4}), {1, 2, 3, 4}),
                             Literal::FromInts(Shape(DType::kS32, {4}), {1, 0, 1, 1})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("integer division by zero"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("fusion %"), std::string::npos) << r.status().message();
}

// Levels: per-tensor |g| then sums of it, interleaved in node order as
// clip_grad_norm_ emits them, become one kernel of |g|s and one of sums; a
// dot-general reading a level-1 result runs after both, and a fusion after
// the dot reading it starts afresh.
TEST(KernelSteps, MergedFusionsGoByLevel) {
  Graph g = Parse(R"(graph main(%p0: f32[16,8], %p1: f32[8], %p2: f32[8,4]) {
  %0 = f32[16,8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8,4] parameter(2)
  %3 = f32[16,8] tanh(%0)
  %4 = f32[] reduce(%3), dimensions={0,1}, to_apply=add
  %5 = f32[] reduce(%3), dimensions={0,1}, to_apply=maximum
  %6 = f32[8] tanh(%1)
  %7 = f32[] reduce(%6), dimensions={0}, to_apply=add
  %8 = f32[] reduce(%6), dimensions={0}, to_apply=maximum
  %9 = f32[16,8] exponential(%3)
  %10 = f32[16,4] dot-general(%9, %2), lhs_batch_dims={}, lhs_contracting_dims={1}, rhs_batch_dims={}, rhs_contracting_dims={0}
  %11 = f32[16,4] negate(%10)
  %12 = f32[8] negate(%1)
  ROOT (%4, %5, %7, %8, %11, %12)
})");
  std::mt19937_64 rng(5);
  auto args = fuzz::RandomArguments(g, rng);
  auto want = Evaluate(g, args);
  ASSERT_TRUE(want.ok());
  auto exe = Compile(g, CpuOptions(/*optimize=*/true));
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  std::vector<size_t> widths;
  std::string kinds;
  for (const Step& s : exe->steps()) {
    if (s.kind == StepKind::kKernel) widths.push_back(s.writes.size());
    kinds += s.kind == StepKind::kKernel ? "K" : s.kind == StepKind::kExtern ? "E" : "I";
  }
  // Fusions: tanh(x), sum, max, tanh(y), sum, max, exp(tanh(x)) (read by the
  // dot), and the two negates (tanh is expensive: materialized, not
  // recomputed by its readers). Level 0: both tanh, and the exp, which reads tanh(x) at
  // the element it computes (ReadsAtItsIndex: computed in tanh(x)'s loop); level 1: the
  // four reductions; the dot reads the exp, so both sets run before it; then the
  // negates (%11 reads the dot) share one kernel.
  EXPECT_EQ(kinds, "KKEK");
  EXPECT_EQ(widths, (std::vector<size_t>{3, 4, 2}));
  auto got = exe->RunLiterals(args);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSame(*got, *want);
  CompileOptions single = CpuOptions(/*optimize=*/true);
  single.merge_fusions = false;
  auto exe1 = Compile(g, single);
  ASSERT_TRUE(exe1.ok());
  size_t unmerged = 0;
  for (const Step& s : exe1->steps()) unmerged += s.kind == StepKind::kKernel;
  EXPECT_EQ(unmerged, 9u);
}

TEST(KernelSteps, IntegerDivisionByZeroIsOutOfRangeNamingStepAndNode) {
  Graph g = Parse(R"(graph main(%p0: s32[4], %p1: s32[4]) {
  %0 = s32[4] parameter(0)
  %1 = s32[4] parameter(1)
  %2 = s32[4] negate(%1)
  %3 = s32[4] divide(%0, %2)
  ROOT (%3)
})");
  auto exe = Compile(g, CpuOptions());
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  ASSERT_EQ(exe->steps().size(), 1u);
  ASSERT_EQ(exe->steps()[0].kind, StepKind::kKernel);
  auto r = exe->RunLiterals({Literal::FromInts(Shape(DType::kS32, {4}), {1, 2, 3, 4}),
                             Literal::FromInts(Shape(DType::kS32, {4}), {1, 0, 1, 1})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("step 0 (kernel ember_fused_"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("divide %3: integer division by zero"), std::string::npos)
      << r.status().message();
  // Through the fusion pipeline: the step names the fusion node.
  auto fused = Compile(g, CpuOptions(true));
  ASSERT_TRUE(fused.ok());
  r = fused->RunLiterals({Literal::FromInts(Shape(DType::kS32, {4}), {1, 2, 3, 4}),
                          Literal::FromInts(Shape(DType::kS32, {4}), {0, 0, 0, 0})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("integer division by zero"), std::string::npos);
  EXPECT_NE(r.status().message().find("step "), std::string::npos);
}

TEST(KernelSteps, UnsupportedNodesStayInterpretedAndAreLogged) {
  Graph g = Parse(R"(graph main(%p0: f32[4]) {
  %0 = f32[4] parameter(0)
  %1 = f32[4] sine(%0)
  %2 = (f32[4], f32[4]) tuple(%1, %0)
  %3 = f32[4] get-tuple-element(%2), index=0
  ROOT (%3)
})");
  setenv("EMBER_LOG", "runtime", 1);
  testing::internal::CaptureStderr();
  auto exe = Compile(g, CpuOptions());
  const std::string log = testing::internal::GetCapturedStderr();
  unsetenv("EMBER_LOG");
  EXPECT_NE(log.find("runtime: nodes %2..%3 stay interpreted"), std::string::npos) << log;
  EXPECT_NE(log.find("get-tuple-element"), std::string::npos) << log;
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  ASSERT_EQ(exe->steps().size(), 2u) << exe->DebugString();
  EXPECT_EQ(exe->steps()[0].kind, StepKind::kKernel);
  EXPECT_EQ(exe->steps()[1].kind, StepKind::kInterpret);
  std::mt19937_64 rng(1);
  auto args = fuzz::RandomArguments(g, rng);
  ExpectSame(exe->RunLiterals(args).value(), Evaluate(g, args).value());
}

// Random arguments of `g` from `seed`, each also as a buffer of its own, and
// the interpreter's outputs for them (none when the interpreter fails).
struct DonationCase {
  std::vector<Literal> args, want;
  std::vector<BufferRef> bufs;
};
DonationCase MakeDonationCase(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  DonationCase c;
  c.args = fuzz::RandomArguments(g, rng);
  auto want = Evaluate(g, c.args);
  if (want.ok()) c.want = std::move(want).value();
  for (const Literal& a : c.args) c.bufs.push_back(Buffer::FromLiteral(a));
  return c;
}

std::vector<Literal> LiteralsOf(const std::vector<BufferRef>& out) {
  std::vector<Literal> l;
  for (const BufferRef& b : out) l.push_back(b->literal());
  return l;
}

void ExpectUnchanged(const BufferRef& buf, const Literal& was) {
  std::string why;
  EXPECT_TRUE(fuzz::BitIdentical(buf->literal(), was, &why)) << why;
}

TEST(KernelSteps, DonationWithKernelSteps) {
  Graph g = Parse(R"(graph main(%p0: f32[16], %p1: f32[16]) {
  %0 = f32[16] parameter(0)
  %1 = f32[16] parameter(1)
  %2 = f32[16] multiply(%0, %1)
  %3 = f32[16] add(%2, %0)
  ROOT (%3, %2)
  ALIAS {0: 0}
})");
  auto exe = Compile(g, CpuOptions(true));
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  DonationCase c = MakeDonationCase(g, 3);
  ExecuteOptions donate;
  donate.donated = {true, false};
  auto out = exe->Run(c.bufs, donate);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  // %3's kernel is %0's last reader and reads it only elementwise into %3.
  EXPECT_EQ((*out)[0], c.bufs[0]) << exe->DebugString();  // written into the donated buffer
  ExpectSame(LiteralsOf(*out), c.want);
  ExpectUnchanged(c.bufs[1], c.args[1]);
}

// One kernel computing two outputs from the donated parameter. Outputs of one shape are
// computed in one loop (codegen::OutputLoops), each element of both in one iteration, so
// the aliased output overwrites the parameter in place. A sine and a cosine of it are
// computed in loops of their own (GCC would make the pair one scalar sincos call): the
// second loop reads the parameter after the first has run, so the aliased output keeps a
// buffer of its own, nothing is copied and the parameter is left as it was.
TEST(KernelSteps, ParameterReadForTwoOutputsOfOneKernel) {
  for (const bool one_loop : {true, false}) {
    Graph g = Parse(one_loop ? R"(graph main(%p0: f32[16], %p1: f32[16]) {
  %0 = f32[16] parameter(0)
  %1 = f32[16] parameter(1)
  %2 = f32[16] multiply(%0, %1)
  %3 = f32[16] add(%0, %1)
  ROOT (%2, %3)
  ALIAS {0: 0}
})"
                             : R"(graph main(%p0: f32[16], %p1: f32[16]) {
  %0 = f32[16] parameter(0)
  %1 = f32[16] parameter(1)
  %2 = f32[16] sine(%0)
  %3 = f32[16] cosine(%0)
  ROOT (%2, %3)
  ALIAS {0: 0}
})");
    auto exe = Compile(g, CpuOptions(true));
    ASSERT_TRUE(exe.ok()) << exe.status().ToString();
    ASSERT_EQ(exe->steps().size(), 1u) << exe->DebugString();
    EXPECT_EQ(exe->DebugString().find("into parameter") != std::string::npos, one_loop)
        << exe->DebugString();
    DonationCase c = MakeDonationCase(g, 4);
    ExecuteOptions donate;
    donate.donated = {true, false};
    auto out = exe->Run(c.bufs, donate);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ((*out)[0] == c.bufs[0], one_loop);
    ExpectSame(LiteralsOf(*out), c.want);
    if (!one_loop) ExpectUnchanged(c.bufs[0], c.args[0]);
  }
}

// Each parameter written in place by the kernel step that computes its new
// value, in a step of an optimizer update (m_new = m * g, w_new = w - m_new:
// m's last reader is m_new's kernel, w's is w_new's), merged kernels allowed
// or not.
TEST(KernelSteps, DonatedOutputIsWrittenInPlaceByItsKernel) {
  Graph g = Parse(R"(graph main(%p0: f32[64], %p1: f32[64], %p2: f32[64]) {
  %0 = f32[64] parameter(0)
  %1 = f32[64] parameter(1)
  %2 = f32[64] parameter(2)
  %3 = f32[64] multiply(%1, %2)
  %4 = f32[64] subtract(%0, %3)
  ROOT (%4, %3)
  ALIAS {0: 0, 1: 1}
})");
  for (bool merge : {true, false}) {
    CompileOptions o = CpuOptions(true);
    o.merge_fusions = merge;
    auto exe = Compile(g, o);
    ASSERT_TRUE(exe.ok()) << exe.status().ToString();
    const std::string text = exe->DebugString();
    EXPECT_NE(text.find("into parameter(0) if donated"), std::string::npos) << text;
    EXPECT_NE(text.find("into parameter(1) if donated"), std::string::npos) << text;
    for (const Step& st : exe->steps()) EXPECT_NE(st.kind, StepKind::kCopy) << text;
    for (bool donate : {true, false}) {
      DonationCase c = MakeDonationCase(g, 5);  // w, m, g
      const void* w_data = c.bufs[0]->data();
      ExecuteOptions opts;
      if (donate) opts.donated = {true, true, false};
      auto out = exe->Run(c.bufs, opts);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      ExpectSame(LiteralsOf(*out), c.want);
      EXPECT_EQ((*out)[0] == c.bufs[0], donate) << merge;
      EXPECT_EQ((*out)[0]->data() == w_data, donate) << merge;
      EXPECT_EQ((*out)[1] == c.bufs[1], donate) << merge;
      ExpectUnchanged(c.bufs[2], c.args[2]);
      if (!donate) {
        ExpectUnchanged(c.bufs[0], c.args[0]);
        ExpectUnchanged(c.bufs[1], c.args[1]);
      }
    }
  }
}

// A step that can fail after the value's kernel (here an integer division by
// zero) keeps the donated parameter out of reach: the failing run leaves it
// intact, as a run without donation would.
TEST(KernelSteps, NoInPlaceWriteWhenALaterStepCanFail) {
  Graph g = Parse(R"(graph main(%p0: f32[16], %p1: s32[16], %p2: s32[16]) {
  %0 = f32[16] parameter(0)
  %1 = s32[16] parameter(1)
  %2 = s32[16] parameter(2)
  %3 = f32[16] add(%0, %0)
  %4 = s32[16] divide(%1, %2)
  ROOT (%3, %4)
  ALIAS {0: 0}
})");
  auto exe = Compile(g, CpuOptions(true));
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  const std::string text = exe->DebugString();
  EXPECT_EQ(text.find("into parameter"), std::string::npos) << text;
  DonationCase c = MakeDonationCase(g, 6);
  c.bufs[2] = Buffer::FromLiteral(Literal(c.args[2].shape()));  // zeros: every division fails
  ExecuteOptions opts;
  opts.donated = {true, false, false};
  auto out = exe->Run(c.bufs, opts);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kOutOfRange) << out.status().ToString();
  ExpectUnchanged(c.bufs[0], c.args[0]);
}

TEST(KernelSteps, ConcurrentRunsShareOneExecutable) {
  Graph g = Parse(kSoftmaxAndArgmax);
  auto exe = Compile(g, CpuOptions(true));
  ASSERT_TRUE(exe.ok());
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      for (int i = 0; i < 10; ++i) {
        auto args = fuzz::RandomArguments(g, rng);
        auto got = exe->RunLiterals(args);
        auto want = Evaluate(g, args);
        if (!got.ok() || !want.ok()) {
          ++bad;
          continue;
        }
        for (size_t k = 0; k < got->size(); ++k) bad += !fuzz::BitIdentical((*got)[k], (*want)[k]);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(ThreadPool, CoversTheRangeOnceAndNests) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.num_threads(), 3);
  std::vector<std::atomic<int>> hits(10007);
  for (auto& h : hits) h = 0;
  std::atomic<int> chunks{0};
  pool.ParallelFor(0, 10007, 100, [&](int64_t b, int64_t e) {
    ++chunks;
    for (int64_t i = b; i < e; ++i) ++hits[i];
    // Nested: runs serially on this thread, no deadlock.
    pool.ParallelFor(0, 10, 1, [&](int64_t, int64_t) {});
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_LE(chunks.load(), 3);
  EXPECT_GE(chunks.load(), 2);
  // Small ranges (below the grain) run as one chunk; empty ranges not at all.
  chunks = 0;
  pool.ParallelFor(5, 9, 100, [&](int64_t b, int64_t e) {
    ++chunks;
    EXPECT_EQ(b, 5);
    EXPECT_EQ(e, 9);
  });
  pool.ParallelFor(3, 3, 1, [&](int64_t, int64_t) { ++chunks; });
  EXPECT_EQ(chunks.load(), 1);
  // Calls from several threads at once.
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        pool.ParallelFor(0, 1000, 10, [&](int64_t b, int64_t e) { sum += e - b; });
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(sum.load(), 4 * 50 * 1000);
}

TEST(ThreadPool, RuntimeParallelForCanBeReplaced) {
  std::atomic<int> calls{0};
  SetRuntimeParallelFor(
      [&](int64_t b, int64_t e, int64_t, const std::function<void(int64_t, int64_t)>& body) {
        ++calls;
        body(b, e);
      });
  Graph g = Parse(R"(graph main(%p0: f32[64]) {
  %0 = f32[64] parameter(0)
  %1 = f32[64] exponential(%0)
  ROOT (%1)
})");
  auto exe = Compile(g, CpuOptions());
  ASSERT_TRUE(exe.ok());
  std::mt19937_64 rng(5);
  auto args = fuzz::RandomArguments(g, rng);
  ExpectSame(exe->RunLiterals(args).value(), Evaluate(g, args).value());
  SetRuntimeParallelFor(nullptr);
  EXPECT_GE(calls.load(), 1);
  EXPECT_GE(DefaultNumThreads(), 1);
}

TEST(ExecutableCache, HitsComparesTextAndCounts) {
  ExecutableCache cache;
  Graph g = Parse(kSoftmaxAndArgmax);
  bool hit = true;
  auto a = cache.GetOrCompile(g, CpuOptions(), &hit);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_FALSE(hit);
  auto b = cache.GetOrCompile(Parse(kSoftmaxAndArgmax), CpuOptions(), &hit);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(hit);
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_EQ(cache.stats().misses, 1);
  // Other options: another entry.
  auto c = cache.GetOrCompile(g, CompileOptions{});
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->get(), c->get());
  EXPECT_EQ(cache.stats().misses, 2);
  // A forced hash collision is never trusted: the text differs, so it compiles.
  cache.SetKeyFunctionForTesting([](const Graph&, const CompileOptions&) { return "same"; });
  Graph g2 = Parse(R"(graph main(%p0: f32[4]) {
  %0 = f32[4] parameter(0)
  %1 = f32[4] negate(%0)
  ROOT (%1)
})");
  auto d = cache.GetOrCompile(g, CpuOptions());
  auto e = cache.GetOrCompile(g2, CpuOptions());
  ASSERT_TRUE(d.ok() && e.ok());
  EXPECT_NE(d->get(), e->get());
  EXPECT_EQ(&(*e)->graph() == &(*d)->graph(), false);
  EXPECT_EQ(cache.stats().collisions, 1);
  auto f = cache.GetOrCompile(g2, CpuOptions());
  EXPECT_EQ(f->get(), e->get());
  EXPECT_EQ(cache.stats().hits, 2);
  // Compile errors are returned, not cached.
  Graph bad = Parse(R"(graph main(%p0: f32[4]) {
  %0 = f32[4] parameter(0)
  %1 = f32[4] custom-call(%0), call_target_name="no.such.kernel"
  ROOT (%1)
})");
  cache.SetKeyFunctionForTesting(nullptr);
  EXPECT_EQ(cache.GetOrCompile(bad, CpuOptions()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cache.GetOrCompile(bad, CpuOptions()).status().code(), StatusCode::kNotFound);
}

// The folder need not exist: it is created with its parents (CONTRIBUTING.md's bug
// report recipe names a fresh /tmp folder).
TEST(DebugDir, WritesBeforeAfterAndKernelSources) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("ember-debug-" + std::to_string(getpid()));
  const fs::path dir = root / "nested" / "dumps";
  fs::remove_all(root);
  setenv("EMBER_DEBUG_DIR", dir.c_str(), 1);
  Graph g = Parse(kSoftmaxAndArgmax);
  auto exe = Compile(g, CpuOptions(true));
  unsetenv("EMBER_DEBUG_DIR");
  ASSERT_TRUE(exe.ok());
  const std::string h = HashGraph(g).ToString();
  ASSERT_TRUE(fs::exists(dir / (h + ".before.ir")));
  ASSERT_TRUE(fs::exists(dir / (h + ".after.ir")));
  std::ifstream before(dir / (h + ".before.ir"));
  std::string text((std::istreambuf_iterator<char>(before)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, PrintGraph(g) + "// ember IR text version " + std::to_string(kIrTextVersion) +
                      " (ember " + Version() + ")\n");
  int sources = 0, stray = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(h + ".ember_fused_", 0) == 0 && e.path().extension() == ".cc") ++sources;
    if (name.find(".tmp.") != std::string::npos) ++stray;
  }
  int kernels = 0;
  for (const Step& s : exe->steps()) kernels += s.kind == StepKind::kKernel;
  EXPECT_EQ(sources, kernels);
  EXPECT_EQ(stray, 0);
  fs::remove_all(root);
}

// The memory plan against what a run allocates: exp(x) has three kernel readers, so
// it is a planned buffer (allocated once at the run's start); the measured peak of a
// run above its arguments holds the planned buffers and the outputs, and stays within
// planned + the plan's peak.
TEST(KernelSteps, MemoryPlanMatchesWhatARunAllocates) {
  Graph g = Parse(R"(graph main(%p0: f32[256,256]) {
  %0 = f32[256,256] parameter(0)
  %1 = f32[256,256] exponential(%0)
  %2 = f32[256] reduce(%1), dimensions={0}, to_apply=add
  %3 = f32[256] reduce(%1), dimensions={1}, to_apply=maximum
  %4 = f32[256,256] broadcast-in-dim(%2), dimensions={1}
  %5 = f32[256,256] multiply(%4, %1)
  ROOT (%5, %3)
})");
  auto exe = Compile(g, CpuOptions(/*optimize=*/true));
  ASSERT_TRUE(exe.ok()) << exe.status().ToString();
  const MemoryPlan plan = exe->memory_plan();
  const int64_t e_bytes = 256 * 256 * 4, out_bytes = 256 * 256 * 4 + 256 * 4;
  EXPECT_GE(plan.planned_bytes, e_bytes) << exe->AssignmentDebugString();
  EXPECT_GE(plan.planned_buffers, 1);
  EXPECT_GE(plan.peak_bytes, e_bytes + out_bytes) << exe->AssignmentDebugString();
  std::mt19937_64 rng(3);
  std::vector<BufferRef> args = {Buffer::FromLiteral(fuzz::RandomArguments(g, rng)[0])};
  const int64_t before = GetBufferStats().bytes_in_use;
  ResetPeakBufferBytes();
  auto out = exe->Run(args);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const int64_t peak = GetBufferStats().peak_bytes_in_use - before;
  EXPECT_GE(peak, plan.planned_bytes + out_bytes);
  EXPECT_LE(peak, plan.planned_bytes + plan.peak_bytes);
  EXPECT_EQ(GetBufferStats().bytes_in_use - before, out_bytes);  // planned buffers freed
  // The interpreter backend plans nothing.
  CompileOptions interp;
  auto ie = Compile(g, interp);
  ASSERT_TRUE(ie.ok());
  EXPECT_EQ(ie->memory_plan().peak_bytes, 0);
  EXPECT_EQ(ie->memory_plan().planned_bytes, 0);
}

}  // namespace
}  // namespace ember
