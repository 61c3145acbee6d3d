// ember::optimization_barrier(Tensor[] inputs, Tensor[] anchors) -> Tensor[]
// (python/ember/checkpoint.py defines it): output i is inputs[i], read
// through one core optimization-barrier over inputs ++ anchors, so
//   * no pass merges, folds or moves a computation on an output with one on
//     the input it came from (activation checkpointing's recompute stays apart
//     from the saved forward when both are in one program), and
//   * the outputs exist only once every anchor is computed (the checkpoint
//     passes the incoming gradient: the recompute waits for the backward).
// Anchors produce no output. Any dtype (the barrier carries complex values).
#include "lowering/lower_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

LowerResult LowerBarrier(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(auto inputs, TensorListAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(auto anchors, TensorListAt(c, 1));
  if (c.outputs.size() != inputs.size())
    return InvalidArgument(c.op, ": expected ", inputs.size(), " outputs, got ", c.outputs.size());
  std::vector<NodeId> operands;
  for (const auto& list : {inputs, anchors}) {
    for (const auto& t : list) {
      if (!t) return InvalidArgument(c.op, ": absent tensor in a list");
      operands.push_back(t->value);
    }
  }
  if (inputs.empty()) return std::vector<NodeId>{};
  NodeId bar = b.OptimizationBarrier(std::move(operands));
  std::vector<NodeId> outs;
  for (size_t i = 0; i < inputs.size(); ++i)
    outs.push_back(b.GetTupleElement(bar, static_cast<int64_t>(i)));
  return CheckOutputs(b, c, std::move(outs));
}

}  // namespace

void RegisterBarrier(LoweringTable& t) { t.Add("ember::optimization_barrier", LowerBarrier); }

}  // namespace ember::lowering
