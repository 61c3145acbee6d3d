// IndexExpr (index_expr.h) against brute force: random expressions built
// from the operations a kernel's data movement uses are evaluated at every
// point of their variables' ranges, three ways — the unsimplified reference
// formula (floor semantics), the simplified form's Evaluate, and the printed
// C++ read back with C++'s truncating `/` and `%` — and each value must lie in
// Range(). Plus the forms the simplifier must reach (no division left).
#include "codegen/cpu/index_expr.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <map>
#include <random>

namespace ember::codegen {
namespace {

int64_t FloorDiv(int64_t a, int64_t d) { return a / d - ((a % d != 0) && (a < 0)); }
int64_t FloorMod(int64_t a, int64_t d) { return a - d * FloorDiv(a, d); }

using Env = std::map<std::string, int64_t>;

// Evaluates the printed C++ subset: integers (with LL), names, + - * / %,
// unary minus, parentheses, ember_floordiv/ember_floormod(a, b). `/` and `%`
// truncate as in C++.
class CxxEval {
 public:
  CxxEval(const std::string& s, const Env& env) : s_(s), env_(env) {}
  int64_t Run() {
    const int64_t v = Expr();
    Skip();
    if (p_ != s_.size()) Fail("trailing text");
    return v;
  }
  bool failed() const { return failed_; }

 private:
  void Fail(const char* why) {
    if (!failed_) ADD_FAILURE() << why << " at " << p_ << " in: " << s_;
    failed_ = true;
    p_ = s_.size();
  }
  void Skip() {
    while (p_ < s_.size() && s_[p_] == ' ') ++p_;
  }
  bool Eat(char c) {
    Skip();
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  int64_t Expr() {
    int64_t v = Term();
    for (;;) {
      if (Eat('+')) {
        v += Term();
      } else if (Eat('-')) {
        v -= Term();
      } else {
        return v;
      }
    }
  }
  int64_t Term() {
    int64_t v = Unary();
    for (;;) {
      if (Eat('*')) {
        v *= Unary();
      } else if (Eat('/')) {
        const int64_t d = Unary();
        if (d == 0) Fail("division by zero");
        v = d ? v / d : 0;
      } else if (Eat('%')) {
        const int64_t d = Unary();
        if (d == 0) Fail("modulo by zero");
        v = d ? v % d : 0;
      } else {
        return v;
      }
    }
  }
  int64_t Unary() {
    if (Eat('-')) return -Unary();
    return Primary();
  }
  int64_t Primary() {
    Skip();
    if (Eat('(')) {
      const int64_t v = Expr();
      if (!Eat(')')) Fail("expected )");
      return v;
    }
    if (p_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p_]))) {
      size_t q = p_;
      while (q < s_.size() && std::isdigit(static_cast<unsigned char>(s_[q]))) ++q;
      const int64_t v = std::stoll(s_.substr(p_, q - p_));
      p_ = q;
      if (s_.compare(p_, 2, "LL") == 0) p_ += 2;
      return v;
    }
    size_t q = p_;
    while (q < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[q])) || s_[q] == '_')) {
      ++q;
    }
    if (q == p_) {
      Fail("expected a primary");
      return 0;
    }
    const std::string name = s_.substr(p_, q - p_);
    p_ = q;
    if (name == "ember_floordiv" || name == "ember_floormod") {
      if (!Eat('(')) Fail("expected (");
      const int64_t a = Expr();
      if (!Eat(',')) Fail("expected ,");
      const int64_t b = Expr();
      if (!Eat(')')) Fail("expected )");
      if (b <= 0) Fail("non-positive divisor");
      if (b <= 0) return 0;
      return name == "ember_floordiv" ? FloorDiv(a, b) : FloorMod(a, b);
    }
    auto it = env_.find(name);
    if (it == env_.end()) Fail("unknown name");
    return it == env_.end() ? 0 : it->second;
  }

  const std::string& s_;
  const Env& env_;
  size_t p_ = 0;
  bool failed_ = false;
};

struct Var {
  std::string name;
  int64_t lo, hi;
};

// A random expression with its reference formula (no simplification).
struct Built {
  IndexExpr e;
  std::function<int64_t(const Env&)> ref;
  std::string text;  // the construction, for failure messages
};

class Gen {
 public:
  Gen(std::mt19937_64* rng, std::vector<Var> vars) : rng_(*rng), vars_(std::move(vars)) {}

  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

  Built Leaf() {
    if (Uniform(0, 4) == 0) {
      const int64_t c = Uniform(-20, 40);
      return {IndexExpr::Constant(c), [c](const Env&) { return c; }, std::to_string(c)};
    }
    const Var& v = vars_[Uniform(0, vars_.size() - 1)];
    const std::string n = v.name;
    return {IndexExpr::Variable(v.name, v.lo, v.hi), [n](const Env& e) { return e.at(n); }, n};
  }

