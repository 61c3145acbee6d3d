// Accuracy of the vector-math transcendentals (vector_math.h: glibc libmvec
// through `#pragma omp declare simd`) in kernels compiled as in production
// (-O3 -march=native), over ~4.6*10^5 f32 and ~3.3*10^5 f64 values: a sweep of
// bit patterns (every exponent, subnormals included), random values in the
// ranges that matter, and the edge cases NaN, +-inf, +-0, denormals, large
// |x|. Each op is compared with
//   - the interpreter (scalar libm): at most kVectorMathMaxUlps ulps, and
//     special values (NaN, +-inf, +-0 results) identical;
//   - a higher-precision reference (f64 for f32, long double for f64): the
//     measured maximum is printed (docs/codegen.md "Vector math" quotes it)
//     and bounded.
// The kernel object must depend on libmvec (the loop really calls the SIMD
// variants). EMBER_VMATH_SEED overrides the seed of the random values (printed).
#include <algorithm>
#include <cfloat>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "codegen/cpu/codegen_test_util.h"
#include "codegen/cpu/elf_needed.h"

namespace ember::codegen {
namespace {

using testing::RunKernel;
using testing::TempDir;

const std::vector<OpKind>& Ops() {
  static const std::vector<OpKind> ops = {OpKind::kExp,   OpKind::kLog,  OpKind::kLog1p,
                                          OpKind::kExpm1, OpKind::kTanh, OpKind::kLogistic,
                                          OpKind::kSin,   OpKind::kCos,  OpKind::kErf};
  return ops;
}

long double Reference(OpKind op, long double x) {
  switch (op) {
    case OpKind::kExp:
      return expl(x);
    case OpKind::kLog:
      return logl(x);
    case OpKind::kLog1p:
      return log1pl(x);
    case OpKind::kExpm1:
      return expm1l(x);
    case OpKind::kTanh:
      return tanhl(x);
    case OpKind::kLogistic:
      return 1.0L / (1.0L + expl(-x));
    case OpKind::kSin:
      return sinl(x);
    case OpKind::kCos:
      return cosl(x);
    case OpKind::kErf:
      return erfl(x);
    default:
      return 0;
  }
}

uint64_t Seed() {
  const char* e = std::getenv("EMBER_VMATH_SEED");
  return e && *e ? std::strtoull(e, nullptr, 0) : 20261130;
}

// Edge cases first, then the sweep and random values.
std::vector<double> Values(DType t, uint64_t seed) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v = {nan,
                           -nan,
                           inf,
                           -inf,
                           0.0,
                           -0.0,
                           1.0,
                           -1.0,
                           0.5,
                           -0.5,
                           2.0,
                           1e-3,
                           -1e-3,
                           1e-8,
                           -1e-8,
                           10.0,
                           -10.0,
                           20.0,
                           -20.0,
                           88.5,
                           88.8,
                           -87.0,
                           -103.0,
                           -104.0,
                           709.0,
                           710.0,
                           -745.0,
                           1e4,
                           -1e4,
                           1e6,
                           1e10,
                           -1e10,
                           1e20,
                           1e30,
                           -1e30,
                           3e38,
                           -3e38,
                           1e300,
                           -1e300,
                           3.14159265358979,
                           1.5707963267949,
                           6.28318530717959,
                           105414350.0,
                           -0.99999,
                           -1.0000001,
                           0.9999999};
  if (t == DType::kF32) {
    for (double d : {1e-45, -1e-45, 1e-40, -1e-40, 1e-39, 1.17549435e-38, -1.17549435e-38})
      v.push_back(d);
  } else {
    for (double d : {4.9e-324, -4.9e-324, 1e-310, -1e-310, 2.2250738585072014e-308}) v.push_back(d);
  }
  std::mt19937_64 rng(seed);
  if (t == DType::kF32) {
    // Bit patterns with a prime stride: every exponent and sign, subnormals,
    // NaNs and infinities included (about 2.6 * 10^5 values).
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 16411) {
      float f;
      const uint32_t u = static_cast<uint32_t>(b);
      std::memcpy(&f, &u, 4);
      v.push_back(f);
    }
  } else {
    for (int i = 0; i < 1 << 17; ++i) {
      const uint64_t u = rng();
      double d;
      std::memcpy(&d, &u, 8);
      v.push_back(d);
    }
  }
  std::uniform_real_distribution<double> wide(-30, 30), unit(-1, 1), mag(-20, 20);
  for (int i = 0; i < 1 << 16; ++i) v.push_back(wide(rng));
  for (int i = 0; i < 1 << 16; ++i) v.push_back(unit(rng));
  for (int i = 0; i < 1 << 16; ++i) {
    const double m = std::pow(10.0, mag(rng) * 0.5);
    v.push_back((rng() & 1) ? m : -m);
  }
  return v;
}

