// Interpreter results of the data-movement ops against hand-computed values,
// for several dtypes (these ops move bytes, so complex and pred included).
#include <complex>
#include <cstring>

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

TEST(DataMovementTest, BroadcastInDim) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({3}));
  auto y = b.BroadcastInDim(x, {2, 3}, {1});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Run1(b, y, {F32Lit({3}, {1, 2, 3})}));
  EXPECT_EQ(r.shape(), F32({2, 3}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{1, 2, 3, 1, 2, 3}));
}

TEST(DataMovementTest, BroadcastInDimSizeOneAndColumn) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 1}));
  auto y = b.BroadcastInDim(x, {2, 2, 3}, {0, 1});  // [2,1] -> [2,2,3]: dim1 broadcasts
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Run1(b, y, {F32Lit({2, 1}, {5, 7})}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7}));
}

TEST(DataMovementTest, BroadcastScalarPred) {
  GraphBuilder b;
  auto x = b.Parameter(0, Shape(DType::kPred, {}));
  auto y = b.BroadcastInDim(x, {2, 2}, {});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Run1(b, y, {IntLit(DType::kPred, {}, {1})}));
  EXPECT_EQ(Ints(r), (std::vector<int64_t>{1, 1, 1, 1}));
}

TEST(DataMovementTest, ReshapeIsRowMajor) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 3}));
  auto y = b.Reshape(x, {3, 2});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Run1(b, y, {F32Lit({2, 3}, {1, 2, 3, 4, 5, 6})}));
  EXPECT_EQ(r.shape(), F32({3, 2}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

TEST(DataMovementTest, Transpose2D) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 3}));
  auto y = b.Transpose(x, {1, 0});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Run1(b, y, {F32Lit({2, 3}, {1, 2, 3, 4, 5, 6})}));
  EXPECT_EQ(r.shape(), F32({3, 2}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{1, 4, 2, 5, 3, 6}));
}

TEST(DataMovementTest, Transpose3DPermutationS64) {
  // x[a][b][c] = 100a + 10b + c, dims [2,3,4]; perm {2,0,1}: result[c][a][b].
  std::vector<int64_t> v;
  for (int a = 0; a < 2; ++a)
    for (int bb = 0; bb < 3; ++bb)
      for (int c = 0; c < 4; ++c) v.push_back(100 * a + 10 * bb + c);
  GraphBuilder b;
  auto x = b.Parameter(0, Shape(DType::kS64, {2, 3, 4}));
  auto y = b.Transpose(x, {2, 0, 1});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Run1(b, y, {IntLit(DType::kS64, {2, 3, 4}, v)}));
  ASSERT_EQ(r.shape(), Shape(DType::kS64, {4, 2, 3}));
  std::vector<int64_t> got = Ints(r), want;
  for (int c = 0; c < 4; ++c)
    for (int a = 0; a < 2; ++a)
      for (int bb = 0; bb < 3; ++bb) want.push_back(100 * a + 10 * bb + c);
  EXPECT_EQ(got, want);
}

TEST(DataMovementTest, TransposeComplexAndBF16MoveBits) {
  GraphBuilder b;
  auto x = b.Parameter(0, Shape(DType::kC64, {2, 2}));
  auto y = b.Transpose(x, {1, 0});
  auto h = b.Parameter(1, Shape(DType::kBF16, {2, 2}));
  auto hy = b.Transpose(h, {1, 0});
  Literal c(Shape(DType::kC64, {2, 2}));
  auto* cp = c.data_as<std::complex<float>>();
  cp[0] = {1, -1};
  cp[1] = {2, -2};
  cp[2] = {3, -3};
  cp[3] = {4, -4};
  Literal bf = Lit(DType::kBF16, {2, 2}, {1.5, -2, 3.25, 1e30});
  auto r = testing::BuildAndRun(b, {y, hy}, {c, bf});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto* out = (*r)[0].data_as<std::complex<float>>();
  EXPECT_EQ(out[0], std::complex<float>(1, -1));
  EXPECT_EQ(out[1], std::complex<float>(3, -3));
  EXPECT_EQ(out[2], std::complex<float>(2, -2));
  EXPECT_EQ(out[3], std::complex<float>(4, -4));
  const auto* hb = (*r)[1].data_as<uint16_t>();
  const auto* in = bf.data_as<uint16_t>();
  EXPECT_EQ(hb[0], in[0]);
  EXPECT_EQ(hb[1], in[2]);
  EXPECT_EQ(hb[2], in[1]);
  EXPECT_EQ(hb[3], in[3]);
}

