// Shape inference and error reporting of GraphBuilder, for every op.
#include "ember/ir/builder.h"

#include <gtest/gtest.h>

#include <set>

namespace ember {
namespace {

Shape F32(std::vector<int64_t> d) { return Shape(DType::kF32, std::move(d)); }
Shape S64(std::vector<int64_t> d) { return Shape(DType::kS64, std::move(d)); }

// Expects the builder to have failed with InvalidArgument mentioning every fragment.
void ExpectError(const GraphBuilder& b, std::vector<std::string> fragments) {
  ASSERT_FALSE(b.status().ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << b.status().ToString();
  for (const auto& f : fragments)
    EXPECT_NE(b.status().message().find(f), std::string::npos)
        << "message '" << b.status().message() << "' lacks '" << f << "'";
}

TEST(BuilderTest, TakeStatusRecoversAndDefaultMetadataTagsNodes) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, F32({2, 3}));
  b.SetDefaultMetadata("aten::relu #0");
  NodeId bad = b.Add(x, b.Parameter(1, F32({3, 2})));  // shape mismatch: recorded error
  EXPECT_EQ(bad, kInvalidNode);
  Status err = b.TakeStatus();
  EXPECT_EQ(err.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(b.status().ok());
  NodeId y = b.Exp(x);  // building goes on
  b.SetDefaultMetadata("");
  NodeId z = b.Negate(y);
  b.SetOutputs({z});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->node(y).metadata, "aten::relu #0");
  EXPECT_EQ(g->node(z).metadata, "");
}

TEST(BuilderTest, ElementwiseShapes) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 3}));
  auto y = b.Parameter(1, F32({2, 3}));
  auto s = b.Add(x, y);
  EXPECT_EQ(b.shape(s), F32({2, 3}));
  auto c = b.Compare(x, y, ComparisonKind::kLt);
  EXPECT_EQ(b.shape(c), Shape(DType::kPred, {2, 3}));
  auto sel = b.Select(c, x, y);
  EXPECT_EQ(b.shape(sel), F32({2, 3}));
  auto lo = b.ConstantScalar(DType::kF32, 0);
  auto cl = b.Clamp(lo, x, lo);
  EXPECT_EQ(b.shape(cl), F32({2, 3}));
  auto cv = b.Convert(x, DType::kBF16);
  EXPECT_EQ(b.shape(cv), Shape(DType::kBF16, {2, 3}));
  b.SetOutputs({s, sel, cl, cv});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->outputs().size(), 4u);
  EXPECT_EQ(g->parameters().size(), 2u);
}

TEST(BuilderTest, BinaryShapeMismatchNamesOpAndShapes) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 3}));
  auto y = b.Parameter(1, F32({3, 2}));
  EXPECT_EQ(b.Add(x, y), kInvalidNode);
  ExpectError(b, {"add", "f32[2,3]", "f32[3,2]", "one shape"});
  EXPECT_FALSE(b.Build().ok());
}

TEST(BuilderTest, DTypeRules) {
  {
    GraphBuilder b;
    auto x = b.Parameter(0, Shape(DType::kS32, {4}));
    b.Unary(OpKind::kExp, x);
    ExpectError(b, {"exponential", "s32[4]", "floating-point"});
  }
  {
    GraphBuilder b;
    auto x = b.Parameter(0, F32({4}));
    b.Binary(OpKind::kShiftLeft, x, x);
    ExpectError(b, {"shift-left", "integer"});
  }
  {
    GraphBuilder b;
    auto x = b.Parameter(0, Shape(DType::kC64, {4}));
    b.Add(x, x);
    ExpectError(b, {"add", "c64[4]"});
  }
  {
    GraphBuilder b;
    auto x = b.Parameter(0, Shape(DType::kC64, {4}));
    auto t = b.Transpose(x, {0});  // data movement carries complex
    EXPECT_EQ(b.shape(t), Shape(DType::kC64, {4}));
    b.Convert(x, DType::kF32);
    ExpectError(b, {"convert", "imaginary"});
  }
}

TEST(BuilderTest, DataMovementShapes) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 3}));
  EXPECT_EQ(b.shape(b.BroadcastInDim(x, {4, 2, 3}, {1, 2})), F32({4, 2, 3}));
  EXPECT_EQ(b.shape(b.Reshape(x, {3, 2})), F32({3, 2}));
  EXPECT_EQ(b.shape(b.Transpose(x, {1, 0})), F32({3, 2}));
  EXPECT_EQ(b.shape(b.Slice(x, {0, 1}, {2, 3}, {1, 2})), F32({2, 1}));
  auto i0 = b.Constant(Literal::ScalarInt(DType::kS32, 0));
  EXPECT_EQ(b.shape(b.DynamicSlice(x, {i0, i0}, {1, 2})), F32({1, 2}));
  auto u = b.Parameter(1, F32({1, 3}));
  EXPECT_EQ(b.shape(b.DynamicUpdateSlice(x, u, {i0, i0})), F32({2, 3}));
  EXPECT_EQ(b.shape(b.Concatenate({x, x, u}, 0)), F32({5, 3}));
  auto z = b.ConstantScalar(DType::kF32, 0);
  EXPECT_EQ(b.shape(b.Pad(x, z, {1, 0}, {0, -1}, {1, 0})), F32({4, 2}));
  EXPECT_EQ(b.shape(b.Reverse(x, {0, 1})), F32({2, 3}));
  ASSERT_TRUE(b.status().ok()) << b.status().ToString();
}

