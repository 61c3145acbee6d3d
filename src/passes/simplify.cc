#include "passes/simplify.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "ember/ir/attributes.h"
#include "passes/rewriter.h"

namespace ember::passes {
namespace {

// A rule returns the replacement of `n` in the new graph, or kNoMatch.
constexpr NodeId kNoMatch = kCopyNode;
using RuleFn = NodeId (*)(const Node& n, Rewriter& rw);

// ---------------------------------------------------------------------------
// Helpers: operands in the new graph, splat constants.
// ---------------------------------------------------------------------------

// New-graph id / node of operand i of old node `n`.
NodeId In(const Node& n, const Rewriter& rw, int i) { return rw.Map(n.operands[i]); }
const Node& InNode(const Node& n, const Rewriter& rw, int i) { return rw.NewNode(In(n, rw, i)); }

enum class ValueKind {
  kZero,      // +0.0 for floats, 0 for integers, false for pred
  kNegZero,   // -0.0 for floats, 0 for integers (the additive identity)
  kOne,       // 1 (true for pred)
  kMinusOne,  // -1 (floats and signed integers only)
  kAllOnes,   // every bit set: integers (-1 / max unsigned) and true
};

bool ElementIs(const Literal& lit, int64_t i, ValueKind k) {
  const DType t = lit.dtype();
  if (IsComplex(t)) return false;
  if (IsFloat(t)) {
    const double v = lit.GetDouble(i);
    switch (k) {
      case ValueKind::kZero:
        return v == 0 && !std::signbit(v);
      case ValueKind::kNegZero:
        return v == 0 && std::signbit(v);
      case ValueKind::kOne:
        return v == 1;
      case ValueKind::kMinusOne:
        return v == -1;
      case ValueKind::kAllOnes:
        return false;
    }
    return false;
  }
  // Integers and pred: compare the raw element bits.
  const int size = DTypeSize(t);
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const uint8_t*>(lit.data()) + i * size, size);
  const uint64_t all = size == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * size)) - 1;
  switch (k) {
    case ValueKind::kZero:
    case ValueKind::kNegZero:
      return bits == 0;
    case ValueKind::kOne:
      return bits == 1;
    case ValueKind::kMinusOne:
      return IsSignedInt(t) && bits == all;
    case ValueKind::kAllOnes:
      return IsPred(t) ? bits == 1 : bits == all;
  }
  return false;
}

// Whether every element of new-graph node `id` is `k`: a constant, or a
// broadcast-in-dim / reshape of one.
bool IsSplat(const Rewriter& rw, NodeId id, ValueKind k) {
  const Node& n = rw.NewNode(id);
  if (n.op == OpKind::kBroadcastInDim || n.op == OpKind::kReshape) {
    return IsSplat(rw, n.operands[0], k);
  }
  if (n.op != OpKind::kConstant || !n.literal) return false;
  const Literal& lit = *n.literal;
  for (int64_t i = 0; i < lit.num_elements(); ++i) {
    if (!ElementIs(lit, i, k)) return false;
  }
  return true;
}

// The additive identity of `t`: x + (-0.0) == x for every float x (even
// -0.0), while x + 0.0 turns -0.0 into +0.0.
ValueKind AdditiveIdentity(DType t) { return IsFloat(t) ? ValueKind::kNegZero : ValueKind::kZero; }

// Adds a constant of `shape` whose every element is `k` (integers and pred:
// kZero, kOne, kAllOnes), as a broadcast of a scalar.
NodeId MakeSplat(Rewriter& rw, const Shape& shape, ValueKind k) {
  Literal scalar(Shape(shape.dtype(), {}));
  uint8_t* p = static_cast<uint8_t*>(scalar.data());
  std::memset(p, 0, DTypeSize(shape.dtype()));
  if (k == ValueKind::kOne || (k == ValueKind::kAllOnes && IsPred(shape.dtype()))) {
    p[0] = 1;  // little-endian integer 1 / pred true
  } else if (k == ValueKind::kAllOnes) {
    std::memset(p, 0xff, DTypeSize(shape.dtype()));
  }
  NodeId c = rw.builder().Constant(std::move(scalar));
  if (shape.rank() == 0) return c;
  return rw.builder().BroadcastInDim(c, shape.dims(), {});
}

bool IsIntOrPred(DType t) { return IsInteger(t) || IsPred(t); }

