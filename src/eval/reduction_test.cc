// Interpreter results of reduce, argmax/argmin and reduce-window against
// hand-computed values, including NaN propagation, pairwise f32 summation,
// f32 accumulation of bf16, integer wrap-around and empty reductions.
#include <cmath>

#include "eval/interp_test_util.h"

namespace ember {
namespace {

using testing::Doubles;
using testing::F32Lit;
using testing::IntLit;
using testing::Ints;
using testing::Lit;
using testing::Run1;

Shape F32(std::vector<int64_t> d) { return Shape(DType::kF32, std::move(d)); }

StatusOr<Literal> ReduceOf(const Literal& x, std::vector<int64_t> dims, ReduceKind k) {
  GraphBuilder b;
  auto p = b.Parameter(0, x.shape());
  auto r = b.Reduce(p, std::move(dims), k);
  return Run1(b, r, {x});
}

TEST(ReduceTest, SumOverEachDimAndAll) {
  Literal x = F32Lit({2, 3}, {1, 2, 3, 4, 5, 6});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r1, ReduceOf(x, {1}, ReduceKind::kAdd));
  EXPECT_EQ(Doubles(r1), (std::vector<double>{6, 15}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r0, ReduceOf(x, {0}, ReduceKind::kAdd));
  EXPECT_EQ(Doubles(r0), (std::vector<double>{5, 7, 9}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal ra, ReduceOf(x, {0, 1}, ReduceKind::kAdd));
  EXPECT_EQ(ra.shape(), F32({}));
  EXPECT_EQ(Doubles(ra), (std::vector<double>{21}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal rn, ReduceOf(x, {}, ReduceKind::kAdd));
  EXPECT_EQ(Doubles(rn), Doubles(x));
}

// torch.sum starts from +0.0: a sum of -0.0s is +0.0 (also over no dims),
// while max/min/multiply keep a lone -0.0.
TEST(ReduceTest, SumOfNegativeZerosIsPositiveZero) {
  Literal x = F32Lit({2, 3}, {-0.0, -0.0, -0.0, -0.0, -0.0, -0.0});
  for (std::vector<int64_t> dims : {std::vector<int64_t>{1}, {0, 1}, {}}) {
    EMBER_ASSERT_OK_AND_ASSIGN(Literal r, ReduceOf(x, dims, ReduceKind::kAdd));
    for (int64_t i = 0; i < r.num_elements(); ++i) EXPECT_FALSE(std::signbit(r.GetDouble(i)));
  }
  EMBER_ASSERT_OK_AND_ASSIGN(Literal m, ReduceOf(x, {1}, ReduceKind::kMaximum));
  EXPECT_TRUE(std::signbit(m.GetDouble(0)));
}

TEST(ReduceTest, ThreeDimsNonAdjacent) {
  // x[a][b][c] = a*100 + b*10 + c over [2,3,2]; reduce {0, 2}: sum over a, c.
  std::vector<double> v;
  for (int a = 0; a < 2; ++a)
    for (int bb = 0; bb < 3; ++bb)
      for (int c = 0; c < 2; ++c) v.push_back(a * 100 + bb * 10 + c);
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, ReduceOf(F32Lit({2, 3, 2}, v), {2, 0}, ReduceKind::kAdd));
  // for each b: sum = 2*(0+100) + 4*10b + 2*(0+1) = 202 + 40b
  EXPECT_EQ(Doubles(r), (std::vector<double>{202, 242, 282}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal m,
                             ReduceOf(F32Lit({2, 3, 2}, v), {0, 2}, ReduceKind::kMaximum));
  EXPECT_EQ(Doubles(m), (std::vector<double>{101, 111, 121}));
}

TEST(ReduceTest, PairwiseF32SumOf2To25OnesIsExact) {
  // A sequential f32 sum stops at 2^24 = 16777216.
  GraphBuilder b;
  auto one = b.ConstantScalar(DType::kF32, 1);
  auto ones = b.BroadcastInDim(one, {int64_t{1} << 25}, {});
  auto s = b.Reduce(ones, {0}, ReduceKind::kAdd);
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Run1(b, s, {}));
  EXPECT_EQ(r.GetDouble(0), 33554432.0);
}

TEST(ReduceTest, F32SumErrorGrowsLikeLogN) {
  // 2^20 values in [0, 1): the error against an f64 sum must stay within
  // log2(n) * eps * sum|x| (a sequential f32 sum misses this by ~10x).
  const int64_t n = int64_t{1} << 20;
  uint32_t s = 12345;
  double exact = 0;
  Literal x(Shape(DType::kF32, {n}));
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    float f = static_cast<float>(s >> 8) / 16777216.0f;
    x.data_as<float>()[i] = f;
    exact += f;
  }
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, ReduceOf(x, {0}, ReduceKind::kAdd));
  const double bound = 20 * std::ldexp(1.0, -24) * exact;
  EXPECT_LE(std::fabs(r.GetDouble(0) - exact), bound)
      << "sum " << r.GetDouble(0) << " exact " << exact;
}

TEST(ReduceTest, BF16AccumulatesInF32) {
  // In bf16 a running sum of ones sticks at 256; accumulated in f32 it is 1000.
  Literal x = Lit(DType::kBF16, {1000}, std::vector<double>(1000, 1.0));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, ReduceOf(x, {0}, ReduceKind::kAdd));
  EXPECT_EQ(r.shape(), Shape(DType::kBF16, {}));
  EXPECT_EQ(r.GetDouble(0), 1000.0);
  Literal h = Lit(DType::kF16, {4096}, std::vector<double>(4096, 1.0));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal rh, ReduceOf(h, {0}, ReduceKind::kAdd));
  EXPECT_EQ(rh.GetDouble(0), 4096.0);  // f16 alone stalls at 2048
}

