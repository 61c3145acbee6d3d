// Random valid graphs and random inputs, for property tests: the pass fuzzer
// (pass_fuzz_test.cc) and, later, the codegen differential fuzzer.
//
// GenerateRandomGraph builds, from a seeded engine, a small graph (every
// array has at most `max_elements` elements) over f32/s32/pred parameters
// with a random mix of: elementwise unary and binary ops, compare, select,
// convert (also to f64/s64/bf16/u8), broadcast-in-dim, reshape, transpose,
// slice, concatenate, pad, reverse, reduce, iota, clamp, dynamic-slice (at
// in-range constant starts), argmax/argmin, tuple, dot-general (sometimes),
// constants that make simplify's rules fire (0, -0, 1, -1, all-ones, true,
// NaN, inf, often as a broadcast of a scalar), short patterns those rules
// match (neg(neg(x)), transpose(transpose(x)), ...), exact duplicates of
// earlier nodes (so cse fires), values no output uses (so dce fires), and
// sometimes rng-uniform and optimization-barrier. Integer divide and
// remainder divide by `x | 1`, which is never zero, so a graph has no
// integer division by zero by construction.
//
// The same engine state gives the same graph. Errors are a generator bug
// (an Internal status with the builder's message).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ember/ir/graph.h"

namespace ember::fuzz {

struct RandomGraphOptions {
  int min_ops = 6;  // random operations (each adds one or more nodes)
  int max_ops = 40;
  int max_rank = 3;
  int64_t max_dim = 4;
  int64_t max_elements = 64;  // per array
  int max_parameters = 3;
  int max_outputs = 3;
  bool allow_dot = true;
  bool allow_rng = true;
  bool allow_barrier = true;
};

StatusOr<Graph> GenerateRandomGraph(std::mt19937_64& rng, const RandomGraphOptions& options = {});

// A random value of array shape `s`: floats mix special values (0, -0, 1,
// -1, NaN, inf) with small numbers; integers mix small values with the
// extremes; pred is random. Complex elements are zero.
Literal RandomLiteral(const Shape& s, std::mt19937_64& rng);

// One random argument per parameter of `g`, in parameter order.
std::vector<Literal> RandomArguments(const Graph& g, std::mt19937_64& rng);

// Same shape and the same elements bit for bit, except that any NaN equals
// any NaN. On a mismatch `why` (if given) names the first differing element.
bool BitIdentical(const Literal& a, const Literal& b, std::string* why = nullptr);

// Distance in ulps between element i of two float literals of one dtype:
// the number of representable values of that dtype between them (0 when
// bit-identical, for +0 vs -0, or when both are NaN; a NaN against a
// non-NaN, or infinities of different sign, is INT64_MAX).
int64_t UlpDistance(const Literal& a, const Literal& b, int64_t i);

// Like BitIdentical, but float elements may differ by up to `max_ulps`
// ulps of their dtype (UlpDistance); other dtypes must be identical.
bool WithinUlps(const Literal& a, const Literal& b, int64_t max_ulps, std::string* why = nullptr);

// Sensitivity of a graph's outputs to per-op errors (for comparing code whose
// ops `which` selects — e.g. vector-math transcendentals — are accurate to a
// few ulps instead of bit-exact): a copy of `g` in which the value of every
// float node n with which(n) is multiplied by (1 + s_n * ulps * 2^-p), p the
// dtype's mantissa bits (24 for f32, 53 for f64, 8 for bf16, 11 for f16) and
// s_n = next_sign() (+1 or -1; called once per such node, in node order).
StatusOr<Graph> PerturbNodes(const Graph& g, const std::function<bool(const Node&)>& which,
                             double ulps, const std::function<double()>& next_sign);

// `got` against `want` computed by the reference with exact ops, given
// `perturbed`: the reference's outputs for PerturbNodes copies. A float
// element passes when it is within base_ulps + 2 * (the largest distance in
// ulps between want and a perturbed value) of want; any other element must
// equal want or one of the perturbed values (e.g. a comparison that a few
// ulps can flip). NaN equals NaN.
bool WithinPerturbation(const Literal& got, const Literal& want,
                        const std::vector<const Literal*>& perturbed, int64_t base_ulps,
                        std::string* why = nullptr);

}  // namespace ember::fuzz
