// Interpreter results of dot-general and convolution: hand-computed small
// cases, and convolution against an independent naive loop over an
// explicitly dilated and padded input (1-D, 2-D with stride / padding /
// dilation / groups, lhs_dilation, 3-D).
#include <chrono>
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

StatusOr<Literal> Dot(const Literal& a, const Literal& b, const DotDims& dims,
                      std::optional<DType> result = std::nullopt) {
  GraphBuilder g;
  auto x = g.Parameter(0, a.shape());
  auto y = g.Parameter(1, b.shape());
  auto d = g.DotGeneral(x, y, dims, result);
  return Run1(g, d, {a, b});
}

DotDims MatMulDims() {
  DotDims d;
  d.lhs_contracting = {1};
  d.rhs_contracting = {0};
  return d;
}

TEST(DotGeneralTest, MatMul) {
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Dot(F32Lit({2, 3}, {1, 2, 3, 4, 5, 6}),
                                            F32Lit({3, 2}, {7, 8, 9, 10, 11, 12}), MatMulDims()));
  EXPECT_EQ(r.shape(), F32({2, 2}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{58, 64, 139, 154}));
}

TEST(DotGeneralTest, BatchedMatMul) {
  DotDims d;
  d.lhs_batch = {0};
  d.rhs_batch = {0};
  d.lhs_contracting = {2};
  d.rhs_contracting = {1};
  // batch 0: [[1,2],[3,4]] x [[1],[1]]; batch 1: [[1,0],[0,1]] x [[5],[6]]
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Dot(F32Lit({2, 2, 2}, {1, 2, 3, 4, 1, 0, 0, 1}),
                                            F32Lit({2, 2, 1}, {1, 1, 5, 6}), d));
  EXPECT_EQ(r.shape(), F32({2, 2, 1}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{3, 7, 5, 6}));
}

TEST(DotGeneralTest, TransposedOperandsAndBatchNotLeading) {
  // A^T B: contract dim 0 of both.
  DotDims t;
  t.lhs_contracting = {0};
  t.rhs_contracting = {0};
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r,
                             Dot(F32Lit({2, 2}, {1, 2, 3, 4}), F32Lit({2, 2}, {5, 6, 7, 8}), t));
  // A^T = [[1,3],[2,4]]; A^T B = [[26, 30], [38, 44]]
  EXPECT_EQ(Doubles(r), (std::vector<double>{26, 30, 38, 44}));
  // lhs [m=2, b=2, k=2], rhs [k=2, b=2]: result [b, m].
  DotDims d;
  d.lhs_batch = {1};
  d.rhs_batch = {1};
  d.lhs_contracting = {2};
  d.rhs_contracting = {0};
  // lhs[m][b][k] = 10m + 4b + k ; rhs[k][b] = (k+1)*(b+1)
  std::vector<double> lv, rv;
  for (int m = 0; m < 2; ++m)
    for (int b = 0; b < 2; ++b)
      for (int k = 0; k < 2; ++k) lv.push_back(10 * m + 4 * b + k);
  for (int k = 0; k < 2; ++k)
    for (int b = 0; b < 2; ++b) rv.push_back((k + 1) * (b + 1));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r2, Dot(F32Lit({2, 2, 2}, lv), F32Lit({2, 2}, rv), d));
  ASSERT_EQ(r2.shape(), F32({2, 2}));
  std::vector<double> want;
  for (int b = 0; b < 2; ++b)
    for (int m = 0; m < 2; ++m) {
      double s = 0;
      for (int k = 0; k < 2; ++k) s += (10 * m + 4 * b + k) * ((k + 1) * (b + 1));
      want.push_back(s);
    }
  EXPECT_EQ(Doubles(r2), want);
}

TEST(DotGeneralTest, OuterProductAndFreeDimOrder) {
  DotDims d;  // no contraction: [2] x [3] -> [2, 3]
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Dot(F32Lit({2}, {1, 2}), F32Lit({3}, {3, 4, 5}), d));
  EXPECT_EQ(r.shape(), F32({2, 3}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{3, 4, 5, 6, 8, 10}));
}

