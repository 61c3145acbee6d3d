// The lazy graph of one sync: building it, its tokens and hash, and its text
// (lazy_graph.h).
#include "lazy_graph.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <sstream>
#include <unordered_set>

#include "execution_queue.h"

namespace ember_torch {
namespace {

int64_t dbits(double d) {
  int64_t x;
  std::memcpy(&x, &d, sizeof(x));
  return x;
}

void hash_plain(const c10::IValue& v, std::vector<int64_t>& t) {
  if (v.isNone()) {
    t.push_back(1);
    return;
  }
  if (v.isInt()) {
    t.push_back(2);
    t.push_back(v.toInt());
    return;
  }
  if (v.isBool()) {
    t.push_back(3);
    t.push_back(v.toBool());
    return;
  }
  if (v.isDouble()) {
    t.push_back(4);
    t.push_back(dbits(v.toDouble()));
    return;
  }
  if (v.isIntList()) {
    const auto l = v.toIntList();
    t.push_back(6);
    t.push_back(l.size());
    for (const int64_t x : l) t.push_back(x);
    return;
  }
  if (v.isSymIntList()) {
    auto l = v.toSymIntList();
    t.push_back(6);
    t.push_back(l.size());
    for (size_t i = 0; i < l.size(); ++i) t.push_back(l.get(i).expect_int());
    return;
  }
  if (v.isString()) {
    t.push_back(9);
    t.push_back(std::hash<std::string>()(v.toStringRef()));
    return;
  }
  if (v.isDevice()) {
    t.push_back(10);
    return;
  }
  if (v.isList()) {
    auto l = v.toList();
    t.push_back(12);
    t.push_back(l.size());
    for (size_t i = 0; i < l.size(); ++i) hash_plain(l.get(i), t);
    return;
  }
  t.push_back(13);
  t.push_back(std::hash<std::string>()(v.tagKind()));
}

void hash_meta(const TensorMeta& m, std::vector<int64_t>& t) {
  t.push_back(static_cast<int64_t>(m.dtype));
  t.push_back(m.sizes.size());
  t.insert(t.end(), m.sizes.begin(), m.sizes.end());
  t.insert(t.end(), m.strides.begin(), m.strides.end());
  t.push_back(m.offset);
}

// An input's metadata as a graph keys and lowers it: without its offset and with the
// strides of its size-1 dims canonical. Both say where the bytes lie, not how a program
// reads them (a program borrows the data pointer; row_major and dense_permutation ignore
// size-1 strides), and an eager view of a growing tensor (`ids[:, -1:]`) changes them
// every step (docs/architecture.md, "Recompiles").
TensorMeta input_key_meta(const TensorMeta& m) {
  TensorMeta k = m;
  k.offset = 0;
  int64_t inner = 1;
  for (size_t d = k.sizes.size(); d-- > 0;) {
    if (k.sizes[d] == 1) k.strides[d] = inner;
    inner *= std::max<int64_t>(k.sizes[d], 1);
  }
  return k;
}

uint64_t hash_tokens(const std::vector<int64_t>& v) {
  uint64_t h = 1469598103934665603ULL;
  for (int64_t x : v) {
    h ^= static_cast<uint64_t>(x);
    h *= 1099511628211ULL;
    h ^= h >> 29;
  }
  return h;
}

}  // namespace

uint64_t structure_hash(const Node& n) {
  thread_local std::vector<int64_t> t;  // kept between calls: no allocation per op
  t.clear();
  const auto& schema = n.op->schema();
  t.push_back(static_cast<int64_t>(std::hash<std::string>()(schema.name())));
  t.push_back(static_cast<int64_t>(std::hash<std::string>()(schema.overload_name())));
  for (size_t i = 0; i < n.specs.size(); ++i) {
    const auto& sp = n.specs[i];
    t.push_back(100 + static_cast<int>(sp.kind));
    switch (sp.kind) {
      case ArgKind::kPlain:
        hash_plain(n.args[i], t);
        break;
      case ArgKind::kTensor:
      case ArgKind::kTensorList:
      case ArgKind::kOptTensorList:
        t.push_back(sp.operands.size());
        for (int o : sp.operands) t.push_back(o < 0);
        break;
      case ArgKind::kScalar:
        t.push_back(scalar_tag(n.args[i]));
        break;
      case ArgKind::kScalarList: {
        auto l = n.args[i].toList();
        t.push_back(l.size());
        for (size_t j = 0; j < l.size(); ++j) t.push_back(scalar_tag(l.get(j)));
        break;
      }
      case ArgKind::kGenerator:
      case ArgKind::kDevice:
        break;
    }
  }
  t.push_back(n.seeded_default ? -7 : -8);
  for (const auto& m : n.outputs) hash_meta(m, t);
  return hash_tokens(t);
}

int64_t scalar_tag(const c10::IValue& v) {
  if (v.isDouble()) return 1;
  if (v.isInt()) return 2;
  if (v.isBool()) return 3;
  if (v.isComplexDouble()) return 4;
  return 5;
}

void build_lazy_graph(const std::vector<std::pair<StatePtr, Value>>& roots, LazyGraph& g) {
  // Device data leaves deduplicated by tensor, in-flight leaves by future: key -> input.
  ska::flat_hash_map<const void*, size_t> data_inputs;
  ska::flat_hash_map<const FutureData*, at::Tensor> future_data;  // as first seen
  ska::flat_hash_set<const Node*> visited;
  visited.reserve(4 * roots.size() + 16);
  // Iterative post-order DFS.
  std::vector<std::pair<Node*, size_t>> work;
  auto& t = g.tokens;
  // A new input slot for leaf `n` (holding `data`, undefined while in flight).
  auto add_input = [&](Node* n, at::Tensor data, const FuturePtr& future, int leaves) {
    const int s = g.num_slots++;
    g.first_slot[n] = s;
    g.inputs.push_back(std::move(data));
    g.input_metas.push_back(input_key_meta(n->outputs[0]));
    g.input_futures.push_back(future);
    g.input_slots.push_back(s);
    g.input_nodes.push_back(leaves);
    g.input_future_nodes.push_back(future ? 1 : 0);
    hash_meta(g.input_metas.back(), t);
  };
  auto visit_leaf = [&](Node* n) {
    if (n->kind == NodeKind::kHost) {
      t.push_back(-2);
      add_input(n, n->data, nullptr, 0);  // host snapshot: never donated
      t.push_back(n->data.unsafeGetTensorImpl()->is_wrapped_number());
      return;
    }
    const bool future = n->kind == NodeKind::kFuture;
    // A resolved future is keyed by its data: the same input as the leaves of states
    // that settled on that data while the step was traced. Each future is looked at once
    // per graph: one resolving during this walk must not split its leaves into two inputs
    // (the graph's structure would then depend on the worker's timing).
    at::Tensor data = n->data;
    if (future) {
      auto [seen, first] = future_data.emplace(n->future.get(), at::Tensor());
      if (first) {
        std::string err;
        seen->second = n->future->peek(&err);
        if (!err.empty()) seen->second = at::Tensor();
      }
      data = seen->second;
    }
    const void* key = data.defined() ? static_cast<const void*>(data.unsafeGetTensorImpl())
                                     : static_cast<const void*>(n->future.get());
    auto it = data_inputs.find(key);
    if (it != data_inputs.end()) {
      const size_t i = it->second;
      g.first_slot[n] = g.input_slots[i];
      g.input_nodes[i]++;
      if (future) {
        g.input_future_nodes[i]++;
        if (!g.input_futures[i]) g.input_futures[i] = n->future;
      }
      return;
    }
    data_inputs[key] = g.inputs.size();
    // The same token as device data: a step's graph hashes alike whether its
    // parameters were synced or are still in flight.
    t.push_back(-1);
    add_input(n, std::move(data), future ? n->future : nullptr, 1);
  };
  // An op: its structure hash (trace time) and its operands' slots; its scalars and rng
  // pairs become scalar inputs in argument order.
  auto emit_op = [&](Node* n) {
    g.first_slot[n] = g.num_slots;
    g.num_slots += static_cast<int>(n->outputs.size());
    g.ops.push_back(n);
    t.push_back(-3);
    t.push_back(static_cast<int64_t>(n->structure_hash));
    for (size_t i = 0; i < n->specs.size(); ++i) {
      const auto& sp = n->specs[i];
      switch (sp.kind) {
        case ArgKind::kTensor:
        case ArgKind::kTensorList:
        case ArgKind::kOptTensorList:
          for (int o : sp.operands) t.push_back(o < 0 ? -1 : slot_of(g, n->operands[o]));
          break;
        case ArgKind::kScalar:
          g.scalars.push_back(n->args[i]);
          break;
        case ArgKind::kScalarList: {
          auto l = n->args[i].toList();
          for (size_t j = 0; j < l.size(); ++j) g.scalars.push_back(l.get(j));
          break;
        }
        case ArgKind::kGenerator:
          g.scalars.emplace_back(static_cast<int64_t>(n->rng_seed));
          g.scalars.emplace_back(static_cast<int64_t>(n->rng_offset));
          break;
        case ArgKind::kPlain:
        case ArgKind::kDevice:
          break;
      }
    }
    if (n->seeded_default) {
      g.scalars.emplace_back(static_cast<int64_t>(n->rng_seed));
      g.scalars.emplace_back(static_cast<int64_t>(n->rng_offset));
    }
  };
  // Every op reachable from the roots (iterative post-order DFS) is emitted in program
  // order (the trace sequence): running steps in the order the program traced them
  // keeps what is live at each step what eager would hold (micro-batch k's activations
  // are dead before micro-batch k+1's forward runs), where the DFS order from the roots
  // can interleave independent chains. Leaves take slots at their first use.
  std::vector<Node*> ops;
  // The claim these roots were taken by (0: pending states, not claimed). An operand
  // another sync claimed is read from that sync's future: a leaf replaces it in its
  // consumer (a node traced from a value read before that claim; lazy_graph.h).
  const Node::Claim* first =
      roots.empty() ? nullptr : roots.front().second.node->claim(roots.front().second.index);
  const uint64_t own = first ? first->gen : 0;
  for (const auto& r : roots) {
    Node* root = r.second.node.get();
    if (!visited.insert(root).second) continue;
    work.emplace_back(root, 0);
    while (!work.empty()) {
      auto& [n, i] = work.back();
      if (n->kind != NodeKind::kOp) {
        work.pop_back();
        continue;
      }
      if (i < n->operands.size()) {
        Value& operand = n->operands[i];
        const Node::Claim* claim = operand.node->claim(operand.index);
        if (claim && claim->gen != own) operand = future_leaf(claim->future);
        Node* c = operand.node.get();
        ++i;
        if (visited.insert(c).second) work.emplace_back(c, 0);
        continue;
      }
      ops.push_back(n);
      work.pop_back();
    }
  }
  std::sort(ops.begin(), ops.end(),  // trace numbers are unique
            [](const Node* a, const Node* b) { return a->seq < b->seq; });
  t.reserve(4 * ops.size() + 16);
  g.ops.reserve(ops.size());
  g.first_slot.reserve(visited.size());  // every node reached gets a slot
  // A leaf at its first use (visit_leaf gives every leaf its first_slot entry).
  auto leaf = [&](Node* n) {
    if (n->kind != NodeKind::kOp && !g.first_slot.count(n)) visit_leaf(n);
  };
  for (Node* n : ops) {
    for (const auto& o : n->operands) leaf(o.node.get());
    emit_op(n);
  }
  for (const auto& r : roots) leaf(r.second.node.get());
  t.push_back(-4);
  for (const auto& r : roots) {
    int s = slot_of(g, r.second);
    g.output_slots.push_back(s);
    t.push_back(s);
  }
  g.hash = hash_tokens(t);
}

bool reaches(const Value& v, const std::function<bool(const Node*)>& hit) {
  std::vector<const Node*> work{v.node.get()};
  std::unordered_set<const Node*> seen;
  while (!work.empty()) {
    const Node* n = work.back();
    work.pop_back();
    if (hit(n)) return true;
    if (!seen.insert(n).second) continue;
    for (const Value& o : n->operands) work.push_back(o.node.get());
  }
  return false;
}

bool depends_on(const Value& v, const Node* bad) {
  return reaches(v, [bad](const Node* n) { return n == bad; });
}

std::exception_ptr resolve_inputs(LazyGraph& g, std::vector<const FutureData*>* failed) {
  std::exception_ptr first;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const FuturePtr& f = g.input_futures[i];
    if (!f || g.inputs[i].defined()) continue;
    TORCH_INTERNAL_ASSERT(f->ready(), "ember: a queued program started before its input's");
    if (std::exception_ptr e = f->error()) {
      if (!first) first = e;
      failed->push_back(f.get());
      continue;
    }
    std::string unused;
    g.inputs[i] = f->peek(&unused);
  }
  return first;
}

