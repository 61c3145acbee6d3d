// Generated gather and scatter kernels vs the reference interpreter, beyond
// codegen_indexing_test: every dtype, index dtype and dimension-number shape
// tried (embedding lookups and their backward scatter-add with many
// duplicates, the cross-entropy target pick, windows along indexed dims,
// batch dims between window dims, scalar index vectors, u8/u64 indices, empty
// batches, every combiner), bit-exact serially and on 4 threads; out-of-range
// indices (negative, too large, u64 above INT64_MAX) are OutOfRange.
#include "codegen/cpu/codegen_test_util.h"

namespace ember::codegen {
namespace {

using testing::ExpectMatchesInterpreter;
using testing::FastOptions;
using testing::RandomLiteral;
using testing::RunKernel;
using testing::SameLiteral;
using testing::TempDir;

// Indices of shape `s` uniform in [lo, hi] (as doubles; any integer dtype).
Literal Indices(const Shape& s, std::mt19937_64& rng, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int64_t> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(s.num_elements()));
  for (double& x : v) x = static_cast<double>(u(rng));
  return Literal::FromDoubles(s, v);
}

Graph BuildGather(const Shape& operand, const Shape& indices, const GatherDims& d,
                  const std::vector<int64_t>& slice_sizes) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, operand);
  NodeId i = b.Parameter(1, indices);
  b.SetOutputs({b.Gather(x, i, d, slice_sizes)});
  auto g = b.Build();
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::move(g).value();
}

Graph BuildScatter(const Shape& operand, const Shape& indices, const Shape& updates,
                   const ScatterDims& d, ReduceKind k) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, operand);
  NodeId i = b.Parameter(1, indices);
  NodeId u = b.Parameter(2, updates);
  b.SetOutputs({b.Scatter(x, i, u, d, k)});
  auto g = b.Build();
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::move(g).value();
}

// Compiles g and checks it against the interpreter serially and on 4 threads.
void Check(const Graph& g, const std::vector<Literal>& args, const std::string& cache) {
  auto k = ExpectMatchesInterpreter(g, args, FastOptions(cache));
  ASSERT_NE(k, nullptr);
  auto want = Evaluate(g, args);
  ASSERT_TRUE(want.ok());
  auto threaded = RunKernel(*k, args, ThreadParallelFor(4));
  ASSERT_TRUE(threaded.ok()) << threaded.status().ToString();
  EXPECT_TRUE(SameLiteral((*threaded)[0], (*want)[0])) << "on 4 threads";
}

// Embedding lookup: rows of a [V, D] table picked by s64[N, 1] indices (as
// the torch lowering emits it), and by s32[N] (index_vector_dim = rank).
TEST(CodegenIndexingGeneral, EmbeddingGatherOnEveryDtype) {
  TempDir dir;
  std::mt19937_64 rng(1);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kS8, DType::kS64,
                  DType::kU16, DType::kPred}) {
    SCOPED_TRACE(DTypeName(t));
    Shape table(t, {65, 48});
    GatherDims d{{1}, {0}, {0}, 1};
    Shape idx(DType::kS64, {300, 1});
    Check(BuildGather(table, idx, d, {1, 48}),
          {RandomLiteral(
               table, rng,
               IsFloat(t) ? std::vector<double>{NAN, -0.0, INFINITY} : std::vector<double>{}),
           Indices(idx, rng, 0, 64)},
          dir.path());
    GatherDims d2{{2}, {0}, {0}, 2};
    Shape idx2(DType::kS32, {7, 9});
    Check(BuildGather(table, idx2, d2, {1, 48}),
          {RandomLiteral(table, rng), Indices(idx2, rng, 0, 64)}, dir.path());
  }
}

