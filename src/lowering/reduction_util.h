// Reduction helpers shared by the reduction, norm, loss and softmax lowerings.
#pragma once

#include <optional>
#include <vector>

#include "ember/ir/builder.h"

namespace ember::lowering {

// Sorted, wrapped, deduplicated reduction dims; None or [] means all dims.
std::vector<int64_t> ReductionDims(const std::optional<std::vector<int64_t>>& dim, int64_t rank);
// `sizes` with each of `dims` set to 1 (keepdim sizes).
std::vector<int64_t> KeptSizes(const std::vector<int64_t>& sizes, const std::vector<int64_t>& dims);
// Number of elements reduced over.
int64_t CountOver(const std::vector<int64_t>& sizes, const std::vector<int64_t>& dims);
// reduce over `dims`, result reshaped to the keepdim sizes.
NodeId ReduceKeep(GraphBuilder& b, NodeId x, const std::vector<int64_t>& sizes,
                  const std::vector<int64_t>& dims, ReduceKind kind);
// Vector norm of `v` (computation dtype) over dims for a graph-input `ord`
// given at the keepdim sizes; result at the keepdim sizes.
NodeId VectorNorm(GraphBuilder& b, NodeId v, const std::vector<int64_t>& sizes,
                  const std::vector<int64_t>& dims, NodeId ord_kept);

}  // namespace ember::lowering