TEST(DataMovementTest, SliceWithStride) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({3, 5}));
  auto y = b.Slice(x, {0, 1}, {3, 5}, {2, 2});  // rows 0,2; cols 1,3
  std::vector<double> v;
  for (int i = 0; i < 15; ++i) v.push_back(i);
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Run1(b, y, {F32Lit({3, 5}, v)}));
  EXPECT_EQ(r.shape(), F32({2, 2}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{1, 3, 11, 13}));
}

TEST(DataMovementTest, DynamicSliceInRange) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({3, 4}));
  auto i = b.Parameter(1, Shape(DType::kS32, {}));
  auto j = b.Parameter(2, Shape(DType::kU8, {}));  // any integer dtype
  auto y = b.DynamicSlice(x, {i, j}, {2, 2});
  std::vector<double> v;
  for (int k = 0; k < 12; ++k) v.push_back(k);
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r,
      Run1(b, y, {F32Lit({3, 4}, v), IntLit(DType::kS32, {}, {1}), IntLit(DType::kU8, {}, {2})}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{6, 7, 10, 11}));
}

TEST(DataMovementTest, DynamicSliceOutOfRangeIsAnErrorNotClamped) {
  for (int64_t start : {2, -1}) {
    GraphBuilder b;
    auto x = b.Parameter(0, F32({3, 4}));
    auto i = b.Parameter(1, Shape(DType::kS64, {}));
    auto j = b.ConstantScalar(DType::kS32, 0);
    auto y = b.DynamicSlice(x, {i, j}, {2, 2});
    auto r =
        Run1(b, y, {F32Lit({3, 4}, std::vector<double>(12, 0)), IntLit(DType::kS64, {}, {start})});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
    EXPECT_TRUE(testing::HasAll(r.status().message(), {"dynamic-slice %" + std::to_string(y),
                                                       std::to_string(start), "[0, 1]"}))
        << r.status().message();
  }
}

TEST(DataMovementTest, DynamicSliceHugeUnsignedIndex) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({4}));
  auto i = b.Parameter(1, Shape(DType::kU64, {}));
  auto y = b.DynamicSlice(x, {i}, {1});
  Literal idx(Shape(DType::kU64, {}));
  idx.data_as<uint64_t>()[0] = 18446744073709551615ull;
  auto r = Run1(b, y, {F32Lit({4}, {0, 1, 2, 3}), idx});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("18446744073709551615"), std::string::npos)
      << r.status().message();
}

TEST(DataMovementTest, DynamicUpdateSlice) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({3, 3}));
  auto u = b.Parameter(1, F32({2, 1}));
  auto i = b.ConstantScalar(DType::kS32, 1);
  auto j = b.ConstantScalar(DType::kS32, 2);
  auto y = b.DynamicUpdateSlice(x, u, {i, j});
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r, Run1(b, y, {F32Lit({3, 3}, std::vector<double>(9, 0)), F32Lit({2, 1}, {8, 9})}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{0, 0, 0, 0, 0, 8, 0, 0, 9}));
}

TEST(DataMovementTest, DynamicUpdateSliceOutOfRange) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({3}));
  auto u = b.Parameter(1, F32({2}));
  auto i = b.ConstantScalar(DType::kS32, 2);
  auto y = b.DynamicUpdateSlice(x, u, {i});
  auto r = Run1(b, y, {F32Lit({3}, {0, 0, 0}), F32Lit({2}, {1, 1})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("dynamic-update-slice %"), std::string::npos);
}

