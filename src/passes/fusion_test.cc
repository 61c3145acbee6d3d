// Fusion pass tests: text IR in -> fused text IR out, with the refusals the
// pass records and prints under EMBER_LOG=fusion, and the fused graph's
// values checked bit for bit against the unfused graph's on random inputs.
#include "passes/fusion.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "ir/log.h"
#include "passes/fusion_cost.h"
#include "passes/fusion_legality.h"
#include "passes/pass_test_util.h"

namespace ember::passes {
namespace {

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  std::string line;
  while (std::getline(is, line)) out.push_back(line);
  return out;
}

// Runs fusion on `in` with EMBER_LOG=fusion and expects the printed result to
// be `out`, the recorded refusals (and the stderr log) to be `refusals`, the
// values to be unchanged, and a second run to change nothing.
void ExpectFusion(const std::string& in, const std::string& out,
                  const std::vector<std::string>& refusals) {
  Graph g = ParseOrDie(in);
  const Graph before = g;
  FusionPass pass;
  setenv("EMBER_LOG", "cse,fusion", 1);
  ::testing::internal::CaptureStderr();
  StatusOr<bool> changed = pass.Run(g);
  const std::string log = ::testing::internal::GetCapturedStderr();
  unsetenv("EMBER_LOG");
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(Verify(g).ok()) << Verify(g).ToString();
  EXPECT_EQ(PrintGraph(g), out);
  EXPECT_EQ(Canonical(out), out) << "expected text is not canonical";
  EXPECT_EQ(pass.refusals(), refusals);
  std::vector<std::string> logged;
  for (const std::string& r : refusals) logged.push_back("fusion: " + r);
  EXPECT_EQ(Lines(log), logged);
  ExpectSameValues(before, g);
  Graph again = g;
  StatusOr<bool> twice = pass.Run(again);
  ASSERT_TRUE(twice.ok());
  EXPECT_FALSE(*twice);
  EXPECT_EQ(PrintGraph(again), out);
}

TEST(FusionTest, ElementwiseChainIsOneLoopFusion) {
  ExpectFusion(R"(graph main(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] multiply(%0, %1)
  %3 = f32[] constant({2})
  %4 = f32[8] broadcast-in-dim(%3), dimensions={}
  %5 = f32[8] add(%2, %4)
  %6 = f32[8] maximum(%5, %0)
  ROOT (%6)
}
)",
               R"(graph main(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] fusion(%0, %1), calls=fused_mul_bcast_add_max_0, kind=loop
  ROOT (%2)
}

graph fused_mul_bcast_add_max_0(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] multiply(%0, %1)
  %3 = f32[] constant({2})
  %4 = f32[8] broadcast-in-dim(%3), dimensions={}
  %5 = f32[8] add(%2, %4)
  %6 = f32[8] maximum(%5, %0)
  ROOT (%6)
}
)",
               {});
}

// Softmax: both reductions (max, then the sum of exp(x - max)) reduce the
// rows of x, and everything else is per row: one row fusion (the CPU
// backend walks each row in cache: max pass, exp-sum pass, normalize pass).
TEST(FusionTest, SoftmaxIsOneRowFusion) {
  ExpectFusion(R"(graph softmax(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={1}, to_apply=maximum
  %2 = f32[4,8] broadcast-in-dim(%1), dimensions={0}
  %3 = f32[4,8] subtract(%0, %2)
  %4 = f32[4,8] exponential(%3)
  %5 = f32[4] reduce(%4), dimensions={1}, to_apply=add
  %6 = f32[4,8] broadcast-in-dim(%5), dimensions={0}
  %7 = f32[4,8] divide(%4, %6)
  ROOT (%7)
}
)",
               R"(graph softmax(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] fusion(%0), calls=fused_reduce_bcast_sub_exp_div_0, kind=row
  ROOT (%1)
}

graph fused_reduce_bcast_sub_exp_div_0(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={1}, to_apply=maximum
  %2 = f32[4,8] broadcast-in-dim(%1), dimensions={0}
  %3 = f32[4,8] subtract(%0, %2)
  %4 = f32[4,8] exponential(%3)
  %5 = f32[4] reduce(%4), dimensions={1}, to_apply=add
  %6 = f32[4,8] broadcast-in-dim(%5), dimensions={0}
  %7 = f32[4,8] divide(%4, %6)
  ROOT (%7)
}
)",
               {});
}

// log-softmax: x - max - log(sum(exp(x - max))); log of the per-row sum is
// computed once per row (an outer-shaped value broadcast back along rows).
TEST(FusionTest, LogSoftmaxIsOneRowFusion) {
  ExpectFusion(R"(graph g(%p0: f32[16,32]) {
  %0 = f32[16,32] parameter(0)
  %1 = f32[16] reduce(%0), dimensions={1}, to_apply=maximum
  %2 = f32[16,32] broadcast-in-dim(%1), dimensions={0}
  %3 = f32[16,32] subtract(%0, %2)
  %4 = f32[16,32] exponential(%3)
  %5 = f32[16] reduce(%4), dimensions={1}, to_apply=add
  %6 = f32[16] log(%5)
  %7 = f32[16,32] broadcast-in-dim(%6), dimensions={0}
  %8 = f32[16,32] subtract(%3, %7)
  ROOT (%8)
}
)",
               R"(graph g(%p0: f32[16,32]) {
  %0 = f32[16,32] parameter(0)
  %1 = f32[16,32] fusion(%0), calls=fused_reduce_bcast_sub_exp_log_0, kind=row
  ROOT (%1)
}

graph fused_reduce_bcast_sub_exp_log_0(%p0: f32[16,32]) {
  %0 = f32[16,32] parameter(0)
  %1 = f32[16] reduce(%0), dimensions={1}, to_apply=maximum
  %2 = f32[16,32] broadcast-in-dim(%1), dimensions={0}
  %3 = f32[16,32] subtract(%0, %2)
  %4 = f32[16,32] exponential(%3)
  %5 = f32[16] reduce(%4), dimensions={1}, to_apply=add
  %6 = f32[16] log(%5)
  %7 = f32[16,32] broadcast-in-dim(%6), dimensions={0}
  %8 = f32[16,32] subtract(%3, %7)
  ROOT (%8)
}
)",
               {});
}

// Layer norm over rows: the variance's reduction depends on the mean's;
// gamma/beta are broadcast along the other dim (inputs read per element).
TEST(FusionTest, LayerNormIsOneRowFusion) {
  ExpectFusion(R"(graph g(%p0: f32[16,32], %p1: f32[32], %p2: f32[32]) {
  %0 = f32[16,32] parameter(0)
  %1 = f32[32] parameter(1)
  %2 = f32[32] parameter(2)
  %3 = f32[16] reduce(%0), dimensions={1}, to_apply=add
  %4 = f32[] constant({0.03125})
  %5 = f32[16] broadcast-in-dim(%4), dimensions={}
  %6 = f32[16] multiply(%3, %5)
  %7 = f32[16,32] broadcast-in-dim(%6), dimensions={0}
  %8 = f32[16,32] subtract(%0, %7)
  %9 = f32[16,32] multiply(%8, %8)
  %10 = f32[16] reduce(%9), dimensions={1}, to_apply=add
  %11 = f32[16] multiply(%10, %5)
  %12 = f32[] constant({1e-05})
  %13 = f32[16] broadcast-in-dim(%12), dimensions={}
  %14 = f32[16] add(%11, %13)
  %15 = f32[16] rsqrt(%14)
  %16 = f32[16,32] broadcast-in-dim(%15), dimensions={0}
  %17 = f32[16,32] multiply(%8, %16)
  %18 = f32[16,32] broadcast-in-dim(%1), dimensions={1}
  %19 = f32[16,32] multiply(%17, %18)
  %20 = f32[16,32] broadcast-in-dim(%2), dimensions={1}
  %21 = f32[16,32] add(%19, %20)
  ROOT (%21)
}
)",
               R"(graph g(%p0: f32[16,32], %p1: f32[32], %p2: f32[32]) {
  %0 = f32[16,32] parameter(0)
  %1 = f32[32] parameter(1)
  %2 = f32[32] parameter(2)
  %3 = f32[16,32] fusion(%0, %1, %2), calls=fused_reduce_bcast_mul_sub_add_rsqrt_0, kind=row
  ROOT (%3)
}

