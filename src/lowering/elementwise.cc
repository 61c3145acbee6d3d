// Elementwise math: arithmetic (add/sub/rsub/mul/div with rounding modes,
// remainder, fmod, pow, maximum/minimum, atan2, logaddexp), unary math (neg, abs, sign,
// exp, log and friends, rounding), where, masked_fill, clamp, lerp,
// addcmul/addcdiv and casts. Semantics are eager PyTorch's on CPU
// (aten/src/ATen/native/cpu/BinaryOpsKernel.cpp, UnaryOpsKernel.cpp,
// TernaryOpsKernel.cpp, Lerp.h; formulas re-derived here, not copied).
#include <cmath>

#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLn10 = 2.30258509299404568402;

// ---- unary --------------------------------------------------------------

// Float math: the input is cast to the (floating) output dtype and computed
// in its computation type (exp of an int tensor is f32, as Meta says).
template <OpKind K>
LowerResult LowerFloatUnary(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("non-floating result");
  Ew e(b, out.dtype, out.sizes);
  NodeId r = b.Unary(K, e(x));
  return CheckOutputs(b, c, {Finish(b, r, out)});
}

enum class Composite {
  kExp2,
  kLog2,
  kLog10,
  kReciprocal,
  kTrunc,
  kFrac,
  kSquare,
  kNeg,
  kAbs,
  kSign,
  kFloor,
  kCeil,
  kRound,
  kBitwiseNot,
  kLogicalNot,
  kIsNan,
  kIsInf,
  kIsFinite,
  kIsPosInf,
  kIsNegInf,
  kSignBit,
  kRelu
};

NodeId Trunc(GraphBuilder& b, NodeId x, DType t, const std::vector<int64_t>& sizes) {
  if (!IsFloat(t)) return x;
  NodeId neg = b.Compare(x, Splat(b, t, 0, sizes), ComparisonKind::kLt);
  return b.Select(neg, b.Unary(OpKind::kCeil, x), b.Unary(OpKind::kFloor, x));
}

