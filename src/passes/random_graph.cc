#include "passes/random_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>

#include "ember/ir/builder.h"

namespace ember::fuzz {
namespace {

class Generator {
 public:
  Generator(std::mt19937_64& rng, const RandomGraphOptions& o) : rng_(rng), o_(o), b_("fuzz") {}

  StatusOr<Graph> Run() {
    const int nparams = Uniform(1, std::max(1, o_.max_parameters));
    for (int i = 0; i < nparams; ++i) {
      Add(b_.Parameter(
          i, RandomShape(PickDType({DType::kF32, DType::kF32, DType::kS32, DType::kPred}))));
    }
    const int nops = Uniform(o_.min_ops, std::max(o_.min_ops, o_.max_ops));
    for (int i = 0; i < nops && b_.status().ok(); ++i) Step();
    if (!b_.status().ok()) return Bug();

    // Outputs: mostly recent values; earlier ones stay dead unless used.
    const int nout = Uniform(1, std::max(1, o_.max_outputs));
    std::vector<NodeId> outs;
    for (int i = 0; i < nout; ++i) {
      const int n = static_cast<int>(pool_.size());
      const int lo = Chance(0.7) ? std::max(0, n - 4) : 0;
      outs.push_back(pool_[Uniform(lo, n - 1)]);
    }
    b_.SetOutputs(outs);
    if (Chance(0.2)) {  // a donation: output 0 may overwrite a parameter of its shape
      for (int p = 0; p < nparams; ++p) {
        if (b_.shape(params_[p]) == b_.shape(outs[0])) {
          b_.SetAlias(0, p);
          break;
        }
      }
    }
    StatusOr<Graph> g = b_.Build();
    if (!g.ok()) return Bug(g.status());
    return g;
  }

 private:
  // ---- randomness ----
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <typename T>
  T Pick(const std::vector<T>& v) {
    return v[Uniform(0, static_cast<int>(v.size()) - 1)];
  }
  DType PickDType(const std::vector<DType>& v) { return Pick(v); }

  Shape RandomShape(DType t) {
    const int rank = Uniform(0, o_.max_rank);
    std::vector<int64_t> dims;
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) {
      int64_t d = Uniform(1, static_cast<int>(o_.max_dim));
      if (n * d > o_.max_elements) d = 1;
      n *= d;
      dims.push_back(d);
    }
    return Shape(t, dims);
  }

  Status Bug(Status s = OkStatus()) {
    const Status& st = s.ok() ? b_.status() : s;
    return EMBER_INTERNAL_ERROR("random graph generator built an invalid graph: ", st.ToString());
  }

  // ---- the value pool ----
  NodeId Add(NodeId id) {
    if (id == kInvalidNode) return id;
    const Node& n = b_.node(id);
    if (n.op == OpKind::kParameter) params_.push_back(id);
    if (!n.shape.is_tuple()) pool_.push_back(id);
    return id;
  }
  const Shape& ShapeOf(NodeId id) { return b_.shape(id); }
  DType DTypeOf(NodeId id) { return b_.shape(id).dtype(); }
  NodeId Any() {
    // Favor recent values so chains form.
    const int n = static_cast<int>(pool_.size());
    if (Chance(0.6)) return pool_[Uniform(std::max(0, n - 5), n - 1)];
    return pool_[Uniform(0, n - 1)];
  }
  std::optional<NodeId> AnyWhere(const std::function<bool(NodeId)>& ok) {
    std::vector<NodeId> c;
    for (NodeId id : pool_) {
      if (ok(id)) c.push_back(id);
    }
    if (c.empty()) return std::nullopt;
    return Pick(c);
  }
  NodeId AnyOf(bool (*kind)(DType)) {
    if (auto id = AnyWhere([&](NodeId x) { return kind(DTypeOf(x)); })) return *id;
    return Add(Const(RandomShape(DType::kF32), false));  // callers ask for floats
  }

