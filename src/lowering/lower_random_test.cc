// Random lowerings: statistical checks on the interpreter's Philox draws
// (moments and a Kolmogorov-Smirnov distance), not bit equality with CPU.
// Sample size 20000: the KS critical value at alpha = 0.001 is
// 1.95 / sqrt(n) ~= 0.0138.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "lowering/lowering_test_util.h"

namespace ember::lowering {
namespace {

using testing::CallHarness;

constexpr int64_t kN = 20000;
const double kKsCritical = 1.95 / std::sqrt(static_cast<double>(kN));

std::vector<double> Draw(const std::string& op, const std::string& args, const std::string& out,
                         int64_t stream = 0, size_t output = 0) {
  CallHarness h(op);
  h.AddSpec(args);
  h.OutSpec(out);
  h.call.rng_stream = stream;
  auto r = h.Run();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  return testing::Values(r->at(output));
}

double Ks(std::vector<double> v, double (*cdf)(double)) {
  std::sort(v.begin(), v.end());
  double d = 0, n = static_cast<double>(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    d = std::max({d, std::fabs((i + 1) / n - cdf(v[i])), std::fabs(cdf(v[i]) - i / n)});
  return d;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double Var(const std::vector<double>& v) {
  double m = Mean(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size() - 1);
}

TEST(LoweringRandom, UniformAndNormal) {
  auto u = Draw("aten::rand", "L:20000 N O O O RNG", "f32[20000]");
  ASSERT_EQ(u.size(), static_cast<size_t>(kN));
  for (double x : u) ASSERT_TRUE(x >= 0 && x < 1) << x;
  EXPECT_LT(Ks(u, [](double x) { return x; }), kKsCritical);
  auto z = Draw("aten::randn", "L:20000 N O O O RNG", "f32[20000]");
  EXPECT_LT(Ks(z, [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }), kKsCritical);
  EXPECT_NEAR(Mean(z), 0, 0.03);
  EXPECT_NEAR(Var(z), 1, 0.04);
  // uniform(self, from=-3, to=5): S:f args are 0.75 in the spec, so use explicit values.
  CallHarness h("aten::uniform");
  h.AddTensor(Literal(Shape(DType::kF32, {kN})));
  h.AddScalar(ScalarArg::Kind::kFloat, -3);
  h.AddScalar(ScalarArg::Kind::kFloat, 5);
  h.AddOther();
  h.Rng();
  h.Out(DType::kF32, {kN});
  auto r = h.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto v = testing::Values(r->at(0));
  for (double x : v) ASSERT_TRUE(x >= -3 && x < 5) << x;
  EXPECT_NEAR(Mean(v), 1, 0.1);
  EXPECT_NEAR(Var(v), 64.0 / 12, 0.2);
}

TEST(LoweringRandom, StreamsDiffer) {
  auto a = Draw("aten::rand", "L:64 N O O O RNG", "f32[64]", 0);
  auto b = Draw("aten::rand", "L:64 N O O O RNG", "f32[64]", 1);
  auto a2 = Draw("aten::rand", "L:64 N O O O RNG", "f32[64]", 0);
  EXPECT_EQ(a, a2);  // same (seed, offset, stream): same numbers
  EXPECT_NE(a, b);   // two random ops of one graph never share draws
}

TEST(LoweringRandom, DropoutKeepsOneMinusPAndScales) {
  CallHarness h("aten::native_dropout");
  h.AddTensor(Literal::FromDoubles(Shape(DType::kF32, {kN}), std::vector<double>(kN, 2.0)));
  h.AddScalar(ScalarArg::Kind::kFloat, 0.3);
  h.AddBool(true);
  h.Rng();
  h.Out(DType::kF32, {kN});
  h.Out(DType::kPred, {kN});
  auto r = h.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto y = testing::Values(r->at(0)), m = testing::Values(r->at(1));
  double kept = 0;
  for (int64_t i = 0; i < kN; ++i) {
    if (m[i] != 0) {
      ++kept;
      EXPECT_NEAR(y[i], 2.0 / 0.7, 1e-6);
    } else {
      EXPECT_EQ(y[i], 0);
    }
  }
  // Binomial(20000, 0.7): sd = 65 kept elements; 5 sd.
  EXPECT_NEAR(kept / kN, 0.7, 5 * std::sqrt(0.21 / kN));
}

TEST(LoweringRandom, DropoutWithPOneIsZeros) {
  CallHarness h("aten::native_dropout");
  h.AddTensor(Literal::FromDoubles(Shape(DType::kF32, {4}), {1, 2, 3, 4}));
  h.AddScalar(ScalarArg::Kind::kFloat, 1.0);
  h.AddBool(true);
  h.Rng();
  h.Out(DType::kF32, {4});
  h.Out(DType::kPred, {4});
  auto r = h.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  testing::ExpectSameValues(r->at(0), DType::kF32, {0, 0, 0, 0}, "dropout p=1");
}

TEST(LoweringRandom, BernoulliFollowsProbabilities) {
  CallHarness h("aten::bernoulli");
  std::vector<double> p(kN);
  for (int64_t i = 0; i < kN; ++i) p[i] = i % 2 ? 0.9 : 0.1;
  h.AddTensor(Literal::FromDoubles(Shape(DType::kF32, {kN}), p));
  h.AddOther();
  h.Rng();
  h.Out(DType::kF32, {kN});
  auto r = h.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto v = testing::Values(r->at(0));
  double odd = 0, even = 0;
  for (int64_t i = 0; i < kN; ++i) (i % 2 ? odd : even) += v[i];
  EXPECT_NEAR(odd / (kN / 2), 0.9, 0.02);
  EXPECT_NEAR(even / (kN / 2), 0.1, 0.02);
}

TEST(LoweringRandom, RandintCoversTheRangeUniformly) {
  auto v = Draw("aten::randint.low", "I:-3 I:4 L:20000 N O O O RNG", "s64[20000]");
  std::vector<double> counts(7, 0);
  for (double x : v) {
    ASSERT_TRUE(x >= -3 && x < 4 && x == std::floor(x)) << x;
    counts[static_cast<int>(x) + 3] += 1;
  }
  // Chi-square with 6 degrees of freedom; 22.46 is the 0.001 critical value.
  double chi2 = 0, e = kN / 7.0;
  for (double cnt : counts) chi2 += (cnt - e) * (cnt - e) / e;
  EXPECT_LT(chi2, 22.46);
}

}  // namespace
}  // namespace ember::lowering
