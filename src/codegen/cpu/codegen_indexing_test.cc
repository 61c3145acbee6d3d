// Generated gather and scatter kernels vs the reference interpreter (bit for
// bit): the dimension numbers the torch lowering uses (torch.gather and
// scatter with full coordinates, index_select, embedding and its backward
// scatter-add), windows wider than 1, every index dtype, duplicate indices in
// every combiner, a scatter read by later phases, and out-of-range or
// negative indices (OutOfRange; through the runtime with the interpreter's
// message).
#include <algorithm>
#include <limits>

#include "codegen/cpu/codegen_test_util.h"
#include "ember/runtime/executable.h"

namespace ember::codegen {
namespace {

using testing::ExpectMatchesInterpreter;
using testing::FastOptions;
using testing::RandomLiteral;
using testing::TempDir;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Literal Ints(DType t, std::vector<int64_t> dims, const std::vector<double>& v) {
  return Literal::FromDoubles(Shape(t, std::move(dims)), v);
}

// Full coordinates as the lowering builds them for torch.gather/scatter along
// `dim` of a rank-2 tensor: [rows, cols, 2] = (iota or index) per dim.
NodeId FullCoords(GraphBuilder& b, NodeId index, int64_t rows, int64_t cols, int64_t dim) {
  std::vector<NodeId> parts;
  for (int64_t d = 0; d < 2; ++d) {
    NodeId p =
        d == dim ? b.Convert(index, DType::kS64) : b.Iota(Shape(DType::kS64, {rows, cols}), d);
    parts.push_back(b.Reshape(p, {rows, cols, 1}));
  }
  return b.Concatenate(parts, 2);
}

// Whole rows of a rank-2 operand picked by an index of rank `index_rank`
// (index_select, embedding lookup): each index selects one row (dim 0
// collapsed), the row is the trailing window dim.
GatherDims RowGather(int64_t index_rank) {
  GatherDims d;
  d.offset_dims = {index_rank};
  d.collapsed_slice_dims = {0};
  d.start_index_map = {0};
  d.index_vector_dim = index_rank;
  return d;
}

// The scatter that adds rows of updates into the rows named by a rank-1 index
// (the embedding backward; RowGather's transpose).
ScatterDims RowScatter() {
  ScatterDims d;
  d.update_window_dims = {1};
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  return d;
}

// One kernel: torch.gather along dim 1 (coordinates computed in the kernel),
// index_select of rows (s32 indices, index_vector_dim == rank), an embedding
// lookup (s64 [2, 3] indices), a gather with windows wider than 1 along both
// dims (u32 start pairs), each feeding elementwise ops.
TEST(CodegenIndexing, GathersMatchInterpreter) {
  TempDir dir;
  std::mt19937_64 rng(7);
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {5, 6}));
  NodeId gidx = b.Parameter(1, Shape(DType::kS64, {5, 4}));
  NodeId rows = b.Parameter(2, Shape(DType::kS32, {3}));
  NodeId tok = b.Parameter(3, Shape(DType::kS64, {2, 3}));
  NodeId win = b.Parameter(4, Shape(DType::kU32, {2, 2}));
  GatherDims point;
  point.collapsed_slice_dims = {0, 1};
  point.start_index_map = {0, 1};
  point.index_vector_dim = 2;
  NodeId g0 = b.Gather(x, FullCoords(b, gidx, 5, 4, 1), point, {1, 1});
  NodeId g1 = b.Gather(x, rows, RowGather(1), {1, 6});
  NodeId g2 = b.Gather(x, tok, RowGather(2), {1, 6});
  GatherDims wide;
  wide.offset_dims = {1, 2};
  wide.start_index_map = {0, 1};
  wide.index_vector_dim = 1;
  NodeId g3 = b.Gather(x, win, wide, {3, 2});
  b.SetOutputs({b.Exp(g0), b.Negate(g1), b.Add(g2, g2), g3});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::vector<Literal> args = {
      RandomLiteral(Shape(DType::kF32, {5, 6}), rng, {kNaN, -0.0}),
      Ints(DType::kS64, {5, 4}, {5, 0, 3, 3, 1, 1, 2, 0, 4, 5, 5, 5, 0, 0, 0, 2, 3, 1, 4, 2}),
      Ints(DType::kS32, {3}, {4, 0, 4}), Ints(DType::kS64, {2, 3}, {1, 1, 0, 4, 2, 3}),
      Ints(DType::kU32, {2, 2}, {2, 4, 0, 0})};
  for (bool fast : {true, false}) {
    CodegenOptions opts = FastOptions(dir.path());
    opts.fast = fast;
    ExpectMatchesInterpreter(*g, args, opts, ThreadParallelFor(3));
  }
}

