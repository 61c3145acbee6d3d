// Per-op corrections of what torch says about an op where eager's CPU kernel behaves
// otherwise: arguments the schema writes without marking them `(a!)`, and outputs whose
// shape, dtype or layout the op's Meta kernel reports unlike the CPU kernel (found by the
// OpInfo sweep, docs/conformance.md, and by the tests named in each entry). One table,
// looked up by op name, in meta_corrections.cpp; `written_args` (op_schema.cpp) and Meta
// inference (meta.cpp) apply it. A torch upgrade or a new eager check adds entries there.
#pragma once

#include <vector>

#include "bridge.h"

namespace ember_torch {

struct OpCorrection {
  // Appends the indices of arguments the op writes although its schema does not say so.
  void (*extra_written)(const std::vector<c10::IValue>& args, std::vector<int>& written) = nullptr;
  // Rewrites the Meta kernel's boxed results (one IValue per schema return, meta
  // tensors) into what the CPU kernel returns for `args` (the call's operands as traced:
  // ember or CPU tensors with their own strides). Applied in order. A correction may
  // throw: the call then runs as an eager fallback, which gives eager's own result or
  // error (the way to add a dtype check eager's CPU kernel does and its Meta kernel
  // does not).
  using FixReturns = void (*)(const c10::FunctionSchema& schema,
                              const std::vector<c10::IValue>& args, torch::jit::Stack& returns);
  std::vector<FixReturns> fix_returns;
};

// The table's entry for `schema`'s op (any overload), or null.
const OpCorrection* find_op_correction(const c10::FunctionSchema& schema);

// Corrects the boxed results of a Meta call of `schema` on `args`: first the rule every
// op gets (a backward op's `output_mask`: masked results are undefined, as on CPU; the
// Meta kernels return defined tensors), then the op's entry.
void correct_meta_returns(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args,
                          torch::jit::Stack& returns);

}  // namespace ember_torch
