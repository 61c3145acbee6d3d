// Test helpers for the CPU code generator: a private cache directory per
// test process, compile + run of a graph, and comparison against the
// reference interpreter (bit-exact, any NaN equal to any NaN; values computed
// from a vector-math op (vector_math.h) within a stated ulp tolerance).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/cpu/disk_cache.h"
#include "codegen/cpu/vector_math.h"
#include "ember/codegen/cpu.h"
#include "ember/eval/interpreter.h"
#include "ember/ir/builder.h"
#include "passes/random_graph.h"

namespace ember::codegen::testing {

// A fresh cache directory, removed at exit of the owning scope.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ember-codegen-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { RemoveTree(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline CodegenOptions FastOptions(const std::string& cache_dir) {
  CodegenOptions o;
  o.fast = true;
  o.cache_dir = cache_dir;
  return o;
}

// A graph with its kernel's source and the compiled kernel (null when compiling
// failed, which is reported as a test failure).
struct BuiltKernel {
  Graph g;
  std::shared_ptr<CompiledKernel> k;
  std::string source;
};

// Emits and compiles the kernel of `g` (a graph builder's result) with a private cache.
inline BuiltKernel BuildKernel(StatusOr<Graph> g, const std::string& cache_dir) {
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  BuiltKernel out{g.ok() ? std::move(*g) : Graph(), nullptr, ""};
  auto src = EmitKernelSource(out.g);
  EXPECT_TRUE(src.ok()) << src.status().ToString();
  if (src.ok()) out.source = src->code;
  auto k = CompileKernel(out.g, FastOptions(cache_dir));
  EXPECT_TRUE(k.ok()) << k.status().ToString();
  if (k.ok()) out.k = *k;
  return out;
}

// Runs a compiled kernel on literals; returns the outputs (or the status).
inline StatusOr<std::vector<Literal>> RunKernel(const CompiledKernel& k,
                                                const std::vector<Literal>& args,
                                                const ParallelFor& pf = {}) {
  std::vector<const void*> in;
  for (const auto& a : args) in.push_back(a.data());
  std::vector<Literal> outs;
  for (const auto& s : k.output_shapes()) outs.emplace_back(s);
  std::vector<void*> out;
  for (auto& o : outs) out.push_back(o.data());
  EMBER_RETURN_IF_ERROR(k.Run(in, out, pf));
  return outs;
}

// Element i of `l` equal in both (bit-exact for everything; floats: any NaN
// matches any NaN).
inline bool SameElement(const Literal& a, const Literal& b, int64_t i) {
  const DType t = a.dtype();
  const int es = DTypeSize(t);
  const auto* pa = static_cast<const uint8_t*>(a.data()) + i * es;
  const auto* pb = static_cast<const uint8_t*>(b.data()) + i * es;
  if (IsFloat(t) && std::isnan(a.GetDouble(i)) && std::isnan(b.GetDouble(i))) return true;
  return std::memcmp(pa, pb, es) == 0;
}

