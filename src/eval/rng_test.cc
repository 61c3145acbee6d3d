// Tests of Philox-4x32-10 (known-answer vectors from Random123's
// kat_vectors) and of rng-uniform / rng-normal in the reference interpreter:
// the documented counter scheme, determinism, distinct offsets/streams/seeds,
// moments within 4 sigma and a Kolmogorov-Smirnov statistic below the 0.1%
// critical value for 10^5 draws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ember/eval/interpreter.h"
#include "ember/ir/builder.h"
#include "eval/ops.h"
#include "eval/philox.h"

namespace ember {
namespace {

// ---- Philox known answers (Random123 kat_vectors, philox4x32_10) ------------

constexpr PhiloxCounter kZeroOut = Philox4x32_10({0, 0, 0, 0}, {0, 0});
static_assert(kZeroOut[0] == 0x6627e8d5u && kZeroOut[3] == 0x9b00dbd8u, "Philox KAT (zeros)");

TEST(Philox, KnownAnswerVectors) {
  struct Kat {
    PhiloxCounter ctr;
    PhiloxKey key;
    PhiloxCounter want;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    PhiloxCounter got = Philox4x32_10(k.ctr, k.key);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], k.want[i]) << "word " << i;
  }
}

TEST(Philox, CounterScheme) {
  // key = (seed lo, seed hi); counter = (block lo, block hi ^ stream, offset lo, offset hi).
  const uint64_t seed = 0x0123456789abcdefULL, offset = 0xfedcba9876543210ULL;
  PhiloxCounter direct =
      Philox4x32_10({7, 0 ^ 5u, 0x76543210u, 0xfedcba98u}, {0x89abcdefu, 0x01234567u});
  PhiloxCounter block = EmberRngBlock(seed, offset, 5, 7);
  EXPECT_EQ(direct, block);
  EXPECT_EQ(EmberRngWord(seed, offset, 5, 7 * 4 + 2), direct[2]);
  EXPECT_EQ(UniformFloatFromBits(0xffffffffu), 1.0f - 0x1p-24f);
  EXPECT_EQ(UniformFloatFromBits(0x000000ffu), 0.0f);
  EXPECT_EQ(UniformDoubleFromBits(0xffffffffu, 0xffffffffu), 1.0 - 0x1p-53);
  EXPECT_EQ(UniformDoubleFromBits(0, 0x800u), 0x1p-53);
}

// ---- interpreter draws ----------------------------------------------------------

StatusOr<Literal> Draw(OpKind op, DType t, int64_t n, uint64_t seed, uint64_t offset,
                       int64_t stream) {
  Literal s = Literal::ScalarInt(DType::kU64, static_cast<int64_t>(seed));
  Literal o = Literal::ScalarInt(DType::kU64, static_cast<int64_t>(offset));
  GraphBuilder b;
  NodeId ps = b.Parameter(0, s.shape());
  NodeId po = b.Parameter(1, o.shape());
  Shape shape(t, {n});
  NodeId r = op == OpKind::kRngUniform ? b.RngUniform(ps, po, shape, stream)
                                       : b.RngNormal(ps, po, shape, stream);
  b.SetOutputs({r});
  EMBER_ASSIGN_OR_RETURN(Graph g, b.Build());
  return eval::EvalRng(g.node(r), {&s, &o});
}

std::vector<double> Values(const Literal& l) {
  std::vector<double> v(static_cast<size_t>(l.num_elements()));
  for (int64_t i = 0; i < l.num_elements(); ++i) v[static_cast<size_t>(i)] = l.GetDouble(i);
  return v;
}

struct Moments {
  double mean, var, kurtosis;
};
Moments ComputeMoments(const std::vector<double>& v) {
  double n = static_cast<double>(v.size()), m = 0;
  for (double x : v) m += x;
  m /= n;
  double m2 = 0, m4 = 0;
  for (double x : v) {
    double d = (x - m) * (x - m);
    m2 += d;
    m4 += d * d;
  }
  m2 /= n;
  m4 /= n;
  return {m, m2, m4 / (m2 * m2)};
}

// Kolmogorov-Smirnov statistic of the sample against `cdf`.
template <typename Cdf>
double KolmogorovSmirnov(std::vector<double> v, Cdf cdf) {
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  double d = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    double f = cdf(v[i]);
    d = std::max({d, (static_cast<double>(i) + 1) / n - f, f - static_cast<double>(i) / n});
  }
  return d;
}

double NormalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

constexpr int64_t kN = 100000;
const DType kRngTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};