  // ---- constants ----
  // A scalar that makes some rule fire, or an ordinary value.
  Literal SpecialScalar(DType t) {
    Literal s(Shape(t, {}));
    if (IsFloat(t)) {
      const double nan = std::numeric_limits<double>::quiet_NaN();
      const double inf = std::numeric_limits<double>::infinity();
      s.SetDouble(
          0, Pick(std::vector<double>{0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 3.0, nan, inf, -inf, -2.5}));
    } else if (IsPred(t)) {
      s.SetInt(0, Uniform(0, 1));
    } else if (IsInteger(t)) {
      const int64_t all_ones = -1;  // wraps to all bits set for unsigned types
      s.SetInt(0, Pick(std::vector<int64_t>{0, 1, all_ones, 2, 3, 7, -5,
                                            std::numeric_limits<int32_t>::min()}));
    }
    return s;
  }
  // A constant of shape `s`: a broadcast special scalar (splat) or random data.
  NodeId Const(const Shape& s, bool splat) {
    if (splat || s.rank() == 0) {
      NodeId c = b_.Constant(SpecialScalar(s.dtype()));
      if (s.rank() == 0) return c;
      return b_.BroadcastInDim(c, s.dims(), {});
    }
    return b_.Constant(RandomLiteral(s, rng_));
  }
  // A second operand for a binary op on `a`: a value of a's shape from the
  // pool, `a` itself, or a constant.
  NodeId Partner(NodeId a) {
    const Shape s = ShapeOf(a);
    const int r = Uniform(0, 9);
    if (r < 4) {
      if (auto id = AnyWhere([&](NodeId x) { return ShapeOf(x) == s && x != a; })) return *id;
    }
    if (r == 4) return a;
    return Const(s, Chance(0.7));
  }

  // ---- ops by dtype ----
  static bool IsF(DType t) { return IsFloat(t); }
  static bool IsNum(DType t) { return IsFloat(t) || IsInteger(t); }

  NodeId UnaryOp(NodeId x) {
    const DType t = DTypeOf(x);
    std::vector<OpKind> ops;
    if (IsFloat(t)) {
      ops = {OpKind::kNegate, OpKind::kAbs,      OpKind::kExp,  OpKind::kLog,
             OpKind::kLog1p,  OpKind::kExpm1,    OpKind::kSqrt, OpKind::kRsqrt,
             OpKind::kTanh,   OpKind::kLogistic, OpKind::kSin,  OpKind::kCos,
             OpKind::kErf,    OpKind::kFloor,    OpKind::kCeil, OpKind::kRoundNearestEven,
             OpKind::kSign};
    } else if (IsInteger(t)) {
      ops = {OpKind::kNegate, OpKind::kAbs, OpKind::kSign, OpKind::kNot};
    } else {
      ops = {OpKind::kNot};
    }
    return b_.Unary(Pick(ops), x);
  }

  // Integer divisor that is never zero: x | 1.
  NodeId NonZero(NodeId x) {
    Literal one(Shape(DTypeOf(x), {}));
    one.SetInt(0, 1);
    NodeId c = b_.Constant(std::move(one));
    if (ShapeOf(x).rank() > 0) c = b_.BroadcastInDim(c, ShapeOf(x).dims(), {});
    return b_.Binary(OpKind::kOr, x, c);
  }

  NodeId SafeBinary(NodeId a) {
    const DType t = DTypeOf(a);
    if (IsInteger(t) && Chance(0.25)) {
      const OpKind op = Chance(0.5) ? OpKind::kDivide : OpKind::kRemainder;
      return b_.Binary(op, a, NonZero(Partner(a)));
    }
    NodeId c = Partner(a);
    std::vector<OpKind> ops;
    if (IsFloat(t)) {
      ops = {OpKind::kAdd,       OpKind::kSubtract, OpKind::kMultiply, OpKind::kDivide,
             OpKind::kRemainder, OpKind::kPower,    OpKind::kMaximum,  OpKind::kMinimum,
             OpKind::kAtan2,     OpKind::kAdd,      OpKind::kMultiply};
    } else if (IsInteger(t)) {
      ops = {OpKind::kAdd,
             OpKind::kSubtract,
             OpKind::kMultiply,
             OpKind::kPower,
             OpKind::kMaximum,
             OpKind::kMinimum,
             OpKind::kAnd,
             OpKind::kOr,
             OpKind::kXor,
             OpKind::kShiftLeft,
             OpKind::kShiftRightArithmetic,
             OpKind::kShiftRightLogical,
             OpKind::kAdd,
             OpKind::kMultiply,
             OpKind::kSubtract};
    } else {
      ops = {OpKind::kAnd, OpKind::kOr, OpKind::kXor};
    }
    return b_.Binary(Pick(ops), a, c);
  }

