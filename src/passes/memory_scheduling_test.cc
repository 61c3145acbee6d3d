// memory-scheduling: the list scheduler lowers the model's peak and what a compiled run
// allocates, keeps values bit for bit, keeps rng ops and custom-calls in order, moves
// nothing across an optimization-barrier, and leaves a graph that does not gain alone.
#include "passes/memory_scheduling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "ember/ir/attributes.h"
#include "ember/runtime/buffer.h"
#include "ember/runtime/executable.h"
#include "passes/pass_test_util.h"

namespace ember::passes {
namespace {

// Three big values each reduced to a small one: in the given order all three are live
// at once; scheduled, each is reduced (and freed) before the next is made.
constexpr const char* kThreeBranches = R"(
graph main(%p0: f32[64,64]) {
  %x = f32[64,64] parameter(0)
  %a = f32[64,64] exponential(%x)
  %b = f32[64,64] tanh(%x)
  %c = f32[64,64] negate(%x)
  %ra = f32[64] reduce(%a), dimensions={0}, to_apply=add
  %rb = f32[64] reduce(%b), dimensions={0}, to_apply=add
  %rc = f32[64] reduce(%c), dimensions={0}, to_apply=maximum
  ROOT (%ra, %rb, %rc)
})";

int Position(const Graph& g, OpKind op, int nth = 0) {
  for (const Node& n : g.nodes()) {
    if (n.op == op && nth-- == 0) return n.id;
  }
  return -1;
}

TEST(MemoryScheduling, ReducesEachBranchBeforeMakingTheNext) {
  const int64_t big = 64 * 64 * 4, small = 64 * 4;
  Graph g = ParseOrDie(kThreeBranches);
  const Graph before = g;
  EXPECT_EQ(MemoryPeakBytes(g), 3 * big + small);
  MemorySchedulingPass pass;
  StatusOr<bool> changed = pass.Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(Verify(g).ok());
  EXPECT_EQ(pass.peak_before(), 3 * big + small);
  EXPECT_EQ(pass.peak_after(), big + 3 * small);
  EXPECT_EQ(MemoryPeakBytes(g), big + 3 * small);
  // exp, its reduce, tanh, its reduce, negate, its reduce.
  std::vector<OpKind> ops;
  for (const Node& n : g.nodes()) ops.push_back(n.op);
  EXPECT_EQ(ops,
            (std::vector<OpKind>{OpKind::kParameter, OpKind::kExp, OpKind::kReduce, OpKind::kTanh,
                                 OpKind::kReduce, OpKind::kNegate, OpKind::kReduce}))
      << PrintGraph(g);
  ExpectSameValues(before, g);
  // Scheduled again: nothing left to gain.
  StatusOr<bool> again = pass.Run(g);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
}

TEST(MemoryScheduling, LeavesAGraphThatDoesNotGainAlone) {
  MemorySchedulingPass pass;
  ExpectUnchanged(pass, R"(
graph main(%p0: f32[8], %p1: f32[8]) {
  %x = f32[8] parameter(0)
  %y = f32[8] parameter(1)
  %a = f32[8] exponential(%x)
  %b = f32[8] add(%a, %y)
  %c = f32[8] tanh(%b)
  ROOT (%c, %a)
})");
}

TEST(MemoryScheduling, KeepsRngOpsAndCustomCallsInTheirOrder) {
  // Scheduling by memory alone would run the small draw %r2 (and its reader) first.
  Graph g = ParseOrDie(R"(
graph main(%p0: u64[], %p1: u64[], %p2: f32[4]) {
  %s = u64[] parameter(0)
  %o = u64[] parameter(1)
  %x = f32[4] parameter(2)
  %r1 = f32[256] rng-uniform(%s, %o), stream=0
  %c1 = f32[4] custom-call(%x), call_target_name="my.big"
  %r2 = f32[4] rng-uniform(%s, %o), stream=1
  %c2 = f32[4] custom-call(%r2), call_target_name="my.small"
  %m1 = f32[] reduce(%r1), dimensions={0}, to_apply=add
  %m2 = f32[] reduce(%c2), dimensions={0}, to_apply=add
  %m3 = f32[] reduce(%c1), dimensions={0}, to_apply=add
  ROOT (%m1, %m2, %m3)
})");
  MemorySchedulingPass pass;
  StatusOr<bool> changed = pass.Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  ASSERT_TRUE(Verify(g).ok());
  std::vector<std::string> order;
  for (const Node& n : g.nodes()) {
    if (IsRng(n.op)) order.push_back("rng" + std::to_string(attr::Stream(n)));
    if (n.op == OpKind::kCustomCall) order.push_back(attr::CallTargetName(n));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"rng0", "my.big", "rng1", "my.small"}))
      << PrintGraph(g);
}

