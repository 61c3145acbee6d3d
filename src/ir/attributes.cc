#include "ember/ir/attributes.h"

namespace ember {

DotDims DotDimsOf(const Node& n) {
  return DotDims{attr::LhsBatchDims(n), attr::RhsBatchDims(n), attr::LhsContractingDims(n),
                 attr::RhsContractingDims(n)};
}

GatherDims GatherDimsOf(const Node& n) {
  GatherDims d;
  d.offset_dims = attr::OffsetDims(n);
  d.collapsed_slice_dims = attr::CollapsedSliceDims(n);
  d.start_index_map = attr::StartIndexMap(n);
  d.index_vector_dim = attr::IndexVectorDim(n);
  return d;
}

ScatterDims ScatterDimsOf(const Node& n) {
  ScatterDims d;
  d.update_window_dims = attr::UpdateWindowDims(n);
  d.inserted_window_dims = attr::InsertedWindowDims(n);
  d.scatter_dims_to_operand_dims = attr::ScatterDimsToOperandDims(n);
  d.index_vector_dim = attr::IndexVectorDim(n);
  return d;
}

ConvConfig ConvConfigOf(const Node& n) {
  ConvConfig c;
  c.window_strides = attr::WindowStrides(n);
  c.padding_low = attr::PaddingLow(n);
  c.padding_high = attr::PaddingHigh(n);
  c.lhs_dilation = attr::LhsDilation(n);
  c.rhs_dilation = attr::RhsDilation(n);
  c.feature_group_count = attr::FeatureGroupCount(n, 1);
  return c;
}

}  // namespace ember