  NodeId CompareOp(NodeId a) {
    if (IsPred(DTypeOf(a)) && Chance(0.5)) return kInvalidNode;
    const ComparisonKind dir = Pick(
        std::vector<ComparisonKind>{ComparisonKind::kEq, ComparisonKind::kNe, ComparisonKind::kLt,
                                    ComparisonKind::kLe, ComparisonKind::kGt, ComparisonKind::kGe});
    return b_.Compare(a, Partner(a), dir);
  }

  NodeId SelectOp(NodeId a) {
    const Shape s = ShapeOf(a);
    NodeId p;
    if (Chance(0.2)) {
      p = Const(Shape(DType::kPred, Chance(0.5) ? std::vector<int64_t>{} : s.dims()), true);
    } else if (auto q = AnyWhere([&](NodeId x) {
                 return IsPred(DTypeOf(x)) &&
                        (ShapeOf(x).dims() == s.dims() || ShapeOf(x).rank() == 0);
               })) {
      p = *q;
    } else {
      p = b_.Compare(a, Partner(a), ComparisonKind::kLt);
    }
    if (Chance(0.2)) p = b_.Unary(OpKind::kNot, p);
    return b_.Select(p, a, Partner(a));
  }

  NodeId ConvertOp(NodeId a) {
    const DType to =
        Pick(std::vector<DType>{DType::kF32, DType::kS32, DType::kPred, DType::kF64, DType::kS64,
                                DType::kF32, DType::kS32, DType::kBF16, DType::kU8});
    return b_.Convert(a, to);
  }

  NodeId BroadcastOp(NodeId a) {
    const Shape s = ShapeOf(a);  // a copy: adding nodes moves the builder's storage
    if (s.rank() >= o_.max_rank) return kInvalidNode;
    // Insert one new dim at a random position; size-1 operand dims may grow.
    const int pos = Uniform(0, s.rank());
    std::vector<int64_t> out, map;
    int64_t total = 1;
    for (int i = 0; i <= s.rank(); ++i) {
      if (i == pos) out.push_back(Uniform(1, 3));
      if (i < s.rank()) {
        map.push_back(static_cast<int64_t>(out.size()));
        out.push_back(s.dim(i) == 1 && Chance(0.3) ? Uniform(1, 3) : s.dim(i));
      }
    }
    for (int64_t d : out) total *= d;
    if (total > o_.max_elements) return kInvalidNode;
    return b_.BroadcastInDim(a, out, map);
  }

  std::vector<int64_t> RandomFactorization(int64_t n) {
    if (n == 0) return Chance(0.5) ? std::vector<int64_t>{0} : std::vector<int64_t>{2, 0};
    std::vector<int64_t> dims;
    const int rank = Uniform(n == 1 ? 0 : 1, o_.max_rank);
    for (int i = 0; i + 1 < rank; ++i) {
      std::vector<int64_t> divs;
      for (int64_t d = 1; d <= n; ++d) {
        if (n % d == 0) divs.push_back(d);
      }
      int64_t d = Pick(divs);
      dims.push_back(d);
      n /= d;
    }
    if (rank > 0) dims.push_back(n);
    return dims;
  }

  NodeId ReshapeOp(NodeId a) {
    return b_.Reshape(a, RandomFactorization(ShapeOf(a).num_elements()));
  }

