// Reference semantics of the elementwise ops: unary, binary, compare,
// convert, select and clamp, for every dtype each op accepts.
//
// PyTorch semantics throughout (DESIGN §3): floats compute in their own
// precision (f32 ops call the float overloads: expf, not exp), f16/bf16 are
// decoded to f32 and rounded to nearest even on store; integer add, subtract,
// multiply, negate and abs wrap (unsigned arithmetic, never signed-overflow
// UB); integer divide truncates (INT_MIN / -1 = INT_MIN), remainder is
// floor-mod (sign of the divisor), and a zero divisor is an OutOfRange error;
// integer power with a negative exponent is 1 for base 1, +-1 for base -1 and
// 0 otherwise; shifts by a negative amount or >= the bit width give 0
// (shift-left, shift-right-logical) or the sign fill (shift-right-arithmetic);
// maximum/minimum propagate NaN and return the first operand on ties (so
// maximum(-0, 0) = -0, as torch's scalar kernels; its vectorized kernels
// return the second); sign(NaN) = sign(+-0) = +0; round-nearest-even
// rounds ties to even; pred arithmetic computes on 0/1 and stores x != 0.
// The dtype switch happens once per op; the loops are per dtype and op.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "ember/ir/attributes.h"
#include "eval/element_access.h"
#include "eval/ops.h"