// `got` equals `want` element by element: bit-exact (any NaN matches any
// NaN), or for float elements within `max_ulps` ulps of their dtype.
inline ::testing::AssertionResult SameLiteral(const Literal& got, const Literal& want,
                                              int64_t max_ulps = 0) {
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure()
           << "shape " << got.shape().ToString() << " vs " << want.shape().ToString();
  }
  const bool ulps = max_ulps > 0 && IsFloat(got.dtype());
  int bad = 0;
  int64_t worst = 0;
  std::string msg;
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    bool ok = SameElement(got, want, i);
    if (!ok && ulps) {
      const int64_t d = fuzz::UlpDistance(got, want, i);
      ok = d <= max_ulps;
      worst = std::max(worst, d);
    }
    if (!ok) {
      if (++bad <= 5) {
        msg += "\n  [" + std::to_string(i) + "] compiled " + FormatElement(got, i) +
               " interpreter " + FormatElement(want, i);
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  auto f = ::testing::AssertionFailure()
           << bad << " of " << got.num_elements() << " elements differ";
  if (ulps) f << " by more than " << max_ulps << " ulps (worst " << worst << ")";
  return f << ":" << msg;
}

// Whether a kernel compiled with `opts` uses vector math (vector_math.h).
inline bool VectorMathOn(const CodegenOptions& opts) {
  const char* e = std::getenv("EMBER_CODEGEN_VECTOR_MATH");
  return opts.vector_math && !(e && std::string(e) == "0");
}

// Compiles `g`, runs it and the interpreter on `args`, and expects every
// output to match: bit for bit, except outputs computed from a vector-math
// op (DependsOnVectorMath), which may differ by `vector_math_ulps` ulps of
// their float dtype (default kVectorMathMaxUlps: one such op). Returns the
// kernel (null on failure).
inline std::shared_ptr<CompiledKernel> ExpectMatchesInterpreter(
    const Graph& g, const std::vector<Literal>& args, const CodegenOptions& opts,
    const ParallelFor& pf = {}, int64_t vector_math_ulps = kVectorMathMaxUlps) {
  auto k = CompileKernel(g, opts);
  EXPECT_TRUE(k.ok()) << k.status().ToString();
  if (!k.ok()) return nullptr;
  auto want = Evaluate(g, args);
  EXPECT_TRUE(want.ok()) << want.status().ToString();
  auto got = RunKernel(**k, args, pf);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  if (!want.ok() || !got.ok()) return *k;
  const std::vector<bool> vm = DependsOnVectorMath(g);
  for (size_t j = 0; j < want->size(); ++j) {
    const NodeId o = g.outputs()[j];
    const int64_t tol = VectorMathOn(opts) && vm[o] ? vector_math_ulps : 0;
    EXPECT_TRUE(SameLiteral((*got)[j], (*want)[j], tol))
        << "output " << j << " (node %" << o << ": " << OpName(g.node(o).op) << ") of "
        << (*k)->name()
        << (tol ? " (vector math: tolerance " + std::to_string(tol) + " ulps)"
                : std::string(" (bit-exact)"));
  }
  return *k;
}

// The reference's outputs for `g` on `args` with the value of every float
// vector-math node perturbed by kVectorMathMaxUlps ulps (fuzz::PerturbNodes):
// all up, all down, and two random sign patterns from `seed`. With
// fuzz::WithinPerturbation they bound how far vector math may move an output
// of a graph that chains ops (exp(exp(x)) amplifies the inner error 47x at
// x = 3.85; exp(a) - exp(b) cancels). Empty if a perturbed graph fails.
inline std::vector<std::vector<Literal>> VectorMathPerturbedReferences(
    const Graph& g, const std::vector<Literal>& args, uint64_t seed) {
  std::vector<std::vector<Literal>> refs;
  auto vm = [](const Node& n) { return HasVectorMath(n.op); };
  for (int pattern = 0; pattern < 4; ++pattern) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(pattern));
    std::function<double()> sign = [&rng, pattern]() -> double {
      if (pattern < 2) return pattern == 0 ? 1.0 : -1.0;
      return (rng() & 1) ? 1.0 : -1.0;
    };
    auto pg = fuzz::PerturbNodes(g, vm, kVectorMathMaxUlps, sign);
    if (!pg.ok()) return {};
    auto out = Evaluate(*pg, args);
    if (!out.ok()) return {};
    refs.push_back(std::move(*out));
  }
  return refs;
}

// Random values of dtype t: a mix of small integers, fractions, and the
// given specials.
inline Literal RandomLiteral(const Shape& s, std::mt19937_64& rng,
                             const std::vector<double>& specials = {}) {
  std::vector<double> v(static_cast<size_t>(s.num_elements()));
  std::uniform_real_distribution<double> u(-8, 8);
  std::uniform_int_distribution<int> pick(0, 3);
  for (size_t i = 0; i < v.size(); ++i) {
    if (i < specials.size()) {
      v[i] = specials[i];
    } else if (IsFloat(s.dtype())) {
      int p = pick(rng);
      v[i] = p == 0 ? std::round(u(rng)) : p == 1 ? std::round(u(rng) * 2) / 2 : u(rng);
    } else if (IsPred(s.dtype())) {
      v[i] = pick(rng) & 1;
    } else {
      v[i] = std::round(u(rng) * 4);
      if (IsUnsignedInt(s.dtype())) v[i] = std::fabs(v[i]);
    }
  }
  return Literal::FromDoubles(s, v);
}

}  // namespace ember::codegen::testing