  std::vector<int64_t> RandomPermutation(int r) {
    std::vector<int64_t> p(r);
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), rng_);
    return p;
  }

  NodeId TransposeOp(NodeId a) { return b_.Transpose(a, RandomPermutation(ShapeOf(a).rank())); }

  NodeId SliceOp(NodeId a) {
    const Shape s = ShapeOf(a);  // a copy: adding nodes moves the builder's storage
    std::vector<int64_t> start, limit, stride;
    for (int i = 0; i < s.rank(); ++i) {
      const int d = static_cast<int>(s.dim(i));
      const int lo = Chance(0.5) ? 0 : Uniform(0, d);
      const int hi = Chance(0.5) ? d : Uniform(lo, d);
      start.push_back(lo);
      limit.push_back(hi);
      stride.push_back(Chance(0.7) ? 1 : Uniform(1, 3));
    }
    return b_.Slice(a, start, limit, stride);
  }

  NodeId ConcatOp(NodeId a) {
    const Shape s = ShapeOf(a);  // a copy: adding nodes moves the builder's storage
    if (s.rank() == 0) return kInvalidNode;
    const int dim = Uniform(0, s.rank() - 1);
    std::vector<NodeId> xs = {a};
    int64_t total = s.num_elements();
    const int extra = Uniform(0, 2);
    for (int i = 0; i < extra; ++i) {
      std::optional<NodeId> c = AnyWhere([&](NodeId x) {
        const Shape& t = ShapeOf(x);
        if (t.dtype() != s.dtype() || t.rank() != s.rank()) return false;
        for (int d = 0; d < s.rank(); ++d) {
          if (d != dim && t.dim(d) != s.dim(d)) return false;
        }
        return true;
      });
      NodeId x = c ? *c : a;
      total += ShapeOf(x).num_elements();
      if (total > o_.max_elements) break;
      xs.push_back(x);
    }
    return b_.Concatenate(xs, dim);
  }

  NodeId PadOp(NodeId a) {
    const Shape s = ShapeOf(a);  // a copy: adding nodes moves the builder's storage
    std::vector<int64_t> lo, hi, interior;
    int64_t total = 1;
    for (int i = 0; i < s.rank(); ++i) {
      const bool zero = Chance(0.4);
      lo.push_back(zero ? 0 : Uniform(s.dim(i) > 1 ? -1 : 0, 1));
      hi.push_back(zero ? 0 : Uniform(0, 1));
      interior.push_back(zero || Chance(0.7) ? 0 : 1);
      const int64_t core = s.dim(i) == 0 ? 0 : s.dim(i) + (s.dim(i) - 1) * interior.back();
      total *= core + lo.back() + hi.back();
    }
    if (total > o_.max_elements) return kInvalidNode;
    return b_.Pad(a, Const(Shape(s.dtype(), {}), true), lo, hi, interior);
  }

  NodeId ReverseOp(NodeId a) {
    std::vector<int64_t> dims;
    for (int i = 0; i < ShapeOf(a).rank(); ++i) {
      if (Chance(0.5)) dims.push_back(i);
    }
    return b_.Reverse(a, dims);
  }

  NodeId ReduceOp(NodeId a) {
    const DType t = DTypeOf(a);
    std::vector<int64_t> dims;
    for (int i = 0; i < ShapeOf(a).rank(); ++i) {
      if (Chance(0.5)) dims.push_back(i);
    }
    std::vector<ReduceKind> kinds;
    if (IsPred(t))
      kinds = {ReduceKind::kAnd, ReduceKind::kOr};
    else if (IsInteger(t))
      kinds = {ReduceKind::kAdd,     ReduceKind::kMultiply, ReduceKind::kMaximum,
               ReduceKind::kMinimum, ReduceKind::kAnd,      ReduceKind::kOr};
    else
      kinds = {ReduceKind::kAdd, ReduceKind::kMultiply, ReduceKind::kMaximum, ReduceKind::kMinimum};
    return b_.Reduce(a, dims, Pick(kinds));
  }

  // clamp(lo, x, hi) with scalar or full-shape bounds.
  NodeId ClampOp(NodeId x) {
    const Shape s = ShapeOf(x);  // a copy: adding nodes moves the builder's storage
    if (!IsNum(s.dtype())) return kInvalidNode;
    auto bound = [&]() { return Chance(0.5) ? Const(Shape(s.dtype(), {}), true) : Partner(x); };
    const NodeId lo = bound();
    return b_.Clamp(lo, x, bound());
  }

  // dynamic-slice at constant in-range starts (an out-of-range start is a
  // data error, never clamped).
  NodeId DynamicSliceOp(NodeId x) {
    const Shape s = ShapeOf(x);  // a copy: adding nodes moves the builder's storage
    std::vector<NodeId> starts;
    std::vector<int64_t> sizes;
    for (int i = 0; i < s.rank(); ++i) {
      const int size = Uniform(0, static_cast<int>(s.dim(i)));
      sizes.push_back(size);
      Literal start(Shape(DType::kS32, {}));
      start.SetInt(0, Uniform(0, static_cast<int>(s.dim(i)) - size));
      starts.push_back(b_.Constant(std::move(start)));
    }
    return b_.DynamicSlice(x, starts, sizes);
  }

  NodeId ArgOp(NodeId x) {
    const Shape s = ShapeOf(x);  // a copy: adding nodes moves the builder's storage
    if (s.rank() == 0 || IsPred(s.dtype())) return kInvalidNode;
    const int dim = Uniform(0, s.rank() - 1);
    if (s.dim(dim) == 0) return kInvalidNode;
    const DType index_type = Chance(0.5) ? DType::kS32 : DType::kS64;
    return Chance(0.5) ? b_.ArgMax(x, dim, index_type) : b_.ArgMin(x, dim, index_type);
  }

  NodeId IotaOp() {
    Shape s = RandomShape(Pick(std::vector<DType>{DType::kF32, DType::kS32}));
    if (s.rank() == 0) s = Shape(s.dtype(), {3});
    return b_.Iota(s, Uniform(0, s.rank() - 1));
  }

  NodeId DotOp() {
    auto a = AnyWhere([&](NodeId x) { return IsFloat(DTypeOf(x)) && ShapeOf(x).rank() == 2; });
    if (!a) return kInvalidNode;
    const Shape s = ShapeOf(*a);
    NodeId rhs;
    if (Chance(0.5)) {
      rhs = b_.Transpose(*a, {1, 0});  // [k, m]
    } else {
      rhs = b_.Constant(RandomLiteral(Shape(s.dtype(), {s.dim(1), Uniform(1, 3)}), rng_));
    }
    DotDims dims;
    dims.lhs_contracting = {1};
    dims.rhs_contracting = {0};
    return b_.DotGeneral(*a, rhs, dims);
  }

  NodeId RngOp() {
    Literal seed(Shape(DType::kU64, {}));
    seed.SetInt(0, Uniform(0, 3));
    Literal offset(Shape(DType::kU64, {}));
    offset.SetInt(0, Uniform(0, 100));
    NodeId sd = b_.Constant(seed);
    NodeId of = b_.Constant(offset);
    Shape s = RandomShape(DType::kF32);
    return b_.RngUniform(sd, of, s, Uniform(0, 1));
  }

  // optimization-barrier over one or two values; exp(x) before and after.
  NodeId BarrierOp() {
    NodeId x = AnyOf(IsF);
    std::vector<NodeId> xs = {x};
    if (Chance(0.5)) xs.push_back(Any());
    Add(b_.Exp(x));
    NodeId bar = b_.OptimizationBarrier(xs);
    NodeId after = Add(b_.GetTupleElement(bar, 0));
    if (xs.size() > 1) Add(b_.GetTupleElement(bar, 1));
    return b_.Exp(after);
  }

  // An exact copy of an earlier node over the same operands (cse fodder).
  NodeId Duplicate() {
    std::vector<NodeId> c;
    for (NodeId id : pool_) {
      const Node& n = b_.node(id);
      if (n.op != OpKind::kParameter && !IsOpaqueToPasses(n.op)) c.push_back(id);
    }
    if (c.empty()) return kInvalidNode;
    const Node n = b_.node(Pick(c));
    return b_.AddNodeLike(n, n.operands);
  }

  // A short pattern some simplify rule matches.
  NodeId Pattern() {
    const NodeId x = Any();
    const Shape s = ShapeOf(x);
    const DType t = s.dtype();
    switch (Chance(0.3) ? 14 : Uniform(0, 17)) {
      case 0:
        if (!IsNum(t)) return kInvalidNode;
        return b_.Negate(b_.Negate(x));
      case 1:
        if (IsFloat(t)) return kInvalidNode;
        return b_.Unary(OpKind::kNot, b_.Unary(OpKind::kNot, x));
      case 2: {
        const std::vector<int64_t> p = RandomPermutation(s.rank());
        return b_.Transpose(b_.Transpose(x, p), RandomPermutation(s.rank()));
      }
      case 3:
        return b_.Reshape(b_.Reshape(x, RandomFactorization(s.num_elements())),
                          RandomFactorization(s.num_elements()));
      case 4:
        return b_.Convert(
            b_.Convert(x, Pick(std::vector<DType>{DType::kF64, DType::kS64, DType::kS32})),
            Pick(std::vector<DType>{DType::kF32, DType::kS32, DType::kPred, t}));
      case 5:
        return b_.Select(Const(Shape(DType::kPred, {}), true), x, x);
      case 6:
        if (IsFloat(t) || IsPred(t)) return kInvalidNode;
        return b_.Subtract(x, x);
      case 7:
        if (!IsNum(t)) return kInvalidNode;
        return b_.Binary(Chance(0.5) ? OpKind::kMaximum : OpKind::kMinimum, x, x);
      case 8:
        if (!IsNum(t)) return kInvalidNode;
        return b_.Unary(OpKind::kAbs, b_.Negate(x));
      case 9:
        if (!IsFloat(t)) return kInvalidNode;
        return b_.Unary(OpKind::kFloor, b_.Unary(OpKind::kCeil, x));
      case 10:
        if (s.rank() == 0) return kInvalidNode;
        return b_.Concatenate({x}, Uniform(0, s.rank() - 1));
      case 11:
        if (s.rank() == 0) return kInvalidNode;
        return b_.Slice(x, std::vector<int64_t>(s.rank(), 0), s.dims(),
                        std::vector<int64_t>(s.rank(), 1));
      case 12:
        return b_.Reverse(b_.Reverse(x, {}), {});
      case 13:
        if (IsPred(t)) return kInvalidNode;
        return b_.Reduce(x, {}, IsFloat(t) ? ReduceKind::kMultiply : ReduceKind::kAdd);
      case 14: {  // x op special-constant, either order: add-zero, mul-one, ...
        if (!IsNum(t)) return kInvalidNode;
        const OpKind op = Pick(std::vector<OpKind>{
            OpKind::kAdd, OpKind::kSubtract, OpKind::kMultiply, OpKind::kMaximum, OpKind::kMinimum,
            OpKind::kPower, OpKind::kAdd, OpKind::kMultiply});
        const NodeId c = Const(s, true);
        return Chance(0.5) ? b_.Binary(op, x, c) : b_.Binary(op, c, x);
      }
      case 15: {
        std::vector<int64_t> dims(s.rank());
        std::iota(dims.begin(), dims.end(), 0);
        return b_.BroadcastInDim(x, s.dims(), dims);
      }
      case 16: {
        const NodeId y = Any();
        const NodeId t2 = b_.Tuple({x, y});
        return b_.GetTupleElement(t2, Uniform(0, 1));
      }
      default: {
        if (IsFloat(t) || !IsNum(t)) return kInvalidNode;
        return b_.Binary(Chance(0.5) ? OpKind::kDivide : OpKind::kRemainder, x,
                         NonZero(Const(s, true)));
      }
    }
  }

  void Step() {
    if (pool_.empty()) {
      Add(Const(RandomShape(DType::kF32), false));
      return;
    }
    NodeId r = kInvalidNode;
    const int w = Uniform(0, 99);
    if (w < 8)
      r = Const(RandomShape(Pick(std::vector<DType>{DType::kF32, DType::kS32, DType::kPred})),
                Chance(0.5));
    else if (w < 22)
      r = UnaryOp(Any());
    else if (w < 42)
      r = SafeBinary(Any());
    else if (w < 47)
      r = CompareOp(Any());
    else if (w < 52)
      r = SelectOp(Any());
    else if (w < 56)
      r = ConvertOp(Any());
    else if (w < 60)
      r = BroadcastOp(Any());
    else if (w < 63)
      r = ReshapeOp(Any());
    else if (w < 66)
      r = TransposeOp(Any());
    else if (w < 69)
      r = SliceOp(Any());
    else if (w < 71)
      r = ConcatOp(Any());
    else if (w < 73)
      r = PadOp(Any());
    else if (w < 75)
      r = ReverseOp(Any());
    else if (w < 78)
      r = ReduceOp(Any());
    else if (w < 79)
      r = IotaOp();
    else if (w < 80)
      r = Pick(std::vector<int>{0, 1, 2}) == 0 ? ClampOp(Any())
          : Chance(0.5)                        ? DynamicSliceOp(Any())
                                               : ArgOp(Any());
    else if (w < 82)
      r = o_.allow_dot ? DotOp() : kInvalidNode;
    else if (w < 83)
      r = o_.allow_rng ? RngOp() : kInvalidNode;
    else if (w < 85)
      r = o_.allow_barrier ? BarrierOp() : kInvalidNode;
    else if (w < 90)
      r = Duplicate();
    else
      r = Pattern();
    Add(r);
  }

  std::mt19937_64& rng_;
  RandomGraphOptions o_;
  GraphBuilder b_;
  std::vector<NodeId> pool_;
  std::vector<NodeId> params_;
};

}  // namespace

