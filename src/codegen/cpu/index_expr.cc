// Symbolic index arithmetic (index_expr.h): canonical sums of atoms, the
// simplification rules, range analysis and the C++ printer.
#include "codegen/cpu/index_expr.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "codegen/cpu/c_types.h"

namespace ember::codegen {

using Int = __int128;

struct IndexExpr::Atom {
  bool is_var = false;
  std::string name;  // variable
  IndexExpr inner;   // digit: floor(inner / div) mod mod (mod 0: none)
  int64_t div = 1;
  int64_t mod = 0;
  Int lo = 0, hi = 0;  // range
  int size = 1;        // 1 + the inner's size
  std::string key;
};

namespace {

using AtomPtr = std::shared_ptr<const IndexExpr::Atom>;

Int FloorDivInt(Int a, Int d) { return a / d - ((a % d != 0) && ((a < 0) != (d < 0))); }
Int FloorModInt(Int a, Int d) { return a - d * FloorDivInt(a, d); }

bool MulOk(int64_t a, int64_t b, int64_t* r) { return !__builtin_mul_overflow(a, b, r); }

// Terms by atom key (the canonical order), plus the constant.
struct Sum {
  std::map<std::string, std::pair<AtomPtr, Int>> terms;
  Int constant = 0;

  void Add(const AtomPtr& a, Int c) {
    if (c == 0) return;
    auto it = terms.find(a->key);
    if (it == terms.end()) {
      terms.emplace(a->key, std::make_pair(a, c));
    } else if ((it->second.second += c) == 0) {
      terms.erase(it);
    }
  }
};

// Range of sum `s` (interval arithmetic).
void SumRange(const Sum& s, Int* lo, Int* hi) {
  *lo = *hi = s.constant;
  for (const auto& [k, t] : s.terms) {
    const Int c = t.second;
    if (c > 0) {
      *lo += c * t.first->lo;
      *hi += c * t.first->hi;
    } else {
      *lo += c * t.first->hi;
      *hi += c * t.first->lo;
    }
  }
}

}  // namespace

struct IndexExprOps {
  static Sum ToSum(const IndexExpr& e) {
    Sum s;
    for (const auto& t : e.terms_)
      s.terms.emplace(t.atom->key, std::make_pair(t.atom, Int(t.coef)));
    s.constant = e.constant_;
    return s;
  }

  static void AddScaled(Sum* s, const IndexExpr& e, Int k) {
    for (const auto& t : e.terms_) s->Add(t.atom, k * t.coef);
    s->constant += k * e.constant_;
  }

  // Coefficients and the constant must fit int64 (index_expr.h: they are the
  // caller's strides and offsets).
  static IndexExpr Finish(Sum s) {
    MergeDigits(&s);
    IndexExpr e;
    std::string key;
    for (const auto& [k, t] : s.terms) {
      e.size_ += t.first->size;
      e.terms_.push_back({t.first, static_cast<int64_t>(t.second)});
      key += std::to_string(static_cast<int64_t>(t.second)) + "*" + k + "+";
    }
    e.constant_ = static_cast<int64_t>(s.constant);
    key += std::to_string(e.constant_);
    e.key_ = std::make_shared<const std::string>(std::move(key));
    return e;
  }

  // c*(floor(x/a) mod b) + c*b*(floor(x/(a*b)) mod b2) = c*(floor(x/a) mod (b*b2)).
  static void MergeDigits(Sum* s) {
    while (MergeOnePair(s)) {
    }
  }
  static bool MergeOnePair(Sum* s) {
    for (auto ia = s->terms.begin(); ia != s->terms.end(); ++ia) {
      const AtomPtr a = ia->second.first;
      const Int ca = ia->second.second;
      if (a->is_var || a->mod == 0) continue;
      int64_t div_b;
      if (!MulOk(a->div, a->mod, &div_b)) continue;
      for (auto ib = s->terms.begin(); ib != s->terms.end(); ++ib) {
        const AtomPtr b = ib->second.first;
        if (b->is_var || b->div != div_b || b->inner != a->inner) continue;
        if (ib->second.second != ca * a->mod) continue;
        int64_t mod = 0;
        if (b->mod != 0 && !MulOk(a->mod, b->mod, &mod)) continue;
        s->terms.erase(ia);
        s->terms.erase(ib);
        IndexExpr merged = a->inner.FloorDiv(a->div);
        if (mod != 0) merged = merged.Mod(mod);
        AddScaled(s, merged, ca);
        return true;
      }
    }
    return false;
  }

  static AtomPtr MakeVar(const std::string& name, int64_t lo, int64_t hi) {
    auto a = std::make_shared<IndexExpr::Atom>();
    a->is_var = true;
    a->name = name;
    a->lo = lo;
    a->hi = hi;
    a->key = name;
    return a;
  }

