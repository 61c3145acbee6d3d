// simplify: one text-IR test per rule (in -> out, after dce so the expected
// graph shows only what is live), values checked bit-exactly on random
// inputs, plus the rewrites that must NOT happen.
#include "passes/simplify.h"

#include <gtest/gtest.h>

#include <set>

#include "passes/dce.h"
#include "passes/pass_test_util.h"

namespace ember::passes {
namespace {

// Runs simplify (expecting a change), then dce, and compares with `out`.
void ExpectSimplifies(std::string_view in, std::string_view out, const char* rule) {
  SCOPED_TRACE(rule);
  SimplifyPass simplify;
  ExpectRewriteThenDce(simplify, in, out);
  EXPECT_EQ(simplify.fired().count(rule), 1u) << "rule " << rule << " did not fire";
}

void ExpectNotSimplified(std::string_view in) {
  SimplifyPass simplify;
  ExpectUnchanged(simplify, in);
}

TEST(Simplify, HasAtLeastFifteenRules) {
  std::vector<std::string> names = SimplifyRuleNames();
  EXPECT_GE(names.size(), 15u);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
}

// ---- arithmetic ----

TEST(Simplify, MulOne) {
  ExpectSimplifies(R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  %one = f32[] constant({1})
  %b = f32[4] broadcast-in-dim(%one), dimensions={}
  %m = f32[4] multiply(%b, %x)
  %n = f32[4] multiply(%m, %b)
  ROOT (%n)
})",
                   R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  ROOT (%x)
})",
                   "mul-one");
}

TEST(Simplify, MulOneNeedsEveryElementOne) {
  ExpectNotSimplified(R"(
graph main(%p0: f32[3]) {
  %x = f32[3] parameter(0)
  %c = f32[3] constant({1, 1, 2})
  %m = f32[3] multiply(%x, %c)
  ROOT (%m)
})");
}

TEST(Simplify, DivOne) {
  ExpectSimplifies(R"(
graph main(%p0: s32[2,2]) {
  %x = s32[2,2] parameter(0)
  %c = s32[2,2] constant({1, 1, 1, 1})
  %d = s32[2,2] divide(%x, %c)
  ROOT (%d)
})",
                   R"(
graph main(%p0: s32[2,2]) {
  %x = s32[2,2] parameter(0)
  ROOT (%x)
})",
                   "div-one");
}

TEST(Simplify, AddNegativeZeroFloat) {
  ExpectSimplifies(R"(
graph main(%p0: f32[3]) {
  %x = f32[3] parameter(0)
  %z = f32[] constant({-0})
  %b = f32[3] broadcast-in-dim(%z), dimensions={}
  %a = f32[3] add(%b, %x)
  ROOT (%a)
})",
                   R"(
graph main(%p0: f32[3]) {
  %x = f32[3] parameter(0)
  ROOT (%x)
})",
                   "add-zero");
}

TEST(Simplify, AddPositiveZeroFloatIsKept) {
  // -0.0 + 0.0 = +0.0: x + 0.0 is not x.
  ExpectNotSimplified(R"(
graph main(%p0: f32[3]) {
  %x = f32[3] parameter(0)
  %z = f32[] constant({0})
  %b = f32[3] broadcast-in-dim(%z), dimensions={}
  %a = f32[3] add(%x, %b)
  ROOT (%a)
})");
}

TEST(Simplify, AddZeroInt) {
  ExpectSimplifies(R"(
graph main(%p0: s32[3]) {
  %x = s32[3] parameter(0)
  %z = s32[3] constant({0, 0, 0})
  %a = s32[3] add(%x, %z)
  ROOT (%a)
})",
                   R"(
graph main(%p0: s32[3]) {
  %x = s32[3] parameter(0)
  ROOT (%x)
})",
                   "add-zero");
}

TEST(Simplify, SubPositiveZero) {
  ExpectSimplifies(R"(
graph main(%p0: f32[]) {
  %x = f32[] parameter(0)
  %z = f32[] constant({0})
  %s = f32[] subtract(%x, %z)
  ROOT (%s)
})",
                   R"(
graph main(%p0: f32[]) {
  %x = f32[] parameter(0)
  ROOT (%x)
})",
                   "sub-zero");
}

