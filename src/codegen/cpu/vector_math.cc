#include "codegen/cpu/vector_math.h"

namespace ember::codegen {

bool IsVectorMathOp(OpKind op) {
  switch (op) {
    case OpKind::kExp: case OpKind::kLog: case OpKind::kLog1p: case OpKind::kExpm1:
    case OpKind::kTanh: case OpKind::kLogistic: case OpKind::kSin: case OpKind::kCos:
    case OpKind::kErf: case OpKind::kPower: case OpKind::kAtan2:
      return true;
    default:
      return false;
  }
}

namespace {

bool BodyHasVectorMath(const Graph& g) {
  for (const Node& n : g.nodes()) {
    if (n.called && BodyHasVectorMath(*n.called)) return true;
    if (IsVectorMathOp(n.op) && !n.shape.is_tuple() && IsFloat(n.shape.dtype())) return true;
  }
  return false;
}

}  // namespace

std::vector<bool> DependsOnVectorMath(const Graph& g) {
  std::vector<bool> dep(g.num_nodes(), false);
  for (const Node& n : g.nodes()) {
    bool d = (IsVectorMathOp(n.op) && !n.shape.is_tuple() && IsFloat(n.shape.dtype())) ||
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
)EMBER_VMATH";
}

const std::vector<std::string>& VectorMathLinkFlags() {
  static const std::vector<std::string> flags = {"-lmvec", "-lm"};
  return flags;
}

}  // namespace ember::codegen