// Cross-entropy's target pick: one element per row of [N, C] logits, index
// vector (row, class) along dim 1 (nll_loss as lowered).
TEST(CodegenIndexingGeneral, PointGatherWithTwoComponentIndexVectors) {
  TempDir dir;
  std::mt19937_64 rng(2);
  Shape logits(DType::kF32, {512, 65});
  Shape idx(DType::kS64, {512, 2});
  std::vector<double> v;
  std::uniform_int_distribution<int> cls(0, 64);
  for (int r = 0; r < 512; ++r) {
    v.push_back(r);
    v.push_back(cls(rng));
  }
  GatherDims d{{}, {0, 1}, {0, 1}, 1};
  Check(BuildGather(logits, idx, d, {1, 1}),
        {RandomLiteral(logits, rng), Literal::FromDoubles(idx, v)}, dir.path());
}

// General dimension numbers: windows along indexed dims (slice sizes > 1),
// batch dims between offset dims, start_index_map out of operand order,
// index_vector_dim in the middle, u8/u64 indices, an empty batch.
TEST(CodegenIndexingGeneral, GeneralGatherDimensionNumbers) {
  TempDir dir;
  std::mt19937_64 rng(3);
  Shape x(DType::kF32, {6, 7, 8});
  {
    // indices [3, 2, 4]: vector dim 1 (entries map to operand dims 2, 0),
    // batch [3, 4]; window {2, 7, 3} with no collapsed dim; offset dims
    // {0, 2, 4} of a rank-5 result, batch dims 1 and 3 between them.
    GatherDims d{{0, 2, 4}, {}, {2, 0}, 1};
    Shape idx(DType::kS32, {3, 2, 4});
    std::vector<double> v(24);
    std::uniform_int_distribution<int> i2(0, 5), i0(0, 4);
    for (int a = 0; a < 3; ++a)
      for (int c = 0; c < 4; ++c) {
        v[a * 8 + 0 * 4 + c] = i2(rng);  // operand dim 2: starts [0, 8 - 3]
        v[a * 8 + 1 * 4 + c] = i0(rng);  // operand dim 0: starts [0, 6 - 2]
      }
    Check(BuildGather(x, idx, d, {2, 7, 3}), {RandomLiteral(x, rng), Literal::FromDoubles(idx, v)},
          dir.path());
  }
  {
    // u8 scalar indices into dim 1, window {6, 1, 8} collapsed on dim 1.
    GatherDims d{{0, 2}, {1}, {1}, 1};
    Shape idx(DType::kU8, {5});
    Check(BuildGather(x, idx, d, {6, 1, 8}), {RandomLiteral(x, rng), Indices(idx, rng, 0, 6)},
          dir.path());
  }
  {
    GatherDims d{{1}, {0}, {0}, 1};
    Shape idx(DType::kU64, {4, 1});
    Check(BuildGather(Shape(DType::kS32, {9, 5}), idx, d, {1, 5}),
          {RandomLiteral(Shape(DType::kS32, {9, 5}), rng), Indices(idx, rng, 0, 8)}, dir.path());
  }
  {
    GatherDims d{{1}, {0}, {0}, 1};
    Shape idx(DType::kS64, {0, 1});
    Check(BuildGather(Shape(DType::kF32, {9, 5}), idx, d, {1, 5}),
          {RandomLiteral(Shape(DType::kF32, {9, 5}), rng), Literal(idx)}, dir.path());
  }
}

// Embedding backward: updates [N, D] added into zeros [V, D] at rows chosen
// with many duplicates. The interpreter adds duplicates in update order; the
// kernel must too (bit-exact, on any thread count).
TEST(CodegenIndexingGeneral, EmbeddingBackwardScatterAddIsTheInterpretersOrder) {
  TempDir dir;
  std::mt19937_64 rng(4);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF64, DType::kS32}) {
    SCOPED_TRACE(DTypeName(t));
    Shape table(t, {65, 64});
    Shape idx(DType::kS64, {512, 1});
    Shape upd(t, {512, 64});
    ScatterDims d{{1}, {0}, {0}, 1};
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> uv(512 * 64);
    for (double& x : uv) x = IsFloat(t) ? u(rng) * 1e3 : std::round(u(rng) * 1e6);
    Check(BuildScatter(table, idx, upd, d, ReduceKind::kAdd),
          {RandomLiteral(table, rng), Indices(idx, rng, 0, 9), Literal::FromDoubles(upd, uv)},
          dir.path());
  }
}

