// Interpreter results of gather and scatter against hand-computed values:
// torch.gather(dim=1), index_select, embedding, windows wider than 1,
// scatter-add / assign with duplicate indices, every combiner, and
// out-of-range indices (an error naming op, node, index and range).
#include <complex>
#include <cstring>

#include "eval/interp_test_util.h"

namespace ember {
namespace {

using testing::Doubles;
using testing::F32Lit;
using testing::HasAll;
using testing::IntLit;
using testing::Ints;
using testing::Lit;
using testing::Run1;

Shape F32(std::vector<int64_t> d) { return Shape(DType::kF32, std::move(d)); }

// torch.gather(x, 1, idx): out[i][j] = x[i][idx[i][j]], with full
// coordinate index vectors (i, idx[i][j]).
TEST(GatherTest, TorchGatherDim1) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 3}));
  auto idx = b.Parameter(1, Shape(DType::kS64, {2, 2, 2}));
  GatherDims d;
  d.offset_dims = {};
  d.collapsed_slice_dims = {0, 1};
  d.start_index_map = {0, 1};
  d.index_vector_dim = 2;
  auto g = b.Gather(x, idx, d, {1, 1});
  // idx = [[2, 0], [1, 1]]
  Literal coords = IntLit(DType::kS64, {2, 2, 2}, {0, 2, 0, 0, 1, 1, 1, 1});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r,
                             Run1(b, g, {F32Lit({2, 3}, {10, 11, 12, 20, 21, 22}), coords}));
  EXPECT_EQ(r.shape(), F32({2, 2}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{12, 10, 21, 21}));
}

// x.index_select(0, idx): rows of x.
TEST(GatherTest, IndexSelectRows) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({4, 3}));
  auto idx = b.Parameter(1, Shape(DType::kS32, {3}));
  GatherDims d;
  d.offset_dims = {1};
  d.collapsed_slice_dims = {0};
  d.start_index_map = {0};
  d.index_vector_dim = 1;  // == indices rank: each index is a scalar
  auto g = b.Gather(x, idx, d, {1, 3});
  std::vector<double> v;
  for (int i = 0; i < 12; ++i) v.push_back(i);
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r,
                             Run1(b, g, {F32Lit({4, 3}, v), IntLit(DType::kS32, {3}, {3, 0, 3})}));
  EXPECT_EQ(r.shape(), F32({3, 3}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{9, 10, 11, 0, 1, 2, 9, 10, 11}));
}

// x.index_select(1, idx) with unsigned indices: out[r][k] = x[r][idx[k]].
TEST(GatherTest, IndexSelectColumnsU32) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2, 4}));
  auto idx = b.Parameter(1, Shape(DType::kU32, {3}));
  GatherDims d;
  d.offset_dims = {0};
  d.collapsed_slice_dims = {1};
  d.start_index_map = {1};
  d.index_vector_dim = 1;
  auto g = b.Gather(x, idx, d, {2, 1});
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r,
      Run1(b, g, {F32Lit({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}), IntLit(DType::kU32, {3}, {3, 1, 1})}));
  EXPECT_EQ(r.shape(), F32({2, 3}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{3, 1, 1, 7, 5, 5}));
}

// F.embedding(idx, weight): idx [2, 3] -> [2, 3, dim].
TEST(GatherTest, Embedding) {
  GraphBuilder b;
  auto w = b.Parameter(0, Shape(DType::kBF16, {5, 2}));
  auto idx = b.Parameter(1, Shape(DType::kS64, {2, 3}));
  GatherDims d;
  d.offset_dims = {2};
  d.collapsed_slice_dims = {0};
  d.start_index_map = {0};
  d.index_vector_dim = 2;
  auto g = b.Gather(w, idx, d, {1, 2});
  Literal weight = Lit(DType::kBF16, {5, 2}, {0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5});
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r,
                             Run1(b, g, {weight, IntLit(DType::kS64, {2, 3}, {4, 0, 2, 1, 1, 3})}));
  EXPECT_EQ(r.shape(), Shape(DType::kBF16, {2, 3, 2}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{4, 4.5, 0, 0.5, 2, 2.5, 1, 1.5, 1, 1.5, 3, 3.5}));
}