// |got - ref| in ulps of the dtype at ref (fractional); 0 if both are the
// same non-finite value.
double UlpsFromReference(DType t, double got, long double ref) {
  if (std::isnan(got) || std::isnan(static_cast<double>(ref))) {
    return std::isnan(got) && std::isnan(static_cast<double>(ref)) ? 0 : INFINITY;
  }
  // Reference rounded to the dtype decides overflow/underflow to inf.
  const long double rounded = t == DType::kF32 ? static_cast<long double>(static_cast<float>(ref))
                                               : static_cast<long double>(static_cast<double>(ref));
  if (std::isinf(got) || std::isinf(static_cast<double>(rounded))) {
    return got == static_cast<double>(rounded) ? 0 : INFINITY;
  }
  const int digits = t == DType::kF32 ? FLT_MANT_DIG : DBL_MANT_DIG;
  const int min_exp = t == DType::kF32 ? FLT_MIN_EXP : DBL_MIN_EXP;
  int e = 0;
  frexpl(ref, &e);
  e = std::max(e, min_exp);  // subnormals: a fixed ulp
  const long double ulp = ldexpl(1.0L, e - digits);
  return static_cast<double>(fabsl(static_cast<long double>(got) - ref) / ulp);
}

struct Row {
  double max_vs_libm = 0;        // ulps, vectorized vs scalar libm (interpreter)
  int64_t differ = 0;            // elements not bit-identical to libm
  double max_vs_ref = 0;         // vectorized vs the higher-precision reference
  double libm_vs_ref = 0;        // scalar libm vs the reference (for comparison)
  int64_t special_mismatch = 0;  // NaN/inf/zero results that differ from libm
  int64_t worst_index = -1;
};

