// The pending lazy graph of one sync and the ATen step that runs one lazy node
// through ATen's CPU kernel. Shared by the `aten` backend (sync.cpp: one step per
// node) and the lowered backends (lower.cpp: a step inside a custom-call kernel).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bridge.h"

namespace ember_torch {

// One sync's graph: the pending values of all live tensors (roots) and every node
// they depend on, in topological order, with a canonical token list (the cache key).
struct LazyGraph {
  std::vector<Node*> ops;                           // op nodes, topological order
  std::vector<at::Tensor> inputs;                   // tensor inputs (data, host), slot order
  std::vector<c10::IValue> scalars;                 // scalar inputs (Scalar args, rng pairs)
  std::vector<int> output_slots;                    // per root
  std::vector<int64_t> tokens;                      // canonical structure
  std::unordered_map<const Node*, int> first_slot;  // slot of output 0 of each node
  std::vector<int> input_slots;                     // slot of each input (inputs[i])
  std::vector<int> input_nodes;                     // leaf nodes holding each input (deduplicated)
  int num_slots = 0;
  uint64_t hash = 0;
};

void build_lazy_graph(const std::vector<std::pair<StatePtr, Value>>& roots, LazyGraph& g);
inline int slot_of(const LazyGraph& g, const Value& v) {
  return g.first_slot.at(v.node.get()) + v.index;
}
// Kind tag of a scalar IValue: 1 double, 2 int, 3 bool, 4 complex, 5 other.
int64_t scalar_tag(const c10::IValue& v);

// One lazy op node as a boxed ATen call. `refs` index tensors (kTensor*: -1 for None)
// and scalars (kScalar*, kGenerator: (seed, offset) at refs[0], refs[0] + 1) in
// whatever numbering the runner's accessors use.
struct AtenStep {
  explicit AtenStep(c10::OperatorHandle o) : op(std::move(o)) {}
  c10::OperatorHandle op;
  std::optional<c10::OperatorHandle> out_op;  // `.out` overload writing into our buffers
  std::vector<c10::IValue> args;              // template
  std::vector<ArgKind> kinds;
  std::vector<std::vector<int>> refs;
  std::vector<int> written;
  std::vector<int> out_slots;  // aten backend: slot per output
  std::vector<TensorMeta> out_metas;
  std::vector<bool> out_view;
  int seed_idx = -1;         // seeded_default: (seed, offset) scalars
  std::vector<int> release;  // aten backend: slots whose last use is this step
  std::string name;          // "aten::add.Tensor"
};

// The step for `n` with refs numbered by `tensor_ref(operand index)` and scalars
// numbered consecutively from `*next_scalar` (advanced).
AtenStep make_aten_step(const Node& n, const std::function<int(int)>& tensor_ref, int* next_scalar);

struct AtenStepIO {
  std::function<at::Tensor(int)> tensor;   // ref -> tensor (never called with -1)
  std::function<c10::IValue(int)> scalar;  // ref -> scalar value
  // Output k: a preallocated tensor to write into (exact sizes, row-major), or
  // undefined for "allocate"; may be null.
  std::function<at::Tensor(size_t)> out_buffer;
};

// Runs the step. Returns one tensor per output, laid out as out_metas (copies counted
// in *copies), or exactly `out_buffer(k)` when it was written in place. Throws the
// op's exception.
std::vector<at::Tensor> run_aten_step(const AtenStep& st, const AtenStepIO& io, int64_t* copies);

// Rethrows `e` (keeping IndexError / ValueError / TypeError, else c10::Error) with a
// message naming the op, its operand dtypes and shapes, and the traced source line.
[[noreturn]] void rethrow_at(const std::exception& e, const std::string& op_name, const Node* n);

// Per input: whether its buffer may be overwritten by this sync (donated): device data
// that no live tensor, view or other handle refers to — only the graph's own leaves.
std::vector<bool> donatable_inputs(const LazyGraph& g);

// Error text of an exception_ptr (without backtrace).
std::string error_text(const std::exception_ptr& e);

}  // namespace ember_torch
