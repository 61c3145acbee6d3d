// The pending lazy graph of one sync (docs/architecture.md, "Sync"): the pending values
// of all live tensors (roots) and every node they depend on, in trace order, with its
// canonical token list and structural hash (the graph cache's key). Built here, read by
// the graph cache (graph_cache.h), the aten backend (aten_step.h) and the lowerer
// (lower.h).
#pragma once

#include <c10/util/flat_hash_map.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bridge.h"

namespace ember_torch {

struct LazyGraph {
  std::vector<Node*> ops;  // op nodes, topological order
  // Tensor inputs (data, host, in flight), slot order. An in-flight input (a future of
  // an earlier queued program) is undefined in `inputs` until resolve_inputs(); its
  // metadata is known from the start. A future already resolved when the graph is built
  // is keyed by its data, so it is one input with the leaves of states that settled on
  // that data meanwhile (one structure whatever the timing).
  std::vector<at::Tensor> inputs;
  std::vector<TensorMeta> input_metas;   // per input: sizes, strides, offset, dtype
  std::vector<FuturePtr> input_futures;  // per input: the future, or null
  std::vector<c10::IValue> scalars;      // scalar inputs (Scalar args, rng pairs)
  std::vector<int> output_slots;         // per root
  // Canonical structure: per leaf its key metadata, per op its structure_hash and its
  // operands' slots, then the roots' slots.
  std::vector<int64_t> tokens;
  ska::flat_hash_map<const Node*, int> first_slot;  // slot of output 0 of each node
  std::vector<int> input_slots;                     // slot of each input (inputs[i])
  std::vector<int> input_nodes;                     // leaf nodes holding each input (deduplicated)
  std::vector<int> input_future_nodes;              // of those, future leaves (hold the future)
  int num_slots = 0;
  uint64_t hash = 0;
};

// The structure of op node `n` apart from its operands' identity, hashed (64-bit): the
// op's schema name and overload, per argument its kind and, for attributes, its value,
// for Scalar arguments their type, the operands' count and None positions, whether it
// draws from the default generator, its outputs' metadata. Computed once, when the op is
// traced (Node::structure_hash), so a sync hashes no op contents. Two graphs' tokens
// then match when every op's hash does: a collision of two different ops' 64-bit
// hashes, at the same position of two graphs of equal shape, is what the cache trusts.
uint64_t structure_hash(const Node& n);

// Builds `g` (empty on entry) from the roots: an iterative post-order walk, ops in trace
// order (Node::seq), data leaves deduplicated by buffer, then the tokens and their hash.
// The roots are one claim's (claim_pending_states; the first root's Node::Claim says
// which) or unclaimed pending states: an operand value claimed by any other sync is
// replaced, in its consumer, by a future leaf of that sync's future, so no graph
// recomputes a value an earlier program computes (its leaves may have been donated).
void build_lazy_graph(const std::vector<std::pair<StatePtr, Value>>& roots, LazyGraph& g);
inline int slot_of(const LazyGraph& g, const Value& v) {
  return g.first_slot.at(v.node.get()) + v.index;
}
// Kind tag of a scalar IValue: 1 double, 2 int, 3 bool, 4 complex, 5 other.
int64_t scalar_tag(const c10::IValue& v);

// Fills the in-flight inputs from their resolved futures (the execution worker, when a
// job starts: earlier jobs have finished). Returns the first error of an input whose
// program failed, or null; `*failed` gets the futures of every such input.
std::exception_ptr resolve_inputs(LazyGraph& g, std::vector<const FutureData*>* failed);

// Whether `hit` holds for a node root value `v` depends on (`v`'s own node included).
bool reaches(const Value& v, const std::function<bool(const Node*)>& hit);
// Whether root value `v` depends on op node `bad`.
bool depends_on(const Value& v, const Node* bad);

// "f32[2,3]": dtype and sizes, as logs and the graph text print a value.
std::string meta_str(const TensorMeta& m);
// The lazy IR text of `g` (ember.pending_graph(), EMBER_DEBUG_DIR dumps): one line per
// leaf and op, with each op's traced Python line.
std::string graph_text(const LazyGraph& g);

}  // namespace ember_torch