bool IsIdentityPermutation(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Arithmetic identities
// ---------------------------------------------------------------------------

// x*1 => x, 1*x => x
NodeId MulOne(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kMultiply) return kNoMatch;
  if (IsSplat(rw, In(n, rw, 1), ValueKind::kOne)) return In(n, rw, 0);
  if (IsSplat(rw, In(n, rw, 0), ValueKind::kOne)) return In(n, rw, 1);
  return kNoMatch;
}

// x/1 => x
NodeId DivOne(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kDivide) return kNoMatch;
  if (IsSplat(rw, In(n, rw, 1), ValueKind::kOne)) return In(n, rw, 0);
  return kNoMatch;
}

// x + (-0.0) => x, (-0.0) + x => x (floats; -0.0 + +0.0 = +0.0, so not x + 0.0)
// x + 0 => x, 0 + x => x (integers)
NodeId AddZero(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kAdd) return kNoMatch;
  const ValueKind zero = AdditiveIdentity(n.shape.dtype());
  if (IsSplat(rw, In(n, rw, 1), zero)) return In(n, rw, 0);
  if (IsSplat(rw, In(n, rw, 0), zero)) return In(n, rw, 1);
  return kNoMatch;
}

// x - (+0.0) => x (floats: x - 0.0 == x + (-0.0)); x - 0 => x (integers)
NodeId SubZero(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kSubtract) return kNoMatch;
  if (IsSplat(rw, In(n, rw, 1), ValueKind::kZero)) return In(n, rw, 0);
  return kNoMatch;
}

// x*(-1) => neg(x), (-1)*x => neg(x) (floats and signed integers; wraps alike)
NodeId MulMinusOne(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kMultiply) return kNoMatch;
  for (int i : {1, 0}) {
    if (IsSplat(rw, In(n, rw, i), ValueKind::kMinusOne)) {
      return rw.builder().Negate(In(n, rw, 1 - i));
    }
  }
  return kNoMatch;
}

// x**1 => x
NodeId PowOne(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kPower) return kNoMatch;
  if (IsSplat(rw, In(n, rw, 1), ValueKind::kOne)) return In(n, rw, 0);
  return kNoMatch;
}

// x - x => 0 (integers only: for floats inf - inf and NaN - NaN are NaN)
NodeId SubSelfInt(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kSubtract || !IsInteger(n.shape.dtype())) return kNoMatch;
  if (In(n, rw, 0) != In(n, rw, 1)) return kNoMatch;
  return MakeSplat(rw, n.shape, ValueKind::kZero);
}

// x*0 => 0, 0*x => 0 (integers only: for floats NaN*0 and inf*0 are NaN, -1*0 = -0)
NodeId MulZeroInt(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kMultiply || !IsInteger(n.shape.dtype())) return kNoMatch;
  if (IsSplat(rw, In(n, rw, 0), ValueKind::kZero) || IsSplat(rw, In(n, rw, 1), ValueKind::kZero)) {
    return MakeSplat(rw, n.shape, ValueKind::kZero);
  }
  return kNoMatch;
}

// max(x,x) => x, min(x,x) => x, and(x,x) => x, or(x,x) => x
NodeId IdempotentBinary(const Node& n, Rewriter& rw) {
  switch (n.op) {
    case OpKind::kMaximum:
    case OpKind::kMinimum:
    case OpKind::kAnd:
    case OpKind::kOr:
      break;
    default:
      return kNoMatch;
  }
  if (In(n, rw, 0) == In(n, rw, 1)) return In(n, rw, 0);
  return kNoMatch;
}

// xor(x,x) => 0 (integers and pred)
NodeId XorSelf(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kXor || In(n, rw, 0) != In(n, rw, 1)) return kNoMatch;
  return MakeSplat(rw, n.shape, ValueKind::kZero);
}

// or(x,0) => x, xor(x,0) => x, and(x,~0) => x (and the mirrored operand orders)
NodeId BitwiseIdentity(const Node& n, Rewriter& rw) {
  ValueKind identity;
  switch (n.op) {
    case OpKind::kOr:
    case OpKind::kXor:
      identity = ValueKind::kZero;
      break;
    case OpKind::kAnd:
      identity = ValueKind::kAllOnes;
      break;
    default:
      return kNoMatch;
  }
  if (IsSplat(rw, In(n, rw, 1), identity)) return In(n, rw, 0);
  if (IsSplat(rw, In(n, rw, 0), identity)) return In(n, rw, 1);
  return kNoMatch;
}