// Every combiner, duplicates included (assign keeps the last update); pred
// combiners other than assign are declined (Unimplemented: interpreted).
TEST(CodegenIndexingGeneral, ScatterEveryCombiner) {
  TempDir dir;
  std::mt19937_64 rng(5);
  ScatterDims d{{1}, {0}, {0}, 1};
  Shape idx(DType::kS32, {40, 1});
  for (ReduceKind k : {ReduceKind::kAssign, ReduceKind::kAdd, ReduceKind::kMultiply,
                       ReduceKind::kMaximum, ReduceKind::kMinimum}) {
    for (DType t : {DType::kF32, DType::kF16, DType::kS8, DType::kU32, DType::kPred}) {
      SCOPED_TRACE(std::string(ReduceKindName(k)) + " " + std::string(DTypeName(t)));
      Shape x(t, {6, 5}), u(t, {40, 5});
      if (t == DType::kPred && k != ReduceKind::kAssign) {
        // Not generated (the runtime interprets it): declined, never a wrong answer.
        EXPECT_EQ(
            CompileKernel(BuildScatter(x, idx, u, d, k), FastOptions(dir.path())).status().code(),
            StatusCode::kUnimplemented);
        continue;
      }
      Check(BuildScatter(x, idx, u, d, k),
            {RandomLiteral(x, rng,
                           IsFloat(t) ? std::vector<double>{NAN, -0.0} : std::vector<double>{}),
             Indices(idx, rng, 0, 5),
             RandomLiteral(
                 u, rng, IsFloat(t) ? std::vector<double>{0.0, NAN, -0.0} : std::vector<double>{})},
            dir.path());
    }
  }
  for (ReduceKind k : {ReduceKind::kAnd, ReduceKind::kOr}) {
    for (DType t : {DType::kS32, DType::kU8}) {
      SCOPED_TRACE(std::string(ReduceKindName(k)) + " " + std::string(DTypeName(t)));
      Shape x(t, {6, 5}), u(t, {40, 5});
      Check(BuildScatter(x, idx, u, d, k),
            {RandomLiteral(x, rng), Indices(idx, rng, 0, 5), RandomLiteral(u, rng)}, dir.path());
    }
  }
}

// Windows along indexed dims overlap (a window of 3 rows at arbitrary row
// starts): the kernel may parallelize only over the columns, which no index
// addresses; scalar updates (no window) are serial; a window smaller than
// the operand; index vectors of two entries; an empty update set.
TEST(CodegenIndexingGeneral, GeneralScatterDimensionNumbers) {
  TempDir dir;
  std::mt19937_64 rng(6);
  {
    Shape x(DType::kF32, {10, 33});
    Shape idx(DType::kS64, {50, 1});
    Shape u(DType::kF32, {50, 3, 33});
    ScatterDims d{{1, 2}, {}, {0}, 1};
    Check(BuildScatter(x, idx, u, d, ReduceKind::kAdd),
          {RandomLiteral(x, rng), Indices(idx, rng, 0, 7), RandomLiteral(u, rng)}, dir.path());
  }
  {
    // point updates (row, col) into [8, 9]: nll_loss's backward shape
    Shape x(DType::kF32, {8, 9});
    Shape idx(DType::kS32, {30, 2});
    Shape u(DType::kF32, {30});
    ScatterDims d{{}, {0, 1}, {0, 1}, 1};
    std::uniform_int_distribution<int> r(0, 7), c(0, 8);
    std::vector<double> v;
    for (int i = 0; i < 30; ++i) {
      v.push_back(r(rng));
      v.push_back(c(rng));
    }
    Check(BuildScatter(x, idx, u, d, ReduceKind::kAdd),
          {RandomLiteral(x, rng), Literal::FromDoubles(idx, v), RandomLiteral(u, rng)}, dir.path());
  }
  {
    // window [2, 4] of a [5, 6, 7] operand, indexed on dims 2 and 0 (index
    // vector in dim 0 of the indices), batch dims [3, 2] around the window.
    Shape x(DType::kBF16, {5, 6, 7});
    Shape idx(DType::kS64, {2, 3, 2});
    Shape u(DType::kBF16, {3, 2, 4, 2});
    ScatterDims d{{2, 3}, {2}, {2, 0}, 0};
    std::vector<double> v(12);
    std::uniform_int_distribution<int> i2(0, 6), i0(0, 1);
    for (int k = 0; k < 6; ++k) {
      v[k] = i2(rng);      // entry 0 -> operand dim 2 (inserted: window 1, starts [0, 6])
      v[6 + k] = i0(rng);  // entry 1 -> operand dim 0 (window 4 of 5: starts [0, 1])
    }
    Check(BuildScatter(x, idx, u, d, ReduceKind::kAdd),
          {RandomLiteral(x, rng), Literal::FromDoubles(idx, v), RandomLiteral(u, rng)}, dir.path());
  }
  {
    Shape x(DType::kF32, {4, 3});
    Shape idx(DType::kS64, {0, 1});
    Shape u(DType::kF32, {0, 3});
    ScatterDims d{{1}, {0}, {0}, 1};
    Check(BuildScatter(x, idx, u, d, ReduceKind::kAdd),
          {RandomLiteral(x, rng), Literal(idx), Literal(u)}, dir.path());
  }
}