graph fused_reduce_bcast_mul_sub_add_rsqrt_0(%p0: f32[16,32], %p1: f32[32], %p2: f32[32]) {
  %0 = f32[16,32] parameter(0)
  %1 = f32[32] parameter(1)
  %2 = f32[32] parameter(2)
  %3 = f32[16] reduce(%0), dimensions={1}, to_apply=add
  %4 = f32[] constant({0.03125})
  %5 = f32[16] broadcast-in-dim(%4), dimensions={}
  %6 = f32[16] multiply(%3, %5)
  %7 = f32[16,32] broadcast-in-dim(%6), dimensions={0}
  %8 = f32[16,32] subtract(%0, %7)
  %9 = f32[16,32] multiply(%8, %8)
  %10 = f32[16] reduce(%9), dimensions={1}, to_apply=add
  %11 = f32[16] multiply(%10, %5)
  %12 = f32[] constant({1e-05})
  %13 = f32[16] broadcast-in-dim(%12), dimensions={}
  %14 = f32[16] add(%11, %13)
  %15 = f32[16] rsqrt(%14)
  %16 = f32[16,32] broadcast-in-dim(%15), dimensions={0}
  %17 = f32[16,32] multiply(%8, %16)
  %18 = f32[16,32] broadcast-in-dim(%1), dimensions={1}
  %19 = f32[16,32] multiply(%17, %18)
  %20 = f32[16,32] broadcast-in-dim(%2), dimensions={1}
  %21 = f32[16,32] add(%19, %20)
  ROOT (%21)
}
)",
               {});
}

TEST(FusionTest, ReduceFusesWithProducersAndReducedShapeConsumers) {
  ExpectFusion(R"(graph g(%p0: f32[4,8], %p1: f32[4]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4] parameter(1)
  %2 = f32[4,8] exponential(%0)
  %3 = f32[4] reduce(%2), dimensions={1}, to_apply=add
  %4 = f32[4] multiply(%3, %1)
  %5 = f32[4] log(%4)
  ROOT (%5)
}
)",
               R"(graph g(%p0: f32[4,8], %p1: f32[4]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4] parameter(1)
  %2 = f32[4] fusion(%0, %1), calls=fused_exp_reduce_mul_log_0, kind=row
  ROOT (%2)
}

graph fused_exp_reduce_mul_log_0(%p0: f32[4,8], %p1: f32[4]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4] parameter(1)
  %2 = f32[4,8] exponential(%0)
  %3 = f32[4] reduce(%2), dimensions={1}, to_apply=add
  %4 = f32[4] multiply(%3, %1)
  %5 = f32[4] log(%4)
  ROOT (%5)
}
)",
               {});
}

TEST(FusionTest, ExpensiveProducerWithTwoConsumersIsNotDuplicated) {
  ExpectFusion(R"(graph g(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] exponential(%0)
  %2 = f32[8] add(%1, %0)
  %3 = f32[8] multiply(%1, %0)
  ROOT (%2, %3)
}
)",
               R"(graph g(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] fusion(%0), calls=fused_exp_0, kind=loop
  %2 = f32[8] fusion(%1, %0), calls=fused_add_1, kind=loop
  %3 = f32[8] fusion(%1, %0), calls=fused_mul_2, kind=loop
  ROOT (%2, %3)
}

graph fused_exp_0(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] exponential(%0)
  ROOT (%1)
}

graph fused_add_1(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] add(%0, %1)
  ROOT (%2)
}

graph fused_mul_2(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] multiply(%0, %1)
  ROOT (%2)
}
)",
               {"refuse %1 -> %3: expensive producer exponential %1 (cost 20 per element) has 2 "
                "users; not duplicated",
                "refuse %1 -> %2: expensive producer exponential %1 (cost 20 per element) has 2 "
                "users; not duplicated"});
}

TEST(FusionTest, NothingFusesAcrossABarrier) {
  ExpectFusion(
      R"(graph g(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] negate(%0)
  %2 = (f32[8]) optimization-barrier(%1)
  %3 = f32[8] get-tuple-element(%2), index=0
  %4 = f32[8] abs(%3)
  ROOT (%4)
}
)",
      R"(graph g(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] fusion(%0), calls=fused_neg_0, kind=loop
  %2 = (f32[8]) optimization-barrier(%1)
  %3 = f32[8] get-tuple-element(%2), index=0
  %4 = f32[8] fusion(%3), calls=fused_abs_1, kind=loop
  ROOT (%4)
}

graph fused_neg_0(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] negate(%0)
  ROOT (%1)
}

graph fused_abs_1(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] abs(%0)
  ROOT (%1)
}
)",
      {"refuse %3 -> %4: nothing fuses across an optimization-barrier (optimization-barrier %2)"});
}

TEST(FusionTest, RngIsNeverFused) {
  ExpectFusion(R"(graph g(%p0: u64[], %p1: u64[], %p2: f32[8]) {
  %0 = u64[] parameter(0)
  %1 = u64[] parameter(1)
  %2 = f32[8] parameter(2)
  %3 = f32[8] rng-uniform(%0, %1), stream=0
  %4 = f32[8] multiply(%3, %2)
  ROOT (%4)
}
)",
               R"(graph g(%p0: u64[], %p1: u64[], %p2: f32[8]) {
  %0 = u64[] parameter(0)
  %1 = u64[] parameter(1)
  %2 = f32[8] parameter(2)
  %3 = f32[8] rng-uniform(%0, %1), stream=0
  %4 = f32[8] fusion(%3, %2), calls=fused_mul_0, kind=loop
  ROOT (%4)
}

graph fused_mul_0(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] multiply(%0, %1)
  ROOT (%2)
}
)",
               {"refuse %3 -> %4: rng ops are never moved or merged"});
}

TEST(FusionTest, DotStaysExtern) {
  ExpectFusion(R"(graph g(%p0: f32[4,8], %p1: f32[8,2]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[8,2] parameter(1)
  %2 = f32[4,8] tanh(%0)
  %3 = f32[4,2] dot-general(%2, %1), lhs_batch_dims={}, lhs_contracting_dims={1}, rhs_batch_dims={}, rhs_contracting_dims={0}
  %4 = f32[4,2] exponential(%3)
  ROOT (%4)
}
)",
               R"(graph g(%p0: f32[4,8], %p1: f32[8,2]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[8,2] parameter(1)
  %2 = f32[4,8] fusion(%0), calls=fused_tanh_0, kind=loop
  %3 = f32[4,2] dot-general(%2, %1), lhs_batch_dims={}, lhs_contracting_dims={1}, rhs_batch_dims={}, rhs_contracting_dims={0}
  %4 = f32[4,2] fusion(%3), calls=fused_exp_1, kind=loop
  ROOT (%4)
}

