// Data movement: views and their *_copy forms (view, _unsafe_view, expand,
// t, transpose, permute, unsqueeze, squeeze, slice, select, split, unbind,
// alias/detach), cat, stack, flip, roll, constant_pad_nd, triu/tril,
// slice_scatter, select_scatter. Values are dense row-major, so views are
// plain reshape/transpose/slice/broadcast of the operand's value (the bridge
// keeps aliasing at the tensor level). Sizes always come from Meta.
#include <algorithm>
#include <numeric>

#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

int64_t Rank(const TensorArg& x) { return static_cast<int64_t>(x.sizes.size()); }

// view, _unsafe_view, reshape, squeeze*, unsqueeze, view_copy, ...: the
// output sizes are Meta's.
LowerResult LowerReshape(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  const OutputMeta& out = c.outputs.at(0);
  if (out.dtype != x.dtype) return Declined("a view that changes dtype");
  NodeId r = x.sizes == out.sizes ? x.value : b.Reshape(x.value, out.sizes);
  return CheckOutputs(b, c, {r});
}

// alias, detach, lift_fresh and their _copy forms: the value itself.
LowerResult LowerIdentity(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  return CheckOutputs(b, c, {x.value});
}

LowerResult LowerExpand(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  const OutputMeta& out = c.outputs.at(0);
  if (!BroadcastShapes(x.sizes, out.sizes)) return InvalidArgument(c.op, ": bad expand");
  return CheckOutputs(b, c, {BroadcastTo(b, x.value, x.sizes, out.sizes)});
}

NodeId Permute(GraphBuilder& b, NodeId x, const std::vector<int64_t>& perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  return identity ? x : b.Transpose(x, perm);
}

// t(self): rank <= 1 unchanged.
LowerResult LowerT(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  if (Rank(x) < 2) return CheckOutputs(b, c, {x.value});
  return CheckOutputs(b, c, {b.Transpose(x.value, {1, 0})});
}

// transpose.int(self, dim0, dim1)
LowerResult LowerTranspose(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(int64_t d0, IntAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(int64_t d1, IntAt(c, 2));
  int64_t r = Rank(x);
  if (r == 0) return CheckOutputs(b, c, {x.value});
  std::vector<int64_t> perm(r);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[WrapDim(d0, r)], perm[WrapDim(d1, r)]);
  return CheckOutputs(b, c, {Permute(b, x.value, perm)});
}

// permute(self, dims)
LowerResult LowerPermute(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(std::vector<int64_t> dims, IntsAt(c, 1));
  int64_t r = Rank(x);
  for (auto& d : dims) d = WrapDim(d, r);
  return CheckOutputs(b, c, {Permute(b, x.value, dims)});
}

// Eager's slice bounds: None -> 0 / size; negative wraps; clamped to [0, size].
std::pair<int64_t, int64_t> SliceBounds(std::optional<int64_t> start, std::optional<int64_t> end,
                                        int64_t size) {
  int64_t s = start.value_or(0), e = end.value_or(size);
  if (s < 0) s += size;
  if (e < 0) e += size;
  s = std::clamp<int64_t>(s, 0, size);
  e = std::clamp<int64_t>(e, s, size);
  return {s, e};
}

NodeId SliceDim(GraphBuilder& b, NodeId x, const std::vector<int64_t>& sizes, int64_t dim,
                int64_t start, int64_t end, int64_t step) {
  std::vector<int64_t> lo(sizes.size(), 0), hi = sizes, st(sizes.size(), 1);
  lo[dim] = start;
  hi[dim] = end;
  st[dim] = step;
  return b.Slice(x, lo, hi, st);
}