TEST(MemoryScheduling, MovesNothingAcrossAnOptimizationBarrier) {
  // Before the barrier: the three branches of kThreeBranches on %x; after it: the same
  // on the barrier's element. Each side is scheduled on its own.
  Graph g = ParseOrDie(R"(
graph main(%p0: f32[64,64], %p1: f32[2]) {
  %x = f32[64,64] parameter(0)
  %g = f32[2] parameter(1)
  %a = f32[64,64] exponential(%x)
  %b = f32[64,64] tanh(%x)
  %ra = f32[64] reduce(%a), dimensions={0}, to_apply=add
  %rb = f32[64] reduce(%b), dimensions={0}, to_apply=add
  %t = (f32[64,64], f32[2]) optimization-barrier(%x, %g)
  %xr = f32[64,64] get-tuple-element(%t), index=0
  %c = f32[64,64] exponential(%xr)
  %d = f32[64,64] tanh(%xr)
  %rc = f32[64] reduce(%c), dimensions={0}, to_apply=add
  %rd = f32[64] reduce(%d), dimensions={0}, to_apply=add
  %late = f32[64] add(%ra, %rd)
  ROOT (%late, %rb, %rc)
})");
  const Graph before = g;
  MemorySchedulingPass pass;
  StatusOr<bool> changed = pass.Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(Verify(g).ok());
  const int barrier = Position(g, OpKind::kOptimizationBarrier);
  ASSERT_GE(barrier, 0);
  // Before it: the parameters, two unaries and two reduces; after it: the rest.
  for (const Node& n : g.nodes()) {
    if (n.id < barrier) {
      EXPECT_TRUE(n.op == OpKind::kParameter || n.op == OpKind::kExp || n.op == OpKind::kTanh ||
                  n.op == OpKind::kReduce)
          << PrintGraph(g);
      for (NodeId op : n.operands) {
        EXPECT_NE(g.node(op).op, OpKind::kGetTupleElement) << PrintGraph(g);
      }
    }
  }
  EXPECT_EQ(Position(g, OpKind::kReduce, 1), barrier - 1) << PrintGraph(g);
  // Each side reduces its first branch before making its second.
  EXPECT_LT(Position(g, OpKind::kReduce, 0), Position(g, OpKind::kTanh, 0)) << PrintGraph(g);
  EXPECT_LT(Position(g, OpKind::kReduce, 2), Position(g, OpKind::kTanh, 1)) << PrintGraph(g);
  ExpectSameValues(before, g);
}

TEST(MemoryScheduling, EveryOrderIsTopologicalAndKeepsValuesOnRandomGraphs) {
  int changed_graphs = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    std::mt19937_64 rng(seed);
    StatusOr<Graph> made = fuzz::GenerateRandomGraph(rng);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    Graph g = *made;
    MemorySchedulingPass pass;
    StatusOr<bool> changed = pass.Run(g);
    ASSERT_TRUE(changed.ok()) << "seed " << seed << ": " << changed.status().ToString();
    ASSERT_TRUE(Verify(g).ok()) << "seed " << seed;
    EXPECT_LE(pass.peak_after(), pass.peak_before()) << "seed " << seed;
    EXPECT_EQ(MemoryPeakBytes(g), pass.peak_after()) << "seed " << seed;
    std::vector<NodeId> order = MemoryAwareOrder(*made);
    ASSERT_EQ(static_cast<int>(order.size()), made->num_nodes());
    std::vector<int> pos(order.size(), -1);
    for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int>(i);
    for (const Node& n : made->nodes()) {
      for (NodeId op : n.operands) EXPECT_LT(pos[op], pos[n.id]) << "seed " << seed;
    }
    if (*changed) {
      ++changed_graphs;
      ExpectSameValues(*made, g, 2);
    }
  }
  EXPECT_GT(changed_graphs, 0);
}