namespace ember::eval {
namespace {

// ---- integer helpers (no signed overflow, ever) ---------------------------

// Unsigned type at least as wide as `unsigned`, so narrow types do not
// promote to (signed) int before the arithmetic.
template <typename T>
using WideUnsigned =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
T WrapAdd(T a, T b) {
  using U = WideUnsigned<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T>
T WrapSub(T a, T b) {
  using U = WideUnsigned<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename T>
T WrapMul(T a, T b) {
  using U = WideUnsigned<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}
template <typename T>
T WrapNeg(T a) {
  using U = WideUnsigned<T>;
  return static_cast<T>(U(0) - static_cast<U>(a));
}
template <typename T>
bool IsNegative(T a) {
  if constexpr (std::is_signed_v<T>) {
    return a < 0;
  } else {
    return false;
  }
}
template <typename T>
T IntAbs(T a) {
  return IsNegative(a) ? WrapNeg(a) : a;
}

// Truncating division; the divisor is known nonzero. INT_MIN / -1 wraps.
template <typename T>
T IntDivide(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return WrapNeg(a);
  }
  return static_cast<T>(a / b);
}
// Floor-mod (result has the divisor's sign); the divisor is known nonzero.
template <typename T>
T IntRemainder(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;
    T r = static_cast<T>(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
    return r;
  } else {
    return static_cast<T>(a % b);
  }
}
template <typename T>
T IntPower(T base, T exp) {
  if (IsNegative(exp)) {
    if (base == 1) return 1;
    if constexpr (std::is_signed_v<T>) {
      if (base == -1) return (exp % 2 == 0) ? T(1) : T(-1);
    }
    return 0;
  }
  using U = WideUnsigned<T>;
  U result = 1;
  U b = static_cast<U>(base);
  auto e = static_cast<std::make_unsigned_t<T>>(exp);
  while (e != 0) {
    if (e & 1u) result = static_cast<U>(result * b);
    b = static_cast<U>(b * b);
    e = static_cast<decltype(e)>(e >> 1);
  }
  return static_cast<T>(result);
}

template <typename T>
bool ShiftOutOfRange(T b) {
  return IsNegative(b) || static_cast<uint64_t>(b) >= 8 * sizeof(T);
}
template <typename T>
T ShiftLeft(T a, T b) {
  if (ShiftOutOfRange(b)) return 0;
  using U = WideUnsigned<T>;
  return static_cast<T>(static_cast<U>(a) << static_cast<int>(b));
}
template <typename T>
T ShiftRightLogical(T a, T b) {
  if (ShiftOutOfRange(b)) return 0;
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) >> static_cast<int>(b));
}
template <typename T>
T ShiftRightArithmetic(T a, T b) {
  if (ShiftOutOfRange(b)) return IsNegative(a) ? T(-1) : T(0);
  return static_cast<T>(a >> static_cast<int>(b));  // arithmetic for signed T
}
template <typename T>
T IntSign(T a) {
  if constexpr (std::is_signed_v<T>) {
    return static_cast<T>((a > 0) - (a < 0));
  } else {
    return a > 0 ? 1 : 0;
  }
}

// ---- float helpers (C is float or double) ---------------------------------

template <typename C>
C FloatMaximum(C a, C b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  return a < b ? b : a;
}
template <typename C>
C FloatMinimum(C a, C b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  return b < a ? b : a;
}
template <typename C>
C FloatRemainder(C a, C b) {
  C r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
template <typename C>
C FloatSign(C a) {
  if (a > 0) return C(1);
  if (a < 0) return C(-1);
  return C(0);  // +-0 and NaN
}
template <typename C>
C Logistic(C a) {
  return C(1) / (C(1) + std::exp(-a));
}

// ---- loops ------------------------------------------------------------------

template <DType D, typename Fn>
void MapUnary(const Literal& x, Literal& out, Fn fn) {
  using S = StorageT<D>;
  const S* xp = x.data_as<S>();
  S* op = out.data_as<S>();
  const int64_t n = out.num_elements();
  for (int64_t i = 0; i < n; ++i) op[i] = Store<D>(fn(Load<D>(xp[i])));
}

template <DType D, typename Fn>
void MapBinary(const Literal& a, const Literal& b, Literal& out, Fn fn) {
  using S = StorageT<D>;
  const S* ap = a.data_as<S>();
  const S* bp = b.data_as<S>();
  S* op = out.data_as<S>();
  const int64_t n = out.num_elements();
  for (int64_t i = 0; i < n; ++i) op[i] = Store<D>(fn(Load<D>(ap[i]), Load<D>(bp[i])));
}

Status UnsupportedDType(const Node& n, DType t) {
  return InvalidArgument(OpName(n.op), " %", n.id, ": element type ", DTypeName(t),
                         " is not supported by this op");
}

// Operand i must have `count` elements of dtype `t` (the builder guarantees
// it; checked so a hand-made call cannot read out of bounds).
Status CheckOperand(const Node& n, const Operands& in, size_t i, DType t, int64_t count) {
  if (i >= in.size() || in[i] == nullptr) {
    return InvalidArgument(OpName(n.op), " %", n.id, ": missing operand ", i);
  }
  const Literal& l = *in[i];
  if (l.shape().is_tuple() || l.dtype() != t || l.num_elements() != count) {
    return InvalidArgument(OpName(n.op), " %", n.id, ": operand ", i, " is ", l.shape().ToString(),
                           ", expected ", DTypeName(t), " with ", count, " elements");
  }
  return OkStatus();
}

// ---- unary ------------------------------------------------------------------

// Applies `expr` (over `v` of the compute type C) when the dtype is a float.
#define EMBER_FLOAT_UNARY(kind, expr)                       \
  case OpKind::kind:                                        \
    if constexpr (kIsFloat<D>) {                            \
      MapUnary<D>(x, out, [](C v) -> C { return (expr); }); \
      return OkStatus();                                    \
    }                                                       \
    break;

template <DType D>
Status UnaryTyped(const Node& n, const Literal& x, Literal& out) {
  if constexpr (kIsComplex<D>) {
    return UnsupportedDType(n, D);
  } else {
    using C = ComputeT<D>;
    constexpr bool kFloat = kIsFloat<D>;
    constexpr bool kPred = kIsPred<D>;
    switch (n.op) {
      case OpKind::kNegate:
        if constexpr (kFloat) {
          MapUnary<D>(x, out, [](C v) -> C { return -v; });
        } else {
          MapUnary<D>(x, out, [](C v) -> C { return WrapNeg(v); });  // pred: -1 != 0
        }
        return OkStatus();
      case OpKind::kAbs:
        if constexpr (kFloat) {
          MapUnary<D>(x, out, [](C v) -> C { return std::fabs(v); });
        } else {
          MapUnary<D>(x, out, [](C v) -> C { return IntAbs(v); });
        }
        return OkStatus();
      case OpKind::kSign:
        if constexpr (kFloat) {
          MapUnary<D>(x, out, [](C v) -> C { return FloatSign(v); });
        } else {
          MapUnary<D>(x, out, [](C v) -> C { return IntSign(v); });
        }
        return OkStatus();
      case OpKind::kFloor:
      case OpKind::kCeil:
      case OpKind::kRoundNearestEven:
        if constexpr (!kFloat) {  // integers are already integral
          MapUnary<D>(x, out, [](C v) -> C { return v; });
          return OkStatus();
        } else if (n.op == OpKind::kFloor) {
          MapUnary<D>(x, out, [](C v) -> C { return std::floor(v); });
          return OkStatus();
        } else if (n.op == OpKind::kCeil) {
          MapUnary<D>(x, out, [](C v) -> C { return std::ceil(v); });
          return OkStatus();
        } else {
          // nearbyint under the default rounding mode: ties to even.
          MapUnary<D>(x, out, [](C v) -> C { return std::nearbyint(v); });
          return OkStatus();
        }
      case OpKind::kNot:
        if constexpr (kPred) {
          MapUnary<D>(x, out, [](C v) -> C { return v == 0 ? 1 : 0; });
          return OkStatus();
        } else if constexpr (!kFloat) {
          MapUnary<D>(x, out, [](C v) -> C { return static_cast<C>(~v); });
          return OkStatus();
        }
        break;
        EMBER_FLOAT_UNARY(kExp, std::exp(v))
        EMBER_FLOAT_UNARY(kLog, std::log(v))
        EMBER_FLOAT_UNARY(kLog1p, std::log1p(v))
        EMBER_FLOAT_UNARY(kExpm1, std::expm1(v))
        EMBER_FLOAT_UNARY(kSqrt, std::sqrt(v))
        EMBER_FLOAT_UNARY(kRsqrt, C(1) / std::sqrt(v))
        EMBER_FLOAT_UNARY(kTanh, std::tanh(v))
        EMBER_FLOAT_UNARY(kLogistic, Logistic(v))
        EMBER_FLOAT_UNARY(kSin, std::sin(v))
        EMBER_FLOAT_UNARY(kCos, std::cos(v))
        EMBER_FLOAT_UNARY(kErf, std::erf(v))
      default:
        return InvalidArgument(OpName(n.op), " %", n.id, ": not a unary elementwise op");
    }
    return UnsupportedDType(n, D);
  }
}
#undef EMBER_FLOAT_UNARY

// ---- convert ----------------------------------------------------------------

template <DType From, DType To>
void ConvertLoop(const Literal& x, Literal& out) {
  const StorageT<From>* xp = x.data_as<StorageT<From>>();
  StorageT<To>* op = out.data_as<StorageT<To>>();
  const int64_t n = out.num_elements();
  for (int64_t i = 0; i < n; ++i) op[i] = ConvertElement<From, To>(xp[i]);
}

Status Convert(const Node& n, const Literal& x, Literal& out) {
  const DType from = x.dtype();
  const DType to = out.dtype();
  if (IsComplex(from) && !IsComplex(to)) {
    return InvalidArgument("convert %", n.id, ": cannot convert ", DTypeName(from), " to ",
                           DTypeName(to));
  }
  DispatchDType(from, [&](auto f) {
    DispatchDType(to, [&](auto t) { ConvertLoop<decltype(f)::value, decltype(t)::value>(x, out); });
  });
  return OkStatus();
}

// ---- binary -----------------------------------------------------------------

template <DType D>
Status CheckNoZeroDivisor(const Node& n, const Literal& b) {
  const StorageT<D>* bp = b.data_as<StorageT<D>>();
  const int64_t count = b.num_elements();
  for (int64_t i = 0; i < count; ++i) {
    if (bp[i] == 0) {
      return OutOfRange(OpName(n.op), " %", n.id, ": integer division by zero");
    }
  }
  return OkStatus();
}

template <DType D>
Status CompareTyped(const Node& n, const Literal& a, const Literal& b, Literal& out) {
  if constexpr (kIsComplex<D>) {
    return UnsupportedDType(n, D);
  } else {
    using C = ComputeT<D>;
    const std::string& dir_name = attr::Direction.Text(n.attrs);
    std::optional<ComparisonKind> dir = ParseComparisonKind(dir_name);
    if (!dir) {
      return InvalidArgument("compare %", n.id, ": bad direction '", dir_name,
                             "', expected EQ, NE, LT, LE, GT or GE");
    }
    const StorageT<D>* ap = a.data_as<StorageT<D>>();
    const StorageT<D>* bp = b.data_as<StorageT<D>>();
    uint8_t* op = out.data_as<uint8_t>();
    const int64_t count = out.num_elements();
    auto loop = [&](auto cmp) {
      for (int64_t i = 0; i < count; ++i) {
        op[i] = cmp(Load<D>(ap[i]), Load<D>(bp[i])) ? 1 : 0;
      }
    };
    // IEEE comparisons: anything with NaN is false, except NE.
    switch (*dir) {
      case ComparisonKind::kEq:
        loop([](C x, C y) { return x == y; });
        break;
      case ComparisonKind::kNe:
        loop([](C x, C y) { return x != y; });
        break;
      case ComparisonKind::kLt:
        loop([](C x, C y) { return x < y; });
        break;
      case ComparisonKind::kLe:
        loop([](C x, C y) { return x <= y; });
        break;
      case ComparisonKind::kGt:
        loop([](C x, C y) { return x > y; });
        break;
      case ComparisonKind::kGe:
        loop([](C x, C y) { return x >= y; });
        break;
    }
    return OkStatus();
  }
}

// Applies `expr` (over compute-type a, b) for integer and pred dtypes.
#define EMBER_INT_BINARY(kind, expr)                                 \
  case OpKind::kind:                                                 \
    if constexpr (!kFloat) {                                         \
      MapBinary<D>(a, b, out, [](C x, C y) -> C { return (expr); }); \
      return OkStatus();                                             \
    }                                                                \
    break;

template <DType D>
Status BinaryTyped(const Node& n, const Literal& a, const Literal& b, Literal& out) {
  if constexpr (kIsComplex<D>) {
    return UnsupportedDType(n, D);
  } else {
    using C = ComputeT<D>;
    constexpr bool kFloat = kIsFloat<D>;
    auto map = [&](auto fn) {
      MapBinary<D>(a, b, out, fn);
      return OkStatus();
    };
    switch (n.op) {
      case OpKind::kAdd:
        if constexpr (kFloat)
          return map([](C x, C y) -> C { return x + y; });
        else
          return map([](C x, C y) -> C { return WrapAdd(x, y); });
      case OpKind::kSubtract:
        if constexpr (kFloat)
          return map([](C x, C y) -> C { return x - y; });
        else
          return map([](C x, C y) -> C { return WrapSub(x, y); });
      case OpKind::kMultiply:
        if constexpr (kFloat)
          return map([](C x, C y) -> C { return x * y; });
        else
          return map([](C x, C y) -> C { return WrapMul(x, y); });
      case OpKind::kDivide:
        if constexpr (kFloat) {
          return map([](C x, C y) -> C { return x / y; });
        } else {
          EMBER_RETURN_IF_ERROR(CheckNoZeroDivisor<D>(n, b));
          return map([](C x, C y) -> C { return IntDivide(x, y); });
        }
      case OpKind::kRemainder:
        if constexpr (kFloat) {
          return map([](C x, C y) -> C { return FloatRemainder(x, y); });
        } else {
          EMBER_RETURN_IF_ERROR(CheckNoZeroDivisor<D>(n, b));
          return map([](C x, C y) -> C { return IntRemainder(x, y); });
        }
      case OpKind::kPower:
        if constexpr (kFloat)
          return map([](C x, C y) -> C { return std::pow(x, y); });
        else
          return map([](C x, C y) -> C { return IntPower(x, y); });
      case OpKind::kMaximum:
        if constexpr (kFloat)
          return map([](C x, C y) -> C { return FloatMaximum(x, y); });
        else
          return map([](C x, C y) -> C { return std::max(x, y); });
      case OpKind::kMinimum:
        if constexpr (kFloat)
          return map([](C x, C y) -> C { return FloatMinimum(x, y); });
        else
          return map([](C x, C y) -> C { return std::min(x, y); });
      case OpKind::kAtan2:
        if constexpr (kFloat) return map([](C x, C y) -> C { return std::atan2(x, y); });
        break;
        // On pred (0/1) the bitwise ops are the logical ones.
        EMBER_INT_BINARY(kAnd, static_cast<C>(x & y))
        EMBER_INT_BINARY(kOr, static_cast<C>(x | y))
        EMBER_INT_BINARY(kXor, static_cast<C>(x ^ y))
        EMBER_INT_BINARY(kShiftLeft, ShiftLeft(x, y))
        EMBER_INT_BINARY(kShiftRightLogical, ShiftRightLogical(x, y))
        EMBER_INT_BINARY(kShiftRightArithmetic, ShiftRightArithmetic(x, y))
      default:
        return InvalidArgument(OpName(n.op), " %", n.id, ": not a binary elementwise op");
    }
    return UnsupportedDType(n, D);
  }
}
#undef EMBER_INT_BINARY

// ---- select, clamp ------------------------------------------------------------

// select(pred, on_true, on_false); pred is a scalar or has the result's dims.
StatusOr<Literal> Select(const Node& n, const Operands& in) {
  const int64_t count = n.shape.num_elements();
  const DType t = n.shape.dtype();
  if (in.size() != 3 || in[0] == nullptr) {
    return InvalidArgument("select %", n.id, ": expected 3 operands");
  }
  const bool scalar_pred = in[0]->shape().is_scalar();
  EMBER_RETURN_IF_ERROR(CheckOperand(n, in, 0, DType::kPred, scalar_pred ? 1 : count));
  EMBER_RETURN_IF_ERROR(CheckOperand(n, in, 1, t, count));
  EMBER_RETURN_IF_ERROR(CheckOperand(n, in, 2, t, count));
  Literal out(n.shape);
  const uint8_t* p = in[0]->data_as<uint8_t>();
  const auto* on_true = static_cast<const uint8_t*>(in[1]->data());
  const auto* on_false = static_cast<const uint8_t*>(in[2]->data());
  auto* o = static_cast<uint8_t*>(out.data());
  const int64_t esize = DTypeSize(t);
  if (scalar_pred) {
    if (count > 0) std::memcpy(o, p[0] ? on_true : on_false, count * esize);
    return out;
  }
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(o + i * esize, (p[i] ? on_true : on_false) + i * esize, esize);
  }
  return out;
}

// clamp(min, x, max) = minimum(maximum(x, min), max): NaN in any operand
// propagates, and min > max gives max (torch.clamp).
template <DType D>
Status ClampTyped(const Node& n, const Literal& lo, const Literal& x, const Literal& hi,
                  Literal& out) {
  if constexpr (kIsComplex<D>) {
    return UnsupportedDType(n, D);
  } else {
    using C = ComputeT<D>;
    using S = StorageT<D>;
    const S* lp = lo.data_as<S>();
    const S* xp = x.data_as<S>();
    const S* hp = hi.data_as<S>();
    S* op = out.data_as<S>();
    const int64_t lstep = lo.num_elements() == 1 ? 0 : 1;
    const int64_t hstep = hi.num_elements() == 1 ? 0 : 1;
    const int64_t count = out.num_elements();
    for (int64_t i = 0; i < count; ++i) {
      C l = Load<D>(lp[i * lstep]);
      C v = Load<D>(xp[i]);
      C h = Load<D>(hp[i * hstep]);
      if constexpr (kIsFloat<D>) {
        op[i] = Store<D>(FloatMinimum(FloatMaximum(v, l), h));
      } else {
        op[i] = Store<D>(std::min(std::max(v, l), h));
      }
    }
    return OkStatus();
  }
}

// fma(x, y, z) = x * y + z rounded once (std::fma: IEEE 754 fusedMultiplyAdd), as
// eager's CPU kernels compute add/sub with alpha, lerp and addcmul (vec::fmadd).
StatusOr<Literal> Fma(const Node& n, const Operands& in) {
  const int64_t count = n.shape.num_elements();
  const DType t = n.shape.dtype();
  if (in.size() != 3) return InvalidArgument("fma %", n.id, ": expected 3 operands");
  for (int i = 0; i < 3; ++i) EMBER_RETURN_IF_ERROR(CheckOperand(n, in, i, t, count));
  Literal out(n.shape);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const T* x = in[0]->data_as<T>();
    const T* y = in[1]->data_as<T>();
    const T* z = in[2]->data_as<T>();
    T* o = out.data_as<T>();
    for (int64_t i = 0; i < count; ++i) o[i] = std::fma(x[i], y[i], z[i]);
  };
  if (t == DType::kF32) {
    run(0.0f);
  } else if (t == DType::kF64) {
    run(0.0);
  } else {
    return InvalidArgument("fma %", n.id, ": expected f32 or f64, got ", DTypeName(t));
  }
  return out;
}

