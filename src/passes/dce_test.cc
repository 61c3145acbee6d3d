// dce: text IR in -> text IR out.
#include "passes/dce.h"

#include <gtest/gtest.h>

#include "passes/pass_test_util.h"

namespace ember::passes {
namespace {

TEST(Dce, RemovesUnreachableNodes) {
  DcePass dce;
  ExpectRewrite(dce, R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %dead = f32[2] exponential(%x)
  %dead2 = f32[2] add(%dead, %dead)
  %live = f32[2] negate(%x)
  ROOT (%live)
})",
                R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %live = f32[2] negate(%x)
  ROOT (%live)
})");
}

TEST(Dce, NeverRemovesParameters) {
  // Parameter 1 is unused but is part of the calling convention.
  DcePass dce;
  ExpectRewrite(dce, R"(
graph main(%p0: f32[2], %p1: s32[3]) {
  %x = f32[2] parameter(0)
  %y = s32[3] parameter(1)
  %c = f32[] constant({1})
  ROOT (%x)
})",
                R"(
graph main(%p0: f32[2], %p1: s32[3]) {
  %x = f32[2] parameter(0)
  %y = s32[3] parameter(1)
  ROOT (%x)
})");
}

TEST(Dce, RemovesDeadRng) {
  // A dead rng op has no side effect: its (seed, offset) inputs were fixed
  // at trace time, so removing it shifts no other draw.
  DcePass dce;
  ExpectRewrite(dce, R"(
graph main(%p0: u64[], %p1: u64[]) {
  %s = u64[] parameter(0)
  %o = u64[] parameter(1)
  %dead = f32[4] rng-uniform(%s, %o), stream=0
  %live = f32[4] rng-uniform(%s, %o), stream=1
  ROOT (%live)
})",
                R"(
graph main(%p0: u64[], %p1: u64[]) {
  %s = u64[] parameter(0)
  %o = u64[] parameter(1)
  %live = f32[4] rng-uniform(%s, %o), stream=1
  ROOT (%live)
})");
}

TEST(Dce, KeepsLiveBarrierAndAllItsOperands) {
  // The barrier is live through element 0; element 1's operand stays too
  // (the barrier uses it), only the unused get-tuple-element goes.
  DcePass dce;
  ExpectRewrite(dce, R"(
graph main(%p0: f32[2], %p1: f32[3]) {
  %x = f32[2] parameter(0)
  %y = f32[3] parameter(1)
  %e = f32[3] exponential(%y)
  %b = (f32[2], f32[3]) optimization-barrier(%x, %e)
  %g0 = f32[2] get-tuple-element(%b), index=0
  %g1 = f32[3] get-tuple-element(%b), index=1
  ROOT (%g0)
})",
                R"(
graph main(%p0: f32[2], %p1: f32[3]) {
  %x = f32[2] parameter(0)
  %y = f32[3] parameter(1)
  %e = f32[3] exponential(%y)
  %b = (f32[2], f32[3]) optimization-barrier(%x, %e)
  %g0 = f32[2] get-tuple-element(%b), index=0
  ROOT (%g0)
})");
}

TEST(Dce, KeepsOutputsInOrderWithDuplicatesAndAliases) {
  DcePass dce;
  ExpectRewrite(dce, R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %d = f32[2] sine(%x)
  %a = f32[2] negate(%x)
  ROOT (%a, %x, %a)
  ALIAS {0: 0}
})",
                R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %a = f32[2] negate(%x)
  ROOT (%a, %x, %a)
  ALIAS {0: 0}
})");
}

TEST(Dce, NothingDeadReportsNoChange) {
  DcePass dce;
  ExpectUnchanged(dce, R"(
graph main(%p0: f32[2], %p1: f32[2]) {
  %x = f32[2] parameter(0)
  %y = f32[2] parameter(1)
  %a = f32[2] add(%x, %y)
  ROOT (%a)
})");
}

}  // namespace
}  // namespace ember::passes
