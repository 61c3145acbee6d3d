#include "ember/ir/kernel_name.h"

#include <algorithm>

namespace ember {

namespace {

constexpr size_t kMaxOps = 6;

// Adds the short name of `op` unless it is left out or already there.
void Add(OpKind op, std::vector<std::string_view>* ops, bool* more) {
  if (op == OpKind::kParameter || op == OpKind::kConstant || op == OpKind::kTuple ||
      op == OpKind::kGetTupleElement)
    return;
  const std::string_view s = ShortOpName(op);
  if (std::find(ops->begin(), ops->end(), s) != ops->end()) return;
  if (ops->size() == kMaxOps) {
    *more = true;
    return;
  }
  ops->push_back(s);
}

std::string Join(const std::vector<std::string_view>& ops, bool more, int n) {
  std::string name = "fused";
  for (std::string_view s : ops) name.append("_").append(s);
  if (ops.empty()) name += "_copy";
  if (more) name += "_etc";
  return name + "_" + std::to_string(n);
}

}  // namespace

std::string KernelName(const Graph& g, const std::vector<NodeId>& nodes, int n) {
  std::vector<std::string_view> ops;
  bool more = false;
  for (NodeId id : nodes) Add(g.node(id).op, &ops, &more);
  return Join(ops, more, n);
}

std::string KernelName(const Graph& g, int n) { return KernelName({&g}, n); }

std::string KernelName(const std::vector<const Graph*>& graphs, int n) {
  std::vector<std::string_view> ops;
  bool more = false;
  for (const Graph* g : graphs)
    for (const Node& node : g->nodes()) Add(node.op, &ops, &more);
  return Join(ops, more, n);
}

}  // namespace ember