TEST(Simplify, SubNegativeZeroFloatIsKept) {
  // -0.0 - (-0.0) = +0.0.
  ExpectNotSimplified(R"(
graph main(%p0: f32[]) {
  %x = f32[] parameter(0)
  %z = f32[] constant({-0})
  %s = f32[] subtract(%x, %z)
  ROOT (%s)
})");
}

TEST(Simplify, MulZeroInt) {
  ExpectSimplifies(R"(
graph main(%p0: s32[2]) {
  %x = s32[2] parameter(0)
  %z = s32[] constant({0})
  %b = s32[2] broadcast-in-dim(%z), dimensions={}
  %m = s32[2] multiply(%x, %b)
  ROOT (%m)
})",
                   R"(
graph main(%p0: s32[2]) {
  %x = s32[2] parameter(0)
  %z = s32[] constant({0})
  %b = s32[2] broadcast-in-dim(%z), dimensions={}
  ROOT (%b)
})",
                   "mul-zero-int");
}

TEST(Simplify, MulZeroFloatIsKept) {
  // NaN*0 = NaN, inf*0 = NaN, -1*0 = -0.
  ExpectNotSimplified(R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %z = f32[2] constant({0, 0})
  %m = f32[2] multiply(%x, %z)
  ROOT (%m)
})");
}

TEST(Simplify, MulMinusOne) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %c = f32[] constant({-1})
  %b = f32[2] broadcast-in-dim(%c), dimensions={}
  %m = f32[2] multiply(%b, %x)
  ROOT (%m)
})",
                   R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %n = f32[2] negate(%x)
  ROOT (%n)
})",
                   "mul-minus-one");
}

TEST(Simplify, PowOne) {
  ExpectSimplifies(R"(
graph main(%p0: f32[3]) {
  %x = f32[3] parameter(0)
  %c = f32[3] constant({1, 1, 1})
  %m = f32[3] power(%x, %c)
  ROOT (%m)
})",
                   R"(
graph main(%p0: f32[3]) {
  %x = f32[3] parameter(0)
  ROOT (%x)
})",
                   "pow-one");
}

TEST(Simplify, SubSelfInt) {
  ExpectSimplifies(R"(
graph main(%p0: s32[2]) {
  %x = s32[2] parameter(0)
  %s = s32[2] subtract(%x, %x)
  ROOT (%s)
})",
                   R"(
graph main(%p0: s32[2]) {
  %x = s32[2] parameter(0)
  %z = s32[] constant({0})
  %b = s32[2] broadcast-in-dim(%z), dimensions={}
  ROOT (%b)
})",
                   "sub-self-int");
}

TEST(Simplify, SubSelfFloatIsKept) {
  // inf - inf = NaN.
  ExpectNotSimplified(R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %s = f32[2] subtract(%x, %x)
  ROOT (%s)
})");
}

TEST(Simplify, IdempotentBinary) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2], %p1: pred[2]) {
  %x = f32[2] parameter(0)
  %p = pred[2] parameter(1)
  %a = f32[2] maximum(%x, %x)
  %b = f32[2] minimum(%a, %a)
  %c = pred[2] and(%p, %p)
  %d = pred[2] or(%c, %c)
  ROOT (%b, %d)
})",
                   R"(
graph main(%p0: f32[2], %p1: pred[2]) {
  %x = f32[2] parameter(0)
  %p = pred[2] parameter(1)
  ROOT (%x, %p)
})",
                   "idempotent-binary");
}

TEST(Simplify, XorSelf) {
  ExpectSimplifies(R"(
graph main(%p0: pred[]) {
  %x = pred[] parameter(0)
  %s = pred[] xor(%x, %x)
  ROOT (%s)
})",
                   R"(
graph main(%p0: pred[]) {
  %x = pred[] parameter(0)
  %z = pred[] constant({false})
  ROOT (%z)
})",
                   "xor-self");
}

