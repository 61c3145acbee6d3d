#include "passes/dce.h"

#include <vector>

#include "passes/rewriter.h"

namespace ember::passes {

StatusOr<bool> DcePass::Run(Graph& g) {
  // Nodes are topologically ordered, so one backward sweep marks liveness.
  std::vector<bool> live(g.num_nodes(), false);
  for (NodeId o : g.outputs()) live[o] = true;
  for (NodeId id = g.num_nodes() - 1; id >= 0; --id) {
    const Node& n = g.node(id);
    if (n.op == OpKind::kParameter) live[id] = true;
    if (!live[id]) continue;
    for (NodeId o : n.operands) live[o] = true;
  }
  return RewriteGraph(g, [&](const Node& n, Rewriter&) -> StatusOr<NodeId> {
    return live[n.id] ? kCopyNode : kDropNode;
  });
}

}  // namespace ember::passes
