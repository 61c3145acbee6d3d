// Indexing: index_select, gather, scatter (.src, .value), scatter_add,
// index.Tensor (advanced indexing with integer index tensors), index_put
// (accumulate or not), embedding and embedding_dense_backward, all through
// the IR's gather/scatter (an out-of-range index is an OutOfRange error at
// run time, as eager raises; index/index_put wrap negative indices as eager).
// Duplicate indices: scatter/index_put without accumulate keep the last
// update in row-major order (eager CPU's serial order), with accumulate
// they add.
#include <algorithm>
#include <numeric>

#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

int64_t Rank(const std::vector<int64_t>& s) { return static_cast<int64_t>(s.size()); }
int64_t Numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Full coordinates for torch.gather/scatter: index [sizes] along `dim`,
// iota along every other dim -> [sizes..., rank] s64.
NodeId FullCoords(GraphBuilder& b, NodeId index, const std::vector<int64_t>& sizes, int64_t dim) {
  int64_t r = Rank(sizes);
  std::vector<int64_t> one = sizes;
  one.push_back(1);
  std::vector<NodeId> parts;
  NodeId idx = ConvertTo(b, index, DType::kS64);
  for (int64_t d = 0; d < r; ++d) {
    NodeId p = d == dim ? idx : b.Iota(Shape(DType::kS64, sizes), d);
    parts.push_back(b.Reshape(p, one));
  }
  return parts.size() == 1 ? parts[0] : b.Concatenate(parts, r);
}

// Point gather: out[p] = x[coords[p, :]].
NodeId PointGather(GraphBuilder& b, NodeId x, int64_t x_rank, NodeId coords, int64_t coord_rank) {
  GatherDims d;
  d.collapsed_slice_dims.resize(x_rank);
  std::iota(d.collapsed_slice_dims.begin(), d.collapsed_slice_dims.end(), 0);
  d.start_index_map = d.collapsed_slice_dims;
  d.index_vector_dim = coord_rank;
  return b.Gather(x, coords, d, std::vector<int64_t>(x_rank, 1));
}

NodeId PointScatter(GraphBuilder& b, NodeId x, int64_t x_rank, NodeId coords, int64_t coord_rank,
                    NodeId updates, ReduceKind kind) {
  ScatterDims d;
  d.inserted_window_dims.resize(x_rank);
  std::iota(d.inserted_window_dims.begin(), d.inserted_window_dims.end(), 0);
  d.scatter_dims_to_operand_dims = d.inserted_window_dims;
  d.index_vector_dim = coord_rank;
  return b.Scatter(x, coords, updates, d, kind);
}

// gather(self, dim, index, *, sparse_grad=False)
LowerResult LowerGather(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(TensorArg index, TensorAt(c, 2));
  int64_t r = Rank(x.sizes);
  if (r == 0 || Rank(index.sizes) != r) return Declined("gather of 0-d tensors");
  dim = WrapDim(dim, r);
  if (Numel(index.sizes) == 0) return CheckOutputs(b, c, {Splat(b, x.dtype, 0, index.sizes)});
  NodeId coords = FullCoords(b, index.value, index.sizes, dim);
  return CheckOutputs(b, c, {PointGather(b, x.value, r, coords, r)});
}