TEST(DotGeneralTest, BF16InputsF32Result) {
  // (1 + 2^-7)^2 * 2 = 2.0313720703125 exactly in f32; bf16 would round it to 2.03125.
  const double v = 1.0078125;
  Literal a = Lit(DType::kBF16, {1, 2}, {v, v});
  Literal b = Lit(DType::kBF16, {2, 1}, {v, v});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Dot(a, b, MatMulDims(), DType::kF32));
  EXPECT_EQ(r.shape(), F32({1, 1}));
  EXPECT_EQ(r.GetDouble(0), 2.0313720703125);
  EMBER_ASSERT_OK_AND_ASSIGN(Literal rb, Dot(a, b, MatMulDims()));
  EXPECT_EQ(rb.shape(), Shape(DType::kBF16, {1, 1}));
  EXPECT_EQ(rb.GetDouble(0), 2.03125);
}

TEST(DotGeneralTest, BF16AccumulatesInF32) {
  // 300 products of 1: a bf16 accumulator would stall at 256.
  Literal a = Lit(DType::kBF16, {1, 300}, std::vector<double>(300, 1));
  Literal b = Lit(DType::kBF16, {300, 1}, std::vector<double>(300, 1));
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Dot(a, b, MatMulDims()));
  EXPECT_EQ(r.GetDouble(0), 300);  // 300 is exact in bf16
}

TEST(DotGeneralTest, IntegersWrap) {
  Literal a = IntLit(DType::kS8, {1, 2}, {100, 100});
  Literal b = IntLit(DType::kS8, {2, 1}, {2, 1});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Dot(a, b, MatMulDims()));
  EXPECT_EQ(Ints(r), (std::vector<int64_t>{44}));  // 300 mod 256
  EMBER_ASSERT_OK_AND_ASSIGN(Literal w, Dot(a, b, MatMulDims(), DType::kS32));
  EXPECT_EQ(Ints(w), (std::vector<int64_t>{300}));
  Literal n = IntLit(DType::kS32, {1, 2}, {-3, 2});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal neg,
                             Dot(n, IntLit(DType::kS32, {2, 1}, {5, 1}), MatMulDims()));
  EXPECT_EQ(Ints(neg), (std::vector<int64_t>{-13}));
  Literal u = IntLit(DType::kU8, {1, 1}, {200});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal ru, Dot(u, u, MatMulDims()));
  EXPECT_EQ(Ints(ru), (std::vector<int64_t>{(200 * 200) % 256}));
}

TEST(DotGeneralTest, F64) {
  // 1 + 1e-9 is 1 in f32: the f64 dot must accumulate in f64.
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Dot(Lit(DType::kF64, {1, 2}, {1e-9, 1}),
                                            Lit(DType::kF64, {2, 1}, {1, 1}), MatMulDims()));
  EXPECT_EQ(r.GetDouble(0), 1.0 + 1e-9);
  EXPECT_NE(r.GetDouble(0), 1.0);
}

TEST(DotGeneralTest, Square256IsFastAndCorrect) {
  const int n = 256;
  std::vector<double> av(n * n), bv(n * n);
  for (int i = 0; i < n * n; ++i) {
    av[i] = (i * 7 % 13) - 6;
    bv[i] = (i * 5 % 11) - 5;
  }
  auto t0 = std::chrono::steady_clock::now();
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Dot(F32Lit({n, n}, av), F32Lit({n, n}, bv), MatMulDims()));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(secs, 1.0);  // optimized builds only
#else
  (void)secs;
#endif
  for (int i : {0, 17, 255}) {
    for (int j : {0, 100, 255}) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += av[i * n + k] * bv[k * n + j];
      EXPECT_EQ(r.GetDouble(i * n + j), s) << i << "," << j;
    }
  }
}

// ---- convolution ----