TEST(Rng, MatchesTheDocumentedScheme) {
  const uint64_t seed = 42, offset = 3;
  auto u = Draw(OpKind::kRngUniform, DType::kF32, 9, seed, offset, 11);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  for (int64_t i = 0; i < 9; ++i) {
    EXPECT_EQ(u->data_as<float>()[i], UniformFloatFromBits(EmberRngWord(seed, offset, 11, i))) << i;
  }
  auto d = Draw(OpKind::kRngUniform, DType::kF64, 5, seed, offset, 11);
  ASSERT_TRUE(d.ok());
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(d->data_as<double>()[i],
              UniformDoubleFromBits(EmberRngWord(seed, offset, 11, 2 * i),
                                    EmberRngWord(seed, offset, 11, 2 * i + 1)));
  }
  auto z = Draw(OpKind::kRngNormal, DType::kF32, 3, seed, offset, 11);
  ASSERT_TRUE(z.ok());
  for (int64_t i = 0; i < 3; ++i) {
    float u1 = 1.0f - UniformFloatFromBits(EmberRngWord(seed, offset, 11, 2 * i));
    float u2 = UniformFloatFromBits(EmberRngWord(seed, offset, 11, 2 * i + 1));
    const float two_pi = static_cast<float>(6.283185307179586476925286766559);
    float want = std::sqrt(-2.0f * std::log(u1)) * std::cos(two_pi * u2);
    EXPECT_EQ(z->data_as<float>()[i], want);
  }
}

TEST(Rng, DeterministicAndPrefixStable) {
  for (OpKind op : {OpKind::kRngUniform, OpKind::kRngNormal}) {
    for (DType t : kRngTypes) {
      SCOPED_TRACE(std::string(OpName(op)) + " " + std::string(DTypeName(t)));
      auto a = Draw(op, t, 1000, 1234, 5, 0);
      auto b = Draw(op, t, 1000, 1234, 5, 0);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_TRUE(a->BitwiseEquals(*b));
      // Element i does not depend on the size of the draw.
      auto prefix = Draw(op, t, 37, 1234, 5, 0);
      ASSERT_TRUE(prefix.ok());
      EXPECT_EQ(std::memcmp(prefix->data(), a->data(), static_cast<size_t>(prefix->size_bytes())),
                0);
    }
  }
}

// Fraction of positions where two draws hold the same value.
double FractionEqual(const Literal& a, const Literal& b) {
  int64_t same = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) same += a.GetDouble(i) == b.GetDouble(i);
  return static_cast<double>(same) / static_cast<double>(a.num_elements());
}

TEST(Rng, SeedsOffsetsAndStreamsDiffer) {
  for (OpKind op : {OpKind::kRngUniform, OpKind::kRngNormal}) {
    for (DType t : {DType::kF32, DType::kF64}) {
      SCOPED_TRACE(std::string(OpName(op)) + " " + std::string(DTypeName(t)));
      auto base = Draw(op, t, 1000, 7, 100, 0);
      ASSERT_TRUE(base.ok());
      const std::vector<StatusOr<Literal>> others = {
          Draw(op, t, 1000, 8, 100, 0),                        // seed
          Draw(op, t, 1000, 7 + (uint64_t{1} << 32), 100, 0),  // seed high word
          Draw(op, t, 1000, 7, 101, 0),                        // offset
          Draw(op, t, 1000, 7, 100 + (uint64_t{1} << 32), 0),  // offset high word
          Draw(op, t, 1000, 7, 100, 1),                        // stream
          Draw(op, t, 1000, 7, 100, -1),
      };
      for (size_t k = 0; k < others.size(); ++k) {
        ASSERT_TRUE(others[k].ok());
        EXPECT_LT(FractionEqual(*base, *others[k]), 0.01) << "variant " << k;
      }
      // Consecutive offsets are not shifted copies of each other.
      const Literal& next = *others[2];
      for (int64_t shift = 1; shift <= 8; ++shift) {
        int64_t same = 0;
        for (int64_t i = 0; i + shift < 1000; ++i)
          same += base->GetDouble(i + shift) == next.GetDouble(i);
        EXPECT_LT(same, 10) << "shift " << shift;
      }
    }
  }
}