// and(x,0) => 0, or(x,~0) => ~0 (and the mirrored operand orders)
NodeId BitwiseAbsorb(const Node& n, Rewriter& rw) {
  ValueKind absorbing;
  switch (n.op) {
    case OpKind::kAnd:
      absorbing = ValueKind::kZero;
      break;
    case OpKind::kOr:
      absorbing = ValueKind::kAllOnes;
      break;
    default:
      return kNoMatch;
  }
  if (IsSplat(rw, In(n, rw, 0), absorbing) || IsSplat(rw, In(n, rw, 1), absorbing)) {
    return MakeSplat(rw, n.shape, absorbing);
  }
  return kNoMatch;
}

// compare(x, x) => EQ/LE/GE: true, NE/LT/GT: false (integers and pred only:
// a float NaN is unequal to itself)
NodeId CompareSelf(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kCompare || In(n, rw, 0) != In(n, rw, 1)) return kNoMatch;
  if (!IsIntOrPred(InNode(n, rw, 0).shape.dtype())) return kNoMatch;
  auto dir = attr::Direction.Find(n.attrs);
  if (!dir) return kNoMatch;
  const bool holds =
      *dir == ComparisonKind::kEq || *dir == ComparisonKind::kLe || *dir == ComparisonKind::kGe;
  return MakeSplat(rw, n.shape, holds ? ValueKind::kOne : ValueKind::kZero);
}

// ---------------------------------------------------------------------------
// Unary chains
// ---------------------------------------------------------------------------

// neg(neg(x)) => x (integers wrap: -(-INT_MIN) == INT_MIN)
NodeId NegNeg(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kNegate) return kNoMatch;
  const Node& inner = InNode(n, rw, 0);
  if (inner.op != OpKind::kNegate) return kNoMatch;
  return inner.operands[0];
}

// not(not(x)) => x
NodeId NotNot(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kNot) return kNoMatch;
  const Node& inner = InNode(n, rw, 0);
  if (inner.op != OpKind::kNot) return kNoMatch;
  return inner.operands[0];
}

// abs(abs(x)) => abs(x); abs(neg(x)) => abs(x) (floats and signed integers;
// for unsigned integers abs is the identity and neg is not)
NodeId AbsOfAbsOrNeg(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kAbs) return kNoMatch;
  const Node& inner = InNode(n, rw, 0);
  if (inner.op == OpKind::kAbs) return inner.id;
  if (inner.op == OpKind::kNegate && !IsUnsignedInt(n.shape.dtype())) {
    return rw.builder().Unary(OpKind::kAbs, inner.operands[0]);
  }
  return kNoMatch;
}

bool IsRounding(OpKind op) {
  return op == OpKind::kFloor || op == OpKind::kCeil || op == OpKind::kRoundNearestEven;
}

// floor(r(x)) => r(x), ceil(r(x)) => r(x), round(r(x)) => r(x)
// for r in {floor, ceil, round}: r(x) is integral, inf, NaN or a signed zero,
// all of which every rounding op returns unchanged.
NodeId RoundingOfIntegral(const Node& n, Rewriter& rw) {
  if (!IsRounding(n.op)) return kNoMatch;
  const Node& inner = InNode(n, rw, 0);
  if (!IsRounding(inner.op)) return kNoMatch;
  return inner.id;
}

// sign(sign(x)) => sign(x) (sign yields -1, 0 or 1 (NaN -> 0), each its own sign)
NodeId SignSign(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kSign) return kNoMatch;
  const Node& inner = InNode(n, rw, 0);
  if (inner.op != OpKind::kSign) return kNoMatch;
  return inner.id;
}

// ---------------------------------------------------------------------------
// select
// ---------------------------------------------------------------------------

// select(true, a, b) => a, select(false, a, b) => b
NodeId SelectConstant(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kSelect) return kNoMatch;
  if (IsSplat(rw, In(n, rw, 0), ValueKind::kOne)) return In(n, rw, 1);
  if (IsSplat(rw, In(n, rw, 0), ValueKind::kZero)) return In(n, rw, 2);
  return kNoMatch;
}

// select(p, a, a) => a
NodeId SelectSame(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kSelect || In(n, rw, 1) != In(n, rw, 2)) return kNoMatch;
  return In(n, rw, 1);
}

