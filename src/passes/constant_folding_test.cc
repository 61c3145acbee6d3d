// constant-folding: text IR in -> text IR out (then dce so only live nodes
// show); folded values come from the reference interpreter.
#include "passes/constant_folding.h"

#include <gtest/gtest.h>

#include "ember/ir/builder.h"
#include "passes/dce.h"
#include "passes/pass_test_util.h"

namespace ember::passes {
namespace {

void ExpectFolds(std::string_view in, std::string_view out) {
  ConstantFoldingPass cf;
  ExpectRewriteThenDce(cf, in, out);
}

void ExpectNotFolded(std::string_view in) {
  ConstantFoldingPass cf;
  ExpectUnchanged(cf, in);
}

TEST(ConstantFolding, FoldsArithmeticChains) {
  ExpectFolds(R"(
graph main(%p0: f32[3]) {
  %x = f32[3] parameter(0)
  %a = f32[3] constant({1, 2, 3})
  %b = f32[3] constant({0.5, -1, 4})
  %m = f32[3] multiply(%a, %b)
  %n = f32[3] negate(%m)
  %r = f32[3] add(%x, %n)
  ROOT (%r)
})",
              R"(
graph main(%p0: f32[3]) {
  %x = f32[3] parameter(0)
  %n = f32[3] constant({-0.5, 2, -12})
  %r = f32[3] add(%x, %n)
  ROOT (%r)
})");
}

TEST(ConstantFolding, FoldsDataMovementAndReductions) {
  ExpectFolds(R"(
graph main() {
  %a = s32[2,3] constant({1, 2, 3, 4, 5, 6})
  %t = s32[3,2] transpose(%a), dimensions={1,0}
  %r = s32[3] reduce(%t), dimensions={1}, to_apply=add
  %c = pred[3] compare(%r, %r), direction=EQ
  ROOT (%t, %r, %c)
})",
              R"(
graph main() {
  %t = s32[3,2] constant({1, 4, 2, 5, 3, 6})
  %r = s32[3] constant({5, 7, 9})
  %c = pred[3] constant({true, true, true})
  ROOT (%t, %r, %c)
})");
}

TEST(ConstantFolding, FoldsWithPyTorchSemantics) {
  // floor-mod remainder takes the divisor's sign; s32 add wraps; f32 -> s32
  // of NaN is INT32_MIN.
  ExpectFolds(R"(
graph main() {
  %a = s32[2] constant({-7, 2147483647})
  %b = s32[2] constant({3, 1})
  %r = s32[2] remainder(%a, %b)
  %s = s32[2] add(%a, %b)
  %f = f32[] constant({nan})
  %i = s32[] convert(%f)
  ROOT (%r, %s, %i)
})",
              R"(
graph main() {
  %r = s32[2] constant({2, 0})
  %s = s32[2] constant({-4, -2147483648})
  %i = s32[] constant({-2147483648})
  ROOT (%r, %s, %i)
})");
}

TEST(ConstantFolding, IntegerDivisionByZeroIsLeftForRunTime) {
  ExpectNotFolded(R"(
graph main() {
  %a = s32[2] constant({4, 5})
  %b = s32[2] constant({2, 0})
  %d = s32[2] divide(%a, %b)
  ROOT (%d)
})");
}

TEST(ConstantFolding, LargeResultsAreNotFolded) {
  // 2048 elements > kMaxFoldedElements.
  ExpectNotFolded(R"(
graph main() {
  %i = s32[2048] iota(), iota_dimension=0
  %c = s32[] constant({1})
  %b = s32[2048] broadcast-in-dim(%c), dimensions={}
  %a = s32[2048] add(%i, %b)
  ROOT (%a)
})");
}

TEST(ConstantFolding, ReductionOfHugeConstantIsNotFolded) {
  // The result is small but the operand has 2^16 + 1 elements.
  Graph g;
  {
    GraphBuilder b;
    Literal big(Shape(DType::kS32, {65537}));
    NodeId c = b.Constant(big);
    NodeId r = b.Reduce(c, {0}, ReduceKind::kAdd);
    b.SetOutputs({r});
    StatusOr<Graph> built = b.Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    g = *built;
  }
  ConstantFoldingPass cf;
  StatusOr<bool> changed = cf.Run(g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

TEST(ConstantFolding, ScalarBroadcastsAndLeavesStay) {
  ExpectNotFolded(R"(
graph main() {
  %c = f32[] constant({1})
  %b = f32[4] broadcast-in-dim(%c), dimensions={}
  %i = f32[4] iota(), iota_dimension=0
  ROOT (%b, %i)
})");
}

TEST(ConstantFolding, NeverFoldsRngBarrierOrCustomCall) {
  ExpectNotFolded(R"(
graph main() {
  %s = u64[] constant({1})
  %o = u64[] constant({0})
  %r = f32[4] rng-uniform(%s, %o), stream=0
  %x = f32[2] constant({1, 2})
  %b = (f32[2]) optimization-barrier(%x)
  %g = f32[2] get-tuple-element(%b), index=0
  %e = f32[2] exponential(%g)
  %c = f32[2] custom-call(%x), call_target_name="my.op"
  ROOT (%r, %e, %c)
})");
}

TEST(ConstantFolding, NoConstantOperandsReportsNoChange) {
  ExpectNotFolded(R"(
graph main(%p0: f32[2]) {
  %x = f32[2] parameter(0)
  %c = f32[2] constant({1, 2})
  %a = f32[2] add(%x, %c)
  ROOT (%a)
})");
}

}  // namespace
}  // namespace ember::passes
