// Losses: nll_loss (1-d and N-d: nll_loss_forward/backward,
// nll_loss2d_forward/backward) with class weights, ignore_index and the three
// reductions; mse_loss and mse_loss_backward; binary_cross_entropy_with_logits
// (weight, pos_weight). cross_entropy (label smoothing included) reaches the
// backend decomposed into _log_softmax, nll_loss_forward, mul/sum/mean and
// their backward ops, all in the table.
//
// nll: w_i = weight[t_i] (1 without weights), 0 where t_i == ignore_index;
//   loss_i = -x[i, t_i] * w_i; 'sum' sums, 'mean' divides by sum(w_i)
//   (total_weight, 0 for 'none' as eager); a target outside [0, C) that is not ignore_index is an
//   OutOfRange error at run time (the gather), as eager raises.
// bce-with-logits (eager's formula): (1 - t) x - log_weight * logsigmoid(x),
//   log_weight = (pos_weight - 1) t + 1, logsigmoid(x) = min(x, 0) - log1p(e^-|x|).
#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/reduction_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

// Class-last view of the nll input: x [M, C] and target [M] (s64).
struct NllLayout {
  int64_t m = 1, c = 1;
  bool batched = true;  // false: x is [C], target is []
};

StatusOr<NllLayout> Layout(const AtenCall& c, const TensorArg& x, const TensorArg& t) {
  NllLayout l;
  if (x.sizes.size() == 1) {
    l.batched = false;
    l.c = x.sizes[0];
    return l;
  }
  if (x.sizes.size() < 2) return InvalidArgument(c.op, ": input must have 1 or more dims");
  l.c = x.sizes[1];
  for (size_t i = 0; i < x.sizes.size(); ++i)
    if (i != 1) l.m *= x.sizes[i];
  return l;
}

// x [N, C, d...] -> [N, d..., C] -> [M, C].
NodeId ClassLast(GraphBuilder& b, NodeId x, const std::vector<int64_t>& sizes, const NllLayout& l) {
  if (!l.batched) return b.Reshape(x, {1, l.c});
  if (sizes.size() == 2) return x;
  std::vector<int64_t> perm = {0};
  for (size_t i = 2; i < sizes.size(); ++i) perm.push_back(static_cast<int64_t>(i));
  perm.push_back(1);
  return b.Reshape(b.Transpose(x, perm), {l.m, l.c});
}

// Inverse of ClassLast: [M, C] -> the input's sizes.
NodeId ClassBack(GraphBuilder& b, NodeId x, const std::vector<int64_t>& sizes, const NllLayout& l) {
  if (!l.batched || sizes.size() == 2) return b.Reshape(x, sizes);
  std::vector<int64_t> last = {sizes[0]};
  for (size_t i = 2; i < sizes.size(); ++i) last.push_back(sizes[i]);
  last.push_back(sizes[1]);
  NodeId r = b.Reshape(x, last);
  int64_t rank = static_cast<int64_t>(sizes.size());
  std::vector<int64_t> perm = {0, rank - 1};
  for (int64_t i = 1; i < rank - 1; ++i) perm.push_back(i);
  return b.Transpose(r, perm);
}

struct NllParts {
  NodeId target;   // [M] s64, ignored entries replaced by 0
  NodeId w;        // [M] compute dtype: class weight, 0 where ignored
  NodeId ignored;  // [M] pred
};

NllParts Weights(GraphBuilder& b, const TensorArg& target, const std::optional<TensorArg>& weight,
                 int64_t ignore_index, const NllLayout& l, DType t) {
  NodeId tg = b.Reshape(ConvertTo(b, target.value, DType::kS64), {l.m});
  NodeId ign = b.Compare(tg, Splat(b, DType::kS64, static_cast<double>(ignore_index), {l.m}),
                         ComparisonKind::kEq);
  NodeId safe = b.Select(ign, Splat(b, DType::kS64, 0, {l.m}), tg);
  NodeId w;
  if (weight) {
    GatherDims d;
    d.offset_dims = {};
    d.collapsed_slice_dims = {0};
    d.start_index_map = {0};
    d.index_vector_dim = 1;
    w = b.Gather(ConvertTo(b, weight->value, t), b.Reshape(safe, {l.m, 1}), d, {1});
  } else {
    w = Splat(b, t, 1, {l.m});
  }
  w = b.Select(ign, Splat(b, t, 0, {l.m}), w);
  return {safe, w, ign};
}