TEST(ReduceTest, IntegerSumAndProductWrap) {
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r, ReduceOf(IntLit(DType::kS8, {3}, {100, 100, 1}), {0}, ReduceKind::kAdd));
  EXPECT_EQ(Ints(r), (std::vector<int64_t>{-55}));
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal p, ReduceOf(IntLit(DType::kS32, {2}, {65536, 65536}), {0}, ReduceKind::kMultiply));
  EXPECT_EQ(Ints(p), (std::vector<int64_t>{0}));
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal q, ReduceOf(IntLit(DType::kU16, {2}, {65535, 65535}), {0}, ReduceKind::kMultiply));
  EXPECT_EQ(Ints(q), (std::vector<int64_t>{1}));  // (2^16-1)^2 mod 2^16
}

TEST(ReduceTest, MaxMinPropagateNaN) {
  Literal x = F32Lit({2, 3}, {1, NAN, 3, -1, -2, -3});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal mx, ReduceOf(x, {1}, ReduceKind::kMaximum));
  EXPECT_TRUE(std::isnan(mx.GetDouble(0)));
  EXPECT_EQ(mx.GetDouble(1), -1);
  EMBER_ASSERT_OK_AND_ASSIGN(Literal mn, ReduceOf(x, {1}, ReduceKind::kMinimum));
  EXPECT_TRUE(std::isnan(mn.GetDouble(0)));
  EXPECT_EQ(mn.GetDouble(1), -3);
}