// Scatters with duplicate indices: point scatter-add (f32, the lowering's
// scatter_add), assign (s32: the last update wins), multiply, maximum and
// minimum with NaNs, bf16 add (rounded after every update), and the
// embedding backward (rows of updates added into zeros, s64 [6] indices).
TEST(CodegenIndexing, ScattersMatchInterpreter) {
  TempDir dir;
  std::mt19937_64 rng(11);
  const std::vector<std::pair<DType, ReduceKind>> cases = {
      {DType::kF32, ReduceKind::kAdd},      {DType::kS32, ReduceKind::kAssign},
      {DType::kF32, ReduceKind::kMultiply}, {DType::kF32, ReduceKind::kMaximum},
      {DType::kF32, ReduceKind::kMinimum},  {DType::kBF16, ReduceKind::kAdd},
      {DType::kS32, ReduceKind::kAdd},      {DType::kS32, ReduceKind::kOr}};
  for (const auto& [t, kind] : cases) {
    SCOPED_TRACE(std::string(DTypeName(t)) + " " + std::string(ReduceKindName(kind)));
    GraphBuilder b;
    NodeId x = b.Parameter(0, Shape(t, {4, 5}));
    NodeId idx = b.Parameter(1, Shape(DType::kS64, {4, 3}));
    NodeId upd = b.Parameter(2, Shape(t, {4, 3}));
    ScatterDims point;
    point.inserted_window_dims = {0, 1};
    point.scatter_dims_to_operand_dims = {0, 1};
    point.index_vector_dim = 2;
    NodeId s = b.Scatter(x, FullCoords(b, idx, 4, 3, 1), upd, point, kind);
    b.SetOutputs({s});
    auto g = b.Build();
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    // Rows 0 and 2 hit column 1 three times and twice.
    std::vector<Literal> args = {RandomLiteral(Shape(t, {4, 5}), rng, {kNaN, 3.0}),
                                 Ints(DType::kS64, {4, 3}, {1, 1, 1, 0, 4, 2, 1, 3, 1, 4, 4, 0}),
                                 RandomLiteral(Shape(t, {4, 3}), rng, {2.5, kNaN, -1.0, 7.0})};
    if (!IsFloat(t)) {
      args[0] = RandomLiteral(Shape(t, {4, 5}), rng);
      args[2] = RandomLiteral(Shape(t, {4, 3}), rng);
    }
    ExpectMatchesInterpreter(*g, args, FastOptions(dir.path()), ThreadParallelFor(3));
  }
  // Embedding backward: zeros[10, 4] with rows of updates added at tok[i].
  GraphBuilder b;
  NodeId tok = b.Parameter(0, Shape(DType::kS64, {6}));
  NodeId grad = b.Parameter(1, Shape(DType::kF32, {6, 4}));
  NodeId zeros = b.BroadcastInDim(b.ConstantScalar(DType::kF32, 0), {10, 4}, {});
  NodeId s = b.Scatter(zeros, tok, grad, RowScatter(), ReduceKind::kAdd);
  // A scatter read by a later phase (a temporary) and the scatter itself.
  b.SetOutputs({b.Multiply(s, s), s});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::vector<Literal> args = {Ints(DType::kS64, {6}, {3, 9, 3, 0, 3, 9}),
                               RandomLiteral(Shape(DType::kF32, {6, 4}), rng)};
  for (bool fast : {true, false}) {
    CodegenOptions opts = FastOptions(dir.path());
    opts.fast = fast;
    auto k = ExpectMatchesInterpreter(*g, args, opts, ThreadParallelFor(3));
    ASSERT_TRUE(k);
    EXPECT_NE(k->source().find("scatter"), std::string::npos);
  }
}

