// Private: f32 multiply-adds that the torch lowering widens to f64, and when
// a kernel may compute them in f32 instead.
//
// Eager computes `add(a, b, alpha)` / `sub` / `rsub` on float32 as one fused
// multiply-add `a + alpha * b`; the lowering (src/lowering/elementwise_util.h,
// `Ew::MulAdd`) writes it as
//
//     r = convert<f32>(add(multiply(convert<f64>(x), convert<f64>(s)), convert<f64>(z)))
//
// (operand orders as written, or swapped) with x, s, z of dtype f32. Computed
// as written, every f32 add and subtract in a fused loop widens to f64 and
// back: twice the vector registers and three conversions per element (on the
// bench's `gelu(x * 1.5 + 0.25) * 0.5 - x` kernel, 40 % of its time).
//
// When s is the same at every element of a loop (IsLoopInvariant) and
// |s| == 1, the f32 form `(x * s) + z` (same operand orders) is bit for bit
// the f64 form: x * s is exact in both precisions (a sign flip at most, NaN
// payloads kept), and rounding the f64 sum of two f32 values to f32 equals
// rounding the exact sum once, since 53 >= 2 * 24 + 2 (Figueroa, "When is
// double rounding innocuous?", SIGNUM Newsletter 30(3), 1995). A loop kernel
// therefore tests s once per call (alpha is a runtime parameter: alpha = 1 and
// alpha = 0.5 share one graph) and runs an f32 copy of its loop when every
// such s is +-1; otherwise, the loop as written. Values are identical either way.
#pragma once

#include <vector>

#include "ember/ir/graph.h"

namespace ember::codegen {

struct F32MulAdd {
  NodeId root = kInvalidNode;  // the convert<f32> node, r above
  NodeId x = kInvalidNode;     // f32 factor varying along the loop
  NodeId s = kInvalidNode;     // f32 loop-invariant factor
  NodeId z = kInvalidNode;     // f32 addend
  bool s_first = false;        // s is the multiply's first operand
  bool product_first = true;   // the product is the add's first operand
};

// Whether `id`'s value is the same at every element index: rank-0 values,
// and broadcasts, reshapes and elementwise ops of such values.
bool IsLoopInvariant(const Graph& g, NodeId id);

// The multiply-adds of the pattern above, with a loop-invariant factor, that
// computing `root` evaluates elementwise (the search does not enter reduce or
// scatter operands: those are computed by phases of their own). In node order.
std::vector<F32MulAdd> FindF32MulAdds(const Graph& g, NodeId root);
// The same for computing every node of `roots` in one loop (a loop phase's outputs).
std::vector<F32MulAdd> FindF32MulAdds(const Graph& g, const std::vector<NodeId>& roots);

}  // namespace ember::codegen
