// Buffer assignment: hand-checked plans on text-IR graphs compiled for the
// CPU backend (fusion chains, so kernels hand values to kernels), direct
// AssignBuffers cases, and results equal to the interpreter.
#include "passes/buffer_assignment.h"

#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include "ember/eval/interpreter.h"
#include "ember/ir/builder.h"
#include "ember/ir/text.h"
#include "ember/runtime/executable.h"
#include "passes/random_graph.h"

namespace ember {
namespace {

// Scalar libm in kernels (CodegenOptions::vector_math off): these tests
// check buffer planning bit for bit against the interpreter; vector math's
// accuracy is codegen_vector_math_test's and the fuzzers'.
// Each fusion is a kernel step of its own (no horizontal fusion), so the steps are the
// graphs' fusions as written.
CompileOptions CpuOptions() {
  CompileOptions o;
  o.backend = Backend::kCpu;
  o.codegen.fast = true;
  o.codegen.vector_math = false;
  o.merge_fusions = false;
  return o;
}

StatusOr<Executable> CompileText(const std::string& text) {
  EMBER_ASSIGN_OR_RETURN(Graph g, ParseGraph(text));
  return Compile(g, CpuOptions());
}

void ExpectMatchesInterpreter(const Executable& exe, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Literal> args = fuzz::RandomArguments(exe.graph(), rng);
  auto want = Evaluate(exe.graph(), args);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  for (int run = 0; run < 2; ++run) {  // planned buffers are fresh per run
    auto got = exe.RunLiterals(args);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), want->size());
    for (size_t i = 0; i < got->size(); ++i) {
      std::string why;
      EXPECT_TRUE(fuzz::BitIdentical((*got)[i], (*want)[i], &why)) << "output " << i << ": " << why;
    }
  }
}

// neg -> (x * p, in place) -> row-sum [4,64]->[64] -> broadcast back -> + p (output).
constexpr char kChain[] = R"(graph main(%p0: f32[256]) {
  %0 = f32[256] parameter(0)
  %1 = f32[256] fusion(%0), calls=f_neg, kind=loop
  %2 = f32[256] fusion(%1, %0), calls=f_mul, kind=loop
  %3 = f32[64] fusion(%2), calls=f_sum, kind=input
  %4 = f32[256] fusion(%3), calls=f_bcast, kind=loop
  %5 = f32[256] fusion(%4, %0), calls=f_add, kind=loop
  ROOT (%5)
}

graph f_neg(%p0: f32[256]) {
  %0 = f32[256] parameter(0)
  %1 = f32[256] negate(%0)
  ROOT (%1)
}

graph f_mul(%p0: f32[256], %p1: f32[256]) {
  %0 = f32[256] parameter(0)
  %1 = f32[256] parameter(1)
  %2 = f32[256] multiply(%0, %1)
  ROOT (%2)
}

graph f_sum(%p0: f32[256]) {
  %0 = f32[256] parameter(0)
  %1 = f32[4,64] reshape(%0)
  %2 = f32[64] reduce(%1), dimensions={0}, to_apply=add
  ROOT (%2)
}

graph f_bcast(%p0: f32[64]) {
  %0 = f32[64] parameter(0)
  %1 = f32[4,64] broadcast-in-dim(%0), dimensions={1}
  %2 = f32[256] reshape(%1)
  ROOT (%2)
}

graph f_add(%p0: f32[256], %p1: f32[256]) {
  %0 = f32[256] parameter(0)
  %1 = f32[256] parameter(1)
  %2 = f32[256] add(%0, %1)
  ROOT (%2)
}
)";

TEST(BufferAssignment, FusionChainPeakReuseInPlace) {
  auto compiled = CompileText(kChain);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const Executable& exe = *compiled;
  ASSERT_EQ(exe.steps().size(), 5u) << exe.DebugString();
  for (const Step& s : exe.steps()) ASSERT_EQ(s.kind, StepKind::kKernel) << exe.DebugString();
  const BufferAssignment* a = exe.assignment();
  ASSERT_NE(a, nullptr);
  // step 0: %1 -> b0 (1024 B, new: its input is a parameter)
  // step 1: %2 -> b0 in place (%1 dies there, elementwise, same shape)
  // step 2: %3 -> b1 (256 B, new)
  // step 3: %4 -> b0 reused (%2 died at step 2)
  // step 4: %5 -> b2 (1024 B, output: never shared)
  // live: steps 0-1 {b0}=1024, 2-3 {b0,b1}=1280, 4 {b0,b2}=2048.
  EXPECT_EQ(a->stats.in_place, 1) << a->DebugString();
  EXPECT_EQ(a->stats.reused, 1) << a->DebugString();
  EXPECT_EQ(a->stats.num_buffers, 3) << a->DebugString();
  EXPECT_EQ(a->stats.total_bytes, 1024 + 256 + 1024) << a->DebugString();
  EXPECT_EQ(a->stats.peak_bytes, 2048) << a->DebugString();
  const std::vector<int>& bof = exe.planned_buffer_of();
  const auto& st = exe.steps();
  EXPECT_EQ(bof[st[0].writes[0]], bof[st[1].writes[0]]);
  EXPECT_EQ(bof[st[0].writes[0]], bof[st[3].writes[0]]);
  EXPECT_NE(bof[st[2].writes[0]], bof[st[0].writes[0]]);
  EXPECT_EQ(bof[st[4].writes[0]], -1);  // the output is a caller-visible Buffer
  EXPECT_NE(a->DebugString().find("[in-place]"), std::string::npos);
  ExpectMatchesInterpreter(exe, 1);
}