// Windows of size 3 starting at each index: out[k] = x[s_k : s_k + 3].
TEST(GatherTest, WideWindows) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({5}));
  auto idx = b.Parameter(1, Shape(DType::kS8, {2, 1}));
  GatherDims d;
  d.offset_dims = {1};
  d.collapsed_slice_dims = {};
  d.start_index_map = {0};
  d.index_vector_dim = 1;
  auto g = b.Gather(x, idx, d, {3});
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r,
      Run1(b, g, {F32Lit({5}, {10, 11, 12, 13, 14}), IntLit(DType::kS8, {2, 1}, {2, 0})}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{12, 13, 14, 10, 11, 12}));
}

TEST(GatherTest, WindowThatDoesNotFitIsOutOfRange) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({5}));
  auto idx = b.Parameter(1, Shape(DType::kS8, {1, 1}));
  GatherDims d;
  d.offset_dims = {1};
  d.start_index_map = {0};
  d.index_vector_dim = 1;
  auto g = b.Gather(x, idx, d, {3});
  auto r = Run1(b, g, {F32Lit({5}, {0, 0, 0, 0, 0}), IntLit(DType::kS8, {1, 1}, {3})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(HasAll(r.status().message(), {"gather %" + std::to_string(g), "index 3", "[0, 3)"}))
      << r.status().message();
}

TEST(GatherTest, OutOfRangeAndNegativeIndicesAreErrors) {
  for (int64_t bad : {5, -1}) {
    GraphBuilder b;
    auto w = b.Parameter(0, F32({5, 2}));
    auto idx = b.Parameter(1, Shape(DType::kS64, {2}));
    GatherDims d;
    d.offset_dims = {1};
    d.collapsed_slice_dims = {0};
    d.start_index_map = {0};
    d.index_vector_dim = 1;
    auto g = b.Gather(w, idx, d, {1, 2});
    auto r = Run1(b, g,
                  {F32Lit({5, 2}, std::vector<double>(10, 1)), IntLit(DType::kS64, {2}, {0, bad})});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
    EXPECT_TRUE(HasAll(r.status().message(),
                       {"gather %" + std::to_string(g), "index " + std::to_string(bad), "[0, 5)"}))
        << r.status().message();
  }
}

ScatterDims ScalarScatterDims() {
  ScatterDims d;
  d.update_window_dims = {};
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  return d;
}

// index_put_(accumulate=True) / scatter_add with duplicate indices.
TEST(ScatterTest, AddAccumulatesDuplicates) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({5}));
  auto idx = b.Parameter(1, Shape(DType::kS64, {4}));
  auto u = b.Parameter(2, F32({4}));
  auto s = b.Scatter(x, idx, u, ScalarScatterDims(), ReduceKind::kAdd);
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r, Run1(b, s,
                      {F32Lit({5}, {0, 100, 0, 0, 0}), IntLit(DType::kS64, {4}, {1, 3, 1, 1}),
                       F32Lit({4}, {1, 2, 3, 4})}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{0, 108, 0, 2, 0}));
}

TEST(ScatterTest, AssignKeepsLastDuplicate) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({5}));
  auto idx = b.Parameter(1, Shape(DType::kU16, {4}));
  auto u = b.Parameter(2, F32({4}));
  auto s = b.Scatter(x, idx, u, ScalarScatterDims(), ReduceKind::kAssign);
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r, Run1(b, s,
                      {F32Lit({5}, {9, 9, 9, 9, 9}), IntLit(DType::kU16, {4}, {1, 3, 1, 1}),
                       F32Lit({4}, {1, 2, 3, 4})}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{9, 4, 9, 2, 9}));
}