std::string meta_str(const TensorMeta& m) {
  std::ostringstream os;
  os << c10::toString(m.dtype) << "[";
  for (size_t i = 0; i < m.sizes.size(); ++i) os << (i ? "," : "") << m.sizes[i];
  os << "]";
  return os.str();
}

std::string graph_text(const LazyGraph& g) {
  std::ostringstream os;
  os << "# ember lazy graph " << std::hex << g.hash << std::dec << ": " << g.ops.size() << " ops, "
     << g.inputs.size() << " tensor inputs, " << g.scalars.size() << " scalar inputs\n";
  for (const auto& kv : g.first_slot) {
    const Node* n = kv.first;
    if (n->kind == NodeKind::kOp) continue;
    os << "%" << kv.second << " = " << (n->kind == NodeKind::kHost ? "host " : "parameter ")
       << meta_str(n->outputs[0]) << "\n";
  }
  for (const Node* n : g.ops) {
    int first = g.first_slot.at(n);
    os << "(";
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      os << (k ? ", " : "") << "%" << first + k << ": " << meta_str(n->outputs[k]);
    }
    os << ") = " << n->op->schema().name();
    if (!n->op->schema().overload_name().empty()) os << "." << n->op->schema().overload_name();
    os << "(";
    for (size_t i = 0; i < n->specs.size(); ++i) {
      os << (i ? ", " : "");
      const auto& sp = n->specs[i];
      switch (sp.kind) {
        case ArgKind::kTensor:
        case ArgKind::kTensorList:
        case ArgKind::kOptTensorList:
          if (sp.kind != ArgKind::kTensor) os << "[";
          for (size_t j = 0; j < sp.operands.size(); ++j) {
            os << (j ? ", " : "");
            int o = sp.operands[j];
            if (o < 0)
              os << "None";
            else
              os << "%" << slot_of(g, n->operands[o]);
          }
          if (sp.kind != ArgKind::kTensor) os << "]";
          break;
        case ArgKind::kScalar:
          os << "$scalar";
          break;
        case ArgKind::kScalarList:
          os << "$scalars";
          break;
        case ArgKind::kGenerator:
          os << "$rng";
          break;
        case ArgKind::kDevice:
          os << "device";
          break;
        case ArgKind::kPlain:
          os << n->args[i];
          break;
      }
    }
    os << ")";
    if (!n->source.empty()) os << "  # " << n->source;
    os << "\n";
  }
  os << "return (";
  for (size_t i = 0; i < g.output_slots.size(); ++i)
    os << (i ? ", " : "") << "%" << g.output_slots[i];
  os << ")\n";
  return os.str();
}

}  // namespace ember_torch
