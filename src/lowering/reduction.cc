// Reductions: sum, mean, prod, amax/amin, max/min (with and without dim),
// argmax/argmin, any/all, var/std/var_mean/std_mean (correction as a graph
// input), logsumexp, linalg_vector_norm. Result dtypes come from Meta (sum of
// ints is s64, a `dtype=` argument casts the input first, as eager does).
// bf16/f16 accumulate in f32 and round once at the end (eager's CPU sum and
// mean do the same: mean is an f32 sum divided by N, then rounded).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/reduction_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

std::vector<int64_t> ReductionDims(const std::optional<std::vector<int64_t>>& dim, int64_t rank) {
  std::vector<int64_t> dims;
  if (rank == 0) return dims;
  if (!dim || dim->empty()) {
    dims.resize(rank);
    std::iota(dims.begin(), dims.end(), 0);
    return dims;
  }
  for (int64_t d : *dim) dims.push_back(WrapDim(d, rank));
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

std::vector<int64_t> KeptSizes(const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& dims) {
  std::vector<int64_t> r = sizes;
  for (int64_t d : dims) r[d] = 1;
  return r;
}

int64_t CountOver(const std::vector<int64_t>& sizes, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= sizes[d];
  return n;
}

NodeId ReduceKeep(GraphBuilder& b, NodeId x, const std::vector<int64_t>& sizes,
                  const std::vector<int64_t>& dims, ReduceKind kind) {
  NodeId r = dims.empty() ? x : b.Reduce(x, dims, kind);
  return b.Reshape(r, KeptSizes(sizes, dims));
}

namespace {

bool ValidDims(const std::vector<int64_t>& dims, int64_t rank) {
  for (int64_t d : dims)
    if (d < 0 || d >= std::max<int64_t>(rank, 1)) return false;
  return true;
}

// The shared start of a floating-point reduction of `x` over `dim` (None or
// []: all dims): validated sorted dims, the keepdim sizes, the computation
// dtype of `out` and x rounded to out's dtype then widened to it.
struct FloatReduction {
  std::vector<int64_t> dims, kept;
  DType t = DType::kF32;
  NodeId v = kInvalidNode;
};
StatusOr<FloatReduction> StartFloatReduction(GraphBuilder& b, const AtenCall& c, const TensorArg& x,
                                             const std::optional<std::vector<int64_t>>& dim,
                                             const OutputMeta& out) {
  int64_t rank = static_cast<int64_t>(x.sizes.size());
  FloatReduction r;
  r.dims = ReductionDims(dim, rank);
  if (!ValidDims(r.dims, rank)) return InvalidArgument(c.op, ": dim out of range");
  r.t = ComputeType(out.dtype);
  r.kept = KeptSizes(x.sizes, r.dims);
  r.v = ConvertTo(b, ConvertTo(b, x.value, out.dtype), r.t);
  return r;
}

// Reshape to the output sizes (keepdim or not: same element order).
NodeId Shaped(GraphBuilder& b, NodeId r, const OutputMeta& out) {
  if (b.shape(r).dims() == out.sizes) return r;
  return b.Reshape(r, out.sizes);
}

enum class Red { kSum, kMean, kProd, kAmax, kAmin };

// sum.dim_IntList(self, dim?, keepdim, *, dtype?), sum(self, *, dtype?),
// mean.dim / mean, prod.dim_int / prod, amax/amin(self, dim=[], keepdim).
template <Red K, bool kHasDim, bool kSingleDim = false>
LowerResult LowerReduce(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  std::optional<std::vector<int64_t>> dim;
  if (kHasDim) {
    if (kSingleDim) {
      EMBER_ASSIGN_OR_RETURN(int64_t d, IntAt(c, 1));
      dim = std::vector<int64_t>{d};
    } else {
      EMBER_ASSIGN_OR_RETURN(dim, OptIntsAt(c, 1));
    }
  }
  const OutputMeta& out = c.outputs.at(0);
  int64_t rank = static_cast<int64_t>(x.sizes.size());
  std::vector<int64_t> dims = ReductionDims(dim, rank);
  if (!ValidDims(dims, rank)) return InvalidArgument(c.op, ": dim out of range");
  if ((K == Red::kAmax || K == Red::kAmin) && out.dtype == DType::kPred)
    return Declined("amax/amin of bool");
  DType compute = ComputeType(out.dtype);
  if (compute == DType::kPred) compute = DType::kU8;
  NodeId v = ConvertTo(b, ConvertTo(b, x.value, out.dtype), compute);
  NodeId r;
  switch (K) {
    case Red::kSum:
      r = ReduceKeep(b, v, x.sizes, dims, ReduceKind::kAdd);
      break;
    case Red::kMean:
      r = b.Divide(ReduceKeep(b, v, x.sizes, dims, ReduceKind::kAdd),
                   Splat(b, compute, static_cast<double>(CountOver(x.sizes, dims)),
                         KeptSizes(x.sizes, dims)));
      break;
    case Red::kProd:
      r = ReduceKeep(b, v, x.sizes, dims, ReduceKind::kMultiply);
      break;
    case Red::kAmax:
      r = ReduceKeep(b, v, x.sizes, dims, ReduceKind::kMaximum);
      break;
    case Red::kAmin:
      r = ReduceKeep(b, v, x.sizes, dims, ReduceKind::kMinimum);
      break;
  }
  return CheckOutputs(b, c, {Finish(b, Shaped(b, r, out), out)});
}

// max.dim / min.dim -> (values, indices): first index of the extreme, NaN
// counting as the extreme.
template <bool kMax>
LowerResult LowerMaxDim(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(int64_t d, IntAt(c, 1));
  if (x.dtype == DType::kPred) return Declined("max/min of bool");
  int64_t rank = static_cast<int64_t>(x.sizes.size());
  d = WrapDim(d, rank);
  if (c.outputs.size() != 2) return InvalidArgument(c.op, ": expected two outputs");
  NodeId values, indices;
  if (rank == 0) {
    values = x.value;
    indices = b.ConstantScalar(DType::kS64, 0);
  } else {
    values = b.Reduce(x.value, {d}, kMax ? ReduceKind::kMaximum : ReduceKind::kMinimum);
    indices = kMax ? b.ArgMax(x.value, d) : b.ArgMin(x.value, d);
  }
  return CheckOutputs(b, c,
                      {Finish(b, Shaped(b, values, c.outputs[0]), c.outputs[0]),
                       Finish(b, Shaped(b, indices, c.outputs[1]), c.outputs[1])});
}

// argmax/argmin(self, dim?, keepdim): dim None flattens.
template <bool kMax>
LowerResult LowerArg(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(std::optional<int64_t> dim, OptIntAt(c, 1));
  if (x.dtype == DType::kPred) return Declined("argmax of bool");
  const OutputMeta& out = c.outputs.at(0);
  int64_t rank = static_cast<int64_t>(x.sizes.size());
  NodeId v = x.value;
  int64_t d;
  if (!dim || rank == 0) {
    int64_t n = 1;
    for (int64_t s : x.sizes) n *= s;
    v = b.Reshape(v, {n});
    d = 0;
  } else {
    d = WrapDim(*dim, rank);
  }
  NodeId r = kMax ? b.ArgMax(v, d) : b.ArgMin(v, d);
  return CheckOutputs(b, c, {Finish(b, Shaped(b, r, out), out)});
}

// any/all (.dim, .dims, whole): `x != 0` reduced with or/and.
template <bool kAny, int kDimKind>  // 0: none, 1: int dim, 2: int[]? dim
LowerResult LowerAnyAll(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  std::optional<std::vector<int64_t>> dim;
  if (kDimKind == 1) {
    EMBER_ASSIGN_OR_RETURN(int64_t d, IntAt(c, 1));
    dim = std::vector<int64_t>{d};
  } else if (kDimKind == 2) {
    EMBER_ASSIGN_OR_RETURN(dim, OptIntsAt(c, 1));
  }
  const OutputMeta& out = c.outputs.at(0);
  int64_t rank = static_cast<int64_t>(x.sizes.size());
  std::vector<int64_t> dims = ReductionDims(dim, rank);
  NodeId p = x.dtype == DType::kPred
                 ? x.value
                 : b.Compare(x.value, Splat(b, x.dtype, 0, x.sizes), ComparisonKind::kNe);
  NodeId r = ReduceKeep(b, p, x.sizes, dims, kAny ? ReduceKind::kOr : ReduceKind::kAnd);
  return CheckOutputs(b, c, {Finish(b, Shaped(b, r, out), out)});
}

// var/std(.correction) and var_mean/std_mean: sum((x - mean)^2) /
// max(N - correction, 0); correction defaults to 1 and is a graph input.
template <bool kStd, bool kWithMean>
LowerResult LowerVar(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(auto dim, OptIntsAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(std::optional<Val> corr, OptValAt(c, 2));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("var of integers");
  EMBER_ASSIGN_OR_RETURN(FloatReduction fr, StartFloatReduction(b, c, x, dim, out));
  const std::vector<int64_t>& dims = fr.dims;
  const std::vector<int64_t>& kept = fr.kept;
  DType t = fr.t;
  NodeId v = fr.v;
  NodeId n = Splat(b, t, static_cast<double>(CountOver(x.sizes, dims)), kept);
  NodeId mean = b.Divide(ReduceKeep(b, v, x.sizes, dims, ReduceKind::kAdd), n);
  NodeId dev = b.Subtract(v, BroadcastTo(b, mean, kept, x.sizes));
  NodeId ss = ReduceKeep(b, b.Multiply(dev, dev), x.sizes, dims, ReduceKind::kAdd);
  NodeId cval = corr ? Prepare(b, *corr, t, t, kept) : Splat(b, t, 1, kept);
  NodeId divisor = b.Maximum(b.Subtract(n, cval), Splat(b, t, 0, kept));
  NodeId var = b.Divide(ss, divisor);
  if (kStd) var = b.Unary(OpKind::kSqrt, var);
  std::vector<NodeId> r = {Finish(b, Shaped(b, var, out), out)};
  if (kWithMean) r.push_back(Finish(b, Shaped(b, mean, c.outputs.at(1)), c.outputs.at(1)));
  return CheckOutputs(b, c, r);
}

// logsumexp(self, dim, keepdim): max-shifted, an infinite max shifts by 0.
LowerResult LowerLogSumExp(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(auto dim, OptIntsAt(c, 1));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("non-floating result");
  EMBER_ASSIGN_OR_RETURN(FloatReduction fr, StartFloatReduction(b, c, x, dim, out));
  const std::vector<int64_t>& dims = fr.dims;
  const std::vector<int64_t>& kept = fr.kept;
  DType t = fr.t;
  NodeId v = fr.v;
  NodeId m = ReduceKeep(b, v, x.sizes, dims, ReduceKind::kMaximum);
  NodeId inf =
      b.Compare(b.Unary(OpKind::kAbs, m), Splat(b, t, INFINITY, kept), ComparisonKind::kEq);
  m = b.Select(inf, Splat(b, t, 0, kept), m);
  NodeId e = b.Exp(b.Subtract(v, BroadcastTo(b, m, kept, x.sizes)));
  NodeId r = b.Add(b.Unary(OpKind::kLog, ReduceKeep(b, e, x.sizes, dims, ReduceKind::kAdd)), m);
  return CheckOutputs(b, c, {Finish(b, Shaped(b, r, out), out)});
}

}  // namespace

// The vector norm for an `ord` known only in the graph: every form is
// computed and the right one selected (inf: max |x|, -inf: min |x|, 0: count
// of nonzeros, else (sum |x|^ord)^(1/ord)). `v` is in the computation dtype.
NodeId VectorNorm(GraphBuilder& b, NodeId v, const std::vector<int64_t>& sizes,
                  const std::vector<int64_t>& dims, NodeId ord_kept) {
  DType t = b.shape(v).dtype();
  std::vector<int64_t> kept = KeptSizes(sizes, dims);
  NodeId a = b.Unary(OpKind::kAbs, v);
  NodeId ord_full = BroadcastTo(b, ord_kept, kept, sizes);
  NodeId general =
      b.Binary(OpKind::kPower,
               ReduceKeep(b, b.Binary(OpKind::kPower, a, ord_full), sizes, dims, ReduceKind::kAdd),
               b.Divide(Splat(b, t, 1, kept), ord_kept));
  NodeId amax = ReduceKeep(b, a, sizes, dims, ReduceKind::kMaximum);
  NodeId amin = ReduceKeep(b, a, sizes, dims, ReduceKind::kMinimum);
  NodeId nz = ConvertTo(b, b.Compare(a, Splat(b, t, 0, sizes), ComparisonKind::kNe), t);
  NodeId count = ReduceKeep(b, nz, sizes, dims, ReduceKind::kAdd);
  auto is = [&](double val) {
    return b.Compare(ord_kept, Splat(b, t, val, kept), ComparisonKind::kEq);
  };
  NodeId r = b.Select(is(0), count, general);
  r = b.Select(is(-INFINITY), amin, r);
  return b.Select(is(INFINITY), amax, r);
}

namespace {

// linalg_vector_norm(self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType?
// dtype=None)
LowerResult LowerVectorNorm(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val ord, ValAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(auto dim, OptIntsAt(c, 2));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("norm of integers");
  EMBER_ASSIGN_OR_RETURN(FloatReduction fr, StartFloatReduction(b, c, x, dim, out));
  ord.tier = PromoTier::kWrapped;
  NodeId o = Prepare(b, ord, fr.t, fr.t, fr.kept);
  NodeId r = VectorNorm(b, fr.v, x.sizes, fr.dims, o);
  return CheckOutputs(b, c, {Finish(b, Shaped(b, r, out), out)});
}

}  // namespace

void RegisterReduction(LoweringTable& t) {
  t.Add("aten::sum.dim_IntList", LowerReduce<Red::kSum, true>);
  t.Add("aten::sum", LowerReduce<Red::kSum, false>);
  t.Add("aten::mean.dim", LowerReduce<Red::kMean, true>);
  t.Add("aten::mean", LowerReduce<Red::kMean, false>);
  t.Add("aten::prod.dim_int", LowerReduce<Red::kProd, true, true>);
  t.Add("aten::prod", LowerReduce<Red::kProd, false>);
  t.Add("aten::amax", LowerReduce<Red::kAmax, true>);
  t.Add("aten::amin", LowerReduce<Red::kAmin, true>);
  t.Add("aten::max", LowerReduce<Red::kAmax, false>);
  t.Add("aten::min", LowerReduce<Red::kAmin, false>);
  t.Add("aten::max.dim", LowerMaxDim<true>);
  t.Add("aten::min.dim", LowerMaxDim<false>);
  t.Add("aten::argmax", LowerArg<true>);
  t.Add("aten::argmin", LowerArg<false>);
  t.Add("aten::any", LowerAnyAll<true, 0>);
  t.Add("aten::all", LowerAnyAll<false, 0>);
  t.Add("aten::any.dim", LowerAnyAll<true, 1>);
  t.Add("aten::all.dim", LowerAnyAll<false, 1>);
  t.Add("aten::any.dims", LowerAnyAll<true, 2>);
  t.Add("aten::all.dims", LowerAnyAll<false, 2>);
  t.Add("aten::var.correction", LowerVar<false, false>);
  t.Add("aten::std.correction", LowerVar<true, false>);
  t.Add("aten::var_mean.correction", LowerVar<false, true>);
  t.Add("aten::std_mean.correction", LowerVar<true, true>);
  t.Add("aten::logsumexp", LowerLogSumExp);
  t.Add("aten::linalg_vector_norm", LowerVectorNorm);
}

}  // namespace ember::lowering
