// Private to the interpreter: typed element access and the element-conversion
// rules shared by convert, iota and rng.
//
// Every DType D has a storage type (how one element lies in a Literal's bytes)
// and a compute type (what arithmetic sees):
//   pred -> uint8_t / uint8_t (0 or 1; Store normalizes any nonzero to 1)
//   s8..s64, u8..u64 -> the fixed-width integer / itself
//   f16, bf16 -> uint16_t bit pattern / float (Store rounds to nearest even)
//   f32 -> float / float,  f64 -> double / double
//   c64, c128 -> std::complex<float|double> / itself
// DispatchDType(t, f) calls f(DTypeTag<D>{}) once for the runtime dtype t, so
// per-op code instantiates a loop per dtype and dispatches once per op, never
// per element.
#pragma once

#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "ember/ir/dtype.h"

namespace ember::eval {

template <DType D>
using DTypeTag = std::integral_constant<DType, D>;

template <DType D>
struct ElemTraits;
#define EMBER_ELEM_TRAITS(D, S, C) \
  template <>                      \
  struct ElemTraits<D> {           \
    using Storage = S;             \
    using Compute = C;             \
  };
EMBER_ELEM_TRAITS(DType::kPred, uint8_t, uint8_t)
EMBER_ELEM_TRAITS(DType::kS8, int8_t, int8_t)
EMBER_ELEM_TRAITS(DType::kS16, int16_t, int16_t)
EMBER_ELEM_TRAITS(DType::kS32, int32_t, int32_t)
EMBER_ELEM_TRAITS(DType::kS64, int64_t, int64_t)
EMBER_ELEM_TRAITS(DType::kU8, uint8_t, uint8_t)
EMBER_ELEM_TRAITS(DType::kU16, uint16_t, uint16_t)
EMBER_ELEM_TRAITS(DType::kU32, uint32_t, uint32_t)
EMBER_ELEM_TRAITS(DType::kU64, uint64_t, uint64_t)
EMBER_ELEM_TRAITS(DType::kF16, uint16_t, float)
EMBER_ELEM_TRAITS(DType::kBF16, uint16_t, float)
EMBER_ELEM_TRAITS(DType::kF32, float, float)
EMBER_ELEM_TRAITS(DType::kF64, double, double)
EMBER_ELEM_TRAITS(DType::kC64, std::complex<float>, std::complex<float>)
EMBER_ELEM_TRAITS(DType::kC128, std::complex<double>, std::complex<double>)
#undef EMBER_ELEM_TRAITS

template <DType D>
using StorageT = typename ElemTraits<D>::Storage;
template <DType D>
using ComputeT = typename ElemTraits<D>::Compute;

template <DType D>
inline constexpr bool kIsPred = D == DType::kPred;
template <DType D>
inline constexpr bool kIsComplex = D == DType::kC64 || D == DType::kC128;
template <DType D>
inline constexpr bool kIsFloat =
    D == DType::kF16 || D == DType::kBF16 || D == DType::kF32 || D == DType::kF64;
template <DType D>
inline constexpr bool kIsSignedInt =
    D == DType::kS8 || D == DType::kS16 || D == DType::kS32 || D == DType::kS64;
template <DType D>
inline constexpr bool kIsUnsignedInt =
    D == DType::kU8 || D == DType::kU16 || D == DType::kU32 || D == DType::kU64;
template <DType D>
inline constexpr bool kIsInt = kIsSignedInt<D> || kIsUnsignedInt<D>;

// Storage -> compute.
template <DType D>
inline ComputeT<D> Load(StorageT<D> s) {
  if constexpr (D == DType::kF16) {
    return F16ToFloat(s);
  } else if constexpr (D == DType::kBF16) {
    return BF16ToFloat(s);
  } else {
    return s;
  }
}

// Compute -> storage: 16-bit floats round to nearest even, pred normalizes.
template <DType D>
inline StorageT<D> Store(ComputeT<D> c) {
  if constexpr (D == DType::kF16) {
    return FloatToF16(c);
  } else if constexpr (D == DType::kBF16) {
    return FloatToBF16(c);
  } else if constexpr (D == DType::kPred) {
    return c != 0 ? 1 : 0;
  } else {
    return c;
  }
}

// Calls f(DTypeTag<D>{}) for the runtime dtype t. Every branch of f must
// return the same type.
template <typename F>
decltype(auto) DispatchDType(DType t, F&& f) {
  switch (t) {
#define EMBER_DISPATCH_CASE(e, name, size) \
  case DType::e:                           \
    return f(DTypeTag<DType::e>{});
    EMBER_DTYPES(EMBER_DISPATCH_CASE)
#undef EMBER_DISPATCH_CASE
  }
  return f(DTypeTag<DType::kF32>{});  // unreachable: every enumerator is handled
}

// ---- float -> integer (PyTorch on x86) ------------------------------------

// Truncate toward zero; NaN or out of [-2^63, 2^63) -> INT64_MIN.
inline int64_t FloatToS64(double x) {
  if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) {
    return std::numeric_limits<int64_t>::min();
  }
  return static_cast<int64_t>(x);
}