TEST(BuilderTest, DataMovementErrors) {
  {
    GraphBuilder b;
    b.Reshape(b.Parameter(0, F32({2, 3})), {4, 2});
    ExpectError(b, {"reshape", "f32[2,3]", "f32[4,2]"});
  }
  {
    GraphBuilder b;
    b.Transpose(b.Parameter(0, F32({2, 3})), {0, 0});
    ExpectError(b, {"transpose", "repeated"});
  }
  {
    GraphBuilder b;
    b.Slice(b.Parameter(0, F32({2, 3})), {0, 0}, {2, 4}, {1, 1});
    ExpectError(b, {"slice", "limit (4)"});
  }
  {
    GraphBuilder b;
    b.BroadcastInDim(b.Parameter(0, F32({2, 3})), {4, 3}, {0, 1});
    ExpectError(b, {"broadcast-in-dim", "cannot broadcast"});
  }
  {
    GraphBuilder b;
    auto x = b.Parameter(0, F32({2, 3}));
    b.Concatenate({x, b.Parameter(1, F32({2, 4}))}, 0);
    ExpectError(b, {"concatenate", "dimension 1"});
  }
  {
    GraphBuilder b;
    b.Transpose(b.Parameter(0, F32({2, 3})), {0, 7});
    ExpectError(b, {"transpose", "out of range"});
  }
}

TEST(BuilderTest, ReductionShapes) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 3, 4}));
  EXPECT_EQ(b.shape(b.Reduce(x, {0, 2}, ReduceKind::kAdd)), F32({3}));
  EXPECT_EQ(b.shape(b.ArgMax(x, 1)), S64({2, 4}));
  EXPECT_EQ(b.shape(b.ArgMin(x, 2, DType::kS32)), Shape(DType::kS32, {2, 3}));
  EXPECT_EQ(
      b.shape(b.ReduceWindow(x, ReduceKind::kMaximum, {1, 2, 2}, {1, 1, 2}, {0, 0, 0}, {0, 1, 0})),
      F32({2, 3, 2}));
  ASSERT_TRUE(b.status().ok()) << b.status().ToString();
  b.Reduce(x, {3}, ReduceKind::kAdd);
  ExpectError(b, {"reduce", "out of range"});
}

TEST(BuilderTest, ContractionShapes) {
  GraphBuilder b;
  auto l = b.Parameter(0, F32({5, 2, 3}));
  auto r = b.Parameter(1, F32({5, 3, 4}));
  EXPECT_EQ(b.shape(b.DotGeneral(l, r, {{0}, {0}, {2}, {1}})), F32({5, 2, 4}));
  EXPECT_EQ(b.shape(b.DotGeneral(l, r, {{0}, {0}, {2}, {1}}, DType::kF64)),
            Shape(DType::kF64, {5, 2, 4}));
  auto in = b.Parameter(2, F32({1, 4, 8, 8}));
  auto k = b.Parameter(3, F32({6, 2, 3, 3}));
  ConvConfig cfg;
  cfg.window_strides = {2, 1};
  cfg.padding_low = {1, 1};
  cfg.padding_high = {1, 1};
  cfg.feature_group_count = 2;
  EXPECT_EQ(b.shape(b.Convolution(in, k, cfg)), F32({1, 6, 4, 8}));
  ASSERT_TRUE(b.status().ok()) << b.status().ToString();
  b.DotGeneral(l, r, {{0}, {0}, {1}, {1}});
  ExpectError(b, {"dot-general", "must match"});
}

TEST(BuilderTest, GatherScatterShapes) {
  GraphBuilder b;
  // Embedding lookup: table [10, 4], ids [2, 3] -> [2, 3, 4].
  auto table = b.Parameter(0, F32({10, 4}));
  auto ids = b.Parameter(1, S64({2, 3}));
  GatherDims gd{/*offset_dims=*/{2}, /*collapsed=*/{0}, /*start_index_map=*/{0},
                /*index_vector_dim=*/2};
  auto g = b.Gather(table, ids, gd, {1, 4});
  EXPECT_EQ(b.shape(g), F32({2, 3, 4}));
  // Scatter-add rows back: updates [2, 3, 4] into [10, 4].
  ScatterDims sd{/*update_window_dims=*/{2}, /*inserted=*/{0}, /*to_operand=*/{0},
                 /*index_vector_dim=*/2};
  auto s = b.Scatter(table, ids, g, sd, ReduceKind::kAdd);
  EXPECT_EQ(b.shape(s), F32({10, 4}));
  ASSERT_TRUE(b.status().ok()) << b.status().ToString();
  b.Gather(table, b.Parameter(2, F32({2})), gd, {1, 4});
  ExpectError(b, {"gather", "integer"});
}

