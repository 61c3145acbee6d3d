// The reference interpreter: runs any verified graph naively, op by op. It is
// the numeric oracle for every pass and backend (DESIGN §2).
//
// Semantics per op are documented in docs/ir.md. bf16/f16 are computed in f32
// and rounded to nearest even on store. Data errors inside the graph (integer
// division or remainder by zero, out-of-range gather/scatter/dynamic-slice
// index, unknown custom-call target) return OutOfRange / NotFound statuses
// naming the op and node; the interpreter never aborts.
#pragma once

#include <vector>

#include "ember/eval/extern_registry.h"
#include "ember/ir/graph.h"

namespace ember {

// args[i] is the value of parameter(i); its shape must match exactly
// (InvalidArgument otherwise). Returns one Literal per graph output.
StatusOr<std::vector<Literal>> Evaluate(const Graph& g, const std::vector<const Literal*>& args);
StatusOr<std::vector<Literal>> Evaluate(const Graph& g, const std::vector<Literal>& args);

// Evaluates a single node given its operand values (used by constant folding
// and by the runtime's per-node steps).
StatusOr<Literal> EvaluateNode(const Node& n, const std::vector<const Literal*>& operands);

}  // namespace ember