TEST(Rng, UniformMomentsRangeAndKS) {
  for (DType t : kRngTypes) {
    SCOPED_TRACE(DTypeName(t));
    auto u = Draw(OpKind::kRngUniform, t, kN, 2024, 0, 3);
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    std::vector<double> v = Values(*u);
    EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.0);
    EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0);
    Moments m = ComputeMoments(v);
    const double n = static_cast<double>(kN);
    // Mean 1/2 (sd 1/sqrt(12 n)); variance 1/12 (sd sqrt((1/80 - 1/144) / n)).
    EXPECT_NEAR(m.mean, 0.5, 4 / std::sqrt(12 * n));
    EXPECT_NEAR(m.var, 1.0 / 12, 4 * std::sqrt((1.0 / 180) / n) + (t == DType::kBF16 ? 1e-4 : 0));
    if (t == DType::kF32 || t == DType::kF64) {
      // 0.1% critical value of the KS statistic: 1.949 / sqrt(n).
      double d = KolmogorovSmirnov(v, [](double x) { return std::clamp(x, 0.0, 1.0); });
      EXPECT_LT(d, 1.949 / std::sqrt(n));
    }
  }
}

TEST(Rng, SixteenBitUniformNeverRoundsToOne) {
  // bf16 rounds u >= 1 - 2^-9 up to 1.0 (p = 2^-9 per draw); those are
  // clamped to 1 - 2^-8, the largest bf16 below 1.
  auto b = Draw(OpKind::kRngUniform, DType::kBF16, kN, 99, 0, 0);
  ASSERT_TRUE(b.ok());
  int64_t at_top = 0;
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_LT(b->GetDouble(i), 1.0);
    at_top += b->GetDouble(i) == 1.0 - 0x1p-8;
  }
  EXPECT_GT(at_top, 100);  // ~ kN * (2^-9 + 2^-9) expected
  auto h = Draw(OpKind::kRngUniform, DType::kF16, kN, 99, 0, 0);
  ASSERT_TRUE(h.ok());
  for (int64_t i = 0; i < kN; ++i) ASSERT_LT(h->GetDouble(i), 1.0);
}

TEST(Rng, F64UniformUsesFiftyThreeBits) {
  auto d = Draw(OpKind::kRngUniform, DType::kF64, 100, 5, 5, 5);
  ASSERT_TRUE(d.ok());
  int64_t fine = 0;
  for (int64_t i = 0; i < 100; ++i) {
    double scaled = d->data_as<double>()[i] * 0x1p24;
    fine += scaled != std::floor(scaled);
  }
  EXPECT_GT(fine, 90);
}

TEST(Rng, NormalMomentsAndKS) {
  for (DType t : kRngTypes) {
    SCOPED_TRACE(DTypeName(t));
    auto z = Draw(OpKind::kRngNormal, t, kN, 77, 12, 0);
    ASSERT_TRUE(z.ok()) << z.status().ToString();
    std::vector<double> v = Values(*z);
    for (double x : v) ASSERT_TRUE(std::isfinite(x));
    Moments m = ComputeMoments(v);
    const double n = static_cast<double>(kN);
    EXPECT_NEAR(m.mean, 0.0, 4 / std::sqrt(n));
    EXPECT_NEAR(m.var, 1.0, 4 * std::sqrt(2 / n) + (t == DType::kBF16 ? 1e-3 : 0));
    EXPECT_NEAR(m.kurtosis, 3.0, 4 * std::sqrt(24 / n));
    if (t == DType::kF32 || t == DType::kF64) {
      EXPECT_LT(KolmogorovSmirnov(v, NormalCdf), 1.949 / std::sqrt(n));
    }
  }
}

TEST(Rng, ThroughEvaluateWithConstantSeed) {
  GraphBuilder b;
  NodeId seed = b.Constant(Literal::ScalarInt(DType::kU64, 42));
  NodeId offset = b.Parameter(0, Shape(DType::kU64, {}));
  NodeId u = b.RngUniform(seed, offset, Shape(DType::kF32, {2, 3}), 11);
  NodeId z = b.RngNormal(seed, offset, Shape(DType::kBF16, {4}), 12);
  b.SetOutputs({u, z});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Literal off = Literal::ScalarInt(DType::kU64, 3);
  auto out = Evaluate(*g, std::vector<const Literal*>{&off});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 2u);
  auto want_u = Draw(OpKind::kRngUniform, DType::kF32, 6, 42, 3, 11);
  auto want_z = Draw(OpKind::kRngNormal, DType::kBF16, 4, 42, 3, 12);
  ASSERT_TRUE(want_u.ok() && want_z.ok());
  EXPECT_EQ(std::memcmp((*out)[0].data(), want_u->data(), 24), 0);
  EXPECT_EQ(std::memcmp((*out)[1].data(), want_z->data(), 8), 0);
}

}  // namespace
}  // namespace ember