StatusOr<Graph> GenerateRandomGraph(std::mt19937_64& rng, const RandomGraphOptions& options) {
  return Generator(rng, options).Run();
}

Literal RandomLiteral(const Shape& s, std::mt19937_64& rng) {
  Literal lit(s);
  if (s.is_tuple()) return lit;
  const DType t = s.dtype();
  std::uniform_int_distribution<int> pct(0, 99);
  for (int64_t i = 0; i < lit.num_elements(); ++i) {
    const int r = pct(rng);
    if (IsFloat(t)) {
      double v;
      if (r < 4)
        v = std::numeric_limits<double>::quiet_NaN();
      else if (r < 7)
        v = (r & 1) ? std::numeric_limits<double>::infinity()
                    : -std::numeric_limits<double>::infinity();
      else if (r < 17)
        v = (r & 1) ? 0.0 : -0.0;
      else if (r < 23)
        v = (r & 1) ? 1.0 : -1.0;
      else if (r < 50)
        v = std::uniform_int_distribution<int>(-8, 8)(rng);
      else
        v = std::uniform_real_distribution<double>(-4.0, 4.0)(rng);
      lit.SetDouble(i, v);
    } else if (IsPred(t)) {
      lit.SetInt(i, r & 1);
    } else if (IsInteger(t)) {
      int64_t v;
      if (r < 3)
        v = std::numeric_limits<int64_t>::min();
      else if (r < 6)
        v = std::numeric_limits<int64_t>::max();
      else if (r < 9)
        v = -1;  // all ones
      else if (r < 12)
        v = !IsSignedInt(t)     ? 0  // the minimum of the type
            : BitWidth(t) == 64 ? std::numeric_limits<int64_t>::min()
                                : -(int64_t{1} << (BitWidth(t) - 1));
      else
        v = std::uniform_int_distribution<int>(-9, 9)(rng);
      // Wrap to the element width.
      const int size = DTypeSize(t);
      std::memcpy(static_cast<uint8_t*>(lit.data()) + i * size, &v, size);
    }
  }
  return lit;
}