constexpr char kOutputNotReused[] = R"(graph main(%p0: f32[256]) {
  %0 = f32[256] parameter(0)
  %1 = f32[256] fusion(%0), calls=f_neg, kind=loop
  %2 = f32[] fusion(%1), calls=f_total, kind=input
  %3 = f32[256] fusion(%2), calls=f_splat, kind=loop
  %4 = f32[256] fusion(%3, %0), calls=f_sub, kind=loop
  ROOT (%3, %4)
}

graph f_neg(%p0: f32[256]) {
  %0 = f32[256] parameter(0)
  %1 = f32[256] negate(%0)
  ROOT (%1)
}

graph f_total(%p0: f32[256]) {
  %0 = f32[256] parameter(0)
  %1 = f32[] reduce(%0), dimensions={0}, to_apply=maximum
  ROOT (%1)
}

graph f_splat(%p0: f32[]) {
  %0 = f32[] parameter(0)
  %1 = f32[256] broadcast-in-dim(%0), dimensions={}
  ROOT (%1)
}

graph f_sub(%p0: f32[256], %p1: f32[256]) {
  %0 = f32[256] parameter(0)
  %1 = f32[256] parameter(1)
  %2 = f32[256] subtract(%0, %1)
  ROOT (%2)
}
)";

TEST(BufferAssignment, OutputsAndParametersAreNeverShared) {
  auto compiled = CompileText(kOutputNotReused);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const Executable& exe = *compiled;
  ASSERT_EQ(exe.steps().size(), 4u) << exe.DebugString();
  const BufferAssignment* a = exe.assignment();
  ASSERT_NE(a, nullptr);
  // %1 -> b0 (1024), %2 -> b1 (4), %3 -> b2 (output; b0 is dead but an output
  // never takes a shared buffer), %4 -> b3 (output; %3 is an output, so not
  // in place either). Parameters get no buffer.
  EXPECT_EQ(a->stats.reused, 0) << a->DebugString();
  EXPECT_EQ(a->stats.in_place, 0) << a->DebugString();
  EXPECT_EQ(a->stats.num_buffers, 4) << a->DebugString();
  // live: step 0 {b0}=1024, step 1 {b0,b1}=1028, step 2 {b1,b2}=1028,
  // steps 3.. {b2,b3}=2048.
  EXPECT_EQ(a->stats.peak_bytes, 2048) << a->DebugString();
  EXPECT_EQ(a->buffer_of[0], -1);  // parameter
  std::set<int> used;
  for (size_t v = 0; v < a->values.size(); ++v) {
    if (a->values[v].output) {
      EXPECT_FALSE(a->value_reused[v]);
      EXPECT_FALSE(a->value_in_place[v]);
      EXPECT_TRUE(used.insert(a->buffer_of[v]).second);
    }
  }
  ExpectMatchesInterpreter(exe, 2);
}

// Runtime partitioning without fusions: one kernel run, then an interpreted
// argmax (not generated), then a kernel; values crossing into interpreter
// steps are Literal buffers, not planned storage.
TEST(BufferAssignment, InterpreterBoundariesAreNotPlanned) {
  auto compiled = CompileText(R"(graph main(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] exponential(%0)
  %2 = s32[4] argmax(%1), dimension=1
  %3 = f32[4] convert(%2)
  ROOT (%3)
})");
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const Executable& exe = *compiled;
  ASSERT_EQ(exe.steps().size(), 3u) << exe.DebugString();
  EXPECT_EQ(exe.steps()[0].kind, StepKind::kKernel);
  EXPECT_EQ(exe.steps()[1].kind, StepKind::kInterpret);
  EXPECT_EQ(exe.steps()[2].kind, StepKind::kKernel);
  for (int b : exe.planned_buffer_of()) EXPECT_EQ(b, -1) << exe.AssignmentDebugString();
  ExpectMatchesInterpreter(exe, 3);
}

