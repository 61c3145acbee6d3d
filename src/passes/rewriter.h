// Rewriter: the one helper every pass uses to rebuild a graph (nodes are
// immutable, so a pass builds a new Graph and assigns it to `g`).
//
// RewriteGraph walks the old graph's nodes in order. For each node it calls
// `fn(old_node, rw)`; the callback returns
//   - kCopyNode: copy the node as is (same op, attributes, literal, shape,
//     metadata) over its remapped operands;
//   - kDropNode: leave it out (only legal when nothing kept uses it; DCE);
//   - a NodeId of the new graph: the node's replacement. It must have the
//     old node's shape (checked: an internal error otherwise). The callback
//     may add new nodes through rw.builder() before returning.
// Parameter indices, the outputs and the output->parameter alias map are
// carried over (outputs remapped). The result is verified by the builder.
//
// `changed` is true iff some node was replaced or dropped; a callback that
// copies a node through rw.Copy() and returns that id counts as unchanged.
#pragma once

#include <functional>
#include <vector>

#include "ember/ir/builder.h"
#include "ember/ir/graph.h"
#include "ember/status.h"

namespace ember::passes {

inline constexpr NodeId kCopyNode = -2;
inline constexpr NodeId kDropNode = -3;

class Rewriter;
using RewriteFn = std::function<StatusOr<NodeId>(const Node& old_node, Rewriter& rw)>;

class Rewriter {
 public:
  explicit Rewriter(const Graph& old);

  const Graph& old_graph() const { return old_; }
  GraphBuilder& builder() { return builder_; }
  // The new-graph node that replaces old node `old_id` (kInvalidNode if it
  // was dropped or is not visited yet).
  NodeId Map(NodeId old_id) const { return map_[old_id]; }
  // The new-graph ids of `old_node`'s operands.
  std::vector<NodeId> MappedOperands(const Node& old_node) const;
  // The new-graph node that operand i of `old_node` maps to (the operand
  // must not have been dropped).
  const Node& Operand(const Node& old_node, int i) const;
  // A node of the new graph.
  const Node& NewNode(NodeId id) const { return builder_.node(id); }
  // Adds a copy of `old_node` over its remapped operands; returns its new id.
  NodeId Copy(const Node& old_node);

 private:
  friend StatusOr<bool> RewriteGraph(Graph& g, const RewriteFn& fn);
  const Graph& old_;
  GraphBuilder builder_;
  std::vector<NodeId> map_;
  NodeId last_copy_of_current_ = kInvalidNode;
  NodeId current_ = kInvalidNode;
};

// Rebuilds `g` through `fn` (see above). On success assigns the new graph to
// `g` only if something changed and returns whether it did; on error `g` is
// left untouched.
StatusOr<bool> RewriteGraph(Graph& g, const RewriteFn& fn);

}  // namespace ember::passes