// Truncate toward zero; NaN or out of range -> INT32_MIN.
inline int32_t FloatToS32(double x) {
  if (!(x > -2147483649.0 && x < 2147483648.0)) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(x);
}

// x >= 2^63: (s64 rule of x - 2^63) with the top bit flipped, so [2^63, 2^64)
// is exact and larger values (and +inf) give 0; otherwise the s64 rule,
// wrapped (-1 -> 2^64-1, NaN -> 2^63). This is what g++ emits and torch does.
inline uint64_t FloatToU64(double x) {
  constexpr double kTwo63 = 9223372036854775808.0;
  if (x >= kTwo63) return static_cast<uint64_t>(FloatToS64(x - kTwo63)) ^ (uint64_t{1} << 63);
  return static_cast<uint64_t>(FloatToS64(x));
}

// ---- element conversion (the `convert` op) --------------------------------
//
// int -> int wraps; anything -> pred is x != 0 (NaN -> true); int -> float
// rounds to nearest; f64 and integers reach f16/bf16 through f32 (two
// roundings, as torch does); float -> s32/s64 per FloatToS32/FloatToS64;
// float -> s8/s16/u8/u16 through the s32 rule (as torch: 3e9 -> s16 is 0)
// and u32 through the s64 rule, then wrapped (docs/ir.md; torch's vectorized
// and scalar f32 -> u32 paths disagree out of range); float -> u64
// per FloatToU64; real -> complex has imaginary part 0; complex -> complex
// converts each part. complex -> real is not a valid convert (the builder
// rejects it); here it takes the real part.
template <DType From, DType To>
inline StorageT<To> ConvertElement(StorageT<From> s) {
  ComputeT<From> v = Load<From>(s);
  if constexpr (kIsComplex<From>) {
    if constexpr (kIsComplex<To>) {
      using R = typename ComputeT<To>::value_type;
      return ComputeT<To>(static_cast<R>(v.real()), static_cast<R>(v.imag()));
    } else {
      return ConvertElement < From == DType::kC64 ? DType::kF32 : DType::kF64, To > (v.real());
    }
  } else if constexpr (kIsComplex<To>) {
    using R = typename ComputeT<To>::value_type;
    return ComputeT<To>(static_cast<R>(v), R(0));
  } else if constexpr (To == DType::kPred) {
    return v != 0 ? 1 : 0;
  } else if constexpr (kIsFloat<From> && kIsInt<To>) {
    if constexpr (To == DType::kS32) {
      return FloatToS32(static_cast<double>(v));
    } else if constexpr (To == DType::kU64) {
      return FloatToU64(static_cast<double>(v));
    } else if constexpr (sizeof(StorageT<To>) <= 2) {
      // s8/s16/u8/u16: torch converts through int32, then wraps.
      return static_cast<StorageT<To>>(static_cast<uint32_t>(FloatToS32(static_cast<double>(v))));
    } else {
      return static_cast<StorageT<To>>(static_cast<uint64_t>(FloatToS64(static_cast<double>(v))));
    }
  } else if constexpr (To == DType::kF16 || To == DType::kBF16) {
    return Store<To>(static_cast<float>(v));
  } else {
    // int/pred -> int (wraps), any real -> f32/f64 (nearest).
    return static_cast<StorageT<To>>(v);
  }
}

}  // namespace ember::eval