// index_add_(0, idx, src): whole rows, duplicates accumulate.
TEST(ScatterTest, RowIndexAdd) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({3, 2}));
  auto idx = b.Parameter(1, Shape(DType::kS32, {3}));
  auto u = b.Parameter(2, F32({3, 2}));
  ScatterDims d;
  d.update_window_dims = {1};
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  auto s = b.Scatter(x, idx, u, d, ReduceKind::kAdd);
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r, Run1(b, s,
                      {F32Lit({3, 2}, {1, 1, 1, 1, 1, 1}), IntLit(DType::kS32, {3}, {2, 0, 2}),
                       F32Lit({3, 2}, {1, 2, 10, 20, 100, 200})}));
  EXPECT_EQ(Doubles(r), (std::vector<double>{11, 21, 1, 1, 102, 203}));
}

// torch.scatter_add(x, 1, idx, src): out[i][idx[i][j]] += src[i][j].
TEST(ScatterTest, TorchScatterAddDim1) {
  GraphBuilder b;
  auto x = b.Parameter(0, Shape(DType::kS32, {2, 3}));
  auto idx = b.Parameter(1, Shape(DType::kS64, {2, 2, 2}));
  auto u = b.Parameter(2, Shape(DType::kS32, {2, 2}));
  ScatterDims d;
  d.update_window_dims = {};
  d.inserted_window_dims = {0, 1};
  d.scatter_dims_to_operand_dims = {0, 1};
  d.index_vector_dim = 2;
  auto s = b.Scatter(x, idx, u, d, ReduceKind::kAdd);
  // idx = [[2, 2], [0, 1]]
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r,
                             Run1(b, s,
                                  {IntLit(DType::kS32, {2, 3}, {0, 0, 0, 0, 0, 0}),
                                   IntLit(DType::kS64, {2, 2, 2}, {0, 2, 0, 2, 1, 0, 1, 1}),
                                   IntLit(DType::kS32, {2, 2}, {5, 6, 7, 8})}));
  EXPECT_EQ(Ints(r), (std::vector<int64_t>{0, 0, 11, 7, 8, 0}));
}

TEST(ScatterTest, Combiners) {
  struct Case {
    ReduceKind k;
    DType t;
    std::vector<int64_t> want;
  };
  // operand {5, 5, 1}, updates at {0, 0, 1, 2} = {7, -3, 2, 0}
  std::vector<Case> cases = {
      {ReduceKind::kMaximum, DType::kS32, {7, 5, 1}},
      {ReduceKind::kMinimum, DType::kS32, {-3, 2, 0}},
      {ReduceKind::kMultiply, DType::kS32, {-105, 10, 0}},
      {ReduceKind::kAnd, DType::kS32, {5 & 7 & -3, 5 & 2, 0}},
      {ReduceKind::kOr, DType::kS32, {5 | 7 | -3, 5 | 2, 1}},
      {ReduceKind::kAdd, DType::kS8, {9, 7, 1}},
  };
  for (const auto& c : cases) {
    GraphBuilder b;
    auto x = b.Parameter(0, Shape(c.t, {3}));
    auto idx = b.Parameter(1, Shape(DType::kS64, {4}));
    auto u = b.Parameter(2, Shape(c.t, {4}));
    auto s = b.Scatter(x, idx, u, ScalarScatterDims(), c.k);
    EMBER_ASSERT_OK_AND_ASSIGN(
        Literal r, Run1(b, s,
                        {IntLit(c.t, {3}, {5, 5, 1}), IntLit(DType::kS64, {4}, {0, 0, 1, 2}),
                         IntLit(c.t, {4}, {7, -3, 2, 0})}));
    EXPECT_EQ(Ints(r), c.want) << ReduceKindName(c.k);
  }
}