TEST(DataMovementTest, ConcatenateThreeAlongDim1) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 1}));
  auto y = b.Parameter(1, F32({2, 2}));
  auto z = b.Parameter(2, F32({2, 0}));
  auto c = b.Concatenate({x, y, z, x}, 1);
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r,
      Run1(b, c, {F32Lit({2, 1}, {1, 2}), F32Lit({2, 2}, {3, 4, 5, 6}), F32Lit({2, 0}, {})}));
  EXPECT_EQ(r.shape(), F32({2, 4}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{1, 3, 4, 1, 2, 5, 6, 2}));
}

TEST(DataMovementTest, PadLowHighInterior) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 2}));
  auto pv = b.ConstantScalar(DType::kF32, -1);
  auto y = b.Pad(x, pv, {1, 0}, {0, 2}, {0, 1});  // rows: 1 + 2; cols: 2 + 1 + 2
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Run1(b, y, {F32Lit({2, 2}, {1, 2, 3, 4})}));
  EXPECT_EQ(r.shape(), F32({3, 5}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{-1, -1, -1, -1, -1,  //
                                             1, -1, 2, -1, -1,    //
                                             3, -1, 4, -1, -1}));
}

TEST(DataMovementTest, PadNegativeCrops) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({5}));
  auto pv = b.ConstantScalar(DType::kF32, 0);
  auto y = b.Pad(x, pv, {-2}, {-1}, {0});
  auto z = b.Pad(x, pv, {-1}, {1}, {1});  // interior: 1 0 2 0 3 0 4 0 5 -> crop 1 + pad 1
  auto r = testing::BuildAndRun(b, {y, z}, {F32Lit({5}, {1, 2, 3, 4, 5})});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Doubles((*r)[0]), (std::vector<double>{3, 4}));
  EXPECT_EQ(Doubles((*r)[1]), (std::vector<double>{0, 2, 0, 3, 0, 4, 0, 5, 0}));
}

TEST(DataMovementTest, PadPredAndS8) {
  GraphBuilder b;
  auto x = b.Parameter(0, Shape(DType::kS8, {2}));
  auto pv = b.ConstantScalar(DType::kS8, -7);
  auto y = b.Pad(x, pv, {1}, {1}, {1});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Run1(b, y, {IntLit(DType::kS8, {2}, {100, -100})}));
  EXPECT_EQ(Ints(r), (std::vector<int64_t>{-7, 100, -7, -100, -7}));
}