// select(not(p), a, b) => select(p, b, a)
NodeId SelectNot(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kSelect) return kNoMatch;
  const Node& p = InNode(n, rw, 0);
  if (p.op != OpKind::kNot) return kNoMatch;
  return rw.builder().Select(p.operands[0], In(n, rw, 2), In(n, rw, 1));
}

// ---------------------------------------------------------------------------
// convert
// ---------------------------------------------------------------------------

int SignificandBits(DType t) {
  switch (t) {
    case DType::kF16:
      return 11;
    case DType::kBF16:
      return 8;
    case DType::kF32:
      return 24;
    case DType::kF64:
      return 53;
    default:
      return 0;
  }
}

// Whether every value of `from` is exactly representable in `to` (so a
// convert from -> to loses nothing, -0.0, inf and NaN included).
bool ConvertIsExact(DType from, DType to) {
  if (from == to) return true;
  if (IsComplex(from) || IsComplex(to)) return false;
  if (IsPred(from)) return true;  // 0 and 1 fit every real type
  if (IsPred(to)) return false;
  if (IsInteger(from) && IsInteger(to)) {
    if (IsSignedInt(from) == IsSignedInt(to)) return BitWidth(to) >= BitWidth(from);
    return IsUnsignedInt(from) && BitWidth(to) > BitWidth(from);
  }
  if (IsInteger(from) && IsFloat(to)) {
    const int needed = IsSignedInt(from) ? BitWidth(from) - 1 : BitWidth(from);
    return needed <= SignificandBits(to);
  }
  if (IsFloat(from) && IsFloat(to)) {
    if (to == DType::kF64) return true;
    return to == DType::kF32 && (from == DType::kF16 || from == DType::kBF16);
  }
  return false;  // float -> integer
}

// Values of these types are all exact f32 values.
bool FitsF32(DType t) { return ConvertIsExact(t, DType::kF32); }

// convert(x) to x's own dtype => x
NodeId ConvertNoop(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kConvert) return kNoMatch;
  if (InNode(n, rw, 0).shape.dtype() != n.shape.dtype()) return kNoMatch;
  return In(n, rw, 0);
}

// convert(convert(x, T1), T2) => convert(x, T2) when x -> T1 is exact (a
// widening: the inner convert keeps x's value, and every convert is a
// function of the value). Into f16/bf16 only when x's values are f32 values,
// so no path can round twice.
NodeId ConvertChain(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kConvert) return kNoMatch;
  const Node& inner = InNode(n, rw, 0);
  if (inner.op != OpKind::kConvert) return kNoMatch;
  const NodeId x = inner.operands[0];
  const DType from = rw.NewNode(x).shape.dtype();
  const DType to = n.shape.dtype();
  if (!ConvertIsExact(from, inner.shape.dtype())) return kNoMatch;
  if ((to == DType::kF16 || to == DType::kBF16) && !FitsF32(from)) return kNoMatch;
  if (IsComplex(to)) return kNoMatch;
  if (from == to) return x;
  return rw.builder().Convert(x, to);
}

// ---------------------------------------------------------------------------
// Data movement
// ---------------------------------------------------------------------------

// reshape(x) to x's shape => x
NodeId ReshapeNoop(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kReshape || InNode(n, rw, 0).shape != n.shape) return kNoMatch;
  return In(n, rw, 0);
}

// reshape(reshape(x)) => reshape(x) (row-major order is kept by both)
NodeId ReshapeReshape(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kReshape) return kNoMatch;
  const Node& inner = InNode(n, rw, 0);
  if (inner.op != OpKind::kReshape) return kNoMatch;
  const NodeId x = inner.operands[0];
  if (rw.NewNode(x).shape == n.shape) return x;
  return rw.builder().Reshape(x, n.shape.dims());
}

// transpose(x, {0,1,...,r-1}) => x
NodeId TransposeIdentity(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kTranspose || !IsIdentityPermutation(attr::Dimensions(n))) return kNoMatch;
  return In(n, rw, 0);
}

// transpose(transpose(x, p1), p2) => transpose(x, p) with p[i] = p1[p2[i]]
// (=> x when p is the identity)
NodeId TransposeTranspose(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kTranspose) return kNoMatch;
  const Node& inner = InNode(n, rw, 0);
  if (inner.op != OpKind::kTranspose) return kNoMatch;
  const std::vector<int64_t> p1 = attr::Dimensions(inner), p2 = attr::Dimensions(n);
  std::vector<int64_t> p(p2.size());
  for (size_t i = 0; i < p2.size(); ++i) p[i] = p1[p2[i]];
  if (IsIdentityPermutation(p)) return inner.operands[0];
  return rw.builder().Transpose(inner.operands[0], p);
}