void CheckDType(DType t) {
  const uint64_t seed = Seed();
  const std::vector<double> values = Values(t, seed);
  const int64_t n = static_cast<int64_t>(values.size());
  std::printf("vector math accuracy, %s: %" PRId64 " values, seed %llu (EMBER_VMATH_SEED)\n",
              std::string(DTypeName(t)).c_str(), n, static_cast<unsigned long long>(seed));
  const Shape s(t, {n});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s);
  std::vector<NodeId> outs;
  for (OpKind op : Ops()) outs.push_back(b.Unary(op, x));
  b.SetOutputs(outs);
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  TempDir dir;
  CodegenOptions opts;  // -O3 -march=native, vector math on: as in production
  opts.cache_dir = dir.path();
  auto k = CompileKernel(*g, opts);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  auto needed = ElfNeededLibraries((*k)->so_path());
  ASSERT_TRUE(needed.ok());
  bool libmvec = false;
  for (const auto& lib : *needed) libmvec |= lib.rfind("libmvec.so", 0) == 0;
  EXPECT_TRUE(libmvec) << "the kernel does not call libmvec";

  const Literal arg = Literal::FromDoubles(s, values);
  auto got = RunKernel(**k, {arg}, ThreadParallelFor(2));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto want = Evaluate(*g, {arg});
  ASSERT_TRUE(want.ok()) << want.status().ToString();

  std::printf("  %-22s %8s %8s %8s %12s\n", "op", "vs libm", "differ", "vs ref", "libm vs ref");
  for (size_t j = 0; j < Ops().size(); ++j) {
    const OpKind op = Ops()[j];
    const Literal& gl = (*got)[j];
    const Literal& wl = (*want)[j];
    Row r;
    for (int64_t i = 0; i < n; ++i) {
      const double gv = gl.GetDouble(i), wv = wl.GetDouble(i);
      const double xv = arg.GetDouble(i);
      const int64_t d = fuzz::UlpDistance(gl, wl, i);
      if (d != 0) ++r.differ;
      const bool special = std::isnan(wv) || std::isinf(wv) || wv == 0;
      if (special && !testing::SameElement(gl, wl, i)) {
        if (++r.special_mismatch <= 3) {
          ADD_FAILURE() << OpName(op) << "(" << xv << "): compiled " << gv << ", libm " << wv;
        }
      }
      if (d != INT64_MAX && static_cast<double>(d) > r.max_vs_libm) {
        r.max_vs_libm = static_cast<double>(d);
        r.worst_index = i;
      }
      if (d == INT64_MAX) r.max_vs_libm = INFINITY;
      const long double ref = Reference(op, static_cast<long double>(xv));
      // Arguments where sin/cos lose all meaning for a float (|x| > 2^24 for
      // f32, 2^53 for f64, every ulp of x spans many periods) are still
      // compared with libm above, but not with the reference.
      const double big = t == DType::kF32 ? 16777216.0 : 9007199254740992.0;
      if ((op == OpKind::kSin || op == OpKind::kCos) && std::fabs(xv) > big) continue;
      // logistic is 1 / (1 + exp(-x)) in the interpreter too: for x below
      // -log(max float) exp(-x) overflows and both give 0 where the exact
      // value is a tiny (subnormal) number. Compared with libm only.
      const double overflow = t == DType::kF32 ? 88.72 : 709.78;
      if (op == OpKind::kLogistic && xv < -overflow) continue;
      r.max_vs_ref = std::max(r.max_vs_ref, UlpsFromReference(t, gv, ref));
      r.libm_vs_ref = std::max(r.libm_vs_ref, UlpsFromReference(t, wv, ref));
    }
    std::printf("  %-22s %8.0f %8" PRId64 " %8.2f %12.2f\n", std::string(OpName(op)).c_str(),
                r.max_vs_libm, r.differ, r.max_vs_ref, r.libm_vs_ref);
    EXPECT_LE(r.max_vs_libm, kVectorMathMaxUlps)
        << OpName(op) << " on " << DTypeName(t)
        << ": worst at x = " << (r.worst_index >= 0 ? arg.GetDouble(r.worst_index) : 0.0)
        << " (seed " << seed << ")";
    EXPECT_EQ(r.special_mismatch, 0) << OpName(op);
    // Against the exact value: libmvec's documented bound is 4 ulps; libm's
    // own error adds at most 1 (the interpreter bound above is the tight one).
    EXPECT_LE(r.max_vs_ref, kVectorMathMaxUlps + 1.0) << OpName(op) << " on " << DTypeName(t);
    // The loop must actually run the vector variants on most elements:
    // otherwise this test measures scalar libm.
    if (op == OpKind::kExp) EXPECT_GT(r.differ, 0) << "no element of exp differs from scalar libm";
  }
}

