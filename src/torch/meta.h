// Meta inference: the output metadata (sizes, strides, offset, dtype) of one traced op
// call, from the op's Meta kernel run on `device="meta"` tensors with the operands'
// exact layouts, corrected where eager's CPU kernel differs (meta_corrections.h), and
// cached by signature (docs/architecture.md, "Tracing"). Also the cache of the in-place
// Meta checks functionalization runs ("Training loops").
#pragma once

#include <memory>
#include <vector>

#include "bridge.h"

namespace ember_torch {

struct MetaResult {
  std::vector<TensorMeta> outputs;  // written arguments first, then the returned tensors
  std::vector<bool> is_view;        // per output: the op returns it as a view
  // Per return: -1 single tensor, -2 undefined tensor / None, >=0 list length,
  // -3 aliases a written argument (returned as that argument).
  std::vector<int> ret_shape;
  std::vector<int> ret_alias_arg;  // for -3: argument index
};

// Runs the Meta kernel of `op` on `args` (cached: keyed by the schema, the default
// dtype, tensor metadata, non-float arguments by value, floats by type, or by value for
// factory ops). `written`: written_args(op.schema(), args). Throws whatever the Meta
// kernel throws (no Meta kernel, a user's shape error), c10::NotImplementedError for a
// non-tensor result; the caller then runs the op as an eager fallback.
std::shared_ptr<const MetaResult> infer_meta(const c10::OperatorHandle& op,
                                             const std::vector<c10::IValue>& args,
                                             const std::vector<int>& written);

// Wraps the Meta kernel of every in-place aten op with a cache of the signatures whose
// check passed (registered at the Meta key), and replaces functionalization's meta
// reference of in-place ops by the same check run once per signature (the Functionalize
// key; sets TORCH_DISABLE_FUNCTIONALIZATION_META_REFERENCE=1 unless set). Called once,
// by register_kernels, after the Functionalize workarounds are registered.
void cache_inplace_meta_kernels();

}  // namespace ember_torch
