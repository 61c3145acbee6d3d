// Private: how IR dtypes and values are spelled in generated C++.
//
// Every dtype has a storage type (how one element lies in a buffer) and a
// compute type (what the arithmetic sees), as in the interpreter:
//   pred -> uint8_t / uint8_t (0 or 1)
//   s8..u64 -> the fixed-width integer / itself
//   f16, bf16 -> uint16_t bit pattern / float (rounded to nearest even on store)
//   f32 -> float / float, f64 -> double / double
// Complex dtypes are not supported by the code generator.
#pragma once

#include <cstdint>
#include <string>

#include "ember/ir/literal.h"

namespace ember::codegen {

std::string StorageType(DType t);
std::string ComputeType(DType t);
// Storage element -> compute value (decodes bf16/f16).
std::string LoadExpr(DType t, const std::string& storage);
// Compute value -> storage element (rounds bf16/f16, normalizes pred).
std::string StoreExpr(DType t, const std::string& value);
// Rounds a freshly computed f32 value to bf16/f16 precision (identity for
// other dtypes): every elementwise result is rounded, as the interpreter
// stores each node's value.
std::string RoundExpr(DType t, const std::string& value);
// Element i of `lit` as a compute-type C++ expression (bit-exact: NaN
// payloads and signed zeros are kept).
std::string ElementExpr(const Literal& lit, int64_t i);
// Element i of `lit` as a storage-type initializer (for constant tables).
std::string StorageInitializer(const Literal& lit, int64_t i);
// `c ? a : b` for values of dtype t. Floating values go through the prelude's
// branch-free ember_fsel (GCC compiles a scalar float ternary to a jump that
// mispredicts on data-dependent masks; docs/codegen.md, "Semantics").
std::string SelectExpr(DType t, const std::string& c, const std::string& a, const std::string& b);
// An int64 literal ("12", "5000000000LL", INT64_MIN spelled safely).
std::string IntLiteral(int64_t v);

}  // namespace ember::codegen
