// Reference evaluation of the data-movement ops: broadcast-in-dim, reshape,
// transpose, slice, dynamic-slice, dynamic-update-slice, concatenate, pad,
// reverse. They move elements without looking at them, so every dtype
// (pred, complex, bf16, ...) is handled by element size through StridedCopy.
#include <algorithm>

#include "ember/ir/attributes.h"
#include "eval/eval_util.h"
#include "eval/ops.h"

namespace ember::eval {
namespace {

int ElemSize(const Shape& s) { return DTypeSize(s.dtype()); }

Status CheckRank(const Node& n, const std::vector<int64_t>& v, const char* key, int rank) {
  if (static_cast<int>(v.size()) != rank) {
    return NodeInvalid(n, "attribute ", key, " has ", v.size(), " entries, expected ", rank);
  }
  return OkStatus();
}

// result dim dimensions[i] takes operand dim i (operand dim size 1 broadcasts).
StatusOr<Literal> BroadcastInDim(const Node& n, const Literal& x) {
  const auto& map = attr::Dimensions(n);
  EMBER_RETURN_IF_ERROR(CheckRank(n, map, "dimensions", x.shape().rank()));
  Literal out(n.shape);
  std::vector<int64_t> src_strides(n.shape.rank(), 0);
  std::vector<int64_t> xs = x.shape().strides();
  for (int i = 0; i < x.shape().rank(); ++i) {
    int64_t d = map[i];
    if (d < 0 || d >= n.shape.rank()) return NodeInvalid(n, "bad broadcast dimension ", d);
    if (x.shape().dim(i) != 1) src_strides[d] = xs[i];
  }
  StridedCopy(ElemSize(n.shape), n.shape.dims(), Bytes(x), 0, src_strides, Bytes(out), 0,
              n.shape.strides());
  return out;
}

StatusOr<Literal> Reshape(const Node& n, const Literal& x) {
  if (x.num_elements() != n.shape.num_elements()) {
    return NodeInvalid(n, "reshape of ", x.shape().ToString(), " to ", n.shape.ToString());
  }
  Literal out(n.shape);
  if (out.size_bytes() > 0) std::memcpy(out.data(), x.data(), out.size_bytes());
  return out;
}

// result dim i is operand dim perm[i].
StatusOr<Literal> Transpose(const Node& n, const Literal& x) {
  const auto& perm = attr::Dimensions(n);
  EMBER_RETURN_IF_ERROR(CheckRank(n, perm, "dimensions", x.shape().rank()));
  std::vector<int64_t> xs = x.shape().strides();
  std::vector<int64_t> src_strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) src_strides[i] = xs[perm[i]];
  Literal out(n.shape);
  StridedCopy(ElemSize(n.shape), n.shape.dims(), Bytes(x), 0, src_strides, Bytes(out), 0,
              n.shape.strides());
  return out;
}

StatusOr<Literal> Slice(const Node& n, const Literal& x) {
  const int rank = x.shape().rank();
  const auto& start = attr::Start(n);
  EMBER_RETURN_IF_ERROR(CheckRank(n, start, "start", rank));
  EMBER_ASSIGN_OR_RETURN(auto stride, GetIntsOr(n, attr::Stride, rank, 1));
  std::vector<int64_t> xs = x.shape().strides();
  std::vector<int64_t> src_strides(rank);
  int64_t base = 0;
  for (int d = 0; d < rank; ++d) {
    base += start[d] * xs[d];
    src_strides[d] = stride[d] * xs[d];
  }
  Literal out(n.shape);
  StridedCopy(ElemSize(n.shape), n.shape.dims(), Bytes(x), base, src_strides, Bytes(out), 0,
              n.shape.strides());
  return out;
}

// Reads the start indices in[first..first+rank) and checks each lies in
// [0, dim - size[d]] (the slice must fit: never clamped).
StatusOr<std::vector<int64_t>> ReadStarts(const Node& n, const Operands& in, size_t first,
                                          const Shape& x, const std::vector<int64_t>& size) {
  const int rank = x.rank();
  if (in.size() != first + rank) {
    return NodeInvalid(n, "expected ", rank, " start indices, got ",
                       static_cast<int64_t>(in.size()) - static_cast<int64_t>(first));
  }
  std::vector<int64_t> starts(rank);
  for (int d = 0; d < rank; ++d) {
    const Literal& s = *in[first + d];
    if (!IsInteger(s.dtype()) || s.num_elements() != 1) {
      return NodeInvalid(n, "start index ", d, " must be an integer scalar, got ",
                         s.shape().ToString());
    }
    bool huge = false;
    int64_t v = LoadIndex(s.dtype(), s.data(), 0, &huge);
    int64_t hi = x.dim(d) - size[d];
    if (huge || v < 0 || v > hi) {
      std::string shown = huge ? std::to_string(static_cast<uint64_t>(v)) : std::to_string(v);
      return NodeOutOfRange(n, "start index ", shown, " for dimension ", d, " out of range [0, ",
                            hi, "] (dimension size ", x.dim(d), ", slice size ", size[d], ")");
    }
    starts[d] = v;
  }
  return starts;
}

StatusOr<Literal> DynamicSlice(const Node& n, const Operands& in) {
  const Literal& x = *in[0];
  const int rank = x.shape().rank();
  const auto& sizes = attr::SliceSizes(n);
  EMBER_RETURN_IF_ERROR(CheckRank(n, sizes, "slice_sizes", rank));
  EMBER_ASSIGN_OR_RETURN(auto starts, ReadStarts(n, in, 1, x.shape(), sizes));
  std::vector<int64_t> xs = x.shape().strides();
  int64_t base = 0;
  for (int d = 0; d < rank; ++d) base += starts[d] * xs[d];
  Literal out(n.shape);
  StridedCopy(ElemSize(n.shape), n.shape.dims(), Bytes(x), base, xs, Bytes(out), 0,
              n.shape.strides());
  return out;
}

StatusOr<Literal> DynamicUpdateSlice(const Node& n, const Operands& in) {
  if (in.size() < 2) return NodeInvalid(n, "expected operand and update");
  const Literal& x = *in[0];
  const Literal& upd = *in[1];
  if (upd.shape().rank() != x.shape().rank() || upd.dtype() != x.dtype()) {
    return NodeInvalid(n, "update ", upd.shape().ToString(), " does not match operand ",
                       x.shape().ToString());
  }
  EMBER_ASSIGN_OR_RETURN(auto starts, ReadStarts(n, in, 2, x.shape(), upd.shape().dims()));
  Literal out = x;
  std::vector<int64_t> os = x.shape().strides();
  int64_t base = 0;
  for (int d = 0; d < x.shape().rank(); ++d) base += starts[d] * os[d];
  StridedCopy(ElemSize(n.shape), upd.shape().dims(), Bytes(upd), 0, upd.shape().strides(),
              Bytes(out), base, os);
  return out;
}

StatusOr<Literal> Concatenate(const Node& n, const Operands& in) {
  const int64_t dim = attr::Dimension(n);
  if (dim < 0 || dim >= n.shape.rank()) return NodeInvalid(n, "bad dimension ", dim);
  Literal out(n.shape);
  std::vector<int64_t> os = n.shape.strides();
  int64_t offset = 0;
  for (const Literal* x : in) {
    if (offset + x->shape().dim(static_cast<int>(dim)) > n.shape.dim(static_cast<int>(dim))) {
      return NodeInvalid(n, "operands exceed the result along dimension ", dim);
    }
    StridedCopy(ElemSize(n.shape), x->shape().dims(), Bytes(*x), 0, x->shape().strides(),
                Bytes(out), offset * os[dim], os);
    offset += x->shape().dim(static_cast<int>(dim));
  }
  return out;
}

// Operand element i of dim d lands at low[d] + i * (interior[d] + 1); positions
// outside the result (negative low/high crop) are dropped.
StatusOr<Literal> Pad(const Node& n, const Literal& x, const Literal& value) {
  const int rank = x.shape().rank();
  const auto& low = attr::Low(n);
  const auto& high = attr::High(n);
  EMBER_RETURN_IF_ERROR(CheckRank(n, low, "low", rank));
  EMBER_RETURN_IF_ERROR(CheckRank(n, high, "high", rank));
  EMBER_ASSIGN_OR_RETURN(auto interior, GetIntsOr(n, attr::Interior, rank, 0));
  if (value.num_elements() != 1 || value.dtype() != x.dtype()) {
    return NodeInvalid(n, "padding value must be a scalar of the operand's dtype");
  }
  Literal out(n.shape);
  const int es = ElemSize(n.shape);
  {
    // Fill with the padding value.
    uint8_t* o = Bytes(out);
    for (int64_t i = 0, e = out.num_elements(); i < e; ++i)
      std::memcpy(o + i * es, value.data(), es);
  }
  std::vector<int64_t> xs = x.shape().strides(), os = n.shape.strides();
  std::vector<int64_t> count(rank), dst_strides(rank);
  int64_t src_base = 0, dst_base = 0;
  for (int d = 0; d < rank; ++d) {
    const int64_t step = interior[d] + 1;
    const int64_t size = x.shape().dim(d), out_size = n.shape.dim(d);
    if (step <= 0) return NodeInvalid(n, "negative interior padding");
    // first i with low + i*step >= 0; last i with low + i*step < out_size
    int64_t first = low[d] >= 0 ? 0 : (-low[d] + step - 1) / step;
    int64_t last = out_size - 1 - low[d] < 0 ? -1 : (out_size - 1 - low[d]) / step;
    last = std::min(last, size - 1);
    count[d] = std::max<int64_t>(0, last - first + 1);
    src_base += first * xs[d];
    dst_base += (low[d] + first * step) * os[d];
    dst_strides[d] = step * os[d];
  }
  if (NumElements(count) > 0) {
    StridedCopy(es, count, Bytes(x), src_base, xs, Bytes(out), dst_base, dst_strides);
  }
  return out;
}

StatusOr<Literal> Reverse(const Node& n, const Literal& x) {
  const int rank = x.shape().rank();
  std::vector<int64_t> src_strides = x.shape().strides();
  int64_t base = 0;
  std::vector<bool> rev(rank, false);
  for (int64_t d : attr::Dimensions(n)) {
    if (d < 0 || d >= rank) return NodeInvalid(n, "bad dimension ", d);
    rev[d] = !rev[d];
  }
  for (int d = 0; d < rank; ++d) {
    if (!rev[d] || x.shape().dim(d) == 0) continue;
    base += (x.shape().dim(d) - 1) * src_strides[d];
    src_strides[d] = -src_strides[d];
  }
  Literal out(n.shape);
  StridedCopy(ElemSize(n.shape), n.shape.dims(), Bytes(x), base, src_strides, Bytes(out), 0,
              n.shape.strides());
  return out;
}

}  // namespace

StatusOr<Literal> EvalDataMovement(const Node& n, const Operands& in) {
  if (in.empty()) return NodeInvalid(n, "missing operands");
  switch (n.op) {
    case OpKind::kBroadcastInDim:
      return BroadcastInDim(n, *in[0]);
    case OpKind::kReshape:
      return Reshape(n, *in[0]);
    case OpKind::kTranspose:
      return Transpose(n, *in[0]);
    case OpKind::kSlice:
      return Slice(n, *in[0]);
    case OpKind::kDynamicSlice:
      return DynamicSlice(n, in);
    case OpKind::kDynamicUpdateSlice:
      return DynamicUpdateSlice(n, in);
    case OpKind::kConcatenate:
      return Concatenate(n, in);
    case OpKind::kPad:
      if (in.size() != 2) return NodeInvalid(n, "expected operand and padding value");
      return Pad(n, *in[0], *in[1]);
    case OpKind::kReverse:
      return Reverse(n, *in[0]);
    default:
      return EMBER_INTERNAL_ERROR(NodeLabel(n), " is not a data-movement op");
  }
}

}  // namespace ember::eval
