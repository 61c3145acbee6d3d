// Element types of the IR (DESIGN §3) and the 16-bit float conversions.
//
// The list is declared once, in EMBER_DTYPES. Text names follow HLO
// (`pred`, `s32`, `bf16`, `c64`, ...). bf16 and f16 are stored as their bit
// patterns (uint16_t) and computed in f32; conversions from f32 round to
// nearest even (IEEE 754 roundTiesToEven), NaN stays NaN.
// Complex types (c64, c128) are carried through data movement, copies and
// custom-calls; arithmetic on them is rejected by the builder.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace ember {

// V(enumerator, text name, byte size)
#define EMBER_DTYPES(V) \
  V(kPred, "pred", 1)   \
  V(kS8, "s8", 1)       \
  V(kS16, "s16", 2)     \
  V(kS32, "s32", 4)     \
  V(kS64, "s64", 8)     \
  V(kU8, "u8", 1)       \
  V(kU16, "u16", 2)     \
  V(kU32, "u32", 4)     \
  V(kU64, "u64", 8)     \
  V(kF16, "f16", 2)     \
  V(kBF16, "bf16", 2)   \
  V(kF32, "f32", 4)     \
  V(kF64, "f64", 8)     \
  V(kC64, "c64", 8)     \
  V(kC128, "c128", 16)

enum class DType : uint8_t {
#define EMBER_DTYPE_ENUM(e, name, size) e,
  EMBER_DTYPES(EMBER_DTYPE_ENUM)
#undef EMBER_DTYPE_ENUM
};

inline constexpr int kNumDTypes = 15;

std::string_view DTypeName(DType t);
std::optional<DType> ParseDType(std::string_view name);
int DTypeSize(DType t);  // bytes per element

bool IsFloat(DType t);        // f16, bf16, f32, f64
bool IsComplex(DType t);      // c64, c128
bool IsSignedInt(DType t);    // s8..s64
bool IsUnsignedInt(DType t);  // u8..u64
inline bool IsInteger(DType t) { return IsSignedInt(t) || IsUnsignedInt(t); }
inline bool IsPred(DType t) { return t == DType::kPred; }
int BitWidth(DType t);  // 8 * DTypeSize

// ---- 16-bit floats --------------------------------------------------------

inline float BitsToFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// f32 -> bf16, round to nearest even; NaN stays a quiet NaN.
inline uint16_t FloatToBF16(float f) {
  uint32_t b = FloatToBits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);
  uint32_t lsb = (b >> 16) & 1u;
  b += 0x7fffu + lsb;
  return static_cast<uint16_t>(b >> 16);
}
inline float BF16ToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }

// f32 -> IEEE binary16, round to nearest even, overflow to inf, subnormals kept.
uint16_t FloatToF16(float f);
float F16ToFloat(uint16_t h);

}  // namespace ember
