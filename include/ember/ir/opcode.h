// The op set of the IR, declared once (DESIGN §3), with each op's properties
// beside it (EMBER_OP_PROPERTIES: operand count, libm / vector math, element
// cost, short name). Text names are HLO's, kebab-case. Semantics are
// PyTorch's wherever an HLO name suggests otherwise; each op's operands,
// attributes and semantics are documented in docs/ir.md, its attributes
// declared in ember/ir/attributes.h.
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
  kElementwiseOther,  // select, clamp, fma
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
  V(kFma, "fma", kElementwiseOther)                             \
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

inline constexpr int kNumOps = 0
#define EMBER_OP_COUNT(e, name, cat) +1
    EMBER_OPS(EMBER_OP_COUNT)
#undef EMBER_OP_COUNT
    ;

// Property bits of EMBER_OP_PROPERTIES.
inline constexpr uint8_t kOpLibm = 1;        // generated code computes it by a libm call
inline constexpr uint8_t kOpVectorMath = 2;  // glibc's libmvec has a SIMD variant of that call
// The result shape is the declared one (shape inference checks it but cannot
// derive it: parameter, iota, rng, convert, broadcast-in-dim, reshape,
// custom-call, fusion); for every other op a declared shape must equal the
// inferred one.
inline constexpr uint8_t kOpDeclared = 4;
inline constexpr uint8_t kOpMathFn = kOpLibm | kOpVectorMath;
// Operand count without upper bound.
inline constexpr int kVariadic = -1;
// Element cost at and above which the cost model calls a value expensive
// (never duplicated, recomputed at most once per pass).
inline constexpr int kExpensiveElementCost = 4;

// Properties of each op, beside the op list and in its order (checked at
// compile time): V(enumerator, min operands, max operands (kVariadic: no
// bound), property bits, element cost, short name).
//  - element cost: rough work per result element for the fusion cost model
//    (src/passes/fusion_cost.h): 0 for constants and iota, 1 for plain
//    arithmetic, broadcast-in-dim and reshape, 2 for other data movement, 4
//    for division and a reduction (never recomputed), 20 for transcendental
//    functions (exp, log, sqrt, power, ...).
//  - short name: the op in kernel names (KernelName, ember/ir/kernel_name.h).
// clang-format off
#define EMBER_OP_PROPERTIES(V) \
  V(kParameter,            0, 0,         kOpDeclared,       1,  "parameter")             \
  V(kConstant,             0, 0,         0,                 0,  "constant")              \
  V(kIota,                 0, 0,         kOpDeclared,       0,  "iota")                  \
  V(kRngUniform,           2, 2,         kOpDeclared,       1,  "rng_uniform")           \
  V(kRngNormal,            2, 2,         kOpDeclared,       1,  "rng_normal")            \
  V(kNegate,               1, 1,         0,                 1,  "neg")                   \
  V(kAbs,                  1, 1,         0,                 1,  "abs")                   \
  V(kExp,                  1, 1,         kOpMathFn,         20, "exp")                   \
  V(kLog,                  1, 1,         kOpMathFn,         20, "log")                   \
  V(kLog1p,                1, 1,         kOpMathFn,         20, "log1p")                 \
  V(kExpm1,                1, 1,         kOpMathFn,         20, "expm1")                 \
  V(kSqrt,                 1, 1,         0,                 20, "sqrt")                  \
  V(kRsqrt,                1, 1,         0,                 20, "rsqrt")                 \
  V(kTanh,                 1, 1,         kOpMathFn,         20, "tanh")                  \
  V(kLogistic,             1, 1,         kOpMathFn,         20, "logistic")              \
  V(kSin,                  1, 1,         kOpMathFn,         20, "sin")                   \
  V(kCos,                  1, 1,         kOpMathFn,         20, "cos")                   \
  V(kErf,                  1, 1,         kOpMathFn,         20, "erf")                   \
  V(kFloor,                1, 1,         0,                 1,  "floor")                 \
  V(kCeil,                 1, 1,         0,                 1,  "ceil")                  \
  V(kRoundNearestEven,     1, 1,         0,                 1,  "round")                 \
  V(kSign,                 1, 1,         0,                 1,  "sign")                  \
  V(kNot,                  1, 1,         0,                 1,  "not")                   \
  V(kConvert,              1, 1,         kOpDeclared,       1,  "cvt")                   \
  V(kAdd,                  2, 2,         0,                 1,  "add")                   \
  V(kSubtract,             2, 2,         0,                 1,  "sub")                   \
  V(kMultiply,             2, 2,         0,                 1,  "mul")                   \
  V(kDivide,               2, 2,         0,                 4,  "div")                   \
  V(kRemainder,            2, 2,         kOpLibm,           4,  "rem")                   \
  V(kPower,                2, 2,         kOpMathFn,         20, "pow")                   \
  V(kMaximum,              2, 2,         0,                 1,  "max")                   \
  V(kMinimum,              2, 2,         0,                 1,  "min")                   \
  V(kAtan2,                2, 2,         kOpMathFn,         20, "atan2")                 \
  V(kAnd,                  2, 2,         0,                 1,  "and")                   \
  V(kOr,                   2, 2,         0,                 1,  "or")                    \
  V(kXor,                  2, 2,         0,                 1,  "xor")                   \
  V(kCompare,              2, 2,         0,                 1,  "cmp")                   \
  V(kShiftLeft,            2, 2,         0,                 1,  "shl")                   \
  V(kShiftRightArithmetic, 2, 2,         0,                 1,  "shra")                  \
  V(kShiftRightLogical,    2, 2,         0,                 1,  "shrl")                  \
  V(kSelect,               3, 3,         0,                 1,  "select")                \
  V(kClamp,                3, 3,         0,                 1,  "clamp")                 \
  V(kFma,                  3, 3,         0,                 1,  "fma")                   \
  V(kBroadcastInDim,       1, 1,         kOpDeclared,       1,  "bcast")                 \
  V(kReshape,              1, 1,         kOpDeclared,       1,  "reshape")               \
  V(kTranspose,            1, 1,         0,                 2,  "transpose")             \
  V(kSlice,                1, 1,         0,                 2,  "slice")                 \
  V(kDynamicSlice,         1, kVariadic, 0,                 2,  "dynamic_slice")         \
  V(kDynamicUpdateSlice,   2, kVariadic, 0,                 2,  "dynamic_update_slice")  \
  V(kConcatenate,          1, kVariadic, 0,                 2,  "concat")                \
  V(kPad,                  2, 2,         0,                 2,  "pad")                   \
  V(kReverse,              1, 1,         0,                 2,  "reverse")               \
  V(kGather,               2, 2,         0,                 1,  "gather")                \
  V(kScatter,              3, 3,         0,                 1,  "scatter")               \
  V(kReduce,               1, 1,         0,                 4,  "reduce")                \
  V(kArgMax,               1, 1,         0,                 1,  "argmax")                \
  V(kArgMin,               1, 1,         0,                 1,  "argmin")                \
  V(kReduceWindow,         1, 1,         0,                 1,  "reduce_window")         \
  V(kDotGeneral,           2, 2,         0,                 1,  "dot_general")           \
  V(kConvolution,          2, 2,         0,                 1,  "convolution")           \
  V(kCustomCall,           0, kVariadic, kOpDeclared,       1,  "custom_call")           \
  V(kOptimizationBarrier,  1, kVariadic, 0,                 1,  "optimization_barrier")  \
  V(kTuple,                0, kVariadic, 0,                 1,  "tuple")                 \
  V(kGetTupleElement,      1, 1,         0,                 1,  "get_tuple_element")     \
  V(kFusion,               0, kVariadic, kOpDeclared,       1,  "fusion")