// Embedding backward at a step's shapes (ids [B, T] with many duplicates,
// updates [B, T, C] computed in the kernel): the scatter runs by blocks of
// destination rows (ScatterRowBlocks), each block walking the list of its
// update rows in update order (bucketed by fixed chunks of rows first), so
// the sums are the interpreter's bits (and the serial item's,
// EMBER_CODEGEN_SCATTER_ROWS=0) on any number of threads.
TEST(CodegenIndexing, RowBlockScatterAddsInUpdateOrder) {
  TempDir dir;
  std::mt19937_64 rng(11);
  struct Case {
    int64_t B, T, C, V;
    DType t;
  };
  // 300 rows in 16 blocks, 16 chunks of update rows; 5 rows in 5 blocks and 3
  // update rows in 3 chunks.
  for (const Case& cs : {Case{6, 50, 37, 300, DType::kF32}, Case{6, 50, 37, 300, DType::kBF16},
                         Case{1, 3, 20, 5, DType::kF32}}) {
    const int64_t B = cs.B, T = cs.T, C = cs.C, V = cs.V;
    const DType t = cs.t;
    GraphBuilder b;
    NodeId ids = b.Parameter(0, Shape(DType::kS64, {B, T}));
    NodeId dy = b.Parameter(1, Shape(t, {B, T, C}));
    NodeId zeros = b.BroadcastInDim(b.ConstantScalar(t, 0), {V, C}, {});
    ScatterDims d;
    d.update_window_dims = {2};
    d.inserted_window_dims = {0};
    d.scatter_dims_to_operand_dims = {0};
    d.index_vector_dim = 2;
    NodeId upd = b.Multiply(dy, b.BroadcastInDim(b.ConstantScalar(t, 1.5), {B, T, C}, {}));
    b.SetOutputs({b.Scatter(zeros, ids, upd, d, ReduceKind::kAdd)});
    auto g = b.Build();
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    std::vector<int64_t> iv(B * T);
    std::uniform_int_distribution<int64_t> pick(
        0, std::min<int64_t>(9, V - 1));  // rows 0..9, a few others
    for (size_t i = 0; i < iv.size(); ++i) iv[i] = i % 7 == 0 ? (i * 37) % V : pick(rng);
    std::vector<Literal> args = {
        Ints(DType::kS64, {B, T}, std::vector<double>(iv.begin(), iv.end())),
        RandomLiteral(Shape(t, {B, T, C}), rng)};
    auto src = EmitKernelSource(*g);
    ASSERT_TRUE(src.ok());
    const std::string blocks = std::to_string(std::min<int64_t>(V, 16));
    const std::string chunks = std::to_string(std::min<int64_t>(B * T, 16));
    EXPECT_NE(src->code.find("pf(pf_ctx, 0, " + blocks + ", 1, c, ember_phase_0)"),
              std::string::npos)
        << src->code;
    // The update rows are bucketed by block first (counted, then listed).
    EXPECT_NE(src->code.find("pf(pf_ctx, 0, " + chunks + ", 1, c, ember_phase_0_count)"),
              std::string::npos);
    EXPECT_NE(src->code.find("pf(pf_ctx, 0, " + chunks + ", 1, c, ember_phase_0_place)"),
              std::string::npos);
    auto k = ExpectMatchesInterpreter(*g, args, FastOptions(dir.path()), ThreadParallelFor(3));
    ASSERT_TRUE(k);
    ExpectMatchesInterpreter(*g, args, FastOptions(dir.path()));
    setenv("EMBER_CODEGEN_SCATTER_ROWS", "0", 1);
    auto serial_src = EmitKernelSource(*g);
    unsetenv("EMBER_CODEGEN_SCATTER_ROWS");
    ASSERT_TRUE(serial_src.ok());
    EXPECT_NE(serial_src->code.find("pf(pf_ctx, 0, 1,"), std::string::npos);
  }
}

// Out-of-range, negative and (u64) huge indices: the kernel returns
// OutOfRange; the runtime names the step and gives the interpreter's message
// (index, range, position), for gather and scatter.
TEST(CodegenIndexing, BadIndicesAreOutOfRangeWithTheInterpretersMessage) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kF32, {4, 3}));
  NodeId idx = b.Parameter(1, Shape(DType::kU64, {2}));
  NodeId upd = b.Parameter(2, Shape(DType::kF32, {2, 3}));
  NodeId g0 = b.Gather(x, idx, RowGather(1), {1, 3});
  NodeId s0 = b.Scatter(x, idx, upd, RowScatter(), ReduceKind::kAdd);
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  CompileOptions o;
  o.backend = Backend::kCpu;
  o.codegen.fast = true;
  TempDir dir;
  o.codegen.cache_dir = dir.path();
  for (NodeId root : {g0, s0}) {
    GraphBuilder one;
    NodeId ox = one.Parameter(0, Shape(DType::kF32, {4, 3}));
    NodeId oi = one.Parameter(1, Shape(DType::kU64, {2}));
    NodeId ou = one.Parameter(2, Shape(DType::kF32, {2, 3}));
    one.SetOutputs({root == g0 ? one.Gather(ox, oi, RowGather(1), {1, 3})
                               : one.Scatter(ox, oi, ou, RowScatter(), ReduceKind::kAdd)});
    auto og = one.Build();
    ASSERT_TRUE(og.ok());
    auto exe = Compile(*og, o);
    ASSERT_TRUE(exe.ok()) << exe.status().ToString();
    ASSERT_EQ(exe->steps().size(), 1u);
    EXPECT_EQ(exe->steps()[0].kind, StepKind::kKernel);
    for (double bad : {4.0, 18446744073709551615.0}) {
      std::vector<Literal> args = {Literal(Shape(DType::kF32, {4, 3})),
                                   Ints(DType::kU64, {2}, {1, bad}),
                                   Literal(Shape(DType::kF32, {2, 3}))};
      auto want = Evaluate(*og, args);
      ASSERT_FALSE(want.ok());
      auto r = exe->RunLiterals(args);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
      EXPECT_NE(r.status().message().find(want.status().message()), std::string::npos)
          << r.status().message() << "\nwant: " << want.status().message();
      EXPECT_NE(r.status().message().find("step 0 (kernel"), std::string::npos);
    }
    // In range: the kernel's values.
    std::mt19937_64 rng(3);
    std::vector<Literal> ok = {RandomLiteral(Shape(DType::kF32, {4, 3}), rng),
                               Ints(DType::kU64, {2}, {3, 3}),
                               RandomLiteral(Shape(DType::kF32, {2, 3}), rng)};
    auto want = Evaluate(*og, ok);
    auto got = exe->RunLiterals(ok);
    ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
    EXPECT_TRUE(testing::SameLiteral((*got)[0], (*want)[0], 0));
  }
}

}  // namespace
}  // namespace ember::codegen