TEST(Simplify, BitwiseIdentity) {
  ExpectSimplifies(R"(
graph main(%p0: u8[2]) {
  %x = u8[2] parameter(0)
  %ones = u8[2] constant({255, 255})
  %zero = u8[] constant({0})
  %zb = u8[2] broadcast-in-dim(%zero), dimensions={}
  %a = u8[2] and(%ones, %x)
  %o = u8[2] or(%a, %zb)
  %r = u8[2] xor(%zb, %o)
  ROOT (%r)
})",
                   R"(
graph main(%p0: u8[2]) {
  %x = u8[2] parameter(0)
  ROOT (%x)
})",
                   "bitwise-identity");
}

TEST(Simplify, BitwiseAbsorb) {
  ExpectSimplifies(R"(
graph main(%p0: s32[2]) {
  %x = s32[2] parameter(0)
  %ones = s32[2] constant({-1, -1})
  %o = s32[2] or(%x, %ones)
  ROOT (%o)
})",
                   R"(
graph main(%p0: s32[2]) {
  %x = s32[2] parameter(0)
  %c = s32[] constant({-1})
  %b = s32[2] broadcast-in-dim(%c), dimensions={}
  ROOT (%b)
})",
                   "bitwise-absorb");
}

TEST(Simplify, CompareSelfInt) {
  ExpectSimplifies(R"(
graph main(%p0: s32[2]) {
  %x = s32[2] parameter(0)
  %c = pred[2] compare(%x, %x), direction=LE
  ROOT (%c)
})",
                   R"(
graph main(%p0: s32[2]) {
  %x = s32[2] parameter(0)
  %t = pred[] constant({true})
  %b = pred[2] broadcast-in-dim(%t), dimensions={}
  ROOT (%b)
})",
                   "compare-self-int");
}

TEST(Simplify, CompareSelfFloatIsKept) {
  // NaN == NaN is false.
  ExpectNotSimplified(R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %c = pred[2] compare(%x, %x), direction=EQ
  ROOT (%c)
})");
}

// ---- unary chains ----

TEST(Simplify, NegNeg) {
  ExpectSimplifies(R"(
graph main(%p0: s32[3]) {
  %x = s32[3] parameter(0)
  %a = s32[3] negate(%x)
  %b = s32[3] negate(%a)
  %c = s32[3] negate(%b)
  %d = s32[3] negate(%c)
  ROOT (%d, %a)
})",
                   R"(
graph main(%p0: s32[3]) {
  %x = s32[3] parameter(0)
  %a = s32[3] negate(%x)
  ROOT (%x, %a)
})",
                   "neg-neg");
}

TEST(Simplify, NotNot) {
  ExpectSimplifies(R"(
graph main(%p0: pred[2]) {
  %x = pred[2] parameter(0)
  %a = pred[2] not(%x)
  %b = pred[2] not(%a)
  ROOT (%b)
})",
                   R"(
graph main(%p0: pred[2]) {
  %x = pred[2] parameter(0)
  ROOT (%x)
})",
                   "not-not");
}

TEST(Simplify, AbsOfAbsOrNeg) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %n = f32[2] negate(%x)
  %a = f32[2] abs(%n)
  %b = f32[2] abs(%a)
  ROOT (%b)
})",
                   R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %a = f32[2] abs(%x)
  ROOT (%a)
})",
                   "abs-of-abs-or-neg");
}

TEST(Simplify, AbsOfNegUnsignedIsKept) {
  // For u8, abs is the identity and neg wraps: abs(neg(1)) = 255 != abs(1).
  ExpectNotSimplified(R"(
graph main(%p0: u8[2]) {
  %x = u8[2] parameter(0)
  %n = u8[2] negate(%x)
  %a = u8[2] abs(%n)
  ROOT (%a)
})");
}

TEST(Simplify, RoundingOfIntegral) {
  ExpectSimplifies(R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  %c = f32[4] ceil(%x)
  %f = f32[4] floor(%c)
  %r = f32[4] round-nearest-even(%f)
  ROOT (%r)
})",
                   R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  %c = f32[4] ceil(%x)
  ROOT (%c)
})",
                   "rounding-of-integral");
}

TEST(Simplify, SignSign) {
  ExpectSimplifies(R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  %a = f32[4] sign(%x)
  %b = f32[4] sign(%a)
  ROOT (%b)
})",
                   R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  %a = f32[4] sign(%x)
  ROOT (%a)
})",
                   "sign-sign");
}