// Out-of-range starts (negative, past dim - window, u64 above INT64_MAX) are
// OutOfRange data errors, as in the interpreter; the kernel reads and writes
// nothing outside its buffers (ASan build).
TEST(CodegenIndexingGeneral, OutOfRangeIndicesAreDataErrors) {
  TempDir dir;
  std::mt19937_64 rng(7);
  Shape table(DType::kF32, {10, 4});
  for (int64_t bad : {-1LL, 10LL, 1LL << 40}) {
    SCOPED_TRACE(bad);
    Shape idx(DType::kS64, {6, 1});
    Literal iv = Indices(idx, rng, 0, 9);
    iv.SetDouble(3, static_cast<double>(bad));
    GatherDims gd{{1}, {0}, {0}, 1};
    Graph gg = BuildGather(table, idx, gd, {1, 4});
    auto k = CompileKernel(gg, FastOptions(dir.path()));
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    auto r = RunKernel(**k, {RandomLiteral(table, rng), iv}, ThreadParallelFor(4));
    EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange) << r.status().ToString();
    EXPECT_NE(r.status().message().find("gather %2"), std::string::npos) << r.status().ToString();
    EXPECT_EQ(Evaluate(gg, {RandomLiteral(table, rng), iv}).status().code(),
              StatusCode::kOutOfRange);

    ScatterDims sd{{1}, {0}, {0}, 1};
    Shape u(DType::kF32, {6, 4});
    Graph sg = BuildScatter(table, idx, u, sd, ReduceKind::kAdd);
    auto ks = CompileKernel(sg, FastOptions(dir.path()));
    ASSERT_TRUE(ks.ok()) << ks.status().ToString();
    auto rs = RunKernel(**ks, {RandomLiteral(table, rng), iv, RandomLiteral(u, rng)});
    EXPECT_EQ(rs.status().code(), StatusCode::kOutOfRange) << rs.status().ToString();
    EXPECT_NE(rs.status().message().find("scatter %3"), std::string::npos)
        << rs.status().ToString();
  }
  {
    // u64 above INT64_MAX
    Shape idx(DType::kU64, {2, 1});
    Literal iv(idx);
    static_cast<uint64_t*>(iv.data())[0] = 1;
    static_cast<uint64_t*>(iv.data())[1] = ~uint64_t{0};
    GatherDims gd{{1}, {0}, {0}, 1};
    Graph gg = BuildGather(table, idx, gd, {1, 4});
    auto k = CompileKernel(gg, FastOptions(dir.path()));
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(RunKernel(**k, {RandomLiteral(table, rng), iv}).status().code(),
              StatusCode::kOutOfRange);
  }
}

}  // namespace
}  // namespace ember::codegen