// The binary vector-math ops, pow(x, y) and atan2(y, x), on pairs: every value
// of Values() against a cycle of exponents that models use (2, 3, 0.5, -1, ...),
// special values and random ones for pow; Values() against a shuffled copy for
// atan2. Same bounds as the unary ops.
void CheckBinary(DType t) {
  const uint64_t seed = Seed();
  const std::vector<double> xs = Values(t, seed);
  const int64_t n = static_cast<int64_t>(xs.size());
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> fixed = {2, 3,  0.5, -0.5,    -1,  -2,  1,    0,   -0.0, 1.5, 2.5,
                                     4, 10, -10, 1.0 / 3, 0.1, 127, -149, nan, inf,  -inf};
  std::uniform_real_distribution<double> expo(-20, 20);
  std::uniform_int_distribution<int> iexpo(-40, 40);
  std::vector<double> ys(n), others(xs);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = i % (static_cast<int64_t>(fixed.size()) + 2);
    ys[i] = k < static_cast<int64_t>(fixed.size())    ? fixed[k]
            : k == static_cast<int64_t>(fixed.size()) ? expo(rng)
                                                      : iexpo(rng);
  }
  std::shuffle(others.begin(), others.end(), rng);
  const Shape s(t, {n});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s), y = b.Parameter(1, s), z = b.Parameter(2, s);
  b.SetOutputs({b.Binary(OpKind::kPower, x, y), b.Binary(OpKind::kAtan2, x, z)});
  auto g = b.Build();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  TempDir dir;
  CodegenOptions opts;
  opts.cache_dir = dir.path();
  auto k = CompileKernel(*g, opts);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  const std::vector<Literal> args = {Literal::FromDoubles(s, xs), Literal::FromDoubles(s, ys),
                                     Literal::FromDoubles(s, others)};
  auto got = RunKernel(**k, args, ThreadParallelFor(2));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto want = Evaluate(*g, args);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  std::printf("binary vector math accuracy, %s: %" PRId64 " pairs, seed %llu\n",
              std::string(DTypeName(t)).c_str(), n, static_cast<unsigned long long>(seed));
  for (int j = 0; j < 2; ++j) {
    const OpKind op = j == 0 ? OpKind::kPower : OpKind::kAtan2;
    const std::vector<double>& second = j == 0 ? ys : others;
    Row r;
    for (int64_t i = 0; i < n; ++i) {
      const double gv = (*got)[j].GetDouble(i), wv = (*want)[j].GetDouble(i);
      const int64_t d = fuzz::UlpDistance((*got)[j], (*want)[j], i);
      if (d != 0) ++r.differ;
      const bool special = std::isnan(wv) || std::isinf(wv) || wv == 0;
      if (special && !testing::SameElement((*got)[j], (*want)[j], i) && ++r.special_mismatch <= 3) {
        ADD_FAILURE() << OpName(op) << "(" << xs[i] << ", " << second[i] << "): compiled " << gv
                      << ", libm " << wv;
      }
      if (d == INT64_MAX) {
        r.max_vs_libm = INFINITY;
      } else if (static_cast<double>(d) > r.max_vs_libm) {
        r.max_vs_libm = static_cast<double>(d);
        r.worst_index = i;
      }
      // The arguments as the kernel saw them (rounded to the dtype).
      const long double a = args[0].GetDouble(i), c = args[j == 0 ? 1 : 2].GetDouble(i);
      const long double ref = j == 0 ? powl(a, c) : atan2l(a, c);
      // pow(NaN, 0): glibc's pow and powl disagree for signaling NaNs (the f64
      // sweep's random bit patterns); NaN arguments are compared with libm only.
      if (std::isnan(static_cast<double>(a)) || std::isnan(static_cast<double>(c))) continue;
      r.max_vs_ref = std::max(r.max_vs_ref, UlpsFromReference(t, gv, ref));
      r.libm_vs_ref = std::max(r.libm_vs_ref, UlpsFromReference(t, wv, ref));
    }
    std::printf("  %-22s %8.0f %8" PRId64 " %8.2f %12.2f\n", std::string(OpName(op)).c_str(),
                r.max_vs_libm, r.differ, r.max_vs_ref, r.libm_vs_ref);
    EXPECT_LE(r.max_vs_libm, kVectorMathMaxUlps)
        << OpName(op) << " on " << DTypeName(t) << ": worst at ("
        << (r.worst_index >= 0 ? xs[r.worst_index] : 0.0) << ", "
        << (r.worst_index >= 0 ? second[r.worst_index] : 0.0) << ")";
    EXPECT_EQ(r.special_mismatch, 0) << OpName(op);
    EXPECT_LE(r.max_vs_ref, kVectorMathMaxUlps + 1.0) << OpName(op) << " on " << DTypeName(t);
    EXPECT_GT(r.differ, 0) << OpName(op) << ": no element differs from scalar libm";
  }
}

