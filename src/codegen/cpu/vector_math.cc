#include "codegen/cpu/vector_math.h"

namespace ember::codegen {

namespace {

bool BodyHasVectorMath(const Graph& g) {
  for (const Node& n : g.nodes()) {
    if (n.called && BodyHasVectorMath(*n.called)) return true;
    if (HasVectorMath(n.op) && !n.shape.is_tuple() && IsFloat(n.shape.dtype())) return true;
  }
  return false;
}

}  // namespace

std::vector<bool> DependsOnVectorMath(const Graph& g) {
  std::vector<bool> dep(g.num_nodes(), false);
  for (const Node& n : g.nodes()) {
    bool d = (HasVectorMath(n.op) && !n.shape.is_tuple() && IsFloat(n.shape.dtype())) ||
             (n.called && BodyHasVectorMath(*n.called));
    for (NodeId o : n.operands) d = d || dep[o];
    dep[n.id] = d;
  }
  return dep;
}

const char* VectorMathDeclarations() {
  return R"EMBER_VMATH(// Vector math: libmvec's SIMD variants of these libm functions (glibc
// declares them only under __FAST_MATH__). Accuracy: docs/codegen.md.
extern "C" {
#define EMBER_VMATH(NAME) \
  _Pragma("omp declare simd notinbranch") float NAME##f(float) noexcept; \
  _Pragma("omp declare simd notinbranch") double NAME(double) noexcept;
EMBER_VMATH(exp)
EMBER_VMATH(log)
EMBER_VMATH(log1p)
EMBER_VMATH(expm1)
EMBER_VMATH(tanh)
EMBER_VMATH(sin)
EMBER_VMATH(cos)
EMBER_VMATH(erf)
#undef EMBER_VMATH
#define EMBER_VMATH2(NAME) \
  _Pragma("omp declare simd notinbranch") float NAME##f(float, float) noexcept; \
  _Pragma("omp declare simd notinbranch") double NAME(double, double) noexcept;
EMBER_VMATH2(pow)
EMBER_VMATH2(atan2)
#undef EMBER_VMATH2
}

// pow(x, y) as sign * pow(|x|, y): libmvec's pow variants take their scalar
// fallback lane by lane for every negative base (half the lanes of a GELU's
// x^3), so the base handed to them is |x|. C99 Annex F.10.4.4 signs: an odd
// integer y keeps x's sign (-0 and -inf included); a finite x < 0 with a
// non-integer y is NaN. Integrality without float->int conversions or trunc
// (either keeps GCC from vectorizing the loop): (a + C) - C rounds a < C to an
// integer, C = 2^23 (f32) / 2^52 (f64); from C up every float is an integer,
// from 2C up an even one.
#define EMBER_VPOW(NAME, T, SUFFIX, C)                                             \
  static inline T NAME(T x, T y) {                                                \
    const T r = __builtin_pow##SUFFIX(__builtin_fabs##SUFFIX(x), y);              \
    const T ay = __builtin_fabs##SUFFIX(y), h = ay * (T)0.5;                       \
    const T rnd = (ay + C) - C, rnd_h = (h + C) - C;                               \
    const T s = (((ay >= C) | (rnd == ay)) & (rnd_h != h) & (ay < (T)2 * C) &      \
                 (__builtin_copysign##SUFFIX((T)1, x) < (T)0)) ? -r : r;           \
    return ((x < (T)0) & (x > -__builtin_inf##SUFFIX()) & (rnd != ay) & !(ay >= C)) \
               ? __builtin_nan##SUFFIX("") : s;                                   \
  }
EMBER_VPOW(ember_powf, float, f, 8388608.0f)
EMBER_VPOW(ember_pow, double, , 4503599627370496.0)
#undef EMBER_VPOW
)EMBER_VMATH";
}

const char* ScalarMathDefinitions() {
  return R"EMBER_SMATH(// Scalar libm (vector math off): bit-identical to the interpreter.
static inline float ember_powf(float x, float y) { return __builtin_powf(x, y); }
static inline double ember_pow(double x, double y) { return __builtin_pow(x, y); }
)EMBER_SMATH";
}

const std::vector<std::string>& VectorMathLinkFlags() {
  static const std::vector<std::string> flags = {"-lmvec", "-lm"};
  return flags;
}

}  // namespace ember::codegen