// broadcast-in-dim(x) to x's shape with dimensions {0,1,...} => x
NodeId BroadcastIdentity(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kBroadcastInDim || InNode(n, rw, 0).shape != n.shape) return kNoMatch;
  if (!IsIdentityPermutation(attr::Dimensions(n))) return kNoMatch;
  return In(n, rw, 0);
}

// broadcast-in-dim(broadcast-in-dim(x, b1), b2) => broadcast-in-dim(x, b)
// with b[k] = b2[b1[k]]
NodeId BroadcastBroadcast(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kBroadcastInDim) return kNoMatch;
  const Node& inner = InNode(n, rw, 0);
  if (inner.op != OpKind::kBroadcastInDim) return kNoMatch;
  const std::vector<int64_t> b1 = attr::Dimensions(inner), b2 = attr::Dimensions(n);
  std::vector<int64_t> b(b1.size());
  for (size_t k = 0; k < b1.size(); ++k) b[k] = b2[b1[k]];
  return rw.builder().BroadcastInDim(inner.operands[0], n.shape.dims(), b);
}

// broadcast-in-dim(reshape(x), D) => broadcast-in-dim(x, D') when the
// reshape only inserts or removes size-1 dims and x has none (e.g. a
// keepdim reduction f32[16] -> f32[16,1] broadcast back to f32[16,10]):
// D' maps x's i-th dim to where D maps the reshape's i-th non-unit dim.
// The rewritten broadcast is a plain row broadcast that fusion can keep per
// row (docs/architecture.md "Fusion").
NodeId BroadcastOfUnitReshape(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kBroadcastInDim) return kNoMatch;
  const Node& inner = InNode(n, rw, 0);
  if (inner.op != OpKind::kReshape) return kNoMatch;
  const NodeId x = inner.operands[0];
  const Shape& xs = rw.NewNode(x).shape;
  if (xs.is_tuple() || inner.shape.is_tuple()) return kNoMatch;
  for (int64_t d : xs.dims()) {
    if (d == 1) return kNoMatch;
  }
  const std::vector<int64_t> b = attr::Dimensions(n);
  std::vector<int64_t> mapped;
  for (int j = 0; j < inner.shape.rank(); ++j) {
    if (inner.shape.dim(j) != 1) mapped.push_back(b[j]);
  }
  if (static_cast<int>(mapped.size()) != xs.rank()) return kNoMatch;
  for (int i = 0; i < xs.rank(); ++i) {
    if (n.shape.dim(mapped[i]) != xs.dim(i)) return kNoMatch;  // the reshape reorders sizes
  }
  return rw.builder().BroadcastInDim(x, n.shape.dims(), mapped);
}

// elementwise(reshape(a), ..., broadcast-in-dim(scalar), ...) =>
// reshape(elementwise(a, ..., broadcast-in-dim(scalar, a's dims), ...)) when
// every reshape operand only inserts size-1 dims into an `a` of one shape
// with none (XLA's reshape mover, for the keepdim case): a keepdim statistic
// such as a layer norm's mean, f32[4,32] -> f32[4,32,1] then divided by the
// element count, is computed on f32[4,32]; the reshape moves to the end of
// the chain, where broadcast-of-unit-reshape turns its broadcast back into a
// row broadcast, so the whole norm can be one row fusion. Same ops on the
// same values, so the same bits.
NodeId ElementwiseOfUnitReshape(const Node& n, Rewriter& rw) {
  if (!IsElementwise(n.op) || n.shape.is_tuple() || n.operands.empty()) return kNoMatch;
  const std::vector<int64_t>& dims = n.shape.dims();
  std::vector<int64_t> inner;
  for (int64_t d : dims)
    if (d != 1) inner.push_back(d);
  if (inner.size() == dims.size()) return kNoMatch;  // no unit dim to drop
  std::vector<NodeId> ops;
  bool any_reshape = false;
  for (size_t i = 0; i < n.operands.size(); ++i) {
    const Node& o = InNode(n, rw, static_cast<int>(i));
    if (o.shape.is_tuple() || o.shape.dims() != dims) return kNoMatch;
    if (o.op == OpKind::kReshape && rw.NewNode(o.operands[0]).shape.dims() == inner) {
      ops.push_back(o.operands[0]);
      any_reshape = true;
    } else if (o.op == OpKind::kBroadcastInDim && rw.NewNode(o.operands[0]).shape.rank() == 0) {
      ops.push_back(rw.builder().BroadcastInDim(o.operands[0], inner, {}));
    } else {
      return kNoMatch;
    }
  }
  if (!any_reshape) return kNoMatch;
  GraphBuilder& b = rw.builder();
  const NodeId e = b.AddNode(n.op, std::move(ops), n.attrs, Shape(n.shape.dtype(), inner),
                             n.literal, n.metadata, n.called);
  return b.Reshape(e, dims);
}

