// Reference evaluation of reduce, argmax, argmin and reduce-window.
//
// reduce: identity-initialized, over `dimensions`; float sums and products
// are pairwise (blocked) in the accumulation type (f32 for f32/bf16/f16,
// f64 for f64), integer arithmetic wraps, maximum/minimum propagate NaN.
// argmax/argmin: first index of the extreme along `dimension`; a NaN is the
// extreme and the first NaN wins (torch.argmax); the result dtype (s32/s64)
// is the node's. reduce-window: padding positions hold the identity.
#include <memory>

#include "ember/ir/attributes.h"
#include "eval/eval_util.h"
#include "eval/ops.h"

namespace ember::eval {
namespace {

// Runs f(access) for the operand dtype, or returns an error for complex or
// for a to_apply the dtype does not support.
template <typename F>
Status VisitForReduce(const Node& n, DType t, ReduceKind kind, F&& f) {
  Status st;
  bool visited = VisitRealDType(t, [&](auto access) {
    using A = decltype(access);
    if (kind == ReduceKind::kAssign || !CombinerSupports<typename A::Acc>(kind)) {
      st = NodeInvalid(n, "to_apply ", ReduceKindName(kind), " is not defined on ", DTypeName(t));
      return;
    }
    f(access);
  });
  if (!visited) return NodeInvalid(n, "cannot reduce ", DTypeName(t));
  return st;
}

StatusOr<Literal> Reduce(const Node& n, const Literal& x) {
  EMBER_ASSIGN_OR_RETURN(ReduceKind kind, GetReduceKind(n));
  const Shape& xs = x.shape();
  const int rank = xs.rank();
  std::vector<bool> reduced(rank, false);
  for (int64_t d : attr::Dimensions(n)) {
    if (d < 0 || d >= rank || reduced[d]) return NodeInvalid(n, "bad reduce dimension ", d);
    reduced[d] = true;
  }
  const std::vector<int64_t> str = xs.strides();
  std::vector<int64_t> kept_dims, kept_strides, red_dims, red_strides;
  for (int d = 0; d < rank; ++d) {
    (reduced[d] ? red_dims : kept_dims).push_back(xs.dim(d));
    (reduced[d] ? red_strides : kept_strides).push_back(str[d]);
  }
  if (kept_dims != n.shape.dims() || n.shape.dtype() != x.dtype()) {
    return NodeInvalid(n, "result shape ", n.shape.ToString(), " does not match the reduction of ",
                       xs.ToString());
  }
  // Offsets of the reduced sub-space, in row-major order.
  const int64_t nred = NumElements(red_dims);
  std::vector<int64_t> red_offsets(static_cast<size_t>(nred));
  {
    std::vector<int64_t> idx(red_dims.size(), 0);
    for (int64_t r = 0; r < nred; ++r) {
      int64_t o = 0;
      for (size_t k = 0; k < idx.size(); ++k) o += idx[k] * red_strides[k];
      red_offsets[static_cast<size_t>(r)] = o;
      NextIndex(red_dims, idx);
    }
  }
  Literal out(n.shape);
  const int64_t nout = out.num_elements();
  Status st = VisitForReduce(n, x.dtype(), kind, [&](auto access) {
    using A = decltype(access);
    using T = typename A::Acc;
    std::unique_ptr<T[]> buf(new T[static_cast<size_t>(nred > 0 ? nred : 1)]);
    std::vector<int64_t> idx(kept_dims.size(), 0);
    for (int64_t o = 0; o < nout; ++o) {
      int64_t base = 0;
      for (size_t k = 0; k < idx.size(); ++k) base += idx[k] * kept_strides[k];
      for (int64_t r = 0; r < nred; ++r) buf[r] = A::Load(x.data(), base + red_offsets[r]);
      A::Store(out.data(), o, ReduceFromIdentity<T>(kind, buf.get(), nred));
      NextIndex(kept_dims, idx);
    }
  });
  EMBER_RETURN_IF_ERROR(st);
  return out;
}

template <typename T>
bool IsNaN(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(v);
  else
    return false;
}

StatusOr<Literal> ArgExtreme(const Node& n, const Literal& x, bool is_max) {
  const Shape& xs = x.shape();
  const int64_t dim = attr::Dimension(n);
  if (dim < 0 || dim >= xs.rank()) return NodeInvalid(n, "bad dimension ", dim);
  const DType rt = n.shape.dtype();
  if (rt != DType::kS32 && rt != DType::kS64) {
    return NodeInvalid(n, "result dtype must be s32 or s64, got ", DTypeName(rt));
  }
  const int64_t len = xs.dim(static_cast<int>(dim));
  if (len == 0) return NodeInvalid(n, "reduction over an empty dimension");
  const std::vector<int64_t> str = xs.strides();
  std::vector<int64_t> kept_dims, kept_strides;
  for (int d = 0; d < xs.rank(); ++d) {
    if (d == dim) continue;
    kept_dims.push_back(xs.dim(d));
    kept_strides.push_back(str[d]);
  }
  if (kept_dims != n.shape.dims()) {
    return NodeInvalid(n, "result shape ", n.shape.ToString(), " does not match ", xs.ToString());
  }
  const int64_t step = str[dim];
  Literal out(n.shape);
  const int64_t nout = out.num_elements();
  bool ok = VisitRealDType(x.dtype(), [&](auto access) {
    using A = decltype(access);
    using T = typename A::Acc;
    std::vector<int64_t> idx(kept_dims.size(), 0);
    for (int64_t o = 0; o < nout; ++o) {
      int64_t base = 0;
      for (size_t k = 0; k < idx.size(); ++k) base += idx[k] * kept_strides[k];
      int64_t best_i = 0;
      T best = A::Load(x.data(), base);
      if (!IsNaN(best)) {
        for (int64_t i = 1; i < len; ++i) {
          T v = A::Load(x.data(), base + i * step);
          if (IsNaN(v)) {
            best_i = i;
            break;
          }
          if (is_max ? (best < v) : (v < best)) {
            best = v;
            best_i = i;
          }
        }
      }
      StoreBits(rt, out.data(), o, static_cast<uint64_t>(best_i));
      NextIndex(kept_dims, idx);
    }
  });
  if (!ok) return NodeInvalid(n, "cannot compare ", DTypeName(x.dtype()));
  return out;
}

StatusOr<Literal> ReduceWindow(const Node& n, const Literal& x) {
  EMBER_ASSIGN_OR_RETURN(ReduceKind kind, GetReduceKind(n));
  const Shape& xs = x.shape();
  const int rank = xs.rank();
  const auto& win = attr::WindowDimensions(n);
  if (static_cast<int>(win.size()) != rank) {
    return NodeInvalid(n, "window_dimensions has ", win.size(), " entries, expected ", rank);
  }
  EMBER_ASSIGN_OR_RETURN(auto strides, GetIntsOr(n, attr::WindowStrides, rank, 1));
  EMBER_ASSIGN_OR_RETURN(auto lo, GetIntsOr(n, attr::PaddingLow, rank, 0));
  EMBER_ASSIGN_OR_RETURN(auto hi, GetIntsOr(n, attr::PaddingHigh, rank, 0));
  EMBER_ASSIGN_OR_RETURN(auto dil, GetIntsOr(n, attr::WindowDilations, rank, 1));
  if (n.shape.rank() != rank || n.shape.dtype() != x.dtype()) {
    return NodeInvalid(n, "result shape ", n.shape.ToString(), " does not match ", xs.ToString());
  }
  for (int d = 0; d < rank; ++d) {
    if (win[d] < 0 || strides[d] < 1 || dil[d] < 1) return NodeInvalid(n, "bad window in dim ", d);
    int64_t padded = xs.dim(d) + lo[d] + hi[d];
    int64_t span = win[d] == 0 ? 0 : (win[d] - 1) * dil[d] + 1;
    int64_t expect = padded < span ? 0 : (padded - span) / strides[d] + 1;
    if (n.shape.dim(d) != expect) {
      return NodeInvalid(n, "result dim ", d, " is ", n.shape.dim(d), ", expected ", expect);
    }
  }
  const std::vector<int64_t> str = xs.strides();
  const int64_t wsize = NumElements(win);
  Literal out(n.shape);
  const int64_t nout = out.num_elements();
  Status st = VisitForReduce(n, x.dtype(), kind, [&](auto access) {
    using A = decltype(access);
    using T = typename A::Acc;
    std::unique_ptr<T[]> buf(new T[static_cast<size_t>(wsize > 0 ? wsize : 1)]);
    std::vector<int64_t> oidx(rank, 0), widx(rank, 0);
    for (int64_t o = 0; o < nout; ++o) {
      int64_t count = 0;
      std::fill(widx.begin(), widx.end(), 0);
      for (int64_t w = 0; w < wsize; ++w) {
        int64_t off = 0;
        bool inside = true;
        for (int d = 0; d < rank; ++d) {
          int64_t p = oidx[d] * strides[d] + widx[d] * dil[d] - lo[d];
          if (p < 0 || p >= xs.dim(d)) {
            inside = false;
            break;
          }
          off += p * str[d];
        }
        if (inside) buf[count++] = A::Load(x.data(), off);
        NextIndex(win, widx);
      }
      A::Store(out.data(), o, ReduceFromIdentity<T>(kind, buf.get(), count));
      NextIndex(n.shape.dims(), oidx);
    }
  });
  EMBER_RETURN_IF_ERROR(st);
  return out;
}

}  // namespace

StatusOr<Literal> EvalReduction(const Node& n, const Operands& in) {
  if (in.size() != 1) return NodeInvalid(n, "expected one operand, got ", in.size());
  switch (n.op) {
    case OpKind::kReduce:
      return Reduce(n, *in[0]);
    case OpKind::kArgMax:
      return ArgExtreme(n, *in[0], /*is_max=*/true);
    case OpKind::kArgMin:
      return ArgExtreme(n, *in[0], /*is_max=*/false);
    case OpKind::kReduceWindow:
      return ReduceWindow(n, *in[0]);
    default:
      return EMBER_INTERNAL_ERROR(NodeLabel(n), " is not a reduction op");
  }
}

}  // namespace ember::eval