// Compile runs it (EMBER_MEMORY_SCHEDULING=1): the plan's peak and what a run
// allocates go down, the values stay. Three products of 256x256 f32 (256 KiB each, run as
// extern steps, so fusion cannot merge them with their reduces; horizontal fusion, which
// would defer the reduces to run as one kernel after the last product, stops deferring
// the last reader of more than kMaxDeferredFreeBytes, compile.cc).
TEST(MemoryScheduling, LowersTheCompiledPlanAndTheRunsPeak) {
  Graph g = ParseOrDie(R"(
graph main(%p0: f32[256,256], %p1: f32[256,256], %p2: f32[256,256], %p3: f32[256,256]) {
  %x = f32[256,256] parameter(0)
  %w1 = f32[256,256] parameter(1)
  %w2 = f32[256,256] parameter(2)
  %w3 = f32[256,256] parameter(3)
  %a = f32[256,256] dot-general(%x, %w1), lhs_batch_dims={}, lhs_contracting_dims={1}, rhs_batch_dims={}, rhs_contracting_dims={0}
  %b = f32[256,256] dot-general(%x, %w2), lhs_batch_dims={}, lhs_contracting_dims={1}, rhs_batch_dims={}, rhs_contracting_dims={0}
  %c = f32[256,256] dot-general(%x, %w3), lhs_batch_dims={}, lhs_contracting_dims={1}, rhs_batch_dims={}, rhs_contracting_dims={0}
  %ra = f32[256] reduce(%a), dimensions={0}, to_apply=add
  %rb = f32[256] reduce(%b), dimensions={0}, to_apply=maximum
  %rc = f32[256] reduce(%c), dimensions={1}, to_apply=add
  ROOT (%ra, %rb, %rc)
})");
  const int64_t big = 256 * 256 * 4;
  std::mt19937_64 rng(5);
  std::vector<BufferRef> args;
  for (const Literal& l : fuzz::RandomArguments(g, rng)) args.push_back(Buffer::FromLiteral(l));
  auto run = [&](bool schedule, MemoryPlan* plan, int64_t* peak) {
    CompileOptions o;
    o.backend = Backend::kCpu;
    o.optimize = true;
    if (schedule) {
      setenv("EMBER_MEMORY_SCHEDULING", "1", 1);
    } else {
      unsetenv("EMBER_MEMORY_SCHEDULING");
    }
    auto exe = Compile(g, o);
    unsetenv("EMBER_MEMORY_SCHEDULING");
    EXPECT_TRUE(exe.ok()) << exe.status().ToString();
    *plan = exe->memory_plan();
    const int64_t start = GetBufferStats().bytes_in_use;
    ResetPeakBufferBytes();
    auto out = exe->Run(args);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    *peak = GetBufferStats().peak_bytes_in_use - start;
    std::vector<Literal> lits;
    for (const BufferRef& b : *out) lits.push_back(b->literal());
    return lits;
  };
  MemoryPlan unscheduled_plan, scheduled_plan;
  int64_t unscheduled_peak = 0, scheduled_peak = 0;
  std::vector<Literal> want = run(false, &unscheduled_plan, &unscheduled_peak);
  std::vector<Literal> got = run(true, &scheduled_plan, &scheduled_peak);
  EXPECT_GE(unscheduled_plan.peak_bytes, 3 * big);
  EXPECT_LT(scheduled_plan.peak_bytes, 2 * big);
  EXPECT_GE(unscheduled_peak, 3 * big);
  EXPECT_LT(scheduled_peak, 2 * big);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    std::string why;
    EXPECT_TRUE(fuzz::BitIdentical(want[i], got[i], &why)) << "output " << i << ": " << why;
  }
}

}  // namespace
}  // namespace ember::passes