std::vector<Literal> RandomArguments(const Graph& g, std::mt19937_64& rng) {
  std::vector<Literal> args;
  for (NodeId p : g.parameters()) args.push_back(RandomLiteral(g.node(p).shape, rng));
  return args;
}

bool BitIdentical(const Literal& a, const Literal& b, std::string* why) {
  auto fail = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  if (a.shape() != b.shape()) {
    return fail("shapes differ: " + a.shape().ToString() + " vs " + b.shape().ToString());
  }
  if (a.shape().is_tuple()) {
    for (size_t i = 0; i < a.tuple_elements().size(); ++i) {
      if (!BitIdentical(a.tuple_elements()[i], b.tuple_elements()[i], why)) return false;
    }
    return true;
  }
  const int size = DTypeSize(a.dtype());
  const auto* pa = static_cast<const uint8_t*>(a.data());
  const auto* pb = static_cast<const uint8_t*>(b.data());
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    if (std::memcmp(pa + i * size, pb + i * size, size) == 0) continue;
    if (IsFloat(a.dtype()) && std::isnan(a.GetDouble(i)) && std::isnan(b.GetDouble(i))) continue;
    std::ostringstream os;
    os << "element " << i << " of " << a.shape().ToString() << ": " << FormatElement(a, i) << " vs "
       << FormatElement(b, i);
    return fail(os.str());
  }
  return true;
}