TEST(DataMovementTest, Reverse) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 3}));
  auto y = b.Reverse(x, {1});
  auto z = b.Reverse(x, {0, 1});
  auto r = testing::BuildAndRun(b, {y, z}, {F32Lit({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Doubles((*r)[0]), (std::vector<double>{3, 2, 1, 6, 5, 4}));
  EXPECT_EQ(Doubles((*r)[1]), (std::vector<double>{6, 5, 4, 3, 2, 1}));
}

TEST(DataMovementTest, ReverseC128) {
  GraphBuilder b;
  auto x = b.Parameter(0, Shape(DType::kC128, {3}));
  auto y = b.Reverse(x, {0});
  Literal c(Shape(DType::kC128, {3}));
  auto* cp = c.data_as<std::complex<double>>();
  cp[0] = {1, 2};
  cp[1] = {3, 4};
  cp[2] = {5, 6};
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Run1(b, y, {c}));
  EXPECT_EQ(r.GetComplex(0), std::complex<double>(5, 6));
  EXPECT_EQ(r.GetComplex(1), std::complex<double>(3, 4));
  EXPECT_EQ(r.GetComplex(2), std::complex<double>(1, 2));
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// Element i of a [2,3] test value: distinct bytes per element (pred: 0/1).
Literal PatternLiteral(DType t, std::vector<int64_t> dims, int salt) {
  Literal l(Shape(t, std::move(dims)));
  const int es = DTypeSize(t);
  auto* p = static_cast<uint8_t*>(l.data());
  for (int64_t i = 0; i < l.num_elements(); ++i) {
    for (int j = 0; j < es; ++j) {
      p[i * es + j] = t == DType::kPred ? static_cast<uint8_t>((i + salt) % 2)
                                        : static_cast<uint8_t>(i * 37 + j * 5 + salt + 1);
    }
  }
  return l;
}

bool SameElement(const Literal& a, int64_t i, const Literal& b, int64_t j) {
  const int es = DTypeSize(a.dtype());
  return std::memcmp(static_cast<const uint8_t*>(a.data()) + i * es,
                     static_cast<const uint8_t*>(b.data()) + j * es, es) == 0;
}

// Every data-movement op on every dtype moves exactly the right bytes.
TEST(DataMovementTest, EveryOpOnEveryDType) {
  for (int ti = 0; ti < kNumDTypes; ++ti) {
    const DType t = static_cast<DType>(ti);
    SCOPED_TRACE(std::string(DTypeName(t)));
    GraphBuilder b;
    auto x = b.Parameter(0, Shape(t, {2, 3}));
    auto pv = b.Parameter(1, Shape(t, {}));
    auto upd = b.Parameter(2, Shape(t, {1, 2}));
    auto one = b.ConstantScalar(DType::kS32, 1);
    auto zero = b.ConstantScalar(DType::kS32, 0);
    std::vector<NodeId> outs = {
        b.Transpose(x, {1, 0}),                    // [3,2]
        b.Reverse(x, {1}),                         // [2,3]
        b.Slice(x, {0, 1}, {2, 3}, {1, 2}),        // [2,1]: x[i][1]
        b.Concatenate({x, x}, 0),                  // [4,3]
        b.Pad(x, pv, {0, 1}, {0, 0}, {0, 0}),      // [2,4]
        b.BroadcastInDim(x, {2, 2, 3}, {0, 2}),    // [2,2,3]
        b.DynamicSlice(x, {one, zero}, {1, 2}),    // [1,2]: x[1][0..1]
        b.Reshape(x, {6}),                         // [6]
        b.DynamicUpdateSlice(x, upd, {one, one}),  // x with x[1][1..2] = upd
    };
    Literal xv = PatternLiteral(t, {2, 3}, 0);
    Literal pval = PatternLiteral(t, {}, 100);
    Literal uval = PatternLiteral(t, {1, 2}, 50);
    auto r = testing::BuildAndRun(b, outs, {xv, pval, uval});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const auto& o = *r;
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 3; ++j) {
        const int64_t src = i * 3 + j;
        EXPECT_TRUE(SameElement(o[0], j * 2 + i, xv, src)) << "transpose";
        EXPECT_TRUE(SameElement(o[1], i * 3 + (2 - j), xv, src)) << "reverse";
        EXPECT_TRUE(SameElement(o[3], i * 3 + j, xv, src)) << "concatenate";
        EXPECT_TRUE(SameElement(o[3], (i + 2) * 3 + j, xv, src)) << "concatenate";
        EXPECT_TRUE(SameElement(o[4], i * 4 + j + 1, xv, src)) << "pad";
        EXPECT_TRUE(SameElement(o[5], (i * 2 + 0) * 3 + j, xv, src)) << "broadcast";
        EXPECT_TRUE(SameElement(o[5], (i * 2 + 1) * 3 + j, xv, src)) << "broadcast";
        EXPECT_TRUE(SameElement(o[7], src, xv, src)) << "reshape";
      }
      EXPECT_TRUE(SameElement(o[2], i, xv, i * 3 + 1)) << "slice";
      EXPECT_TRUE(SameElement(o[4], i * 4, pval, 0)) << "pad value";
    }
    EXPECT_TRUE(SameElement(o[6], 0, xv, 3)) << "dynamic-slice";
    EXPECT_TRUE(SameElement(o[6], 1, xv, 4)) << "dynamic-slice";
    for (int64_t k = 0; k < 6; ++k) {
      if (k == 4 || k == 5) {
        EXPECT_TRUE(SameElement(o[8], k, uval, k - 4)) << "dynamic-update-slice";
      } else {
        EXPECT_TRUE(SameElement(o[8], k, xv, k)) << "dynamic-update-slice";
      }
    }
  }
}

}  // namespace
}  // namespace ember
