// Private: vector transcendentals in generated kernels through glibc's
// libmvec (the SIMD variants the x86-64 vector function ABI names, e.g.
// `_ZGVeN16v_expf` for 16 floats in a zmm register).
//
// glibc's <math.h> declares those variants (`__attribute__((simd))`) only
// under __FAST_MATH__, which kernels never use; VectorMathDeclarations()
// declares them itself (`#pragma omp declare simd notinbranch`), so that a
// `#pragma omp simd` loop calling __builtin_expf (etc.) vectorizes into
// calls of the vector variant, at any -O level that vectorizes (-O1 and up
// under -fopenmp-simd). Remainder iterations the vectorizer leaves scalar
// call the scalar libm function, which the interpreter uses too.
//
// Accuracy: the vector variants are not correctly rounded and differ from
// scalar libm by a few ulps (docs/codegen.md "Vector math" has the measured
// table; codegen_vector_math_test measures it): kVectorMathMaxUlps bounds
// |compiled - interpreter| for one such op on f32/f64, in ulps of the result
// dtype (for bf16/f16 results, one ulp of the 16-bit type: the f32 result
// is rounded once). Special values (NaN, +-inf, +-0) agree exactly.
// pow and atan2 go through libmvec's two-argument variants (`_ZGVeN16vv_powf`):
// a scalar libm call left in a `#pragma omp simd` loop keeps the whole loop
// scalar, every other op of the fused kernel with it (GPT-2's tanh-GELU,
// 0.5*x*(1+tanh(c*(x+0.044715*pow(x,3)))), ran scalar tanhf and powf).
// Other libm calls (fmod, remainder) stay scalar.
#pragma once

#include <string>
#include <vector>

#include "ember/ir/graph.h"

namespace ember::codegen {

// The ops whose float results go through libmvec when vector math is on are
// those with HasVectorMath (ember/ir/opcode.h): exponential, log,
// log-plus-one, exponential-minus-one, tanh, logistic (1 / (1 + exp(-x))),
// sine, cosine, erf, and the binary power and atan2.

// The largest difference (in ulps of the result's float dtype) between a
// compiled vector-math op and the interpreter's scalar libm value, for
// finite results; measured maxima are lower (docs/codegen.md).
inline constexpr int kVectorMathMaxUlps = 4;

// Per node of `g`: whether its value is computed from the result of a
// vector-math op on floats (the node itself included; a fusion counts when
// its body holds one). Tests compare such values within a ulp tolerance and
// everything else bit for bit.
std::vector<bool> DependsOnVectorMath(const Graph& g);

// C++ declarations (extern "C", `#pragma omp declare simd notinbranch`) of
// the libm functions of the HasVectorMath ops, float and double.
// Also defines ember_powf / ember_pow (float and double pow for kernels): the
// SIMD variant on |x| with C99's signs restored.
const char* VectorMathDeclarations();

// With vector math off: ember_powf / ember_pow as plain scalar libm pow.
const char* ScalarMathDefinitions();

// Libraries a kernel links after its object: libmvec, then libm (linked
// --as-needed: a kernel that calls no vector function does not depend on them).
const std::vector<std::string>& VectorMathLinkFlags();

}  // namespace ember::codegen
