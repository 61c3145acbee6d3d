// GraphBuilder: the only way to create Nodes (DESIGN §9). Each method infers
// and checks the result shape; on a mistake the builder records the first
// error (InvalidArgument naming the op, its operand shapes and what was
// expected), returns kInvalidNode, and Build() returns that error. Later
// calls after an error are no-ops returning kInvalidNode.
//
// Operand conventions (full semantics in docs/ir.md):
//  - binary elementwise ops take two operands of the same shape and dtype
//    (broadcasting is explicit, through broadcast-in-dim);
//  - select(pred, on_true, on_false), clamp(min, x, max) where min/max are x's
//    shape or scalars;
//  - convolution uses the fixed layout lhs [N, C, spatial...],
//    rhs [O, C/feature_group_count, spatial...] -> [N, O, spatial...].
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ember/ir/graph.h"

namespace ember {

// Dimension numbers of gather (XLA semantics; out-of-range start indices are a
// runtime OutOfRange error, never clamped).
struct GatherDims {
  std::vector<int64_t> offset_dims;
  std::vector<int64_t> collapsed_slice_dims;
  std::vector<int64_t> start_index_map;
  int64_t index_vector_dim = 0;
};

// Dimension numbers of scatter (XLA semantics; out-of-range indices are a
// runtime error; duplicate indices combine with to_apply in index order, so
// `assign` keeps the last update).
struct ScatterDims {
  std::vector<int64_t> update_window_dims;
  std::vector<int64_t> inserted_window_dims;
  std::vector<int64_t> scatter_dims_to_operand_dims;
  int64_t index_vector_dim = 0;
};

struct DotDims {
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contracting, rhs_contracting;
};

struct ConvConfig {
  std::vector<int64_t> window_strides;              // per spatial dim; default 1
  std::vector<int64_t> padding_low, padding_high;   // default 0
  std::vector<int64_t> lhs_dilation, rhs_dilation;  // default 1
  int64_t feature_group_count = 1;
};

// Result shape of `op` applied to `operands` with `attrs`. `declared` is the
// result shape for ops whose result cannot be derived (parameter, iota, rng-*,
// reshape, broadcast-in-dim, convert, custom-call) and may pick the result
// dtype of argmax/argmin (default s64) and dot-general; for every other op a
// declared shape must equal the inferred one.
StatusOr<Shape> InferShape(OpKind op, const std::vector<Shape>& operands, const Attrs& attrs,
                           const std::optional<Shape>& declared, const Literal* literal);

class GraphBuilder {
 public:
  explicit GraphBuilder(std::string name = "main");

  // ---- generic entry point (parser and passes use it) ----
  NodeId AddNode(OpKind op, std::vector<NodeId> operands, Attrs attrs = {},
                 std::optional<Shape> declared = std::nullopt,
                 std::shared_ptr<const Literal> literal = nullptr, std::string metadata = "",
                 std::shared_ptr<const Graph> called = nullptr);
  // Adds a copy of `n` (op, attributes, literal, called body, shape, metadata)
  // over new operands.
  NodeId AddNodeLike(const Node& n, std::vector<NodeId> operands);

  // ---- leaves ----
  NodeId Parameter(int64_t index, Shape shape);
  NodeId Constant(Literal value);
  NodeId ConstantScalar(DType t, double v);
  NodeId Iota(Shape shape, int64_t iota_dimension);
  // Philox-4x32-10 draws; seed and offset are u64 scalars; `stream` tells
  // apart random ops that must never be merged.
  NodeId RngUniform(NodeId seed, NodeId offset, Shape shape, int64_t stream);
  NodeId RngNormal(NodeId seed, NodeId offset, Shape shape, int64_t stream);

  // ---- elementwise ----
  NodeId Unary(OpKind op, NodeId x);
  NodeId Binary(OpKind op, NodeId a, NodeId b);
  NodeId Compare(NodeId a, NodeId b, ComparisonKind direction);
  NodeId Convert(NodeId x, DType to);
  NodeId Select(NodeId pred, NodeId on_true, NodeId on_false);
  NodeId Clamp(NodeId min, NodeId x, NodeId max);
  // x * y + z rounded once (a fused multiply-add); f32 or f64, one shape.
  NodeId Fma(NodeId x, NodeId y, NodeId z);
  NodeId Add(NodeId a, NodeId b) { return Binary(OpKind::kAdd, a, b); }
  NodeId Subtract(NodeId a, NodeId b) { return Binary(OpKind::kSubtract, a, b); }
  NodeId Multiply(NodeId a, NodeId b) { return Binary(OpKind::kMultiply, a, b); }
  NodeId Divide(NodeId a, NodeId b) { return Binary(OpKind::kDivide, a, b); }
  NodeId Maximum(NodeId a, NodeId b) { return Binary(OpKind::kMaximum, a, b); }
  NodeId Minimum(NodeId a, NodeId b) { return Binary(OpKind::kMinimum, a, b); }
  NodeId Negate(NodeId x) { return Unary(OpKind::kNegate, x); }
  NodeId Exp(NodeId x) { return Unary(OpKind::kExp, x); }

