// Elementwise lowerings against values printed by eager PyTorch 2.13 on CPU
// (the expressions are quoted next to each expectation).
#include <gtest/gtest.h>

#include <cmath>

#include "lowering/lowering_test_util.h"
#include "lowering/promotion.h"

namespace ember::lowering {
namespace {

using testing::CallHarness;
using testing::ExpectNearValues;
using testing::ExpectSameValues;

constexpr double kNaN = NAN;
constexpr double kInf = INFINITY;

Literal F32(std::vector<double> v) {
  return Literal::FromDoubles(Shape(DType::kF32, {static_cast<int64_t>(v.size())}), v);
}
Literal Ints(DType t, std::vector<int64_t> v) {
  return Literal::FromInts(Shape(t, {static_cast<int64_t>(v.size())}), v);
}

TEST(Promotion, ResultTypeFollowsEager) {
  auto tensor = [](DType t, bool zero_dim = false) {
    Val v;
    v.dtype = t;
    v.tier = zero_dim ? PromoTier::kZeroDim : PromoTier::kDimensioned;
    return v;
  };
  auto wrapped = [](DType t) {
    Val v;
    v.dtype = t;
    v.tier = PromoTier::kWrapped;
    return v;
  };
  // torch.ones(3, dtype=torch.int32) * 0.5 -> float32 (wrapped float = default dtype)
  EXPECT_EQ(ResultType({tensor(DType::kS32), wrapped(DType::kF64)}), DType::kF32);
  // int32 tensor + torch.tensor(2.5, dtype=float64) (0-d) -> float64
  EXPECT_EQ(ResultType({tensor(DType::kS32), tensor(DType::kF64, true)}), DType::kF64);
  // float32 tensor + 0-d float64 tensor -> float32 (same category)
  EXPECT_EQ(ResultType({tensor(DType::kF32), tensor(DType::kF64, true)}), DType::kF32);
  // uint8 + int8 -> int16; bf16 + f16 -> f32; bool tensor + 1 -> int64
  EXPECT_EQ(ResultType({tensor(DType::kU8), tensor(DType::kS8)}), DType::kS16);
  EXPECT_EQ(ResultType({tensor(DType::kBF16), tensor(DType::kF16)}), DType::kF32);
  EXPECT_EQ(ResultType({tensor(DType::kPred), wrapped(DType::kS64)}), DType::kS64);
  // int16 tensor + 3 -> int16; bf16 tensor + 2.5 -> bf16
  EXPECT_EQ(ResultType({tensor(DType::kS16), wrapped(DType::kS64)}), DType::kS16);
  EXPECT_EQ(ResultType({tensor(DType::kBF16), wrapped(DType::kF64)}), DType::kBF16);
  // uint32 + int32: eager raises
  EXPECT_FALSE(ResultType({tensor(DType::kU32), tensor(DType::kS32)}).has_value());
  EXPECT_EQ(ResultType({tensor(DType::kU32), tensor(DType::kF32)}), DType::kF32);
}

TEST(Promotion, BroadcastShapes) {
  EXPECT_EQ(*BroadcastShapes({2, 1, 3}, {4, 1}), (std::vector<int64_t>{2, 4, 3}));
  EXPECT_EQ(*BroadcastShapes({}, {5}), (std::vector<int64_t>{5}));
  EXPECT_FALSE(BroadcastShapes({2, 3}, {4}).has_value());
}

TEST(Elementwise, DivRoundingModesFloat) {
  // a = [-7.5, 7.5, -7.5, 7.5, 0.0, -0.0, 5.0, -1e-20, 3.0, nan, inf]
  // b = [2, 2, -2, -2, -3, 3, 0, 1, inf, 1, 2]
  std::vector<double> a = {-7.5, 7.5, -7.5, 7.5, 0.0, -0.0, 5.0, -1e-20, 3.0, kNaN, kInf};
  std::vector<double> d = {2, 2, -2, -2, -3, 3, 0, 1, kInf, 1, 2};
  // torch.div(a, b, rounding_mode='floor')
  std::vector<double> floor = {-4, 3, 3, -4, -0.0, -0.0, kInf, -1, 0, kNaN, kNaN};
  // torch.div(a, b, rounding_mode='trunc')
  std::vector<double> trunc = {-3, 3, 3, -3, -0.0, -0.0, kInf, -0.0, 0, kNaN, kInf};
  for (auto [mode, want] : {std::pair{"floor", floor}, std::pair{"trunc", trunc}}) {
    CallHarness h("aten::div.Tensor_mode");
    h.AddTensor(F32(a));
    h.AddTensor(F32(d));
    h.AddString(mode);
    h.Out(DType::kF32, {11});
    auto r = h.Run();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectSameValues(r->at(0), DType::kF32, want, mode);
  }
}

TEST(Elementwise, DivRoundingModesInt) {
  // ai = int32 [-7, 7, -7, 7, 0, 6], bi = int32 [2, 2, -2, -2, 5, -3]
  std::vector<int64_t> a = {-7, 7, -7, 7, 0, 6}, d = {2, 2, -2, -2, 5, -3};
  struct Case {
    const char* mode;
    DType out;
    std::vector<double> want;
  };
  for (const Case& c : {Case{"floor", DType::kS32, {-4, 3, 3, -4, 0, -2}},
                        Case{"trunc", DType::kS32, {-3, 3, 3, -3, 0, -2}},
                        Case{nullptr, DType::kF32, {-3.5, 3.5, 3.5, -3.5, 0, -2}}}) {
    CallHarness h(c.mode ? "aten::div.Tensor_mode" : "aten::div.Tensor");
    h.AddTensor(Ints(DType::kS32, a));
    h.AddTensor(Ints(DType::kS32, d));
    if (c.mode) h.AddString(c.mode);
    h.Out(c.out, {6});
    auto r = h.Run();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectSameValues(r->at(0), c.out, c.want, c.mode ? c.mode : "true division");
  }
  // Integer division by zero is a data error at run time (eager: ZeroDivisionError).
  CallHarness h("aten::div.Tensor_mode");
  h.AddTensor(Ints(DType::kS32, {1}));
  h.AddTensor(Ints(DType::kS32, {0}));
  h.AddString("floor");
  h.Out(DType::kS32, {1});
  auto r = h.Run();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
}

TEST(Elementwise, AddWithAlphaAndWrappedScalar) {
  // torch.tensor([1, 2, 3], dtype=torch.int32).add(torch.tensor([10, 20, 30], dtype=torch.int32),
  // alpha=2)
  CallHarness h("aten::add.Tensor");
  h.AddTensor(Ints(DType::kS32, {1, 2, 3}));
  h.AddTensor(Ints(DType::kS32, {10, 20, 30}));
  h.AddScalar(ScalarArg::Kind::kInt, 2);
  h.Out(DType::kS32, {3});
  auto r = h.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectSameValues(r->at(0), DType::kS32, {21, 42, 63}, "add alpha");

  // torch.tensor([1, 2, 3], dtype=torch.int32) * 0.5 -> float32 [0.5, 1, 1.5]
  CallHarness m("aten::mul.Tensor");
  m.AddTensor(Ints(DType::kS32, {1, 2, 3}));
  m.AddTensor(Literal::ScalarDouble(DType::kF64, 0.5), /*wrapped=*/true);
  m.Out(DType::kF32, {3});
  auto rm = m.Run();
  ASSERT_TRUE(rm.ok()) << rm.status().ToString();
  ExpectSameValues(rm->at(0), DType::kF32, {0.5, 1, 1.5}, "int * 0.5");
}

TEST(Elementwise, Bf16ComputedInF32RoundedOnce) {
  // torch.tensor([1.0, 3.0, 0.1], dtype=torch.bfloat16) * 0.1
  //   -> [0.10009765625, 0.30078125, 0.010009765625]
  CallHarness h("aten::mul.Scalar");
  h.AddTensor(Literal::FromDoubles(Shape(DType::kBF16, {3}), {1.0, 3.0, 0.1}));
  h.AddScalar(ScalarArg::Kind::kFloat, 0.1);
  h.Out(DType::kBF16, {3});
  auto r = h.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectSameValues(r->at(0), DType::kBF16, {0.10009765625, 0.30078125, 0.010009765625}, "bf16 mul");
}

TEST(Elementwise, BoolArithmetic) {
  // torch.tensor([True, False]) + torch.tensor([True, True]) -> [True, True]
  CallHarness h("aten::add.Tensor");
  h.AddTensor(Literal::FromInts(Shape(DType::kPred, {2}), {1, 0}));
  h.AddTensor(Literal::FromInts(Shape(DType::kPred, {2}), {1, 1}));
  h.AddScalar(ScalarArg::Kind::kInt, 1);
  h.Out(DType::kPred, {2});
  auto r = h.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectSameValues(r->at(0), DType::kPred, {1, 1}, "bool add");
}

TEST(Elementwise, ReluKeepsNegativeZeroAndNaN) {
  // torch.relu(torch.tensor([-0.0, nan, -1.0, 2.0])) -> [-0.0, nan, 0.0, 2.0]
  CallHarness h("aten::relu");
  h.AddTensor(F32({-0.0, kNaN, -1.0, 2.0}));
  h.Out(DType::kF32, {4});
  auto r = h.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectSameValues(r->at(0), DType::kF32, {-0.0, kNaN, 0.0, 2.0}, "relu");
}

TEST(Elementwise, ClampLerpWhereMaskedFill) {
  {  // torch.clamp(torch.tensor([nan, -3.0, 5.0, 1.0]), min=-1.0, max=2.0) -> [nan, -1, 2, 1]
    CallHarness h("aten::clamp");
    h.AddTensor(F32({kNaN, -3, 5, 1}));
    h.AddScalar(ScalarArg::Kind::kFloat, -1);
    h.AddScalar(ScalarArg::Kind::kFloat, 2);
    h.Out(DType::kF32, {4});
    auto r = h.Run();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectSameValues(r->at(0), DType::kF32, {kNaN, -1, 2, 1}, "clamp");
  }
  {  // torch.lerp(torch.tensor([1., 2.]), torch.tensor([3., 10.]), torch.tensor([0.25, 0.75])) ->
     // [1.5, 8]
    CallHarness h("aten::lerp.Tensor");
    h.AddTensor(F32({1, 2}));
    h.AddTensor(F32({3, 10}));
    h.AddTensor(F32({0.25, 0.75}));
    h.Out(DType::kF32, {2});
    auto r = h.Run();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectSameValues(r->at(0), DType::kF32, {1.5, 8}, "lerp");
  }
  {  // torch.where(torch.tensor([[True], [False]]), torch.tensor([1., 2.]), 7) -> [[1, 2], [7, 7]]
    CallHarness h("aten::where.ScalarOther");
    h.AddTensor(Literal::FromInts(Shape(DType::kPred, {2, 1}), {1, 0}));
    h.AddTensor(F32({1, 2}));
    h.AddScalar(ScalarArg::Kind::kInt, 7);
    h.Out(DType::kF32, {2, 2});
    auto r = h.Run();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectSameValues(r->at(0), DType::kF32, {1, 2, 7, 7}, "where");
  }
  {  // torch.tensor([1, 2, 3]).masked_fill(torch.tensor([True, False, True]), 2.7) -> [2, 2, 2]
    CallHarness h("aten::masked_fill.Scalar");
    h.AddTensor(Ints(DType::kS64, {1, 2, 3}));
    h.AddTensor(Literal::FromInts(Shape(DType::kPred, {3}), {1, 0, 1}));
    h.AddScalar(ScalarArg::Kind::kFloat, 2.7);
    h.Out(DType::kS64, {3});
    auto r = h.Run();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectSameValues(r->at(0), DType::kS64, {2, 2, 2}, "masked_fill");
  }
}

TEST(Elementwise, UnaryMathMatchesLibm) {
  std::vector<double> x = {0.25, 1.0, 2.0, 8.0};
  struct Case {
    const char* op;
    double (*f)(double);
  };
  for (const Case& c : {Case{"aten::exp", [](double v) { return std::exp(v); }},
                        Case{"aten::log2", [](double v) { return std::log2(v); }},
                        Case{"aten::log10", [](double v) { return std::log10(v); }},
                        Case{"aten::exp2", [](double v) { return std::exp2(v); }},
                        Case{"aten::rsqrt", [](double v) { return 1 / std::sqrt(v); }},
                        Case{"aten::sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }},
                        Case{"aten::reciprocal", [](double v) { return 1 / v; }}}) {
    CallHarness h(c.op);
    h.AddTensor(F32(x));
    h.Out(DType::kF32, {4});
    auto r = h.Run();
    ASSERT_TRUE(r.ok()) << c.op << ": " << r.status().ToString();
    std::vector<double> want;
    for (double v : x) want.push_back(c.f(v));
    ExpectNearValues(r->at(0), want, 2e-7, 0, c.op);
  }
  // exp of an int tensor is float32 (Meta's output dtype).
  CallHarness h("aten::exp");
  h.AddTensor(Ints(DType::kS64, {0, 1}));
  h.Out(DType::kF32, {2});
  auto r = h.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectNearValues(r->at(0), {1, std::exp(1.0)}, 1e-7, 0, "exp(int)");
}

TEST(Elementwise, DeclinesComplexAndFloatFmodWithoutNodes) {
  for (auto [op, dt] :
       {std::pair{"aten::add.Tensor", DType::kC64}, std::pair{"aten::fmod.Tensor", DType::kF32}}) {
    CallHarness h(op);
    h.AddTensor(Literal(Shape(dt, {2})));
    h.AddTensor(Literal(Shape(dt, {2})));
    if (std::string(op) == "aten::add.Tensor") h.AddScalar(ScalarArg::Kind::kInt, 1);
    h.Out(dt, {2});
    int before = h.b.num_nodes();
    auto r = h.Lower();
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(IsDeclined(r.status())) << r.status().ToString();
    EXPECT_EQ(h.b.num_nodes(), before) << op;
  }
}

}  // namespace
}  // namespace ember::lowering
