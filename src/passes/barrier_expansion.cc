#include "passes/barrier_expansion.h"

#include <vector>

#include "ember/ir/attributes.h"
#include "passes/rewriter.h"

namespace ember::passes {

StatusOr<bool> BarrierExpansionPass::Run(Graph& g) {
  // A barrier is kept when anything but a get-tuple-element reads it, or when one
  // of its elements is a graph output (that output would become an argument).
  std::vector<bool> keep(g.num_nodes(), false);
  for (const Node& n : g.nodes()) {
    if (n.op == OpKind::kGetTupleElement) continue;
    for (NodeId o : n.operands) keep[o] = true;
  }
  for (NodeId o : g.outputs()) {
    keep[o] = true;
    if (g.node(o).op == OpKind::kGetTupleElement) keep[g.node(o).operands[0]] = true;
  }
  return RewriteGraph(g, [&](const Node& n, Rewriter& rw) -> StatusOr<NodeId> {
    if (n.op == OpKind::kOptimizationBarrier && !keep[n.id]) return kDropNode;
    if (n.op != OpKind::kGetTupleElement) return kCopyNode;
    const Node& t = rw.old_graph().node(n.operands[0]);
    if (t.op != OpKind::kOptimizationBarrier || keep[t.id]) return kCopyNode;
    const int64_t i = attr::Index(n, -1);
    if (i < 0 || i >= static_cast<int64_t>(t.operands.size())) return kCopyNode;
    return rw.Map(t.operands[i]);
  });
}

}  // namespace ember::passes