graph fused_tanh_0(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] tanh(%0)
  ROOT (%1)
}

graph fused_exp_1(%p0: f32[4,2]) {
  %0 = f32[4,2] parameter(0)
  %1 = f32[4,2] exponential(%0)
  ROOT (%1)
}
)",
               {"refuse %3 -> %4: dot-general stays extern"});
}

TEST(FusionTest, CheapBroadcastIsDuplicatedIntoEachConsumer) {
  ExpectFusion(R"(graph g(%p0: f32[4,8], %p1: f32[], %p2: f32[8,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[] parameter(1)
  %2 = f32[8,8] parameter(2)
  %3 = f32[4,8] broadcast-in-dim(%1), dimensions={}
  %4 = f32[4,8] add(%0, %3)
  %5 = f32[4,8] dot-general(%4, %2), lhs_batch_dims={}, lhs_contracting_dims={1}, rhs_batch_dims={}, rhs_contracting_dims={0}
  %6 = f32[4,8] multiply(%5, %3)
  ROOT (%6)
}
)",
               R"(graph g(%p0: f32[4,8], %p1: f32[], %p2: f32[8,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[] parameter(1)
  %2 = f32[8,8] parameter(2)
  %3 = f32[4,8] fusion(%1, %0), calls=fused_bcast_add_0, kind=loop
  %4 = f32[4,8] dot-general(%3, %2), lhs_batch_dims={}, lhs_contracting_dims={1}, rhs_batch_dims={}, rhs_contracting_dims={0}
  %5 = f32[4,8] fusion(%1, %4), calls=fused_bcast_mul_1, kind=loop
  ROOT (%5)
}

graph fused_bcast_add_0(%p0: f32[], %p1: f32[4,8]) {
  %0 = f32[] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] broadcast-in-dim(%0), dimensions={}
  %3 = f32[4,8] add(%1, %2)
  ROOT (%3)
}

graph fused_bcast_mul_1(%p0: f32[], %p1: f32[4,8]) {
  %0 = f32[] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] broadcast-in-dim(%0), dimensions={}
  %3 = f32[4,8] multiply(%1, %2)
  ROOT (%3)
}
)",
               {"refuse %5 -> %6: dot-general stays extern"});
}

// exp of f32[8] broadcast along dim 1 of f32[4,8] would run 32 times.
TEST(FusionTest, ExpensiveProducerIsNotReplicatedByABroadcast) {
  ExpectFusion(R"(graph g(%p0: f32[8], %p1: f32[4,8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[8] exponential(%0)
  %3 = f32[4,8] broadcast-in-dim(%2), dimensions={1}
  %4 = f32[4,8] multiply(%3, %1)
  ROOT (%4)
}
)",
               R"(graph g(%p0: f32[8], %p1: f32[4,8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[8] fusion(%0), calls=fused_exp_0, kind=loop
  %3 = f32[4,8] fusion(%2, %1), calls=fused_bcast_mul_1, kind=loop
  ROOT (%3)
}

graph fused_exp_0(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] exponential(%0)
  ROOT (%1)
}

graph fused_bcast_mul_1(%p0: f32[8], %p1: f32[4,8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] broadcast-in-dim(%0), dimensions={1}
  %3 = f32[4,8] multiply(%2, %1)
  ROOT (%3)
}
)",
               {"refuse %2 -> %3: expensive producer exponential %2 would be evaluated 32 times "
                "for 8 elements (replicated by a broadcast in the fusion)"});
}

// A chain of cheap ops adds up: `pairs` of x*x + x (2 per element each) broadcast
// along a new leading dim. At 10 pairs (20 per element, one transcendental's worth,
// kExpensiveSubtreeCost) the chain is computed once and read by the broadcast; at 9 it
// is recomputed for every element of the consumer.
std::string CheapChainThroughABroadcast(int pairs) {
  std::ostringstream os;
  os << "graph g(%p0: f32[8], %p1: f32[4,8]) {\n  %0 = f32[8] parameter(0)\n"
     << "  %1 = f32[4,8] parameter(1)\n";
  int prev = 0, n = 2;
  for (int i = 0; i < pairs; ++i, n += 2) {
    os << "  %" << n << " = f32[8] multiply(%" << prev << ", %" << prev << ")\n";
    os << "  %" << n + 1 << " = f32[8] add(%" << n << ", %0)\n";
    prev = n + 1;
  }
  os << "  %" << n << " = f32[4,8] broadcast-in-dim(%" << prev << "), dimensions={1}\n";
  os << "  %" << n + 1 << " = f32[4,8] multiply(%" << n << ", %1)\n  ROOT (%" << n + 1 << ")\n}\n";
  return os.str();
}

TEST(FusionTest, ACheapChainWorthATranscendentalIsNotReplicatedByABroadcast) {
  for (int pairs : {9, 10}) {
    Graph g = ParseOrDie(CheapChainThroughABroadcast(pairs));
    const Graph before = g;
    FusionPass pass;
    ASSERT_TRUE(pass.Run(g).ok());
    int fusions = 0;
    for (NodeId i = 0; i < g.num_nodes(); ++i) fusions += g.node(i).op == OpKind::kFusion;
    EXPECT_EQ(fusions, pairs == 10 ? 2 : 1) << PrintGraph(g);
    const std::vector<std::string> want =
        pairs == 10 ? std::vector<std::string>{"refuse %21 -> %22: producer add %21 with the ops "
                                               "only it reads costs 20 per element and would be "
                                               "evaluated 32 times for 8 elements (replicated by "
                                               "a broadcast in the fusion)"}
                    : std::vector<std::string>{};
    EXPECT_EQ(pass.refusals(), want);
    ExpectSameValues(before, g);
  }
}

// The kernel memoizes a value per element index, so two elementwise consumers of an
// expensive producer's shape evaluate it once per element between them: it fuses.
TEST(FusionTest, ElementwiseConsumersOfOneShapeShareAnExpensiveProducer) {
  ExpectFusion(R"(graph g(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] exponential(%0)
  %3 = f32[8] add(%2, %1)
  %4 = f32[8] multiply(%2, %3)
  ROOT (%4)
}
)",
               R"(graph g(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] fusion(%0, %1), calls=fused_exp_add_mul_0, kind=loop
  ROOT (%2)
}

graph fused_exp_add_mul_0(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] exponential(%0)
  %3 = f32[8] add(%2, %1)
  %4 = f32[8] multiply(%2, %3)
  ROOT (%4)
}
)",
               {});
}

// A slice of a materialized value read by two fusions is read by each (no kernel of
// its own), like the cheap data movement above.
TEST(FusionTest, ASliceIsDuplicatedIntoEachConsumer) {
  ExpectFusion(R"(graph g(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,4] slice(%0), limit={4,8}, start={0,0}, stride={1,2}
  %2 = f32[4,4] exponential(%1)
  %3 = f32[4] reduce(%1), dimensions={1}, to_apply=add
  ROOT (%2, %3)
}
)",
               R"(graph g(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,4] fusion(%0), calls=fused_slice_exp_0, kind=loop
  %2 = f32[4] fusion(%0), calls=fused_slice_reduce_1, kind=row
  ROOT (%1, %2)
}