  // The atom floor(inner / div) mod mod, as is.
  static AtomPtr MakeDigit(const IndexExpr& inner, int64_t div, int64_t mod) {
    auto a = std::make_shared<IndexExpr::Atom>();
    a->inner = inner;
    a->div = div;
    a->mod = mod;
    a->size = 1 + inner.size();
    Int lo, hi;
    SumRange(ToSum(inner), &lo, &hi);
    lo = FloorDivInt(lo, div);
    hi = FloorDivInt(hi, div);
    if (mod != 0) {
      if (FloorDivInt(lo, mod) == FloorDivInt(hi, mod)) {
        const Int base = FloorDivInt(lo, mod) * mod;
        lo -= base;
        hi -= base;
      } else {
        lo = 0;
        hi = mod - 1;
      }
    }
    a->lo = lo;
    a->hi = hi;
    a->key = "{" + inner.key() + "/" + std::to_string(div) + "%" + std::to_string(mod) + "}";
    return a;
  }

  static IndexExpr FromAtom(const AtomPtr& a) {
    Sum s;
    s.Add(a, 1);
    return Finish(std::move(s));
  }

  // Common factors g of the divisor (1 < g < d) that terms of `r` have, largest first.
  static std::vector<int64_t> Factors(const Sum& r, int64_t d) {
    std::vector<int64_t> gs;
    for (const auto& [k, t] : r.terms) {
      const uint64_t c = static_cast<uint64_t>(t.second < 0 ? -t.second : t.second);
      const int64_t g = static_cast<int64_t>(std::gcd(c, static_cast<uint64_t>(d)));
      if (g > 1 && g < d) gs.push_back(g);
    }
    std::sort(gs.rbegin(), gs.rend());
    gs.erase(std::unique(gs.begin(), gs.end()), gs.end());
    return gs;
  }

  // r = g * q + rest with the terms of r whose coefficient g divides in q.
  static void SplitBy(const Sum& r, int64_t g, Sum* q, Sum* rest) {
    for (const auto& [k, t] : r.terms) {
      if (t.second % g == 0) {
        q->Add(t.first, t.second / g);
      } else {
        rest->Add(t.first, t.second);
      }
    }
    rest->constant = r.constant;
  }

  // If every value of `s` lies in one block [j*g, j*g + g), sets j.
  static bool OneBlock(const Sum& s, int64_t g, Int* j) {
    Int lo, hi;
    SumRange(s, &lo, &hi);
    *j = FloorDivInt(lo, g);
    return FloorDivInt(hi, g) == *j;
  }

  static IndexExpr FloorDiv(const IndexExpr& e, int64_t d) {
    if (d <= 0) return IndexExpr();  // precondition: d > 0
    if (d == 1) return e;
    // Multiples of d leave the division.
    Sum q, r;
    for (const auto& t : e.terms_) {
      if (t.coef % d == 0) {
        q.Add(t.atom, t.coef / d);
      } else {
        r.Add(t.atom, t.coef);
      }
    }
    // The constant left inside puts the dividend's smallest value in [0, d)
    // (non-negative: printed as C++ `/`).
    Int lo, hi;
    SumRange(r, &lo, &hi);
    const Int shift = FloorDivInt(lo + e.constant_, d);
    q.constant = shift;
    r.constant = e.constant_ - shift * d;
    Int j;
    if (OneBlock(r, d, &j)) {
      q.constant += j;
      return Finish(std::move(q));
    }
    // A factor g | d whose remainder lies in one block of g:
    // floor((g*Q + S) / d) = floor((Q + j) / (d/g)) for S in [j*g, j*g + g).
    for (int64_t g : Factors(r, d)) {
      Sum rq, rest;
      SplitBy(r, g, &rq, &rest);
      if (!OneBlock(rest, g, &j)) continue;
      rq.constant += j;
      const IndexExpr inner = Finish(std::move(rq));
      AddScaled(&q, FloorDiv(inner, d / g), 1);
      return Finish(std::move(q));
    }
    // Nested digit: floor(floor(x/a) / d) = floor(x / (a*d)), and
    // floor((floor(x/a) mod m) / d) = floor(x / (a*d)) mod (m/d) when d | m.
    if (r.terms.size() == 1 && r.constant == 0 && r.terms.begin()->second.second == 1) {
      const AtomPtr a = r.terms.begin()->second.first;
      int64_t ad;
      if (!a->is_var && MulOk(a->div, d, &ad) && (a->mod == 0 || a->mod % d == 0)) {
        IndexExpr n = FloorDiv(a->inner, ad);
        if (a->mod != 0) n = Mod(n, a->mod / d);
        AddScaled(&q, n, 1);
        return Finish(std::move(q));
      }
    }
    q.Add(MakeDigit(Finish(std::move(r)), d, 0), 1);
    return Finish(std::move(q));
  }