TEST(BuilderTest, TuplesBarrierCustomCallRng) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2}));
  auto y = b.Parameter(1, S64({}));
  auto bar = b.OptimizationBarrier({x, y});
  EXPECT_EQ(b.shape(bar), Shape::Tuple({F32({2}), S64({})}));
  EXPECT_EQ(b.shape(b.GetTupleElement(bar, 1)), S64({}));
  auto cc = b.CustomCall("ember.test", {x}, Shape::Tuple({F32({2}), F32({2})}));
  EXPECT_TRUE(b.shape(cc).is_tuple());
  auto seed = b.Parameter(2, Shape(DType::kU64, {}));
  auto off = b.Parameter(3, Shape(DType::kU64, {}));
  EXPECT_EQ(b.shape(b.RngUniform(seed, off, F32({3, 3}), 0)), F32({3, 3}));
  EXPECT_EQ(b.shape(b.Iota(S64({4, 2}), 1)), S64({4, 2}));
  ASSERT_TRUE(b.status().ok()) << b.status().ToString();
  b.RngNormal(x, off, F32({2}), 1);
  ExpectError(b, {"rng-normal", "u64[]"});
}

TEST(BuilderTest, ParametersMustBeDense) {
  GraphBuilder b;
  auto x = b.Parameter(1, F32({2}));
  b.SetOutputs({x});
  auto g = b.Build();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("parameter(0) is missing"), std::string::npos);
}

TEST(BuilderTest, DuplicateParameterAndAliasChecks) {
  {
    GraphBuilder b;
    b.Parameter(0, F32({2}));
    b.Parameter(0, F32({2}));
    ExpectError(b, {"defined twice"});
  }
  {
    GraphBuilder b;
    auto x = b.Parameter(0, F32({2}));
    auto y = b.Reduce(x, {0}, ReduceKind::kAdd);
    b.SetOutputs({y});
    b.SetAlias(0, 0);
    auto g = b.Build();
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("differ in shape"), std::string::npos);
  }
}

TEST(BuilderTest, ErrorsAreStickyAndNeverAbort) {
  GraphBuilder b;
  EXPECT_EQ(b.Add(5, 7), kInvalidNode);  // operands that don't exist
  ExpectError(b, {"add", "not a node"});
  auto x = b.Parameter(0, F32({2}));  // after an error: no-op
  EXPECT_EQ(x, kInvalidNode);
}

TEST(BuilderTest, EveryOpHasAShapeRule) {
  // InferShape must answer (value or InvalidArgument) for every op and never
  // report an internal error, whatever the operands.
  std::vector<std::vector<Shape>> operand_sets = {
      {}, {F32({2})}, {F32({2}), F32({2})}, {F32({2}), F32({2}), F32({2})}};
  for (OpKind op : AllOps()) {
    for (const auto& ops : operand_sets) {
      auto s = InferShape(op, ops, {}, F32({2}), nullptr);
      if (!s.ok()) {
        EXPECT_NE(s.status().code(), StatusCode::kInternal) << OpName(op);
      }
    }
  }
}

TEST(DTypeTest, SixteenBitRounding) {
  EXPECT_EQ(FloatToBF16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(FloatToBF16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625: rounds up to even.
  EXPECT_EQ(FloatToBF16(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(std::nanf("")))));
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);               // rounds to inf
  EXPECT_EQ(F16ToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (0)
  EXPECT_EQ(FloatToF16(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 ulp -> 1
  EXPECT_EQ(FloatToF16(-2.0f), 0xc000);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = F16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToF16(f), h) << "f16 round trip of 0x" << std::hex << h;
  }
}

TEST(LiteralTest, FormatRoundTripsExactly) {
  Literal l = Literal::FromDoubles(F32({4}), {0.1, -0.0, 1e-45, 3.4028234663852886e38});
  EXPECT_EQ(l.ValuesToString(), "{0.1, -0, 1e-45, 3.4028235e+38}");
  Literal p = Literal::FromInts(Shape(DType::kPred, {2}), {1, 0});
  EXPECT_EQ(p.ValuesToString(), "{true, false}");
  Literal u = Literal::FromInts(Shape(DType::kU64, {1}), {-1});
  EXPECT_EQ(u.ValuesToString(), "{18446744073709551615}");
}

}  // namespace
}  // namespace ember
