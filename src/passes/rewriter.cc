#include "passes/rewriter.h"

#include <utility>

namespace ember::passes {

Rewriter::Rewriter(const Graph& old)
    : old_(old), builder_(old.name()), map_(old.num_nodes(), kInvalidNode) {}

std::vector<NodeId> Rewriter::MappedOperands(const Node& old_node) const {
  std::vector<NodeId> ops;
  ops.reserve(old_node.operands.size());
  for (NodeId o : old_node.operands) ops.push_back(map_[o]);
  return ops;
}

const Node& Rewriter::Operand(const Node& old_node, int i) const {
  return builder_.node(map_[old_node.operands[i]]);
}

NodeId Rewriter::Copy(const Node& old_node) {
  NodeId id = builder_.AddNodeLike(old_node, MappedOperands(old_node));
  if (old_node.id == current_) last_copy_of_current_ = id;
  return id;
}

StatusOr<bool> RewriteGraph(Graph& g, const RewriteFn& fn) {
  Rewriter rw(g);
  bool changed = false;
  for (const Node& n : g.nodes()) {
    rw.current_ = n.id;
    rw.last_copy_of_current_ = kInvalidNode;
    EMBER_ASSIGN_OR_RETURN(NodeId result, fn(n, rw));
    if (!rw.builder_.status().ok()) return rw.builder_.status();
    if (result == kDropNode) {
      if (n.op == OpKind::kParameter) {
        return EMBER_INTERNAL_ERROR("rewrite: parameter %", n.id, " may not be dropped");
      }
      changed = true;
      continue;
    }
    if (result == kCopyNode) {
      for (NodeId o : n.operands) {
        if (rw.map_[o] < 0) {
          return EMBER_INTERNAL_ERROR("rewrite: operand %", o, " of kept node %", n.id, " (",
                                      OpName(n.op), ") was dropped");
        }
      }
      result = rw.Copy(n);
      if (!rw.builder_.status().ok()) return rw.builder_.status();
    } else if (result != rw.last_copy_of_current_) {
      if (result < 0 || result >= rw.builder_.num_nodes()) {
        return EMBER_INTERNAL_ERROR("rewrite: bad replacement id ", result, " for %", n.id);
      }
      if (n.op == OpKind::kParameter) {
        return EMBER_INTERNAL_ERROR("rewrite: parameter %", n.id, " may not be replaced");
      }
      const Shape& s = rw.builder_.shape(result);
      if (s != n.shape) {
        return EMBER_INTERNAL_ERROR("rewrite: replacement of %", n.id, " (", OpName(n.op),
                                    ") has shape ", s.ToString(), ", expected ",
                                    n.shape.ToString());
      }
      changed = true;
    }
    rw.map_[n.id] = result;
  }
  if (!changed) return false;

  std::vector<NodeId> outputs;
  outputs.reserve(g.outputs().size());
  for (NodeId o : g.outputs()) {
    if (rw.map_[o] < 0) {
      return EMBER_INTERNAL_ERROR("rewrite: output node %", o, " was dropped");
    }
    outputs.push_back(rw.map_[o]);
  }
  rw.builder_.SetOutputs(std::move(outputs));
  for (const auto& [out, param] : g.aliases()) rw.builder_.SetAlias(out, param);
  EMBER_ASSIGN_OR_RETURN(Graph rebuilt, rw.builder_.Build());
  g = std::move(rebuilt);
  return true;
}

}  // namespace ember::passes
