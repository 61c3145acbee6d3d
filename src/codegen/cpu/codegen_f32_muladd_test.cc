// f32 multiply-adds widened to f64 (the lowering's add/sub with alpha) that
// loop kernels compute in f32 when the invariant factor is +-1
// (f32_muladd.h): the kernels match the interpreter bit for bit for every
// factor, on data where computing in f32 with any other factor would not.
#include <cmath>
#include <limits>

#include "codegen/cpu/codegen_test_util.h"
#include "codegen/cpu/f32_muladd.h"

namespace ember::codegen {
namespace {

using testing::ExpectMatchesInterpreter;
using testing::FastOptions;
using testing::TempDir;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The lowering's form (src/lowering/elementwise_util.h, Ew::MulAdd):
// convert<f32>(add(multiply(convert<f64>(x), convert<f64>(s)), convert<f64>(z))),
// with the operand orders chosen by s_first / product_first.
NodeId MulAdd(GraphBuilder& b, NodeId x, NodeId s, NodeId z, bool s_first = false,
              bool product_first = true) {
  auto wide = [&](NodeId v) { return b.Convert(v, DType::kF64); };
  NodeId p = s_first ? b.Multiply(wide(s), wide(x)) : b.Multiply(wide(x), wide(s));
  NodeId r = product_first ? b.Add(p, wide(z)) : b.Add(wide(z), p);
  return b.Convert(r, DType::kF32);
}

// x, z: f32[rows, cols] with full-mantissa values over a wide exponent range,
// specials, and pairs whose f32 and f64 roundings differ for factors != +-1.
std::vector<float> Values(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-30, 30), sign(0, 1);
  const std::vector<float> specials = {kNaN,    -kNaN, kInf,   -kInf, 0.0f,  -0.0f, 1e-40f,
                                       -1e-40f, 3e38f, -3e38f, 1.0f,  -1.0f, 0.1f};
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[i] = i < static_cast<int64_t>(specials.size())
               ? specials[i]
               : (sign(rng) ? -1.0f : 1.0f) * std::ldexp(mant(rng), ex(rng) / 10);
  }
  return v;
}

Literal F32(const Shape& s, const std::vector<float>& v) {
  std::vector<double> d(v.begin(), v.end());
  return Literal::FromDoubles(s, d);
}

TEST(CodegenF32MulAdd, FindsOnlyInvariantFactors) {
  GraphBuilder b;
  const Shape s(DType::kF32, {4, 8});
  NodeId x = b.Parameter(0, s), z = b.Parameter(1, s);
  NodeId a = b.Parameter(2, Shape(DType::kF32, {}));
  NodeId sb = b.Negate(b.BroadcastInDim(a, {4, 8}, {}));
  NodeId inv = MulAdd(b, x, sb, z, /*s_first=*/true, /*product_first=*/false);
  NodeId var = MulAdd(b, x, z, x);  // both factors vary: not a candidate
  b.SetOutputs({b.Add(inv, var)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(IsLoopInvariant(*g, sb));
  EXPECT_FALSE(IsLoopInvariant(*g, x));
  auto found = FindF32MulAdds(*g, g->outputs()[0]);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].root, inv);
  EXPECT_EQ(found[0].s, sb);
  EXPECT_EQ(found[0].x, x);
  EXPECT_EQ(found[0].z, z);
  EXPECT_TRUE(found[0].s_first);
  EXPECT_FALSE(found[0].product_first);
}

// Flat loops and row loops (a row-broadcast addend), one and two multiply-adds
// per loop, both operand orders, the factor negated, for factors +-1 (the f32
// loop), 0.5, 3, -0, inf and NaN (the f64 loop): bit for bit the interpreter.
void CheckKernels(bool fast) {
  TempDir dir;
  const int64_t rows = 7, cols = 40;
  const Shape s(DType::kF32, {rows, cols});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s), z = b.Parameter(1, s);
  NodeId alpha = b.Parameter(2, Shape(DType::kF32, {}));
  NodeId row = b.Parameter(3, Shape(DType::kF32, {cols}));
  NodeId sb = b.BroadcastInDim(alpha, {rows, cols}, {});
  NodeId neg = b.Negate(sb);
  NodeId out0 = MulAdd(b, x, sb, z);  // a + alpha * b
  NodeId out1 = MulAdd(b, z, neg, x, /*s_first=*/true, /*product_first=*/false);
  NodeId out2 = MulAdd(b, MulAdd(b, x, sb, z), neg, x);  // (x + z) - x
  NodeId rz = b.BroadcastInDim(row, {rows, cols}, {1});
  NodeId out3 = MulAdd(b, x, neg, rz);  // row loop
  b.SetOutputs({out0, out1, out2, out3});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::vector<float> xv = Values(rows * cols, 1), zv = Values(rows * cols, 2);
  const std::vector<float> rv = Values(cols, 3);

  // The data tells the loops apart: with factor 3, the f32 form differs from
  // the f64 form on some elements (so a wrongly taken f32 loop would show).
  int differs = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const float f64 = static_cast<float>(static_cast<double>(xv[i]) * 3.0 + zv[i]);
    const float f32 = xv[i] * 3.0f + zv[i];
    differs += !(f64 == f32) && !(std::isnan(f64) && std::isnan(f32));
  }
  EXPECT_GT(differs, 0);

  CodegenOptions opts = FastOptions(dir.path());
  opts.fast = fast;
  for (float a : {1.0f, -1.0f, 0.5f, 3.0f, -0.0f, kInf, kNaN}) {
    SCOPED_TRACE("alpha = " + std::to_string(a));
    std::vector<Literal> args = {F32(s, xv), F32(s, zv), F32(Shape(DType::kF32, {}), {a}),
                                 F32(Shape(DType::kF32, {cols}), rv)};
    auto k = ExpectMatchesInterpreter(*g, args, opts, ThreadParallelFor(3));
    ASSERT_TRUE(k);
    EXPECT_NE(k->source().find("f32 multiply-adds with factors of +-1"), std::string::npos);
  }
}

TEST(CodegenF32MulAdd, MatchesInterpreterForEveryFactor) { CheckKernels(/*fast=*/true); }
TEST(CodegenF32MulAdd, MatchesInterpreterForEveryFactorOptimized) { CheckKernels(/*fast=*/false); }

}  // namespace
}  // namespace ember::codegen
