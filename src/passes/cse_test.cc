// cse: text IR in -> text IR out (cse then dce, so only live nodes show).
#include "passes/cse.h"

#include <gtest/gtest.h>

#include "passes/dce.h"
#include "passes/pass_test_util.h"

namespace ember::passes {
namespace {

// Runs cse (expecting `changed`), then dce, and compares with `out`.
void ExpectCse(std::string_view in, std::string_view out, bool changed_expected = true) {
  CsePass cse;
  ExpectRewriteThenDce(cse, in, out, changed_expected);
}

void ExpectNoCse(std::string_view in) {
  CsePass cse;
  ExpectUnchanged(cse, in);
}

TEST(Cse, MergesEqualScalarConstants) {
  ExpectCse(R"(
graph main(%p0: f32[]) {
  %x = f32[] parameter(0)
  %a = f32[] constant({2.5})
  %b = f32[] constant({2.5})
  %m = f32[] multiply(%x, %a)
  %n = f32[] multiply(%x, %b)
  %s = f32[] add(%m, %n)
  ROOT (%s)
})",
            R"(
graph main(%p0: f32[]) {
  %x = f32[] parameter(0)
  %a = f32[] constant({2.5})
  %m = f32[] multiply(%x, %a)
  %s = f32[] add(%m, %m)
  ROOT (%s)
})");
}

TEST(Cse, ConstantsDifferingInSignOfZeroOrDtypeStayApart) {
  ExpectNoCse(R"(
graph main() {
  %a = f32[] constant({0})
  %b = f32[] constant({-0})
  %c = f64[] constant({0})
  ROOT (%a, %b, %c)
})");
}

TEST(Cse, MergesChainsTransitively) {
  ExpectCse(R"(
graph main(%p0: f32[2,3]) {
  %x = f32[2,3] parameter(0)
  %a = f32[3,2] transpose(%x), dimensions={1,0}
  %b = f32[3,2] transpose(%x), dimensions={1,0}
  %ea = f32[3,2] exponential(%a)
  %eb = f32[3,2] exponential(%b)
  %r = f32[3] reduce(%eb), dimensions={1}, to_apply=add
  ROOT (%ea, %r)
})",
            R"(
graph main(%p0: f32[2,3]) {
  %x = f32[2,3] parameter(0)
  %a = f32[3,2] transpose(%x), dimensions={1,0}
  %ea = f32[3,2] exponential(%a)
  %r = f32[3] reduce(%ea), dimensions={1}, to_apply=add
  ROOT (%ea, %r)
})");
}

TEST(Cse, DifferentAttributesStayApart) {
  ExpectNoCse(R"(
graph main(%p0: s32[2]) {
  %x = s32[2] parameter(0)
  %a = pred[2] compare(%x, %x), direction=LT
  %b = pred[2] compare(%x, %x), direction=GT
  ROOT (%a, %b)
})");
}

TEST(Cse, EqualParametersNeverMergeOrReorder) {
  ExpectNoCse(R"(
graph main(%p0: f32[2], %p1: f32[2]) {
  %y = f32[2] parameter(1)
  %x = f32[2] parameter(0)
  %a = f32[2] add(%x, %y)
  %b = f32[2] add(%y, %x)
  ROOT (%a, %b)
})");
}

TEST(Cse, RngOpsWithSameOperandsAndStreamNeverMerge) {
  ExpectNoCse(R"(
graph main(%p0: u64[], %p1: u64[]) {
  %s = u64[] parameter(0)
  %o = u64[] parameter(1)
  %r = f32[4] rng-uniform(%s, %o), stream=3
  %q = f32[4] rng-uniform(%s, %o), stream=3
  %a = f32[4] add(%r, %q)
  ROOT (%a)
})");
}

TEST(Cse, CustomCallsNeverMerge) {
  ExpectNoCse(R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %a = f32[2] custom-call(%x), call_target_name="my.op"
  %b = f32[2] custom-call(%x), call_target_name="my.op"
  ROOT (%a, %b)
})");
}

