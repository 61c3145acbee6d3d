// Normalization layers and their backward ops: native_layer_norm,
// native_group_norm, batch norm (training through
// _native_batch_norm_legit_functional, eval through native_batch_norm /
// _native_batch_norm_legit_no_training), and native_*_backward.
//
// Statistics are population moments (two-pass mean, then mean of squared
// deviations) computed in f32 for bf16/f16 (f64 for f64), rstd = 1/sqrt(var +
// eps); eps and momentum are graph inputs. Backward (with xhat = (x-mean)*rstd
// and gw = dy * weight, means over the normalized elements):
//   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)),
//   dweight = sum(dy * xhat), dbias = sum(dy) over the other dims.
// Batch norm updates running stats as eager: (1 - momentum) * running +
// momentum * batch, the variance unbiased (n / (n - 1)).
#include <numeric>

#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/reduction_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

DType StatType(DType t) { return t == DType::kF64 ? DType::kF64 : DType::kF32; }

std::vector<int64_t> Range(int64_t lo, int64_t hi) {
  std::vector<int64_t> r;
  for (int64_t i = lo; i < hi; ++i) r.push_back(i);
  return r;
}

// Operand `t` (an optional tensor of size `sizes_of_t`) at sizes `to` in
// dtype `dt`, its dims placed at `dims`; `fill` when absent.
NodeId Param(GraphBuilder& b, const std::optional<TensorArg>& t, DType dt,
             const std::vector<int64_t>& to, const std::vector<int64_t>& dims, double fill) {
  if (!t) return Splat(b, dt, fill, to);
  return b.BroadcastInDim(ConvertTo(b, t->value, dt), to, dims);
}

NodeId ScalarIn(GraphBuilder& b, const Val& v, DType dt, const std::vector<int64_t>& sizes) {
  Val w = v;
  w.tier = PromoTier::kWrapped;
  return Prepare(b, w, dt, dt, sizes);
}

// Moments over `dims` of v ([sizes], compute dtype): (mean, var) at kept sizes.
std::pair<NodeId, NodeId> Moments(GraphBuilder& b, NodeId v, const std::vector<int64_t>& sizes,
                                  const std::vector<int64_t>& dims) {
  DType t = b.shape(v).dtype();
  std::vector<int64_t> kept = KeptSizes(sizes, dims);
  NodeId n = Splat(b, t, static_cast<double>(CountOver(sizes, dims)), kept);
  NodeId mean = b.Divide(ReduceKeep(b, v, sizes, dims, ReduceKind::kAdd), n);
  NodeId d = b.Subtract(v, BroadcastTo(b, mean, kept, sizes));
  NodeId var = b.Divide(ReduceKeep(b, b.Multiply(d, d), sizes, dims, ReduceKind::kAdd), n);
  return {mean, var};
}

NodeId Bcast(GraphBuilder& b, NodeId x, const std::vector<int64_t>& kept,
             const std::vector<int64_t>& sizes) {
  return BroadcastTo(b, x, kept, sizes);
}

// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) over `dims`.
NodeId NormInputGrad(GraphBuilder& b, NodeId gw, NodeId xhat, NodeId rstd_full,
                     const std::vector<int64_t>& sizes, const std::vector<int64_t>& dims) {
  DType t = b.shape(gw).dtype();
  std::vector<int64_t> kept = KeptSizes(sizes, dims);
  NodeId n = Splat(b, t, static_cast<double>(CountOver(sizes, dims)), kept);
  NodeId m1 = Bcast(b, b.Divide(ReduceKeep(b, gw, sizes, dims, ReduceKind::kAdd), n), kept, sizes);
  NodeId m2 =
      Bcast(b, b.Divide(ReduceKeep(b, b.Multiply(gw, xhat), sizes, dims, ReduceKind::kAdd), n),
            kept, sizes);
  return b.Multiply(rstd_full, b.Subtract(b.Subtract(gw, m1), b.Multiply(xhat, m2)));
}

// Sum of v over `dims`, reshaped to `out` sizes.
NodeId SumTo(GraphBuilder& b, NodeId v, const std::vector<int64_t>& dims, const OutputMeta& out) {
  NodeId r = dims.empty() ? v : b.Reduce(v, dims, ReduceKind::kAdd);
  return Finish(b, b.Reshape(r, out.sizes), out);
}