TEST(ReduceTest, EmptyReductionGivesIdentity) {
  Literal x = F32Lit({0, 2}, {});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal s, ReduceOf(x, {0}, ReduceKind::kAdd));
  EXPECT_EQ(Doubles(s), (std::vector<double>{0, 0}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal p, ReduceOf(x, {0}, ReduceKind::kMultiply));
  EXPECT_EQ(Doubles(p), (std::vector<double>{1, 1}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal mx, ReduceOf(x, {0}, ReduceKind::kMaximum));
  EXPECT_EQ(mx.GetDouble(0), -INFINITY);
  EMBER_ASSERT_OK_AND_ASSIGN(Literal mn, ReduceOf(x, {0}, ReduceKind::kMinimum));
  EXPECT_EQ(mn.GetDouble(1), INFINITY);
  EMBER_ASSERT_OK_AND_ASSIGN(Literal im,
                             ReduceOf(IntLit(DType::kS16, {0}, {}), {0}, ReduceKind::kMaximum));
  EXPECT_EQ(Ints(im), (std::vector<int64_t>{-32768}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal ia,
                             ReduceOf(IntLit(DType::kU8, {0}, {}), {0}, ReduceKind::kAnd));
  EXPECT_EQ(Ints(ia), (std::vector<int64_t>{255}));
}

TEST(ReduceTest, LogicalAndBitwise) {
  Literal p = IntLit(DType::kPred, {2, 3}, {1, 1, 1, 1, 0, 1});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal a, ReduceOf(p, {1}, ReduceKind::kAnd));
  EXPECT_EQ(Ints(a), (std::vector<int64_t>{1, 0}));
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal o, ReduceOf(IntLit(DType::kPred, {2, 2}, {0, 0, 0, 1}), {1}, ReduceKind::kOr));
  EXPECT_EQ(Ints(o), (std::vector<int64_t>{0, 1}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal bi,
                             ReduceOf(IntLit(DType::kS32, {3}, {6, 3, 7}), {0}, ReduceKind::kOr));
  EXPECT_EQ(Ints(bi), (std::vector<int64_t>{7}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal ba,
                             ReduceOf(IntLit(DType::kS32, {3}, {6, 3, 7}), {0}, ReduceKind::kAnd));
  EXPECT_EQ(Ints(ba), (std::vector<int64_t>{2}));
}

TEST(ReduceTest, F64Product) {
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r, ReduceOf(Lit(DType::kF64, {4}, {1.5, -2, 0.25, 8}), {0}, ReduceKind::kMultiply));
  EXPECT_EQ(r.GetDouble(0), -6.0);
}

StatusOr<Literal> Arg(const Literal& x, int64_t dim, bool is_max, DType t = DType::kS64) {
  GraphBuilder b;
  auto p = b.Parameter(0, x.shape());
  auto r = is_max ? b.ArgMax(p, dim, t) : b.ArgMin(p, dim, t);
  return Run1(b, r, {x});
}

TEST(ArgTest, FirstIndexOfExtreme) {
  Literal x = F32Lit({2, 4}, {1, 5, 5, 0, 2, 2, -1, -1});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal mx, Arg(x, 1, true));
  EXPECT_EQ(mx.shape(), Shape(DType::kS64, {2}));
  EXPECT_EQ(Ints(mx), (std::vector<int64_t>{1, 0}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal mn, Arg(x, 1, false, DType::kS32));
  EXPECT_EQ(mn.shape(), Shape(DType::kS32, {2}));
  EXPECT_EQ(Ints(mn), (std::vector<int64_t>{3, 2}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal m0, Arg(x, 0, true));
  EXPECT_EQ(Ints(m0), (std::vector<int64_t>{1, 0, 0, 0}));
}

TEST(ArgTest, FirstNaNWins) {
  Literal x = F32Lit({5}, {1, NAN, 7, NAN, -INFINITY});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal mx, Arg(x, 0, true));
  EXPECT_EQ(Ints(mx), (std::vector<int64_t>{1}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal mn, Arg(x, 0, false));
  EXPECT_EQ(Ints(mn), (std::vector<int64_t>{1}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal h, Arg(Lit(DType::kBF16, {3}, {-1, -3, NAN}), 0, false));
  EXPECT_EQ(Ints(h), (std::vector<int64_t>{2}));
}

TEST(ArgTest, IntegersAndPred) {
  EMBER_ASSERT_OK_AND_ASSIGN(Literal u, Arg(IntLit(DType::kU64, {3}, {1, -1, 5}), 0, true));
  EXPECT_EQ(Ints(u), (std::vector<int64_t>{1}));  // u64 max value, not -1
  EMBER_ASSERT_OK_AND_ASSIGN(Literal s, Arg(IntLit(DType::kS8, {3}, {1, -128, -128}), 0, false));
  EXPECT_EQ(Ints(s), (std::vector<int64_t>{1}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal p, Arg(IntLit(DType::kPred, {3}, {0, 1, 1}), 0, true));
  EXPECT_EQ(Ints(p), (std::vector<int64_t>{1}));
}

StatusOr<Literal> Window(const Literal& x, ReduceKind k, std::vector<int64_t> win,
                         std::vector<int64_t> strides, std::vector<int64_t> lo,
                         std::vector<int64_t> hi, std::vector<int64_t> dil = {}) {
  GraphBuilder b;
  auto p = b.Parameter(0, x.shape());
  auto r = b.ReduceWindow(p, k, win, strides, lo, hi, dil);
  return Run1(b, r, {x});
}

TEST(ReduceWindowTest, PaddingHoldsTheIdentity) {
  Literal x = F32Lit({3}, {1, 2, 3});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal mx, Window(x, ReduceKind::kMaximum, {2}, {1}, {1}, {1}));
  EXPECT_EQ(Doubles(mx), (std::vector<double>{1, 2, 3, 3}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal s, Window(x, ReduceKind::kAdd, {2}, {1}, {1}, {1}));
  EXPECT_EQ(Doubles(s), (std::vector<double>{1, 3, 5, 3}));
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal mn, Window(F32Lit({3}, {-1, -2, -3}), ReduceKind::kMinimum, {2}, {1}, {1}, {1}));
  EXPECT_EQ(Doubles(mn), (std::vector<double>{-1, -2, -3, -3}));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal pr, Window(x, ReduceKind::kMultiply, {3}, {2}, {2}, {0}));
  EXPECT_EQ(Doubles(pr), (std::vector<double>{1, 6}));
  // A window wholly in the padding gives the identity (-inf for max).
  EMBER_ASSERT_OK_AND_ASSIGN(Literal all_pad, Window(x, ReduceKind::kMaximum, {2}, {1}, {2}, {0}));
  EXPECT_EQ(Doubles(all_pad), (std::vector<double>{-INFINITY, 1, 2, 3}));
}

TEST(ReduceWindowTest, MaxPool2x2Stride2) {
  std::vector<double> v;
  for (int i = 0; i < 16; ++i) v.push_back(i);
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r, Window(F32Lit({1, 1, 4, 4}, v), ReduceKind::kMaximum, {1, 1, 2, 2}, {1, 1, 2, 2},
                        {0, 0, 0, 0}, {0, 0, 0, 0}));
  EXPECT_EQ(r.shape(), F32({1, 1, 2, 2}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{5, 7, 13, 15}));
}

TEST(ReduceWindowTest, DilatedWindowAndIntegers) {
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Window(IntLit(DType::kS32, {5}, {1, 2, 3, 4, 5}),
                                               ReduceKind::kAdd, {2}, {1}, {0}, {0}, {2}));
  EXPECT_EQ(Ints(r), (std::vector<int64_t>{4, 6, 8}));
  // 2-D sum window 2x2 stride 1 over [[1,2,3],[4,5,6]]
  EMBER_ASSERT_OK_AND_ASSIGN(Literal s, Window(F32Lit({2, 3}, {1, 2, 3, 4, 5, 6}), ReduceKind::kAdd,
                                               {2, 2}, {1, 1}, {0, 0}, {0, 0}));
  EXPECT_EQ(Doubles(s), (std::vector<double>{12, 16}));
}

