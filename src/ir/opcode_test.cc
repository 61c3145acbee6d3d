// The op list and its property table (ember/ir/opcode.h): the properties
// agree with the categories and with each other; kernel names
// (ember/ir/kernel_name.h) and the typed attribute accessors
// (ember/ir/attributes.h) read them.
#include "ember/ir/opcode.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "ember/ir/attributes.h"
#include "ember/ir/builder.h"
#include "ember/ir/kernel_name.h"
#include "ember/ir/text.h"

namespace ember {
namespace {

TEST(OpPropertiesTest, AgreeWithTheCategories) {
  std::set<std::string_view> short_names;
  for (OpKind op : AllOps()) {
    SCOPED_TRACE(std::string(OpName(op)));
    const int lo = MinOperands(op), hi = MaxOperands(op);
    EXPECT_GE(lo, 0);
    EXPECT_TRUE(hi == kVariadic || hi >= lo);
    if (IsUnary(op)) EXPECT_EQ(hi, 1);
    if (IsBinary(op)) EXPECT_EQ(hi, 2);
    if (OpCategory(op) == OpCategoryKind::kLeaf) EXPECT_EQ(hi, 0);
    // A libmvec variant is a variant of a libm call.
    if (HasVectorMath(op)) EXPECT_TRUE(CallsLibm(op));
    if (CallsLibm(op)) EXPECT_TRUE(IsElementwise(op));
    EXPECT_GE(ElementCost(op), 0);
    EXPECT_FALSE(ShortOpName(op).empty());
    EXPECT_TRUE(short_names.insert(ShortOpName(op)).second) << "short name used twice";
  }
  EXPECT_EQ(static_cast<int>(AllOps().size()), kNumOps);
  EXPECT_TRUE(HasVectorMath(OpKind::kExp));
  EXPECT_TRUE(CallsLibm(OpKind::kRemainder));
  EXPECT_FALSE(HasVectorMath(OpKind::kRemainder));
  EXPECT_FALSE(CallsLibm(OpKind::kSqrt));
  EXPECT_EQ(ElementCost(OpKind::kConstant), 0);
  EXPECT_GE(ElementCost(OpKind::kExp), kExpensiveElementCost);
  EXPECT_GE(ElementCost(OpKind::kDivide), kExpensiveElementCost);
  EXPECT_LT(ElementCost(OpKind::kAdd), kExpensiveElementCost);
  EXPECT_TRUE(ResultIsDeclared(OpKind::kReshape));
  EXPECT_FALSE(ResultIsDeclared(OpKind::kTranspose));
}

// Shape inference checks every op's operand count from the table.
TEST(OpPropertiesTest, OperandCountsAreChecked) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {4}));
  b.AddNode(OpKind::kAdd, {x});
  EXPECT_NE(b.status().message().find("expected 2 operand(s), got 1"), std::string::npos)
      << b.status().ToString();
  GraphBuilder c;
  c.AddNode(OpKind::kConcatenate, {}, {{attr::Dimension.key, int64_t{0}}});
  EXPECT_NE(c.status().message().find("expected at least 1 operand(s), got 0"), std::string::npos)
      << c.status().ToString();
}

TEST(KernelNameTest, OneSchemeForBodiesAndKernels) {
  auto g = ParseGraph(R"(graph g(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={1}, to_apply=maximum
  %2 = f32[4,8] broadcast-in-dim(%1), dimensions={0}
  %3 = f32[4,8] subtract(%0, %2)
  %4 = f32[4,8] exponential(%3)
  %5 = f32[4] reduce(%4), dimensions={1}, to_apply=add
  %6 = f32[4,8] broadcast-in-dim(%5), dimensions={0}
  %7 = f32[4,8] divide(%4, %6)
  ROOT (%7)
}
)");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(KernelName(*g, 3), "fused_reduce_bcast_sub_exp_div_3");
  EXPECT_EQ(KernelName(*g, {1, 2, 3}, 0), "fused_reduce_bcast_sub_0");
  EXPECT_EQ(KernelName(*g, {0}, 1), "fused_copy_1");
  auto many = ParseGraph(R"(graph g(%p0: f32[4]) {
  %0 = f32[4] parameter(0)
  %1 = f32[4] negate(%0)
  %2 = f32[4] abs(%1)
  %3 = f32[4] exponential(%2)
  %4 = f32[4] log(%3)
  %5 = f32[4] tanh(%4)
  %6 = f32[4] sine(%5)
  %7 = f32[4] cosine(%6)
  ROOT (%7)
}
)");
  ASSERT_TRUE(many.ok()) << many.status().ToString();
  EXPECT_EQ(KernelName(*many, 0), "fused_neg_abs_exp_log_tanh_sin_etc_0");
  EXPECT_EQ(KernelName({&*g, &*many}, 2), "fused_reduce_bcast_sub_exp_div_neg_etc_2");
}

TEST(AttributesTest, TypedAccessorsReadTheDeclaredKeys) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {2, 3, 4}));
  NodeId y = b.Parameter(1, Shape(DType::kF32, {2, 4, 5}));
  DotDims dims{{0}, {0}, {2}, {1}};
  NodeId d = b.DotGeneral(x, y, dims);
  NodeId r = b.Reduce(x, {2, 1}, ReduceKind::kMaximum);
  NodeId c = b.Compare(r, r, ComparisonKind::kGe);
  b.SetOutputs({d, c});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const DotDims got = DotDimsOf(g->node(d));
  EXPECT_EQ(got.lhs_batch, dims.lhs_batch);
  EXPECT_EQ(got.rhs_batch, dims.rhs_batch);
  EXPECT_EQ(got.lhs_contracting, dims.lhs_contracting);
  EXPECT_EQ(got.rhs_contracting, dims.rhs_contracting);
  EXPECT_EQ(attr::ToApply(g->node(r)), ReduceKind::kMaximum);
  EXPECT_EQ(attr::ToApply.Text(g->node(r).attrs), "maximum");
  EXPECT_EQ(attr::Dimensions(g->node(r)), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(attr::Direction(g->node(c)), ComparisonKind::kGe);
  EXPECT_EQ(attr::Index(g->node(y)), 1);
  // Absent: the type's default, or the one given.
  EXPECT_TRUE(attr::Stride(g->node(r)).empty());
  EXPECT_EQ(attr::FeatureGroupCount(g->node(r), 1), 1);
  EXPECT_FALSE(attr::Kind.Find(g->node(r).attrs).has_value());
  EXPECT_FALSE(attr::ToApply.In(g->node(c).attrs));
}

}  // namespace
}  // namespace ember
