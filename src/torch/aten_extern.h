// The ATen extern (docs/architecture.md, "ATen externs"): a lazy op the lowering table
// does not lower becomes a `custom-call` node whose kernel runs the op's ATen step
// (aten_step.h) on the runtime's buffers inside the core executable.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "aten_step.h"
#include "ember/eval/extern_registry.h"
#include "ember/status.h"

namespace ember_torch {

// One custom-call's kernel state.
struct ExternState {
  explicit ExternState(AtenStep s) : step(std::move(s)) {}
  AtenStep step;                          // tensor refs: operand index; scalar refs: local index
  int op_index = -1;                      // in LazyGraph::ops
  std::vector<TensorMeta> operand_metas;  // recorded layout of each tensor operand
  int num_tensors = 0;                    // custom-call operands [0, n) are tensors
  std::vector<int> scalar_tags;           // per local scalar (operand num_tensors + j)
};

// The kernel: tensor operands are views of the input buffers (relaid out to the
// recorded layout when it was not row-major), results go into the output buffers. An
// ATen exception becomes an Internal status naming the op; the exception itself is kept
// for the sync (take_extern_error) so the user gets eager's exception type.
ember::Status run_extern(const ExternState& es, ember::ExternCall& call);

// The custom-call target of the extern of ATen op `name` at lazy op `op_index`
// ("aten:<name>#<k>"): unique within a graph, and what GraphStats counts by op name.
inline std::string extern_target(const std::string& name, int op_index) {
  return "aten:" + name + "#" + std::to_string(op_index);
}

// The exception of the first extern that failed since clear_extern_error, and its op
// index (LazyGraph::ops), or (null, -1). Syncs are serialized: one run at a time.
void clear_extern_error();
std::pair<std::exception_ptr, int> take_extern_error();

// Process-wide counts of extern operands relaid out and extern results copied into
// their output buffers (a run adds the difference to the metrics).
int64_t extern_relayout_copies();
int64_t extern_result_copies();

}  // namespace ember_torch
