// Reference evaluation of dot-general and convolution.
//
// Accumulation: f32 for f32/bf16/f16 results, f64 for f64, wrapping 64-bit
// integer arithmetic truncated to the result width for integer results. The
// result dtype is the node's (bf16 x bf16 -> f32 is allowed). Both ops check
// operand shapes against their attributes and the node's result shape, so
// the extern kernels (`ember.dot-general`, `ember.convolution`), which run on
// custom-calls the builder has not shape-checked, cannot read out of bounds.
#include <algorithm>

#include "ember/ir/attributes.h"
#include "eval/eval_util.h"
#include "eval/ops.h"

namespace ember::eval {
namespace {

enum class AccKind { kFloat, kDouble, kInt };

// f64 anywhere -> f64; other floats -> f32; integers -> wrapping 64-bit.
AccKind ChooseAcc(DType result, DType a, DType b) {
  const bool any_float = IsFloat(result) || IsFloat(a) || IsFloat(b);
  if (!any_float) return AccKind::kInt;
  if (result == DType::kF64 || a == DType::kF64 || b == DType::kF64) return AccKind::kDouble;
  return AccKind::kFloat;
}

template <typename T>
T LoadAcc(DType t, const void* base, int64_t i) {
  if constexpr (std::is_same_v<T, float>)
    return LoadFloat(t, base, i);
  else if constexpr (std::is_same_v<T, double>)
    return LoadDouble(t, base, i);
  else
    return LoadBits(t, base, i);  // floats never reach an integer accumulation
}
template <typename T>
void StoreAcc(DType t, void* base, int64_t i, T v) {
  if constexpr (std::is_same_v<T, float>)
    StoreFloat(t, base, i, v);
  else if constexpr (std::is_same_v<T, double>)
    StoreDouble(t, base, i, v);
  else
    StoreBits(t, base, i, v);
}

// Copies `x` into a dense [groups..., ...] buffer of T whose dims are the
// operand dims listed in `order`.
template <typename T>
std::vector<T> Pack(const Literal& x, const std::vector<int64_t>& order) {
  const Shape& s = x.shape();
  const std::vector<int64_t> str = s.strides();
  std::vector<int64_t> dims, strides;
  for (int64_t d : order) {
    dims.push_back(s.dim(static_cast<int>(d)));
    strides.push_back(str[d]);
  }
  const int64_t total = NumElements(dims);
  std::vector<T> out(static_cast<size_t>(total));
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t i = 0; i < total; ++i) {
    int64_t off = 0;
    for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * strides[k];
    out[static_cast<size_t>(i)] = LoadAcc<T>(s.dtype(), x.data(), off);
    NextIndex(dims, idx);
  }
  return out;
}

Status CheckDims(const Node& n, const std::vector<int64_t>& dims, int rank, const char* what,
                 std::vector<bool>& used) {
  for (int64_t d : dims) {
    if (d < 0 || d >= rank || used[d]) return NodeInvalid(n, "bad ", what, " dimension ", d);
    used[d] = true;
  }
  return OkStatus();
}

template <typename T>
void MatMul(const std::vector<T>& a, const std::vector<T>& b, int64_t nb, int64_t m, int64_t k,
            int64_t nn, Literal& out) {
  std::vector<T> c(static_cast<size_t>(nn));
  const DType rt = out.dtype();
  for (int64_t bi = 0; bi < nb; ++bi) {
    const T* ab = a.data() + bi * m * k;
    const T* bb = b.data() + bi * k * nn;
    for (int64_t i = 0; i < m; ++i) {
      std::fill(c.begin(), c.end(), T(0));
      for (int64_t p = 0; p < k; ++p) {
        const T av = ab[i * k + p];
        const T* brow = bb + p * nn;
        for (int64_t j = 0; j < nn; ++j) c[j] += av * brow[j];  // uint64 wraps
      }
      const int64_t obase = (bi * m + i) * nn;
      for (int64_t j = 0; j < nn; ++j) StoreAcc<T>(rt, out.data(), obase + j, c[j]);
    }
  }
}

// result = batch dims, then lhs free dims in order, then rhs free dims in order.
StatusOr<Literal> DotGeneral(const Node& n, const Literal& lhs, const Literal& rhs) {
  const auto& lb = attr::LhsBatchDims(n);
  const auto& rb = attr::RhsBatchDims(n);
  const auto& lc = attr::LhsContractingDims(n);
  const auto& rc = attr::RhsContractingDims(n);
  const Shape& ls = lhs.shape();
  const Shape& rs = rhs.shape();
  if (IsComplex(ls.dtype()) || IsComplex(rs.dtype()) || IsComplex(n.shape.dtype()) ||
      n.shape.is_tuple()) {
    return NodeInvalid(n, "unsupported dtypes ", ls.ToString(), " x ", rs.ToString(), " -> ",
                       n.shape.ToString());
  }
  if (lb.size() != rb.size() || lc.size() != rc.size()) {
    return NodeInvalid(n, "batch/contracting dimension lists differ in length");
  }
  std::vector<bool> lused(ls.rank(), false), rused(rs.rank(), false);
  EMBER_RETURN_IF_ERROR(CheckDims(n, lb, ls.rank(), "lhs batch", lused));
  EMBER_RETURN_IF_ERROR(CheckDims(n, lc, ls.rank(), "lhs contracting", lused));
  EMBER_RETURN_IF_ERROR(CheckDims(n, rb, rs.rank(), "rhs batch", rused));
  EMBER_RETURN_IF_ERROR(CheckDims(n, rc, rs.rank(), "rhs contracting", rused));
  std::vector<int64_t> expect_dims;
  int64_t nb = 1, m = 1, k = 1, nn = 1;
  for (size_t i = 0; i < lb.size(); ++i) {
    const int64_t s = ls.dim(static_cast<int>(lb[i]));
    if (s != rs.dim(static_cast<int>(rb[i]))) return NodeInvalid(n, "batch dimension sizes differ");
    expect_dims.push_back(s);
    nb *= s;
  }
  for (size_t i = 0; i < lc.size(); ++i) {
    const int64_t s = ls.dim(static_cast<int>(lc[i]));
    if (s != rs.dim(static_cast<int>(rc[i]))) {
      return NodeInvalid(n, "contracting dimension sizes differ: ", ls.ToString(), " x ",
                         rs.ToString());
    }
    k *= s;
  }
  std::vector<int64_t> lorder(lb.begin(), lb.end()), rorder(rb.begin(), rb.end());
  for (int d = 0; d < ls.rank(); ++d) {
    if (!lused[d]) {
      lorder.push_back(d);
      expect_dims.push_back(ls.dim(d));
      m *= ls.dim(d);
    }
  }
  for (int64_t d : lc) lorder.push_back(d);
  for (int64_t d : rc) rorder.push_back(d);
  for (int d = 0; d < rs.rank(); ++d) {
    if (!rused[d]) {
      rorder.push_back(d);
      expect_dims.push_back(rs.dim(d));
      nn *= rs.dim(d);
    }
  }
  if (expect_dims != n.shape.dims()) {
    return NodeInvalid(n, "result shape ", n.shape.ToString(), " does not match ", ls.ToString(),
                       " x ", rs.ToString(), " (expected dims ", DimsToString(expect_dims), ")");
  }
  Literal out(n.shape);
  switch (ChooseAcc(n.shape.dtype(), ls.dtype(), rs.dtype())) {
    case AccKind::kFloat:
      MatMul<float>(Pack<float>(lhs, lorder), Pack<float>(rhs, rorder), nb, m, k, nn, out);
      break;
    case AccKind::kDouble:
      MatMul<double>(Pack<double>(lhs, lorder), Pack<double>(rhs, rorder), nb, m, k, nn, out);
      break;
    case AccKind::kInt:
      MatMul<uint64_t>(Pack<uint64_t>(lhs, lorder), Pack<uint64_t>(rhs, rorder), nb, m, k, nn, out);
      break;
  }
  return out;
}

template <typename T>
void ConvLoop(const std::vector<T>& a, const std::vector<T>& w, const Shape& ls, const Shape& ws,
              const std::vector<std::vector<int64_t>>& tap,  // [d][o*K+k] -> input idx or -1
              int64_t groups, Literal& out) {
  const Shape& os = out.shape();
  const int ns = ls.rank() - 2;
  const int64_t batch = ls.dim(0), cin = ls.dim(1), cout = ws.dim(0);
  const int64_t cin_g = cin / groups, cout_g = cout / groups;
  std::vector<int64_t> in_sp, k_sp, o_sp;
  for (int d = 0; d < ns; ++d) {
    in_sp.push_back(ls.dim(d + 2));
    k_sp.push_back(ws.dim(d + 2));
    o_sp.push_back(os.dim(d + 2));
  }
  const int64_t in_size = NumElements(in_sp), k_size = NumElements(k_sp),
                o_size = NumElements(o_sp);
  const std::vector<int64_t> in_str = RowMajorStrides(in_sp), k_str = RowMajorStrides(k_sp);
  std::vector<int64_t> oidx(ns, 0), kidx(ns, 0);
  // For each (output position, kernel position): input offset or -1.
  std::vector<int64_t> offs(static_cast<size_t>(k_size));
  for (int64_t o = 0; o < o_size; ++o) {
    std::fill(kidx.begin(), kidx.end(), 0);
    for (int64_t kk = 0; kk < k_size; ++kk) {
      int64_t off = 0;
      for (int d = 0; d < ns; ++d) {
        const int64_t i = tap[d][oidx[d] * k_sp[d] + kidx[d]];
        if (i < 0) {
          off = -1;
          break;
        }
        off += i * in_str[d];
      }
      offs[kk] = off;
      NextIndex(k_sp, kidx);
    }
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t oc = 0; oc < cout; ++oc) {
        const int64_t g = oc / cout_g;
        T acc = T(0);
        for (int64_t ci = 0; ci < cin_g; ++ci) {
          const T* arow = a.data() + (b * cin + g * cin_g + ci) * in_size;
          const T* wrow = w.data() + (oc * cin_g + ci) * k_size;
          for (int64_t kk = 0; kk < k_size; ++kk) {
            if (offs[kk] >= 0) acc += arow[offs[kk]] * wrow[kk];
          }
        }
        StoreAcc<T>(os.dtype(), out.data(), (b * cout + oc) * o_size + o, acc);
      }
    }
    NextIndex(o_sp, oidx);
  }
}