// clang-format on

struct OpProperties {
  int8_t min_operands;
  int8_t max_operands;  // kVariadic: no bound
  uint8_t bits;
  int8_t element_cost;
  std::string_view short_name;
};

inline constexpr OpProperties kOpProperties[] = {
#define EMBER_OP_PROPERTY(e, lo, hi, bits, cost, short_name) {lo, hi, bits, cost, short_name},
    EMBER_OP_PROPERTIES(EMBER_OP_PROPERTY)
#undef EMBER_OP_PROPERTY
};

namespace op_internal {
inline constexpr OpKind kPropertyOrder[] = {
#define EMBER_OP_PROPERTY_ORDER(e, lo, hi, bits, cost, short_name) OpKind::e,
    EMBER_OP_PROPERTIES(EMBER_OP_PROPERTY_ORDER)
#undef EMBER_OP_PROPERTY_ORDER
};
constexpr bool PropertiesFollowTheOpList() {
  for (int i = 0; i < kNumOps; ++i)
    if (kPropertyOrder[i] != static_cast<OpKind>(i)) return false;
  return true;
}
static_assert(sizeof(kPropertyOrder) / sizeof(kPropertyOrder[0]) == kNumOps &&
                  PropertiesFollowTheOpList(),
              "EMBER_OP_PROPERTIES lists every op of EMBER_OPS once, in its order");
}  // namespace op_internal

std::string_view OpName(OpKind op);
std::optional<OpKind> ParseOpName(std::string_view name);
OpCategoryKind OpCategory(OpKind op);
// All ops, in declaration order (for tests that must cover every op).
const std::vector<OpKind>& AllOps();

inline const OpProperties& Properties(OpKind op) { return kOpProperties[static_cast<int>(op)]; }
inline int MinOperands(OpKind op) { return Properties(op).min_operands; }
inline int MaxOperands(OpKind op) { return Properties(op).max_operands; }
inline bool CallsLibm(OpKind op) { return (Properties(op).bits & kOpLibm) != 0; }
inline bool HasVectorMath(OpKind op) { return (Properties(op).bits & kOpVectorMath) != 0; }
inline bool ResultIsDeclared(OpKind op) { return (Properties(op).bits & kOpDeclared) != 0; }
inline int64_t ElementCost(OpKind op) { return Properties(op).element_cost; }
inline std::string_view ShortOpName(OpKind op) { return Properties(op).short_name; }

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