// slice.Tensor(self, dim=0, start?, end?, step=1)
LowerResult LowerSlice(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(auto start, OptIntAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(auto end, OptIntAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(int64_t step, IntAt(c, 4));
  int64_t r = Rank(x);
  if (r == 0 || step <= 0) return InvalidArgument(c.op, ": bad slice");
  dim = WrapDim(dim, r);
  auto [s, e] = SliceBounds(start, end, x.sizes[dim]);
  return CheckOutputs(b, c, {SliceDim(b, x.value, x.sizes, dim, s, e, step)});
}

// select.int(self, dim, index)
LowerResult LowerSelect(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(int64_t index, IntAt(c, 2));
  int64_t r = Rank(x);
  if (r == 0) return InvalidArgument(c.op, ": select of a 0-d tensor");
  dim = WrapDim(dim, r);
  if (index < 0) index += x.sizes[dim];
  if (index < 0 || index >= x.sizes[dim]) return InvalidArgument(c.op, ": index out of range");
  NodeId s = SliceDim(b, x.value, x.sizes, dim, index, index + 1, 1);
  return CheckOutputs(b, c, {b.Reshape(s, c.outputs.at(0).sizes)});
}

// split.Tensor(self, split_size, dim), split_with_sizes(self, split_sizes, dim),
// unbind.int(self, dim): consecutive slices along dim, sizes from Meta.
template <int kKind>  // 0: split, 1: split_with_sizes, 2: unbind
LowerResult LowerSplit(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  int64_t dim = 0;
  if (kKind == 2) {
    EMBER_ASSIGN_OR_RETURN(dim, IntAt(c, 1));
  } else {
    EMBER_ASSIGN_OR_RETURN(dim, IntAt(c, 2));
  }
  int64_t r = Rank(x);
  if (r == 0) return InvalidArgument(c.op, ": split of a 0-d tensor");
  dim = WrapDim(dim, r);
  std::vector<NodeId> outs;
  int64_t pos = 0;
  for (const OutputMeta& o : c.outputs) {
    int64_t len = kKind == 2 ? 1 : (o.sizes.size() == x.sizes.size() ? o.sizes[dim] : -1);
    if (len < 0 || pos + len > x.sizes[dim])
      return InvalidArgument(c.op, ": output sizes do not tile the input");
    NodeId s = SliceDim(b, x.value, x.sizes, dim, pos, pos + len, 1);
    if (kKind == 2) s = b.Reshape(s, o.sizes);
    outs.push_back(s);
    pos += len;
  }
  return CheckOutputs(b, c, outs);
}

// cat(tensors, dim): operands cast to the result dtype; legacy empty 1-d
// tensors ([0]) are skipped, as eager does.
LowerResult LowerCat(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(auto ts, TensorListAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 1));
  const OutputMeta& out = c.outputs.at(0);
  int64_t r = static_cast<int64_t>(out.sizes.size());
  if (r == 0) return InvalidArgument(c.op, ": zero-dimensional result");
  dim = WrapDim(dim, r);
  std::vector<NodeId> parts;
  for (const auto& t : ts) {
    if (!t) return InvalidArgument(c.op, ": absent tensor");
    if (t->sizes.size() == 1 && t->sizes[0] == 0 && r != 1) continue;
    if (static_cast<int64_t>(t->sizes.size()) != r) return InvalidArgument(c.op, ": rank mismatch");
    parts.push_back(ConvertTo(b, t->value, out.dtype));
  }
  if (parts.empty()) return CheckOutputs(b, c, {Splat(b, out.dtype, 0, out.sizes)});
  NodeId res = parts.size() == 1 ? parts[0] : b.Concatenate(parts, dim);
  return CheckOutputs(b, c, {res});
}

// stack(tensors, dim): each unsqueezed at dim, then concatenated.
LowerResult LowerStack(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(auto ts, TensorListAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 1));
  const OutputMeta& out = c.outputs.at(0);
  int64_t r = static_cast<int64_t>(out.sizes.size());
  dim = dim < 0 ? dim + r : dim;
  std::vector<NodeId> parts;
  for (const auto& t : ts) {
    if (!t) return InvalidArgument(c.op, ": absent tensor");
    std::vector<int64_t> s = t->sizes;
    if (dim < 0 || dim > static_cast<int64_t>(s.size())) return InvalidArgument(c.op, ": bad dim");
    s.insert(s.begin() + dim, 1);
    parts.push_back(b.Reshape(ConvertTo(b, t->value, out.dtype), s));
  }
  if (parts.empty()) return InvalidArgument(c.op, ": empty list");
  NodeId res = parts.size() == 1 ? parts[0] : b.Concatenate(parts, dim);
  return CheckOutputs(b, c, {res});
}

// flip(self, dims)
LowerResult LowerFlip(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(std::vector<int64_t> dims, IntsAt(c, 1));
  int64_t r = Rank(x);
  if (r == 0 || dims.empty()) return CheckOutputs(b, c, {x.value});
  for (auto& d : dims) d = WrapDim(d, r);
  std::sort(dims.begin(), dims.end());
  return CheckOutputs(b, c, {b.Reverse(x.value, dims)});
}

// roll(self, shifts, dims): out[i] = x[(i - shift) mod n]; dims = [] rolls
// the flattened tensor.
NodeId RollDim(GraphBuilder& b, NodeId x, const std::vector<int64_t>& sizes, int64_t dim,
               int64_t shift) {
  int64_t n = sizes[dim];
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  NodeId tail = SliceDim(b, x, sizes, dim, n - s, n, 1);
  NodeId head = SliceDim(b, x, sizes, dim, 0, n - s, 1);
  return b.Concatenate({tail, head}, dim);
}

