// Donation (donation.h).
#include "donation.h"

#include "../ir/log.h"
#include "binding.h"

namespace ember_torch {

std::atomic<bool>& donate_buffers() {
  static std::atomic<bool> on{true};
  return on;
}

std::vector<bool> donatable_inputs(const LazyGraph& g) {
  static const bool log = ember::LogEnabled("donation");  // EMBER_LOG topics, read once
  std::vector<bool> d(g.inputs.size(), false);
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const at::Tensor& t = g.inputs[i];
    if (g.input_nodes[i] <= 0 || !t.defined() || !t.has_storage() || !is_device_buffer(t)) continue;
    // References: g.inputs[i] plus the leaf nodes' data; nothing else (no live state,
    // view, data_of() result or autograd save) may hold the tensor or its storage, not
    // even another input of this graph: the runtime overwrites a donated buffer and
    // knows nothing of another parameter viewing the same memory (whose value a result
    // may still show). An in-flight input's data is held by g.inputs[i], its future and
    // this graph's data leaves; the future by g.input_futures[i] and this graph's
    // future leaves only (no state, view future or leaf of a graph traced since may
    // read the value later).
    const FuturePtr& f = g.input_futures[i];
    if (f) {
      const int future_leaves = g.input_future_nodes[i];
      const int data_leaves = g.input_nodes[i] - future_leaves;
      d[i] = f.use_count() == 1 + future_leaves && t.use_count() == 2 + data_leaves &&
             t.storage().use_count() == 1;
    } else {
      d[i] = t.use_count() == 1 + g.input_nodes[i] && t.storage().use_count() == 1;
    }
    if (log) {
      ember::LogLine("donation",
                     c10::str("input ", i, " ", t.sizes(), ": ", d[i] ? "donatable" : "kept",
                              " (tensor refs ", t.use_count(), ", graph ", 1 + g.input_nodes[i],
                              "; storage refs ", t.storage().use_count(), ")"));
    }
  }
  return d;
}

// Pairs each tensor input with an output the runtime may write into the input's buffer
// when the sync donates the input (no live tensor refers to it). First the input's own new value:
// the root reached from the input through the `self` operand of ops that functionalization
// substituted for in-place ones (p.add_(g) -> add(p, g); _foreach_addcdiv_(ps, ...) -> output k
// from ps[k]), same sizes and dtype all the way; then, for the inputs left, any unpaired output of
// the same shape. Only row-major outputs at offset 0 qualify.
void pair_donations(const LazyGraph& g, const std::vector<ember::NodeId>& outputs,
                    const std::vector<TensorMeta>& output_metas,
                    const std::vector<const Node*>& output_nodes,
                    const std::vector<int>& output_index,
                    const std::unordered_map<int, ember::NodeId>& slot_param,
                    const std::set<size_t>& permuted_inputs, ember::GraphBuilder& b) {
  std::unordered_map<int, size_t> input_of_slot;
  for (size_t i = 0; i < g.input_slots.size(); ++i) input_of_slot[g.input_slots[i]] = i;
  auto self_input = [&](const Node* n, int k) -> int {
    for (int depth = 0; depth < 256 && n; ++depth) {
      if (n->kind != NodeKind::kOp) {
        auto it = input_of_slot.find(g.first_slot.at(n));
        return it == input_of_slot.end() ||
                       (n->kind != NodeKind::kData && n->kind != NodeKind::kFuture)
                   ? -1
                   : static_cast<int>(it->second);
      }
      if (n->specs.empty()) return -1;
      const ArgSpec& self = n->specs[0];
      int operand = -1;
      if (self.kind == ArgKind::kTensor && k == 0 && !self.operands.empty()) {
        operand = self.operands[0];
      } else if ((self.kind == ArgKind::kTensorList || self.kind == ArgKind::kOptTensorList) &&
                 k < static_cast<int>(self.operands.size())) {
        operand = self.operands[k];
      }
      if (operand < 0) return -1;
      const Value& v = n->operands[operand];
      const TensorMeta& from = v.node->outputs[v.index];
      if (from.sizes != n->outputs[k].sizes || from.dtype != n->outputs[k].dtype) return -1;
      n = v.node.get();
      k = v.index;
    }
    return -1;
  };
  std::vector<bool> paired(outputs.size(), false), input_paired(g.inputs.size(), false);
  auto can_pair = [&](size_t o, size_t i) {
    const TensorMeta& m = output_metas[o];
    ember::NodeId pid = slot_param.at(g.input_slots[i]);
    return !paired[o] && !input_paired[i] && !permuted_inputs.count(i) && outputs[o] != pid &&
           m.offset == 0 && row_major(m.sizes, m.strides) && b.shape(outputs[o]) == b.shape(pid);
  };
  static const bool log = ember::LogEnabled("donation");
  auto pair = [&](size_t o, size_t i, const char* why) {
    b.SetAlias(static_cast<int>(o), static_cast<int>(i));  // input i is parameter i
    paired[o] = input_paired[i] = true;
    if (log)
      ember::LogLine("donation", c10::str("output ", o, " may take input ", i, " (", why, ")"));
  };
  for (size_t o = 0; o < outputs.size(); ++o) {
    int i = self_input(output_nodes[o], output_index[o]);
    if (i >= 0 && can_pair(o, static_cast<size_t>(i)))
      pair(o, static_cast<size_t>(i), "its new value");
  }
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    for (size_t o = 0; o < outputs.size() && !input_paired[i]; ++o) {
      if (can_pair(o, i)) pair(o, i, "same shape");
    }
  }
}

}  // namespace ember_torch