graph fused_slice_exp_0(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,4] slice(%0), limit={4,8}, start={0,0}, stride={1,2}
  %2 = f32[4,4] exponential(%1)
  ROOT (%2)
}

graph fused_slice_reduce_1(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,4] slice(%0), limit={4,8}, start={0,0}, stride={1,2}
  %2 = f32[4] reduce(%1), dimensions={1}, to_apply=add
  ROOT (%2)
}
)",
               {});
}

// A row broadcast (operand = the leading dims) is evaluated once per row:
// generated code computes its operand before the loop over the row.
TEST(FusionTest, RowBroadcastOfAnExpensiveProducerFuses) {
  ExpectFusion(R"(graph g(%p0: f32[4], %p1: f32[4,8]) {
  %0 = f32[4] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4] exponential(%0)
  %3 = f32[4,8] broadcast-in-dim(%2), dimensions={0}
  %4 = f32[4,8] multiply(%3, %1)
  ROOT (%4)
}
)",
               R"(graph g(%p0: f32[4], %p1: f32[4,8]) {
  %0 = f32[4] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] fusion(%0, %1), calls=fused_exp_bcast_mul_0, kind=loop
  ROOT (%2)
}

graph fused_exp_bcast_mul_0(%p0: f32[4], %p1: f32[4,8]) {
  %0 = f32[4] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4] exponential(%0)
  %3 = f32[4,8] broadcast-in-dim(%2), dimensions={0}
  %4 = f32[4,8] multiply(%3, %1)
  ROOT (%4)
}
)",
               {});
}

// mean over rows subtracted from each row: a row fusion.
TEST(FusionTest, ReduceResultBroadcastBackAlongRowsIsARowFusion) {
  ExpectFusion(R"(graph g(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={1}, to_apply=add
  %2 = f32[] constant({0.125})
  %3 = f32[4] broadcast-in-dim(%2), dimensions={}
  %4 = f32[4] multiply(%1, %3)
  %5 = f32[4,8] broadcast-in-dim(%4), dimensions={0}
  %6 = f32[4,8] subtract(%0, %5)
  ROOT (%6)
}
)",
               R"(graph g(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] fusion(%0), calls=fused_reduce_bcast_mul_sub_0, kind=row
  ROOT (%1)
}

graph fused_reduce_bcast_mul_sub_0(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={1}, to_apply=add
  %2 = f32[] constant({0.125})
  %3 = f32[4] broadcast-in-dim(%2), dimensions={}
  %4 = f32[4] multiply(%1, %3)
  %5 = f32[4,8] broadcast-in-dim(%4), dimensions={0}
  %6 = f32[4,8] subtract(%0, %5)
  ROOT (%6)
}
)",
               {});
}

// A reduction over an outer dim broadcast back: not rows, refused.
TEST(FusionTest, OuterDimReductionBroadcastBackIsRefused) {
  ExpectFusion(R"(graph g(%p0: f32[8,4]) {
  %0 = f32[8,4] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={0}, to_apply=add
  %2 = f32[8,4] broadcast-in-dim(%1), dimensions={1}
  %3 = f32[8,4] subtract(%0, %2)
  ROOT (%3)
}
)",
               R"(graph g(%p0: f32[8,4]) {
  %0 = f32[8,4] parameter(0)
  %1 = f32[4] fusion(%0), calls=fused_reduce_0, kind=input
  %2 = f32[8,4] fusion(%1, %0), calls=fused_bcast_sub_1, kind=loop
  ROOT (%2)
}

graph fused_reduce_0(%p0: f32[8,4]) {
  %0 = f32[8,4] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={0}, to_apply=add
  ROOT (%1)
}

graph fused_bcast_sub_1(%p0: f32[4], %p1: f32[8,4]) {
  %0 = f32[4] parameter(0)
  %1 = f32[8,4] parameter(1)
  %2 = f32[8,4] broadcast-in-dim(%0), dimensions={1}
  %3 = f32[8,4] subtract(%1, %2)
  ROOT (%3)
}
)",
               {"refuse %1 -> %2: reduce %1 result is broadcast back to f32[8,4] by "
                "broadcast-in-dim %2; no row fusion: reduce %1 reduces dims {0} of f32[8,4]; a row "
                "fusion needs reductions over the innermost dims, keeping at least one"});
}

// A transpose of a value computed from a row reduction reads other rows.
TEST(FusionTest, TransposeOfARowValueIsRefused) {
  ExpectFusion(
      R"(graph g(%p0: f32[8,8]) {
  %0 = f32[8,8] parameter(0)
  %1 = f32[8] reduce(%0), dimensions={1}, to_apply=maximum
  %2 = f32[8,8] broadcast-in-dim(%1), dimensions={0}
  %3 = f32[8,8] subtract(%0, %2)
  %4 = f32[8,8] transpose(%3), dimensions={1,0}
  ROOT (%4)
}
)",
      R"(graph g(%p0: f32[8,8]) {
  %0 = f32[8,8] parameter(0)
  %1 = f32[8] fusion(%0), calls=fused_reduce_0, kind=row
  %2 = f32[8,8] fusion(%1, %0), calls=fused_bcast_sub_transpose_1, kind=loop
  ROOT (%2)
}

graph fused_reduce_0(%p0: f32[8,8]) {
  %0 = f32[8,8] parameter(0)
  %1 = f32[8] reduce(%0), dimensions={1}, to_apply=maximum
  ROOT (%1)
}

graph fused_bcast_sub_transpose_1(%p0: f32[8], %p1: f32[8,8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8,8] parameter(1)
  %2 = f32[8,8] broadcast-in-dim(%0), dimensions={0}
  %3 = f32[8,8] subtract(%1, %2)
  %4 = f32[8,8] transpose(%3), dimensions={1,0}
  ROOT (%4)
}
)",
      {"refuse %1 -> %2: reduce %1 result is broadcast back to f32[8,8] by broadcast-in-dim %2; no "
       "row fusion: transpose %4 consumes reduce %1's rows other than elementwise per row (a row "
       "fusion allows elementwise ops of shape f32[8,8] or f32[8] and broadcasts back)"});
}

// Reductions over dims {1,2} and {2} of one shape are different rows.
TEST(FusionTest, ReductionsOverDifferentRowsAreRefused) {
  ExpectFusion(R"(graph g(%p0: f32[4,8,16]) {
  %0 = f32[4,8,16] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={1,2}, to_apply=add
  %2 = f32[4,8,16] broadcast-in-dim(%1), dimensions={0}
  %3 = f32[4,8,16] subtract(%0, %2)
  %4 = f32[4,8] reduce(%3), dimensions={2}, to_apply=maximum
  ROOT (%4)
}
)",
               R"(graph g(%p0: f32[4,8,16]) {
  %0 = f32[4,8,16] parameter(0)
  %1 = f32[4] fusion(%0), calls=fused_reduce_0, kind=row
  %2 = f32[4,8] fusion(%1, %0), calls=fused_bcast_sub_reduce_1, kind=row
  ROOT (%2)
}

graph fused_reduce_0(%p0: f32[4,8,16]) {
  %0 = f32[4,8,16] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={1,2}, to_apply=add
  ROOT (%1)
}