LowerResult LowerRoll(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(std::vector<int64_t> shifts, IntsAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(std::vector<int64_t> dims, IntsAt(c, 2));
  int64_t r = Rank(x);
  if (dims.empty()) {
    if (shifts.size() != 1) return InvalidArgument(c.op, ": one shift without dims");
    int64_t n = 1;
    for (int64_t s : x.sizes) n *= s;
    NodeId flat = b.Reshape(x.value, {n});
    NodeId rolled = RollDim(b, flat, {n}, 0, shifts[0]);
    return CheckOutputs(b, c, {b.Reshape(rolled, x.sizes)});
  }
  if (shifts.size() != dims.size())
    return InvalidArgument(c.op, ": shifts and dims differ in length");
  NodeId v = x.value;
  for (size_t i = 0; i < dims.size(); ++i)
    v = RollDim(b, v, x.sizes, WrapDim(dims[i], r), shifts[i]);
  return CheckOutputs(b, c, {v});
}

// constant_pad_nd(self, pad, value=0): pad pairs start at the last dim;
// negative pads crop.
LowerResult LowerConstantPad(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(std::vector<int64_t> pad, IntsAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(auto value, OptValAt(c, 2));
  int64_t r = Rank(x);
  if (pad.size() % 2 != 0 || static_cast<int64_t>(pad.size()) / 2 > r)
    return InvalidArgument(c.op, ": bad pad length");
  std::vector<int64_t> lo(r, 0), hi(r, 0), interior(r, 0);
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    lo[r - 1 - i] = pad[2 * i];
    hi[r - 1 - i] = pad[2 * i + 1];
  }
  NodeId pv;
  if (value) {
    Val v = *value;
    v.tier = PromoTier::kWrapped;
    pv = Prepare(b, v, x.dtype, x.dtype, {});
  } else {
    pv = b.ConstantScalar(x.dtype, 0);
  }
  return CheckOutputs(b, c, {b.Pad(x.value, pv, lo, hi, interior)});
}

// triu/tril(self, diagonal) over the last two dims: tril keeps j - i <= k,
// triu keeps j - i >= k.
template <bool kUpper>
LowerResult LowerTri(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(int64_t k, IntAt(c, 1));
  int64_t r = Rank(x);
  if (r < 2) return InvalidArgument(c.op, ": input must have at least 2 dims");
  std::vector<int64_t> mn = {x.sizes[r - 2], x.sizes[r - 1]};
  NodeId i = b.Iota(Shape(DType::kS64, mn), 0), j = b.Iota(Shape(DType::kS64, mn), 1);
  NodeId diff = b.Subtract(j, i);
  NodeId keep = b.Compare(diff, Splat(b, DType::kS64, static_cast<double>(k), mn),
                          kUpper ? ComparisonKind::kGe : ComparisonKind::kLe);
  keep = BroadcastTo(b, keep, mn, x.sizes);
  return CheckOutputs(b, c, {b.Select(keep, x.value, Splat(b, x.dtype, 0, x.sizes))});
}

// src placed into self at start:end:step of dim (through interior padding of
// src and of a mask).
NodeId ScatterSlice(GraphBuilder& b, const TensorArg& self, NodeId src,
                    const std::vector<int64_t>& src_sizes, int64_t dim, int64_t start,
                    int64_t step) {
  int64_t r = Rank(self);
  std::vector<int64_t> lo(r, 0), hi(r, 0), in(r, 0);
  int64_t n = src_sizes[dim];
  lo[dim] = start;
  in[dim] = step - 1;
  int64_t covered = n == 0 ? 0 : start + (n - 1) * step + 1;
  hi[dim] = self.sizes[dim] - (n == 0 ? start : covered);
  if (n == 0) return self.value;
  NodeId padded = b.Pad(ConvertTo(b, src, self.dtype), b.ConstantScalar(self.dtype, 0), lo, hi, in);
  NodeId mask =
      b.Pad(Splat(b, DType::kPred, 1, src_sizes), b.ConstantScalar(DType::kPred, 0), lo, hi, in);
  return b.Select(mask, padded, self.value);
}

// slice_scatter(self, src, dim=0, start?, end?, step=1)
LowerResult LowerSliceScatter(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg src, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(auto start, OptIntAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(auto end, OptIntAt(c, 4));
  EMBER_ASSIGN_OR_RETURN(int64_t step, IntAt(c, 5));
  int64_t r = Rank(x);
  if (r == 0 || step <= 0 || Rank(src) != r) return InvalidArgument(c.op, ": bad slice_scatter");
  dim = WrapDim(dim, r);
  auto [s, e] = SliceBounds(start, end, x.sizes[dim]);
  (void)e;
  return CheckOutputs(b, c, {ScatterSlice(b, x, src.value, src.sizes, dim, s, step)});
}

// select_scatter(self, src, dim, index)
LowerResult LowerSelectScatter(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg src, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(int64_t index, IntAt(c, 3));
  int64_t r = Rank(x);
  if (r == 0) return InvalidArgument(c.op, ": 0-d input");
  dim = WrapDim(dim, r);
  if (index < 0) index += x.sizes[dim];
  if (index < 0 || index >= x.sizes[dim]) return InvalidArgument(c.op, ": index out of range");
  std::vector<int64_t> s = src.sizes;
  s.insert(s.begin() + dim, 1);
  NodeId u = b.Reshape(src.value, s);
  return CheckOutputs(b, c, {ScatterSlice(b, x, u, s, dim, index, 1)});
}

// slice_backward(grad_output, input_sizes, dim, start, end, step) and
// select_backward(grad_output, input_sizes, dim, index): zeros of the input's
// sizes with the gradient placed where the view read.
template <bool kSelect>
LowerResult LowerViewBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg g, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, IntsAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 2));
  int64_t r = static_cast<int64_t>(sizes.size());
  if (r == 0) return InvalidArgument(c.op, ": 0-d input");
  dim = WrapDim(dim, r);
  int64_t start, step = 1;
  std::vector<int64_t> gs = g.sizes;
  NodeId gv = g.value;
  if (kSelect) {
    EMBER_ASSIGN_OR_RETURN(int64_t index, IntAt(c, 3));
    start = index < 0 ? index + sizes[dim] : index;
    if (start < 0 || start >= sizes[dim]) return InvalidArgument(c.op, ": index out of range");
    gs.insert(gs.begin() + dim, 1);
    gv = b.Reshape(gv, gs);
  } else {
    EMBER_ASSIGN_OR_RETURN(int64_t s0, IntAt(c, 3));
    EMBER_ASSIGN_OR_RETURN(int64_t e0, IntAt(c, 4));
    EMBER_ASSIGN_OR_RETURN(step, IntAt(c, 5));
    if (step <= 0) return InvalidArgument(c.op, ": step must be positive");
    start = SliceBounds(s0, e0, sizes[dim]).first;
  }
  if (static_cast<int64_t>(gs.size()) != r) return InvalidArgument(c.op, ": rank mismatch");
  TensorArg zeros;
  zeros.dtype = c.outputs.at(0).dtype;
  zeros.sizes = sizes;
  zeros.value = Splat(b, zeros.dtype, 0, sizes);
  return CheckOutputs(b, c, {ScatterSlice(b, zeros, gv, gs, dim, start, step)});
}

}  // namespace

