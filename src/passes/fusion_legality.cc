#include "passes/fusion_legality.h"

#include <algorithm>
#include <sstream>

namespace ember::passes {
namespace {

std::string Label(const Node& n) {
  std::ostringstream os;
  os << OpName(n.op) << " %" << n.id;
  return os.str();
}

std::string DimsText(const std::vector<int64_t>& d) {
  std::string s = "{";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "}";
}

std::vector<int64_t> SortedReduceDims(const Node& n) {
  const auto& d = n.attrs.GetInts("dimensions");
  std::vector<int64_t> v(d.begin(), d.end());
  std::sort(v.begin(), v.end());
  return v;
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

FusionDecision CanRowFuse(const Graph& g, NodeId reduce, const std::vector<NodeId>& downstream,
                          const std::vector<NodeId>& existing) {
  const Node& r = g.node(reduce);
  const Shape& xs = g.node(r.operands[0]).shape;
  const std::vector<int64_t> dims = SortedReduceDims(r);
  const int rank = xs.rank();
  const int k = rank - static_cast<int>(dims.size());
  bool suffix = !dims.empty() && k >= 1;
  for (size_t i = 0; suffix && i < dims.size(); ++i)
    suffix = dims[i] == k + static_cast<int64_t>(i);
  std::ostringstream os;
  if (!suffix) {
    os << Label(r) << " reduces dims " << DimsText(dims) << " of " << xs.ToString()
       << "; a row fusion needs reductions over the innermost dims, keeping at least one";
    return FusionDecision::No(os.str());
  }
  for (NodeId e : existing) {
    const Node& en = g.node(e);
    const Shape& es = g.node(en.operands[0]).shape;
    if (es.dims() != xs.dims() || SortedReduceDims(en) != dims) {
      os << Label(r) << " (dims " << DimsText(dims) << " of " << xs.ToString() << ") and "
         << Label(en) << " (dims " << DimsText(SortedReduceDims(en)) << " of " << es.ToString()
         << ") reduce different rows";
      return FusionDecision::No(os.str());
    }
  }
  const std::vector<int64_t> full = xs.dims();
  const std::vector<int64_t> outer(full.begin(), full.begin() + k);
  std::vector<int64_t> canonical(k);
  for (int i = 0; i < k; ++i) canonical[i] = i;
  for (NodeId d : downstream) {
    const Node& n = g.node(d);
    if (n.op == OpKind::kReduce) continue;  // checked when it joined (same rows)
    if (n.op == OpKind::kBroadcastInDim && !n.shape.is_tuple()) {
      const auto& bd = n.attrs.GetInts("dimensions");
      if (g.node(n.operands[0]).shape.dims() == outer && n.shape.dims() == full &&
          std::vector<int64_t>(bd.begin(), bd.end()) == canonical)
        continue;
      os << Label(n) << " broadcasts a value computed from " << Label(r)
         << " other than back along the rows of " << xs.ToString() << " (dims "
         << DimsText(canonical) << ")";
      return FusionDecision::No(os.str());
    }
    if (!IsElementwise(n.op) || n.shape.is_tuple() ||
        (n.shape.dims() != full && n.shape.dims() != outer)) {
      os << Label(n) << " consumes " << Label(r) << "'s rows other than elementwise per row "
         << "(a row fusion allows elementwise ops of shape " << Shape(xs.dtype(), full).ToString()
         << " or " << Shape(xs.dtype(), outer).ToString() << " and broadcasts back)";
      return FusionDecision::No(os.str());
    }
  }
  return FusionDecision::Yes();
}

}  // namespace ember::passes