  static IndexExpr Mod(const IndexExpr& e, int64_t m) {
    if (m <= 1) return IndexExpr();  // m == 1: 0; precondition: m > 0
    Sum r;
    for (const auto& t : e.terms_) {
      if (t.coef % m != 0) r.Add(t.atom, t.coef);
    }
    Int lo, hi;
    SumRange(r, &lo, &hi);
    r.constant = e.constant_ - FloorDivInt(lo + e.constant_, m) * m;  // smallest value in [0, m)
    Int j;
    if (OneBlock(r, m, &j)) {
      r.constant -= j * m;
      return Finish(std::move(r));
    }
    // (g*Q + S) mod m = g * ((Q + j) mod (m/g)) + (S - j*g) for S in [j*g, j*g + g).
    for (int64_t g : Factors(r, m)) {
      Sum rq, rest;
      SplitBy(r, g, &rq, &rest);
      if (!OneBlock(rest, g, &j)) continue;
      rq.constant += j;
      rest.constant -= j * g;
      AddScaled(&rest, Mod(Finish(std::move(rq)), m / g), g);
      return Finish(std::move(rest));
    }
    // floor(x/a) mod m, and (floor(x/a) mod m2) mod m = floor(x/a) mod m for m | m2.
    if (r.terms.size() == 1 && r.constant == 0 && r.terms.begin()->second.second == 1) {
      const AtomPtr a = r.terms.begin()->second.first;
      if (!a->is_var && (a->mod == 0 || a->mod % m == 0)) {
        return FromAtom(MakeDigit(a->inner, a->div, m));
      }
    }
    return FromAtom(MakeDigit(Finish(std::move(r)), 1, m));
  }