// scatter.src(self, dim, index, src), scatter.value(self, dim, index, value),
// scatter_add(self, dim, index, src): only the index-shaped corner of src is used.
template <bool kAdd>
LowerResult LowerScatter(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(TensorArg index, TensorAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(Val src, ValAt(c, 3));
  int64_t r = Rank(x.sizes);
  if (r == 0 || Rank(index.sizes) != r) return Declined("scatter of 0-d tensors");
  if (kAdd && x.dtype == DType::kPred) return Declined("scatter_add of bool");
  dim = WrapDim(dim, r);
  if (Numel(index.sizes) == 0) return CheckOutputs(b, c, {x.value});
  NodeId upd;
  if (src.tier == PromoTier::kWrapped || (src.sizes.empty() && r > 0)) {
    src.tier = PromoTier::kWrapped;
    upd = Prepare(b, src, x.dtype, x.dtype, index.sizes);
  } else {
    NodeId s = ConvertTo(b, src.id, x.dtype);
    if (src.sizes != index.sizes)
      s = b.Slice(s, std::vector<int64_t>(r, 0), index.sizes, std::vector<int64_t>(r, 1));
    upd = s;
  }
  NodeId coords = FullCoords(b, index.value, index.sizes, dim);
  return CheckOutputs(
      b, c,
      {PointScatter(b, x.value, r, coords, r, upd, kAdd ? ReduceKind::kAdd : ReduceKind::kAssign)});
}

// index_select(self, dim, index): index 1-d (or 0-d).
LowerResult LowerIndexSelect(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(TensorArg index, TensorAt(c, 2));
  const OutputMeta& out = c.outputs.at(0);
  int64_t r = Rank(x.sizes);
  if (r == 0) return Declined("index_select of a 0-d tensor");
  dim = WrapDim(dim, r);
  int64_t n = Numel(index.sizes);
  if (n == 0) return CheckOutputs(b, c, {Splat(b, x.dtype, 0, out.sizes)});
  NodeId idx = b.Reshape(ConvertTo(b, index.value, DType::kS64), {n, 1});
  GatherDims d;
  d.collapsed_slice_dims = {dim};
  d.start_index_map = {dim};
  d.index_vector_dim = 1;
  std::vector<int64_t> slice = x.sizes;
  slice[dim] = 1;
  // Result dims: x's, with the index's n at `dim` (the batch dim fills the
  // position the offset dims leave free).
  for (int64_t i = 0, o = 0; i < r; ++i) {
    if (i == dim) continue;
    d.offset_dims.push_back(o + (i > dim ? 1 : 0));
    ++o;
  }
  NodeId g = b.Gather(x.value, idx, d, slice);
  return CheckOutputs(b, c, {b.Reshape(g, out.sizes)});
}

// Advanced indexing plan shared by index.Tensor and index_put: the indexed
// dims' index tensors broadcast to B, wrapped (negative + size), stacked into
// coords [B..., k]; x is permuted so indexed dims come first.
struct AdvIndex {
  std::vector<int64_t> indexed, rest;  // dims of x
  std::vector<int64_t> bshape;         // broadcast index shape B
  std::vector<int64_t> perm;           // x -> [indexed..., rest...]
  NodeId coords = kInvalidNode;        // [B..., k] s64
  bool adjacent = true;                // indexed dims consecutive
  int64_t first = 0;                   // first indexed dim
};

StatusOr<AdvIndex> PlanIndex(const AtenCall& c, const TensorArg& x,
                             const std::vector<std::optional<TensorArg>>& idx) {
  AdvIndex p;
  int64_t r = Rank(x.sizes);
  if (static_cast<int64_t>(idx.size()) > r) return InvalidArgument(c.op, ": too many indices");
  std::vector<int64_t> bshape;
  for (size_t i = 0; i < idx.size(); ++i) {
    if (!idx[i]) continue;
    DType t = idx[i]->dtype;
    if (t == DType::kPred || t == DType::kU8)
      return Declined("boolean-mask indexing (data-dependent shape)");
    if (!IsInteger(t)) return InvalidArgument(c.op, ": index tensors must be integers");
    p.indexed.push_back(static_cast<int64_t>(i));
    auto s = BroadcastShapes(bshape, idx[i]->sizes);
    if (!s) return InvalidArgument(c.op, ": index shapes do not broadcast");
    bshape = *s;
  }
  if (p.indexed.empty()) return Declined("no index tensors");
  for (int64_t i = 0; i < r; ++i)
    if (std::find(p.indexed.begin(), p.indexed.end(), i) == p.indexed.end()) p.rest.push_back(i);
  p.bshape = bshape;
  p.first = p.indexed.front();
  for (size_t i = 1; i < p.indexed.size(); ++i) p.adjacent &= p.indexed[i] == p.indexed[i - 1] + 1;
  p.perm = p.indexed;
  p.perm.insert(p.perm.end(), p.rest.begin(), p.rest.end());
  return p;
}

NodeId BuildCoords(GraphBuilder& b, AdvIndex& p, const TensorArg& x,
                   const std::vector<std::optional<TensorArg>>& idx) {
  std::vector<int64_t> one = p.bshape;
  one.push_back(1);
  std::vector<NodeId> parts;
  for (int64_t d : p.indexed) {
    const TensorArg& t = *idx[d];
    NodeId v = BroadcastTo(b, ConvertTo(b, t.value, DType::kS64), t.sizes, p.bshape);
    NodeId size = Splat(b, DType::kS64, static_cast<double>(x.sizes[d]), p.bshape);
    NodeId neg = b.Compare(v, Splat(b, DType::kS64, 0, p.bshape), ComparisonKind::kLt);
    v = b.Select(neg, b.Add(v, size), v);
    parts.push_back(b.Reshape(v, one));
  }
  p.coords =
      parts.size() == 1 ? parts[0] : b.Concatenate(parts, static_cast<int64_t>(p.bshape.size()));
  return p.coords;
}

NodeId PermuteIf(GraphBuilder& b, NodeId x, const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return b.Transpose(x, perm);
  return x;
}

// Gather/scatter dims for the permuted x: the first k dims indexed, the rest
// windows.
GatherDims WindowGatherDims(int64_t k, int64_t nb, int64_t nrest) {
  GatherDims d;
  for (int64_t i = 0; i < k; ++i) {
    d.collapsed_slice_dims.push_back(i);
    d.start_index_map.push_back(i);
  }
  for (int64_t i = 0; i < nrest; ++i) d.offset_dims.push_back(nb + i);
  d.index_vector_dim = nb;
  return d;
}

// Result of the gather is [B..., rest...]; eager puts B at the first indexed
// dim when the indexed dims are adjacent.
std::vector<int64_t> ResultPerm(const AdvIndex& p) {
  int64_t nb = Rank(p.bshape), nrest = Rank(p.rest);
  std::vector<int64_t> perm(nb + nrest);
  std::iota(perm.begin(), perm.end(), 0);
  if (!p.adjacent || p.first == 0) return perm;
  // rest dims before `first` come first, then B, then the remaining rest dims.
  std::vector<int64_t> r;
  int64_t before = p.first;  // rest dims with index < first are exactly dims 0..first-1
  for (int64_t i = 0; i < before; ++i) r.push_back(nb + i);
  for (int64_t i = 0; i < nb; ++i) r.push_back(i);
  for (int64_t i = before; i < nrest; ++i) r.push_back(nb + i);
  return r;
}

// index.Tensor(self, Tensor?[] indices)
LowerResult LowerIndex(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(auto idx, TensorListAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(AdvIndex p, PlanIndex(c, x, idx));
  const OutputMeta& out = c.outputs.at(0);
  if (Numel(out.sizes) == 0 || Numel(p.bshape) == 0)
    return CheckOutputs(b, c, {Splat(b, x.dtype, 0, out.sizes)});
  BuildCoords(b, p, x, idx);
  NodeId xp = PermuteIf(b, x.value, p.perm);
  int64_t k = Rank(p.indexed), nb = Rank(p.bshape), nrest = Rank(p.rest);
  std::vector<int64_t> slice(Rank(x.sizes), 1);
  for (int64_t i = 0; i < nrest; ++i) slice[k + i] = x.sizes[p.rest[i]];
  NodeId g = b.Gather(xp, p.coords, WindowGatherDims(k, nb, nrest), slice);
  return CheckOutputs(b, c, {PermuteIf(b, g, ResultPerm(p))});
}

// index_put(self, Tensor?[] indices, values, accumulate=False)
LowerResult LowerIndexPut(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(auto idx, TensorListAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(TensorArg values, TensorAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(bool accumulate, BoolAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(AdvIndex p, PlanIndex(c, x, idx));
  if (accumulate && x.dtype == DType::kPred) return Declined("accumulate into bool");
  if (Numel(p.bshape) == 0 || Numel(x.sizes) == 0) return CheckOutputs(b, c, {x.value});
  int64_t k = Rank(p.indexed), nb = Rank(p.bshape), nrest = Rank(p.rest), r = Rank(x.sizes);
  // Updates in eager's result layout, broadcast from values.
  std::vector<int64_t> gathered = p.bshape;  // [B..., rest...]
  for (int64_t d : p.rest) gathered.push_back(x.sizes[d]);
  std::vector<int64_t> rperm = ResultPerm(p);
  std::vector<int64_t> eager_layout(rperm.size());
  for (size_t i = 0; i < rperm.size(); ++i) eager_layout[i] = gathered[rperm[i]];
  if (!BroadcastShapes(values.sizes, eager_layout))
    return InvalidArgument(c.op, ": values do not broadcast");
  BuildCoords(b, p, x, idx);
  NodeId upd = BroadcastTo(b, ConvertTo(b, values.value, x.dtype), values.sizes, eager_layout);
  std::vector<int64_t> inv(rperm.size());
  for (size_t i = 0; i < rperm.size(); ++i) inv[rperm[i]] = static_cast<int64_t>(i);
  upd = PermuteIf(b, upd, inv);  // -> [B..., rest...]
  NodeId xp = PermuteIf(b, x.value, p.perm);
  ScatterDims d;
  for (int64_t i = 0; i < k; ++i) {
    d.inserted_window_dims.push_back(i);
    d.scatter_dims_to_operand_dims.push_back(i);
  }
  for (int64_t i = 0; i < nrest; ++i) d.update_window_dims.push_back(nb + i);
  d.index_vector_dim = nb;
  NodeId s = b.Scatter(xp, p.coords, upd, d, accumulate ? ReduceKind::kAdd : ReduceKind::kAssign);
  std::vector<int64_t> back(r);
  for (int64_t i = 0; i < r; ++i) back[p.perm[i]] = i;
  return CheckOutputs(b, c, {PermuteIf(b, s, back)});
}

// embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False)
LowerResult LowerEmbedding(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg w, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg idx, TensorAt(c, 1));
  if (Rank(w.sizes) != 2) return Declined("embedding weight must be 2-d");
  const OutputMeta& out = c.outputs.at(0);
  int64_t n = Numel(idx.sizes), dim = w.sizes[1];
  if (n == 0) return CheckOutputs(b, c, {Splat(b, w.dtype, 0, out.sizes)});
  NodeId i = b.Reshape(ConvertTo(b, idx.value, DType::kS64), {n, 1});
  GatherDims d;
  d.offset_dims = {1};
  d.collapsed_slice_dims = {0};
  d.start_index_map = {0};
  d.index_vector_dim = 1;
  NodeId g = b.Gather(w.value, i, d, {1, dim});
  return CheckOutputs(b, c, {b.Reshape(g, out.sizes)});
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
//   scale_grad_by_freq): rows summed per index, padding_idx rows left zero.
LowerResult LowerEmbeddingBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg g, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg idx, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(int64_t num_weights, IntAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(int64_t padding_idx, IntAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(bool by_freq, BoolAt(c, 4));
  if (by_freq) return Declined("scale_grad_by_freq");
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("non-floating gradient");
  int64_t n = Numel(idx.sizes);
  int64_t dim = out.sizes.size() == 2 ? out.sizes[1] : 0;
  DType t = ComputeType(out.dtype);
  NodeId zeros = Splat(b, t, 0, {num_weights, dim});
  if (n == 0) return CheckOutputs(b, c, {Finish(b, zeros, out)});
  NodeId i = b.Reshape(ConvertTo(b, idx.value, DType::kS64), {n});
  NodeId gv = b.Reshape(ConvertTo(b, g.value, t), {n, dim});
  NodeId pad = b.Compare(i, Splat(b, DType::kS64, static_cast<double>(padding_idx), {n}),
                         ComparisonKind::kEq);
  gv = b.Select(b.BroadcastInDim(pad, {n, dim}, {0}), Splat(b, t, 0, {n, dim}), gv);
  ScatterDims d;
  d.update_window_dims = {1};
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  NodeId s = b.Scatter(zeros, b.Reshape(i, {n, 1}), gv, d, ReduceKind::kAdd);
  return CheckOutputs(b, c, {Finish(b, s, out)});
}

// index_add(self, dim, index, source, *, alpha=1): self with alpha * the
// slices of source added at index along dim (duplicates accumulate).
LowerResult LowerIndexAdd(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(TensorArg index, TensorAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(TensorArg src, TensorAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(auto alpha, OptValAt(c, 4));
  if (x.dtype == DType::kPred) return Declined("index_add of bool");
  int64_t r = Rank(x.sizes);
  if (r == 0 || Rank(src.sizes) != r) return Declined("index_add of 0-d tensors");
  dim = WrapDim(dim, r);
  int64_t n = Numel(index.sizes);
  if (n == 0 || Numel(x.sizes) == 0) return CheckOutputs(b, c, {x.value});
  DType t = ComputeType(x.dtype);
  NodeId upd = ConvertTo(b, ConvertTo(b, src.value, x.dtype), t);
  if (alpha) {
    Val a = *alpha;
    a.tier = PromoTier::kWrapped;
    upd = b.Multiply(upd, Prepare(b, a, x.dtype, t, src.sizes));
  }
  ScatterDims d;
  for (int64_t i = 0; i < r; ++i)
    if (i != dim) d.update_window_dims.push_back(i);
  d.inserted_window_dims = {dim};
  d.scatter_dims_to_operand_dims = {dim};
  d.index_vector_dim = 1;
  NodeId idx = b.Reshape(ConvertTo(b, index.value, DType::kS64), {n, 1});
  NodeId s = b.Scatter(ConvertTo(b, x.value, t), idx, upd, d, ReduceKind::kAdd);
  return CheckOutputs(b, c, {Finish(b, s, c.outputs.at(0))});
}

}  // namespace

void RegisterIndexing(LoweringTable& t) {
  t.Add("aten::index_add", LowerIndexAdd);
  t.Add("aten::gather", LowerGather);
  t.Add("aten::scatter.src", LowerScatter<false>);
  t.Add("aten::scatter.value", LowerScatter<false>);
  t.Add("aten::scatter_add", LowerScatter<true>);
  t.Add("aten::index_select", LowerIndexSelect);
  t.Add("aten::index.Tensor", LowerIndex);
  t.Add("aten::_unsafe_index.Tensor", LowerIndex);
  t.Add("aten::index_put", LowerIndexPut);
  t.Add("aten::_unsafe_index_put", LowerIndexPut);
  t.Add("aten::embedding", LowerEmbedding);
  t.Add("aten::embedding_dense_backward", LowerEmbeddingBackward);
}

}  // namespace ember::lowering