bool Mask(const AtenCall& c, size_t i, size_t k) {
  const Arg& a = ArgAt(c, i);
  if (a.kind != Arg::Kind::kBoolList || k >= a.bools.size()) return true;
  return a.bools[k] && c.outputs.at(k).defined;
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
LowerResult LowerLayerNorm(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(std::vector<int64_t> nshape, IntsAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(auto w, OptTensorAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(auto bias, OptTensorAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(Val eps, ValAt(c, 4));
  if (!IsFloat(x.dtype)) return Declined("layer norm of integers");
  int64_t rank = static_cast<int64_t>(x.sizes.size());
  int64_t axis = rank - static_cast<int64_t>(nshape.size());
  if (axis < 0 || c.outputs.size() != 3) return InvalidArgument(c.op, ": bad normalized_shape");
  DType t = StatType(x.dtype);
  std::vector<int64_t> dims = Range(axis, rank), kept = KeptSizes(x.sizes, dims);
  std::vector<int64_t> pdims = Range(axis, rank);
  NodeId v = ConvertTo(b, x.value, t);
  auto [mean, var] = Moments(b, v, x.sizes, dims);
  NodeId rstd = b.Unary(OpKind::kRsqrt, b.Add(var, ScalarIn(b, eps, t, kept)));
  NodeId xhat =
      b.Multiply(b.Subtract(v, Bcast(b, mean, kept, x.sizes)), Bcast(b, rstd, kept, x.sizes));
  NodeId y = b.Add(b.Multiply(xhat, Param(b, w, t, x.sizes, pdims, 1)),
                   Param(b, bias, t, x.sizes, pdims, 0));
  return CheckOutputs(
      b, c,
      {Finish(b, y, c.outputs[0]), Finish(b, b.Reshape(mean, c.outputs[1].sizes), c.outputs[1]),
       Finish(b, b.Reshape(rstd, c.outputs[2].sizes), c.outputs[2])});
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
//   weight?, bias?, output_mask) -> (grad_input, grad_weight, grad_bias)
LowerResult LowerLayerNormBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg g, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(std::vector<int64_t> nshape, IntsAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(TensorArg mean, TensorAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(TensorArg rstd, TensorAt(c, 4));
  EMBER_ASSIGN_OR_RETURN(auto w, OptTensorAt(c, 5));
  if (!IsFloat(x.dtype)) return Declined("layer norm of integers");
  if (c.outputs.size() != 3) return InvalidArgument(c.op, ": expected three outputs");
  int64_t rank = static_cast<int64_t>(x.sizes.size());
  int64_t axis = rank - static_cast<int64_t>(nshape.size());
  if (axis < 0) return InvalidArgument(c.op, ": bad normalized_shape");
  DType t = StatType(x.dtype);
  std::vector<int64_t> dims = Range(axis, rank), outer = Range(0, axis);
  std::vector<int64_t> kept = KeptSizes(x.sizes, dims);
  NodeId v = ConvertTo(b, x.value, t);
  NodeId gv = ConvertTo(b, g.value, t);
  NodeId mean_f = Bcast(b, b.Reshape(ConvertTo(b, mean.value, t), kept), kept, x.sizes);
  NodeId rstd_f = Bcast(b, b.Reshape(ConvertTo(b, rstd.value, t), kept), kept, x.sizes);
  NodeId xhat = b.Multiply(b.Subtract(v, mean_f), rstd_f);
  std::vector<NodeId> r(3, kInvalidNode);
  if (Mask(c, 7, 0)) {
    NodeId gw = w ? b.Multiply(gv, Param(b, w, t, x.sizes, dims, 1)) : gv;
    r[0] = Finish(b, NormInputGrad(b, gw, xhat, rstd_f, x.sizes, dims), c.outputs[0]);
  }
  if (Mask(c, 7, 1)) r[1] = SumTo(b, b.Multiply(gv, xhat), outer, c.outputs[1]);
  if (Mask(c, 7, 2)) r[2] = SumTo(b, gv, outer, c.outputs[2]);
  return CheckOutputs(b, c, r);
}

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean, rstd)
LowerResult LowerGroupNorm(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(auto w, OptTensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(auto bias, OptTensorAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(int64_t n, IntAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(int64_t ch, IntAt(c, 4));
  EMBER_ASSIGN_OR_RETURN(int64_t hw, IntAt(c, 5));
  EMBER_ASSIGN_OR_RETURN(int64_t groups, IntAt(c, 6));
  EMBER_ASSIGN_OR_RETURN(Val eps, ValAt(c, 7));
  if (!IsFloat(x.dtype)) return Declined("group norm of integers");
  if (groups <= 0 || ch % groups != 0 || c.outputs.size() != 3)
    return InvalidArgument(c.op, ": C must be divisible by group");
  DType t = StatType(x.dtype);
  std::vector<int64_t> g3 = {n, groups, ch / groups * hw}, c3 = {n, ch, hw};
  NodeId v = b.Reshape(ConvertTo(b, x.value, t), g3);
  auto [mean, var] = Moments(b, v, g3, {2});
  std::vector<int64_t> kept = {n, groups, 1};
  NodeId rstd = b.Unary(OpKind::kRsqrt, b.Add(var, ScalarIn(b, eps, t, kept)));
  NodeId xhat = b.Multiply(b.Subtract(v, Bcast(b, mean, kept, g3)), Bcast(b, rstd, kept, g3));
  NodeId y = b.Add(b.Multiply(b.Reshape(xhat, c3), Param(b, w, t, c3, {1}, 1)),
                   Param(b, bias, t, c3, {1}, 0));
  return CheckOutputs(b, c,
                      {Finish(b, b.Reshape(y, x.sizes), c.outputs[0]),
                       Finish(b, b.Reshape(mean, c.outputs[1].sizes), c.outputs[1]),
                       Finish(b, b.Reshape(rstd, c.outputs[2].sizes), c.outputs[2])});
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW,
//   group, output_mask) -> (grad_input, grad_weight, grad_bias)
LowerResult LowerGroupNormBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg g, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(TensorArg mean, TensorAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(TensorArg rstd, TensorAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(auto w, OptTensorAt(c, 4));
  EMBER_ASSIGN_OR_RETURN(int64_t n, IntAt(c, 5));
  EMBER_ASSIGN_OR_RETURN(int64_t ch, IntAt(c, 6));
  EMBER_ASSIGN_OR_RETURN(int64_t hw, IntAt(c, 7));
  EMBER_ASSIGN_OR_RETURN(int64_t groups, IntAt(c, 8));
  if (!IsFloat(x.dtype)) return Declined("group norm of integers");
  if (groups <= 0 || ch % groups != 0 || c.outputs.size() != 3)
    return InvalidArgument(c.op, ": C must be divisible by group");
  DType t = StatType(x.dtype);
  std::vector<int64_t> g3 = {n, groups, ch / groups * hw}, c3 = {n, ch, hw}, kept = {n, groups, 1};
  NodeId v = b.Reshape(ConvertTo(b, x.value, t), g3);
  NodeId gc = b.Reshape(ConvertTo(b, g.value, t), c3);
  NodeId mean_f = Bcast(b, b.Reshape(ConvertTo(b, mean.value, t), kept), kept, g3);
  NodeId rstd_f = Bcast(b, b.Reshape(ConvertTo(b, rstd.value, t), kept), kept, g3);
  NodeId xhat = b.Multiply(b.Subtract(v, mean_f), rstd_f);
  std::vector<NodeId> r(3, kInvalidNode);
  if (Mask(c, 9, 0)) {
    NodeId gw = w ? b.Multiply(gc, Param(b, w, t, c3, {1}, 1)) : gc;
    NodeId dx = NormInputGrad(b, b.Reshape(gw, g3), xhat, rstd_f, g3, {2});
    r[0] = Finish(b, b.Reshape(dx, x.sizes), c.outputs[0]);
  }
  if (Mask(c, 9, 1)) r[1] = SumTo(b, b.Multiply(gc, b.Reshape(xhat, c3)), {0, 2}, c.outputs[1]);
  if (Mask(c, 9, 2)) r[2] = SumTo(b, gc, {0, 2}, c.outputs[2]);
  return CheckOutputs(b, c, r);
}

// Batch norm over channel dim 1: stats over every other dim.
struct BnLayout {
  std::vector<int64_t> sizes, dims, kept;
  int64_t count = 1;
};

BnLayout BnDims(const std::vector<int64_t>& sizes) {
  BnLayout l;
  l.sizes = sizes;
  for (int64_t i = 0; i < static_cast<int64_t>(sizes.size()); ++i)
    if (i != 1) l.dims.push_back(i);
  l.kept = KeptSizes(sizes, l.dims);
  l.count = CountOver(sizes, l.dims);
  return l;
}

NodeId ChannelVec(GraphBuilder& b, const TensorArg& t, DType dt, const BnLayout& l) {
  return b.BroadcastInDim(ConvertTo(b, t.value, dt), l.sizes, {1});
}

// _native_batch_norm_legit_functional(input, weight?, bias?, running_mean,
//   running_var, training, momentum, eps)
//   -> (out, save_mean, save_rstd, running_mean_out, running_var_out)
// native_batch_norm(input, weight?, bias?, running_mean?, running_var?,
//   training, momentum, eps) -> (out, save_mean, save_rstd)
// _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean,
//   running_var, momentum, eps) -> (out, save_mean, save_rstd)
template <int kForm>  // 0: legit_functional, 1: native_batch_norm, 2: legit_no_training
LowerResult LowerBatchNorm(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(auto w, OptTensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(auto bias, OptTensorAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(auto rm, OptTensorAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(auto rv, OptTensorAt(c, 4));
  bool training = false;
  size_t mom_at = 5;
  if (kForm != 2) {
    EMBER_ASSIGN_OR_RETURN(training, BoolAt(c, 5));
    mom_at = 6;
  }
  EMBER_ASSIGN_OR_RETURN(Val momentum, ValAt(c, mom_at));
  EMBER_ASSIGN_OR_RETURN(Val eps, ValAt(c, mom_at + 1));
  if (!IsFloat(x.dtype) || x.sizes.size() < 2)
    return Declined("batch norm of integers or rank < 2");
  if (!training && (!rm || !rv)) return Declined("eval batch norm without running stats");
  if (kForm == 1 && training && rm) return Declined("native_batch_norm would mutate running stats");
  size_t nout = kForm == 0 ? 5 : 3;
  if (c.outputs.size() != nout) return InvalidArgument(c.op, ": expected ", nout, " outputs");
  DType t = StatType(x.dtype);
  BnLayout l = BnDims(x.sizes);
  NodeId v = ConvertTo(b, x.value, t);
  NodeId mean{}, var{}, save_mean{},
      save_rstd{};  // set on every path below; {} quiets -Wmaybe-uninitialized
  NodeId eps_k = ScalarIn(b, eps, t, l.kept);
  if (training) {
    std::tie(mean, var) = Moments(b, v, x.sizes, l.dims);
    save_mean = mean;
    save_rstd = b.Unary(OpKind::kRsqrt, b.Add(var, eps_k));
  } else {
    mean = b.Reshape(ConvertTo(b, rm->value, t), l.kept);
    var = b.Reshape(ConvertTo(b, rv->value, t), l.kept);
  }
  NodeId rstd = training ? save_rstd : b.Unary(OpKind::kRsqrt, b.Add(var, eps_k));
  NodeId xhat =
      b.Multiply(b.Subtract(v, Bcast(b, mean, l.kept, x.sizes)), Bcast(b, rstd, l.kept, x.sizes));
  NodeId y = xhat;
  if (w) y = b.Multiply(y, ChannelVec(b, *w, t, l));
  if (bias) y = b.Add(y, ChannelVec(b, *bias, t, l));
  std::vector<NodeId> r = {Finish(b, y, c.outputs[0])};
  auto stat_out = [&](NodeId s, const OutputMeta& o) {
    int64_t n = 1;
    for (int64_t d : o.sizes) n *= d;
    if (n == 0) return Splat(b, o.dtype, 0, o.sizes);  // eval: eager returns empty tensors
    return Finish(b, b.Reshape(s, o.sizes), o);
  };
  if (training) {
    r.push_back(stat_out(save_mean, c.outputs[1]));
    r.push_back(stat_out(save_rstd, c.outputs[2]));
  } else {
    r.push_back(stat_out(mean, c.outputs[1]));
    r.push_back(stat_out(rstd, c.outputs[2]));
  }
  if (kForm == 0) {
    for (int k = 0; k < 2; ++k) {
      const TensorArg& run = k == 0 ? *rm : *rv;
      const OutputMeta& o = c.outputs[3 + k];
      if (!training) {
        r.push_back(Finish(b, run.value, o));
        continue;
      }
      int64_t ch = x.sizes[1];
      DType rt = ComputeType(run.dtype);
      NodeId m = ScalarIn(b, momentum, rt, {ch});
      NodeId stat = b.Reshape(ConvertTo(b, k == 0 ? mean : var, rt), {ch});
      if (k == 1) {
        double unbias = l.count > 1 ? static_cast<double>(l.count) / (l.count - 1) : INFINITY;
        stat = b.Multiply(stat, Splat(b, rt, unbias, {ch}));
      }
      NodeId old = ConvertTo(b, run.value, rt);
      NodeId upd =
          b.Add(b.Multiply(b.Subtract(Splat(b, rt, 1, {ch}), m), old), b.Multiply(m, stat));
      r.push_back(Finish(b, b.Reshape(upd, o.sizes), o));
    }
  }
  return CheckOutputs(b, c, r);
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?,
//   running_var?, save_mean?, save_invstd?, train, eps, output_mask)
LowerResult LowerBatchNormBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg g, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(auto w, OptTensorAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(auto rm, OptTensorAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(auto rv, OptTensorAt(c, 4));
  EMBER_ASSIGN_OR_RETURN(auto sm, OptTensorAt(c, 5));
  EMBER_ASSIGN_OR_RETURN(auto sr, OptTensorAt(c, 6));
  EMBER_ASSIGN_OR_RETURN(bool train, BoolAt(c, 7));
  EMBER_ASSIGN_OR_RETURN(Val eps, ValAt(c, 8));
  if (!IsFloat(x.dtype) || x.sizes.size() < 2)
    return Declined("batch norm of integers or rank < 2");
  if (train && (!sm || !sr)) return Declined("training backward without saved stats");
  if (!train && (!rm || !rv)) return Declined("eval backward without running stats");
  if (c.outputs.size() != 3) return InvalidArgument(c.op, ": expected three outputs");
  DType t = StatType(x.dtype);
  BnLayout l = BnDims(x.sizes);
  NodeId v = ConvertTo(b, x.value, t), gv = ConvertTo(b, g.value, t);
  NodeId mean, rstd;
  if (train) {
    mean = b.Reshape(ConvertTo(b, sm->value, t), l.kept);
    rstd = b.Reshape(ConvertTo(b, sr->value, t), l.kept);
  } else {
    mean = b.Reshape(ConvertTo(b, rm->value, t), l.kept);
    rstd = b.Unary(OpKind::kRsqrt, b.Add(b.Reshape(ConvertTo(b, rv->value, t), l.kept),
                                         ScalarIn(b, eps, t, l.kept)));
  }
  NodeId rstd_f = Bcast(b, rstd, l.kept, x.sizes);
  NodeId xhat = b.Multiply(b.Subtract(v, Bcast(b, mean, l.kept, x.sizes)), rstd_f);
  std::vector<NodeId> r(3, kInvalidNode);
  if (Mask(c, 9, 0)) {
    NodeId gw = w ? b.Multiply(gv, ChannelVec(b, *w, t, l)) : gv;
    NodeId dx =
        train ? NormInputGrad(b, gw, xhat, rstd_f, x.sizes, l.dims) : b.Multiply(gw, rstd_f);
    r[0] = Finish(b, dx, c.outputs[0]);
  }
  if (Mask(c, 9, 1)) r[1] = SumTo(b, b.Multiply(gv, xhat), l.dims, c.outputs[1]);
  if (Mask(c, 9, 2)) r[2] = SumTo(b, gv, l.dims, c.outputs[2]);
  return CheckOutputs(b, c, r);
}

}  // namespace

void RegisterNorm(LoweringTable& t) {
  t.Add("aten::native_layer_norm", LowerLayerNorm);
  t.Add("aten::native_layer_norm_backward", LowerLayerNormBackward);
  t.Add("aten::native_group_norm", LowerGroupNorm);
  t.Add("aten::native_group_norm_backward", LowerGroupNormBackward);
  t.Add("aten::_native_batch_norm_legit_functional", LowerBatchNorm<0>);
  t.Add("aten::native_batch_norm", LowerBatchNorm<1>);
  t.Add("aten::_native_batch_norm_legit_no_training", LowerBatchNorm<2>);
  t.Add("aten::native_batch_norm_backward", LowerBatchNormBackward);
}

}  // namespace ember::lowering
