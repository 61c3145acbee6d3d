#include "ember/ir/builder.h"

#include <algorithm>

#include "ember/ir/attributes.h"
#include "ember/ir/fusion_analysis.h"

namespace ember {

GraphBuilder::GraphBuilder(std::string name) { g_.name_ = std::move(name); }

NodeId GraphBuilder::Fail(Status s) {
  if (status_.ok()) status_ = std::move(s);
  return kInvalidNode;
}

NodeId GraphBuilder::AddNode(OpKind op, std::vector<NodeId> operands, Attrs attrs,
                             std::optional<Shape> declared, std::shared_ptr<const Literal> literal,
                             std::string metadata, std::shared_ptr<const Graph> called) {
  if (!status_.ok()) return kInvalidNode;
  if (called && op != OpKind::kFusion)
    return Fail(InvalidArgument(OpName(op), ": only a fusion may call a body graph"));
  std::vector<Shape> shapes;
  shapes.reserve(operands.size());
  for (NodeId id : operands) {
    if (id < 0 || id >= g_.num_nodes())
      return Fail(InvalidArgument(OpName(op), ": operand %", id, " is not a node of this graph"));
    shapes.push_back(g_.nodes_[id].shape);
  }
  auto shape = InferShape(op, shapes, attrs, declared, literal.get());
  if (!shape.ok()) return Fail(shape.status());
  int depth = 0;
  if (op == OpKind::kFusion) {
    Status body_ok = CheckFusionBody(shapes, called.get(), *shape, attr::Kind.Text(attrs));
    if (!body_ok.ok()) return Fail(body_ok);
    depth = called->fusion_depth() + 1;
    if (depth > kMaxFusionNesting)
      return Fail(InvalidArgument("graph '", g_.name_, "': fusion bodies nested more than ",
                                  kMaxFusionNesting, " deep (fusion calling '", called->name(),
                                  "')"));
  }
  if (op == OpKind::kParameter) {
    int64_t index = attr::Index(attrs, -1);
    if (index >= static_cast<int64_t>(g_.parameters_.size()))
      g_.parameters_.resize(index + 1, kInvalidNode);
    if (g_.parameters_[index] != kInvalidNode)
      return Fail(InvalidArgument("parameter(", index, ") is defined twice"));
    g_.parameters_[index] = g_.num_nodes();
  }
  Node n;
  n.id = g_.num_nodes();
  n.op = op;
  n.shape = std::move(shape).value();
  n.operands = std::move(operands);
  n.attrs = std::move(attrs);
  n.literal = std::move(literal);
  n.metadata = metadata.empty() ? default_metadata_ : std::move(metadata);
  n.called = std::move(called);
  g_.nodes_.push_back(std::move(n));
  g_.fusion_depth_ = std::max(g_.fusion_depth_, depth);
  return g_.nodes_.back().id;
}

NodeId GraphBuilder::AddNodeLike(const Node& n, std::vector<NodeId> operands) {
  return AddNode(n.op, std::move(operands), n.attrs, n.shape, n.literal, n.metadata, n.called);
}

NodeId GraphBuilder::Fusion(std::vector<NodeId> operands, std::shared_ptr<const Graph> body,
                            std::optional<FusionKind> kind) {
  if (!status_.ok()) return kInvalidNode;
  if (!body) return Fail(InvalidArgument("fusion: the body graph is null"));
  if (body->outputs().size() != 1)
    return Fail(InvalidArgument("fusion: the body '", body->name(), "' has ",
                                body->outputs().size(), " outputs; a fusion body has exactly one"));
  NodeId out = body->outputs()[0];
  if (out < 0 || out >= body->num_nodes())
    return Fail(InvalidArgument("fusion: the body's output is not a node"));
  Shape result = body->node(out).shape;
  const FusionKind k = kind ? *kind : AnalyzeFusion(*body).kind;
  return AddNode(OpKind::kFusion, std::move(operands),
                 {{attr::Kind.key, std::string(FusionKindName(k))}}, std::move(result), nullptr, "",
                 std::move(body));
}

NodeId GraphBuilder::Parameter(int64_t index, Shape shape) {
  return AddNode(OpKind::kParameter, {}, {{attr::Index.key, index}}, std::move(shape));
}

NodeId GraphBuilder::Constant(Literal value) {
  return AddNode(OpKind::kConstant, {}, {}, std::nullopt,
                 std::make_shared<const Literal>(std::move(value)));
}

NodeId GraphBuilder::ConstantScalar(DType t, double v) {
  return Constant(Literal::ScalarDouble(t, v));
}

NodeId GraphBuilder::Iota(Shape shape, int64_t iota_dimension) {
  return AddNode(OpKind::kIota, {}, {{attr::IotaDimension.key, iota_dimension}}, std::move(shape));
}

NodeId GraphBuilder::RngUniform(NodeId seed, NodeId offset, Shape shape, int64_t stream) {
  return AddNode(OpKind::kRngUniform, {seed, offset}, {{attr::Stream.key, stream}},
                 std::move(shape));
}

NodeId GraphBuilder::RngNormal(NodeId seed, NodeId offset, Shape shape, int64_t stream) {
  return AddNode(OpKind::kRngNormal, {seed, offset}, {{attr::Stream.key, stream}},
                 std::move(shape));
}

NodeId GraphBuilder::Unary(OpKind op, NodeId x) {
  if (!IsUnary(op) || op == OpKind::kConvert)
    return Fail(
        InvalidArgument(OpName(op), " is not a unary elementwise op (use Convert for convert)"));
  return AddNode(op, {x});
}

NodeId GraphBuilder::Binary(OpKind op, NodeId a, NodeId b) {
  if (!IsBinary(op) || op == OpKind::kCompare)
    return Fail(
        InvalidArgument(OpName(op), " is not a binary elementwise op (use Compare for compare)"));
  return AddNode(op, {a, b});
}

NodeId GraphBuilder::Compare(NodeId a, NodeId b, ComparisonKind direction) {
  return AddNode(OpKind::kCompare, {a, b},
                 {{attr::Direction.key, std::string(ComparisonKindName(direction))}});
}

NodeId GraphBuilder::Convert(NodeId x, DType to) {
  if (!status_.ok()) return kInvalidNode;
  if (x < 0 || x >= g_.num_nodes()) return Fail(InvalidArgument("convert: bad operand %", x));
  const Shape& s = g_.nodes_[x].shape;
  if (s.is_tuple()) return Fail(InvalidArgument("convert: operand must be an array"));
  return AddNode(OpKind::kConvert, {x}, {}, s.with_dtype(to));
}

NodeId GraphBuilder::Select(NodeId pred, NodeId on_true, NodeId on_false) {
  return AddNode(OpKind::kSelect, {pred, on_true, on_false});
}

NodeId GraphBuilder::Fma(NodeId x, NodeId y, NodeId z) { return AddNode(OpKind::kFma, {x, y, z}); }

NodeId GraphBuilder::Clamp(NodeId min, NodeId x, NodeId max) {
  return AddNode(OpKind::kClamp, {min, x, max});
}

NodeId GraphBuilder::BroadcastInDim(NodeId x, std::vector<int64_t> result_dims,
                                    std::vector<int64_t> broadcast_dimensions) {
  if (!status_.ok()) return kInvalidNode;
  if (x < 0 || x >= g_.num_nodes())
    return Fail(InvalidArgument("broadcast-in-dim: bad operand %", x));
  DType t = g_.nodes_[x].shape.dtype();
  return AddNode(OpKind::kBroadcastInDim, {x},
                 {{attr::Dimensions.key, std::move(broadcast_dimensions)}},
                 Shape(t, std::move(result_dims)));
}

NodeId GraphBuilder::Reshape(NodeId x, std::vector<int64_t> dims) {
  if (!status_.ok()) return kInvalidNode;
  if (x < 0 || x >= g_.num_nodes()) return Fail(InvalidArgument("reshape: bad operand %", x));
  DType t = g_.nodes_[x].shape.dtype();
  return AddNode(OpKind::kReshape, {x}, {}, Shape(t, std::move(dims)));
}

NodeId GraphBuilder::Transpose(NodeId x, std::vector<int64_t> permutation) {
  return AddNode(OpKind::kTranspose, {x}, {{attr::Dimensions.key, std::move(permutation)}});
}

NodeId GraphBuilder::Slice(NodeId x, std::vector<int64_t> start, std::vector<int64_t> limit,
                           std::vector<int64_t> stride) {
  return AddNode(OpKind::kSlice, {x},
                 {{attr::Start.key, std::move(start)},
                  {attr::Limit.key, std::move(limit)},
                  {attr::Stride.key, std::move(stride)}});
}

NodeId GraphBuilder::DynamicSlice(NodeId x, std::vector<NodeId> start_indices,
                                  std::vector<int64_t> slice_sizes) {
  std::vector<NodeId> operands = {x};
  operands.insert(operands.end(), start_indices.begin(), start_indices.end());
  return AddNode(OpKind::kDynamicSlice, std::move(operands),
                 {{attr::SliceSizes.key, std::move(slice_sizes)}});
}

NodeId GraphBuilder::DynamicUpdateSlice(NodeId x, NodeId update,
                                        std::vector<NodeId> start_indices) {
  std::vector<NodeId> operands = {x, update};
  operands.insert(operands.end(), start_indices.begin(), start_indices.end());
  return AddNode(OpKind::kDynamicUpdateSlice, std::move(operands));
}

NodeId GraphBuilder::Concatenate(std::vector<NodeId> xs, int64_t dimension) {
  return AddNode(OpKind::kConcatenate, std::move(xs), {{attr::Dimension.key, dimension}});
}

NodeId GraphBuilder::Pad(NodeId x, NodeId padding_value, std::vector<int64_t> low,
                         std::vector<int64_t> high, std::vector<int64_t> interior) {
  return AddNode(OpKind::kPad, {x, padding_value},
                 {{attr::Low.key, std::move(low)},
                  {attr::High.key, std::move(high)},
                  {attr::Interior.key, std::move(interior)}});
}

NodeId GraphBuilder::Reverse(NodeId x, std::vector<int64_t> dimensions) {
  return AddNode(OpKind::kReverse, {x}, {{attr::Dimensions.key, std::move(dimensions)}});
}

NodeId GraphBuilder::Gather(NodeId operand, NodeId indices, const GatherDims& dims,
                            std::vector<int64_t> slice_sizes) {
  return AddNode(OpKind::kGather, {operand, indices},
                 {{attr::OffsetDims.key, dims.offset_dims},
                  {attr::CollapsedSliceDims.key, dims.collapsed_slice_dims},
                  {attr::StartIndexMap.key, dims.start_index_map},
                  {attr::IndexVectorDim.key, dims.index_vector_dim},
                  {attr::SliceSizes.key, std::move(slice_sizes)}});
}

NodeId GraphBuilder::Scatter(NodeId operand, NodeId indices, NodeId updates,
                             const ScatterDims& dims, ReduceKind to_apply) {
  return AddNode(OpKind::kScatter, {operand, indices, updates},
                 {{attr::UpdateWindowDims.key, dims.update_window_dims},
                  {attr::InsertedWindowDims.key, dims.inserted_window_dims},
                  {attr::ScatterDimsToOperandDims.key, dims.scatter_dims_to_operand_dims},
                  {attr::IndexVectorDim.key, dims.index_vector_dim},
                  {attr::ToApply.key, std::string(ReduceKindName(to_apply))}});
}

NodeId GraphBuilder::Reduce(NodeId x, std::vector<int64_t> dimensions, ReduceKind to_apply) {
  return AddNode(OpKind::kReduce, {x},
                 {{attr::Dimensions.key, std::move(dimensions)},
                  {attr::ToApply.key, std::string(ReduceKindName(to_apply))}});
}

// argmax/argmin: the result is the operand's dims without `dimension`, of
// `index_type` (the declared shape; InferShape checks the rest).
NodeId GraphBuilder::ArgReduce(OpKind op, NodeId x, int64_t dimension, DType index_type) {
  if (!status_.ok()) return kInvalidNode;
  if (x < 0 || x >= g_.num_nodes()) return Fail(InvalidArgument(OpName(op), ": bad operand %", x));
  std::vector<int64_t> dims = g_.nodes_[x].shape.dims();
  if (dimension >= 0 && dimension < static_cast<int64_t>(dims.size()))
    dims.erase(dims.begin() + dimension);
  return AddNode(op, {x}, {{attr::Dimension.key, dimension}}, Shape(index_type, dims));
}

NodeId GraphBuilder::ArgMax(NodeId x, int64_t dimension, DType index_type) {
  return ArgReduce(OpKind::kArgMax, x, dimension, index_type);
}

NodeId GraphBuilder::ArgMin(NodeId x, int64_t dimension, DType index_type) {
  return ArgReduce(OpKind::kArgMin, x, dimension, index_type);
}

NodeId GraphBuilder::ReduceWindow(NodeId x, ReduceKind to_apply,
                                  std::vector<int64_t> window_dimensions,
                                  std::vector<int64_t> window_strides,
                                  std::vector<int64_t> padding_low,
                                  std::vector<int64_t> padding_high,
                                  std::vector<int64_t> window_dilations) {
  Attrs attrs{{attr::ToApply.key, std::string(ReduceKindName(to_apply))},
              {attr::WindowDimensions.key, std::move(window_dimensions)},
              {attr::WindowStrides.key, std::move(window_strides)},
              {attr::PaddingLow.key, std::move(padding_low)},
              {attr::PaddingHigh.key, std::move(padding_high)}};
  if (!window_dilations.empty()) attrs.Set(attr::WindowDilations.key, std::move(window_dilations));
  return AddNode(OpKind::kReduceWindow, {x}, std::move(attrs));
}

NodeId GraphBuilder::DotGeneral(NodeId lhs, NodeId rhs, const DotDims& dims,
                                std::optional<DType> result_type) {
  Attrs attrs{{attr::LhsBatchDims.key, dims.lhs_batch},
              {attr::RhsBatchDims.key, dims.rhs_batch},
              {attr::LhsContractingDims.key, dims.lhs_contracting},
              {attr::RhsContractingDims.key, dims.rhs_contracting}};
  if (!result_type) return AddNode(OpKind::kDotGeneral, {lhs, rhs}, std::move(attrs));
  if (!status_.ok()) return kInvalidNode;
  // Infer the dims with the operand dtype, then declare the requested dtype.
  std::vector<Shape> shapes;
  for (NodeId id : {lhs, rhs}) {
    if (id < 0 || id >= g_.num_nodes())
      return Fail(InvalidArgument("dot-general: bad operand %", id));
    shapes.push_back(g_.nodes_[id].shape);
  }
  auto s = InferShape(OpKind::kDotGeneral, shapes, attrs, std::nullopt, nullptr);
  if (!s.ok()) return Fail(s.status());
  return AddNode(OpKind::kDotGeneral, {lhs, rhs}, std::move(attrs), s->with_dtype(*result_type));
}

NodeId GraphBuilder::Convolution(NodeId lhs, NodeId rhs, const ConvConfig& config) {
  Attrs attrs;
  if (!config.window_strides.empty()) attrs.Set(attr::WindowStrides.key, config.window_strides);
  if (!config.padding_low.empty()) attrs.Set(attr::PaddingLow.key, config.padding_low);
  if (!config.padding_high.empty()) attrs.Set(attr::PaddingHigh.key, config.padding_high);
  if (!config.lhs_dilation.empty()) attrs.Set(attr::LhsDilation.key, config.lhs_dilation);
  if (!config.rhs_dilation.empty()) attrs.Set(attr::RhsDilation.key, config.rhs_dilation);
  if (config.feature_group_count != 1)
    attrs.Set(attr::FeatureGroupCount.key, config.feature_group_count);
  return AddNode(OpKind::kConvolution, {lhs, rhs}, std::move(attrs));
}

NodeId GraphBuilder::CustomCall(std::string target, std::vector<NodeId> operands, Shape result,
                                std::string backend_config, std::vector<int64_t> aliasing) {
  Attrs attrs{{attr::CallTargetName.key, std::move(target)}};
  if (!backend_config.empty()) attrs.Set(attr::BackendConfig.key, std::move(backend_config));
  if (!aliasing.empty()) attrs.Set(attr::OutputToOperandAliasing.key, std::move(aliasing));
  return AddNode(OpKind::kCustomCall, std::move(operands), std::move(attrs), std::move(result));
}

NodeId GraphBuilder::OptimizationBarrier(std::vector<NodeId> xs) {
  return AddNode(OpKind::kOptimizationBarrier, std::move(xs));
}

NodeId GraphBuilder::Tuple(std::vector<NodeId> xs) {
  return AddNode(OpKind::kTuple, std::move(xs));
}

NodeId GraphBuilder::GetTupleElement(NodeId t, int64_t index) {
  return AddNode(OpKind::kGetTupleElement, {t}, {{attr::Index.key, index}});
}

void GraphBuilder::SetOutputs(std::vector<NodeId> outputs) {
  if (!status_.ok()) return;
  for (NodeId id : outputs)
    if (id < 0 || id >= g_.num_nodes()) {
      Fail(InvalidArgument("output %", id, " is not a node of this graph"));
      return;
    }
  g_.outputs_ = std::move(outputs);
}

void GraphBuilder::SetAlias(int output_index, int parameter_index) {
  g_.aliases_[output_index] = parameter_index;
}

const Shape& GraphBuilder::shape(NodeId id) const { return g_.nodes_.at(id).shape; }
const Node& GraphBuilder::node(NodeId id) const { return g_.nodes_.at(id); }
int GraphBuilder::num_nodes() const { return g_.num_nodes(); }

Status GraphBuilder::TakeStatus() {
  Status s = std::move(status_);
  status_ = OkStatus();
  return s;
}

StatusOr<Graph> GraphBuilder::Build() {
  if (!status_.ok()) return status_;
  Graph g = std::move(g_);
  g_ = Graph();
  g_.name_ = g.name_;
  for (size_t i = 0; i < g.parameters_.size(); ++i)
    if (g.parameters_[i] == kInvalidNode)
      return InvalidArgument("parameter(", i, ") is missing: parameters must be numbered 0..",
                             g.parameters_.size() - 1, " without gaps");
  // AddNode already inferred and checked every node (operands precede their
  // users, shapes, fusion bodies and their nesting bound) and SetOutputs the
  // outputs: what is left to check is the alias map.
  for (auto [out, param] : g.aliases_) {
    if (out < 0 || out >= static_cast<int>(g.outputs_.size()))
      return InvalidArgument("alias: output index ", out, " out of range [0, ", g.outputs_.size(),
                             ")");
    if (param < 0 || param >= static_cast<int>(g.parameters_.size()))
      return InvalidArgument("alias: parameter index ", param, " out of range [0, ",
                             g.parameters_.size(), ")");
    const Shape& os = g.nodes_[g.outputs_[out]].shape;
    const Shape& ps = g.nodes_[g.parameters_[param]].shape;
    if (os != ps)
      return InvalidArgument("alias: output ", out, " (", os.ToString(), ") and parameter ", param,
                             " (", ps.ToString(), ") differ in shape");
  }
  return g;
}

}  // namespace ember
