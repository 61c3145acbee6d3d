// Binding between torch values and the core runtime's (docs/architecture.md, "Edges"):
// layouts (row-major, dense permutations), runtime buffers wrapped as tensors,
// relayouts to eager's strides, and scalar parameters as 0-d literals.
#pragma once

#include <optional>
#include <vector>

#include "bridge.h"
#include "ember/ir/dtype.h"
#include "ember/ir/literal.h"
#include "ember/runtime/buffer.h"

namespace ember_torch {

// Whether a tensor of `sizes` with `strides` is laid out densely row-major (strides of
// size-1 dimensions do not matter).
bool row_major(at::IntArrayRef sizes, at::IntArrayRef strides);
bool row_major(const at::Tensor& t);

// When `t` is not row-major but its elements are a dense row-major block in another
// dimension order (e.g. `w.t()`, a permuted contiguous tensor): that order, outermost
// first (`order[j]` = the logical dimension stored j-th). Empty otherwise.
std::vector<int64_t> dense_permutation(const TensorMeta& m);
std::vector<int64_t> dense_permutation(const at::Tensor& t);

// `m`'s sizes and dtype laid out row-major at offset 0: how a runtime buffer holds a
// value whatever eager's layout.
TensorMeta row_major_meta(const TensorMeta& m);

// A CPU tensor over `buf`'s bytes (which it keeps alive) with sizes/strides of `m`.
at::Tensor wrap_buffer(const ember::BufferRef& buf, const TensorMeta& m);

// Whether `t`'s storage is a runtime buffer (wrap_buffer) that nothing else refers to:
// no other BufferRef (an executable's pool, another storage) and not borrowed memory.
bool is_exclusive_runtime_buffer(const at::Tensor& t);

// A device buffer laid out exactly as `m` holding the values of `src` (same sizes).
// Broadcast (stride-0) dimensions take the first element along them; a layout whose
// elements still overlap cannot be written and gets a dense copy instead.
at::Tensor relayout(const at::Tensor& src, const TensorMeta& m);

// Scalar parameter kinds: 1 double (f64), 2 int (s64), 3 bool (pred), 4 complex (c128)
// (scalar_tag's numbering, lazy_graph.h), 6 an rng seed or offset (u64).
constexpr int kRngTag = 6;
std::optional<ember::DType> scalar_dtype(int tag);  // nullopt: no IR dtype (tag 5)
ember::Literal scalar_literal(const c10::IValue& v, int tag);
c10::IValue scalar_ivalue(const ember::Literal& lit, int tag);

}  // namespace ember_torch