// ---- select ----

TEST(Simplify, SelectConstant) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2], %p1: f32[2]) {
  %a = f32[2] parameter(0)
  %b = f32[2] parameter(1)
  %t = pred[] constant({true})
  %f = pred[2] constant({false, false})
  %s = f32[2] select(%t, %a, %b)
  %r = f32[2] select(%f, %a, %b)
  ROOT (%s, %r)
})",
                   R"(
graph main(%p0: f32[2], %p1: f32[2]) {
  %a = f32[2] parameter(0)
  %b = f32[2] parameter(1)
  ROOT (%a, %b)
})",
                   "select-constant");
}

TEST(Simplify, SelectSame) {
  ExpectSimplifies(R"(
graph main(%p0: pred[2], %p1: s32[2]) {
  %p = pred[2] parameter(0)
  %a = s32[2] parameter(1)
  %s = s32[2] select(%p, %a, %a)
  ROOT (%s)
})",
                   R"(
graph main(%p0: pred[2], %p1: s32[2]) {
  %p = pred[2] parameter(0)
  %a = s32[2] parameter(1)
  ROOT (%a)
})",
                   "select-same");
}

TEST(Simplify, SelectNot) {
  ExpectSimplifies(R"(
graph main(%p0: pred[2], %p1: s32[2], %p2: s32[2]) {
  %p = pred[2] parameter(0)
  %a = s32[2] parameter(1)
  %b = s32[2] parameter(2)
  %n = pred[2] not(%p)
  %s = s32[2] select(%n, %a, %b)
  ROOT (%s)
})",
                   R"(
graph main(%p0: pred[2], %p1: s32[2], %p2: s32[2]) {
  %p = pred[2] parameter(0)
  %a = s32[2] parameter(1)
  %b = s32[2] parameter(2)
  %s = s32[2] select(%p, %b, %a)
  ROOT (%s)
})",
                   "select-not");
}

// ---- convert ----

TEST(Simplify, ConvertNoop) {
  ExpectSimplifies(R"(
graph main(%p0: bf16[2]) {
  %x = bf16[2] parameter(0)
  %c = bf16[2] convert(%x)
  ROOT (%c)
})",
                   R"(
graph main(%p0: bf16[2]) {
  %x = bf16[2] parameter(0)
  ROOT (%x)
})",
                   "convert-noop");
}

TEST(Simplify, ConvertChainThroughWiderType) {
  ExpectSimplifies(R"(
graph main(%p0: s32[3], %p1: f32[3]) {
  %x = s32[3] parameter(0)
  %y = f32[3] parameter(1)
  %a = s64[3] convert(%x)
  %b = f32[3] convert(%a)
  %c = f64[3] convert(%y)
  %d = f32[3] convert(%c)
  ROOT (%b, %d)
})",
                   R"(
graph main(%p0: s32[3], %p1: f32[3]) {
  %x = s32[3] parameter(0)
  %y = f32[3] parameter(1)
  %b = f32[3] convert(%x)
  ROOT (%b, %y)
})",
                   "convert-chain");
}

TEST(Simplify, ConvertChainThroughNarrowerTypeIsKept) {
  // f32 -> s32 -> f32 truncates; s32 -> f32 -> s32 rounds large values;
  // f32 -> bf16 -> f32 rounds.
  ExpectNotSimplified(R"(
graph main(%p0: f32[3], %p1: s32[3]) {
  %x = f32[3] parameter(0)
  %y = s32[3] parameter(1)
  %a = s32[3] convert(%x)
  %b = f32[3] convert(%a)
  %c = f32[3] convert(%y)
  %d = s32[3] convert(%c)
  %e = bf16[3] convert(%x)
  %f = f32[3] convert(%e)
  ROOT (%b, %d, %f)
})");
}

// ---- data movement ----

TEST(Simplify, ReshapeNoop) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2,3]) {
  %x = f32[2,3] parameter(0)
  %r = f32[2,3] reshape(%x)
  ROOT (%r)
})",
                   R"(