template <Composite K>
LowerResult LowerUnary(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  const OutputMeta& out = c.outputs.at(0);
  const auto& sz = out.sizes;
  switch (K) {
    case Composite::kExp2:
    case Composite::kLog2:
    case Composite::kLog10:
    case Composite::kReciprocal: {
      if (!IsFloat(out.dtype)) return Declined("non-floating result");
      Ew e(b, out.dtype, sz);
      NodeId v = e(x);
      NodeId r;
      if (K == Composite::kExp2)
        r = b.Binary(OpKind::kPower, e.Const(2), v);
      else if (K == Composite::kLog2)
        r = b.Divide(b.Unary(OpKind::kLog, v), e.Const(kLn2));
      else if (K == Composite::kLog10)
        r = b.Divide(b.Unary(OpKind::kLog, v), e.Const(kLn10));
      else
        r = b.Divide(e.Const(1), v);
      return CheckOutputs(b, c, {Finish(b, r, out)});
    }
    case Composite::kTrunc:
    case Composite::kFrac:
    case Composite::kSquare:
    case Composite::kNeg:
    case Composite::kAbs:
    case Composite::kSign:
    case Composite::kFloor:
    case Composite::kCeil:
    case Composite::kRound:
    case Composite::kRelu: {
      Ew e(b, out.dtype, sz);
      NodeId v = e(x);
      DType t = e.compute;
      NodeId r = kInvalidNode;
      if (K == Composite::kTrunc) r = Trunc(b, v, t, sz);
      if (K == Composite::kFrac) {
        if (!IsFloat(t)) return Declined("frac of integers");  // eager raises; Meta may not
        r = b.Subtract(v, Trunc(b, v, t, sz));
      }
      if (K == Composite::kSquare) r = b.Multiply(v, v);
      if (K == Composite::kNeg) r = b.Negate(v);
      if (K == Composite::kAbs) r = b.Unary(OpKind::kAbs, v);
      if (K == Composite::kSign) r = b.Unary(OpKind::kSign, v);
      if (K == Composite::kFloor) r = IsFloat(t) ? b.Unary(OpKind::kFloor, v) : v;
      if (K == Composite::kCeil) r = IsFloat(t) ? b.Unary(OpKind::kCeil, v) : v;
      if (K == Composite::kRound) r = IsFloat(t) ? b.Unary(OpKind::kRoundNearestEven, v) : v;
      if (K == Composite::kRelu) {
        // eager's relu is clamp_min(x, 0), which keeps x unless x < 0: NaN
        // propagates and -0.0 stays -0.0.
        NodeId zero = e.Const(0);
        r = b.Select(b.Compare(v, zero, ComparisonKind::kLt), zero, v);
      }
      return CheckOutputs(b, c, {Finish(b, r, out)});
    }
    case Composite::kBitwiseNot: {
      if (!IsInteger(x.dtype) && x.dtype != DType::kPred) return Declined("bitwise_not of floats");
      return CheckOutputs(b, c, {Finish(b, b.Unary(OpKind::kNot, x.id), out)});
    }
    case Composite::kLogicalNot: {
      NodeId z = b.Compare(x.id, Splat(b, x.dtype, 0, x.sizes), ComparisonKind::kEq);
      return CheckOutputs(b, c, {Finish(b, z, out)});
    }
    case Composite::kIsNan:
    case Composite::kIsInf:
    case Composite::kIsFinite:
    case Composite::kIsPosInf:
    case Composite::kIsNegInf:
    case Composite::kSignBit: {
      NodeId r;
      if (!IsFloat(x.dtype)) {
        bool v = K == Composite::kIsFinite;
        if (K == Composite::kSignBit) {
          r = IsSignedInt(x.dtype)
                  ? b.Compare(x.id, Splat(b, x.dtype, 0, x.sizes), ComparisonKind::kLt)
                  : Splat(b, DType::kPred, 0, x.sizes);
        } else {
          r = Splat(b, DType::kPred, v ? 1 : 0, x.sizes);
        }
      } else {
        DType t = ComputeType(x.dtype);
        NodeId v = ConvertTo(b, x.id, t);
        NodeId inf = Splat(b, t, INFINITY, x.sizes);
        if (K == Composite::kIsNan) r = b.Compare(v, v, ComparisonKind::kNe);
        if (K == Composite::kIsInf)
          r = b.Compare(b.Unary(OpKind::kAbs, v), inf, ComparisonKind::kEq);
        if (K == Composite::kIsFinite)
          r = b.Compare(b.Unary(OpKind::kAbs, v), inf, ComparisonKind::kLt);
        if (K == Composite::kIsPosInf) r = b.Compare(v, inf, ComparisonKind::kEq);
        if (K == Composite::kIsNegInf) r = b.Compare(v, b.Negate(inf), ComparisonKind::kEq);
        if (K == Composite::kSignBit) {
          // The sign bit: x < 0, or x is -0.0 (1/x = -inf), or a NaN with the
          // sign bit set — NaN signs are not observable through IR ops, so
          // NaN inputs are reported without a sign (eager: the bit itself).
          NodeId zero = Splat(b, t, 0, x.sizes);
          NodeId neg = b.Compare(v, zero, ComparisonKind::kLt);
          NodeId negzero =
              b.Binary(OpKind::kAnd, b.Compare(v, zero, ComparisonKind::kEq),
                       b.Compare(b.Divide(Splat(b, t, 1, x.sizes), v), zero, ComparisonKind::kLt));
          r = b.Binary(OpKind::kOr, neg, negzero);
        }
      }
      return CheckOutputs(b, c, {Finish(b, r, out)});
    }
  }
  return Declined("unhandled unary");
}

// ---- binary arithmetic -----------------------------------------------------

enum class Arith { kAdd, kSub, kRsub, kMul, kDiv, kRemainder, kFmod, kPow, kMax, kMin, kAtan2 };

