// Reference evaluation of gather and scatter, with XLA's general dimension
// numbers (https://openxla.org/xla/operation_semantics#gather, #scatter)
// except that an out-of-range start index is an OutOfRange error naming the
// op, node, index and valid range (XLA clamps or skips; PyTorch raises).
// Scatter applies updates in row-major order of the update index space, so
// `assign` keeps the last of duplicate indices and `add` accumulates them.
// Indices may be any integer dtype.
#include <algorithm>

#include "ember/ir/attributes.h"
#include "eval/eval_util.h"
#include "eval/ops.h"

namespace ember::eval {
namespace {

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The batch ("scatter") index space of `indices`: its dims without
// index_vector_dim (which may equal the rank: then each index vector is a
// scalar). Returns, for every batch position in row-major order, the
// operand-space start vector, checked so that [start, start + window) fits.
StatusOr<std::vector<int64_t>> ReadStartOffsets(const Node& n, const Literal& indices,
                                                int64_t index_vector_dim,
                                                const std::vector<int64_t>& index_to_operand_dim,
                                                const Shape& operand,
                                                const std::vector<int64_t>& window,
                                                std::vector<int64_t>* batch_dims_out) {
  const Shape& is = indices.shape();
  const int irank = is.rank();
  if (!IsInteger(indices.dtype())) {
    return NodeInvalid(n, "indices must be integers, got ", is.ToString());
  }
  if (index_vector_dim < 0 || index_vector_dim > irank) {
    return NodeInvalid(n, "bad index_vector_dim ", index_vector_dim);
  }
  const int64_t vec_len =
      index_vector_dim == irank ? 1 : is.dim(static_cast<int>(index_vector_dim));
  if (vec_len != static_cast<int64_t>(index_to_operand_dim.size())) {
    return NodeInvalid(n, "index vector has ", vec_len, " entries but ",
                       index_to_operand_dim.size(), " operand dims are indexed");
  }
  for (int64_t d : index_to_operand_dim) {
    if (d < 0 || d >= operand.rank()) return NodeInvalid(n, "bad indexed operand dim ", d);
  }
  std::vector<int64_t> batch_dims, batch_strides;
  const std::vector<int64_t> istr = is.strides();
  for (int d = 0; d < irank; ++d) {
    if (d == index_vector_dim) continue;
    batch_dims.push_back(is.dim(d));
    batch_strides.push_back(istr[d]);
  }
  const int64_t vec_stride = index_vector_dim == irank ? 0 : istr[index_vector_dim];
  const std::vector<int64_t> ostr = operand.strides();
  const int64_t nbatch = NumElements(batch_dims);
  std::vector<int64_t> offsets(static_cast<size_t>(nbatch));
  std::vector<int64_t> bidx(batch_dims.size(), 0);
  for (int64_t b = 0; b < nbatch; ++b) {
    int64_t ipos = 0;
    for (size_t k = 0; k < bidx.size(); ++k) ipos += bidx[k] * batch_strides[k];
    int64_t off = 0;
    for (int64_t k = 0; k < vec_len; ++k) {
      bool huge = false;
      int64_t v = LoadIndex(indices.dtype(), indices.data(), ipos + k * vec_stride, &huge);
      const int d = static_cast<int>(index_to_operand_dim[k]);
      const int64_t limit = operand.dim(d) - window[d] + 1;  // valid starts: [0, limit)
      if (huge || v < 0 || v >= limit) {
        std::string shown = huge ? std::to_string(static_cast<uint64_t>(v)) : std::to_string(v);
        std::string where;
        for (size_t j = 0; j < bidx.size(); ++j) where += (j ? "," : "") + std::to_string(bidx[j]);
        return NodeOutOfRange(n, "index ", shown, " out of range [0, ", std::max<int64_t>(limit, 0),
                              ") for operand dimension ", d, " of size ", operand.dim(d),
                              " (window size ", window[d], ", at index position [", where, "])");
      }
      off += v * ostr[d];
    }
    offsets[static_cast<size_t>(b)] = off;
    NextIndex(batch_dims, bidx);
  }
  if (batch_dims_out) *batch_dims_out = batch_dims;
  return offsets;
}

StatusOr<Literal> Gather(const Node& n, const Literal& operand, const Literal& indices) {
  const auto& offset_dims = attr::OffsetDims(n);
  const auto& collapsed = attr::CollapsedSliceDims(n);
  const auto& start_index_map = attr::StartIndexMap(n);
  const int64_t index_vector_dim = attr::IndexVectorDim(n);
  const auto& slice_sizes = attr::SliceSizes(n);
  const Shape& os = operand.shape();
  if (static_cast<int>(slice_sizes.size()) != os.rank()) {
    return NodeInvalid(n, "slice_sizes has ", slice_sizes.size(), " entries, operand rank ",
                       os.rank());
  }
  for (int d = 0; d < os.rank(); ++d) {
    if (slice_sizes[d] < 0 || slice_sizes[d] > os.dim(d)) {
      return NodeInvalid(n, "slice size ", slice_sizes[d], " does not fit operand dim ", d);
    }
  }
  EMBER_ASSIGN_OR_RETURN(auto starts, ReadStartOffsets(n, indices, index_vector_dim,
                                                       start_index_map, os, slice_sizes, nullptr));
  // Output dims: batch dims (not in offset_dims) in order, offset dims (the
  // operand's non-collapsed slice dims, in order) at offset_dims positions.
  const Shape& rs = n.shape;
  const int rrank = rs.rank();
  std::vector<int64_t> window_operand_dims;  // operand dim of each offset dim
  for (int d = 0; d < os.rank(); ++d) {
    if (!Contains(collapsed, d)) window_operand_dims.push_back(d);
  }
  if (window_operand_dims.size() != offset_dims.size()) {
    return NodeInvalid(n, "offset_dims has ", offset_dims.size(), " entries, expected ",
                       window_operand_dims.size());
  }
  const std::vector<int64_t> ostr = os.strides();
  // Per result dim: which batch dim (stride into `starts`) or which operand
  // dim it walks.
  std::vector<int64_t> batch_stride_of_dim(rrank, 0), operand_stride_of_dim(rrank, 0);
  {
    std::vector<int64_t> batch_result_dims;
    for (int d = 0; d < rrank; ++d) {
      if (!Contains(offset_dims, d)) batch_result_dims.push_back(d);
    }
    std::vector<int64_t> bdims;
    for (int64_t d : batch_result_dims) bdims.push_back(rs.dim(static_cast<int>(d)));
    if (NumElements(bdims) != static_cast<int64_t>(starts.size())) {
      return NodeInvalid(n, "result batch dims do not match the indices");
    }
    std::vector<int64_t> bstr = RowMajorStrides(bdims);
    for (size_t k = 0; k < batch_result_dims.size(); ++k)
      batch_stride_of_dim[batch_result_dims[k]] = bstr[k];
    for (size_t k = 0; k < offset_dims.size(); ++k) {
      const int64_t rd = offset_dims[k];
      if (rd < 0 || rd >= rrank) return NodeInvalid(n, "bad offset dim ", rd);
      operand_stride_of_dim[rd] = ostr[window_operand_dims[k]];
    }
  }
  Literal out(rs);
  const int es = DTypeSize(rs.dtype());
  const uint8_t* src = Bytes(operand);
  uint8_t* dst = Bytes(out);
  const int64_t total = out.num_elements();
  std::vector<int64_t> idx(rrank, 0);
  for (int64_t i = 0; i < total; ++i) {
    int64_t b = 0, o = 0;
    for (int d = 0; d < rrank; ++d) {
      b += idx[d] * batch_stride_of_dim[d];
      o += idx[d] * operand_stride_of_dim[d];
    }
    std::memcpy(dst + i * es, src + (starts[b] + o) * es, es);
    NextIndex(rs.dims(), idx);
  }
  return out;
}

template <typename A>
void ScatterCombine(ReduceKind k, uint8_t* out, int64_t oi, const uint8_t* upd, int64_t ui) {
  A::Store(out, oi, Combine<typename A::Acc>(k, A::Load(out, oi), A::Load(upd, ui)));
}

StatusOr<Literal> Scatter(const Node& n, const Literal& operand, const Literal& indices,
                          const Literal& updates) {
  const auto& update_window_dims = attr::UpdateWindowDims(n);
  const auto& inserted = attr::InsertedWindowDims(n);
  const auto& to_operand = attr::ScatterDimsToOperandDims(n);
  const int64_t index_vector_dim = attr::IndexVectorDim(n);
  EMBER_ASSIGN_OR_RETURN(ReduceKind kind, GetReduceKind(n));
  const Shape& os = operand.shape();
  const Shape& us = updates.shape();
  if (updates.dtype() != operand.dtype())
    return NodeInvalid(n, "updates dtype differs from operand");
  // Window dims of the operand (not inserted) in order, walked by update_window_dims.
  std::vector<int64_t> window_operand_dims;
  for (int d = 0; d < os.rank(); ++d) {
    if (!Contains(inserted, d)) window_operand_dims.push_back(d);
  }
  if (window_operand_dims.size() != update_window_dims.size()) {
    return NodeInvalid(n, "update_window_dims has ", update_window_dims.size(),
                       " entries, expected ", window_operand_dims.size());
  }
  std::vector<int64_t> window(os.rank(), 1);
  for (size_t k = 0; k < update_window_dims.size(); ++k) {
    const int64_t ud = update_window_dims[k];
    if (ud < 0 || ud >= us.rank()) return NodeInvalid(n, "bad update window dim ", ud);
    window[window_operand_dims[k]] = us.dim(static_cast<int>(ud));
    if (us.dim(static_cast<int>(ud)) > os.dim(static_cast<int>(window_operand_dims[k]))) {
      return NodeInvalid(n, "update window dim ", ud, " exceeds the operand");
    }
  }
  EMBER_ASSIGN_OR_RETURN(
      auto starts, ReadStartOffsets(n, indices, index_vector_dim, to_operand, os, window, nullptr));
  const std::vector<int64_t> ostr = os.strides();
  const int urank = us.rank();
  std::vector<int64_t> scatter_stride_of_dim(urank, 0), operand_stride_of_dim(urank, 0);
  {
    std::vector<int64_t> scatter_update_dims, sdims;
    for (int d = 0; d < urank; ++d) {
      if (!Contains(update_window_dims, d)) {
        scatter_update_dims.push_back(d);
        sdims.push_back(us.dim(d));
      }
    }
    if (NumElements(sdims) != static_cast<int64_t>(starts.size())) {
      return NodeInvalid(n, "update scatter dims do not match the indices");
    }
    std::vector<int64_t> sstr = RowMajorStrides(sdims);
    for (size_t k = 0; k < scatter_update_dims.size(); ++k)
      scatter_stride_of_dim[scatter_update_dims[k]] = sstr[k];
    for (size_t k = 0; k < update_window_dims.size(); ++k) {
      operand_stride_of_dim[update_window_dims[k]] = ostr[window_operand_dims[k]];
    }
  }
  Literal out = operand;
  uint8_t* dst = Bytes(out);
  const uint8_t* src = Bytes(updates);
  const int es = DTypeSize(os.dtype());
  const int64_t total = updates.num_elements();
  bool typed_ok = true;
  if (kind != ReduceKind::kAssign) {
    VisitRealDType(os.dtype(), [&](auto access) {
      using A = decltype(access);
      typed_ok = CombinerSupports<typename A::Acc>(kind);
    });
    if (IsComplex(os.dtype())) typed_ok = false;
    if (!typed_ok) {
      return NodeInvalid(n, "to_apply ", ReduceKindName(kind), " is not defined on ",
                         DTypeName(os.dtype()));
    }
  }
  std::vector<int64_t> idx(urank, 0);
  auto apply = [&](auto access) {
    using A = decltype(access);
    for (int64_t i = 0; i < total; ++i) {
      int64_t s = 0, o = 0;
      for (int d = 0; d < urank; ++d) {
        s += idx[d] * scatter_stride_of_dim[d];
        o += idx[d] * operand_stride_of_dim[d];
      }
      ScatterCombine<A>(kind, dst, starts[s] + o, src, i);
      NextIndex(us.dims(), idx);
    }
  };
  if (kind == ReduceKind::kAssign) {
    for (int64_t i = 0; i < total; ++i) {
      int64_t s = 0, o = 0;
      for (int d = 0; d < urank; ++d) {
        s += idx[d] * scatter_stride_of_dim[d];
        o += idx[d] * operand_stride_of_dim[d];
      }
      std::memcpy(dst + (starts[s] + o) * es, src + i * es, es);
      NextIndex(us.dims(), idx);
    }
  } else {
    VisitRealDType(os.dtype(), apply);
  }
  return out;
}

}  // namespace

StatusOr<Literal> EvalIndexing(const Node& n, const Operands& in) {
  switch (n.op) {
    case OpKind::kGather:
      if (in.size() != 2) return NodeInvalid(n, "expected operand and indices");
      return Gather(n, *in[0], *in[1]);
    case OpKind::kScatter:
      if (in.size() != 3) return NodeInvalid(n, "expected operand, indices and updates");
      return Scatter(n, *in[0], *in[1], *in[2]);
    default:
      return EMBER_INTERNAL_ERROR(NodeLabel(n), " is not an indexing op");
  }
}

}  // namespace ember::eval
