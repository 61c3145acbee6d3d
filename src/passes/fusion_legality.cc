#include "passes/fusion_legality.h"

#include <sstream>

namespace ember::passes {
namespace {

std::string Label(const Node& n) {
  std::ostringstream os;
  os << OpName(n.op) << " %" << n.id;
  return os.str();
}

}  // namespace

bool IsLoopFusibleOp(OpKind op) {
  if (IsElementwise(op)) return true;  // includes compare, convert, select, clamp
  switch (op) {
    case OpKind::kBroadcastInDim:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kSlice:
    case OpKind::kReverse:
    case OpKind::kPad:
    case OpKind::kConcatenate:
    case OpKind::kIota:
    case OpKind::kConstant:
      return true;
    default:
      return false;
  }
}

FusionDecision IsFusibleNode(const Node& n) {
  if (IsRng(n.op)) return FusionDecision::No("rng ops are never moved or merged");
  if (n.op == OpKind::kOptimizationBarrier)
    return FusionDecision::No("nothing fuses across an optimization-barrier");
  if (n.op == OpKind::kParameter) return FusionDecision::No("parameter is a fusion input");
  if (n.op == OpKind::kFusion) return FusionDecision::No("already a fusion");
  if (OpCategory(n.op) == OpCategoryKind::kContraction || n.op == OpKind::kCustomCall)
    return FusionDecision::No(std::string(OpName(n.op)) + " stays extern");
  if (!IsLoopFusibleOp(n.op) && n.op != OpKind::kReduce)
    return FusionDecision::No(std::string(OpName(n.op)) + " stays outside fusions");
  if (n.shape.is_tuple()) return FusionDecision::No("tuple-shaped values stay outside fusions");
  if (IsComplex(n.shape.dtype())) return FusionDecision::No("complex values stay outside fusions");
  return FusionDecision::Yes();
}

FusionDecision CanFuse(const Graph& g, NodeId producer, NodeId consumer) {
  const Node& p = g.node(producer);
  const Node& c = g.node(consumer);
  // A get-tuple-element of a barrier is the barrier's far side.
  if (p.op == OpKind::kGetTupleElement && !p.operands.empty() &&
      g.node(p.operands[0]).op == OpKind::kOptimizationBarrier)
    return FusionDecision::No("nothing fuses across an optimization-barrier (" +
                              Label(g.node(p.operands[0])) + ")");
  FusionDecision pd = IsFusibleNode(p);
  if (!pd) return pd;
  FusionDecision cd = IsFusibleNode(c);
  if (!cd) return FusionDecision::No("consumer " + Label(c) + ": " + cd.reason);
  return FusionDecision::Yes();
}

}  // namespace ember::passes
