// Pooling: max_pool2d_with_indices and its backward, avg_pool2d.
//
// max_pool2d_with_indices(self, kernel_size, stride=[], padding=0,
//   dilation=1, ceil_mode=False) -> (values, indices): every kernel offset
// (kh, kw) gives a strided slice of the -inf-padded input ([N?, C, OH, OW]
// candidates); they are combined in row-major kernel order keeping the first
// maximum, a NaN winning as in eager's CPU kernel (`val > max || isnan(val)`).
// Indices are flat positions h * W + w in the unpadded input plane.
// max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride,
//   padding, dilation, ceil_mode, indices): grad added at indices, as one elementwise
//   sum over kernel offsets (no scatter; see LowerMaxPoolBackward).
// Output sizes come from Meta (ceil_mode is then only the extra high padding).
#include <algorithm>
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

// The flat input position (y * sy + y0) * w + (z * sz + z0) at each element of an s64
// value of `sizes`, y and z its indices along dims lead and lead + 1: where a window
// origin or a window element lies in the unpadded plane of width w.
NodeId FlatPositions(GraphBuilder& b, const std::vector<int64_t>& sizes, int64_t lead, int64_t w,
                     int64_t sy, int64_t y0, int64_t sz, int64_t z0) {
  auto splat = [&](int64_t v) { return Splat(b, DType::kS64, double(v), sizes); };
  auto axis = [&](int64_t dim, int64_t scale, int64_t offset) {
    return b.Add(b.Multiply(b.Iota(Shape(DType::kS64, sizes), dim), splat(scale)), splat(offset));
  };
  return b.Add(b.Multiply(axis(lead, sy, y0), splat(w)), axis(lead + 1, sz, z0));
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
  const bool all_valid = lo[lead] == 0 && lo[lead + 1] == 0 && hi[lead] == 0 && hi[lead + 1] == 0;
  NodeId padded = all_valid ? v : b.Pad(v, b.ConstantScalar(t, -INFINITY), lo, hi, in);
  std::vector<int64_t> psizes = x.sizes;
  psizes[lead] += lo[lead] + hi[lead];
  psizes[lead + 1] += lo[lead + 1] + hi[lead + 1];
  // Values: the window's maximum in row-major kernel order, the first NaN winning (eager's
  // CPU kernel: `val > max || isnan(val)` from the first valid element). Padding is -inf,
  // which never changes a maximum.
  std::vector<NodeId> cand;
  for (int64_t i = 0; i < p.kh; ++i)
    for (int64_t j = 0; j < p.kw; ++j)
      cand.push_back(Candidate(b, padded, lead, psizes, i, j, p, oh, ow));
  NodeId best = cand[0];
  for (size_t k = 1; k < cand.size(); ++k) {
    // c > m || (isnan(c) && !isnan(m)), written as !(c <= m) && m == m: it tests no
    // candidate for NaN, so it shares no node with the index chain's tests.
    NodeId better =
        b.Binary(OpKind::kAnd, b.Unary(OpKind::kNot, b.Compare(cand[k], best, ComparisonKind::kLe)),
                 b.Compare(best, best, ComparisonKind::kEq));
    best = b.Select(better, cand[k], best);
  }
  // Indices: the first valid window element equal to the maximum (both NaN for a NaN
  // maximum), which is the one eager's scan last took. Computed from the maximum rather
  // than along its chain, so the two outputs share no intermediate and fuse apart. Flat
  // positions y * W + z in the unpadded plane: the window's origin plus the element's
  // offset, selected among constants.
  NodeId valid = kInvalidNode;
  if (!all_valid) {
    valid =
        b.Pad(Splat(b, DType::kPred, 1, x.sizes), b.ConstantScalar(DType::kPred, 0), lo, hi, in);
  }
  NodeId best_nan = b.Compare(best, best, ComparisonKind::kNe);
  NodeId off = kInvalidNode;
  for (int64_t k = p.kh * p.kw - 1; k >= 0; --k) {
    const int64_t i = k / p.kw, j = k % p.kw;
    NodeId here = Splat(b, DType::kS64, double(i * p.dh * w + j * p.dw), osz);
    if (off == kInvalidNode) {  // the last element: taken when no earlier one matches
      off = here;
      continue;
    }
    NodeId cand_nan = b.Compare(cand[k], cand[k], ComparisonKind::kNe);
    NodeId match = b.Binary(OpKind::kOr, b.Compare(cand[k], best, ComparisonKind::kEq),
                            b.Binary(OpKind::kAnd, cand_nan, best_nan));
    if (valid != kInvalidNode)
      match = b.Binary(OpKind::kAnd, match, Candidate(b, valid, lead, psizes, i, j, p, oh, ow));
    off = b.Select(match, here, off);
  }
  NodeId idx = b.Add(FlatPositions(b, osz, lead, w, p.sh, -p.ph, p.sw, -p.pw), off);
  return CheckOutputs(b, c, {Finish(b, best, c.outputs[0]), Finish(b, idx, c.outputs[1])});
}