StatusOr<Literal> Clamp(const Node& n, const Operands& in) {
  const int64_t count = n.shape.num_elements();
  const DType t = n.shape.dtype();
  if (in.size() != 3 || in[0] == nullptr || in[2] == nullptr) {
    return InvalidArgument("clamp %", n.id, ": expected 3 operands");
  }
  EMBER_RETURN_IF_ERROR(CheckOperand(n, in, 0, t, in[0]->shape().is_scalar() ? 1 : count));
  EMBER_RETURN_IF_ERROR(CheckOperand(n, in, 1, t, count));
  EMBER_RETURN_IF_ERROR(CheckOperand(n, in, 2, t, in[2]->shape().is_scalar() ? 1 : count));
  Literal out(n.shape);
  EMBER_RETURN_IF_ERROR(DispatchDType(
      t, [&](auto d) { return ClampTyped<decltype(d)::value>(n, *in[0], *in[1], *in[2], out); }));
  return out;
}

}  // namespace

StatusOr<Literal> EvalElementwise(const Node& n, const Operands& in) {
  if (n.shape.is_tuple()) {
    return InvalidArgument(OpName(n.op), " %", n.id, ": elementwise result cannot be a tuple");
  }
  const int64_t count = n.shape.num_elements();
  if (n.op == OpKind::kSelect) return Select(n, in);
  if (n.op == OpKind::kClamp) return Clamp(n, in);
  if (n.op == OpKind::kFma) return Fma(n, in);
  if (IsUnary(n.op)) {
    if (in.size() != 1 || in[0] == nullptr) {
      return InvalidArgument(OpName(n.op), " %", n.id, ": expected 1 operand");
    }
    const DType t = n.op == OpKind::kConvert ? in[0]->dtype() : n.shape.dtype();
    EMBER_RETURN_IF_ERROR(CheckOperand(n, in, 0, t, count));
    Literal out(n.shape);
    if (n.op == OpKind::kConvert) {
      EMBER_RETURN_IF_ERROR(Convert(n, *in[0], out));
    } else {
      EMBER_RETURN_IF_ERROR(
          DispatchDType(t, [&](auto d) { return UnaryTyped<decltype(d)::value>(n, *in[0], out); }));
    }
    return out;
  }
  if (IsBinary(n.op)) {
    if (in.size() != 2 || in[0] == nullptr) {
      return InvalidArgument(OpName(n.op), " %", n.id, ": expected 2 operands");
    }
    const DType t = n.op == OpKind::kCompare ? in[0]->dtype() : n.shape.dtype();
    if (n.op == OpKind::kCompare && n.shape.dtype() != DType::kPred) {
      return InvalidArgument("compare %", n.id, ": result must be pred, got ", n.shape.ToString());
    }
    EMBER_RETURN_IF_ERROR(CheckOperand(n, in, 0, t, count));
    EMBER_RETURN_IF_ERROR(CheckOperand(n, in, 1, t, count));
    Literal out(n.shape);
    EMBER_RETURN_IF_ERROR(DispatchDType(t, [&](auto d) {
      constexpr DType kD = decltype(d)::value;
      if (n.op == OpKind::kCompare) return CompareTyped<kD>(n, *in[0], *in[1], out);
      return BinaryTyped<kD>(n, *in[0], *in[1], out);
    }));
    return out;
  }
  return InvalidArgument(OpName(n.op), " %", n.id, ": not an elementwise op");
}

}  // namespace ember::eval