TEST(BufferAssignment, DirectInPlaceNeedsTheInputToDie) {
  // v0 parameter; step0: v1 = f(v0); step1: v2 = g(v1) in place over v1,
  // but v1 is read again at step 2 -> no in place, new buffer.
  std::vector<ScheduledValue> values(4);
  values[0].parameter = true;
  values[0].bytes = 64;
  for (int v = 1; v < 4; ++v) {
    values[v].bytes = 64;
    values[v].plannable = true;
  }
  values[3].output = true;
  values[3].plannable = false;
  std::vector<ScheduledStep> steps(3);
  steps[0] = {{0}, {1}, -1};
  steps[1] = {{1}, {2}, 1};
  steps[2] = {{1, 2}, {3}, -1};
  BufferAssignment a = AssignBuffers(values, steps);
  EXPECT_EQ(a.stats.in_place, 0);
  EXPECT_NE(a.buffer_of[1], a.buffer_of[2]);
  EXPECT_EQ(a.stats.peak_bytes, 192);  // step 2: v1, v2, v3
  // Without the second read, v2 goes in place.
  steps[2] = {{2}, {3}, -1};
  a = AssignBuffers(values, steps);
  EXPECT_EQ(a.stats.in_place, 1);
  EXPECT_EQ(a.buffer_of[1], a.buffer_of[2]);
  EXPECT_EQ(a.stats.peak_bytes, 128);
}

TEST(BufferAssignment, DirectReuseNeedsEqualBytesAndNoDonated) {
  std::vector<ScheduledValue> values(5);
  values[0].parameter = true;
  values[0].donated = true;
  values[0].bytes = 32;
  for (int v = 1; v < 5; ++v) {
    values[v].bytes = 32;
    values[v].plannable = true;
  }
  values[2].bytes = 16;  // different size: never reuses a 32-byte buffer
  std::vector<ScheduledStep> steps = {
      {{0}, {1}, -1}, {{1}, {2}, -1}, {{2}, {3}, -1}, {{3}, {4}, -1}};
  values[4].output = true;
  BufferAssignment a = AssignBuffers(values, steps);
  EXPECT_EQ(a.buffer_of[0], -1);
  EXPECT_FALSE(a.value_reused[2]);
  EXPECT_TRUE(a.value_reused[3]);  // v1 (32 B) died at step 1
  EXPECT_EQ(a.buffer_of[3], a.buffer_of[1]);
  EXPECT_FALSE(a.value_reused[4]);  // output
  EXPECT_EQ(a.stats.num_buffers, 3 + 0);
  EXPECT_EQ(a.stats.total_bytes, 32 + 16 + 32);
}

// Random DAGs of fusion nodes over one f32[8,16] shape (elementwise bodies,
// some with a row reduction broadcast back): buffers are reused and written
// in place, and every result still equals the interpreter's.
StatusOr<Graph> RandomFusionDag(std::mt19937_64& rng) {
  const Shape s(DType::kF32, {8, 16});
  GraphBuilder b("dag");
  std::vector<NodeId> values = {b.Parameter(0, s), b.Parameter(1, s)};
  const OpKind binary[] = {OpKind::kAdd, OpKind::kMultiply, OpKind::kMaximum, OpKind::kSubtract};
  const OpKind unary[] = {OpKind::kNegate, OpKind::kTanh, OpKind::kAbs};
  for (int f = 0; f < 6; ++f) {
    const bool two = rng() % 2 == 0;
    const bool reduce = rng() % 4 == 0;
    // Mostly the latest value, so chains (in place) and dead values (reuse) appear.
    std::vector<NodeId> ops = {values.back()};
    if (two) ops.push_back(values[rng() % values.size()]);
    GraphBuilder body(internal::StrCat("body", f));
    NodeId x = body.Parameter(0, s);
    NodeId y = two ? body.Parameter(1, s) : x;
    NodeId r = two ? body.Binary(binary[rng() % 4], x, y) : body.Unary(unary[rng() % 3], x);
    if (reduce) {
      NodeId m = body.Reduce(r, {1}, ReduceKind::kMaximum);
      r = body.Subtract(r, body.BroadcastInDim(m, {8, 16}, {0}));
    }
    body.SetOutputs({r});
    EMBER_ASSIGN_OR_RETURN(Graph bg, body.Build());
    values.push_back(b.Fusion(ops, std::make_shared<const Graph>(std::move(bg)),
                              reduce ? FusionKind::kRow : FusionKind::kLoop));
  }
  b.SetOutputs({values.back()});
  return b.Build();
}

TEST(BufferAssignment, RandomFusionDagsReuseAndMatchTheInterpreter) {
  int reused = 0, in_place = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    std::mt19937_64 rng(seed);
    auto g = RandomFusionDag(rng);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    auto exe = Compile(*g, CpuOptions());
    ASSERT_TRUE(exe.ok()) << "seed " << seed << ": " << exe.status().ToString();
    for (const Step& st : exe->steps()) ASSERT_EQ(st.kind, StepKind::kKernel);
    reused += exe->assignment()->stats.reused;
    in_place += exe->assignment()->stats.in_place;
    SCOPED_TRACE(
        internal::StrCat("seed ", seed, "\n", PrintGraph(*g), exe->AssignmentDebugString()));
    ExpectMatchesInterpreter(*exe, seed);
  }
  EXPECT_GT(reused, 0);
  EXPECT_GT(in_place, 0);
  std::cout << "random fusion DAGs: " << reused << " reused, " << in_place << " in place\n";
}

}  // namespace
}  // namespace ember