namespace {

// Bits of element i as an integer whose order is the float order
// (sign-magnitude -> two's complement), for 2-, 4- and 8-byte floats.
int64_t OrderedBits(const Literal& l, int64_t i) {
  const int size = DTypeSize(l.dtype());
  const auto* p = static_cast<const uint8_t*>(l.data()) + i * size;
  uint64_t bits = 0;
  std::memcpy(&bits, p, size);  // little-endian
  const uint64_t sign = uint64_t{1} << (size * 8 - 1);
  const int64_t mag = static_cast<int64_t>(bits & (sign - 1));
  return (bits & sign) ? -mag : mag;
}

}  // namespace

int64_t UlpDistance(const Literal& a, const Literal& b, int64_t i) {
  const double x = a.GetDouble(i), y = b.GetDouble(i);
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y) ? 0 : INT64_MAX;
  if (std::isinf(x) || std::isinf(y)) return x == y ? 0 : INT64_MAX;
  const int64_t ox = OrderedBits(a, i), oy = OrderedBits(b, i);
  // Finite values: |ox - oy| < 2^63 (both magnitudes are below the inf pattern).
  return ox > oy ? ox - oy : oy - ox;
}

bool WithinUlps(const Literal& a, const Literal& b, int64_t max_ulps, std::string* why) {
  if (a.shape() != b.shape() || a.shape().is_tuple() || !IsFloat(a.dtype()) ||
      DTypeSize(a.dtype()) > 8) {
    return BitIdentical(a, b, why);
  }
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const int64_t d = UlpDistance(a, b, i);
    if (d <= max_ulps) continue;
    if (why) {
      std::ostringstream os;
      os << "element " << i << " of " << a.shape().ToString() << ": " << FormatElement(a, i)
         << " vs " << FormatElement(b, i) << " ("
         << (d == INT64_MAX ? std::string("non-finite mismatch") : std::to_string(d) + " ulps")
         << ", tolerance " << max_ulps << ")";
      *why = os.str();
    }
    return false;
  }
  return true;
}