graph main(%p0: f32[2,3]) {
  %x = f32[2,3] parameter(0)
  ROOT (%x)
})",
                   "reshape-noop");
}

TEST(Simplify, ReshapeReshape) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2,3]) {
  %x = f32[2,3] parameter(0)
  %a = f32[6] reshape(%x)
  %b = f32[3,2] reshape(%a)
  ROOT (%b)
})",
                   R"(
graph main(%p0: f32[2,3]) {
  %x = f32[2,3] parameter(0)
  %b = f32[3,2] reshape(%x)
  ROOT (%b)
})",
                   "reshape-reshape");
}

TEST(Simplify, TransposeIdentity) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2,3]) {
  %x = f32[2,3] parameter(0)
  %t = f32[2,3] transpose(%x), dimensions={0,1}
  ROOT (%t)
})",
                   R"(
graph main(%p0: f32[2,3]) {
  %x = f32[2,3] parameter(0)
  ROOT (%x)
})",
                   "transpose-identity");
}

TEST(Simplify, TransposeTranspose) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2,3,4]) {
  %x = f32[2,3,4] parameter(0)
  %a = f32[3,4,2] transpose(%x), dimensions={1,2,0}
  %b = f32[4,3,2] transpose(%a), dimensions={1,0,2}
  ROOT (%b)
})",
                   R"(
graph main(%p0: f32[2,3,4]) {
  %x = f32[2,3,4] parameter(0)
  %b = f32[4,3,2] transpose(%x), dimensions={2,1,0}
  ROOT (%b)
})",
                   "transpose-transpose");
}

TEST(Simplify, BroadcastIdentity) {
  ExpectSimplifies(R"(
graph main(%p0: s32[2,3]) {
  %x = s32[2,3] parameter(0)
  %b = s32[2,3] broadcast-in-dim(%x), dimensions={0,1}
  ROOT (%b)
})",
                   R"(
graph main(%p0: s32[2,3]) {
  %x = s32[2,3] parameter(0)
  ROOT (%x)
})",
                   "broadcast-identity");
}

TEST(Simplify, BroadcastBroadcast) {
  ExpectSimplifies(R"(
graph main(%p0: f32[3]) {
  %x = f32[3] parameter(0)
  %a = f32[3,2] broadcast-in-dim(%x), dimensions={0}
  %b = f32[4,2,3] broadcast-in-dim(%a), dimensions={2,1}
  ROOT (%b)
})",
                   R"(
graph main(%p0: f32[3]) {
  %x = f32[3] parameter(0)
  %b = f32[4,2,3] broadcast-in-dim(%x), dimensions={2}
  ROOT (%b)
})",
                   "broadcast-broadcast");
}

// A keepdim reduction broadcast back (log-softmax, layer norm as lowered
// from ATen): the size-1 reshape goes, leaving a row broadcast.
TEST(Simplify, BroadcastOfUnitReshape) {
  ExpectSimplifies(R"(
graph main(%p0: f32[16]) {
  %x = f32[16] parameter(0)
  %r = f32[16,1] reshape(%x)
  %b = f32[16,10] broadcast-in-dim(%r), dimensions={0,1}
  ROOT (%b)
})",
                   R"(
graph main(%p0: f32[16]) {
  %x = f32[16] parameter(0)
  %b = f32[16,10] broadcast-in-dim(%x), dimensions={0}
  ROOT (%b)
})",
                   "broadcast-of-unit-reshape");
  ExpectSimplifies(R"(
graph main(%p0: f32[4,8]) {
  %x = f32[4,8] parameter(0)
  %r = f32[1,4,1,8] reshape(%x)
  %b = f32[2,4,8,3,8] broadcast-in-dim(%r), dimensions={0,1,2,4}
  ROOT (%b)
})",
                   R"(
graph main(%p0: f32[4,8]) {
  %x = f32[4,8] parameter(0)
  %b = f32[2,4,8,3,8] broadcast-in-dim(%x), dimensions={1,4}
  ROOT (%b)
})",
                   "broadcast-of-unit-reshape");
}