TEST(ScatterTest, IntegerAddWraps) {
  GraphBuilder b;
  auto x = b.Parameter(0, Shape(DType::kS8, {1}));
  auto idx = b.Parameter(1, Shape(DType::kS64, {2}));
  auto u = b.Parameter(2, Shape(DType::kS8, {2}));
  auto s = b.Scatter(x, idx, u, ScalarScatterDims(), ReduceKind::kAdd);
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r,
                             Run1(b, s,
                                  {IntLit(DType::kS8, {1}, {100}), IntLit(DType::kS64, {2}, {0, 0}),
                                   IntLit(DType::kS8, {2}, {27, 1})}));
  EXPECT_EQ(Ints(r), (std::vector<int64_t>{-128}));
}

TEST(ScatterTest, MaximumPropagatesNaN) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({2}));
  auto idx = b.Parameter(1, Shape(DType::kS64, {2}));
  auto u = b.Parameter(2, F32({2}));
  auto s = b.Scatter(x, idx, u, ScalarScatterDims(), ReduceKind::kMaximum);
  EMBER_ASSERT_OK_AND_ASSIGN(
      Literal r,
      Run1(b, s, {F32Lit({2}, {1, 1}), IntLit(DType::kS64, {2}, {0, 1}), F32Lit({2}, {NAN, 0})}));
  EXPECT_TRUE(std::isnan(r.GetDouble(0)));
  EXPECT_EQ(r.GetDouble(1), 1);
}

TEST(ScatterTest, PredOrAndBF16Add) {
  {
    GraphBuilder b;
    auto x = b.Parameter(0, Shape(DType::kPred, {3}));
    auto idx = b.Parameter(1, Shape(DType::kS64, {2}));
    auto u = b.Parameter(2, Shape(DType::kPred, {2}));
    auto s = b.Scatter(x, idx, u, ScalarScatterDims(), ReduceKind::kOr);
    EMBER_ASSERT_OK_AND_ASSIGN(
        Literal r, Run1(b, s,
                        {IntLit(DType::kPred, {3}, {0, 0, 1}), IntLit(DType::kS64, {2}, {1, 2}),
                         IntLit(DType::kPred, {2}, {1, 0})}));
    EXPECT_EQ(Ints(r), (std::vector<int64_t>{0, 1, 1}));
  }
  {
    // bf16: 256 + 1 rounds back to 256 (8 mantissa bits), stored rounded after each update.
    GraphBuilder b;
    auto x = b.Parameter(0, Shape(DType::kBF16, {1}));
    auto idx = b.Parameter(1, Shape(DType::kS64, {2}));
    auto u = b.Parameter(2, Shape(DType::kBF16, {2}));
    auto s = b.Scatter(x, idx, u, ScalarScatterDims(), ReduceKind::kAdd);
    EMBER_ASSERT_OK_AND_ASSIGN(
        Literal r, Run1(b, s,
                        {Lit(DType::kBF16, {1}, {256}), IntLit(DType::kS64, {2}, {0, 0}),
                         Lit(DType::kBF16, {2}, {1, 2})}));
    EXPECT_EQ(Doubles(r), (std::vector<double>{258}));
  }
}

TEST(ScatterTest, ComplexAssign) {
  GraphBuilder b;
  auto x = b.Parameter(0, Shape(DType::kC64, {2}));
  auto idx = b.Parameter(1, Shape(DType::kS64, {1}));
  auto u = b.Parameter(2, Shape(DType::kC64, {1}));
  auto s = b.Scatter(x, idx, u, ScalarScatterDims(), ReduceKind::kAssign);
  Literal xv(Shape(DType::kC64, {2})), uv(Shape(DType::kC64, {1}));
  uv.data_as<std::complex<float>>()[0] = {3, -4};
  EMBER_ASSERT_OK_AND_ASSIGN(Literal r, Run1(b, s, {xv, IntLit(DType::kS64, {1}, {1}), uv}));
  EXPECT_EQ(r.GetComplex(0), std::complex<double>(0, 0));
  EXPECT_EQ(r.GetComplex(1), std::complex<double>(3, -4));
}