template <Arith K>
LowerResult LowerArith(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val y, ValAt(c, 1));
  const OutputMeta& out = c.outputs.at(0);
  if (!ResultType({x, y})) return Declined("no common dtype");
  std::optional<Val> alpha;
  if (K == Arith::kAdd || K == Arith::kSub || K == Arith::kRsub) {
    EMBER_ASSIGN_OR_RETURN(alpha, OptValAt(c, 2));
  }
  if (K == Arith::kFmod && IsFloat(out.dtype))
    return Declined("fmod of floating values (no exact IR form)");
  if (K == Arith::kAtan2 && !IsFloat(out.dtype)) return Declined("atan2 of integers");
  Ew e(b, out.dtype, out.sizes);
  NodeId a = e(x), o = e(y), r = kInvalidNode;
  // With alpha, eager computes self + alpha * other as one fused multiply-add
  // (sub: alpha negated; rsub: other - alpha * self).
  auto with_alpha = [&](NodeId base, NodeId v, bool negate) {
    if (!alpha) return negate ? b.Subtract(base, v) : b.Add(base, v);
    NodeId al = e(*alpha);
    if (negate) al = b.Unary(OpKind::kNegate, al);
    return e.MulAdd(v, al, base);
  };
  switch (K) {
    case Arith::kAdd:
      r = with_alpha(a, o, false);
      break;
    case Arith::kSub:
      r = with_alpha(a, o, true);
      break;
    case Arith::kRsub:
      r = with_alpha(o, a, true);
      break;
    case Arith::kMul:
      r = b.Multiply(a, o);
      break;
    case Arith::kDiv:
      r = b.Divide(a, o);
      break;
    case Arith::kRemainder:
      r = b.Binary(OpKind::kRemainder, a, o);
      break;
    case Arith::kFmod:
      r = b.Subtract(a, b.Multiply(b.Divide(a, o), o));
      break;
    case Arith::kPow:
      r = b.Binary(OpKind::kPower, a, o);
      break;
    case Arith::kMax:
      r = b.Maximum(a, o);
      break;
    case Arith::kMin:
      r = b.Minimum(a, o);
      break;
    case Arith::kAtan2:
      r = b.Binary(OpKind::kAtan2, a, o);
      break;
  }
  return CheckOutputs(b, c, {Finish(b, r, out)});
}

// logaddexp(a, b) = log(exp(a) + exp(b)) without overflow, as eager's CPU kernel
// defines it: max(a, b) + log1p(exp(-|a - b|)), and a itself where a and b are the
// same infinity (there a - b is NaN). A NaN operand gives NaN. Floating results only
// (eager has no integer kernel). The walkthrough "Adding a lowering" in
// CONTRIBUTING.md added this entry.
LowerResult LowerLogAddExp(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val y, ValAt(c, 1));
  const OutputMeta& out = c.outputs.at(0);
  if (!ResultType({x, y})) return Declined("no common dtype");
  if (!IsFloat(out.dtype)) return Declined("logaddexp of integers");
  Ew e(b, out.dtype, out.sizes);
  NodeId a = e(x), o = e(y);
  NodeId dist = b.Unary(OpKind::kAbs, b.Subtract(a, o));
  NodeId r = b.Add(b.Maximum(a, o), b.Unary(OpKind::kLog1p, b.Unary(OpKind::kExp, b.Negate(dist))));
  NodeId same_inf =
      b.Binary(OpKind::kAnd, b.Compare(a, o, ComparisonKind::kEq),
               b.Compare(b.Unary(OpKind::kAbs, a), e.Const(INFINITY), ComparisonKind::kEq));
  return CheckOutputs(b, c, {Finish(b, b.Select(same_inf, a, r), out)});
}

// div with rounding_mode None / "trunc" / "floor" (div.Tensor_mode,
// div.Scalar_mode) and floor_divide.
NodeId DivFloor(GraphBuilder& b, Ew& e, NodeId a, NodeId d) {
  DType t = e.compute;
  auto cmp = [&](NodeId p, NodeId q, ComparisonKind k) { return b.Compare(p, q, k); };
  NodeId zero = e.Const(0);
  if (!IsFloat(t)) {
    // Truncating quotient, minus one when the remainder is nonzero and its
    // sign differs from the divisor's (division by zero: the divide errors).
    NodeId q = b.Divide(a, d);
    NodeId rem = b.Subtract(a, b.Multiply(q, d));
    NodeId fix = b.Binary(OpKind::kAnd, cmp(rem, zero, ComparisonKind::kNe),
                          b.Binary(OpKind::kXor, cmp(rem, zero, ComparisonKind::kLt),
                                   cmp(d, zero, ComparisonKind::kLt)));
    return b.Select(fix, b.Subtract(q, e.Const(1)), q);
  }
  // Eager's div_floor_floating: div = (a - mod) / b with mod the floor-mod
  // (sign of the divisor), then floor, corrected up when the floor lost more
  // than half; a zero quotient keeps the sign of a / b; b == 0 gives a / b.
  NodeId quot = b.Divide(a, d);
  NodeId mod = b.Binary(OpKind::kRemainder, a, d);
  NodeId div = b.Divide(b.Subtract(a, mod), d);
  NodeId fl = b.Unary(OpKind::kFloor, div);
  NodeId up = cmp(b.Subtract(div, fl), e.Const(0.5), ComparisonKind::kGt);
  NodeId floordiv = b.Select(up, b.Add(fl, e.Const(1)), fl);
  NodeId signed_zero = b.Multiply(quot, zero);  // ±0 with the sign of a / b
  NodeId res = b.Select(cmp(div, zero, ComparisonKind::kEq), signed_zero, floordiv);
  return b.Select(cmp(d, zero, ComparisonKind::kEq), quot, res);
}