// A reshape that regroups elements, or an operand with its own size-1
// dims, is left alone.
TEST(Simplify, BroadcastOfRegroupingReshapeIsKept) {
  ExpectNotSimplified(R"(
graph main(%p0: f32[2,3]) {
  %x = f32[2,3] parameter(0)
  %r = f32[6] reshape(%x)
  %b = f32[6,4] broadcast-in-dim(%r), dimensions={0}
  ROOT (%b)
})");
  ExpectNotSimplified(R"(
graph main(%p0: f32[1,3]) {
  %x = f32[1,3] parameter(0)
  %r = f32[3,1] reshape(%x)
  %b = f32[3,5] broadcast-in-dim(%r), dimensions={0,1}
  ROOT (%b)
})");
}

// A layer norm's keepdim mean: computed on the row shape, reshaped last.
TEST(Simplify, ElementwiseOfUnitReshape) {
  ExpectSimplifies(R"(
graph main(%p0: f32[4,32]) {
  %s = f32[4,32] parameter(0)
  %r = f32[4,32,1] reshape(%s)
  %c = f32[] constant({64})
  %n = f32[4,32,1] broadcast-in-dim(%c), dimensions={}
  %m = f32[4,32,1] divide(%r, %n)
  ROOT (%m)
})",
                   R"(
graph main(%p0: f32[4,32]) {
  %s = f32[4,32] parameter(0)
  %c = f32[] constant({64})
  %n = f32[4,32] broadcast-in-dim(%c), dimensions={}
  %m = f32[4,32] divide(%s, %n)
  %r = f32[4,32,1] reshape(%m)
  ROOT (%r)
})",
                   "elementwise-of-unit-reshape");
}

// Operands reshaped from different shapes, a non-scalar broadcast, or a
// shape without unit dims: left alone.
TEST(Simplify, ElementwiseOfOtherReshapesIsKept) {
  ExpectNotSimplified(R"(
graph main(%p0: f32[4,32], %p1: f32[4,32,1]) {
  %s = f32[4,32] parameter(0)
  %t = f32[4,32,1] parameter(1)
  %r = f32[4,32,1] reshape(%s)
  %m = f32[4,32,1] add(%r, %t)
  ROOT (%m)
})");
  ExpectNotSimplified(R"(
graph main(%p0: f32[128]) {
  %s = f32[128] parameter(0)
  %r = f32[4,32] reshape(%s)
  %m = f32[4,32] negate(%r)
  ROOT (%m)
})");
}

// The transposed operand of a matmul (the weight gradient's x^T * dy) is
// read through the dot's dims instead of being materialized.
TEST(Simplify, DotOfTranspose) {
  ExpectSimplifies(R"(
graph main(%p0: f32[16,10], %p1: f32[16,64]) {
  %a = f32[16,10] parameter(0)
  %b = f32[16,64] parameter(1)
  %t = f32[10,16] transpose(%a), dimensions={1,0}
  %d = f32[10,64] dot-general(%t, %b), lhs_batch_dims={}, lhs_contracting_dims={1}, rhs_batch_dims={}, rhs_contracting_dims={0}
  ROOT (%d)
})",
                   R"(
graph main(%p0: f32[16,10], %p1: f32[16,64]) {
  %a = f32[16,10] parameter(0)
  %b = f32[16,64] parameter(1)
  %d = f32[10,64] dot-general(%a, %b), lhs_batch_dims={}, lhs_contracting_dims={0}, rhs_batch_dims={}, rhs_contracting_dims={0}
  ROOT (%d)
})",
                   "dot-of-transpose");
  // Batched, both sides: q k^T with k stored [B,K,N] -> [B,N,K].
  ExpectSimplifies(R"(
graph main(%p0: f32[2,3,5], %p1: f32[2,4,5]) {
  %q = f32[2,3,5] parameter(0)
  %k = f32[2,4,5] parameter(1)
  %kt = f32[2,5,4] transpose(%k), dimensions={0,2,1}
  %d = f32[2,3,4] dot-general(%q, %kt), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  ROOT (%d)
})",
                   R"(
