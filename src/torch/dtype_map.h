// torch <-> IR dtype map (DESIGN §3) and its policy.
//
//   bool->pred, int8/16/32/64->s8..s64, uint8->u8, half->f16, bfloat16->bf16,
//   float->f32, double->f64: one to one.
//   uint16/32/64 -> u16/u32/u64: in the IR; ATen's CPU kernels cover few ops on them,
//     so until lowering exists ops on them run as eager-CPU fallbacks (errors at the
//     user's line, as in eager).
//   complex64/complex128 -> c64/c128: carried by copies and ATen extern steps
//     (arithmetic runs through the CPU kernels; the IR builder rejects it).
//   float8 variants, complex32, quantized and bits types: no IR dtype. Tensors of these
//     types are carried as device data; ops on them run as eager-CPU fallbacks.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>

#include "ember/ir/dtype.h"

namespace ember_torch {

inline std::optional<ember::DType> to_ir_dtype(c10::ScalarType t) {
  using ember::DType;
  switch (t) {
    case c10::ScalarType::Bool:
      return DType::kPred;
    case c10::ScalarType::Char:
      return DType::kS8;
    case c10::ScalarType::Short:
      return DType::kS16;
    case c10::ScalarType::Int:
      return DType::kS32;
    case c10::ScalarType::Long:
      return DType::kS64;
    case c10::ScalarType::Byte:
      return DType::kU8;
    case c10::ScalarType::UInt16:
      return DType::kU16;
    case c10::ScalarType::UInt32:
      return DType::kU32;
    case c10::ScalarType::UInt64:
      return DType::kU64;
    case c10::ScalarType::Half:
      return DType::kF16;
    case c10::ScalarType::BFloat16:
      return DType::kBF16;
    case c10::ScalarType::Float:
      return DType::kF32;
    case c10::ScalarType::Double:
      return DType::kF64;
    case c10::ScalarType::ComplexFloat:
      return DType::kC64;
    case c10::ScalarType::ComplexDouble:
      return DType::kC128;
    default:
      return std::nullopt;
  }
}

inline c10::ScalarType to_torch_dtype(ember::DType t) {
  using ember::DType;
  switch (t) {
    case DType::kPred:
      return c10::ScalarType::Bool;
    case DType::kS8:
      return c10::ScalarType::Char;
    case DType::kS16:
      return c10::ScalarType::Short;
    case DType::kS32:
      return c10::ScalarType::Int;
    case DType::kS64:
      return c10::ScalarType::Long;
    case DType::kU8:
      return c10::ScalarType::Byte;
    case DType::kU16:
      return c10::ScalarType::UInt16;
    case DType::kU32:
      return c10::ScalarType::UInt32;
    case DType::kU64:
      return c10::ScalarType::UInt64;
    case DType::kF16:
      return c10::ScalarType::Half;
    case DType::kBF16:
      return c10::ScalarType::BFloat16;
    case DType::kF32:
      return c10::ScalarType::Float;
    case DType::kF64:
      return c10::ScalarType::Double;
    case DType::kC64:
      return c10::ScalarType::ComplexFloat;
    case DType::kC128:
      return c10::ScalarType::ComplexDouble;
  }
  return c10::ScalarType::Undefined;
}

// Text name of the IR dtype (HLO spelling), or "" when there is none.
inline const char* ir_dtype_name(c10::ScalarType t) {
  auto d = to_ir_dtype(t);
  if (!d) return "";
  switch (*d) {
#define EMBER_TORCH_DTYPE_NAME(e, name, size) \
  case ember::DType::e:                       \
    return name;
    EMBER_DTYPES(EMBER_TORCH_DTYPE_NAME)
#undef EMBER_TORCH_DTYPE_NAME
  }
  return "";
}

}  // namespace ember_torch
