// Reductions split at their last kept dim (plan_reduce.cc, InnerSplit): a
// float sum or product over dims before and after a kept one (BatchNorm's
// channel sums over (0, 2, 3) of [N, C, H, W]) whose inner reduced dims are
// 16 * 2^level lane blocks. A first phase reduces the inner dims per index of
// the others (contiguous reads) into a temp; the reduce phase pushes those
// values at their level. That must be the per-output loop's bits: each shape
// is compared with the same kernel built with EMBER_CODEGEN_INNER_SPLIT=0,
// serial and on 3 threads, and with the interpreter within the
// blocked-pairwise bound of docs/codegen.md; shapes whose inner blocks are not
// such a subtree, and max/min, keep the per-output loop.
#include <cmath>
#include <cstdlib>

#include "codegen/cpu/codegen_test_util.h"

namespace ember::codegen {
namespace {

using testing::FastOptions;
using testing::RandomLiteral;
using testing::RunKernel;
using testing::SameLiteral;
using testing::TempDir;

using Built = testing::BuiltKernel;

// reduce(x, red) or reduce(x * x + x, red); `split`: EMBER_CODEGEN_INNER_SPLIT unset or 0.
Built Build(const Shape& xs, const std::vector<int64_t>& red, ReduceKind kind, bool fused,
            bool split, const std::string& cache) {
  if (!split) setenv("EMBER_CODEGEN_INNER_SPLIT", "0", 1);
  GraphBuilder b;
  NodeId x = b.Parameter(0, xs);
  NodeId v = fused ? b.Add(b.Multiply(x, x), x) : x;
  b.SetOutputs({b.Reduce(v, red, kind)});
  Built out = testing::BuildKernel(b.Build(), cache);
  unsetenv("EMBER_CODEGEN_INNER_SPLIT");
  return out;
}

// `level` >= 0: split with subtrees of 2^level chunks; -1: not split.
void Check(DType t, ReduceKind kind, const std::vector<int64_t>& dims,
           const std::vector<int64_t>& red, bool fused, int level) {
  SCOPED_TRACE(std::string(DTypeName(t)) + " " + Shape(t, dims).ToString() + " reduce kind " +
               std::to_string(static_cast<int>(kind)) + (fused ? " fused" : ""));
  TempDir dir;
  std::mt19937_64 rng(static_cast<uint64_t>(dims[0] * 131 + dims.back() * 7 + red.size()));
  const Shape xs(t, dims);
  Built split = Build(xs, red, kind, fused, true, dir.path());
  Built ref = Build(xs, red, kind, fused, false, dir.path());
  ASSERT_TRUE(split.k && ref.k);
  EXPECT_EQ(ref.source.find("_inner"), std::string::npos);
  if (level < 0) {
    EXPECT_EQ(split.source.find("_inner"), std::string::npos) << split.source;
    return;
  }
  EXPECT_NE(split.source.find("(reduce, split at the kept dims)"), std::string::npos)
      << split.source;
  EXPECT_NE(split.source.find("(2^" + std::to_string(level) + " chunks)"), std::string::npos)
      << split.source;
  Literal arg(xs);
  if (kind == ReduceKind::kMultiply) {
    std::uniform_real_distribution<double> u(0.9, 1.1);
    for (int64_t i = 0; i < arg.num_elements(); ++i) arg.SetDouble(i, u(rng));
  } else {
    arg = RandomLiteral(xs, rng);
  }
  auto got = RunKernel(*split.k, {arg});
  auto par = RunKernel(*split.k, {arg}, ThreadParallelFor(3));
  auto same = RunKernel(*ref.k, {arg});
  auto want = Evaluate(split.g, {arg});
  ASSERT_TRUE(got.ok() && par.ok() && same.ok() && want.ok()) << got.status().ToString();
  // The per-output loop's bits, whatever the threads.
  EXPECT_TRUE(SameLiteral((*got)[0], (*same)[0]));
  EXPECT_TRUE(SameLiteral((*par)[0], (*got)[0]));
  // The interpreter: within both blocked-pairwise bounds (relative to sum |x|;
  // products: to |product|).
  GraphBuilder ab;
  NodeId ax = ab.Parameter(0, xs);
  NodeId av = fused ? ab.Add(ab.Multiply(ax, ax), ax) : ax;
  ab.SetOutputs({ab.Reduce(ab.Unary(OpKind::kAbs, av), red, ReduceKind::kAdd)});
  auto ag = ab.Build();
  ASSERT_TRUE(ag.ok());
  auto abs_sum = Evaluate(*ag, {arg});
  ASSERT_TRUE(abs_sum.ok());
  int64_t nred = 1;
  for (int64_t d : red) nred *= dims[d];
  const double u = t == DType::kF64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const double units = 16 + 4 + std::ceil(std::log2(std::ceil(nred / 256.0))) + 2 +  // ours
                       8 + std::ceil(std::log2(static_cast<double>(nred))) + 2;      // interp
  for (int64_t i = 0; i < (*want)[0].num_elements(); ++i) {
    const double w = (*want)[0].GetDouble(i), v = (*got)[0].GetDouble(i);
    const double scale = kind == ReduceKind::kAdd ? (*abs_sum)[0].GetDouble(i) : std::fabs(w);
    EXPECT_NEAR(v, w, units * u * scale) << "element " << i;
  }
}

// BatchNorm's channel sums (the bench's channel_sum at a smaller batch), a
// subtree of two chunks, two outer reduced dims, f64 lanes, a fused producer
// and a product.
TEST(CodegenSplitReduce, MatchesThePerOutputLoopBitForBit) {
  for (bool fused : {false, true}) {
    Check(DType::kF32, ReduceKind::kAdd, {64, 8, 16, 16}, {0, 2, 3}, fused, 0);
    Check(DType::kF32, ReduceKind::kAdd, {10, 4, 512}, {0, 2}, fused, 1);
  }
  Check(DType::kF32, ReduceKind::kAdd, {3, 5, 4, 2, 256}, {0, 1, 3, 4}, false, 1);
  Check(DType::kF64, ReduceKind::kAdd, {20, 3, 128}, {0, 2}, true, 0);
  Check(DType::kF32, ReduceKind::kMultiply, {2, 6, 256}, {0, 2}, false, 0);
  // Size-1 dims around the kept one.
  Check(DType::kF32, ReduceKind::kAdd, {9, 1, 7, 1, 1024}, {0, 3, 4}, false, 2);
}

// Inner blocks that are no aligned subtree (3 chunks; 30 rows of 2 blocks),
// max, reductions over the innermost dims only, and column reductions keep
// their loops.
TEST(CodegenSplitReduce, OtherShapesAreNotSplit) {
  Check(DType::kF32, ReduceKind::kAdd, {8, 4, 768}, {0, 2}, false, -1);
  Check(DType::kF32, ReduceKind::kAdd, {9, 5, 30, 20}, {0, 2, 3}, false, -1);
  Check(DType::kF32, ReduceKind::kMaximum, {64, 8, 256}, {0, 2}, false, -1);
  Check(DType::kF32, ReduceKind::kAdd, {64, 8, 256}, {1, 2}, false, -1);
  Check(DType::kF32, ReduceKind::kAdd, {64, 8, 256}, {0, 1}, false, -1);
}

}  // namespace
}  // namespace ember::codegen