StatusOr<Graph> PerturbNodes(const Graph& g, const std::function<bool(const Node&)>& which,
                             double ulps, const std::function<double()>& next_sign) {
  GraphBuilder b(g.name());
  std::vector<NodeId> map(g.num_nodes(), kInvalidNode);
  for (const Node& n : g.nodes()) {
    std::vector<NodeId> ops;
    for (NodeId o : n.operands) ops.push_back(map[o]);
    NodeId id = b.AddNodeLike(n, std::move(ops));
    if (!n.shape.is_tuple() && IsFloat(n.shape.dtype()) && which(n)) {
      const DType t = n.shape.dtype();
      const int p = t == DType::kF64 ? 53 : t == DType::kF32 ? 24 : t == DType::kBF16 ? 8 : 11;
      const double sign = next_sign() >= 0 ? 1.0 : -1.0;
      const NodeId k = b.ConstantScalar(t, 1.0 + sign * ulps * std::ldexp(1.0, -p));
      id = b.Multiply(id, n.shape.rank() == 0 ? k : b.BroadcastInDim(k, n.shape.dims(), {}));
    }
    map[n.id] = id;
  }
  std::vector<NodeId> outs;
  for (NodeId o : g.outputs()) outs.push_back(map[o]);
  b.SetOutputs(outs);
  for (auto [o, p] : g.aliases()) b.SetAlias(o, p);
  return b.Build();
}

bool WithinPerturbation(const Literal& got, const Literal& want,
                        const std::vector<const Literal*>& perturbed, int64_t base_ulps,
                        std::string* why) {
  if (got.shape() != want.shape() || got.shape().is_tuple()) return BitIdentical(got, want, why);
  for (const Literal* p : perturbed)
    if (p->shape() != want.shape()) return BitIdentical(got, want, why);
  const bool fl = IsFloat(want.dtype()) && DTypeSize(want.dtype()) <= 8;
  const int size = DTypeSize(want.dtype());
  auto same = [&](const Literal& a, const Literal& c, int64_t i) {
    if (fl && std::isnan(a.GetDouble(i)) && std::isnan(c.GetDouble(i))) return true;
    return std::memcmp(static_cast<const uint8_t*>(a.data()) + i * size,
                       static_cast<const uint8_t*>(c.data()) + i * size, size) == 0;
  };
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    if (same(got, want, i)) continue;
    bool ok = false;
    int64_t allowed = base_ulps, d = INT64_MAX;
    if (fl) {
      int64_t spread = 0;
      for (const Literal* p : perturbed) spread = std::max(spread, UlpDistance(want, *p, i));
      allowed = spread >= (INT64_MAX - base_ulps) / 2 ? INT64_MAX : base_ulps + 2 * spread;
      d = UlpDistance(got, want, i);
      ok = d <= allowed;
    }
    for (const Literal* p : perturbed) ok = ok || same(got, *p, i);
    if (ok) continue;
    if (why) {
      std::ostringstream os;
      os << "element " << i << " of " << want.shape().ToString() << ": " << FormatElement(got, i)
         << " vs " << FormatElement(want, i);
      if (fl) {
        os << " ("
           << (d == INT64_MAX ? std::string("non-finite mismatch") : std::to_string(d) + " ulps")
           << ", allowed " << allowed << ": " << base_ulps
           << " + 2 x the perturbed references' spread)";
      }
      *why = os.str();
    }
    return false;
  }
  return true;
}

}  // namespace ember::fuzz