template <bool kFloorDivide>
LowerResult LowerDivMode(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val y, ValAt(c, 1));
  std::optional<std::string> mode = std::string("floor");
  if (!kFloorDivide) {
    EMBER_ASSIGN_OR_RETURN(mode, OptStringAt(c, 2));
  }
  if (mode && *mode != "trunc" && *mode != "floor") return Declined("rounding_mode " + *mode);
  if (!ResultType({x, y})) return Declined("no common dtype");
  const OutputMeta& out = c.outputs.at(0);
  if (out.dtype == DType::kPred) return Declined("bool division");
  Ew e(b, out.dtype, out.sizes);
  NodeId a = e(x), d = e(y), r;
  if (!mode) {
    r = b.Divide(a, d);
  } else if (*mode == "trunc") {
    r = Trunc(b, b.Divide(a, d), e.compute, out.sizes);
  } else {
    r = DivFloor(b, e, a, d);
  }
  return CheckOutputs(b, c, {Finish(b, r, out)});
}

// ---- where, masked_fill, clamp, lerp, addcmul, addcdiv --------------------------

LowerResult LowerWhere(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg cond, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(Val y, ValAt(c, 2));
  const OutputMeta& out = c.outputs.at(0);
  Ew e(b, out.dtype, out.sizes);
  e.compute = out.dtype;  // a selection: no arithmetic, no opmath widening
  NodeId p = ConvertTo(b, cond.value, DType::kPred);
  p = BroadcastTo(b, p, cond.sizes, out.sizes);
  return CheckOutputs(b, c, {b.Select(p, e(x), e(y))});
}

LowerResult LowerMaskedFill(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg mask, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(Val v, ValAt(c, 2));
  const OutputMeta& out = c.outputs.at(0);
  Ew e(b, out.dtype, out.sizes);
  e.compute = out.dtype;
  v.tier = PromoTier::kWrapped;  // the value is cast straight to self's dtype
  NodeId p = BroadcastTo(b, ConvertTo(b, mask.value, DType::kPred), mask.sizes, out.sizes);
  return CheckOutputs(b, c, {b.Select(p, e(v), e(x))});
}

// clamp(self, min?, max?) with Scalar or Tensor bounds; clamp_min/clamp_max
// (kind 1: only min, 2: only max, 0: both).
template <int kKind>
LowerResult LowerClamp(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  std::optional<Val> lo, hi;
  if (kKind == 0 || kKind == 1) {
    EMBER_ASSIGN_OR_RETURN(lo, OptValAt(c, 1));
  }
  if (kKind == 0) {
    EMBER_ASSIGN_OR_RETURN(hi, OptValAt(c, 2));
  }
  if (kKind == 2) {
    EMBER_ASSIGN_OR_RETURN(hi, OptValAt(c, 1));
  }
  const OutputMeta& out = c.outputs.at(0);
  if (out.dtype == DType::kPred) return Declined("clamp of bool");
  if (!lo && !hi) return Declined("clamp without bounds (eager raises)");
  Ew e(b, out.dtype, out.sizes);
  NodeId r = e(x);
  if (lo) r = b.Maximum(r, e(*lo));
  if (hi) r = b.Minimum(r, e(*hi));
  return CheckOutputs(b, c, {Finish(b, r, out)});
}