graph main(%p0: f32[2,3,5], %p1: f32[2,4,5]) {
  %q = f32[2,3,5] parameter(0)
  %k = f32[2,4,5] parameter(1)
  %d = f32[2,3,4] dot-general(%q, %k), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  ROOT (%d)
})",
                   "dot-of-transpose");
}

// A transpose that reorders the free dims would reorder the result: kept.
TEST(Simplify, DotOfFreeDimTransposeIsKept) {
  ExpectNotSimplified(R"(
graph main(%p0: f32[3,4,5], %p1: f32[5,2]) {
  %a = f32[3,4,5] parameter(0)
  %b = f32[5,2] parameter(1)
  %t = f32[4,3,5] transpose(%a), dimensions={1,0,2}
  %d = f32[4,3,2] dot-general(%t, %b), lhs_batch_dims={}, lhs_contracting_dims={2}, rhs_batch_dims={}, rhs_contracting_dims={0}
  ROOT (%d)
})");
}

TEST(Simplify, SliceFull) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2,1]) {
  %x = f32[2,1] parameter(0)
  %s = f32[2,1] slice(%x), limit={2,1}, start={0,0}, stride={1,3}
  ROOT (%s)
})",
                   R"(
graph main(%p0: f32[2,1]) {
  %x = f32[2,1] parameter(0)
  ROOT (%x)
})",
                   "slice-full");
}

TEST(Simplify, SlicePartialIsKept) {
  ExpectNotSimplified(R"(
graph main(%p0: f32[4]) {
  %x = f32[4] parameter(0)
  %s = f32[2] slice(%x), limit={4}, start={0}, stride={2}
  ROOT (%s)
})");
}

TEST(Simplify, ConcatSingle) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2,2]) {
  %x = f32[2,2] parameter(0)
  %c = f32[2,2] concatenate(%x), dimension=1
  ROOT (%c)
})",
                   R"(
graph main(%p0: f32[2,2]) {
  %x = f32[2,2] parameter(0)
  ROOT (%x)
})",
                   "concat-single");
}

TEST(Simplify, PadZero) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2,2]) {
  %x = f32[2,2] parameter(0)
  %v = f32[] constant({7})
  %p = f32[2,2] pad(%x, %v), high={0,0}, interior={0,0}, low={0,0}
  ROOT (%p)
})",
                   R"(
graph main(%p0: f32[2,2]) {
  %x = f32[2,2] parameter(0)
  ROOT (%x)
})",
                   "pad-zero");
}

TEST(Simplify, ReverseReverse) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2,3,1]) {
  %x = f32[2,3,1] parameter(0)
  %a = f32[2,3,1] reverse(%x), dimensions={0,1}
  %b = f32[2,3,1] reverse(%a), dimensions={1,2}
  %c = f32[2,3,1] reverse(%x), dimensions={2}
  ROOT (%b, %c)
})",
                   R"(
graph main(%p0: f32[2,3,1]) {
  %x = f32[2,3,1] parameter(0)
  %b = f32[2,3,1] reverse(%x), dimensions={0}
  ROOT (%b, %x)
})",
                   "reverse");
}

TEST(Simplify, ReduceTrivial) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2,1,3], %p1: s32[1,2]) {
  %x = f32[2,1,3] parameter(0)
  %y = s32[1,2] parameter(1)
  %a = f32[2,1,3] reduce(%x), dimensions={}, to_apply=maximum
  %b = f32[2,3] reduce(%a), dimensions={1}, to_apply=multiply
  %c = s32[2] reduce(%y), dimensions={0}, to_apply=add
  ROOT (%b, %c)
})",
                   R"(
graph main(%p0: f32[2,1,3], %p1: s32[1,2]) {
  %x = f32[2,1,3] parameter(0)
  %y = s32[1,2] parameter(1)
  %b = f32[2,3] reshape(%x)
  %c = s32[2] reshape(%y)
  ROOT (%b, %c)
})",
                   "reduce-trivial");
}

TEST(Simplify, ReduceTrivialFloatSumIsKept) {
  // Whether sum({-0.0}) is -0.0 or +0.0 depends on the accumulator's start.
  ExpectNotSimplified(R"(
graph main(%p0: f32[2,1]) {
  %x = f32[2,1] parameter(0)
  %a = f32[2] reduce(%x), dimensions={1}, to_apply=add
  ROOT (%a)
})");
}

