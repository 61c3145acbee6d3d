// Pooling: max_pool2d_with_indices and its backward, avg_pool2d.
//
// max_pool2d_with_indices(self, kernel_size, stride=[], padding=0,
//   dilation=1, ceil_mode=False) -> (values, indices): every kernel offset
// (kh, kw) gives a strided slice of the -inf-padded input ([N?, C, OH, OW]
// candidates); they are combined in row-major kernel order keeping the first
// maximum, a NaN winning as in eager's CPU kernel (`val > max || isnan(val)`).
// Indices are flat positions h * W + w in the unpadded input plane.
// max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride,
//   padding, dilation, ceil_mode, indices): grad scattered (added) at indices.
// Output sizes come from Meta (ceil_mode is then only the extra high padding).
#include <cmath>

#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

struct Pool2d {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

StatusOr<Pool2d> PoolArgs(const AtenCall& c, size_t first) {
  EMBER_ASSIGN_OR_RETURN(std::vector<int64_t> k, IntsAt(c, first));
  EMBER_ASSIGN_OR_RETURN(std::vector<int64_t> s, IntsAt(c, first + 1));
  EMBER_ASSIGN_OR_RETURN(std::vector<int64_t> p, IntsAt(c, first + 2));
  EMBER_ASSIGN_OR_RETURN(std::vector<int64_t> d, IntsAt(c, first + 3));
  auto two = [](std::vector<int64_t> v, std::vector<int64_t> def) {
    if (v.empty()) return def;
    if (v.size() == 1) return std::vector<int64_t>{v[0], v[0]};
    return v;
  };
  k = two(k, {1, 1});
  s = two(s, k);
  p = two(p, {0, 0});
  d = two(d, {1, 1});
  if (k.size() != 2 || s.size() != 2 || p.size() != 2 || d.size() != 2)
    return InvalidArgument(c.op, ": 2-d pooling parameters expected");
  return Pool2d{k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]};
}

// Candidates for kernel offset (i, j): x padded by (ph, pw) low and enough
// high padding, sliced [i*dh :: sh][j*dw :: sw] to (oh, ow).
NodeId Candidate(GraphBuilder& b, NodeId padded, int64_t lead, const std::vector<int64_t>& psizes,
                 int64_t i, int64_t j, const Pool2d& p, int64_t oh, int64_t ow) {
  std::vector<int64_t> lo(lead + 2, 0), hi = psizes, st(lead + 2, 1);
  lo[lead] = i * p.dh;
  lo[lead + 1] = j * p.dw;
  hi[lead] = lo[lead] + (oh - 1) * p.sh + 1;
  hi[lead + 1] = lo[lead + 1] + (ow - 1) * p.sw + 1;
  st[lead] = p.sh;
  st[lead + 1] = p.sw;
  return b.Slice(padded, lo, hi, st);
}