graph fused_bcast_sub_reduce_1(%p0: f32[4], %p1: f32[4,8,16]) {
  %0 = f32[4] parameter(0)
  %1 = f32[4,8,16] parameter(1)
  %2 = f32[4,8,16] broadcast-in-dim(%0), dimensions={0}
  %3 = f32[4,8,16] subtract(%1, %2)
  %4 = f32[4,8] reduce(%3), dimensions={2}, to_apply=maximum
  ROOT (%4)
}
)",
               {"refuse %1 -> %2: the fusion already contains reduce %4 (one reduction per input "
                "fusion); no row fusion: reduce %1 (dims {1,2} of f32[4,8,16]) and reduce %4 (dims "
                "{2} of f32[4,8,16]) reduce different rows"});
}

TEST(FusionTest, DataMovementChainIsOneLoopFusion) {
  ExpectFusion(R"(graph g(%p0: f32[4,8], %p1: s32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = s32[4,8] parameter(1)
  %2 = f32[4,8] convert(%1)
  %3 = f32[8,4] transpose(%0), dimensions={1,0}
  %4 = f32[4,8] transpose(%3), dimensions={1,0}
  %5 = f32[4,8] iota(), iota_dimension=1
  %6 = f32[4,8] add(%4, %5)
  %7 = pred[4,8] compare(%6, %2), direction=LT
  %8 = f32[4,8] select(%7, %6, %2)
  %9 = f32[4,4] slice(%8), start={0,0}, limit={4,8}, stride={1,2}
  %10 = f32[4,4] reverse(%9), dimensions={1}
  %11 = f32[] constant({0})
  %12 = f32[6,4] pad(%10, %11), low={1,0}, high={1,0}, interior={0,0}
  %13 = f32[12,4] concatenate(%12, %12), dimension=0
  %14 = f32[48] reshape(%13)
  ROOT (%14)
}
)",
               R"(graph g(%p0: f32[4,8], %p1: s32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = s32[4,8] parameter(1)
  %2 = f32[48] fusion(%1, %0), calls=fused_cvt_transpose_iota_add_cmp_select_etc_0, kind=loop
  ROOT (%2)
}

graph fused_cvt_transpose_iota_add_cmp_select_etc_0(%p0: s32[4,8], %p1: f32[4,8]) {
  %0 = s32[4,8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] convert(%0)
  %3 = f32[8,4] transpose(%1), dimensions={1,0}
  %4 = f32[4,8] transpose(%3), dimensions={1,0}
  %5 = f32[4,8] iota(), iota_dimension=1
  %6 = f32[4,8] add(%4, %5)
  %7 = pred[4,8] compare(%6, %2), direction=LT
  %8 = f32[4,8] select(%7, %6, %2)
  %9 = f32[4,4] slice(%8), limit={4,8}, start={0,0}, stride={1,2}
  %10 = f32[4,4] reverse(%9), dimensions={1}
  %11 = f32[] constant({0})
  %12 = f32[6,4] pad(%10, %11), high={1,0}, interior={0,0}, low={1,0}
  %13 = f32[12,4] concatenate(%12, %12), dimension=0
  %14 = f32[48] reshape(%13)
  ROOT (%14)
}
)",
               {});
}

TEST(FusionTest, NoLogWithoutEmberLog) {
  unsetenv("EMBER_LOG");
  Graph g = ParseOrDie(R"(graph g(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] exponential(%0)
  %2 = f32[8] add(%1, %0)
  %3 = f32[8] multiply(%1, %0)
  ROOT (%2, %3)
})");
  FusionPass pass;
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(pass.Run(g).ok());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(pass.refusals().size(), 2u);  // still recorded
  setenv("EMBER_LOG", "all", 1);
  EXPECT_TRUE(LogEnabled("fusion"));
  setenv("EMBER_LOG", " cse , fusion ", 1);
  EXPECT_TRUE(LogEnabled("fusion"));
  setenv("EMBER_LOG", "fusionx,cse", 1);
  EXPECT_FALSE(LogEnabled("fusion"));
  unsetenv("EMBER_LOG");
}

TEST(FusionTest, NothingToFuse) {
  ExpectUnchanged(*CreatePass("fusion").value(), R"(graph g(%p0: f32[4,8], %p1: f32[8,2]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[8,2] parameter(1)
  %2 = f32[4,2] dot-general(%0, %1), lhs_batch_dims={}, lhs_contracting_dims={1}, rhs_batch_dims={}, rhs_contracting_dims={0}
  ROOT (%2)
})");
}

// Appends `count` consumers of `operand` to the graph text `head`, each an
// exponential(%0) and then `op`(that, operand), numbered from %first, and closes the
// graph with a ROOT tuple of the second node of each pair.
std::string WithExpConsumers(std::string head, int first, int count, const std::string& op,
                             const std::string& operand) {
  std::string root = "  ROOT (";
  for (int i = 0; i < count; ++i) {
    const int e = first + 2 * i;
    head += "  %" + std::to_string(e) + " = f32[4] exponential(%0)\n";
    head += "  %" + std::to_string(e + 1) + " = f32[4] " + op + "(%" + std::to_string(e) + ", " +
            operand + ")\n";
    root += (i ? ", %" : "%") + std::to_string(e + 1);
  }
  return head + root + ")\n}\n";
}

TEST(FusionTest, CheapProducerBeyondTheDuplicationBound) {
  const std::string text = WithExpConsumers(
      "graph g(%p0: f32[4]) {\n  %0 = f32[4] parameter(0)\n"
      "  %1 = f32[4] reshape(%0)\n",
      2, kMaxDuplicateUsers + 1, "add", "%1");
  Graph g = ParseOrDie(text);
  const Graph before = g;
  FusionPass pass;
  ASSERT_TRUE(pass.Run(g).ok());
  ASSERT_EQ(pass.refusals().size(), static_cast<size_t>(kMaxDuplicateUsers + 1));
  EXPECT_EQ(pass.refusals()[0],
            "refuse %1 -> %" + std::to_string(2 * kMaxDuplicateUsers + 3) +
                ": cheap producer reshape %1 has 9 users, more than the duplication bound 8");
  // The reshape is its own kernel, read by every other fusion.
  EXPECT_EQ(g.node(1).op, OpKind::kFusion);
  EXPECT_EQ(g.node(1).called->node(1).op, OpKind::kReshape);
  ExpectSameValues(before, g);
  // With one user fewer it is duplicated into each consumer.
  std::string fewer = text;
  fewer = fewer.substr(0, fewer.find("  %" + std::to_string(2 * kMaxDuplicateUsers + 2)));
  std::string root8 = "  ROOT (";
  for (int i = 0; i < kMaxDuplicateUsers; ++i)
    root8 += (i ? ", %" : "%") + std::to_string(3 + 2 * i);
  Graph h = ParseOrDie(fewer + root8 + ")\n}\n");
  const Graph hb = h;
  FusionPass p2;
  ASSERT_TRUE(p2.Run(h).ok());
  EXPECT_TRUE(p2.refusals().empty());
  EXPECT_EQ(h.num_nodes(), 1 + kMaxDuplicateUsers);
  ExpectSameValues(hb, h);
}