LowerResult LowerLerp(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val y, ValAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(Val w, ValAt(c, 2));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("lerp of integers");
  Ew e(b, out.dtype, out.sizes);
  NodeId s = e(x), t = e(y), wt = e(w);
  // Eager's lerp_vec: |w| < 0.5 ? fma(w, end - self, self) : fma(w - 1, end - self, end).
  NodeId diff = b.Subtract(t, s);
  NodeId small = b.Compare(b.Unary(OpKind::kAbs, wt), e.Const(0.5), ComparisonKind::kLt);
  NodeId lo = e.MulAdd(wt, diff, s);
  NodeId hi = e.MulAdd(b.Subtract(wt, e.Const(1)), diff, t);
  return CheckOutputs(b, c, {Finish(b, b.Select(small, lo, hi), out)});
}

template <bool kDiv>
LowerResult LowerAddc(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val s, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val t1, ValAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(Val t2, ValAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(auto value, OptValAt(c, 3));
  const OutputMeta& out = c.outputs.at(0);
  if (out.dtype == DType::kPred) return Declined("bool operands");
  if (kDiv && !IsFloat(out.dtype)) return Declined("addcdiv of integers (eager raises)");
  Ew e(b, out.dtype, out.sizes);
  // Eager: self + value * t1 / t2 (the quotient rounded, then added) and
  // fma(value * t1, t2, self) (the compiler contracts addcmul's last product).
  NodeId p = e(t1);
  if (value) p = b.Multiply(e(*value), p);
  if (kDiv) return CheckOutputs(b, c, {Finish(b, b.Add(e(s), b.Divide(p, e(t2))), out)});
  return CheckOutputs(b, c, {Finish(b, e.MulAdd(p, e(t2), e(s)), out)});
}

// ---- casts -------------------------------------------------------------------

LowerResult LowerConvert(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  const OutputMeta& out = c.outputs.at(0);
  if (x.sizes != out.sizes) return Declined("a copy that changes sizes");
  return CheckOutputs(b, c, {ConvertTo(b, x.value, out.dtype)});
}

// copy(self, src, non_blocking): the functional copy_ (AOTAutograd's graphs; copy_
// between ember tensors): src converted to self's dtype and broadcast to self's sizes,
// as eager's copy_ writes it. Only self's metadata (the output's) is read.
LowerResult LowerCopy(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg src, TensorAt(c, 1));
  const OutputMeta& out = c.outputs.at(0);
  auto common = BroadcastShapes(src.sizes, out.sizes);
  if (!common || *common != out.sizes) return InvalidArgument(c.op, ": src does not broadcast");
  NodeId v = ConvertTo(b, src.value, out.dtype);
  return CheckOutputs(b, c, {BroadcastTo(b, v, src.sizes, out.sizes)});
}

}  // namespace

