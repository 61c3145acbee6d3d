// barrier-expansion, and the schedule Compile gives a checkpoint's recompute: the
// barrier costs nothing at run time, the recompute stays a computation of its own
// (not merged into the forward) and runs after the gradient it was anchored to.
#include "passes/barrier_expansion.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "ember/eval/interpreter.h"
#include "ember/runtime/executable.h"
#include "passes/pass_test_util.h"

namespace ember::passes {
namespace {

TEST(BarrierExpansion, ReadsEachElementFromTheBarriersOperand) {
  BarrierExpansionPass pass;
  ExpectRewrite(pass, R"(
graph main(%p0: f32[4], %p1: f32[2]) {
  %x = f32[4] parameter(0)
  %g = f32[2] parameter(1)
  %a = f32[1] slice(%g), start={0}, limit={1}, stride={1}
  %b = (f32[4], f32[1]) optimization-barrier(%x, %a)
  %xr = f32[4] get-tuple-element(%b), index=0
  %e = f32[4] exponential(%xr)
  ROOT (%e)
})",
                R"(
graph main(%p0: f32[4], %p1: f32[2]) {
  %x = f32[4] parameter(0)
  %g = f32[2] parameter(1)
  %a = f32[1] slice(%g), start={0}, limit={1}, stride={1}
  %e = f32[4] exponential(%x)
  ROOT (%e)
})");
}

TEST(BarrierExpansion, KeepsABarrierReadWholeOrReturned) {
  BarrierExpansionPass pass;
  ExpectUnchanged(pass, R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  %b = (f32[4]) optimization-barrier(%x)
  %xr = f32[4] get-tuple-element(%b), index=0
  ROOT (%b, %xr)
})");
  // An element returned as an output would come back as the argument's buffer.
  ExpectUnchanged(pass, R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  %b = (f32[4]) optimization-barrier(%x)
  %xr = f32[4] get-tuple-element(%b), index=0
  %e = f32[4] exponential(%xr)
  ROOT (%xr, %e)
})");
  ExpectUnchanged(pass, R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  %e = f32[4] exponential(%x)
  ROOT (%e)
})");
}

// Forward t = tanh(x * w); a backward gradient g = u v (an extern step); the
// recompute tanh(gte(barrier(x, slice(g))) * w), which reads nothing of g but the
// barrier's anchor.
constexpr const char* kCheckpointStep = R"(
graph main(%p0: f32[4,8], %p1: f32[4,8], %p2: f32[4,4], %p3: f32[4,8]) {
  %x = f32[4,8] parameter(0)
  %w = f32[4,8] parameter(1)
  %u = f32[4,4] parameter(2)
  %v = f32[4,8] parameter(3)
  %h = f32[4,8] multiply(%x, %w)
  %t = f32[4,8] tanh(%h)
  %g = f32[4,8] dot-general(%u, %v), lhs_batch_dims={}, lhs_contracting_dims={1}, rhs_batch_dims={}, rhs_contracting_dims={0}
  %a = f32[1,1] slice(%g), start={0,0}, limit={1,1}, stride={1,1}
  %b = (f32[4,8], f32[1,1]) optimization-barrier(%x, %a)
  %xr = f32[4,8] get-tuple-element(%b), index=0
  %hr = f32[4,8] multiply(%xr, %w)
  %tr = f32[4,8] tanh(%hr)
  ROOT (%t, %g, %tr)
})";

int CountOp(const Graph& g, OpKind op) {
  int n = 0;
  for (const Node& node : g.nodes()) {
    if (node.op == op) ++n;
    if (node.called) n += CountOp(*node.called, op);
  }
  return n;
}

// The step that writes output `o`'s slot.
int StepWriting(const Executable& exe, int o) {
  const int slot = exe.output_slots()[o];
  for (size_t k = 0; k < exe.steps().size(); ++k) {
    const auto& w = exe.steps()[k].writes;
    if (std::find(w.begin(), w.end(), slot) != w.end()) return static_cast<int>(k);
  }
  return -1;
}

TEST(BarrierExpansion, CompiledCheckpointKeepsTheRecomputeApartAndAfterItsAnchor) {
  const Graph g = ParseOrDie(kCheckpointStep);
  for (bool merge : {false, true}) {
    SCOPED_TRACE(merge ? "horizontal fusion on" : "horizontal fusion off");
    CompileOptions o;
    o.backend = Backend::kCpu;
    o.optimize = true;
    o.merge_fusions = merge;
    o.codegen.fast = true;
    o.codegen.vector_math = false;
    StatusOr<Executable> exe = Compile(g, o);
    ASSERT_TRUE(exe.ok()) << exe.status().ToString();
    // The barrier is gone, its effect is not: two tanh computations.
    EXPECT_EQ(CountOp(exe->graph(), OpKind::kOptimizationBarrier), 0);
    EXPECT_EQ(CountOp(exe->graph(), OpKind::kTanh), 2);
    EXPECT_NE(exe->output_slots()[0], exe->output_slots()[2]);
    const int fwd = StepWriting(*exe, 0), grad = StepWriting(*exe, 1), rec = StepWriting(*exe, 2);
    ASSERT_GE(fwd, 0);
    ASSERT_GE(grad, 0);
    ASSERT_GE(rec, 0);
    EXPECT_GT(rec, grad) << exe->DebugString();
    if (!merge) {
      EXPECT_LT(fwd, grad) << exe->DebugString();
    }
    for (const Step& st : exe->steps()) EXPECT_NE(st.kind, StepKind::kInterpret);
    std::mt19937_64 rng(7);
    std::vector<Literal> args = fuzz::RandomArguments(g, rng);
    StatusOr<std::vector<Literal>> want = Evaluate(g, args);
    StatusOr<std::vector<Literal>> got = exe->RunLiterals(args);
    ASSERT_TRUE(want.ok() && got.ok());
    for (size_t i = 0; i < want->size(); ++i) {
      std::string why;
      EXPECT_TRUE(fuzz::BitIdentical((*want)[i], (*got)[i], &why)) << "output " << i << ": " << why;
    }
  }
}

}  // namespace
}  // namespace ember::passes