// Values computed from constants only (an iota, the splat of a layer
// norm's element count) are duplicated into every consumer whatever their
// number: no kernel of their own.
TEST(FusionTest, ConstantSplatsAreDuplicatedBeyondTheBound) {
  std::string text =
      "graph g(%p0: f32[4]) {\n  %0 = f32[4] parameter(0)\n"
      "  %1 = f32[4] iota(), iota_dimension=0\n"
      "  %2 = f32[] constant({64})\n"
      "  %3 = f32[4] broadcast-in-dim(%2), dimensions={}\n";
  std::string root = "  ROOT (";
  for (int i = 0; i < kMaxDuplicateUsers + 3; ++i) {
    const int e = 4 + 3 * i;
    text += "  %" + std::to_string(e) + " = f32[4] exponential(%0)\n";
    text += "  %" + std::to_string(e + 1) + " = f32[4] add(%" + std::to_string(e) + ", %1)\n";
    text +=
        "  %" + std::to_string(e + 2) + " = f32[4] divide(%" + std::to_string(e + 1) + ", %3)\n";
    root += (i ? ", %" : "%") + std::to_string(e + 2);
  }
  text += root + ")\n}\n";
  Graph g = ParseOrDie(text);
  const Graph before = g;
  FusionPass pass;
  ASSERT_TRUE(pass.Run(g).ok());
  EXPECT_TRUE(pass.refusals().empty()) << pass.refusals()[0];
  // The parameter and one fusion per output; each body holds its own iota
  // and splat.
  EXPECT_EQ(g.num_nodes(), 1 + kMaxDuplicateUsers + 3);
  for (const Node& n : g.nodes()) {
    if (n.op != OpKind::kFusion) continue;
    int iotas = 0, splats = 0;
    for (const Node& b : n.called->nodes()) {
      iotas += b.op == OpKind::kIota;
      splats += b.op == OpKind::kBroadcastInDim;
    }
    EXPECT_EQ(iotas, 1);
    EXPECT_EQ(splats, 1);
  }
  ExpectSameValues(before, g);
}

// A broadcast of a scalar input (an optimizer's learning rate, read by every
// parameter's update) is duplicated into every consumer whatever their number: each
// copy reads one value, where a kernel of its own would write the array and every
// update would read it back.
TEST(FusionTest, ScalarBroadcastsAreDuplicatedBeyondTheBound) {
  const std::string text = WithExpConsumers(
      "graph g(%p0: f32[4], %p1: f64[]) {\n  %0 = f32[4] parameter(0)\n"
      "  %1 = f64[] parameter(1)\n"
      "  %2 = f64[4] broadcast-in-dim(%1), dimensions={}\n"
      "  %3 = f32[4] convert(%2)\n",
      4, kMaxDuplicateUsers + 3, "multiply", "%3");
  Graph g = ParseOrDie(text);
  const Graph before = g;
  FusionPass pass;
  ASSERT_TRUE(pass.Run(g).ok());
  EXPECT_TRUE(pass.refusals().empty()) << pass.refusals()[0];
  // The two parameters and one fusion per output, each reading the scalar itself.
  EXPECT_EQ(g.num_nodes(), 2 + kMaxDuplicateUsers + 3);
  for (const Node& n : g.nodes()) {
    if (n.op != OpKind::kFusion) continue;
    EXPECT_EQ(n.operands.size(), 2u);
    int broadcasts = 0;
    for (const Node& b : n.called->nodes()) broadcasts += b.op == OpKind::kBroadcastInDim;
    EXPECT_EQ(broadcasts, 1);
  }
  ExpectSameValues(before, g);
}

// An optimizer's f32 state updated in f64 (addcmul's multiply-add, then a convert back)
// is a graph output that the parameter update reads again. The output's convert is not
// duplicated into that reader: a copy would read the f64 sum, which would then be written
// by a fusion of its own beside the f32 result (and converted by a third kernel). The sum
// stays inside the output's fusion and the reader reads the f32 result. The same holds
// for a convert that is no output but has several readers (a residual add computed in
// f64, read by the next layer norm and the next residual add).
TEST(FusionTest, ANarrowingConvertIsReadNotRecomputedFromItsWiderOperand) {
  const std::string head = R"(graph g(%p0: f32[8], %p1: f32[8], %p2: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] parameter(2)
)";
  const std::string bodies = R"(
graph fused_cvt_mul_add_0(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f64[8] convert(%0)
  %3 = f64[8] convert(%1)
  %4 = f64[8] multiply(%2, %3)
  %5 = f64[8] add(%4, %2)
  %6 = f32[8] convert(%5)
  ROOT (%6)
}

graph fused_sqrt_div_1(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] sqrt(%0)
  %3 = f32[8] divide(%1, %2)
  ROOT (%3)
}
)";
  const std::string update = R"(  %3 = f64[8] convert(%0)
  %4 = f64[8] convert(%1)
  %5 = f64[8] multiply(%3, %4)
  %6 = f64[8] add(%5, %3)
  %7 = f32[8] convert(%6)
  %8 = f32[8] sqrt(%7)
  %9 = f32[8] divide(%2, %8)
)";
  const std::string refusal = "a copy would read 64 bytes, more than the result it is (32)";
  // The f32 state is a graph output.
  ExpectFusion(head + update + "  ROOT (%7, %9)\n}\n",
               head + R"(  %3 = f32[8] fusion(%0, %1), calls=fused_cvt_mul_add_0, kind=loop
  %4 = f32[8] fusion(%3, %2), calls=fused_sqrt_div_1, kind=loop
  ROOT (%3, %4)
}
)" + bodies,
               {"refuse %7 -> %8: convert %7 is a graph output (and has 1 user); " + refusal});
  // The f32 value is no output and has two readers.
  ExpectFusion(
      head + update + "  %10 = f32[8] multiply(%7, %2)\n  ROOT (%9, %10)\n}\n",
      head + R"(  %3 = f32[8] fusion(%0, %1), calls=fused_cvt_mul_add_0, kind=loop
  %4 = f32[8] fusion(%3, %2), calls=fused_sqrt_div_1, kind=loop
  %5 = f32[8] fusion(%3, %2), calls=fused_mul_2, kind=loop
  ROOT (%4, %5)
}
)" + bodies +
          R"(
graph fused_mul_2(%p0: f32[8], %p1: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] parameter(1)
  %2 = f32[8] multiply(%0, %1)
  ROOT (%2)
}
)",
      {"refuse %7 -> %10: convert %7 has 2 users; " + refusal + ", and %6 would be written",
       "refuse %7 -> %8: convert %7 has 2 users; " + refusal + ", and %6 would be written"});
}

