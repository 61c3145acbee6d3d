// The op set of the IR, declared once (DESIGN §3). Text names are HLO's,
// kebab-case. Semantics are PyTorch's wherever an HLO name suggests otherwise;
// each op's operands, attributes and semantics are documented in docs/ir.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace ember {

// Groups of ops; predicates below are defined on them.
enum class OpCategoryKind : uint8_t {
  kLeaf,              // parameter, constant, iota
  kRng,               // rng-uniform, rng-normal: never merged, folded or moved
  kUnary,             // elementwise, one operand
  kBinary,            // elementwise, two operands of one shape and dtype
  kElementwiseOther,  // select, clamp
  kDataMovement,      // broadcast-in-dim, reshape, transpose, slice, ...
  kReduction,         // reduce, argmax, argmin, reduce-window
  kContraction,       // dot-general, convolution
  kIndexing,          // gather, scatter
  kOpaque,            // custom-call, optimization-barrier
  kTuple,             // tuple, get-tuple-element
  kFusion,            // fusion: calls a body graph (Node::called)
};

// V(enumerator, text name, category)
#define EMBER_OPS(V)                                            \
  V(kParameter, "parameter", kLeaf)                             \
  V(kConstant, "constant", kLeaf)                               \
  V(kIota, "iota", kLeaf)                                       \
  V(kRngUniform, "rng-uniform", kRng)                           \
  V(kRngNormal, "rng-normal", kRng)                             \
  V(kNegate, "negate", kUnary)                                  \
  V(kAbs, "abs", kUnary)                                        \
  V(kExp, "exponential", kUnary)                                \
  V(kLog, "log", kUnary)                                        \
  V(kLog1p, "log-plus-one", kUnary)                             \
  V(kExpm1, "exponential-minus-one", kUnary)                    \
  V(kSqrt, "sqrt", kUnary)                                      \
  V(kRsqrt, "rsqrt", kUnary)                                    \
  V(kTanh, "tanh", kUnary)                                      \
  V(kLogistic, "logistic", kUnary)                              \
  V(kSin, "sine", kUnary)                                       \
  V(kCos, "cosine", kUnary)                                     \
  V(kErf, "erf", kUnary)                                        \
  V(kFloor, "floor", kUnary)                                    \
  V(kCeil, "ceil", kUnary)                                      \
  V(kRoundNearestEven, "round-nearest-even", kUnary)            \
  V(kSign, "sign", kUnary)                                      \
  V(kNot, "not", kUnary)                                        \
  V(kConvert, "convert", kUnary)                                \
  V(kAdd, "add", kBinary)                                       \
  V(kSubtract, "subtract", kBinary)                             \
  V(kMultiply, "multiply", kBinary)                             \
  V(kDivide, "divide", kBinary)                                 \
  V(kRemainder, "remainder", kBinary)                           \
  V(kPower, "power", kBinary)                                   \
  V(kMaximum, "maximum", kBinary)                               \
  V(kMinimum, "minimum", kBinary)                               \
  V(kAtan2, "atan2", kBinary)                                   \
  V(kAnd, "and", kBinary)                                       \
  V(kOr, "or", kBinary)                                         \
  V(kXor, "xor", kBinary)                                       \
  V(kCompare, "compare", kBinary)                               \
  V(kShiftLeft, "shift-left", kBinary)                          \
  V(kShiftRightArithmetic, "shift-right-arithmetic", kBinary)   \
  V(kShiftRightLogical, "shift-right-logical", kBinary)         \
  V(kSelect, "select", kElementwiseOther)                       \
  V(kClamp, "clamp", kElementwiseOther)                         \
  V(kBroadcastInDim, "broadcast-in-dim", kDataMovement)         \
  V(kReshape, "reshape", kDataMovement)                         \
  V(kTranspose, "transpose", kDataMovement)                     \
  V(kSlice, "slice", kDataMovement)                             \
  V(kDynamicSlice, "dynamic-slice", kDataMovement)              \
  V(kDynamicUpdateSlice, "dynamic-update-slice", kDataMovement) \
  V(kConcatenate, "concatenate", kDataMovement)                 \
  V(kPad, "pad", kDataMovement)                                 \
  V(kReverse, "reverse", kDataMovement)                         \
  V(kGather, "gather", kIndexing)                               \
  V(kScatter, "scatter", kIndexing)                             \
  V(kReduce, "reduce", kReduction)                              \
  V(kArgMax, "argmax", kReduction)                              \
  V(kArgMin, "argmin", kReduction)                              \
  V(kReduceWindow, "reduce-window", kReduction)                 \
  V(kDotGeneral, "dot-general", kContraction)                   \
  V(kConvolution, "convolution", kContraction)                  \
  V(kCustomCall, "custom-call", kOpaque)                        \
  V(kOptimizationBarrier, "optimization-barrier", kOpaque)      \
  V(kTuple, "tuple", kTuple)                                    \
  V(kGetTupleElement, "get-tuple-element", kTuple)              \
  V(kFusion, "fusion", kFusion)

enum class OpKind : uint8_t {
#define EMBER_OP_ENUM(e, name, cat) e,
  EMBER_OPS(EMBER_OP_ENUM)
#undef EMBER_OP_ENUM
};

std::string_view OpName(OpKind op);
std::optional<OpKind> ParseOpName(std::string_view name);
OpCategoryKind OpCategory(OpKind op);
// All ops, in declaration order (for tests that must cover every op).
const std::vector<OpKind>& AllOps();

inline bool IsUnary(OpKind op) { return OpCategory(op) == OpCategoryKind::kUnary; }
inline bool IsBinary(OpKind op) { return OpCategory(op) == OpCategoryKind::kBinary; }
// Unary, binary, select, clamp: output element i depends only on input element i.
inline bool IsElementwise(OpKind op) {
  auto c = OpCategory(op);
  return c == OpCategoryKind::kUnary || c == OpCategoryKind::kBinary ||
         c == OpCategoryKind::kElementwiseOther;
}
inline bool IsRng(OpKind op) { return OpCategory(op) == OpCategoryKind::kRng; }
// Ops no pass may merge, fold, duplicate or move values across. A fusion is
// opaque too: simplify, cse and constant-folding leave it alone (dce may
// still remove a dead one; the fusion pass creates them).
inline bool IsOpaqueToPasses(OpKind op) {
  return IsRng(op) || op == OpKind::kOptimizationBarrier || op == OpKind::kCustomCall ||
         op == OpKind::kFusion;
}

}  // namespace ember
