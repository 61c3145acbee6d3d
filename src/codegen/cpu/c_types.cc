// Spelling of dtypes and literal values in generated C++ (c_types.h).
#include "codegen/cpu/c_types.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace ember::codegen {

std::string StorageType(DType t) {
  switch (t) {
    case DType::kPred:
      return "uint8_t";
    case DType::kS8:
      return "int8_t";
    case DType::kS16:
      return "int16_t";
    case DType::kS32:
      return "int32_t";
    case DType::kS64:
      return "int64_t";
    case DType::kU8:
      return "uint8_t";
    case DType::kU16:
      return "uint16_t";
    case DType::kU32:
      return "uint32_t";
    case DType::kU64:
      return "uint64_t";
    case DType::kF16:
      return "uint16_t";
    case DType::kBF16:
      return "uint16_t";
    case DType::kF32:
      return "float";
    case DType::kF64:
      return "double";
    case DType::kC64:
    case DType::kC128:
      return "void";  // rejected by CheckKernelSupported
  }
  return "void";
}

std::string ComputeType(DType t) {
  if (t == DType::kF16 || t == DType::kBF16) return "float";
  return StorageType(t);
}

std::string SelectExpr(DType t, const std::string& c, const std::string& a, const std::string& b) {
  if (!IsFloat(t)) return "(" + c + " ? " + a + " : " + b + ")";
  const std::string ct = ComputeType(t);
  return "ember_fsel(" + c + ", (" + ct + ")" + a + ", (" + ct + ")" + b + ")";
}

std::string LoadExpr(DType t, const std::string& storage) {
  if (t == DType::kBF16) return "ember_bf16_to_f32(" + storage + ")";
  if (t == DType::kF16) return "ember_f16_to_f32(" + storage + ")";
  return storage;
}

std::string StoreExpr(DType t, const std::string& value) {
  if (t == DType::kBF16) return "ember_f32_to_bf16(" + value + ")";
  if (t == DType::kF16) return "ember_f32_to_f16(" + value + ")";
  if (t == DType::kPred) return "(uint8_t)((" + value + ") != 0)";
  return value;
}

std::string RoundExpr(DType t, const std::string& value) {
  if (t == DType::kBF16) return "ember_round_bf16(" + value + ")";
  if (t == DType::kF16) return "ember_round_f16(" + value + ")";
  return value;
}

std::string IntLiteral(int64_t v) {
  if (v == INT64_MIN) return "(-9223372036854775807LL - 1)";
  if (v >= -2147483647 && v <= 2147483647) return std::to_string(v);
  return std::to_string(v) + "LL";
}

namespace {

std::string FloatBitsExpr(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  if (std::isfinite(f)) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%af", static_cast<double>(f));
    // "-0x0p+0f" keeps the sign of zero.
    return std::string("(") + buf + ")";
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "ember_bits_to_f32(0x%08" PRIx32 "u)", bits);
  return buf;
}

std::string DoubleBitsExpr(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  char buf[96];
  if (std::isfinite(d)) {
    std::snprintf(buf, sizeof(buf), "(%a)", d);
    return buf;
  }
  // NaN payloads and infinities through a bit cast.
  std::snprintf(buf, sizeof(buf), "__builtin_bit_cast(double, (uint64_t)0x%016" PRIx64 "ULL)",
                bits);
  return buf;
}

}  // namespace

std::string ElementExpr(const Literal& lit, int64_t i) {
  if (i < 0 || i >= lit.num_elements()) return "(" + ComputeType(lit.dtype()) + ")0";
  const auto* p = static_cast<const uint8_t*>(lit.data());
  const DType t = lit.dtype();
  const int64_t es = DTypeSize(t);
  const uint8_t* e = p + i * es;
  auto rd = [&](auto zero) {
    decltype(zero) v;
    std::memcpy(&v, e, sizeof(v));
    return v;
  };
  switch (t) {
    case DType::kPred:
      return rd(uint8_t{0}) ? "(uint8_t)1" : "(uint8_t)0";
    case DType::kS8:
      return "(int8_t)" + std::to_string(rd(int8_t{0}));
    case DType::kS16:
      return "(int16_t)" + std::to_string(rd(int16_t{0}));
    case DType::kS32:
      return "(int32_t)" + IntLiteral(rd(int32_t{0}));
    case DType::kS64:
      return "(int64_t)" + IntLiteral(rd(int64_t{0}));
    case DType::kU8:
      return "(uint8_t)" + std::to_string(rd(uint8_t{0}));
    case DType::kU16:
      return "(uint16_t)" + std::to_string(rd(uint16_t{0}));
    case DType::kU32:
      return "(uint32_t)" + std::to_string(rd(uint32_t{0})) + "u";
    case DType::kU64:
      return "(uint64_t)" + std::to_string(rd(uint64_t{0})) + "ULL";
    case DType::kBF16:
      return FloatBitsExpr(static_cast<uint32_t>(rd(uint16_t{0})) << 16);
    case DType::kF16:
      return FloatBitsExpr(FloatToBits(F16ToFloat(rd(uint16_t{0}))));
    case DType::kF32:
      return FloatBitsExpr(rd(uint32_t{0}));
    case DType::kF64:
      return DoubleBitsExpr(rd(uint64_t{0}));
    case DType::kC64:
    case DType::kC128:
      return "0";
  }
  return "0";
}

std::string StorageInitializer(const Literal& lit, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(lit.data());
  const DType t = lit.dtype();
  if (t == DType::kBF16 || t == DType::kF16) {
    uint16_t h;
    std::memcpy(&h, p + i * 2, 2);
    return std::to_string(h) + "u";
  }
  return ElementExpr(lit, i);
}

}  // namespace ember::codegen
