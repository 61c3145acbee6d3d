// Generated reduction kernels: every to_apply over several dimension sets vs
// the interpreter (exact for integers, pred and max/min; within the stated
// bound for float add/multiply, whose summation order differs), exact f32
// sum of 2^25 ones, the random-data error bound against an f64 sum,
// NaN-propagating max/min in every lane position, input fusion and
// reductions feeding elementwise consumers (softmax).
#include <cmath>
#include <limits>

#include "codegen/cpu/codegen_test_util.h"

namespace ember::codegen {
namespace {

using testing::ExpectMatchesInterpreter;
using testing::FastOptions;
using testing::RandomLiteral;
using testing::RunKernel;
using testing::TempDir;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Blocked summation parameters of the generated code (emitter.cc): L lanes,
// B = L * 16 elements per pairwise chunk. For n f32 values the computed sum
// s of x_1..x_n satisfies
//   |s - sum x_i| <= (B/L + log2 L + ceil(log2 ceil(n/B)) + 2) * 2^-24 * sum |x_i|,
// (each lane adds B/L values per chunk, lanes fold pairwise in log2 L steps,
// chunk sums combine pairwise in at most ceil(log2(#chunks)) + 1 levels):
// growth in n is logarithmic.
double SumErrorBound(int64_t n, double abs_sum) {
  const double L = 16, B = 256;
  const double chunks = std::ceil(n / B);
  const double levels = chunks <= 1 ? 0 : std::ceil(std::log2(chunks));
  return (B / L + std::log2(L) + levels + 2) * std::ldexp(1.0, -24) * abs_sum;
}

// Compiled vs interpreted reduce: exact, except float add/multiply over more
// than 128 elements, which must agree within 1e-5 relative (bf16: 1.6e-2; the
// summation order differs there).
void CheckReduce(DType t, const std::vector<ReduceKind>& kinds, bool exact) {
  TempDir dir;
  std::mt19937_64 rng(21);
  Shape xs(t, {5, 7, 19});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  std::vector<NodeId> outs;
  const std::vector<std::vector<int64_t>> dim_sets = {{2}, {0}, {1}, {0, 2}, {}, {0, 1, 2}};
  for (ReduceKind k : kinds) {
    for (const auto& dims : dim_sets) outs.push_back(b.Reduce(x, dims, k));
  }
  b.SetOutputs(outs);
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::vector<double> specials;
  if (IsFloat(t) && exact) specials = {kNaN, 0, 0, -0.0, 3, kNaN};
  Literal arg = RandomLiteral(xs, rng, specials);
  if (IsFloat(t) && !exact) {
    for (int64_t i = 0; i < arg.num_elements(); ++i) arg.SetDouble(i, 0.75 + 0.5 * (i % 5) / 5);
  }
  if (exact) {
    ExpectMatchesInterpreter(*g, {arg}, FastOptions(dir.path()));
    return;
  }
  auto k = CompileKernel(*g, FastOptions(dir.path()));
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  auto got = RunKernel(**k, {arg});
  auto want = Evaluate(*g, {arg});
  ASSERT_TRUE(got.ok() && want.ok());
  for (size_t j = 0; j < want->size(); ++j) {
    // <= 128 reduced elements: the interpreter's order, so bit-identical.
    const int64_t nred = xs.num_elements() / std::max<int64_t>(1, (*want)[j].num_elements());
    if (nred <= 128) {
      EXPECT_TRUE(testing::SameLiteral((*got)[j], (*want)[j])) << "output " << j;
      continue;
    }
    for (int64_t i = 0; i < (*want)[j].num_elements(); ++i) {
      const double w = (*want)[j].GetDouble(i), v = (*got)[j].GetDouble(i);
      const double tol = t == DType::kBF16 ? 1.6e-2 : 1e-5;
      EXPECT_NEAR(v, w, tol * std::fabs(w)) << "output " << j << " element " << i;
    }
  }
}

TEST(CodegenReduce, F32MaxMinExactWithNaN) {
  CheckReduce(DType::kF32, {ReduceKind::kMaximum, ReduceKind::kMinimum}, true);
}
TEST(CodegenReduce, F32AddMultiply) {
  CheckReduce(DType::kF32, {ReduceKind::kAdd, ReduceKind::kMultiply}, false);
}
TEST(CodegenReduce, BF16) {
  CheckReduce(DType::kBF16, {ReduceKind::kMaximum, ReduceKind::kMinimum}, true);
  CheckReduce(DType::kBF16, {ReduceKind::kAdd}, false);
}
TEST(CodegenReduce, S32AllKindsExact) {
  CheckReduce(DType::kS32,
              {ReduceKind::kAdd, ReduceKind::kMultiply, ReduceKind::kMaximum, ReduceKind::kMinimum,
               ReduceKind::kAnd, ReduceKind::kOr},
              true);
}
TEST(CodegenReduce, PredAndOr) {
  CheckReduce(DType::kPred, {ReduceKind::kAnd, ReduceKind::kOr}, true);
}

// A NaN in any lane position of any block propagates through max and min.
TEST(CodegenReduce, NaNInEveryPositionPropagates) {
  TempDir dir;
  const int64_t n = 300;
  Shape xs(DType::kF32, {n, n});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  b.SetOutputs({b.Reduce(x, {1}, ReduceKind::kMaximum), b.Reduce(x, {1}, ReduceKind::kMinimum),
                b.Reduce(x, {0}, ReduceKind::kMaximum)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  Literal arg(xs);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < n; ++c) arg.SetDouble(r * n + c, (c * 7 + r) % 13 - 6);
    if (r % 2 == 0) arg.SetDouble(r * n + r, kNaN);  // row r: NaN at column r
  }
  auto k = ExpectMatchesInterpreter(*g, {arg}, FastOptions(dir.path()));
  ASSERT_NE(k, nullptr);
  auto got = RunKernel(*k, {arg});
  ASSERT_TRUE(got.ok());
  for (int64_t r = 0; r < n; ++r) {
    EXPECT_EQ(std::isnan((*got)[0].GetDouble(r)), r % 2 == 0) << r;
    EXPECT_EQ(std::isnan((*got)[1].GetDouble(r)), r % 2 == 0) << r;
    EXPECT_EQ(std::isnan((*got)[2].GetDouble(r)), r % 2 == 0) << r;
  }
}

TEST(CodegenReduce, SumOf2To25OnesIsExact) {
  TempDir dir;
  const int64_t n = int64_t{1} << 25;
  Shape xs(DType::kF32, {n});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  b.SetOutputs({b.Reduce(x, {0}, ReduceKind::kAdd)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  auto k = CompileKernel(*g, FastOptions(dir.path()));
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  float sum = -1;
  ASSERT_TRUE((*k)->Run({ones.data()}, {&sum}).ok());
  EXPECT_EQ(sum, 33554432.0f);
  // A naive f32 loop would stop at 2^24.
}

TEST(CodegenReduce, RandomSumErrorGrowsLikeLogN) {
  TempDir dir;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t n : {int64_t{1000}, int64_t{100003}, int64_t{1} << 22}) {
    Shape xs(DType::kF32, {n});
    GraphBuilder b;
    NodeId x = b.Parameter(0, xs);
    b.SetOutputs({b.Reduce(x, {0}, ReduceKind::kAdd)});
    auto g = b.Build();
    ASSERT_TRUE(g.ok());
    auto k = CompileKernel(*g, FastOptions(dir.path()));
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    std::vector<float> v(static_cast<size_t>(n));
    double exact = 0, abs_sum = 0;
    for (auto& f : v) {
      f = u(rng) + 0.25f;  // biased, so the sum grows with n
      exact += f;
      abs_sum += std::fabs(f);
    }
    float sum = 0;
    ASSERT_TRUE((*k)->Run({v.data()}, {&sum}).ok());
    const double err = std::fabs(sum - exact);
    const double bound = SumErrorBound(n, abs_sum);
    EXPECT_LE(err, bound) << "n=" << n;
    // Much tighter than the worst case of sequential summation ((n-1) * 2^-24 * sum|x|).
    EXPECT_LT(bound, (n - 1) * std::ldexp(1.0, -24) * abs_sum / 20) << "n=" << n;
    // Observed: random rounding errors cancel; the blocked pairwise sum stays
    // below 1 unit (2^-24 * sum|x|) here, while 16 sequential lanes without
    // the pairwise stage reach 13 units at n = 2^22.
    EXPECT_LE(err, 2 * std::ldexp(1.0, -24) * abs_sum) << "n=" << n;
    std::printf("n=%lld  |err|=%.3g  bound=%.3g  (err/sum|x| = %.3g ulp-units)\n",
                static_cast<long long>(n), err, bound, err / abs_sum / std::ldexp(1.0, -24));
  }
}

// exp(x - max(x)) / sum(exp(x - max(x))) over rows: two reduces fused with
// their producers, materialized, and read by the elementwise consumer.
TEST(CodegenReduce, SoftmaxInputAndConsumerFusion) {
  TempDir dir;
  std::mt19937_64 rng(9);
  Shape xs(DType::kF32, {37, 53});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId m = b.Reduce(x, {1}, ReduceKind::kMaximum);
  NodeId e = b.Exp(b.Subtract(x, b.BroadcastInDim(m, {37, 53}, {0})));
  NodeId s = b.Reduce(e, {1}, ReduceKind::kAdd);
  NodeId y = b.Divide(e, b.BroadcastInDim(s, {37, 53}, {0}));
  b.SetOutputs({y, m});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  Literal arg = RandomLiteral(xs, rng);
  auto k = CompileKernel(*g, FastOptions(dir.path()));
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ((*k)->name(), "ember_fused_reduce_bcast_sub_exp_div_0");
  auto got = RunKernel(**k, {arg});
  auto want = Evaluate(*g, {arg});
  ASSERT_TRUE(got.ok() && want.ok()) << got.status().ToString();
  EXPECT_TRUE(testing::SameLiteral((*got)[1], (*want)[1]));  // max: exact
  for (int64_t i = 0; i < (*want)[0].num_elements(); ++i) {
    EXPECT_NEAR((*got)[0].GetDouble(i), (*want)[0].GetDouble(i), 1e-6) << i;
  }
  auto par = RunKernel(**k, {arg}, ThreadParallelFor(3));
  ASSERT_TRUE(par.ok());
  EXPECT_TRUE(testing::SameLiteral((*par)[0], (*got)[0]));
}

TEST(CodegenReduce, EmptyReductionGivesIdentity) {
  TempDir dir;
  Shape xs(DType::kF32, {3, 0});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId i = b.Parameter(1, Shape(DType::kS32, {0, 4}));
  b.SetOutputs({b.Reduce(x, {1}, ReduceKind::kAdd), b.Reduce(x, {1}, ReduceKind::kMaximum),
                b.Reduce(x, {1}, ReduceKind::kMultiply), b.Reduce(i, {0}, ReduceKind::kMinimum),
                b.Reduce(i, {0}, ReduceKind::kAnd)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  ExpectMatchesInterpreter(*g, {Literal(xs), Literal(Shape(DType::kS32, {0, 4}))},
                           FastOptions(dir.path()));
}

// A float sum starts from +0.0 as torch.sum does: a sum of -0.0s is +0.0,
// whatever the path (no reduced dims, the exact small tree, the lane loop).
TEST(CodegenReduce, SumOfNegativeZerosIsPositiveZero) {
  TempDir dir;
  for (int64_t n : {1, 3, 200}) {
    Shape xs(DType::kF32, {2, n});
    GraphBuilder b;
    NodeId x = b.Parameter(0, xs);
    b.SetOutputs({b.Reduce(x, {1}, ReduceKind::kAdd), b.Reduce(x, {}, ReduceKind::kAdd)});
    auto g = b.Build();
    ASSERT_TRUE(g.ok());
    Literal arg = Literal::FromDoubles(xs, std::vector<double>(2 * n, -0.0));
    auto k = CompileKernel(*g, FastOptions(dir.path()));
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    auto got = RunKernel(**k, {arg});
    ASSERT_TRUE(got.ok());
    for (const Literal& out : *got)
      for (int64_t i = 0; i < out.num_elements(); ++i)
        EXPECT_FALSE(std::signbit(out.GetDouble(i))) << "n=" << n << " element " << i;
    ExpectMatchesInterpreter(*g, {arg}, FastOptions(dir.path()));
  }
}

// Integer division by zero inside a reduction's fused input.
TEST(CodegenReduce, ZeroDivisorInFusedInputIsOutOfRange) {
  TempDir dir;
  Shape xs(DType::kS32, {4, 40});
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId y = b.Parameter(1, xs);
  b.SetOutputs({b.Reduce(b.Divide(x, y), {1}, ReduceKind::kAdd)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  std::vector<int64_t> yv(160, 3);
  Literal lx = Literal::FromInts(xs, std::vector<int64_t>(160, 10));
  ExpectMatchesInterpreter(*g, {lx, Literal::FromInts(xs, yv)}, FastOptions(dir.path()));
  yv[150] = 0;
  auto k = CompileKernel(*g, FastOptions(dir.path()));
  ASSERT_TRUE(k.ok());
  auto got = RunKernel(**k, {lx, Literal::FromInts(xs, yv)});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(got.status().message(), "divide %2: integer division by zero");
}

}  // namespace
}  // namespace ember::codegen