LowerResult LowerMaxPool(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Pool2d p, PoolArgs(c, 1));
  if (!IsFloat(x.dtype)) return Declined("max pooling of integers");
  if (c.outputs.size() != 2) return InvalidArgument(c.op, ": expected two outputs");
  int64_t r = static_cast<int64_t>(x.sizes.size());
  if (r != 3 && r != 4) return InvalidArgument(c.op, ": input must be 3-d or 4-d");
  const std::vector<int64_t>& osz = c.outputs[0].sizes;
  int64_t lead = r - 2, h = x.sizes[lead], w = x.sizes[lead + 1];
  int64_t oh = osz[lead], ow = osz[lead + 1];
  if (oh == 0 || ow == 0 || h == 0 || w == 0) return Declined("empty pooling");
  DType t = ComputeType(x.dtype);
  std::vector<int64_t> lo(r, 0), hi(r, 0), in(r, 0);
  lo[lead] = p.ph;
  lo[lead + 1] = p.pw;
  // High padding so every window fits (ceil_mode windows may overhang).
  hi[lead] = std::max<int64_t>(0, (oh - 1) * p.sh + (p.kh - 1) * p.dh + 1 - h - p.ph);
  hi[lead + 1] = std::max<int64_t>(0, (ow - 1) * p.sw + (p.kw - 1) * p.dw + 1 - w - p.pw);
  NodeId v = ConvertTo(b, x.value, t);
  NodeId padded = b.Pad(v, b.ConstantScalar(t, -INFINITY), lo, hi, in);
  std::vector<int64_t> psizes = x.sizes;
  psizes[lead] += lo[lead] + hi[lead];
  psizes[lead + 1] += lo[lead + 1] + hi[lead + 1];
  // Flat input index of each padded position, and whether it is a real
  // element: padding never wins; the first real element of a window starts
  // it (eager starts from its top-left valid element with max = -inf).
  std::vector<int64_t> plane = {psizes[lead], psizes[lead + 1]};
  NodeId row =
      b.Subtract(b.Iota(Shape(DType::kS64, plane), 0), Splat(b, DType::kS64, double(p.ph), plane));
  NodeId col =
      b.Subtract(b.Iota(Shape(DType::kS64, plane), 1), Splat(b, DType::kS64, double(p.pw), plane));
  NodeId flat = b.Add(b.Multiply(row, Splat(b, DType::kS64, double(w), plane)), col);
  flat = BroadcastTo(b, flat, plane, psizes);
  NodeId valid =
      b.Pad(Splat(b, DType::kPred, 1, x.sizes), b.ConstantScalar(DType::kPred, 0), lo, hi, in);
  NodeId best = kInvalidNode, best_i = kInvalidNode, best_ok = kInvalidNode;
  for (int64_t i = 0; i < p.kh; ++i) {
    for (int64_t j = 0; j < p.kw; ++j) {
      NodeId cv = Candidate(b, padded, lead, psizes, i, j, p, oh, ow);
      NodeId ci = Candidate(b, flat, lead, psizes, i, j, p, oh, ow);
      NodeId ok = Candidate(b, valid, lead, psizes, i, j, p, oh, ow);
      if (best == kInvalidNode) {
        best = cv;
        best_i = ci;
        best_ok = ok;
        continue;
      }
      NodeId better = b.Binary(OpKind::kOr, b.Compare(cv, best, ComparisonKind::kGt),
                               b.Binary(OpKind::kAnd, b.Compare(cv, cv, ComparisonKind::kNe),
                                        b.Compare(best, best, ComparisonKind::kEq)));
      NodeId take =
          b.Binary(OpKind::kAnd, ok, b.Binary(OpKind::kOr, b.Unary(OpKind::kNot, best_ok), better));
      best = b.Select(take, cv, best);
      best_i = b.Select(take, ci, best_i);
      best_ok = b.Binary(OpKind::kOr, best_ok, ok);
    }
  }
  return CheckOutputs(b, c, {Finish(b, best, c.outputs[0]), Finish(b, best_i, c.outputs[1])});
}

LowerResult LowerMaxPoolBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg g, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(TensorArg idx, TensorAt(c, 7));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("max pooling of integers");
  int64_t r = static_cast<int64_t>(x.sizes.size());
  if (r != 3 && r != 4) return InvalidArgument(c.op, ": input must be 3-d or 4-d");
  int64_t lead = r - 2;
  int64_t planes = 1;
  for (int64_t i = 0; i < lead; ++i) planes *= x.sizes[i];
  int64_t hw = x.sizes[lead] * x.sizes[lead + 1];
  int64_t ohw = g.sizes[lead] * g.sizes[lead + 1];
  if (planes * hw == 0 || planes * ohw == 0)
    return CheckOutputs(b, c, {Splat(b, out.dtype, 0, out.sizes)});
  DType t = ComputeType(out.dtype);
  int64_t m = planes * ohw;
  NodeId gv = b.Reshape(ConvertTo(b, g.value, t), {m});
  NodeId plane_id = b.Reshape(b.Iota(Shape(DType::kS64, {planes, ohw}), 0), {m, 1});
  NodeId pos = b.Reshape(ConvertTo(b, idx.value, DType::kS64), {m, 1});
  NodeId coords = b.Concatenate({plane_id, pos}, 1);
  ScatterDims d;
  d.inserted_window_dims = {0, 1};
  d.scatter_dims_to_operand_dims = {0, 1};
  d.index_vector_dim = 1;
  NodeId s = b.Scatter(Splat(b, t, 0, {planes, hw}), coords, gv, d, ReduceKind::kAdd);
  return CheckOutputs(b, c, {Finish(b, b.Reshape(s, out.sizes), out)});
}

}  // namespace

void RegisterPooling(LoweringTable& t) {
  t.Add("aten::max_pool2d_with_indices", LowerMaxPool);
  t.Add("aten::max_pool2d_with_indices_backward", LowerMaxPoolBackward);
}

}  // namespace ember::lowering