void RegisterElementwise(LoweringTable& t) {
  // Float math.
  t.Add("aten::exp", LowerFloatUnary<OpKind::kExp>);
  t.Add("aten::log", LowerFloatUnary<OpKind::kLog>);
  t.Add("aten::log1p", LowerFloatUnary<OpKind::kLog1p>);
  t.Add("aten::expm1", LowerFloatUnary<OpKind::kExpm1>);
  t.Add("aten::sqrt", LowerFloatUnary<OpKind::kSqrt>);
  t.Add("aten::rsqrt", LowerFloatUnary<OpKind::kRsqrt>);
  t.Add("aten::tanh", LowerFloatUnary<OpKind::kTanh>);
  t.Add("aten::sigmoid", LowerFloatUnary<OpKind::kLogistic>);
  t.Add("aten::sin", LowerFloatUnary<OpKind::kSin>);
  t.Add("aten::cos", LowerFloatUnary<OpKind::kCos>);
  t.Add("aten::erf", LowerFloatUnary<OpKind::kErf>);
  t.Add("aten::exp2", LowerUnary<Composite::kExp2>);
  t.Add("aten::log2", LowerUnary<Composite::kLog2>);
  t.Add("aten::log10", LowerUnary<Composite::kLog10>);
  t.Add("aten::reciprocal", LowerUnary<Composite::kReciprocal>);
  // Same-dtype unary.
  t.Add("aten::neg", LowerUnary<Composite::kNeg>);
  t.Add("aten::abs", LowerUnary<Composite::kAbs>);
  t.Add("aten::sign", LowerUnary<Composite::kSign>);
  t.Add("aten::sgn", LowerUnary<Composite::kSign>);
  t.Add("aten::floor", LowerUnary<Composite::kFloor>);
  t.Add("aten::ceil", LowerUnary<Composite::kCeil>);
  t.Add("aten::round", LowerUnary<Composite::kRound>);
  t.Add("aten::trunc", LowerUnary<Composite::kTrunc>);
  t.Add("aten::frac", LowerUnary<Composite::kFrac>);
  t.Add("aten::square", LowerUnary<Composite::kSquare>);
  t.Add("aten::relu", LowerUnary<Composite::kRelu>);
  t.Add("aten::bitwise_not", LowerUnary<Composite::kBitwiseNot>);
  t.Add("aten::logical_not", LowerUnary<Composite::kLogicalNot>);
  t.Add("aten::isnan", LowerUnary<Composite::kIsNan>);
  t.Add("aten::isinf", LowerUnary<Composite::kIsInf>);
  t.Add("aten::isfinite", LowerUnary<Composite::kIsFinite>);
  t.Add("aten::isposinf", LowerUnary<Composite::kIsPosInf>);
  t.Add("aten::isneginf", LowerUnary<Composite::kIsNegInf>);
  t.Add("aten::signbit", LowerUnary<Composite::kSignBit>);
  // Binary arithmetic.
  for (const char* o : {"aten::add.Tensor", "aten::add.Scalar"}) t.Add(o, LowerArith<Arith::kAdd>);
  for (const char* o : {"aten::sub.Tensor", "aten::sub.Scalar"}) t.Add(o, LowerArith<Arith::kSub>);
  for (const char* o : {"aten::rsub.Tensor", "aten::rsub.Scalar"})
    t.Add(o, LowerArith<Arith::kRsub>);
  for (const char* o : {"aten::mul.Tensor", "aten::mul.Scalar"}) t.Add(o, LowerArith<Arith::kMul>);
  for (const char* o : {"aten::div.Tensor", "aten::div.Scalar"}) t.Add(o, LowerArith<Arith::kDiv>);
  for (const char* o : {"aten::div.Tensor_mode", "aten::div.Scalar_mode"})
    t.Add(o, LowerDivMode<false>);
  for (const char* o : {"aten::floor_divide", "aten::floor_divide.Scalar"})
    t.Add(o, LowerDivMode<true>);
  for (const char* o :
       {"aten::remainder.Tensor", "aten::remainder.Scalar", "aten::remainder.Scalar_Tensor"})
    t.Add(o, LowerArith<Arith::kRemainder>);
  for (const char* o : {"aten::fmod.Tensor", "aten::fmod.Scalar"})
    t.Add(o, LowerArith<Arith::kFmod>);
  for (const char* o : {"aten::pow.Tensor_Tensor", "aten::pow.Tensor_Scalar", "aten::pow.Scalar"})
    t.Add(o, LowerArith<Arith::kPow>);
  t.Add("aten::maximum", LowerArith<Arith::kMax>);
  t.Add("aten::minimum", LowerArith<Arith::kMin>);
  t.Add("aten::atan2", LowerArith<Arith::kAtan2>);
  t.Add("aten::logaddexp", LowerLogAddExp);
  // Selection and ternary.
  for (const char* o : {"aten::where.self", "aten::where.ScalarSelf", "aten::where.ScalarOther",
                        "aten::where.Scalar"})
    t.Add(o, LowerWhere);
  for (const char* o : {"aten::masked_fill.Scalar", "aten::masked_fill.Tensor"})
    t.Add(o, LowerMaskedFill);
  for (const char* o : {"aten::clamp", "aten::clamp.Tensor"}) t.Add(o, LowerClamp<0>);
  for (const char* o : {"aten::clamp_min", "aten::clamp_min.Tensor"}) t.Add(o, LowerClamp<1>);
  for (const char* o : {"aten::clamp_max", "aten::clamp_max.Tensor"}) t.Add(o, LowerClamp<2>);
  for (const char* o : {"aten::lerp.Scalar", "aten::lerp.Tensor"}) t.Add(o, LowerLerp);
  t.Add("aten::addcmul", LowerAddc<false>);
  t.Add("aten::addcdiv", LowerAddc<true>);
  // Casts and copies.
  t.Add("aten::_to_copy", LowerConvert);
  t.Add("aten::clone", LowerConvert);
  t.Add("aten::copy", LowerCopy);
}

}  // namespace ember::lowering