void RegisterDataMovement(LoweringTable& t) {
  t.Add("aten::select_backward", LowerViewBackward<true>);
  t.Add("aten::slice_backward", LowerViewBackward<false>);
  for (const char* o : {"aten::view", "aten::_unsafe_view", "aten::view_copy", "aten::reshape",
                        "aten::_reshape_alias", "aten::_reshape_alias_copy", "aten::unsqueeze",
                        "aten::unsqueeze_copy", "aten::squeeze", "aten::squeeze.dim",
                        "aten::squeeze.dims", "aten::squeeze_copy", "aten::squeeze_copy.dim",
                        "aten::squeeze_copy.dims", "aten::flatten.using_ints"})
    t.Add(o, LowerReshape);
  for (const char* o : {"aten::alias", "aten::alias_copy", "aten::detach", "aten::detach_copy",
                        "aten::lift_fresh", "aten::lift_fresh_copy"})
    t.Add(o, LowerIdentity);
  for (const char* o : {"aten::expand", "aten::expand_copy"}) t.Add(o, LowerExpand);
  for (const char* o : {"aten::t", "aten::t_copy"}) t.Add(o, LowerT);
  for (const char* o : {"aten::transpose.int", "aten::transpose_copy.int"})
    t.Add(o, LowerTranspose);
  for (const char* o : {"aten::permute", "aten::permute_copy"}) t.Add(o, LowerPermute);
  for (const char* o : {"aten::slice.Tensor", "aten::slice_copy.Tensor"}) t.Add(o, LowerSlice);
  for (const char* o : {"aten::select.int", "aten::select_copy.int"}) t.Add(o, LowerSelect);
  for (const char* o : {"aten::split.Tensor", "aten::split_copy.Tensor"}) t.Add(o, LowerSplit<0>);
  for (const char* o : {"aten::split_with_sizes", "aten::split_with_sizes_copy"})
    t.Add(o, LowerSplit<1>);
  for (const char* o : {"aten::unbind.int", "aten::unbind_copy.int"}) t.Add(o, LowerSplit<2>);
  t.Add("aten::cat", LowerCat);
  t.Add("aten::stack", LowerStack);
  t.Add("aten::flip", LowerFlip);
  t.Add("aten::roll", LowerRoll);
  t.Add("aten::constant_pad_nd", LowerConstantPad);
  t.Add("aten::triu", LowerTri<true>);
  t.Add("aten::tril", LowerTri<false>);
  t.Add("aten::slice_scatter", LowerSliceScatter);
  t.Add("aten::select_scatter", LowerSelectScatter);
}

}  // namespace ember::lowering
