#include "ember/ir/dtype.h"

namespace ember {

std::string_view DTypeName(DType t) {
  switch (t) {
#define EMBER_DTYPE_NAME(e, name, size) \
  case DType::e:                        \
    return name;
    EMBER_DTYPES(EMBER_DTYPE_NAME)
#undef EMBER_DTYPE_NAME
  }
  return "?";
}

std::optional<DType> ParseDType(std::string_view name) {
#define EMBER_DTYPE_PARSE(e, n, size) \
  if (name == n) return DType::e;
  EMBER_DTYPES(EMBER_DTYPE_PARSE)
#undef EMBER_DTYPE_PARSE
  return std::nullopt;
}

int DTypeSize(DType t) {
  switch (t) {
#define EMBER_DTYPE_SIZE(e, name, size) \
  case DType::e:                        \
    return size;
    EMBER_DTYPES(EMBER_DTYPE_SIZE)
#undef EMBER_DTYPE_SIZE
  }
  return 0;
}

int BitWidth(DType t) { return t == DType::kPred ? 1 : 8 * DTypeSize(t); }

bool IsFloat(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 || t == DType::kF64;
}
bool IsComplex(DType t) { return t == DType::kC64 || t == DType::kC128; }
bool IsSignedInt(DType t) {
  return t == DType::kS8 || t == DType::kS16 || t == DType::kS32 || t == DType::kS64;
}
bool IsUnsignedInt(DType t) {
  return t == DType::kU8 || t == DType::kU16 || t == DType::kU32 || t == DType::kU64;
}

uint16_t FloatToF16(float f) {
  uint32_t x = FloatToBits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (absx >= 0x477ff000u) return sign | 0x7c00u;  // overflow (incl. inf) after rounding
  if (absx >= 0x38800000u) {                       // normal f16
    uint32_t mant = absx & 0x7fffffu;
    uint32_t exp = (absx >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;  // ties to even; may carry into exp
    return static_cast<uint16_t>(sign | h);
  }
  // subnormal f16 or zero: value = absx as float, scale to units of 2^-24
  if (absx < 0x33000000u) return sign;  // < 2^-25: rounds to zero (2^-25 exactly ties to 0)
  uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
  int shift = 126 - static_cast<int>(absx >> 23);  // 14 + (113 - exp)
  // result = mant >> (shift) with round to nearest even; shift in [14, 24]
  uint32_t h = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) h++;
  return static_cast<uint16_t>(sign | h);
}

float F16ToFloat(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);
    // subnormal: mant * 2^-24
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return BitsToFloat(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

}  // namespace ember
