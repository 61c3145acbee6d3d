// The ATen step: one lazy op node run as a boxed call of ATen's CPU kernel, on tensors
// that are our buffers (docs/architecture.md, "Sync"). The `aten` backend runs a graph
// as one step per node over numbered slots (declared below); the lowered backends run a
// step inside a custom-call kernel (aten_extern.h).
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph_stats.h"
#include "lazy_graph.h"

namespace ember_torch {

// One lazy op node as a boxed ATen call. `refs` index tensors (kTensor*: -1 for None)
// and scalars (kScalar*, kGenerator: (seed, offset) at refs[0], refs[0] + 1) in
// whatever numbering the runner's accessors use.
struct AtenStep {
  explicit AtenStep(c10::OperatorHandle o) : op(std::move(o)) {}
  c10::OperatorHandle op;
  std::optional<c10::OperatorHandle> out_op;  // `.out` overload writing into our buffers
  // A functional variant of an in-place op (functionalization's `_fused_adamw` of
  // `_fused_adamw_`): that in-place op, run on the output buffers after each written
  // argument is copied into its own (in place, without a copy, where the buffer is the
  // argument's: a donated input). `inplace_args`: the in-place op's written arguments,
  // in the order of the functional op's returns.
  std::optional<c10::OperatorHandle> inplace_op;
  std::vector<int> inplace_args;
  // The in-place op works index by index over its tensor lists (a fused optimizer, a
  // `_foreach_*_` op: every written argument a list): a long call runs as one parallel
  // loop over slices of the lists, each slice's kernels serial inside it, not as a
  // parallel loop per tensor (index_wise_lists, aten_step.cpp).
  bool split_lists = false;
  std::vector<c10::IValue> args;  // template
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
  // Output k's bytes when it has a preallocated buffer (else null); may be null. An
  // in-place run whose output is its input's own bytes (a donated argument) uses the
  // input tensor as it is.
  std::function<const void*(size_t)> out_data;
  // Results may lie in any CPU memory of eager's layout (an extern copies them into its
  // outputs or hands them over); otherwise (the aten backend, whose results become
  // tensors' storages) a result not in a device buffer is copied into one.
  bool any_memory = false;
};

// Runs the step. Returns one tensor per output, laid out as out_metas (copies counted
// in *copies), or exactly `out_buffer(k)` when it was written in place. Throws the
// op's exception.
std::vector<at::Tensor> run_aten_step(const AtenStep& st, const AtenStepIO& io, int64_t* copies);

// Rethrows `e` (keeping IndexError / ValueError / TypeError, else c10::Error) with a
// message naming the op, its operand dtypes and shapes, and the traced source line.
[[noreturn]] void rethrow_at(const std::exception& e, const std::string& op_name, const Node* n);

// Error text of an exception_ptr (without backtrace).
std::string error_text(const std::exception_ptr& e);

// ---------------------------------------------------------------- the aten backend
// A graph as one ATen step per lazy op node over numbered slots, each slot released
// after its last use (graph outputs excepted).
struct AtenExecutable;
std::shared_ptr<AtenExecutable> compile_aten(const LazyGraph& g);
// Runs `ex` on `g`'s inputs. A failing step poisons its outputs; independent steps still
// run. Per root: its tensor in `outputs`, or root_failed[i]; the first error (with
// eager's exception type, naming the op) in `first_error`.
void run_aten(const AtenExecutable& ex, const LazyGraph& g, std::vector<at::Tensor>& outputs,
              std::vector<bool>& root_failed, std::exception_ptr& first_error);
GraphStats aten_stats(const LazyGraph& g);

}  // namespace ember_torch
