// Column reductions: a reduce whose operand keeps its innermost dim (a sum
// over dim 0 of [M, N], over {0, 1} of [B, T, C], over dim 1 of [A, B, C])
// runs the column phase (plan_reduce.cc: blocks of W columns, vectorized
// across them). Each column must get exactly the arithmetic of the
// per-output loop, which the same reduce over the innermost dims of the
// transposed operand takes: the two kernels are compared bit for bit, serial
// and on 3 threads, for every combiner, f32/f64/bf16/s32/pred, column counts
// that W does and does not divide, reduced lengths around the lane, chunk
// and exact-tree sizes, fused producers and a zero divisor inside them. Against
// the interpreter: exact for integers, pred, max/min and float sums of at
// most 128 elements (the interpreter's tree); float add/multiply of more
// within the blocked-pairwise bound of docs/codegen.md.
#include <cmath>
#include <limits>
#include <numeric>

#include "codegen/cpu/codegen_test_util.h"

namespace ember::codegen {
namespace {

using testing::FastOptions;
using testing::RandomLiteral;
using testing::RunKernel;
using testing::SameLiteral;
using testing::TempDir;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using Built = testing::BuiltKernel;

// reduce(f(x), red) where f is x itself or (x * x) + x (float) / x * 3 + x
// (integers), not x (pred); `transposed`: the operand is first transposed so that the kept
// dims lead and the reduced dims are innermost, in their order.
Built Build(const Shape& xs, const std::vector<int64_t>& red, ReduceKind kind, bool fused,
            bool transposed, const std::string& cache) {
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId v = x;
  if (fused) {
    if (xs.dtype() == DType::kPred) {
      v = b.Unary(OpKind::kNot, x);
    } else {
      const NodeId f = IsFloat(xs.dtype())
                           ? x
                           : b.BroadcastInDim(b.ConstantScalar(xs.dtype(), 3), xs.dims(), {});
      v = b.Add(b.Multiply(x, f), x);
    }
  }
  std::vector<int64_t> r = red;
  if (transposed) {
    std::vector<int64_t> perm;
    for (int d = 0; d < xs.rank(); ++d) {
      if (std::find(red.begin(), red.end(), d) == red.end()) perm.push_back(d);
    }
    const int64_t kept = static_cast<int64_t>(perm.size());
    for (int64_t d : red) perm.push_back(d);
    v = b.Transpose(v, perm);
    r.clear();
    for (int64_t i = kept; i < xs.rank(); ++i) r.push_back(i);
  }
  b.SetOutputs({b.Reduce(v, r, kind)});
  Built out = testing::BuildKernel(b.Build(), cache);
  return out;
}

Literal Arg(const Shape& xs, ReduceKind kind, std::mt19937_64& rng, bool specials) {
  if (IsFloat(xs.dtype()) && kind == ReduceKind::kMultiply) {
    Literal a(xs);
    std::uniform_real_distribution<double> u(0.9, 1.1);
    for (int64_t i = 0; i < a.num_elements(); ++i) a.SetDouble(i, u(rng));
    return a;
  }
  std::vector<double> sp;
  if (specials && IsFloat(xs.dtype())) sp = {kNaN, 0, -0.0, 3};
  return RandomLiteral(xs, rng, sp);
}

// `runs`: when >= 0, the rows split into that many runs (0: not split).
void CheckColumns(DType t, ReduceKind kind, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& red, bool fused, bool specials = false,
                  int runs = -1) {
  SCOPED_TRACE(std::string(DTypeName(t)) + " " + Shape(t, dims).ToString() + " reduce " +
               std::to_string(static_cast<int>(kind)) + (fused ? " fused" : ""));
  TempDir dir;
  std::mt19937_64 rng(static_cast<uint64_t>(dims[0] * 131 + dims.back() * 7 + red[0]));
  const Shape xs(t, dims);
  Built col = Build(xs, red, kind, fused, /*transposed=*/false, dir.path());
  Built ref = Build(xs, red, kind, fused, /*transposed=*/true, dir.path());
  ASSERT_TRUE(col.k && ref.k);
  EXPECT_NE(col.source.find("(reduce, columns of "), std::string::npos) << col.source;
  EXPECT_EQ(ref.source.find("columns of"), std::string::npos);
  if (runs == 0) {
    EXPECT_EQ(col.source.find(" runs)"), std::string::npos) << col.source;
  }
  if (runs > 0) {
    EXPECT_NE(col.source.find(", rows in " + std::to_string(runs) + " runs)"), std::string::npos)
        << col.source;
  }
  const Literal arg = Arg(xs, kind, rng, specials);
  auto got = RunKernel(*col.k, {arg});
  auto par = RunKernel(*col.k, {arg}, ThreadParallelFor(3));
  auto same = RunKernel(*ref.k, {arg});
  auto want = Evaluate(col.g, {arg});
  ASSERT_TRUE(got.ok() && par.ok() && same.ok() && want.ok()) << got.status().ToString();
  // The column phase: the per-output loop's bits, whatever the threads.
  EXPECT_TRUE(SameLiteral((*got)[0], (*same)[0]));
  EXPECT_TRUE(SameLiteral((*par)[0], (*got)[0]));
  int64_t nred = 1;
  for (int64_t d : red) nred *= dims[d];
  const bool exact =
      !IsFloat(t) || nred <= 128 || (kind != ReduceKind::kAdd && kind != ReduceKind::kMultiply);
  if (exact && IsFloat(t) && nred > 128) {
    // max/min: the same value; a tie of +0 and -0 may keep the other zero.
    for (int64_t i = 0; i < (*want)[0].num_elements(); ++i) {
      const double w = (*want)[0].GetDouble(i), v = (*got)[0].GetDouble(i);
      EXPECT_TRUE(v == w || (std::isnan(v) && std::isnan(w))) << "element " << i;
    }
    return;
  }
  if (exact) {
    EXPECT_TRUE(SameLiteral((*got)[0], (*want)[0]));
    return;
  }
  // Blocked pairwise vs the interpreter's pairwise: both within their bound
  // of the exact sum (docs/codegen.md), so within the sum of the bounds of
  // each other (relative to sum |x|; products: to |product|, 2 log terms).
  GraphBuilder ab;
  NodeId ax = ab.Parameter(0, xs);
  NodeId av = fused ? ab.Add(ab.Multiply(ax, ax), ax) : ax;
  ab.SetOutputs({ab.Reduce(ab.Unary(OpKind::kAbs, av), red, ReduceKind::kAdd)});
  auto ag = ab.Build();
  ASSERT_TRUE(ag.ok());
  auto abs_sum = Evaluate(*ag, {arg});
  ASSERT_TRUE(abs_sum.ok());
  const double u = t == DType::kF64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const double units = 16 + 4 + std::ceil(std::log2(std::ceil(nred / 256.0))) + 2 +  // ours
                       8 + std::ceil(std::log2(static_cast<double>(nred))) + 2;      // interp
  for (int64_t i = 0; i < (*want)[0].num_elements(); ++i) {
    const double w = (*want)[0].GetDouble(i), v = (*got)[0].GetDouble(i);
    const double scale = kind == ReduceKind::kAdd ? (*abs_sum)[0].GetDouble(i) : std::fabs(w);
    double tol = units * u * scale;
    if (t == DType::kBF16) tol += std::ldexp(std::fabs(w), -7);  // two roundings to bf16
    EXPECT_NEAR(v, w, tol) << "element " << i;
  }
}

// The shapes of a training step: bias and LayerNorm-parameter gradients
// (sums over the rows), rows not a multiple of the lanes or chunks, columns
// not a multiple of W, a reduced middle dim, several reduced dims.
TEST(CodegenColumnReduce, F32SumMatchesPerOutputLoopBitForBit) {
  for (bool fused : {false, true}) {
    CheckColumns(DType::kF32, ReduceKind::kAdd, {4096, 128}, {0}, fused);
    CheckColumns(DType::kF32, ReduceKind::kAdd, {1000, 100}, {0}, fused);
    CheckColumns(DType::kF32, ReduceKind::kAdd, {16, 77, 40}, {0, 1}, fused);
    CheckColumns(DType::kF32, ReduceKind::kAdd, {6, 300, 24}, {1}, fused);
    CheckColumns(DType::kF32, ReduceKind::kAdd, {3, 5, 9, 33}, {0, 2}, fused);
  }
  // Chunks (256 rows) up to a deep binary counter: 70000 / 256 = 274 pushes.
  CheckColumns(DType::kF32, ReduceKind::kAdd, {70000, 8}, {0}, false);
  CheckColumns(DType::kF32, ReduceKind::kAdd, {257, 65}, {0}, true);
}

// Few column blocks (LayerNorm's 128 features, a bias of 8): the rows split
// into aligned runs of chunks whose partial results the finishing phase
// pushes at their level, then the rest of the rows: the unsplit loop's bits
// (serial and on 3 threads), with a rest of whole chunks and of a partial
// block, a reduced middle dim, f64 lanes, products; not split below two runs
// or for a max.
TEST(CodegenColumnReduce, RowRunsGiveTheUnsplitBits) {
  CheckColumns(DType::kF32, ReduceKind::kAdd, {4096, 128}, {0}, true, false, /*runs=*/8);
  CheckColumns(DType::kF32, ReduceKind::kAdd, {70000, 8}, {0}, false, false, /*runs=*/8);
  CheckColumns(DType::kF32, ReduceKind::kAdd, {6, 3000, 24}, {1}, true, false, /*runs=*/2);
  CheckColumns(DType::kF64, ReduceKind::kAdd, {5000, 3}, {0}, false, false, /*runs=*/9);
  CheckColumns(DType::kF32, ReduceKind::kMultiply, {512, 300}, {0}, false, false, /*runs=*/2);
  CheckColumns(DType::kF32, ReduceKind::kAdd, {1000, 100}, {0}, false, false, /*runs=*/0);
  CheckColumns(DType::kF32, ReduceKind::kMaximum, {70000, 8}, {0}, false, false, /*runs=*/0);
}

TEST(CodegenColumnReduce, SmallF32SumsUseTheExactTree) {
  for (int64_t rows : {1, 2, 7, 8, 9, 100, 128}) {
    CheckColumns(DType::kF32, ReduceKind::kAdd, {rows, 40}, {0}, true);
  }
  CheckColumns(DType::kF32, ReduceKind::kMultiply, {2, 64, 50}, {0, 1}, false);
  CheckColumns(DType::kF64, ReduceKind::kAdd, {16, 4, 130}, {0, 1}, true);
}

TEST(CodegenColumnReduce, OtherCombinersAndDtypes) {
  CheckColumns(DType::kF32, ReduceKind::kMultiply, {700, 20}, {0}, false);
  CheckColumns(DType::kF32, ReduceKind::kMaximum, {500, 70}, {0}, false, /*specials=*/true);
  CheckColumns(DType::kF32, ReduceKind::kMinimum, {33, 9, 17}, {0, 1}, true, true);
  CheckColumns(DType::kF32, ReduceKind::kMaximum, {50, 40}, {0}, false, true);
  CheckColumns(DType::kF64, ReduceKind::kAdd, {600, 36}, {0}, true);
  CheckColumns(DType::kBF16, ReduceKind::kAdd, {300, 130}, {0}, true);
  CheckColumns(DType::kBF16, ReduceKind::kAdd, {30, 130}, {0}, true);
  CheckColumns(DType::kS32, ReduceKind::kAdd, {300, 50}, {0}, true);
  CheckColumns(DType::kS32, ReduceKind::kMultiply, {40, 3, 20}, {0, 1}, false);
  CheckColumns(DType::kS32, ReduceKind::kMaximum, {300, 50}, {0}, false);
  CheckColumns(DType::kS64, ReduceKind::kMinimum, {20, 30}, {0}, true);
  CheckColumns(DType::kPred, ReduceKind::kAnd, {200, 64}, {0}, false);
  CheckColumns(DType::kPred, ReduceKind::kOr, {19, 3, 70}, {1}, true);
}

// Sibling column reductions (LayerNorm backward's dweight = sum(dy * xhat)
// and dbias = sum(dy) over the rows) run in one pass: one phase, dy loaded
// once per element, each result the bits of its own per-output loop. A
// reduce that reads another one stays a phase of its own.
TEST(CodegenColumnReduce, SiblingReductionsShareOnePass) {
  TempDir dir;
  std::mt19937_64 rng(5);
  for (const auto& [dims, red] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{1000, 100}, {0}}, {{8, 300, 40}, {0, 1}}, {{60, 24}, {0}}}) {
    const Shape xs(DType::kF32, dims);
    std::vector<int64_t> perm, inner;
    for (int d = 0; d < xs.rank(); ++d) {
      if (std::find(red.begin(), red.end(), d) == red.end()) perm.push_back(d);
    }
    for (int64_t d : red) {
      inner.push_back(static_cast<int64_t>(perm.size()));
      perm.push_back(d);
    }
    for (int i = 1; i < static_cast<int>(red.size()); ++i) inner[i] = inner[0] + i;
    auto build = [&](bool transposed) {
      GraphBuilder b;
      NodeId dy = b.Parameter(0, xs);
      NodeId xh = b.Parameter(1, xs);
      auto tr = [&](NodeId v) { return transposed ? b.Transpose(v, perm) : v; };
      const std::vector<int64_t>& r = transposed ? inner : red;
      NodeId dw = b.Reduce(tr(b.Multiply(dy, xh)), r, ReduceKind::kAdd);
      NodeId db = b.Reduce(tr(dy), r, ReduceKind::kAdd);
      NodeId mx = b.Reduce(tr(xh), r, ReduceKind::kMaximum);
      b.SetOutputs({dw, db, mx});
      return b.Build().value();
    };
    const Graph g = build(false), gt = build(true);
    auto src = EmitKernelSource(g);
    ASSERT_TRUE(src.ok());
    EXPECT_NE(src->code.find("// Phases: %3+%4+%5 (reduce, columns of "), std::string::npos)
        << src->code.substr(0, 2000);
    auto k = CompileKernel(g, FastOptions(dir.path()));
    auto kt = CompileKernel(gt, FastOptions(dir.path()));
    ASSERT_TRUE(k.ok() && kt.ok()) << k.status().ToString() << kt.status().ToString();
    const std::vector<Literal> args = {RandomLiteral(xs, rng), RandomLiteral(xs, rng)};
    auto got = RunKernel(**k, args);
    auto par = RunKernel(**k, args, ThreadParallelFor(3));
    auto same = RunKernel(**kt, args);
    auto want = Evaluate(g, args);
    ASSERT_TRUE(got.ok() && par.ok() && same.ok() && want.ok());
    for (int j = 0; j < 3; ++j) {
      EXPECT_TRUE(SameLiteral((*got)[j], (*same)[j])) << "output " << j;
      EXPECT_TRUE(SameLiteral((*par)[j], (*got)[j])) << "output " << j;
    }
    EXPECT_TRUE(SameLiteral((*got)[2], (*want)[2]));
    if (xs.num_elements() / (*want)[0].num_elements() <= 128) {
      EXPECT_TRUE(SameLiteral((*got)[0], (*want)[0]));
      EXPECT_TRUE(SameLiteral((*got)[1], (*want)[1]));
    }
  }
  // r2 reads r1: two phases, the values still the interpreter's (exact tree).
  const Shape xs(DType::kF32, {50, 30});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId r1 = b.Reduce(x, {0}, ReduceKind::kAdd);
  NodeId r2 = b.Reduce(b.Multiply(x, b.BroadcastInDim(r1, {50, 30}, {1})), {0}, ReduceKind::kAdd);
  b.SetOutputs({r2, r1});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  auto src = EmitKernelSource(*g);
  ASSERT_TRUE(src.ok());
  EXPECT_EQ(src->code.find("+%"), std::string::npos);
  testing::ExpectMatchesInterpreter(*g, {RandomLiteral(xs, rng)}, FastOptions(dir.path()),
                                    ThreadParallelFor(3));
}