// LayerNorm backward's x_hat = (x - mean) * rstd is read by the row kernel of
// dx (through a row sum) and by the column sum of dweight. Both recompute it
// from x (ShouldDuplicate: plain arithmetic that every user fuses, its copies
// reading no more than materializing it would move): two kernels, and no
// kernel writes x_hat.
TEST(FusionTest, ArithmeticReadByRowAndColumnKernelsIsRecomputedInBoth) {
  // dx = dy - x_hat * rowsum(dy * x_hat) (a row fusion); dweight = colsum(dy *
  // x_hat) (an input fusion), each with its own product, as autograd traces
  // them.
  ExpectFusion(R"(graph g(%p0: f32[4,8], %p1: f32[4,8], %p2: f32[4], %p3: f32[4]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4] parameter(2)
  %3 = f32[4] parameter(3)
  %4 = f32[4,8] broadcast-in-dim(%2), dimensions={0}
  %5 = f32[4,8] broadcast-in-dim(%3), dimensions={0}
  %6 = f32[4,8] subtract(%1, %4)
  %7 = f32[4,8] multiply(%6, %5)
  %8 = f32[4,8] multiply(%0, %7)
  %9 = f32[4] reduce(%8), dimensions={1}, to_apply=add
  %10 = f32[4,8] broadcast-in-dim(%9), dimensions={0}
  %11 = f32[4,8] multiply(%7, %10)
  %12 = f32[4,8] subtract(%0, %11)
  %13 = f32[4,8] multiply(%0, %7)
  %14 = f32[8] reduce(%13), dimensions={0}, to_apply=add
  ROOT (%12, %14)
}
)",
               R"(graph g(%p0: f32[4,8], %p1: f32[4,8], %p2: f32[4], %p3: f32[4]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4] parameter(2)
  %3 = f32[4] parameter(3)
  %4 = f32[4,8] fusion(%2, %3, %1, %0), calls=fused_bcast_sub_mul_reduce_0, kind=row
  %5 = f32[8] fusion(%2, %3, %1, %0), calls=fused_bcast_sub_mul_reduce_1, kind=input
  ROOT (%4, %5)
}

graph fused_bcast_sub_mul_reduce_0(%p0: f32[4], %p1: f32[4], %p2: f32[4,8], %p3: f32[4,8]) {
  %0 = f32[4] parameter(0)
  %1 = f32[4] parameter(1)
  %2 = f32[4,8] parameter(2)
  %3 = f32[4,8] parameter(3)
  %4 = f32[4,8] broadcast-in-dim(%0), dimensions={0}
  %5 = f32[4,8] broadcast-in-dim(%1), dimensions={0}
  %6 = f32[4,8] subtract(%2, %4)
  %7 = f32[4,8] multiply(%6, %5)
  %8 = f32[4,8] multiply(%3, %7)
  %9 = f32[4] reduce(%8), dimensions={1}, to_apply=add
  %10 = f32[4,8] broadcast-in-dim(%9), dimensions={0}
  %11 = f32[4,8] multiply(%7, %10)
  %12 = f32[4,8] subtract(%3, %11)
  ROOT (%12)
}

graph fused_bcast_sub_mul_reduce_1(%p0: f32[4], %p1: f32[4], %p2: f32[4,8], %p3: f32[4,8]) {
  %0 = f32[4] parameter(0)
  %1 = f32[4] parameter(1)
  %2 = f32[4,8] parameter(2)
  %3 = f32[4,8] parameter(3)
  %4 = f32[4,8] broadcast-in-dim(%0), dimensions={0}
  %5 = f32[4,8] broadcast-in-dim(%1), dimensions={0}
  %6 = f32[4,8] subtract(%2, %4)
  %7 = f32[4,8] multiply(%6, %5)
  %8 = f32[4,8] multiply(%3, %7)
  %9 = f32[8] reduce(%8), dimensions={0}, to_apply=add
  ROOT (%9)
}
)",
               {});
}

// A residual stream: h1 = x + a, h2 = h1 + b, h2 read by a row sum and a
// column sum. h2 is not recomputed by them: that would recompute h1 too (the
// whole stream, in every consumer, as the layers grow); h2 is one kernel (and
// h1, read by h2's plain loop fusion, another).
TEST(FusionTest, AChainOfSharedArithmeticIsNotRecomputedFromItsStart) {
  ExpectFusion(R"(graph g(%p0: f32[4,8], %p1: f32[4,8], %p2: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] parameter(2)
  %3 = f32[4,8] add(%0, %1)
  %4 = f32[4] reduce(%3), dimensions={1}, to_apply=add
  %5 = f32[4,8] add(%3, %2)
  %6 = f32[4] reduce(%5), dimensions={1}, to_apply=add
  %7 = f32[8] reduce(%5), dimensions={0}, to_apply=add
  ROOT (%4, %6, %7)
}
)",
               R"(graph g(%p0: f32[4,8], %p1: f32[4,8], %p2: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] parameter(2)
  %3 = f32[4,8] fusion(%0, %1), calls=fused_add_0, kind=loop
  %4 = f32[4] fusion(%3), calls=fused_reduce_1, kind=row
  %5 = f32[4,8] fusion(%3, %2), calls=fused_add_2, kind=loop
  %6 = f32[4] fusion(%5), calls=fused_reduce_3, kind=row
  %7 = f32[8] fusion(%5), calls=fused_reduce_4, kind=input
  ROOT (%4, %6, %7)
}

graph fused_add_0(%p0: f32[4,8], %p1: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] add(%0, %1)
  ROOT (%2)
}

graph fused_reduce_1(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={1}, to_apply=add
  ROOT (%1)
}

graph fused_add_2(%p0: f32[4,8], %p1: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] add(%0, %1)
  ROOT (%2)
}

graph fused_reduce_3(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4] reduce(%0), dimensions={1}, to_apply=add
  ROOT (%1)
}

graph fused_reduce_4(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[8] reduce(%0), dimensions={0}, to_apply=add
  ROOT (%1)
}
)",
               {"refuse %5 -> %7: arithmetic producer add %5 has 2 users; its operand %3 is "
                "arithmetic with several users (recomputing both would recompute their chain in "
                "every consumer)",
                "refuse %5 -> %6: arithmetic producer add %5 has 2 users, not all of which fuse "
                "it; it is materialized, so it is not also recomputed",
                "refuse %3 -> %5: arithmetic producer add %3 has 2 users; it is recomputed only "
                "in a fusion with a reduction",
                "refuse %3 -> %4: arithmetic producer add %3 has 2 users, not all of which fuse "
                "it; it is materialized, so it is not also recomputed"});
}

// Plain arithmetic is duplicated only when that moves no more bytes than
// materializing it, every user fuses it, and it is not a graph output.
TEST(FusionTest, ArithmeticDuplicationBounds) {
  Graph g = ParseOrDie(R"(graph g(%p0: f32[64], %p1: f32[64]) {
  %0 = f32[64] parameter(0)
  %1 = f32[64] parameter(1)
  %2 = f32[64] add(%0, %1)
  ROOT (%2)
})");
  const Node& add = g.node(2);
  DuplicationFacts f;
  f.all_users_fuse = true;
  f.into_reduction = true;
  f.read_bytes = 2 * 64 * 4;  // two operands of the result's size
  // (users - 1) * 512 <= (users + 1) * 256: up to 3 users.
  f.num_users = 3;
  EXPECT_TRUE(ShouldDuplicate(add, f).ok);
  f.num_users = 4;
  EXPECT_EQ(ShouldDuplicate(add, f).reason,
            "arithmetic producer add %2 has 4 users; its copies would read 2048 bytes, more "
            "than materializing it moves (1792)");
  f.num_users = 2;
  f.all_users_fuse = false;
  EXPECT_EQ(ShouldDuplicate(add, f).reason,
            "arithmetic producer add %2 has 2 users, not all of which fuse it; it is "
            "materialized, so it is not also recomputed");
  f.all_users_fuse = true;
  f.is_output = true;
  EXPECT_EQ(ShouldDuplicate(add, f).reason,
            "arithmetic producer add %2 is a graph output (and has 2 users); it is "
            "materialized, so it is not also recomputed");
  f.is_output = false;
  f.evaluations_per_element = 4;
  EXPECT_EQ(ShouldDuplicate(add, f).reason,
            "arithmetic producer add %2 has 2 users; a broadcast would evaluate it 4 times per "
            "element");
  f.evaluations_per_element = 1;
  f.into_reduction = false;
  EXPECT_EQ(ShouldDuplicate(add, f).reason,
            "arithmetic producer add %2 has 2 users; it is recomputed only in a fusion with a "
            "reduction");
  f.into_reduction = true;
  f.num_users = kMaxDuplicateUsers + 1;
  f.read_bytes = 64 * 4;
  EXPECT_EQ(ShouldDuplicate(add, f).reason,
            "arithmetic producer add %2 has 9 users, more than the duplication bound 8");
}