  // Every digit's dividend is non-negative (FloorDiv and Mod keep a constant
  // inside that makes its smallest value lie in [0, divisor)), so C++'s
  // truncating `/` and `%` are floor division and modulo there.
  static std::string AtomString(const IndexExpr::Atom& a) {
    if (a.is_var) return a.name;
    std::string s = a.inner.ToString();
    if (a.div != 1) s = "(" + s + " / " + IntLiteral(a.div) + ")";
    if (a.mod != 0) s = "(" + s + " % " + IntLiteral(a.mod) + ")";
    return s;
  }
};

IndexExpr::IndexExpr() : key_(std::make_shared<const std::string>("0")) {}

IndexExpr IndexExpr::Constant(int64_t c) {
  Sum s;
  s.constant = c;
  return IndexExprOps::Finish(std::move(s));
}

IndexExpr IndexExpr::Variable(const std::string& name, int64_t lo, int64_t hi) {
  return IndexExprOps::FromAtom(IndexExprOps::MakeVar(name, lo, hi));
}

IndexExpr operator+(const IndexExpr& a, const IndexExpr& b) {
  Sum s = IndexExprOps::ToSum(a);
  IndexExprOps::AddScaled(&s, b, 1);
  return IndexExprOps::Finish(std::move(s));
}

IndexExpr operator-(const IndexExpr& a, const IndexExpr& b) {
  Sum s = IndexExprOps::ToSum(a);
  IndexExprOps::AddScaled(&s, b, -1);
  return IndexExprOps::Finish(std::move(s));
}

IndexExpr operator+(const IndexExpr& a, int64_t c) { return a + IndexExpr::Constant(c); }
IndexExpr operator-(const IndexExpr& a, int64_t c) { return a - IndexExpr::Constant(c); }

IndexExpr operator*(const IndexExpr& a, int64_t k) {
  Sum s;
  IndexExprOps::AddScaled(&s, a, k);
  return IndexExprOps::Finish(std::move(s));
}

IndexExpr IndexExpr::operator-() const { return *this * -1; }

IndexExpr IndexExpr::FloorDiv(int64_t k) const { return IndexExprOps::FloorDiv(*this, k); }
IndexExpr IndexExpr::Mod(int64_t k) const { return IndexExprOps::Mod(*this, k); }

IndexRange IndexExpr::Range() const {
  Int lo, hi;
  SumRange(IndexExprOps::ToSum(*this), &lo, &hi);
  auto clamp = [](Int v) {
    return static_cast<int64_t>(std::max<Int>(INT64_MIN, std::min<Int>(INT64_MAX, v)));
  };
  return {clamp(lo), clamp(hi)};
}

bool IndexExpr::IsConstant() const { return terms_.empty(); }
int64_t IndexExpr::constant_term() const { return constant_; }

std::optional<int64_t> IndexExpr::Coefficient(const std::string& var) const {
  int64_t c = 0;
  for (const auto& t : terms_) {
    if (t.atom->is_var) {
      if (t.atom->name == var) c = t.coef;
      continue;
    }
    const auto vs = t.atom->inner.Variables();
    if (std::binary_search(vs.begin(), vs.end(), var)) return std::nullopt;
  }
  return c;
}

bool IndexExpr::HasDivMod() const {
  for (const auto& t : terms_) {
    if (!t.atom->is_var) return true;
  }
  return false;
}

std::vector<std::string> IndexExpr::Variables() const {
  std::vector<std::string> vs;
  for (const auto& t : terms_) {
    if (t.atom->is_var) {
      vs.push_back(t.atom->name);
    } else {
      const auto in = t.atom->inner.Variables();
      vs.insert(vs.end(), in.begin(), in.end());
    }
  }
  std::sort(vs.begin(), vs.end());
  vs.erase(std::unique(vs.begin(), vs.end()), vs.end());
  return vs;
}

IndexExpr IndexExpr::Substitute(const std::string& var, const IndexExpr& value) const {
  Sum s;
  s.constant = constant_;
  for (const auto& t : terms_) {
    if (t.atom->is_var) {
      if (t.atom->name == var) {
        IndexExprOps::AddScaled(&s, value, t.coef);
      } else {
        s.Add(t.atom, t.coef);
      }
      continue;
    }
    IndexExpr d = t.atom->inner.Substitute(var, value).FloorDiv(t.atom->div);
    if (t.atom->mod != 0) d = d.Mod(t.atom->mod);
    IndexExprOps::AddScaled(&s, d, t.coef);
  }
  return IndexExprOps::Finish(std::move(s));
}

std::string IndexExpr::ToString() const {
  if (terms_.empty()) {
    return constant_ < 0 ? "(" + IntLiteral(constant_) + ")" : IntLiteral(constant_);
  }
  // Largest coefficient first (row-major order for strided indices).
  std::vector<const Term*> order;
  for (const auto& t : terms_) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const Term* a, const Term* b) { return a->coef > b->coef; });
  std::string s;
  for (const Term* t : order) {
    const std::string a = IndexExprOps::AtomString(*t->atom);
    const uint64_t mag =
        t->coef < 0 ? uint64_t{0} - static_cast<uint64_t>(t->coef) : static_cast<uint64_t>(t->coef);
    std::string p = a;
    if (mag != 1) {
      p += " * " + (mag > static_cast<uint64_t>(INT64_MAX) ? IntLiteral(INT64_MIN)
                                                           : IntLiteral(static_cast<int64_t>(mag)));
    }
    if (s.empty()) {
      s = t->coef < 0 ? "-" + p : p;
    } else {
      s += (t->coef < 0 ? " - " : " + ") + p;
    }
  }
  if (constant_ > 0) s += " + " + IntLiteral(constant_);
  if (constant_ < 0) {
    s += constant_ == INT64_MIN ? " + " + IntLiteral(constant_) : " - " + IntLiteral(-constant_);
  }
  if (terms_.size() == 1 && constant_ == 0 && terms_[0].coef == 1) return s;  // an atom
  return "(" + s + ")";
}

int64_t IndexExpr::Evaluate(const std::function<int64_t(const std::string&)>& env) const {
  Int v = constant_;
  for (const auto& t : terms_) {
    Int a;
    if (t.atom->is_var) {
      a = env(t.atom->name);
    } else {
      a = FloorDivInt(t.atom->inner.Evaluate(env), t.atom->div);
      if (t.atom->mod != 0) a = FloorModInt(a, t.atom->mod);
    }
    v += a * t.coef;
  }
  return static_cast<int64_t>(v);
}

const std::string& IndexExpr::key() const { return *key_; }

IndexExpr Linearize(const std::vector<IndexExpr>& ix, const std::vector<int64_t>& dims) {
  IndexExpr lin;
  int64_t stride = 1;
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    if (dims[d] != 1) lin = lin + ix[d] * stride;
    stride *= dims[d];
  }
  return lin;
}

std::vector<IndexExpr> Delinearize(const IndexExpr& lin, const std::vector<int64_t>& dims) {
  const int r = static_cast<int>(dims.size());
  std::vector<IndexExpr> ix(r);
  std::vector<int64_t> stride(r, 1);
  for (int d = r - 2; d >= 0; --d) stride[d] = stride[d + 1] * dims[d + 1];
  for (int64_t n : dims) {
    if (n == 0) return ix;  // no elements
  }
  bool outer = false;  // a dim of size > 1 before d
  for (int d = 0; d < r; ++d) {
    if (dims[d] == 1) continue;
    ix[d] = lin.FloorDiv(stride[d]);
    if (outer) ix[d] = ix[d].Mod(dims[d]);
    outer = true;
  }
  return ix;
}

}  // namespace ember::codegen
