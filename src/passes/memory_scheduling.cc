// The memory-aware list scheduler (see memory_scheduling.h).
#include "passes/memory_scheduling.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "ember/ir/builder.h"
#include "passes/memory_model.h"

namespace ember::passes {
namespace {

// Ops whose relative order the scheduler keeps.
bool Ordered(OpKind op) { return IsRng(op) || op == OpKind::kCustomCall; }

std::vector<NodeId> Identity(int n) {
  std::vector<NodeId> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  return order;
}

std::vector<NodeId> ListSchedule(const Graph& g, const MemoryModel& m) {
  const int n = g.num_nodes();
  // Successors and pending predecessor counts: distinct operands, plus the previous
  // ordered op for an ordered op.
  std::vector<std::vector<NodeId>> succ(n);
  std::vector<int> pending(n, 0);
  NodeId last_ordered = kInvalidNode;
  for (const Node& node : g.nodes()) {
    std::vector<NodeId> preds = node.operands;
    if (Ordered(node.op)) {
      if (last_ordered != kInvalidNode) preds.push_back(last_ordered);
      last_ordered = node.id;
    }
    std::sort(preds.begin(), preds.end());
    preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
    pending[node.id] = static_cast<int>(preds.size());
    for (NodeId p : preds) succ[p].push_back(node.id);
  }
  // Segments: the nodes between two optimization-barriers; each barrier closes its own.
  std::vector<int> segment(n, 0);
  std::vector<NodeId> closing;  // segment -> its barrier (kInvalidNode for the last one)
  for (const Node& node : g.nodes()) {
    segment[node.id] = static_cast<int>(closing.size());
    if (node.op == OpKind::kOptimizationBarrier) closing.push_back(node.id);
  }
  closing.push_back(kInvalidNode);

  std::vector<int> remaining(n);
  for (int r = 0; r < n; ++r) remaining[r] = static_cast<int>(m.readers[r].size());
  std::vector<bool> scheduled(n, false);
  // Ready nodes by (−gain, position): the largest gain first, then the earliest node.
  constexpr int64_t kFree = std::numeric_limits<int64_t>::max() / 4;
  std::vector<int64_t> gain(n, 0);
  std::set<std::pair<int64_t, NodeId>> ready;
  auto gain_of = [&](NodeId v) {
    if (DefinesNoBuffer(g.node(v).op)) return kFree;
    int64_t gv = -m.bytes[v];
    for (NodeId r : m.reads[v]) {
      if (remaining[r] == 1 && !m.output[r]) gv += m.bytes[r];
    }
    return gv;
  };
  auto make_ready = [&](NodeId v) {
    gain[v] = gain_of(v);
    ready.insert({-gain[v], v});
  };
  std::vector<NodeId> order;
  order.reserve(n);
  auto schedule = [&](NodeId v, int seg) {
    scheduled[v] = true;
    order.push_back(v);
    for (NodeId r : m.reads[v]) {
      if (--remaining[r] != 1 || m.output[r]) continue;
      // Its last reader now frees it: raise that reader's gain if it is ready.
      for (NodeId u : m.readers[r]) {
        if (scheduled[u]) continue;
        auto it = ready.find({-gain[u], u});
        if (it != ready.end()) {
          ready.erase(it);
          gain[u] += m.bytes[r];
          ready.insert({-gain[u], u});
        }
        break;
      }
    }
    for (NodeId u : succ[v]) {
      if (--pending[u] == 0 && segment[u] == seg && u != closing[seg]) make_ready(u);
    }
  };
  std::vector<std::vector<NodeId>> members(closing.size());
  for (NodeId v = 0; v < n; ++v) members[segment[v]].push_back(v);
  for (int seg = 0; seg < static_cast<int>(closing.size()); ++seg) {
    for (NodeId v : members[seg]) {
      if (pending[v] == 0 && v != closing[seg]) make_ready(v);
    }
    while (!ready.empty()) {
      const NodeId v = ready.begin()->second;
      ready.erase(ready.begin());
      schedule(v, seg);
    }
    if (closing[seg] != kInvalidNode) schedule(closing[seg], seg);
  }
  return order;
}

}  // namespace

int64_t MemoryPeakBytes(const Graph& g, const std::vector<NodeId>& order) {
  return LiveBytesPeak(MemoryModel(g), order);
}

std::vector<NodeId> MemoryAwareOrder(const Graph& g) { return ListSchedule(g, MemoryModel(g)); }

StatusOr<bool> MemorySchedulingPass::Run(Graph& g) {
  const MemoryModel m(g);
  const std::vector<NodeId> given = Identity(g.num_nodes());
  const std::vector<NodeId> order = ListSchedule(g, m);
  peak_before_ = peak_after_ = LiveBytesPeak(m);
  if (order.size() != given.size()) {
    return EMBER_INTERNAL_ERROR("memory-scheduling scheduled ", order.size(), " of ", given.size(),
                                " nodes");
  }
  const int64_t scheduled_peak = LiveBytesPeak(m, order);
  if (scheduled_peak >= peak_before_ || order == given) return false;
  GraphBuilder b(g.name());
  std::vector<NodeId> map(g.num_nodes(), kInvalidNode);
  for (NodeId v : order) {
    const Node& node = g.node(v);
    std::vector<NodeId> ops;
    ops.reserve(node.operands.size());
    for (NodeId op : node.operands) ops.push_back(map[op]);
    map[v] = b.AddNodeLike(node, std::move(ops));
  }
  std::vector<NodeId> outputs;
  for (NodeId o : g.outputs()) outputs.push_back(map[o]);
  b.SetOutputs(std::move(outputs));
  for (const auto& [o, p] : g.aliases()) b.SetAlias(o, p);
  EMBER_ASSIGN_OR_RETURN(Graph scheduled, b.Build());
  g = std::move(scheduled);
  peak_after_ = scheduled_peak;
  return true;
}

}  // namespace ember::passes