TEST(ReduceWindowTest, NaNPropagatesThroughMaxPool) {
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r, Window(F32Lit({4}, {1, NAN, 3, 4}), ReduceKind::kMaximum, {2}, {2}, {0}, {0}));
  EXPECT_TRUE(std::isnan(r.GetDouble(0)));
  EXPECT_EQ(r.GetDouble(1), 4);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

bool IsNumericDType(DType t) { return IsFloat(t) || IsInteger(t); }

// reduce / argmax / argmin / reduce-window on every dtype they accept.
TEST(ReduceTest, EveryNumericDType) {
  for (int ti = 0; ti < kNumDTypes; ++ti) {
    const DType t = static_cast<DType>(ti);
    if (!IsNumericDType(t)) continue;
    SCOPED_TRACE(std::string(DTypeName(t)));
    GraphBuilder b;
    auto x = b.Parameter(0, Shape(t, {4}));
    std::vector<NodeId> outs = {
        b.Reduce(x, {0}, ReduceKind::kAdd),
        b.Reduce(x, {0}, ReduceKind::kMultiply),
        b.Reduce(x, {0}, ReduceKind::kMaximum),
        b.Reduce(x, {0}, ReduceKind::kMinimum),
        b.ArgMax(x, 0),
        b.ArgMin(x, 0, DType::kS32),
        b.ReduceWindow(x, ReduceKind::kAdd, {2}, {2}, {0}, {0}),
    };
    auto r = testing::BuildAndRun(b, outs, {Lit(t, {4}, {2, 4, 1, 3})});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(Doubles((*r)[0]), (std::vector<double>{10}));
    EXPECT_EQ(Doubles((*r)[1]), (std::vector<double>{24}));
    EXPECT_EQ(Doubles((*r)[2]), (std::vector<double>{4}));
    EXPECT_EQ(Doubles((*r)[3]), (std::vector<double>{1}));
    EXPECT_EQ(Ints((*r)[4]), (std::vector<int64_t>{1}));
    EXPECT_EQ(Ints((*r)[5]), (std::vector<int64_t>{2}));
    EXPECT_EQ(Doubles((*r)[6]), (std::vector<double>{6, 4}));
  }
  // pred and integers: and / or.
  for (DType t : {DType::kPred, DType::kS8, DType::kU16, DType::kS32, DType::kU64}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    GraphBuilder b;
    auto x = b.Parameter(0, Shape(t, {3}));
    std::vector<NodeId> outs = {b.Reduce(x, {0}, ReduceKind::kAnd),
                                b.Reduce(x, {0}, ReduceKind::kOr), b.ArgMax(x, 0)};
    auto r = testing::BuildAndRun(b, outs, {IntLit(t, {3}, {1, 0, 1})});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(Ints((*r)[0]), (std::vector<int64_t>{0}));
    EXPECT_EQ(Ints((*r)[1]), (std::vector<int64_t>{1}));
    EXPECT_EQ(Ints((*r)[2]), (std::vector<int64_t>{0}));
  }
}

}  // namespace
}  // namespace ember