StatusOr<Literal> Conv(const Literal& x, const Literal& w, const ConvConfig& c) {
  GraphBuilder g;
  auto a = g.Parameter(0, x.shape());
  auto b = g.Parameter(1, w.shape());
  auto r = g.Convolution(a, b, c);
  return Run1(g, r, {x, w});
}

TEST(ConvolutionTest, OneDHandComputed) {
  Literal x = F32Lit({1, 1, 5}, {1, 2, 3, 4, 5});
  Literal w = F32Lit({1, 1, 3}, {1, 0, -1});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Conv(x, w, {}));
  EXPECT_EQ(r.shape(), F32({1, 1, 3}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{-2, -2, -2}));
  // padding 1 both sides, stride 2: padded [0,1,2,3,4,5,0] -> windows at 0, 2, 4
  ConvConfig c;
  c.window_strides = {2};
  c.padding_low = {1};
  c.padding_high = {1};
  EMBER_ASSERT_OK_AND_ASSIGN(Literal p, Conv(x, w, c));
  EXPECT_EQ(Doubles(p), (std::vector<double>{-2, -2, 4}));
  // rhs_dilation 2: taps at 0, 2, 4 -> x[0] - x[4] = -4
  ConvConfig d;
  d.rhs_dilation = {2};
  EMBER_ASSERT_OK_AND_ASSIGN(Literal q, Conv(x, w, d));
  EXPECT_EQ(Doubles(q), (std::vector<double>{-4}));
}

TEST(ConvolutionTest, LhsDilationIsTransposedConv) {
  // x dilated by 2: [1, 0, 2, 0, 3]; kernel [1, 1]; padding 1 each side:
  // [0, 1, 0, 2, 0, 3, 0] -> pairwise sums [1, 1, 2, 2, 3, 3]
  ConvConfig c;
  c.lhs_dilation = {2};
  c.padding_low = {1};
  c.padding_high = {1};
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r,
                             Conv(F32Lit({1, 1, 3}, {1, 2, 3}), F32Lit({1, 1, 2}, {1, 1}), c));
  EXPECT_EQ(r.shape(), F32({1, 1, 6}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{1, 1, 2, 2, 3, 3}));
}

TEST(ConvolutionTest, ChannelsAndBatchHandComputed) {
  // N=2, C=2, W=2; O=1 kernel [1, 2, 1] = {1, 10}: out = x[c0] + 10 x[c1]
  Literal x = F32Lit({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Literal w = F32Lit({1, 2, 1}, {1, 10});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Conv(x, w, {}));
  EXPECT_EQ(r.shape(), F32({2, 1, 2}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{31, 42, 75, 86}));
}

// Independent reference: materialize the dilated + padded input, then a
// direct sum per output element (2-D).
std::vector<double> NaiveConv2D(const std::vector<double>& x, int N, int C, int H, int W,
                                const std::vector<double>& w, int O, int KH, int KW,
                                const ConvConfig& c, int* OH, int* OW) {
  const int G = static_cast<int>(c.feature_group_count);
  const int ldh = c.lhs_dilation.empty() ? 1 : c.lhs_dilation[0];
  const int ldw = c.lhs_dilation.empty() ? 1 : c.lhs_dilation[1];
  const int rdh = c.rhs_dilation.empty() ? 1 : c.rhs_dilation[0];
  const int rdw = c.rhs_dilation.empty() ? 1 : c.rhs_dilation[1];
  const int sh = c.window_strides.empty() ? 1 : c.window_strides[0];
  const int sw = c.window_strides.empty() ? 1 : c.window_strides[1];
  const int plh = c.padding_low.empty() ? 0 : c.padding_low[0];
  const int plw = c.padding_low.empty() ? 0 : c.padding_low[1];
  const int phh = c.padding_high.empty() ? 0 : c.padding_high[0];
  const int phw = c.padding_high.empty() ? 0 : c.padding_high[1];
  const int DH = (H - 1) * ldh + 1 + plh + phh, DW = (W - 1) * ldw + 1 + plw + phw;
  // padded[n][c][y][x]; negative padding is not used by these tests
  std::vector<double> pad(static_cast<size_t>(N * C * DH * DW), 0.0);
  for (int n = 0; n < N; ++n)
    for (int ch = 0; ch < C; ++ch)
      for (int y = 0; y < H; ++y)
        for (int xx = 0; xx < W; ++xx)
          pad[((n * C + ch) * DH + plh + y * ldh) * DW + plw + xx * ldw] =
              x[((n * C + ch) * H + y) * W + xx];
  const int EKH = (KH - 1) * rdh + 1, EKW = (KW - 1) * rdw + 1;
  *OH = DH < EKH ? 0 : (DH - EKH) / sh + 1;
  *OW = DW < EKW ? 0 : (DW - EKW) / sw + 1;
  const int Cg = C / G, Og = O / G;
  std::vector<double> out;
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o)
      for (int y = 0; y < *OH; ++y)
        for (int xx = 0; xx < *OW; ++xx) {
          double s = 0;
          const int g = o / Og;
          for (int ci = 0; ci < Cg; ++ci)
            for (int ky = 0; ky < KH; ++ky)
              for (int kx = 0; kx < KW; ++kx)
                s += pad[((n * C + g * Cg + ci) * DH + y * sh + ky * rdh) * DW + xx * sw +
                         kx * rdw] *
                     w[((o * Cg + ci) * KH + ky) * KW + kx];
          out.push_back(s);
        }
  return out;
}

