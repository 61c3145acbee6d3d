// Generated CPU kernels vs the reference interpreter for the data-movement
// ops (broadcast-in-dim, reshape, transpose, slice, reverse, concatenate,
// pad), iota and constants, on f32, s32, bf16 and pred; data movement is
// index arithmetic in the fused loop, so chains of it are tested too.
#include "codegen/cpu/codegen_test_util.h"

namespace ember::codegen {
namespace {

using testing::BuildKernel;
using testing::BuiltKernel;
using testing::ExpectMatchesInterpreter;
using testing::FastOptions;
using testing::RandomLiteral;
using testing::TempDir;

void CheckDataMovement(DType t) {
  TempDir dir;
  std::mt19937_64 rng(11);
  Shape xs(t, {2, 3, 4}), ys(t, {6, 8}), zs(t, {3, 1, 4}), ss(t, {});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId y = b.Parameter(1, ys);
  NodeId z = b.Parameter(2, zs);
  NodeId s = b.Parameter(3, ss);
  NodeId e = b.Parameter(4, Shape(t, {3, 0, 4}));
  std::vector<double> cvals;
  for (int i = 0; i < 12; ++i) cvals.push_back(IsPred(t) ? (i % 3 == 0) : i * 1.5 - 4);
  NodeId table = b.Constant(Literal::FromDoubles(Shape(t, {3, 4}), cvals));
  NodeId splat = b.Constant(Literal::FromDoubles(Shape(t, {2, 3, 4}), std::vector<double>(24, 1)));
  std::vector<NodeId> outs = {
      b.BroadcastInDim(z, {2, 3, 5, 4}, {1, 2, 3}),
      b.BroadcastInDim(s, {3, 2}, {}),
      b.BroadcastInDim(table, {3, 2, 4}, {0, 2}),
      b.Reshape(z, {12}),
      b.Reshape(x, {6, 4}),
      b.Reshape(b.Transpose(x, {2, 0, 1}), {4, 6}),
      b.Transpose(x, {2, 0, 1}),
      b.Slice(y, {1, 2}, {6, 8}, {2, 3}),
      b.Slice(x, {0, 1, 0}, {2, 3, 4}, {1, 1, 1}),
      b.Reverse(y, {0, 1}),
      b.Reverse(x, {2}),
      b.Concatenate({z, e, b.Reshape(x, {3, 2, 4}), z}, 1),
      b.Concatenate({table, b.Reshape(z, {3, 4})}, 0),
      b.Pad(y, s, {-1, 2}, {2, -3}, {1, 0}),
      b.Pad(x, s, {0, 0, 0}, {0, 0, 0}, {0, 2, 1}),
      b.Pad(e, s, {1, 1, 0}, {0, 0, 1}, {0, 0, 0}),
      b.Slice(b.Reverse(b.Transpose(y, {1, 0}), {0}), {1, 0}, {7, 5}, {3, 2}),
      b.Transpose(b.BroadcastInDim(b.Reverse(table, {1}), {3, 4, 2}, {0, 1}), {2, 1, 0}),
      splat,
      table,
  };
  if (!IsPred(t)) {
    outs.push_back(b.Iota(Shape(t, {3, 5}), 1));
    outs.push_back(b.Iota(Shape(t, {4, 2, 3}), 0));
    // Elementwise through data movement: every element recomputed from x.
    NodeId tx = b.Transpose(x, {1, 0, 2});
    outs.push_back(b.Add(b.Multiply(tx, tx), b.BroadcastInDim(table, {3, 2, 4}, {0, 2})));
  } else {
    outs.push_back(b.Binary(OpKind::kXor, b.Transpose(x, {1, 0, 2}),
                            b.BroadcastInDim(table, {3, 2, 4}, {0, 2})));
  }
  b.SetOutputs(outs);
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ExpectMatchesInterpreter(*g,
                           {RandomLiteral(xs, rng), RandomLiteral(ys, rng), RandomLiteral(zs, rng),
                            RandomLiteral(ss, rng), Literal(Shape(t, {3, 0, 4}))},
                           FastOptions(dir.path()));
}

TEST(CodegenDataMovement, F32) { CheckDataMovement(DType::kF32); }
TEST(CodegenDataMovement, S32) { CheckDataMovement(DType::kS32); }
TEST(CodegenDataMovement, BF16) { CheckDataMovement(DType::kBF16); }
TEST(CodegenDataMovement, Pred) { CheckDataMovement(DType::kPred); }

// A row broadcast's operand is hoisted out of the loop over the row at the
// row's index; the same operand read through a reverse of the row's dims is
// at another index and must be computed, not taken from the hoisted value
// (codegen_fuzz EMBER_FUZZ_SEED=5, graph seed 5000296).
TEST(CodegenDataMovement, RowInvariantReadThroughReverseIsNotTheHoistedValue) {
  TempDir dir;
  std::mt19937_64 rng(13);
  Shape xs(DType::kS32, {3, 4});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId bx = b.BroadcastInDim(x, {3, 4, 3}, {0, 1});
  NodeId seven = b.BroadcastInDim(b.ConstantScalar(DType::kS32, 7), {3, 4, 3}, {});
  NodeId rev = b.Reverse(b.Multiply(bx, seven), {1, 2});
  b.SetOutputs({b.Binary(OpKind::kShiftRightLogical, bx, rev), b.Add(bx, b.Reverse(bx, {0}))});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ExpectMatchesInterpreter(*g, {RandomLiteral(xs, rng)}, FastOptions(dir.path()));
}

// Transposes that keep a run of the innermost dim contiguous (an attention
// head merge [B,H,T,hd] -> [B,T,H*hd]) run as rows of a divisor of the
// innermost dim (plan_loop.cc RowLength): with a row broadcast hoisted per
// row, a concatenate along the innermost dim, and at -O1 and -O3.
TEST(CodegenDataMovement, RowsShorterThanTheInnermostDimMatchInterpreter) {
  TempDir dir;
  std::mt19937_64 rng(14);
  Shape xs(DType::kF32, {2, 3, 4, 8}), ys(DType::kF32, {4, 2, 16}), bs(DType::kF32, {8});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId y = b.Parameter(1, ys);
  NodeId r = b.Parameter(2, bs);
  NodeId merged = b.Reshape(b.Transpose(x, {0, 2, 1, 3}), {8, 24});
  NodeId ym = b.Reshape(b.Transpose(y, {1, 0, 2}), {2, 64});
  b.SetOutputs({
      merged,
      b.Add(merged, b.BroadcastInDim(b.Exp(r), {8, 24}, {0})),
      ym,
      b.Concatenate({merged, b.Reshape(ym, {8, 16})}, 1),
      b.Reshape(b.Transpose(b.Reshape(ym, {2, 4, 16}), {1, 0, 2}), {4, 32}),
  });
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::vector<Literal> args = {RandomLiteral(xs, rng), RandomLiteral(ys, rng),
                                     RandomLiteral(bs, rng)};
  for (bool fast : {true, false}) {
    CodegenOptions opts = FastOptions(dir.path());
    opts.fast = fast;
    ExpectMatchesInterpreter(*g, args, opts);
  }
}

// The attention backward's q/k/v gradients, each [B,H,T,hd] transposed to [B,T,H*hd]
// and concatenated along the innermost dim (the qkv projection's gradient): an operand's
// index inside the concatenate is the concatenate's index less its offset, not a fresh
// variable, so the row length search sees the per-element division a row of 384 would
// need and takes rows of hd = 32, each read with unit stride.
TEST(CodegenDataMovement, ConcatenatedHeadMergesRunAsRowsOfTheHeadDim) {
  TempDir dir;
  std::mt19937_64 rng(15);
  Shape hs(DType::kF32, {2, 4, 8, 32});
  GraphBuilder b;
  std::vector<NodeId> parts;
  for (int i = 0; i < 3; ++i)
    parts.push_back(b.Reshape(b.Transpose(b.Parameter(i, hs), {0, 2, 1, 3}), {2, 8, 128}));
  b.SetOutputs({b.Concatenate(parts, 2)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto src = EmitKernelSource(*g);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_NE(src->code.find("for (int64_t row = (begin / 32);"), std::string::npos) << src->code;
  EXPECT_EQ(src->code.find("% 32)]"), std::string::npos) << src->code;
  ExpectMatchesInterpreter(*g,
                           {RandomLiteral(hs, rng), RandomLiteral(hs, rng), RandomLiteral(hs, rng)},
                           FastOptions(dir.path()), ThreadParallelFor(3));
}

// A transpose that moves the innermost dim (an AOTAutograd weight gradient's t() of a
// [K, N] product) runs its rows in blocks of 32 columns, each block over the chunk's rows,
// so the source lines a block reads serve its next rows from cache; chunks that start
// and end inside rows (ThreadParallelFor(3)) still compute every element once. A
// transpose keeping the innermost dim in place is not tiled.
TEST(CodegenDataMovement, TransposesOfTheInnermostDimRunInColumnBlocks) {
  TempDir dir;
  std::mt19937_64 rng(16);
  Shape s(DType::kF32, {96, 160});
  GraphBuilder b;
  const NodeId x = b.Parameter(0, s);
  b.SetOutputs({b.Multiply(b.Transpose(x, {1, 0}), b.Transpose(x, {1, 0}))});
  const BuiltKernel moved = BuildKernel(b.Build(), dir.path());
  EXPECT_NE(moved.source.find("jb += 32"), std::string::npos) << moved.source;
  ExpectMatchesInterpreter(moved.g, {RandomLiteral(s, rng)}, FastOptions(dir.path()),
                           ThreadParallelFor(3));

  Shape t(DType::kF32, {64, 8, 96});
  GraphBuilder b2;
  b2.SetOutputs({b2.Negate(b2.Transpose(b2.Parameter(0, t), {1, 0, 2}))});
  const BuiltKernel kept = BuildKernel(b2.Build(), dir.path());
  EXPECT_EQ(kept.source.find("jb += "), std::string::npos) << kept.source;
  ExpectMatchesInterpreter(kept.g, {RandomLiteral(t, rng)}, FastOptions(dir.path()),
                           ThreadParallelFor(3));
}

TEST(CodegenDataMovement, GetTupleElementOfTupleForwards) {
  TempDir dir;
  std::mt19937_64 rng(12);
  Shape s(DType::kF32, {6});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s);
  NodeId y = b.Parameter(1, s);
  NodeId t = b.Tuple({x, b.Negate(y)});
  b.SetOutputs({b.Add(b.GetTupleElement(t, 1), x), b.GetTupleElement(t, 0)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ExpectMatchesInterpreter(*g, {RandomLiteral(s, rng), RandomLiteral(s, rng)},
                           FastOptions(dir.path()));
  // A tuple as an output is not supported.
  GraphBuilder c;
  NodeId p = c.Parameter(0, s);
  c.SetOutputs({c.Tuple({p, p})});
  auto gc = c.Build();
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(EmitKernelSource(*gc).status().code(), StatusCode::kUnimplemented);
}

TEST(CodegenDataMovement, OutputIsAParameterOrConstant) {
  TempDir dir;
  GraphBuilder b;
  NodeId x = b.Parameter(0, Shape(DType::kS32, {5}));
  b.SetOutputs({x, b.ConstantScalar(DType::kF32, -0.0), x});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  auto k = ExpectMatchesInterpreter(
      *g, {Literal::FromInts(Shape(DType::kS32, {5}), {1, 2, 3, 4, 5})}, FastOptions(dir.path()));
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->name(), "ember_fused_copy_0");
}

// The index pairs nll_loss builds for its gather, (iota, target) concatenated: s64[n, 2].
StatusOr<Graph> IndexPairs(int64_t n) {
  GraphBuilder b;
  NodeId t = b.Parameter(0, Shape(DType::kS64, {n}));
  b.SetOutputs({b.Concatenate({b.Iota(Shape(DType::kS64, {n, 1}), 0), b.Reshape(t, {n, 1})}, 1)});
  return b.Build();
}

// A phase forks only with more work than eager's TensorIterator grain (ATen's
// GRAIN_SIZE, 32768 elements): nll_loss's 32768-element index pairs at 2^14 split into
// two chunks of 10 us that waited 6-10 ms for the second thread on shared cores
// (docs/performance.md). at::parallel_for (and ThreadParallelFor) run [b, e) on the
// caller when e - b <= grain; a larger phase still splits, with the same values.
TEST(CodegenDataMovement, SmallLoopsRunOnTheCallerLargeOnesSplit) {
  TempDir dir;
  std::mt19937_64 rng(13);
  for (const int64_t n : {int64_t{16384}, int64_t{65536}}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto g = IndexPairs(n);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    std::vector<int64_t> ids(n);
    for (int64_t& v : ids) v = static_cast<int64_t>(rng() % 1000);
    const Literal target = Literal::FromInts(Shape(DType::kS64, {n}), ids);
    int forks = 0, launches = 0;
    const ParallelFor threads = ThreadParallelFor(2);
    const ParallelFor recording = [&](int64_t begin, int64_t end, int64_t grain,
                                      const std::function<void(int64_t, int64_t)>& body) {
      ++launches;
      if (end - begin > grain) ++forks;
      threads(begin, end, grain, body);
    };
    ASSERT_TRUE(ExpectMatchesInterpreter(*g, {target}, FastOptions(dir.path()), recording));
    EXPECT_EQ(launches, 1);
    EXPECT_EQ(forks, n * 2 > 32768 ? 1 : 0);
  }
}

}  // namespace
}  // namespace ember::codegen