  // ---- data movement ----
  // result dim broadcast_dimensions[i] takes operand dim i (size equal or 1).
  NodeId BroadcastInDim(NodeId x, std::vector<int64_t> result_dims,
                        std::vector<int64_t> broadcast_dimensions);
  NodeId Reshape(NodeId x, std::vector<int64_t> dims);
  // result dim i is operand dim permutation[i].
  NodeId Transpose(NodeId x, std::vector<int64_t> permutation);
  NodeId Slice(NodeId x, std::vector<int64_t> start, std::vector<int64_t> limit,
               std::vector<int64_t> stride);
  // start indices: one integer scalar node per dim.
  NodeId DynamicSlice(NodeId x, std::vector<NodeId> start_indices,
                      std::vector<int64_t> slice_sizes);
  NodeId DynamicUpdateSlice(NodeId x, NodeId update, std::vector<NodeId> start_indices);
  NodeId Concatenate(std::vector<NodeId> xs, int64_t dimension);
  // low/high may be negative (cropping); interior >= 0.
  NodeId Pad(NodeId x, NodeId padding_value, std::vector<int64_t> low, std::vector<int64_t> high,
             std::vector<int64_t> interior);
  NodeId Reverse(NodeId x, std::vector<int64_t> dimensions);
  NodeId Gather(NodeId operand, NodeId indices, const GatherDims& dims,
                std::vector<int64_t> slice_sizes);
  NodeId Scatter(NodeId operand, NodeId indices, NodeId updates, const ScatterDims& dims,
                 ReduceKind to_apply);

  // ---- reductions and contractions ----
  // Identity-initialized reduction over `dimensions` (removed from the result).
  NodeId Reduce(NodeId x, std::vector<int64_t> dimensions, ReduceKind to_apply);
  // Index of the first max/min along `dimension` (removed); NaN counts as
  // the maximum (and minimum), like torch.argmax.
  NodeId ArgMax(NodeId x, int64_t dimension, DType index_type = DType::kS64);
  NodeId ArgMin(NodeId x, int64_t dimension, DType index_type = DType::kS64);
  // Pooling; padding positions hold the identity of to_apply.
  NodeId ReduceWindow(NodeId x, ReduceKind to_apply, std::vector<int64_t> window_dimensions,
                      std::vector<int64_t> window_strides, std::vector<int64_t> padding_low,
                      std::vector<int64_t> padding_high,
                      std::vector<int64_t> window_dilations = {});
  NodeId DotGeneral(NodeId lhs, NodeId rhs, const DotDims& dims,
                    std::optional<DType> result_type = std::nullopt);
  NodeId Convolution(NodeId lhs, NodeId rhs, const ConvConfig& config);

  // ---- opaque and tuples ----
  // `aliasing`: output_to_operand_aliasing pairs, flat {tuple index, operand index, ...}.
  NodeId CustomCall(std::string target, std::vector<NodeId> operands, Shape result,
                    std::string backend_config = "", std::vector<int64_t> aliasing = {});
  NodeId OptimizationBarrier(std::vector<NodeId> xs);  // result: tuple of operand shapes
  NodeId Tuple(std::vector<NodeId> xs);
  NodeId GetTupleElement(NodeId t, int64_t index);

  // ---- fusion ----
  // Calls `body` on `operands` (attribute `kind`: the body's kind, from
  // AnalyzeFusion (ember/ir/fusion_analysis.h) unless given; a given kind
  // must be that one). Operand shapes must equal the body's parameter shapes
  // in order; the body has exactly one output, whose shape is the result
  // (multi-output fusion: a later tier).
  NodeId Fusion(std::vector<NodeId> operands, std::shared_ptr<const Graph> body,
                std::optional<FusionKind> kind = std::nullopt);

  // ---- graph interface ----
  void SetOutputs(std::vector<NodeId> outputs);
  // Output `output_index` may reuse the buffer of parameter `parameter_index`.
  void SetAlias(int output_index, int parameter_index);
  const Shape& shape(NodeId id) const;
  const Node& node(NodeId id) const;
  int num_nodes() const;
  const Status& status() const { return status_; }
  // Returns the recorded error (OK if none) and clears it, so building can go
  // on after a caller-contained failure (the torch bridge: a lowering that
  // failed falls back to an extern). Nodes added before the error stay in the
  // graph (unused ones are removed by dce).
  Status TakeStatus();
  // Metadata given to every node created from now on whose own metadata is
  // empty (e.g. "aten::gather (traced at train.py:12)"); "" stops it.
  void SetDefaultMetadata(std::string metadata) { default_metadata_ = std::move(metadata); }
  // Returns the graph (or the first error). Every node was checked when it
  // was added (shape inference, fusion bodies, the kMaxFusionNesting bound),
  // so Build checks only what is left: parameters numbered without gaps and
  // the alias map (output/parameter ranges, equal shapes); it does not run
  // Verify again. The builder is left empty.
  StatusOr<Graph> Build();

 private:
  NodeId Fail(Status s);
  NodeId ArgReduce(OpKind op, NodeId x, int64_t dimension, DType index_type);
  Graph g_;
  Status status_;
  std::string default_metadata_;
};

}  // namespace ember