// dot-general(transpose(a, p), b) => dot-general(a, b) with the lhs batch
// and contracting dims mapped through p (likewise for the rhs), when p keeps
// the free dims in order (the result lists free dims in operand order, so
// its layout is unchanged). This saves the kernel that would materialize
// the transpose, not the copy: the dot-general extern still hands the GEMM
// its operands in one canonical row-major form, copying them when they are
// not (docs/architecture.md, "Same program, same bits").
NodeId DotOfTranspose(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kDotGeneral) return kNoMatch;
  DotDims dims = DotDimsOf(n);
  NodeId ops[2] = {In(n, rw, 0), In(n, rw, 1)};
  bool changed = false;
  for (int side = 0; side < 2; ++side) {
    const Node& t = rw.NewNode(ops[side]);
    if (t.op != OpKind::kTranspose) continue;
    const std::vector<int64_t> p = attr::Dimensions(t);
    std::vector<int64_t>& batch = side == 0 ? dims.lhs_batch : dims.rhs_batch;
    std::vector<int64_t>& contracting = side == 0 ? dims.lhs_contracting : dims.rhs_contracting;
    std::vector<bool> bound(p.size(), false);
    for (int64_t d : batch) bound[d] = true;
    for (int64_t d : contracting) bound[d] = true;
    int64_t last = -1;
    bool ordered = true;
    for (size_t d = 0; d < p.size(); ++d) {
      if (bound[d]) continue;
      ordered = ordered && p[d] > last;
      last = p[d];
    }
    if (!ordered) continue;
    for (int64_t& d : batch) d = p[d];
    for (int64_t& d : contracting) d = p[d];
    ops[side] = t.operands[0];
    changed = true;
  }
  if (!changed) return kNoMatch;
  return rw.builder().DotGeneral(ops[0], ops[1], dims, n.shape.dtype());
}

// slice(x) from 0 covering all of x => x (a stride > 1 then only on size-1 dims)
NodeId SliceFull(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kSlice || InNode(n, rw, 0).shape != n.shape) return kNoMatch;
  for (int64_t s : attr::Start(n)) {
    if (s != 0) return kNoMatch;
  }
  return In(n, rw, 0);
}

// concatenate(x) => x
NodeId ConcatSingle(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kConcatenate || n.operands.size() != 1) return kNoMatch;
  return In(n, rw, 0);
}

// pad(x, v) with low = high = interior = 0 everywhere => x
NodeId PadZero(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kPad) return kNoMatch;
  for (const attr::IntsAttr& a : {attr::Low, attr::High, attr::Interior}) {
    for (int64_t v : a(n)) {
      if (v != 0) return kNoMatch;
    }
  }
  return In(n, rw, 0);
}

// reverse(reverse(x, D1), D2) => reverse(x, D1 xor D2); reverse(x, D) => x
// when every dim in D has size <= 1
NodeId ReverseSimplify(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kReverse) return kNoMatch;
  NodeId x = In(n, rw, 0);
  std::set<int64_t> dims;
  for (int64_t d : attr::Dimensions(n)) dims.insert(d);
  bool folded_inner = false;
  const Node& inner = rw.NewNode(x);
  if (inner.op == OpKind::kReverse) {
    for (int64_t d : attr::Dimensions(inner)) {
      if (!dims.erase(d)) dims.insert(d);
    }
    x = inner.operands[0];
    folded_inner = true;
  }
  std::vector<int64_t> kept;
  for (int64_t d : dims) {
    if (n.shape.dim(static_cast<int>(d)) > 1) kept.push_back(d);
  }
  if (kept.empty()) return x;
  if (!folded_inner && kept.size() == attr::Dimensions(n).size()) return kNoMatch;
  return rw.builder().Reverse(x, kept);
}