TEST(Cse, BarriersNeverMergeAndNothingMergesAcrossThem) {
  // exp(x) before the barrier and exp(gte(barrier(x))) after it compute the
  // same numbers but must stay two nodes: the second is what the barrier
  // keeps from being hoisted (rematerialization for checkpointing). Two
  // barriers over the same value stay two barriers.
  ExpectNoCse(R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  %e0 = f32[4] exponential(%x)
  %b = (f32[4]) optimization-barrier(%x)
  %g = f32[4] get-tuple-element(%b), index=0
  %e1 = f32[4] exponential(%g)
  %c = (f32[4]) optimization-barrier(%x)
  %h = f32[4] get-tuple-element(%c), index=0
  ROOT (%e0, %e1, %h)
})");
}

TEST(Cse, MergesDuplicateGetTupleElementsOfOneBarrier) {
  // Reading the same barrier output twice is one value; nothing moves.
  ExpectCse(R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  %b = (f32[4]) optimization-barrier(%x)
  %g = f32[4] get-tuple-element(%b), index=0
  %h = f32[4] get-tuple-element(%b), index=0
  %s = f32[4] add(%g, %h)
  ROOT (%s)
})",
            R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  %b = (f32[4]) optimization-barrier(%x)
  %g = f32[4] get-tuple-element(%b), index=0
  %s = f32[4] add(%g, %g)
  ROOT (%s)
})");
}

TEST(Cse, KeepsOutputsAndAliases) {
  ExpectCse(R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %a = f32[2] negate(%x)
  %b = f32[2] negate(%x)
  ROOT (%a, %b)
  ALIAS {1: 0}
})",
            R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %a = f32[2] negate(%x)
  ROOT (%a, %a)
  ALIAS {1: 0}
})");
}

// Activation checkpointing in one program (python/ember/checkpoint.py): the forward
// computes t = tanh(x * w) and drops it; the backward recomputes it from x read
// through a barrier anchored to the incoming gradient g. Without the barrier CSE
// merges the recompute into the forward (the forward's t then lives until the
// backward: no memory saved); with it both stay.
constexpr const char* kRecomputeWithoutBarrier = R"(
graph main(%p0: f32[4,8], %p1: f32[4,8], %p2: f32[4,8]) {
  %x = f32[4,8] parameter(0)
  %w = f32[4,8] parameter(1)
  %g = f32[4,8] parameter(2)
  %h = f32[4,8] multiply(%x, %w)
  %t = f32[4,8] tanh(%h)
  %gg = f32[4,8] multiply(%g, %g)
  %hr = f32[4,8] multiply(%x, %w)
  %tr = f32[4,8] tanh(%hr)
  %d = f32[4,8] multiply(%gg, %tr)
  ROOT (%t, %d)
})";

TEST(Cse, MergesACheckpointRecomputeWithoutABarrier) {
  ExpectCse(kRecomputeWithoutBarrier, R"(
graph main(%p0: f32[4,8], %p1: f32[4,8], %p2: f32[4,8]) {
  %x = f32[4,8] parameter(0)
  %w = f32[4,8] parameter(1)
  %g = f32[4,8] parameter(2)
  %h = f32[4,8] multiply(%x, %w)
  %t = f32[4,8] tanh(%h)
  %gg = f32[4,8] multiply(%g, %g)
  %d = f32[4,8] multiply(%gg, %t)
  ROOT (%t, %d)
})");
}

TEST(Cse, KeepsACheckpointRecomputeBehindItsAnchoredBarrier) {
  ExpectNoCse(R"(
graph main(%p0: f32[4,8], %p1: f32[4,8], %p2: f32[4,8]) {
  %x = f32[4,8] parameter(0)
  %w = f32[4,8] parameter(1)
  %g = f32[4,8] parameter(2)
  %h = f32[4,8] multiply(%x, %w)
  %t = f32[4,8] tanh(%h)
  %gg = f32[4,8] multiply(%g, %g)
  %a = f32[1,1] slice(%gg), start={0,0}, limit={1,1}, stride={1,1}
  %b = (f32[4,8], f32[1,1]) optimization-barrier(%x, %a)
  %xr = f32[4,8] get-tuple-element(%b), index=0
  %hr = f32[4,8] multiply(%xr, %w)
  %tr = f32[4,8] tanh(%hr)
  %d = f32[4,8] multiply(%gg, %tr)
  ROOT (%t, %d)
})");
}

}  // namespace
}  // namespace ember::passes
