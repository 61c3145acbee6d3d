// Private: symbolic index arithmetic for generated kernels.
//
// An IndexExpr is an integer expression over named variables (loop counters
// and bound locals of a kernel, each with the closed range of values it
// takes): a sum of terms `coef * atom` plus a constant, where an atom is a
// variable or a *digit* `floor(inner / div) mod m` of another such sum
// (m = 0: no modulo). Floor division and modulo by positive constants have
// floor semantics (the modulo is in [0, m)). Every operation returns the
// simplified canonical form, so data movement composes into strided indices
// instead of chains of re-linearized division and modulo:
//
//   - multiples of the divisor leave a floordiv/mod:
//       floor((k*Q + R) / k) = Q + floor(R / k),  (k*Q + R) mod k = R mod k;
//   - range analysis (interval arithmetic over the atoms' ranges):
//       floor(R / k) = j and R mod k = R - j*k when R lies in [j*k, j*k + k);
//   - a common factor g | k whose remainder fits (R = g*Q + S, S in [0, g)):
//       floor(R / k) = floor(Q / (k/g)),  R mod k = g * (Q mod (k/g)) + S;
//   - nested digits: floor(floor(x/a)/b) = floor(x/(a*b)),
//       floor(x/a) mod b as one digit, (x mod m) mod b = x mod b for b | m;
//   - merging of contiguous dims (the inverse of de-linearization):
//       c*(floor(x/a) mod b) + c*b*(floor(x/(a*b)) mod b2)
//         = c*(floor(x/a) mod (b*b2))   (no mod when b2 = 0; x when a = 1).
//
// Example (the q/k/v split of an attention block: f32[8,128,384] sliced,
// reshaped to [8,128,4,32] and transposed to [8,4,128,32]): the linear index
// i0*16384 + i2*128 + i1*32 + i3 de-linearized over [8,128,128] and
// re-linearized over [8,128,384] with the slice's offset 128 is
// `i0 * 49152 + i2 * 384 + i1 * 32 + i3 + 128`: no division left, unit stride
// in i3.
//
// ToString prints a C++ int64 expression. A digit's dividend is always
// non-negative: the constant kept inside it is chosen so that its smallest
// value lies in [0, divisor) (floor(n/2) for n in [-5, 5] is
// `(((n + 6) / 2) - 3)`), so C++'s truncating `/` and `%` are the floor
// operations there. Variable names are printed as
// given; the caller declares them as int64_t. A variable name stands for one
// variable: every IndexExpr mentioning it must give it the same range.
// Arithmetic on coefficients that would overflow int64 keeps the form
// unsimplified (never wraps); index values themselves are the caller's (they
// are element offsets of buffers, far below 2^63).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ember::codegen {

// A closed integer interval [lo, hi].
struct IndexRange {
  int64_t lo = 0;
  int64_t hi = 0;
};

class IndexExpr {
 public:
  IndexExpr();  // the constant 0
  static IndexExpr Constant(int64_t c);
  // A variable spelled `name` in C++, taking values in [lo, hi] (lo <= hi).
  static IndexExpr Variable(const std::string& name, int64_t lo, int64_t hi);

  friend IndexExpr operator+(const IndexExpr& a, const IndexExpr& b);
  friend IndexExpr operator-(const IndexExpr& a, const IndexExpr& b);
  friend IndexExpr operator+(const IndexExpr& a, int64_t c);
  friend IndexExpr operator-(const IndexExpr& a, int64_t c);
  friend IndexExpr operator*(const IndexExpr& a, int64_t k);
  IndexExpr operator-() const;
  // floor(this / k) and this - k * floor(this / k), for k > 0.
  IndexExpr FloorDiv(int64_t k) const;
  IndexExpr Mod(int64_t k) const;

  // The values the expression can take (a superset: interval arithmetic
  // over its atoms; exact for a sum of distinct variables).
  IndexRange Range() const;
  bool IsConstant() const;
  int64_t constant_term() const;  // the constant of the sum
  // The coefficient of variable `var` when it occurs only as a term of its
  // own (0 if it does not occur); nullopt when it occurs inside a digit.
  std::optional<int64_t> Coefficient(const std::string& var) const;
  // Whether a floor division or modulo is left.
  bool HasDivMod() const;
  // The number of atoms, nested ones included (a measure of the printed
  // size: callers bind a large index to a variable rather than let it grow).
  int size() const { return size_; }
  // Every variable the expression reads, sorted.
  std::vector<std::string> Variables() const;
  // `this` with variable `var` replaced by `value` (re-simplified).
  IndexExpr Substitute(const std::string& var, const IndexExpr& value) const;

  // A C++ int64 expression: a bare name or literal, or parenthesized.
  std::string ToString() const;
  // The value with every variable bound by `env` (floor semantics).
  int64_t Evaluate(const std::function<int64_t(const std::string&)>& env) const;

  // Canonical forms are equal exactly when the keys are.
  const std::string& key() const;
  friend bool operator==(const IndexExpr& a, const IndexExpr& b) { return a.key() == b.key(); }
  friend bool operator!=(const IndexExpr& a, const IndexExpr& b) { return !(a == b); }

  struct Atom;
  struct Term {
    std::shared_ptr<const Atom> atom;
    int64_t coef = 0;
  };

 private:
  std::vector<Term> terms_;  // sorted by atom key, coefficients non-zero
  int64_t constant_ = 0;
  int size_ = 0;
  std::shared_ptr<const std::string> key_;

  friend struct IndexExprOps;
};

// Row-major multi-index <-> linear index of dims `dims` (size-1 dims give
// index 0). `Linearize(ix, dims)` = sum of ix[d] * stride[d];
// `Delinearize(lin, dims)`[d] = floor(lin / stride[d]) mod dims[d] (no mod
// for the outermost dim of size > 1).
IndexExpr Linearize(const std::vector<IndexExpr>& ix, const std::vector<int64_t>& dims);
std::vector<IndexExpr> Delinearize(const IndexExpr& lin, const std::vector<int64_t>& dims);

}  // namespace ember::codegen
