// f32 multiply-adds computed in f32 under a run-time check (f32_muladd.h).
#include "codegen/cpu/f32_muladd.h"

#include <algorithm>

namespace ember::codegen {
namespace {

// Per node of `g` (topological order): IsLoopInvariant.
std::vector<bool> InvariantNodes(const Graph& g) {
  std::vector<bool> inv(static_cast<size_t>(g.num_nodes()), false);
  for (const Node& n : g.nodes()) {
    bool v = !n.shape.is_tuple() && n.shape.rank() == 0;
    if (!v && (n.op == OpKind::kBroadcastInDim || n.op == OpKind::kReshape)) v = inv[n.operands[0]];
    if (!v && IsElementwise(n.op) && !n.operands.empty()) {
      v = std::all_of(n.operands.begin(), n.operands.end(), [&](NodeId o) { return inv[o]; });
    }
    inv[n.id] = v;
  }
  return inv;
}

// The f32 operand of `id` if it is convert<f64> of an f32 value, else kInvalidNode.
NodeId WidenedF32(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.op != OpKind::kConvert || n.shape.dtype() != DType::kF64) return kInvalidNode;
  const NodeId src = n.operands[0];
  return g.node(src).shape.dtype() == DType::kF32 ? src : kInvalidNode;
}

}  // namespace

bool IsLoopInvariant(const Graph& g, NodeId id) { return InvariantNodes(g)[id]; }

std::vector<F32MulAdd> FindF32MulAdds(const Graph& g, NodeId root) {
  return FindF32MulAdds(g, std::vector<NodeId>{root});
}

std::vector<F32MulAdd> FindF32MulAdds(const Graph& g, const std::vector<NodeId>& roots) {
  const std::vector<bool> inv = InvariantNodes(g);
  std::vector<bool> seen(static_cast<size_t>(g.num_nodes()), false);
  std::vector<NodeId> stack = roots;
  std::vector<F32MulAdd> found;
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    if (seen[id]) continue;
    seen[id] = true;
    const Node& n = g.node(id);
    if (n.op == OpKind::kReduce || n.op == OpKind::kScatter) continue;  // own phases
    for (NodeId o : n.operands) stack.push_back(o);
    // r = convert<f32>(add(multiply(convert<f64>(.), convert<f64>(.)), convert<f64>(z)))
    if (n.op != OpKind::kConvert || n.shape.dtype() != DType::kF32) continue;
    const Node& add = g.node(n.operands[0]);
    if (add.op != OpKind::kAdd || add.shape.dtype() != DType::kF64) continue;
    for (int pf = 0; pf < 2; ++pf) {  // pf: position of the product in the add
      const Node& mul = g.node(add.operands[pf]);
      const NodeId z = WidenedF32(g, add.operands[1 - pf]);
      if (mul.op != OpKind::kMultiply || z == kInvalidNode) continue;
      const NodeId a = WidenedF32(g, mul.operands[0]), b = WidenedF32(g, mul.operands[1]);
      if (a == kInvalidNode || b == kInvalidNode) continue;
      if (!inv[a] && !inv[b]) continue;
      F32MulAdd m;
      m.root = id;
      m.s_first = !inv[b];  // prefer the second factor as s (alpha's place)
      m.s = m.s_first ? a : b;
      m.x = m.s_first ? b : a;
      m.z = z;
      m.product_first = pf == 0;
      found.push_back(m);
      break;
    }
  }
  std::sort(found.begin(), found.end(),
            [](const F32MulAdd& l, const F32MulAdd& r) { return l.root < r.root; });
  return found;
}

}  // namespace ember::codegen