// get-tuple-element(tuple(x0, ..., xn), i) => xi (never through an
// optimization-barrier: that would move a value across the barrier)
NodeId GteOfTuple(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kGetTupleElement) return kNoMatch;
  const Node& t = InNode(n, rw, 0);
  if (t.op != OpKind::kTuple) return kNoMatch;
  const int64_t i = attr::Index(n, -1);
  if (i < 0 || i >= static_cast<int64_t>(t.operands.size())) return kNoMatch;
  return t.operands[i];
}

// reduce(x) over no dims => x; over dims of size 1 only => reshape(x)
// (each result element reduces one element: identity (op) x == x for
// multiply (1), maximum (-inf, NaN kept), minimum (+inf), and, or, and
// integer add. Not float add: a backend that starts sums from +0.0 turns a
// lone -0.0 into +0.0, so whether sum({-0.0}) is -0.0 depends on the
// implementation; the rule stays out of that question.)
NodeId ReduceTrivial(const Node& n, Rewriter& rw) {
  if (n.op != OpKind::kReduce) return kNoMatch;
  if (IsFloat(n.shape.dtype()) && attr::ToApply(n) == ReduceKind::kAdd) return kNoMatch;
  const NodeId x = In(n, rw, 0);
  const Shape& xs = rw.NewNode(x).shape;
  for (int64_t d : attr::Dimensions(n)) {
    if (xs.dim(static_cast<int>(d)) != 1) return kNoMatch;
  }
  if (xs == n.shape) return x;
  return rw.builder().Reshape(x, n.shape.dims());
}

struct Rule {
  const char* name;
  RuleFn fn;
};

// The rule list, tried in order; the first that matches rewrites the node.
const std::vector<Rule>& Rules() {
  static const std::vector<Rule> rules = {
      {"mul-one", MulOne},
      {"div-one", DivOne},
      {"add-zero", AddZero},
      {"sub-zero", SubZero},
      {"mul-zero-int", MulZeroInt},
      {"mul-minus-one", MulMinusOne},
      {"pow-one", PowOne},
      {"sub-self-int", SubSelfInt},
      {"idempotent-binary", IdempotentBinary},
      {"xor-self", XorSelf},
      {"bitwise-identity", BitwiseIdentity},
      {"bitwise-absorb", BitwiseAbsorb},
      {"compare-self-int", CompareSelf},
      {"neg-neg", NegNeg},
      {"not-not", NotNot},
      {"abs-of-abs-or-neg", AbsOfAbsOrNeg},
      {"rounding-of-integral", RoundingOfIntegral},
      {"sign-sign", SignSign},
      {"select-constant", SelectConstant},
      {"select-same", SelectSame},
      {"select-not", SelectNot},
      {"convert-noop", ConvertNoop},
      {"convert-chain", ConvertChain},
      {"reshape-noop", ReshapeNoop},
      {"reshape-reshape", ReshapeReshape},
      {"transpose-identity", TransposeIdentity},
      {"transpose-transpose", TransposeTranspose},
      {"broadcast-identity", BroadcastIdentity},
      {"broadcast-broadcast", BroadcastBroadcast},
      {"broadcast-of-unit-reshape", BroadcastOfUnitReshape},
      {"elementwise-of-unit-reshape", ElementwiseOfUnitReshape},
      {"dot-of-transpose", DotOfTranspose},
      {"slice-full", SliceFull},
      {"concat-single", ConcatSingle},
      {"pad-zero", PadZero},
      {"reverse", ReverseSimplify},
      {"reduce-trivial", ReduceTrivial},
      {"gte-of-tuple", GteOfTuple},
  };
  return rules;
}

}  // namespace

std::vector<std::string> SimplifyRuleNames() {
  std::vector<std::string> names;
  for (const Rule& r : Rules()) names.push_back(r.name);
  return names;
}

StatusOr<bool> SimplifyPass::Run(Graph& g) {
  return RewriteGraph(g, [&](const Node& n, Rewriter& rw) -> StatusOr<NodeId> {
    // rng ops, custom-call and optimization-barrier are never rewritten.
    if (IsOpaqueToPasses(n.op) || n.op == OpKind::kParameter) return kCopyNode;
    for (const Rule& rule : Rules()) {
      NodeId r = rule.fn(n, rw);
      if (r != kNoMatch) {
        ++fired_[rule.name];
        return r;
      }
    }
    return kCopyNode;
  });
}

}  // namespace ember::passes