TEST(CodegenVectorMath, F32AccuracyAgainstLibmAndReference) { CheckDType(DType::kF32); }
TEST(CodegenVectorMath, F64AccuracyAgainstLibmAndReference) { CheckDType(DType::kF64); }
TEST(CodegenVectorMath, F32BinaryAccuracyAgainstLibmAndReference) { CheckBinary(DType::kF32); }
TEST(CodegenVectorMath, F64BinaryAccuracyAgainstLibmAndReference) { CheckBinary(DType::kF64); }

// With CodegenOptions::vector_math off the same ops are bit-identical to the
// interpreter (scalar libm) and the object does not need libmvec.
TEST(CodegenVectorMath, OffIsBitExact) {
  const Shape s(DType::kF32, {4096});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s);
  std::vector<NodeId> outs;
  for (OpKind op : Ops()) outs.push_back(b.Unary(op, x));
  b.SetOutputs(outs);
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  TempDir dir;
  CodegenOptions opts;
  opts.cache_dir = dir.path();
  opts.vector_math = false;
  std::vector<double> v = Values(DType::kF32, Seed());
  v.resize(4096);
  auto k = testing::ExpectMatchesInterpreter(*g, {Literal::FromDoubles(s, v)}, opts, {},
                                             /*vector_math_ulps=*/0);
  ASSERT_NE(k, nullptr);
  auto needed = ElfNeededLibraries(k->so_path());
  ASSERT_TRUE(needed.ok());
  for (const auto& lib : *needed) EXPECT_NE(lib.rfind("libmvec.so", 0), 0u) << lib;
}

// The fuzzers' tolerance for chains of vector-math ops: exp(exp(x)) near
// x = 3.85 amplifies the inner exp's error ~47x, beyond any fixed few-ulp
// bound, and WithinPerturbation accepts it from the perturbed references'
// spread; a value off by 1e-4 relative is still rejected.
TEST(CodegenVectorMath, PerturbedReferencesBoundChainedErrors) {
  const Shape s(DType::kF32, {256});
  GraphBuilder b;
  NodeId x = b.Parameter(0, s);
  b.SetOutputs({b.Exp(b.Exp(x))});
  auto g = b.Build();
  ASSERT_TRUE(g.ok());
  std::vector<double> v(256);
  for (int i = 0; i < 256; ++i) v[i] = 3.80 + 0.0004 * i;
  const Literal arg = Literal::FromDoubles(s, v);
  TempDir dir;
  CodegenOptions opts;
  opts.cache_dir = dir.path();
  auto k = CompileKernel(*g, opts);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  auto got = RunKernel(**k, {arg});
  auto want = Evaluate(*g, {arg});
  ASSERT_TRUE(got.ok() && want.ok());
  auto refs = testing::VectorMathPerturbedReferences(*g, {arg}, 1);
  ASSERT_EQ(refs.size(), 4u);
  std::vector<const Literal*> r;
  for (const auto& ref : refs) r.push_back(&ref[0]);
  int64_t worst = 0;
  for (int64_t i = 0; i < 256; ++i)
    worst = std::max(worst, fuzz::UlpDistance((*got)[0], (*want)[0], i));
  std::printf("exp(exp(x)), x in [3.80, 3.90]: worst %lld ulps from the interpreter\n",
              static_cast<long long>(worst));
  std::string why;
  EXPECT_TRUE(fuzz::WithinPerturbation((*got)[0], (*want)[0], r, kVectorMathMaxUlps, &why)) << why;
  Literal off = (*want)[0];
  off.SetDouble(7, off.GetDouble(7) * (1 + 1e-4));
  EXPECT_FALSE(fuzz::WithinPerturbation(off, (*want)[0], r, kVectorMathMaxUlps, &why));
}

}  // namespace
}  // namespace ember::codegen