std::vector<double> SmallInts(int n, int seed) {
  std::vector<double> v(n);
  uint32_t s = static_cast<uint32_t>(seed) * 2654435761u + 1;
  for (int i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    v[i] = static_cast<int>((s >> 16) % 7) - 3;
  }
  return v;
}

TEST(ConvolutionTest, TwoDAgainstNaiveLoop) {
  struct Case {
    int N, C, H, W, O, KH, KW;
    ConvConfig c;
  };
  std::vector<Case> cases;
  cases.push_back({1, 1, 4, 4, 1, 3, 3, {}});
  {
    ConvConfig c;
    c.window_strides = {2, 1};
    c.padding_low = {1, 2};
    c.padding_high = {1, 0};
    cases.push_back({2, 3, 5, 6, 4, 3, 2, c});
  }
  {
    ConvConfig c;
    c.rhs_dilation = {2, 3};
    c.padding_low = {2, 1};
    c.padding_high = {0, 3};
    cases.push_back({1, 2, 7, 8, 3, 2, 3, c});
  }
  {
    ConvConfig c;  // grouped (2 groups) with stride
    c.feature_group_count = 2;
    c.window_strides = {2, 2};
    c.padding_low = {1, 1};
    c.padding_high = {1, 1};
    cases.push_back({2, 4, 5, 5, 6, 3, 3, c});
  }
  {
    ConvConfig c;  // depthwise
    c.feature_group_count = 3;
    cases.push_back({1, 3, 4, 4, 3, 2, 2, c});
  }
  {
    ConvConfig c;  // transposed conv: lhs dilation, stride 1, full padding
    c.lhs_dilation = {2, 2};
    c.padding_low = {2, 1};
    c.padding_high = {2, 1};
    cases.push_back({1, 2, 3, 3, 2, 3, 2, c});
  }
  int seed = 0;
  for (const Case& k : cases) {
    ++seed;
    std::vector<double> xv = SmallInts(k.N * k.C * k.H * k.W, seed);
    const int cg = k.C / static_cast<int>(k.c.feature_group_count);
    std::vector<double> wv = SmallInts(k.O * cg * k.KH * k.KW, seed + 100);
    int oh = 0, ow = 0;
    std::vector<double> want =
        NaiveConv2D(xv, k.N, k.C, k.H, k.W, wv, k.O, k.KH, k.KW, k.c, &oh, &ow);
    EMBER_ASSERT_OK_AND_ASSIGN(
        Literal r, Conv(F32Lit({k.N, k.C, k.H, k.W}, xv), F32Lit({k.O, cg, k.KH, k.KW}, wv), k.c));
    ASSERT_EQ(r.shape(), F32({k.N, k.O, oh, ow})) << "case " << seed;
    EXPECT_EQ(Doubles(r), want) << "case " << seed;
  }
}