TEST(Simplify, GteOfTuple) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2], %p1: s32[]) {
  %x = f32[2] parameter(0)
  %y = s32[] parameter(1)
  %t = (f32[2], s32[]) tuple(%x, %y)
  %g = s32[] get-tuple-element(%t), index=1
  ROOT (%g)
})",
                   R"(
graph main(%p0: f32[2], %p1: s32[]) {
  %x = f32[2] parameter(0)
  %y = s32[] parameter(1)
  ROOT (%y)
})",
                   "gte-of-tuple");
}

// ---- opaque ops ----

TEST(Simplify, NeverLooksThroughOptimizationBarrier) {
  // gte(barrier(x)) is not x: a rule may not see through the barrier, and
  // neg(neg(.)) across it is not neg(neg(.)).
  ExpectNotSimplified(R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %n = f32[2] negate(%x)
  %b = (f32[2]) optimization-barrier(%n)
  %g = f32[2] get-tuple-element(%b), index=0
  %m = f32[2] negate(%g)
  ROOT (%m)
})");
}

TEST(Simplify, RngOpsAreUntouched) {
  ExpectNotSimplified(R"(
graph main(%p0: u64[], %p1: u64[]) {
  %s = u64[] parameter(0)
  %o = u64[] parameter(1)
  %r = f32[4] rng-uniform(%s, %o), stream=0
  %q = f32[4] rng-normal(%s, %o), stream=1
  ROOT (%r, %q)
})");
}

TEST(Simplify, RulesFireAroundOpaqueValues) {
  // Rules may rewrite the users of a barrier's output; the barrier stays.
  ExpectSimplifies(R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %b = (f32[2]) optimization-barrier(%x)
  %g = f32[2] get-tuple-element(%b), index=0
  %m = f32[2] negate(%g)
  %n = f32[2] negate(%m)
  ROOT (%n)
})",
                   R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %b = (f32[2]) optimization-barrier(%x)
  %g = f32[2] get-tuple-element(%b), index=0
  ROOT (%g)
})",
                   "neg-neg");
}

TEST(Simplify, KeepsParametersOutputsAndAliases) {
  ExpectSimplifies(R"(
graph main(%p0: f32[2], %p1: f32[2]) {
  %x = f32[2] parameter(0)
  %y = f32[2] parameter(1)
  %n = f32[2] negate(%y)
  %m = f32[2] negate(%n)
  ROOT (%m, %x)
  ALIAS {0: 1}
})",
                   R"(
graph main(%p0: f32[2], %p1: f32[2]) {
  %x = f32[2] parameter(0)
  %y = f32[2] parameter(1)
  ROOT (%y, %x)
  ALIAS {0: 1}
})",
                   "neg-neg");
}

TEST(Simplify, UnchangedGraphReportsNoChange) {
  ExpectNotSimplified(R"(
graph main(%p0: f32[2], %p1: f32[2]) {
  %x = f32[2] parameter(0)
  %y = f32[2] parameter(1)
  %a = f32[2] add(%x, %y)
  %e = f32[2] exponential(%a)
  ROOT (%e)
})");
}

TEST(Simplify, KeepsACheckpointBarrierAndItsAnchor) {
  // The checkpoint's barrier over (input, anchor) (python/ember/checkpoint.py): no
  // rule reads through either element (gte-of-tuple is for tuples only), and the
  // anchor slice, read only by the barrier, stays.
  ExpectNotSimplified(R"(
graph main(%p0: f32[4,8], %p1: f32[4,8]) {
  %x = f32[4,8] parameter(0)
  %g = f32[4,8] parameter(1)
  %a = f32[1,1] slice(%g), start={0,0}, limit={1,1}, stride={1,1}
  %b = (f32[4,8], f32[1,1]) optimization-barrier(%x, %a)
  %xr = f32[4,8] get-tuple-element(%b), index=0
  %ar = f32[1,1] get-tuple-element(%b), index=1
  %n = f32[4,8] negate(%xr)
  ROOT (%n, %ar)
})");
}

}  // namespace
}  // namespace ember::passes