// lhs [N, C, spatial...], rhs [O, C/feature_group_count, spatial...] -> [N, O, out spatial...].
StatusOr<Literal> Convolution(const Node& n, const Literal& lhs, const Literal& rhs) {
  const Shape& ls = lhs.shape();
  const Shape& ws = rhs.shape();
  const int ns = ls.rank() - 2;
  if (ns < 1 || ws.rank() != ls.rank() || n.shape.rank() != ls.rank() || n.shape.is_tuple() ||
      IsComplex(ls.dtype()) || IsComplex(ws.dtype()) || IsComplex(n.shape.dtype())) {
    return NodeInvalid(n, "bad operand shapes ", ls.ToString(), ", ", ws.ToString(), " -> ",
                       n.shape.ToString());
  }
  EMBER_ASSIGN_OR_RETURN(auto strides, GetIntsOr(n, attr::WindowStrides, ns, 1));
  EMBER_ASSIGN_OR_RETURN(auto lo, GetIntsOr(n, attr::PaddingLow, ns, 0));
  EMBER_ASSIGN_OR_RETURN(auto hi, GetIntsOr(n, attr::PaddingHigh, ns, 0));
  EMBER_ASSIGN_OR_RETURN(auto ldil, GetIntsOr(n, attr::LhsDilation, ns, 1));
  EMBER_ASSIGN_OR_RETURN(auto rdil, GetIntsOr(n, attr::RhsDilation, ns, 1));
  const int64_t groups = attr::FeatureGroupCount(n, 1);
  const int64_t cin = ls.dim(1), cout = ws.dim(0);
  if (groups < 1 || cin % groups != 0 || cout % groups != 0 || ws.dim(1) * groups != cin) {
    return NodeInvalid(n, "feature_group_count ", groups, " does not fit lhs ", ls.ToString(),
                       " and rhs ", ws.ToString());
  }
  if (n.shape.dim(0) != ls.dim(0) || n.shape.dim(1) != cout) {
    return NodeInvalid(n, "result shape ", n.shape.ToString(), " does not match operands ",
                       ls.ToString(), ", ", ws.ToString());
  }
  std::vector<std::vector<int64_t>> tap(ns);
  for (int d = 0; d < ns; ++d) {
    if (strides[d] < 1 || ldil[d] < 1 || rdil[d] < 1)
      return NodeInvalid(n, "bad stride or dilation");
    const int64_t in = ls.dim(d + 2), kw = ws.dim(d + 2);
    const int64_t dilated_in = in == 0 ? 0 : (in - 1) * ldil[d] + 1;
    const int64_t padded = dilated_in + lo[d] + hi[d];
    const int64_t span = kw == 0 ? 0 : (kw - 1) * rdil[d] + 1;
    const int64_t expect = padded < span ? 0 : (padded - span) / strides[d] + 1;
    if (n.shape.dim(d + 2) != expect) {
      return NodeInvalid(n, "result spatial dim ", d, " is ", n.shape.dim(d + 2), ", expected ",
                         expect);
    }
    tap[d].assign(static_cast<size_t>(expect * kw), -1);
    for (int64_t o = 0; o < expect; ++o) {
      for (int64_t k = 0; k < kw; ++k) {
        const int64_t p = o * strides[d] + k * rdil[d] - lo[d];
        if (p < 0 || p >= dilated_in || p % ldil[d] != 0) continue;
        tap[d][o * kw + k] = p / ldil[d];
      }
    }
  }
  std::vector<int64_t> lorder, rorder;
  for (int d = 0; d < ls.rank(); ++d) {
    lorder.push_back(d);
    rorder.push_back(d);
  }
  Literal out(n.shape);
  switch (ChooseAcc(n.shape.dtype(), ls.dtype(), ws.dtype())) {
    case AccKind::kFloat:
      ConvLoop<float>(Pack<float>(lhs, lorder), Pack<float>(rhs, rorder), ls, ws, tap, groups, out);
      break;
    case AccKind::kDouble:
      ConvLoop<double>(Pack<double>(lhs, lorder), Pack<double>(rhs, rorder), ls, ws, tap, groups,
                       out);
      break;
    case AccKind::kInt:
      ConvLoop<uint64_t>(Pack<uint64_t>(lhs, lorder), Pack<uint64_t>(rhs, rorder), ls, ws, tap,
                         groups, out);
      break;
  }
  return out;
}

}  // namespace

StatusOr<Literal> EvalContraction(const Node& n, const Operands& in) {
  if (in.size() != 2) return NodeInvalid(n, "expected two operands, got ", in.size());
  switch (n.op) {
    case OpKind::kDotGeneral:
      return DotGeneral(n, *in[0], *in[1]);
    case OpKind::kConvolution:
      return Convolution(n, *in[0], *in[1]);
    default:
      return EMBER_INTERNAL_ERROR(NodeLabel(n), " is not a contraction op");
  }
}

}  // namespace ember::eval