TEST(ScatterTest, OutOfRangeIsAnError) {
  GraphBuilder b;
  auto x = b.Parameter(0, F32({3, 2}));
  auto idx = b.Parameter(1, Shape(DType::kS32, {2}));
  auto u = b.Parameter(2, F32({2, 2}));
  ScatterDims d;
  d.update_window_dims = {1};
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  auto s = b.Scatter(x, idx, u, d, ReduceKind::kAdd);
  auto r = Run1(b, s,
                {F32Lit({3, 2}, std::vector<double>(6, 0)), IntLit(DType::kS32, {2}, {0, 3}),
                 F32Lit({2, 2}, {1, 1, 1, 1})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(HasAll(r.status().message(), {"scatter %" + std::to_string(s), "index 3", "[0, 3)"}))
      << r.status().message();
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// gather and scatter-assign move bytes: every dtype (complex and pred too);
// scatter-add on every numeric dtype.
TEST(GatherTest, EveryDType) {
  for (int ti = 0; ti < kNumDTypes; ++ti) {
    const DType t = static_cast<DType>(ti);
    SCOPED_TRACE(std::string(DTypeName(t)));
    GraphBuilder b;
    auto x = b.Parameter(0, Shape(t, {3}));
    auto idx = b.Parameter(1, Shape(DType::kS64, {2}));
    auto u = b.Parameter(2, Shape(t, {2}));
    GatherDims gd;
    gd.offset_dims = {};
    gd.collapsed_slice_dims = {0};
    gd.start_index_map = {0};
    gd.index_vector_dim = 1;
    ScatterDims sd;
    sd.update_window_dims = {};
    sd.inserted_window_dims = {0};
    sd.scatter_dims_to_operand_dims = {0};
    sd.index_vector_dim = 1;
    std::vector<NodeId> outs = {b.Gather(x, idx, gd, {1}),
                                b.Scatter(x, idx, u, sd, ReduceKind::kAssign)};
    const bool numeric = IsFloat(t) || IsInteger(t);
    if (numeric) outs.push_back(b.Scatter(x, idx, u, sd, ReduceKind::kAdd));
    Literal xv(Shape(t, {3})), uv(Shape(t, {2}));
    const int es = DTypeSize(t);
    for (int i = 0; i < 3 * es; ++i)
      static_cast<uint8_t*>(xv.data())[i] =
          t == DType::kPred ? (i % 2) : static_cast<uint8_t>(i + 1);
    for (int i = 0; i < 2 * es; ++i)
      static_cast<uint8_t*>(uv.data())[i] = t == DType::kPred ? 1 : static_cast<uint8_t>(200 + i);
    if (numeric) {
      xv = Lit(t, {3}, {1, 2, 3});
      uv = Lit(t, {2}, {10, 20});
    }
    auto r = testing::BuildAndRun(b, outs, {xv, IntLit(DType::kS64, {2}, {2, 0}), uv});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const auto* xb = static_cast<const uint8_t*>(xv.data());
    const auto* ub = static_cast<const uint8_t*>(uv.data());
    const auto* gb = static_cast<const uint8_t*>((*r)[0].data());
    const auto* sb = static_cast<const uint8_t*>((*r)[1].data());
    EXPECT_EQ(std::memcmp(gb, xb + 2 * es, es), 0);   // gather[0] = x[2]
    EXPECT_EQ(std::memcmp(gb + es, xb, es), 0);       // gather[1] = x[0]
    EXPECT_EQ(std::memcmp(sb, ub + es, es), 0);       // x[0] = u[1]
    EXPECT_EQ(std::memcmp(sb + es, xb + es, es), 0);  // x[1] unchanged
    EXPECT_EQ(std::memcmp(sb + 2 * es, ub, es), 0);   // x[2] = u[0]
    if (numeric) EXPECT_EQ(Doubles((*r)[2]), (std::vector<double>{21, 2, 13}));
  }
}

}  // namespace
}  // namespace ember
