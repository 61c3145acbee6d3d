// Row kernels (plan_rows.cc; emitter.cc under EMBER_CODEGEN_LOOP_IR=0): kernels whose reductions
// all reduce the same innermost dims and whose other values are consumed per row run as one phase
// over the rows (one pass per reduction, then the outputs; expensive values several passes need
// kept in a row buffer). Checked against the interpreter bit for bit with vector math off
// (reductions of
// <= 128 elements follow the interpreter's order exactly) and within stated
// tolerances with it on; also the fallback to separate phases, errors,
// bf16, multi-dim rows, several threads, and the per-row hoisting of row
// broadcasts in plain elementwise kernels.
#include "codegen/cpu/codegen_test_util.h"

namespace ember::codegen {
namespace {

using testing::ExpectMatchesInterpreter;
using testing::FastOptions;
using testing::RandomLiteral;
using testing::RunKernel;
using testing::TempDir;

CodegenOptions Exact(const std::string& dir) {
  CodegenOptions o = FastOptions(dir);
  o.vector_math = false;  // scalar libm: bit-identical to the interpreter
  return o;
}

Graph Softmax(DType t, int64_t rows, int64_t cols, bool extra_outputs) {
  GraphBuilder b("softmax");
  NodeId x = b.Parameter(0, Shape(t, {rows, cols}));
  NodeId m = b.Reduce(x, {1}, ReduceKind::kMaximum);
  NodeId e = b.Exp(b.Subtract(x, b.BroadcastInDim(m, {rows, cols}, {0})));
  NodeId s = b.Reduce(e, {1}, ReduceKind::kAdd);
  NodeId y = b.Divide(e, b.BroadcastInDim(s, {rows, cols}, {0}));
  if (extra_outputs) {
    b.SetOutputs({y, m, b.Unary(OpKind::kLog, s)});
  } else {
    b.SetOutputs({y});
  }
  return b.Build().value();
}

bool IsRowKernel(const CompiledKernel& k) {
  return k.source().find("// Phases: one row phase over") != std::string::npos;
}

TEST(CodegenRow, SoftmaxIsOneRowPhaseAndBitExactWithoutVectorMath) {
  TempDir dir;
  std::mt19937_64 rng(11);
  Graph g = Softmax(DType::kF32, 37, 53, /*extra_outputs=*/true);
  Literal arg = RandomLiteral(Shape(DType::kF32, {37, 53}), rng);
  auto k = ExpectMatchesInterpreter(g, {arg}, Exact(dir.path()));
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(IsRowKernel(*k)) << k->source();
  // The entry runs exactly one phase (over the 37 rows).
  EXPECT_EQ(k->source().find("ember_phase_1"), std::string::npos);
  // exp(x - max) is stored in a row buffer by the exp-sum pass and read back
  // by the normalize pass, which calls no exp.
  const std::string& src = k->source();
  EXPECT_NE(src.find("float scr4[53];"), std::string::npos) << src;
  const size_t out_pass = src.find("// outputs of the row's shape");
  ASSERT_NE(out_pass, std::string::npos);
  EXPECT_EQ(src.find("__builtin_expf", out_pass), std::string::npos) << src.substr(out_pass);
  EXPECT_NE(src.find("scr4[", out_pass), std::string::npos);
  ExpectMatchesInterpreter(g, {arg}, Exact(dir.path()), ThreadParallelFor(3));
}

// With vector math, exp differs from libm by <= kVectorMathMaxUlps ulps; the
// softmax value (x - max is exact, exp within 4 ulps, the sum of positive
// terms within 4 ulps relative, one division) stays within 12 ulps.
TEST(CodegenRow, SoftmaxWithVectorMathWithinStatedUlps) {
  TempDir dir;
  std::mt19937_64 rng(12);
  Graph g = Softmax(DType::kF32, 64, 100, /*extra_outputs=*/false);
  Literal arg = RandomLiteral(Shape(DType::kF32, {64, 100}), rng);
  CodegenOptions opts = FastOptions(dir.path());
  opts.fast = false;  // -O3: the vectorized path
  auto k = ExpectMatchesInterpreter(g, {arg}, opts, ThreadParallelFor(2), /*ulps=*/12);
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(IsRowKernel(*k));
}

// Outputs of >= 4 MiB: each row's 64-byte-aligned middle is written with
// non-temporal stores, the head and tail plainly; same values. The output
// buffers here (Literal storage) start 16 bytes past a page, so rows have a
// head, a streamed middle and a tail; a second output misaligned differently
// from the first makes every row take the plain loop.
TEST(CodegenRow, LargeOutputsUseNonTemporalStores) {
  TempDir dir;
  std::mt19937_64 rng(19);
  const int64_t n = 1024 * 1024;
  Graph g = Softmax(DType::kF32, 1024, 1024, /*extra_outputs=*/false);
  Literal arg = RandomLiteral(Shape(DType::kF32, {1024, 1024}), rng);
  auto k = CompileKernel(g, Exact(dir.path()));
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_NE((*k)->source().find("ember_stream64(out0"), std::string::npos);
  auto want = Evaluate(g, {arg});
  ASSERT_TRUE(want.ok());
  // Rows of 1024 sum by blocks (not the interpreter's order): within 1e-5
  // relative of it; and the same bits whatever the output's alignment
  // (fully streamed at offset 0, head + middle + tail at offsets 4 and 16).
  std::vector<float> storage(n + 64);
  std::vector<std::vector<float>> results;
  for (int offset : {0, 4, 16}) {
    float* base = storage.data();
    while ((reinterpret_cast<uintptr_t>(base) & 63) != static_cast<uintptr_t>(offset)) ++base;
    Status st = (*k)->Run({arg.data()}, {base}, ThreadParallelFor(2));
    ASSERT_TRUE(st.ok()) << st.ToString();
    results.emplace_back(base, base + n);
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double w = (*want)[0].GetDouble(i);
    bad += std::fabs(results[0][i] - w) > 1e-5 * std::fabs(w);
  }
  EXPECT_EQ(bad, 0);
  // Small outputs never stream.
  Graph small = Softmax(DType::kF32, 64, 128, /*extra_outputs=*/false);
  auto ks = CompileKernel(small, Exact(dir.path()));
  ASSERT_TRUE(ks.ok());
  EXPECT_EQ((*ks)->source().find("ember_stream64(out0"), std::string::npos);
}

// Rows longer than 128: the blocked-lane summation (docs/codegen.md bound),
// compared with the interpreter to a relative 1e-5 (max exact).
TEST(CodegenRow, LongRowsUseTheBlockedReduction) {
  TempDir dir;
  std::mt19937_64 rng(13);
  Graph g = Softmax(DType::kF32, 12, 1000, /*extra_outputs=*/true);
  Literal arg = RandomLiteral(Shape(DType::kF32, {12, 1000}), rng);
  auto k = CompileKernel(g, FastOptions(dir.path()));
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_TRUE(IsRowKernel(**k));
  auto got = RunKernel(**k, {arg}, ThreadParallelFor(2));
  auto want = Evaluate(g, {arg});
  ASSERT_TRUE(got.ok() && want.ok());
  EXPECT_TRUE(testing::SameLiteral((*got)[1], (*want)[1]));  // max: exact
  for (int j : {0, 2}) {
    for (int64_t i = 0; i < (*want)[j].num_elements(); ++i) {
      const double w = (*want)[j].GetDouble(i);
      EXPECT_NEAR((*got)[j].GetDouble(i), w, 1e-5 * std::fabs(w) + 1e-30) << j << " " << i;
    }
  }
}

TEST(CodegenRow, LayerNormAndLogSoftmaxBitExactWithoutVectorMath) {
  TempDir dir;
  std::mt19937_64 rng(14);
  const int64_t R = 16, C = 96;
  GraphBuilder b("ln");
  NodeId x = b.Parameter(0, Shape(DType::kF32, {R, C}));
  NodeId gamma = b.Parameter(1, Shape(DType::kF32, {C}));
  NodeId beta = b.Parameter(2, Shape(DType::kF32, {C}));
  NodeId inv_c = b.BroadcastInDim(b.Constant(Literal::ScalarDouble(DType::kF32, 1.0 / C)), {R}, {});
  NodeId mean = b.Multiply(b.Reduce(x, {1}, ReduceKind::kAdd), inv_c);
  NodeId xc = b.Subtract(x, b.BroadcastInDim(mean, {R, C}, {0}));
  NodeId var = b.Multiply(b.Reduce(b.Multiply(xc, xc), {1}, ReduceKind::kAdd), inv_c);
  NodeId eps = b.BroadcastInDim(b.Constant(Literal::ScalarDouble(DType::kF32, 1e-5)), {R}, {});
  NodeId rstd = b.Unary(OpKind::kRsqrt, b.Add(var, eps));
  NodeId y = b.Add(b.Multiply(b.Multiply(xc, b.BroadcastInDim(rstd, {R, C}, {0})),
                              b.BroadcastInDim(gamma, {R, C}, {1})),
                   b.BroadcastInDim(beta, {R, C}, {1}));
  // log-softmax of the same rows, a second full-shaped output.
  NodeId m = b.Reduce(x, {1}, ReduceKind::kMaximum);
  NodeId xm = b.Subtract(x, b.BroadcastInDim(m, {R, C}, {0}));
  NodeId lse = b.Unary(OpKind::kLog, b.Reduce(b.Exp(xm), {1}, ReduceKind::kAdd));
  NodeId ls = b.Subtract(xm, b.BroadcastInDim(lse, {R, C}, {0}));
  b.SetOutputs({y, ls, rstd});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::vector<Literal> args = {RandomLiteral(Shape(DType::kF32, {R, C}), rng),
                               RandomLiteral(Shape(DType::kF32, {C}), rng),
                               RandomLiteral(Shape(DType::kF32, {C}), rng)};
  auto k = ExpectMatchesInterpreter(*g, args, Exact(dir.path()), ThreadParallelFor(2));
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(IsRowKernel(*k)) << k->source();
}

TEST(CodegenRow, Bf16SoftmaxBitExactWithoutVectorMath) {
  TempDir dir;
  std::mt19937_64 rng(15);
  Graph g = Softmax(DType::kBF16, 10, 40, /*extra_outputs=*/true);
  auto k = ExpectMatchesInterpreter(g, {RandomLiteral(Shape(DType::kBF16, {10, 40}), rng)},
                                    Exact(dir.path()));
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(IsRowKernel(*k));
}

// Rows of several dims: reduce over {1,2} of [9,4,40] (160 elements: the
// blocked path over two loops), broadcast back along dim 0.
TEST(CodegenRow, MultiDimRows) {
  TempDir dir;
  std::mt19937_64 rng(16);
  const Shape xs(DType::kS32, {9, 4, 40});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId mx = b.Reduce(x, {1, 2}, ReduceKind::kMaximum);
  NodeId d = b.Subtract(x, b.BroadcastInDim(mx, {9, 4, 40}, {0}));
  NodeId s = b.Reduce(b.Multiply(d, d), {2, 1}, ReduceKind::kAdd);
  b.SetOutputs({b.Add(d, b.BroadcastInDim(s, {9, 4, 40}, {0})), s});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto k = ExpectMatchesInterpreter(*g, {RandomLiteral(xs, rng)}, Exact(dir.path()),
                                    ThreadParallelFor(2));
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(IsRowKernel(*k)) << k->source();
}

// Fewer than 8 rows: separate phases (each reduction materialized), same values.
TEST(CodegenRow, FewRowsFallBackToPhases) {
  TempDir dir;
  std::mt19937_64 rng(17);
  Graph g = Softmax(DType::kF32, 3, 50, /*extra_outputs=*/false);
  auto k = ExpectMatchesInterpreter(g, {RandomLiteral(Shape(DType::kF32, {3, 50}), rng)},
                                    Exact(dir.path()));
  ASSERT_NE(k, nullptr);
  EXPECT_FALSE(IsRowKernel(*k));
  EXPECT_NE(k->source().find("ember_phase_2"), std::string::npos);
}

TEST(CodegenRow, ZeroDivisorInARowPass) {
  TempDir dir;
  const Shape xs(DType::kS32, {8, 30});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId y = b.Parameter(1, xs);
  NodeId s = b.Reduce(b.Divide(x, y), {1}, ReduceKind::kAdd);
  b.SetOutputs({b.Subtract(x, b.BroadcastInDim(s, {8, 30}, {0}))});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  std::vector<int64_t> yv(240, 3);
  Literal lx = Literal::FromInts(xs, std::vector<int64_t>(240, 10));
  auto k = ExpectMatchesInterpreter(*g, {lx, Literal::FromInts(xs, yv)}, Exact(dir.path()));
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(IsRowKernel(*k));
  yv[200] = 0;
  auto got = RunKernel(*k, {lx, Literal::FromInts(xs, yv)}, ThreadParallelFor(2));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(got.status().message(), "divide %2: integer division by zero");
}

// A row broadcast in a plain elementwise kernel: its operand (an exp) is
// computed once per row, before the loop over the row.
TEST(CodegenRow, RowBroadcastOperandIsHoistedOutOfTheRowLoop) {
  TempDir dir;
  std::mt19937_64 rng(18);
  GraphBuilder b;
  NodeId v = b.Parameter(0, Shape(DType::kF32, {6}));
  NodeId x = b.Parameter(1, Shape(DType::kF32, {6, 70}));
  b.SetOutputs({b.Multiply(x, b.BroadcastInDim(b.Exp(v), {6, 70}, {0}))});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  auto k = ExpectMatchesInterpreter(*g,
                                    {RandomLiteral(Shape(DType::kF32, {6}), rng),
                                     RandomLiteral(Shape(DType::kF32, {6, 70}), rng)},
                                    Exact(dir.path()), ThreadParallelFor(2));
  ASSERT_NE(k, nullptr);
  const std::string& src = k->source();
  const size_t phase = src.find("void ember_phase_0");
  const size_t exp_call = src.find("__builtin_expf", phase);
  const size_t simd = src.find("#pragma omp simd", phase);
  ASSERT_NE(exp_call, std::string::npos);
  EXPECT_LT(exp_call, simd) << src.substr(phase, 2000);
}

}  // namespace
}  // namespace ember::codegen