LowerResult LowerMaxPoolBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg g, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(Pool2d p, PoolArgs(c, 2));
  EMBER_ASSIGN_OR_RETURN(TensorArg idx, TensorAt(c, 7));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("max pooling of integers");
  int64_t r = static_cast<int64_t>(x.sizes.size());
  if (r != 3 && r != 4) return InvalidArgument(c.op, ": input must be 3-d or 4-d");
  if (g.sizes.size() != x.sizes.size() || idx.sizes != g.sizes)
    return InvalidArgument(c.op, ": grad_output and indices must have the output's rank");
  int64_t lead = r - 2, h = x.sizes[lead], w = x.sizes[lead + 1];
  int64_t oh = g.sizes[lead], ow = g.sizes[lead + 1];
  DType t = ComputeType(out.dtype);
  auto has_zero = [](const std::vector<int64_t>& s) {
    return std::find(s.begin(), s.end(), 0) != s.end();
  };
  if (has_zero(x.sizes) || has_zero(g.sizes))
    return CheckOutputs(b, c, {Splat(b, out.dtype, 0, out.sizes)});
  const std::vector<int64_t>& gs = g.sizes;
  NodeId gv = ConvertTo(b, g.value, t);
  NodeId iv = ConvertTo(b, idx.value, DType::kS64);
  if (p.sh == p.kh && p.sw == p.kw && p.dh == 1 && p.dw == 1) {
    // Windows tile the padded input: each input element lies in at most one window, so
    // repeating every output kh x kw times lays grad and index over the padded grid
    // [OH*kh, OW*kw]; an element takes the grad when the index names it. The pad
    // (negative low padding crops) maps the grid onto the input.
    std::vector<int64_t> rep(gs.begin(), gs.begin() + lead), dims;
    for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
    rep.insert(rep.end(), {oh, p.kh, ow, p.kw});
    dims.insert(dims.end(), {lead, lead + 2});
    std::vector<int64_t> grid(gs.begin(), gs.begin() + lead);
    grid.insert(grid.end(), {oh * p.kh, ow * p.kw});
    auto repeat = [&](NodeId v) { return b.Reshape(b.BroadcastInDim(v, rep, dims), grid); };
    NodeId flat = FlatPositions(b, grid, lead, w, 1, -p.ph, 1, -p.pw);
    NodeId hit = b.Compare(repeat(iv), flat, ComparisonKind::kEq);
    NodeId placed = b.Select(hit, repeat(gv), Splat(b, t, 0, grid));
    std::vector<int64_t> lo(r, 0), hi(r, 0), in(r, 0);
    lo[lead] = -p.ph;
    lo[lead + 1] = -p.pw;
    hi[lead] = h + p.ph - oh * p.kh;
    hi[lead + 1] = w + p.pw - ow * p.kw;
    return CheckOutputs(b, c, {Finish(b, b.Pad(placed, b.ConstantScalar(t, 0), lo, hi, in), out)});
  }
  // Kernel offset (i, j) of output (y, z) reads input (y*sh + i*dh - ph, z*sw + j*dw - pw):
  // its gradient goes there when the index names that position. Each offset's share is
  // placed on the input grid by an interior pad (stride - 1 holes, negative low/high
  // crop what lies in the padding), so the whole backward is one elementwise loop.
  // Offsets are summed in descending (i, j), i.e. ascending output position for a
  // shared input element: the order eager's CPU kernel accumulates in.
  NodeId zero = Splat(b, t, 0, gs);
  NodeId acc = Splat(b, t, 0, x.sizes);
  for (int64_t i = p.kh - 1; i >= 0; --i) {
    for (int64_t j = p.kw - 1; j >= 0; --j) {
      const int64_t row0 = i * p.dh - p.ph, col0 = j * p.dw - p.pw;
      NodeId flat = FlatPositions(b, gs, lead, w, p.sh, row0, p.sw, col0);
      NodeId share = b.Select(b.Compare(iv, flat, ComparisonKind::kEq), gv, zero);
      std::vector<int64_t> lo(r, 0), hi(r, 0), in(r, 0);
      lo[lead] = row0;
      lo[lead + 1] = col0;
      in[lead] = p.sh - 1;
      in[lead + 1] = p.sw - 1;
      hi[lead] = h - (row0 + (oh - 1) * p.sh + 1);
      hi[lead + 1] = w - (col0 + (ow - 1) * p.sw + 1);
      acc = b.Add(acc, b.Pad(share, b.ConstantScalar(t, 0), lo, hi, in));
    }
  }
  return CheckOutputs(b, c, {Finish(b, acc, out)});
}

}  // namespace

void RegisterPooling(LoweringTable& t) {
  t.Add("aten::max_pool2d_with_indices", LowerMaxPool);
  t.Add("aten::max_pool2d_with_indices_backward", LowerMaxPoolBackward);
}

}  // namespace ember::lowering
