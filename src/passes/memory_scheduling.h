// memory-scheduling: orders a graph's nodes to lower its peak live memory.
//
// The runtime runs a program's steps in node order (src/runtime/compile.cc), so the
// node order is the schedule, and with it how many intermediate buffers are live at
// once. This pass reorders the nodes with a list scheduler over the dataflow graph (the
// idea of XLA's memory-aware ListScheduler): it keeps a set of ready nodes (all
// operands scheduled) and schedules next the one that frees the most bytes net of the
// bytes it defines, ties to the earlier node of the given order. It then keeps
// whichever order, the given one or the scheduled one, has the lower peak under the
// same model, the given one on a tie (so a graph that does not gain is left as it is).
//
// The memory model is passes/memory_model.h's.
//
// Order it keeps (include/ember/passes/pass.h): rng ops and custom-calls run in their
// given relative order; nothing moves across an optimization-barrier (a barrier runs
// after every node before it and before every node after it), so an activation
// checkpoint's recompute stays after the gradient it was anchored to.
//
// It is not part of the pipelines: Compile runs it once after them, before
// barrier-expansion, when EMBER_MEMORY_SCHEDULING=1 (off by default until the whole
// test suite has run with it on; EMBER_SKIP_PASSES=memory-scheduling overrides it).
#pragma once

#include <cstdint>
#include <vector>

#include "ember/passes/pass.h"

namespace ember::passes {

class MemorySchedulingPass : public Pass {
 public:
  std::string name() const override { return "memory-scheduling"; }
  StatusOr<bool> Run(Graph& g) override;
  // Peaks of the last Run under the model: the given order and the kept one.
  int64_t peak_before() const { return peak_before_; }
  int64_t peak_after() const { return peak_after_; }

 private:
  int64_t peak_before_ = 0;
  int64_t peak_after_ = 0;
};

// The model's peak of running `g`'s nodes in `order` (a permutation of all node ids,
// operands first); with an empty `order`, the graph's own node order.
int64_t MemoryPeakBytes(const Graph& g, const std::vector<NodeId>& order = {});

// The list scheduler's order of all of `g`'s nodes (see above).
std::vector<NodeId> MemoryAwareOrder(const Graph& g);

}  // namespace ember::passes
