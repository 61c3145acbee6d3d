// Private: the interpreter's per-family evaluators. interpreter.cc dispatches
// on the op category to one of these. Each takes a verified node and its
// operand values and returns the result value (or a data error status that
// names the op, e.g. "OutOfRange: gather %7: index 12 out of range [0, 10)").
#pragma once

#include <vector>

#include "ember/ir/graph.h"

namespace ember::eval {

using Operands = std::vector<const Literal*>;

// unary, binary, compare, convert, select, clamp (elementwise.cc)
StatusOr<Literal> EvalElementwise(const Node& n, const Operands& in);
// iota, constant (leaves.cc), rng-uniform / rng-normal (rng.cc)
StatusOr<Literal> EvalLeaf(const Node& n, const Operands& in);
StatusOr<Literal> EvalRng(const Node& n, const Operands& in);
// broadcast-in-dim, reshape, transpose, slice, dynamic-slice,
// dynamic-update-slice, concatenate, pad, reverse (data_movement.cc)
StatusOr<Literal> EvalDataMovement(const Node& n, const Operands& in);
// gather, scatter (indexing.cc)
StatusOr<Literal> EvalIndexing(const Node& n, const Operands& in);
// reduce, argmax, argmin, reduce-window (reduction.cc)
StatusOr<Literal> EvalReduction(const Node& n, const Operands& in);
// dot-general, convolution (contraction.cc)
StatusOr<Literal> EvalContraction(const Node& n, const Operands& in);

}  // namespace ember::eval