TEST(ConvolutionTest, IntegerConvAgainstNaiveLoop) {
  ConvConfig c;
  c.padding_low = {1, 1};
  c.padding_high = {1, 1};
  std::vector<double> xv = SmallInts(2 * 3 * 3, 7), wv = SmallInts(2 * 2 * 2 * 2, 8);
  int oh = 0, ow = 0;
  std::vector<double> want = NaiveConv2D(xv, 1, 2, 3, 3, wv, 2, 2, 2, c, &oh, &ow);
  std::vector<int64_t> xi(xv.begin(), xv.end()), wi(wv.begin(), wv.end());
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Conv(IntLit(DType::kS32, {1, 2, 3, 3}, xi),
                                             IntLit(DType::kS32, {2, 2, 2, 2}, wi), c));
  EXPECT_EQ(Doubles(r), want);
}

TEST(ConvolutionTest, ThreeDOnesCountValidTaps) {
  // All-ones input [1,1,2,2,2] and kernel [1,1,2,2,2], padding 1 low in every
  // dim: each output counts the kernel taps that land inside the input.
  ConvConfig c;
  c.padding_low = {1, 1, 1};
  c.padding_high = {0, 0, 0};
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r,
                             Conv(F32Lit({1, 1, 2, 2, 2}, std::vector<double>(8, 1)),
                                  F32Lit({1, 1, 2, 2, 2}, std::vector<double>(8, 1)), c));
  ASSERT_EQ(r.shape(), F32({1, 1, 2, 2, 2}));
  // output (i,j,k) covers padded positions {i,i+1}x...; inside count = prod over dims (1 if idx 0
  // else 2)
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 2; ++k) want.push_back((i ? 2 : 1) * (j ? 2 : 1) * (k ? 2 : 1));
  EXPECT_EQ(Doubles(r), want);
}

TEST(ConvolutionTest, BF16InputAccumulatesInF32) {
  // 300 ones through a 1x300 kernel: a bf16 running sum would stall at 256.
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r,
                             Conv(Lit(DType::kBF16, {1, 300, 1}, std::vector<double>(300, 1)),
                                  Lit(DType::kBF16, {1, 300, 1}, std::vector<double>(300, 1)), {}));
  EXPECT_EQ(r.GetDouble(0), 300);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// dot-general and convolution on every dtype they accept.
TEST(DotGeneralTest, EveryNumericDType) {
  for (int ti = 0; ti < kNumDTypes; ++ti) {
    const DType t = static_cast<DType>(ti);
    if (!IsFloat(t) && !IsInteger(t)) continue;
    SCOPED_TRACE(std::string(DTypeName(t)));
    GraphBuilder b;
    auto x = b.Parameter(0, Shape(t, {2, 2}));
    auto y = b.Parameter(1, Shape(t, {2, 2}));
    auto c = b.Parameter(2, Shape(t, {1, 1, 3}));
    auto w = b.Parameter(3, Shape(t, {1, 1, 2}));
    DotDims d;
    d.lhs_contracting = {1};
    d.rhs_contracting = {0};
    std::vector<NodeId> outs = {b.DotGeneral(x, y, d), b.Convolution(c, w, {})};
    auto r = testing::BuildAndRun(b, outs,
                                  {Lit(t, {2, 2}, {1, 2, 3, 4}), Lit(t, {2, 2}, {1, 1, 0, 1}),
                                   Lit(t, {1, 1, 3}, {1, 2, 3}), Lit(t, {1, 1, 2}, {1, 2})});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)[0].dtype(), t);
    EXPECT_EQ(Doubles((*r)[0]), (std::vector<double>{1, 3, 3, 7}));
    EXPECT_EQ(Doubles((*r)[1]), (std::vector<double>{5, 8}));
  }
}

}  // namespace
}  // namespace ember
