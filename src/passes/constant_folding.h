// constant-folding: replaces a node whose operands are all constants by the
// constant it evaluates to, when the result is an array of at most
// kMaxFoldedElements elements (small constants only: folding must not blow up
// the graph) and its operands hold at most kMaxFoldedOperandElements. Values come from the
// reference interpreter (EvaluateNode), so folding is exactly value-preserving.
//
// Never folded: parameters, leaves without operands (iota stays an iota),
// rng ops, custom-call, optimization-barrier, tuple-shaped results, and
// broadcast-in-dim of a scalar (already the compact form of a splat; simplify
// matches it). If evaluation fails with a data error (e.g. integer division
// by zero), the node is left as is, so the error surfaces at run time.
#pragma once

#include <cstdint>

#include "ember/passes/pass.h"

namespace ember::passes {

inline constexpr int64_t kMaxFoldedElements = 1024;
// Bounds the work of one fold (a dot-general or reduce over huge constants
// would run the interpreter at compile time): operand elements, summed.
inline constexpr int64_t kMaxFoldedOperandElements = int64_t{1} << 16;

class ConstantFoldingPass : public Pass {
 public:
  std::string name() const override { return "constant-folding"; }
  StatusOr<bool> Run(Graph& g) override;
};

}  // namespace ember::passes
