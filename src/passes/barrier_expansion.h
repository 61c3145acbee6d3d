// barrier-expansion: gives the runtime a free optimization-barrier.
//
// Every get-tuple-element(optimization-barrier(x0, ..., xn), i) becomes xi; a
// barrier left without users is removed. It runs once, in Compile, after the
// optimization pipeline (CompileOptions::optimize; without it a graph runs as
// given) (never inside it: a later CSE round would then merge
// what the barrier kept apart) and before the graph is partitioned into steps,
// so the barrier costs no copy at run time. The order it imposed survives:
// nodes keep their positions, and the runtime runs steps in node order (its
// horizontal fusion only moves fusions later, never before a value they
// read), so a computation that read the barrier's outputs still runs after
// every barrier operand (an activation checkpoint's recompute after the
// gradient it was anchored to). A barrier read whole (a custom-call, a graph
// output) or one of whose elements is a graph output (which would otherwise
// come back as the caller's own argument buffer) is kept.
#pragma once

#include "ember/passes/pass.h"

namespace ember::passes {

class BarrierExpansionPass : public Pass {
 public:
  std::string name() const override { return "barrier-expansion"; }
  StatusOr<bool> Run(Graph& g) override;
};

}  // namespace ember::passes