// A sum of -0.0s is +0.0 in the column phase too (exact tree and lanes).
TEST(CodegenColumnReduce, SumOfNegativeZerosIsPositiveZero) {
  TempDir dir;
  for (int64_t n : {3, 200}) {
    Shape xs(DType::kF32, {n, 20});
    Built col = Build(xs, {0}, ReduceKind::kAdd, false, false, dir.path());
    ASSERT_TRUE(col.k);
    Literal arg = Literal::FromDoubles(xs, std::vector<double>(20 * n, -0.0));
    auto got = RunKernel(*col.k, {arg});
    ASSERT_TRUE(got.ok());
    for (int64_t i = 0; i < 20; ++i) EXPECT_FALSE(std::signbit((*got)[0].GetDouble(i))) << i;
  }
}

// Integer division by zero inside a column reduction's fused input.
TEST(CodegenColumnReduce, ZeroDivisorInFusedInputIsOutOfRange) {
  TempDir dir;
  Shape xs(DType::kS32, {40, 24});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId y = b.Parameter(1, xs);
  b.SetOutputs({b.Reduce(b.Divide(x, y), {0}, ReduceKind::kAdd)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  auto src = EmitKernelSource(*g);
  ASSERT_TRUE(src.ok());
  EXPECT_NE(src->code.find("columns of"), std::string::npos);
  std::vector<int64_t> yv(960, 3);
  Literal lx = Literal::FromInts(xs, std::vector<int64_t>(960, 10));
  testing::ExpectMatchesInterpreter(*g, {lx, Literal::FromInts(xs, yv)}, FastOptions(dir.path()));
  yv[950] = 0;
  auto k = CompileKernel(*g, FastOptions(dir.path()));
  ASSERT_TRUE(k.ok());
  auto got = RunKernel(**k, {lx, Literal::FromInts(xs, yv)}, ThreadParallelFor(3));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(got.status().message(), "divide %2: integer division by zero");
}

}  // namespace
}  // namespace ember::codegen
