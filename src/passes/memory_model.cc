// The passes' memory model (see memory_model.h).
#include "passes/memory_model.h"

#include <algorithm>

namespace ember::passes {

bool DefinesNoBuffer(OpKind op) {
  return op == OpKind::kParameter || op == OpKind::kTuple || op == OpKind::kGetTupleElement ||
         op == OpKind::kOptimizationBarrier;
}

MemoryModel::MemoryModel(const Graph& g) {
  const int n = g.num_nodes();
  bytes.assign(n, 0);
  roots.resize(n);
  reads.resize(n);
  readers.resize(n);
  output.assign(n, false);
  auto dedup = [](std::vector<NodeId>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  for (const Node& node : g.nodes()) {
    const bool own = !DefinesNoBuffer(node.op);
    if (own || node.op == OpKind::kParameter) {
      roots[node.id] = {node.id};
      if (own) bytes[node.id] = node.shape.byte_size();
    } else {
      std::vector<NodeId>& r = roots[node.id];
      for (NodeId op : node.operands) r.insert(r.end(), roots[op].begin(), roots[op].end());
      dedup(r);
    }
    if (!own) continue;
    std::vector<NodeId>& rd = reads[node.id];
    for (NodeId op : node.operands) rd.insert(rd.end(), roots[op].begin(), roots[op].end());
    dedup(rd);
    for (NodeId r : rd) readers[r].push_back(node.id);
  }
  for (NodeId o : g.outputs()) {
    for (NodeId r : roots[o]) output[r] = true;
  }
}

std::vector<int64_t> LiveBytesProfile(const MemoryModel& m, const std::vector<NodeId>& order,
                                      bool outputs) {
  const int n = static_cast<int>(m.bytes.size());
  std::vector<int> remaining(n);
  for (int r = 0; r < n; ++r) remaining[r] = static_cast<int>(m.readers[r].size());
  auto counted = [&](NodeId r) { return outputs || !m.output[r] ? m.bytes[r] : 0; };
  std::vector<int64_t> profile;
  profile.reserve(n);
  int64_t live = 0;
  for (int i = 0; i < n; ++i) {
    const NodeId v = order.empty() ? i : order[i];
    live += counted(v);
    profile.push_back(live);
    for (NodeId r : m.reads[v]) {
      if (--remaining[r] == 0 && !m.output[r]) live -= counted(r);
    }
    if (m.readers[v].empty() && !m.output[v]) live -= counted(v);
  }
  return profile;
}

int64_t LiveBytesPeak(const MemoryModel& m, const std::vector<NodeId>& order, bool outputs) {
  const std::vector<int64_t> p = LiveBytesProfile(m, order, outputs);
  return p.empty() ? 0 : *std::max_element(p.begin(), p.end());
}

}  // namespace ember::passes