// nll_loss_forward / nll_loss2d_forward(self, target, weight?, reduction, ignore_index)
//   -> (output, total_weight)
LowerResult LowerNll(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg target, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(auto weight, OptTensorAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(int64_t reduction, IntAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(int64_t ignore_index, IntAt(c, 4));
  if (!IsFloat(x.dtype)) return Declined("nll_loss of integers");
  if (reduction < 0 || reduction > 2) return Declined("unknown reduction");
  if (c.outputs.size() != 2) return InvalidArgument(c.op, ": expected two outputs");
  EMBER_ASSIGN_OR_RETURN(NllLayout l, Layout(c, x, target));
  DType t = ComputeType(x.dtype);
  NodeId xm = ClassLast(b, ConvertTo(b, x.value, t), x.sizes, l);
  NllParts p = Weights(b, target, weight, ignore_index, l, t);
  // picked[i] = xm[i, target[i]]
  NodeId idx =
      b.Concatenate({b.Iota(Shape(DType::kS64, {l.m, 1}), 0), b.Reshape(p.target, {l.m, 1})}, 1);
  GatherDims d;
  d.collapsed_slice_dims = {0, 1};
  d.start_index_map = {0, 1};
  d.index_vector_dim = 1;
  NodeId picked = b.Gather(xm, idx, d, {1, 1});
  NodeId loss = b.Negate(b.Multiply(picked, p.w));
  NodeId total = b.Reduce(p.w, {0}, ReduceKind::kAdd);
  NodeId out;
  if (reduction == kNone) {
    out = b.Reshape(loss, c.outputs[0].sizes);
    total = b.ConstantScalar(t, 0);  // eager leaves total_weight 0 without reduction
  } else {
    out = b.Reduce(loss, {0}, ReduceKind::kAdd);
    if (reduction == kMean) out = b.Divide(out, total);
  }
  return CheckOutputs(b, c,
                      {Finish(b, out, c.outputs[0]),
                       Finish(b, b.Reshape(total, c.outputs[1].sizes), c.outputs[1])});
}

// nll_loss_backward / nll_loss2d_backward(grad_output, self, target, weight?,
//   reduction, ignore_index, total_weight) -> grad_input
LowerResult LowerNllBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg g, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(TensorArg target, TensorAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(auto weight, OptTensorAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(int64_t reduction, IntAt(c, 4));
  EMBER_ASSIGN_OR_RETURN(int64_t ignore_index, IntAt(c, 5));
  EMBER_ASSIGN_OR_RETURN(TensorArg total, TensorAt(c, 6));
  if (!IsFloat(x.dtype)) return Declined("nll_loss of integers");
  if (reduction < 0 || reduction > 2) return Declined("unknown reduction");
  EMBER_ASSIGN_OR_RETURN(NllLayout l, Layout(c, x, target));
  DType t = ComputeType(x.dtype);
  NllParts p = Weights(b, target, weight, ignore_index, l, t);
  NodeId gv = ConvertTo(b, g.value, t);
  gv = reduction == kNone ? b.Reshape(gv, {l.m}) : b.BroadcastInDim(b.Reshape(gv, {}), {l.m}, {});
  NodeId scale = b.Multiply(b.Negate(p.w), gv);
  if (reduction == kMean)
    scale =
        b.Divide(scale, b.BroadcastInDim(b.Reshape(ConvertTo(b, total.value, t), {}), {l.m}, {}));
  std::vector<int64_t> mc = {l.m, l.c};
  NodeId hit = b.Compare(b.Iota(Shape(DType::kS64, mc), 1), b.BroadcastInDim(p.target, mc, {0}),
                         ComparisonKind::kEq);
  // Ignored rows (target replaced by 0, w = 0) would get -0 * g in column 0;
  // eager leaves them +0: select them out explicitly.
  NodeId grad = b.Select(hit, b.BroadcastInDim(scale, mc, {0}), Splat(b, t, 0, mc));
  NodeId zero_row = b.BroadcastInDim(p.ignored, mc, {0});
  grad = b.Select(zero_row, Splat(b, t, 0, mc), grad);
  return CheckOutputs(b, c, {Finish(b, ClassBack(b, grad, x.sizes, l), c.outputs.at(0))});
}

NodeId Reduce(GraphBuilder& b, NodeId loss, const std::vector<int64_t>& sizes, int64_t reduction,
              const OutputMeta& out) {
  if (reduction == kNone) return loss;
  std::vector<int64_t> all;
  for (size_t i = 0; i < sizes.size(); ++i) all.push_back(static_cast<int64_t>(i));
  NodeId s = all.empty() ? loss : b.Reduce(loss, all, ReduceKind::kAdd);
  if (reduction == kMean) {
    DType t = b.shape(s).dtype();
    s = b.Divide(s, b.ConstantScalar(t, static_cast<double>(CountOver(sizes, all))));
  }
  return b.Reshape(s, out.sizes);
}

// mse_loss(self, target, reduction)
LowerResult LowerMse(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val y, ValAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(int64_t reduction, IntAt(c, 2));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("mse_loss of integers");
  if (reduction < 0 || reduction > 2) return Declined("unknown reduction");
  auto sizes = BroadcastShapes(x.sizes, y.sizes);
  if (!sizes) return InvalidArgument(c.op, ": shapes do not broadcast");
  Ew e(b, out.dtype, *sizes);
  NodeId d = b.Subtract(e(x), e(y));
  return CheckOutputs(b, c, {Finish(b, Reduce(b, b.Multiply(d, d), *sizes, reduction, out), out)});
}

// mse_loss_backward(grad_output, self, target, reduction)
//   = (2 / N if mean else 2) * (self - target) * grad
LowerResult LowerMseBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val g, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(Val y, ValAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(int64_t reduction, IntAt(c, 3));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("mse_loss of integers");
  if (reduction < 0 || reduction > 2) return Declined("unknown reduction");
  Ew e(b, out.dtype, out.sizes);
  int64_t n = 1;
  for (int64_t s : x.sizes) n *= s;
  NodeId norm = e.Const(reduction == kMean ? 2.0 / static_cast<double>(n) : 2.0);
  NodeId r = b.Multiply(b.Multiply(norm, b.Subtract(e(x), e(y))), e(g));
  return CheckOutputs(b, c, {Finish(b, r, out)});
}

// binary_cross_entropy_with_logits(self, target, weight?, pos_weight?, reduction)
LowerResult LowerBceWithLogits(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val tg, ValAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(auto weight, OptValAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(auto pos_weight, OptValAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(int64_t reduction, IntAt(c, 4));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("bce of integers");
  if (reduction < 0 || reduction > 2) return Declined("unknown reduction");
  std::vector<int64_t> sizes = x.sizes;
  for (const auto* v : {&tg}) {
    auto s = BroadcastShapes(sizes, v->sizes);
    if (!s) return InvalidArgument(c.op, ": shapes do not broadcast");
    sizes = *s;
  }
  if (weight) {
    auto s = BroadcastShapes(sizes, weight->sizes);
    if (!s) return InvalidArgument(c.op, ": weight does not broadcast");
    sizes = *s;
  }
  if (pos_weight) {
    auto s = BroadcastShapes(sizes, pos_weight->sizes);
    if (!s) return InvalidArgument(c.op, ": pos_weight does not broadcast");
    sizes = *s;
  }
  Ew e(b, out.dtype, sizes);
  NodeId xv = e(ValOf(x)), t = e(tg);
  NodeId zero = e.Const(0), one = e.Const(1);
  NodeId logsig = b.Subtract(b.Minimum(xv, zero),
                             b.Unary(OpKind::kLog1p, b.Exp(b.Negate(b.Unary(OpKind::kAbs, xv)))));
  if (pos_weight)
    logsig = b.Multiply(logsig, b.Add(b.Multiply(b.Subtract(e(*pos_weight), one), t), one));
  NodeId loss = b.Subtract(b.Multiply(b.Subtract(one, t), xv), logsig);
  if (weight) loss = b.Multiply(loss, e(*weight));
  return CheckOutputs(b, c, {Finish(b, Reduce(b, loss, sizes, reduction, out), out)});
}

}  // namespace

void RegisterLoss(LoweringTable& t) {
  t.Add("aten::nll_loss_forward", LowerNll);
  t.Add("aten::nll_loss2d_forward", LowerNll);
  t.Add("aten::nll_loss_backward", LowerNllBackward);
  t.Add("aten::nll_loss2d_backward", LowerNllBackward);
  t.Add("aten::mse_loss", LowerMse);
  t.Add("aten::mse_loss_backward", LowerMseBackward);
  t.Add("aten::binary_cross_entropy_with_logits", LowerBceWithLogits);
}

}  // namespace ember::lowering