TEST(FusionTest, LegalityAndCostPredicates) {
  Graph g = ParseOrDie(R"(graph g(%p0: f32[4], %p1: c64[4]) {
  %0 = f32[4] parameter(0)
  %1 = c64[4] parameter(1)
  %2 = c64[4] reverse(%1), dimensions={0}
  %3 = f32[4] exponential(%0)
  %4 = f32[] reduce(%3), dimensions={0}, to_apply=add
  %5 = s64[] argmax(%0), dimension=0
  ROOT (%2, %4, %5)
})");
  EXPECT_EQ(IsFusibleNode(g.node(2)).reason, "complex values stay outside fusions");
  EXPECT_TRUE(IsFusibleNode(g.node(3)).ok);
  EXPECT_TRUE(IsFusibleNode(g.node(4)).ok);
  EXPECT_EQ(IsFusibleNode(g.node(5)).reason, "argmax stays outside fusions");
  EXPECT_EQ(CanFuse(g, 0, 3).reason, "parameter is a fusion input");
  EXPECT_EQ(CanFuse(g, 3, 4).ok, true);
  EXPECT_EQ(ElementCost(g.node(3)), 20);
  EXPECT_TRUE(IsExpensive(g.node(4)));
  EXPECT_FALSE(ShouldDuplicate(g.node(3), DuplicationFacts{2}).ok);
  EXPECT_TRUE(CanRecompute(g.node(3), 4).ok);
  EXPECT_FALSE(CanRecompute(g.node(3), 5).ok);
  // Row fusions: once per pass over the row.
  EXPECT_TRUE(CanRecompute(g.node(3), 8, 2).ok);
  EXPECT_FALSE(CanRecompute(g.node(3), 9, 2).ok);
  const FusionAnalysis with4 = AnalyzeFusion(g, {3, 4}, {4});
  EXPECT_EQ(with4.kind, FusionKind::kInput);
  EXPECT_TRUE(CanFuseReduceResult(g, 4, {}, {}, with4).ok);
  // A second reduce of a full reduction (no outer dim) is not a row fusion.
  EXPECT_EQ(CanFuseReduceResult(g, 4, {}, {4}, with4).reason,
            "the fusion already contains reduce %4 (one reduction per input fusion); no row "
            "fusion: reduce %4 reduces dims {0} of f32[4]; a row fusion needs reductions over "
            "the innermost dims, keeping at least one");
}

TEST(FusionTest, CpuPipelineRunsDefaultPassesThenFusion) {
  Pipeline p = CpuPipeline();
  std::vector<std::string> want = DefaultPipeline().pass_names();
  want.push_back("fusion");
  EXPECT_EQ(p.pass_names(), want);
  for (const std::string& name : DefaultPipeline().pass_names()) EXPECT_NE(name, "fusion");
  Graph g = ParseOrDie(R"(graph g(%p0: f32[8]) {
  %0 = f32[8] parameter(0)
  %1 = f32[8] negate(%0)
  %2 = f32[8] negate(%1)
  %3 = f32[8] exponential(%2)
  %4 = f32[8] exponential(%2)
  %5 = f32[8] add(%3, %4)
  ROOT (%5)
})");
  const Graph before = g;
  StatusOr<bool> changed = p.Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  // neg(neg(x)) simplifies, cse merges the exps, and one kernel remains.
  int fusions = 0;
  for (const Node& n : g.nodes()) fusions += n.op == OpKind::kFusion;
  EXPECT_EQ(fusions, 1) << PrintGraph(g);
  EXPECT_EQ(g.num_nodes(), 2) << PrintGraph(g);
  ExpectSameValues(before, g);
}

TEST(FusionTest, ACheckpointRecomputeFusesApartFromTheForward) {
  // Forward t = tanh(x * w); backward anchor a = slice(g * g); recompute
  // tanh(gte(barrier(x, a)) * w) * (g * g). The forward and the recompute are
  // separate fusions; the barrier and its get-tuple-elements stay outside every
  // fusion, and the recompute's fusion reads the barrier's output, not x.
  ExpectFusion(
      R"(graph g(%p0: f32[4,8], %p1: f32[4,8], %p2: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] parameter(2)
  %3 = f32[4,8] multiply(%0, %1)
  %4 = f32[4,8] tanh(%3)
  %5 = f32[4,8] multiply(%2, %2)
  %6 = f32[1,1] slice(%5), start={0,0}, limit={1,1}, stride={1,1}
  %7 = (f32[4,8], f32[1,1]) optimization-barrier(%0, %6)
  %8 = f32[4,8] get-tuple-element(%7), index=0
  %9 = f32[4,8] multiply(%8, %1)
  %10 = f32[4,8] tanh(%9)
  %11 = f32[4,8] multiply(%5, %10)
  ROOT (%4, %11)
}
)",
      R"(graph g(%p0: f32[4,8], %p1: f32[4,8], %p2: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] parameter(2)
  %3 = f32[4,8] fusion(%0, %1), calls=fused_mul_tanh_0, kind=loop
  %4 = f32[4,8] fusion(%2), calls=fused_mul_1, kind=loop
  %5 = f32[1,1] fusion(%4), calls=fused_slice_2, kind=loop
  %6 = (f32[4,8], f32[1,1]) optimization-barrier(%0, %5)
  %7 = f32[4,8] get-tuple-element(%6), index=0
  %8 = f32[4,8] fusion(%7, %1, %4), calls=fused_mul_tanh_3, kind=loop
  ROOT (%3, %8)
}

graph fused_mul_tanh_0(%p0: f32[4,8], %p1: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] multiply(%0, %1)
  %3 = f32[4,8] tanh(%2)
  ROOT (%3)
}

graph fused_mul_1(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] multiply(%0, %0)
  ROOT (%1)
}

graph fused_slice_2(%p0: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[1,1] slice(%0), limit={1,1}, start={0,0}, stride={1,1}
  ROOT (%1)
}

graph fused_mul_tanh_3(%p0: f32[4,8], %p1: f32[4,8], %p2: f32[4,8]) {
  %0 = f32[4,8] parameter(0)
  %1 = f32[4,8] parameter(1)
  %2 = f32[4,8] parameter(2)
  %3 = f32[4,8] multiply(%0, %1)
  %4 = f32[4,8] tanh(%3)
  %5 = f32[4,8] multiply(%2, %4)
  ROOT (%5)
}
)",
      {"refuse %8 -> %9: nothing fuses across an optimization-barrier (optimization-barrier %7)",
       "refuse %5 -> %11: arithmetic producer multiply %5 has 2 users; it is recomputed only in a "
       "fusion with a reduction",
       "refuse %5 -> %6: arithmetic producer multiply %5 has 2 users; it is recomputed only in a "
       "fusion with a reduction"});
}

}  // namespace
}  // namespace ember::passes