  Built Make(int depth) {
    if (depth == 0) return Leaf();
    const int op = static_cast<int>(Uniform(0, 7));
    Built a = Make(depth - 1);
    switch (op) {
      case 0:
      case 1: {
        Built b = Make(depth - 1);
        const bool sub = op == 1;
        auto ra = a.ref, rb = b.ref;
        return {sub ? a.e - b.e : a.e + b.e,
                [ra, rb, sub](const Env& e) { return sub ? ra(e) - rb(e) : ra(e) + rb(e); },
                "(" + a.text + (sub ? " - " : " + ") + b.text + ")"};
      }
      case 2: {
        const int64_t k = Uniform(-4, 12);
        auto ra = a.ref;
        return {a.e * k, [ra, k](const Env& e) { return ra(e) * k; },
                "(" + a.text + " * " + std::to_string(k) + ")"};
      }
      case 3:
      case 4: {
        const int64_t k = Divisor();
        auto ra = a.ref;
        return {a.e.FloorDiv(k), [ra, k](const Env& e) { return FloorDiv(ra(e), k); },
                "fd(" + a.text + ", " + std::to_string(k) + ")"};
      }
      case 5:
      case 6: {
        const int64_t k = Divisor();
        auto ra = a.ref;
        return {a.e.Mod(k), [ra, k](const Env& e) { return FloorMod(ra(e), k); },
                "fm(" + a.text + ", " + std::to_string(k) + ")"};
      }
      default: {  // a de-linearized then re-linearized index over random dims
        std::vector<int64_t> d1 = Dims(), d2 = Dims();
        auto ra = a.ref;
        IndexExpr lin = Linearize(Delinearize(a.e, d1), d2);
        auto ref = [ra, d1, d2](const Env& e) {
          int64_t x = ra(e);
          // Delinearize over d1 (outermost non-1 dim without modulo).
          std::vector<int64_t> ix(d1.size(), 0), st(d1.size(), 1);
          for (int d = static_cast<int>(d1.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * d1[d + 1];
          bool outer = false;
          for (size_t d = 0; d < d1.size(); ++d) {
            if (d1[d] == 1) continue;
            ix[d] = FloorDiv(x, st[d]);
            if (outer) ix[d] = FloorMod(ix[d], d1[d]);
            outer = true;
          }
          int64_t lin = 0, s = 1;
          for (int d = static_cast<int>(d2.size()) - 1; d >= 0; --d) {
            if (d2[d] != 1) lin += ix[d] * s;
            s *= d2[d];
          }
          return lin;
        };
        return {lin, ref, "relin(" + a.text + ")"};
      }
    }
  }

  int64_t Divisor() {
    static const int64_t kDivisors[] = {1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 7};
    return kDivisors[Uniform(0, 10)];
  }
  // Two dims lists of the same rank (Delinearize then Linearize pairs them by position).
  std::vector<int64_t> Dims() {
    std::vector<int64_t> d(3);
    for (auto& x : d) x = Uniform(1, 6);
    return d;
  }

 private:
  std::mt19937_64& rng_;
  std::vector<Var> vars_;
};

// Every point of the variables' ranges.
void ForAllPoints(const std::vector<Var>& vars, const std::function<void(const Env&)>& f) {
  Env env;
  std::function<void(size_t)> rec = [&](size_t i) {
    if (i == vars.size()) {
      f(env);
      return;
    }
    for (int64_t v = vars[i].lo; v <= vars[i].hi; ++v) {
      env[vars[i].name] = v;
      rec(i + 1);
    }
  };
  rec(0);
}

::testing::AssertionResult AgreesEverywhere(const Built& b, const std::vector<Var>& vars) {
  const IndexRange r = b.e.Range();
  const std::string printed = b.e.ToString();
  std::string bad;
  ForAllPoints(vars, [&](const Env& env) {
    if (!bad.empty()) return;
    const int64_t want = b.ref(env);
    const int64_t got = b.e.Evaluate([&](const std::string& n) { return env.at(n); });
    CxxEval cx(printed, env);
    const int64_t cxx = cx.Run();
    if (got != want || cxx != want || cx.failed() || want < r.lo || want > r.hi) {
      bad = "want " + std::to_string(want) + " evaluate " + std::to_string(got) + " c++ " +
            std::to_string(cxx) + " range [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) +
            "] at";
      for (const auto& [n, v] : env) bad += " " + n + "=" + std::to_string(v);
    }
  });
  if (bad.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << "\n  built: " << b.text << "\n  simplified: " << printed;
}

TEST(IndexExpr, RandomExpressionsAgreeWithBruteForce) {
  const uint64_t seed = std::getenv("EMBER_INDEX_SEED")
                            ? std::strtoull(std::getenv("EMBER_INDEX_SEED"), nullptr, 10)
                            : 20261201;
  std::mt19937_64 rng(seed);
  int checked = 0;
  for (int round = 0; round < 3000; ++round) {
    // Ranges like loop counters, plus some with negative or shifted bounds.
    std::vector<Var> vars;
    const int nv = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < nv; ++i) {
      int64_t lo = rng() % 4 == 0 ? static_cast<int64_t>(rng() % 9) - 6 : 0;
      const int64_t n = 1 + static_cast<int64_t>(rng() % (nv == 3 ? 9 : 24));
      vars.push_back({"x" + std::to_string(i), lo, lo + n - 1});
    }
    Gen gen(&rng, vars);
    const Built b = gen.Make(1 + static_cast<int>(rng() % 4));
    ASSERT_TRUE(AgreesEverywhere(b, vars)) << "seed " << seed << " round " << round;
    ++checked;
  }
  EXPECT_EQ(checked, 3000);
}

IndexExpr V(const std::string& n, int64_t size) { return IndexExpr::Variable(n, 0, size - 1); }

// The q/k/v split of PERF_NOTES: [8,128,384] -> slice cols [128, 256) ->
// reshape [8,128,4,32] -> transpose {0,2,1,3} -> output [8,4,128,32].
TEST(IndexExpr, AttentionSplitIsStrided) {
  const IndexExpr i0 = V("i0", 8), i1 = V("i1", 4), i2 = V("i2", 128), i3 = V("i3", 32);
  // The transpose's operand [8,128,4,32] at (i0, i2, i1, i3), linearized for the reshape.
  const IndexExpr lin = Linearize({i0, i2, i1, i3}, {8, 128, 4, 32});
  std::vector<IndexExpr> m = Delinearize(lin, {8, 128, 128});
  m[2] = m[2] + 128;  // the slice's start
  const IndexExpr addr = Linearize(m, {8, 128, 384});
  EXPECT_EQ(addr.ToString(), "(i0 * 49152 + i2 * 384 + i1 * 32 + i3 + 128)");
  EXPECT_FALSE(addr.HasDivMod());
  EXPECT_EQ(addr.Coefficient("i3"), 1);
}

TEST(IndexExpr, BasicRules) {
  const IndexExpr a = V("a", 10), b = V("b", 16);
  EXPECT_EQ((a * 16 + b).FloorDiv(16), a);  // (a*K + b)/K = a for 0 <= b < K
  EXPECT_EQ((a * 16 + b).Mod(16), b);       // (a*K + b)%K = b
  EXPECT_EQ((a * 16 + b + 32).FloorDiv(16), a + 2);
  EXPECT_EQ(b.FloorDiv(16), IndexExpr::Constant(0));
  EXPECT_EQ(b.Mod(16), b);
  EXPECT_EQ((b + 16).Mod(16), b);
  // Common factor: (32*a + b) / 64 with b < 32 is a / 2; mod is 32*(a%2) + b.
  const IndexExpr c = V("c", 32);
  EXPECT_EQ((a * 32 + c).FloorDiv(64).ToString(), "(a / 2)");
  EXPECT_EQ((a * 32 + c).Mod(64).ToString(), "((a % 2) * 32 + c)");
  // Nested: floor(floor(x/4)/8) = floor(x/32); floor(x/4) mod 8 is one digit.
  const IndexExpr x = V("x", 1000);
  EXPECT_EQ(x.FloorDiv(4).FloorDiv(8), x.FloorDiv(32));
  EXPECT_EQ(x.FloorDiv(4).Mod(8).ToString(), "((x / 4) % 8)");
  EXPECT_EQ(x.Mod(64).Mod(8), x.Mod(8));
  EXPECT_EQ(x.Mod(64).FloorDiv(8).ToString(), "((x / 8) % 8)");
  // Merging: digits of x re-linearized are x again.
  EXPECT_EQ(x.FloorDiv(8) * 8 + x.Mod(8), x);
  EXPECT_EQ(x.FloorDiv(4).Mod(8) * 4 + x.Mod(4), x.Mod(32));
  EXPECT_EQ(x.FloorDiv(32) * 8 + x.FloorDiv(4).Mod(8), x.FloorDiv(4));
  // Reverse: (K-1) - i stays in [0, K).
  EXPECT_EQ((IndexExpr::Constant(15) - b).Mod(16).ToString(), "(-b + 15)");
  // A dividend that can be negative is shifted to be non-negative (C++ `/`
  // truncates; floor(n/2) = floor((n + 6)/2) - 3).
  const IndexExpr n = IndexExpr::Variable("n", -5, 5);
  EXPECT_EQ(n.FloorDiv(2).ToString(), "(((n + 6) / 2) - 3)");
  EXPECT_EQ((n + 5).FloorDiv(2).ToString(), "((n + 5) / 2)");
  EXPECT_EQ(n.Mod(4).ToString(), "((n + 8) % 4)");
  EXPECT_EQ(n.Mod(1), IndexExpr::Constant(0));
  EXPECT_EQ(n.FloorDiv(1), n);
}

TEST(IndexExpr, CoefficientAndVariables) {
  const IndexExpr i = V("i", 100), j = V("j", 7);
  const IndexExpr e = i * 7 + j.FloorDiv(2) + 3;
  EXPECT_EQ(e.Coefficient("i"), 7);
  EXPECT_EQ(e.Coefficient("j"), std::nullopt);
  EXPECT_EQ(e.Coefficient("k"), 0);
  EXPECT_EQ(e.Variables(), (std::vector<std::string>{"i", "j"}));
  EXPECT_EQ(e.constant_term(), 3);
  const IndexRange r = e.Range();
  EXPECT_EQ(r.lo, 3);
  EXPECT_EQ(r.hi, 99 * 7 + 3 + 3);
  // Substituting a row loop's definition: lin = row * 32 + j, row = i.
  const IndexExpr lin = IndexExpr::Variable("lin", 0, 3199);
  const IndexExpr k = V("k", 32);
  EXPECT_EQ(lin.FloorDiv(32).Substitute("lin", i * 32 + k), i);
}

// Splitting and merging contiguous dims: a linear index de-linearized over
// any regrouping of the dims and re-linearized is the same expression; a
// multi-index over dims A re-linearized through dims B that only merge
// adjacent dims of A keeps no division.
TEST(IndexExpr, RegroupedDimsRoundTrip) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 500; ++round) {
    std::vector<int64_t> a;
    const int ra = 1 + static_cast<int>(rng() % 4);
    for (int d = 0; d < ra; ++d) a.push_back(1 + static_cast<int64_t>(rng() % 6));
    // B merges runs of adjacent dims of A.
    std::vector<int64_t> b;
    for (int d = 0; d < ra; ++d) {
      if (!b.empty() && rng() % 2) {
        b.back() *= a[d];
      } else {
        b.push_back(a[d]);
      }
    }
    std::vector<IndexExpr> ix;
    int64_t n = 1;
    for (int d = 0; d < ra; ++d) {
      ix.push_back(V("i" + std::to_string(d), a[d]));
      n *= a[d];
    }
    const IndexExpr lin = Linearize(ix, a);
    const std::vector<IndexExpr> mb = Delinearize(lin, b);
    for (const auto& e : mb) EXPECT_FALSE(e.HasDivMod()) << e.ToString();
    EXPECT_EQ(Linearize(mb, b), lin);
    // A flat loop counter over all elements, de-linearized over A or B and
    // re-linearized, is the counter itself.
    if (n == 1) continue;  // i is 0 then
    const IndexExpr flat = V("i", n);
    std::string ds;
    for (int64_t x : a) ds += std::to_string(x) + ",";
    ds += " / ";
    for (int64_t x : b) ds += std::to_string(x) + ",";
    EXPECT_EQ(Linearize(Delinearize(flat, a), a).ToString(), flat.ToString()) << ds;
    EXPECT_EQ(Linearize(Delinearize(flat, b), b).ToString(), flat.ToString()) << ds;
  }
}

// Transposes of a flat index: a transpose of a transpose is the identity
// permutation, so the chain collapses to the counter.
TEST(IndexExpr, TransposeChainCollapses) {
  const std::vector<int64_t> dims = {3, 5, 4, 2};
  const IndexExpr flat = V("i", 3 * 5 * 4 * 2);
  std::vector<IndexExpr> m = Delinearize(flat, dims);
  const std::vector<int> perm = {2, 0, 3, 1};
  std::vector<IndexExpr> t(4);
  std::vector<int64_t> tdims(4);
  for (int d = 0; d < 4; ++d) {
    t[d] = m[perm[d]];
    tdims[d] = dims[perm[d]];
  }
  // Linearized in the permuted order: a strided read, divisions of i only.
  const IndexExpr tl = Linearize(t, tdims);
  std::vector<IndexExpr> back = Delinearize(tl, tdims);
  std::vector<IndexExpr> inv(4);
  for (int d = 0; d < 4; ++d) inv[perm[d]] = back[d];
  EXPECT_EQ(Linearize(inv, dims), flat);
}

}  // namespace
}  // namespace ember::codegen
