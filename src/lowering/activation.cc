// Activations and their backward ops, plus softmax/log_softmax and their
// backward. Formulas are eager's CPU kernels
// (aten/src/ATen/native/cpu/Activation.cpp, SoftMaxKernel.cpp), re-derived:
//   gelu(none)  = x/2 (1 + erf(x/sqrt2));  gelu(tanh) = x/2 (1 + tanh(b (x + k x^3)))
//   silu = x / (1 + e^-x); mish = x tanh(log1p(e^x));
//   elu  = x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale
//   softplus = x*beta > threshold ? x : log1p(e^(x*beta)) / beta
//   softmax = e^(x - max) / sum e^(x - max), log_softmax = x - max - log sum e^(x - max)
// bf16/f16 compute in f32 and round once, as eager's opmath kernels.
// Scalar parameters (slopes, alpha, beta, thresholds) are graph inputs.
#include <cmath>

#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/reduction_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;  // 1/sqrt(2)
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kKappa = 0.044715;

NodeId Cmp(GraphBuilder& b, NodeId x, NodeId y, ComparisonKind k) { return b.Compare(x, y, k); }

// Common preamble: every Tensor/Scalar argument at positions `idx` prepared
// in the output's computation dtype.
struct Prepared {
  std::vector<NodeId> v;
  Ew e;
};

StatusOr<Prepared> PrepareArgs(GraphBuilder& b, const AtenCall& c, std::vector<size_t> idx) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("non-floating activation");
  std::vector<Val> vals;
  for (size_t i : idx) {
    EMBER_ASSIGN_OR_RETURN(Val v, ValAt(c, i));
    vals.push_back(v);
  }
  Prepared p{{}, Ew(b, out.dtype, out.sizes)};
  for (const Val& v : vals) p.v.push_back(p.e(v));
  return p;
}

LowerResult Done(GraphBuilder& b, const AtenCall& c, NodeId r) {
  return CheckOutputs(b, c, {Finish(b, r, c.outputs.at(0))});
}

// gelu(self, *, str approximate='none'); gelu_backward(grad, self, *, approximate)
template <bool kBackward>
LowerResult LowerGelu(GraphBuilder& b, const AtenCall& c) {
  size_t approx_at = kBackward ? 2 : 1;
  EMBER_ASSIGN_OR_RETURN(auto approx, OptStringAt(c, approx_at));
  bool tanh = approx && *approx == "tanh";
  if (approx && !tanh && *approx != "none") return Declined("gelu approximate=" + *approx);
  EMBER_ASSIGN_OR_RETURN(
      Prepared p,
      PrepareArgs(b, c, kBackward ? std::vector<size_t>{0, 1} : std::vector<size_t>{0}));
  Ew& e = p.e;
  NodeId x = p.v.back();
  NodeId half = e.Const(0.5), one = e.Const(1);
  if (!tanh) {
    NodeId cdf =
        b.Multiply(half, b.Add(one, b.Unary(OpKind::kErf, b.Multiply(x, e.Const(kSqrt1_2)))));
    if (!kBackward) return Done(b, c, b.Multiply(x, cdf));
    NodeId pdf = b.Multiply(e.Const(kTwoOverSqrtPi * kSqrt1_2 * 0.5),
                            b.Exp(b.Multiply(b.Multiply(x, x), e.Const(-0.5))));
    return Done(b, c, b.Multiply(p.v[0], b.Add(cdf, b.Multiply(x, pdf))));
  }
  NodeId beta = e.Const(kSqrt2 * kTwoOverSqrtPi * 0.5);
  NodeId x_sq = b.Multiply(x, x);
  NodeId x_cube = b.Multiply(x_sq, x);
  NodeId inner = b.Multiply(beta, b.Add(x, b.Multiply(e.Const(kKappa), x_cube)));
  NodeId t = b.Unary(OpKind::kTanh, inner);
  if (!kBackward) return Done(b, c, b.Multiply(b.Multiply(half, x), b.Add(one, t)));
  NodeId left = b.Multiply(half, x);
  NodeId right = b.Add(one, t);
  NodeId left_d = b.Multiply(half, right);
  NodeId tanh_d = b.Subtract(one, b.Multiply(t, t));
  NodeId inner_d = b.Multiply(beta, b.Add(one, b.Multiply(e.Const(3 * kKappa), x_sq)));
  NodeId right_d = b.Multiply(b.Multiply(left, tanh_d), inner_d);
  return Done(b, c, b.Multiply(p.v[0], b.Add(left_d, right_d)));
}

NodeId Sigmoid(GraphBuilder& b, const Ew& e, NodeId x) {
  return b.Divide(e.Const(1), b.Add(e.Const(1), b.Exp(b.Negate(x))));
}

LowerResult LowerSilu(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(Prepared p, PrepareArgs(b, c, {0}));
  NodeId x = p.v[0];
  return Done(b, c, b.Divide(x, b.Add(p.e.Const(1), b.Exp(b.Negate(x)))));
}

// silu_backward(grad_output, self) = dy * s * (1 + x (1 - s)), s = sigmoid(x)
LowerResult LowerSiluBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(Prepared p, PrepareArgs(b, c, {0, 1}));
  NodeId x = p.v[1], one = p.e.Const(1);
  NodeId s = Sigmoid(b, p.e, x);
  return Done(b, c,
              b.Multiply(b.Multiply(p.v[0], s), b.Add(one, b.Multiply(x, b.Subtract(one, s)))));
}

// sigmoid_backward(grad_output, output) = dy * (1 - y) * y
LowerResult LowerSigmoidBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(Prepared p, PrepareArgs(b, c, {0, 1}));
  NodeId y = p.v[1];
  return Done(b, c, b.Multiply(b.Multiply(p.v[0], b.Subtract(p.e.Const(1), y)), y));
}

// tanh_backward(grad_output, output) = dy * (1 - y^2)
LowerResult LowerTanhBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(Prepared p, PrepareArgs(b, c, {0, 1}));
  NodeId y = p.v[1];
  return Done(b, c, b.Multiply(p.v[0], b.Subtract(p.e.Const(1), b.Multiply(y, y))));
}

// threshold_backward(grad_output, self, threshold) = self <= threshold ? 0 : dy
LowerResult LowerThresholdBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val g, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(Val th, ValAt(c, 2));
  const OutputMeta& out = c.outputs.at(0);
  if (out.dtype == DType::kPred) return Declined("bool threshold_backward");
  Ew e(b, out.dtype, out.sizes);
  NodeId xv = e(x);
  NodeId r = b.Select(Cmp(b, xv, e(th), ComparisonKind::kLe), e.Const(0), e(g));
  return Done(b, c, r);
}

// threshold(self, threshold, value) = self <= threshold ? value : self
LowerResult LowerThreshold(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val x, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val th, ValAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(Val v, ValAt(c, 2));
  const OutputMeta& out = c.outputs.at(0);
  if (out.dtype == DType::kPred) return Declined("bool threshold");
  Ew e(b, out.dtype, out.sizes);
  NodeId xv = e(x);
  return Done(b, c, b.Select(Cmp(b, xv, e(th), ComparisonKind::kLe), e(v), xv));
}

// hardtanh(self, min_val, max_val) = clamp; hardtanh_backward(grad, self, min, max)
// = (self <= min || self >= max) ? 0 : grad
template <bool kBackward>
LowerResult LowerHardtanh(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(Prepared p, PrepareArgs(b, c,
                                                 kBackward ? std::vector<size_t>{0, 1, 2, 3}
                                                           : std::vector<size_t>{0, 1, 2}));
  if (!kBackward) return Done(b, c, b.Minimum(b.Maximum(p.v[0], p.v[1]), p.v[2]));
  NodeId x = p.v[1];
  NodeId out_of = b.Binary(OpKind::kOr, Cmp(b, x, p.v[2], ComparisonKind::kLe),
                           Cmp(b, x, p.v[3], ComparisonKind::kGe));
  return Done(b, c, b.Select(out_of, p.e.Const(0), p.v[0]));
}

// leaky_relu(self, negative_slope) = x > 0 ? x : x * slope;
// leaky_relu_backward(grad, self, negative_slope, self_is_result) = x > 0 ? dy : dy * slope
template <bool kBackward>
LowerResult LowerLeakyRelu(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(
      Prepared p,
      PrepareArgs(b, c, kBackward ? std::vector<size_t>{0, 1, 2} : std::vector<size_t>{0, 1}));
  NodeId x = p.v[kBackward ? 1 : 0], slope = p.v.back();
  NodeId pos = Cmp(b, x, p.e.Const(0), ComparisonKind::kGt);
  NodeId v = kBackward ? p.v[0] : x;
  return Done(b, c, b.Select(pos, v, b.Multiply(v, slope)));
}

// elu(self, alpha, scale, input_scale);
// elu_backward(grad, alpha, scale, input_scale, bool is_result, self_or_result)
template <bool kBackward>
LowerResult LowerElu(GraphBuilder& b, const AtenCall& c) {
  bool is_result = false;
  if (kBackward) {
    EMBER_ASSIGN_OR_RETURN(is_result, BoolAt(c, 4));
  }
  EMBER_ASSIGN_OR_RETURN(Prepared p, PrepareArgs(b, c,
                                                 kBackward ? std::vector<size_t>{0, 1, 2, 3, 5}
                                                           : std::vector<size_t>{0, 1, 2, 3}));
  NodeId alpha = p.v[1], scale = p.v[2], in_scale = p.v[3];
  NodeId negcoef = b.Multiply(alpha, scale);
  NodeId zero = p.e.Const(0);
  if (!kBackward) {
    NodeId x = p.v[0];
    NodeId neg = b.Multiply(b.Unary(OpKind::kExpm1, b.Multiply(x, in_scale)), negcoef);
    return Done(b, c, b.Select(Cmp(b, x, zero, ComparisonKind::kLe), neg, b.Multiply(x, scale)));
  }
  NodeId g = p.v[0], y = p.v[4];
  NodeId neg = is_result ? b.Multiply(b.Multiply(g, in_scale), b.Add(y, negcoef))
                         : b.Multiply(b.Multiply(b.Multiply(g, in_scale), negcoef),
                                      b.Exp(b.Multiply(y, in_scale)));
  return Done(b, c, b.Select(Cmp(b, y, zero, ComparisonKind::kLe), neg, b.Multiply(g, scale)));
}

// softplus(self, beta, threshold); softplus_backward(grad, self, beta, threshold)
template <bool kBackward>
LowerResult LowerSoftplus(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(Prepared p, PrepareArgs(b, c,
                                                 kBackward ? std::vector<size_t>{0, 1, 2, 3}
                                                           : std::vector<size_t>{0, 1, 2}));
  size_t o = kBackward ? 1 : 0;
  NodeId x = p.v[o], beta = p.v[o + 1], th = p.v[o + 2];
  NodeId xb = b.Multiply(x, beta);
  NodeId linear = Cmp(b, xb, th, ComparisonKind::kGt);
  if (!kBackward)
    return Done(b, c, b.Select(linear, x, b.Divide(b.Unary(OpKind::kLog1p, b.Exp(xb)), beta)));
  NodeId z = b.Exp(xb);
  NodeId g = p.v[0];
  return Done(b, c, b.Select(linear, g, b.Divide(b.Multiply(g, z), b.Add(z, p.e.Const(1)))));
}

// mish(self) = x tanh(softplus(x)); mish_backward(grad, self)
//   = dy (t + x s (1 - t^2)), t = tanh(softplus(x)), s = sigmoid(x)
template <bool kBackward>
LowerResult LowerMish(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(
      Prepared p,
      PrepareArgs(b, c, kBackward ? std::vector<size_t>{0, 1} : std::vector<size_t>{0}));
  NodeId x = p.v.back();
  NodeId t = b.Unary(OpKind::kTanh, b.Unary(OpKind::kLog1p, b.Exp(x)));
  if (!kBackward) return Done(b, c, b.Multiply(x, t));
  NodeId s = Sigmoid(b, p.e, x);
  NodeId one = p.e.Const(1);
  NodeId d = b.Add(t, b.Multiply(b.Multiply(x, s), b.Subtract(one, b.Multiply(t, t))));
  return Done(b, c, b.Multiply(p.v[0], d));
}

// hardsigmoid = clamp(x/6 + 1/2, 0, 1) (eager: min(max(x + 3, 0), 6) / 6);
// hardswish = x * that.
template <bool kSwish>
LowerResult LowerHardSigmoid(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(Prepared p, PrepareArgs(b, c, {0}));
  NodeId x = p.v[0];
  NodeId r = b.Minimum(b.Maximum(b.Add(x, p.e.Const(3)), p.e.Const(0)), p.e.Const(6));
  if (kSwish) return Done(b, c, b.Divide(b.Multiply(x, r), p.e.Const(6)));
  return Done(b, c, b.Divide(r, p.e.Const(6)));
}

// hardsigmoid_backward(grad, self) = -3 < x < 3 ? dy / 6 : 0
// hardswish_backward(grad, self) = x <= -3 ? 0 : x < 3 ? dy (x / 3 + 1/2) : dy
template <bool kSwish>
LowerResult LowerHardBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(Prepared p, PrepareArgs(b, c, {0, 1}));
  NodeId g = p.v[0], x = p.v[1];
  NodeId three = p.e.Const(3), mthree = p.e.Const(-3), zero = p.e.Const(0);
  if (!kSwish) {
    NodeId inside = b.Binary(OpKind::kAnd, Cmp(b, x, mthree, ComparisonKind::kGt),
                             Cmp(b, x, three, ComparisonKind::kLt));
    return Done(b, c, b.Select(inside, b.Divide(g, p.e.Const(6)), zero));
  }
  NodeId mid = b.Multiply(g, b.Add(b.Divide(x, three), p.e.Const(0.5)));
  NodeId r = b.Select(Cmp(b, x, three, ComparisonKind::kLt), mid, g);
  return Done(b, c, b.Select(Cmp(b, x, mthree, ComparisonKind::kLe), zero, r));
}

// log_sigmoid_forward(self) -> (min(x, 0) - log1p(z), buffer z = e^-|x|)
LowerResult LowerLogSigmoid(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(Prepared p, PrepareArgs(b, c, {0}));
  if (c.outputs.size() != 2) return InvalidArgument(c.op, ": expected two outputs");
  NodeId x = p.v[0];
  NodeId z = b.Exp(b.Negate(b.Unary(OpKind::kAbs, x)));
  NodeId out = b.Subtract(b.Minimum(x, p.e.Const(0)), b.Unary(OpKind::kLog1p, z));
  return CheckOutputs(b, c, {Finish(b, out, c.outputs[0]), Finish(b, z, c.outputs[1])});
}

// log_sigmoid_backward(grad, self, buffer) = dy * ((x < 0) - sign * z / (1 + z)),
// sign = x < 0 ? 1 : -1, z = e^-|x| (recomputed, as eager's CPU kernel).
LowerResult LowerLogSigmoidBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(Prepared p, PrepareArgs(b, c, {0, 1}));
  NodeId g = p.v[0], x = p.v[1];
  NodeId neg = Cmp(b, x, p.e.Const(0), ComparisonKind::kLt);
  NodeId z = b.Exp(b.Negate(b.Unary(OpKind::kAbs, x)));
  NodeId frac = b.Divide(z, b.Add(p.e.Const(1), z));
  NodeId d = b.Select(neg, b.Subtract(p.e.Const(1), frac), frac);
  return Done(b, c, b.Multiply(g, d));
}

// ---- softmax ---------------------------------------------------------------

// _softmax(self, dim, half_to_float) / _log_softmax(...): the maximum is
// subtracted; computed in f32 for bf16/f16 inputs and rounded once.
// _safe_softmax(self, dim, dtype?) (SDPA's math path): rows that are all
// -inf give 0 instead of NaN.
template <bool kLog, bool kSafe = false>
LowerResult LowerSoftmax(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 1));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype) || !IsFloat(x.dtype)) return Declined("softmax of integers");
  int64_t rank = static_cast<int64_t>(x.sizes.size());
  std::vector<int64_t> dims =
      rank == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{WrapDim(dim, rank)};
  DType t =
      ComputeType(out.dtype == DType::kF64 || x.dtype == DType::kF64 ? DType::kF64 : DType::kF32);
  std::vector<int64_t> kept = KeptSizes(x.sizes, dims);
  NodeId v = ConvertTo(b, x.value, t);
  NodeId m = ReduceKeep(b, v, x.sizes, dims, ReduceKind::kMaximum);
  NodeId shifted = b.Subtract(v, BroadcastTo(b, m, kept, x.sizes));
  NodeId e = b.Exp(shifted);
  NodeId s = BroadcastTo(b, ReduceKeep(b, e, x.sizes, dims, ReduceKind::kAdd), kept, x.sizes);
  NodeId r;
  if (kLog) {
    // Eager's bf16/f16 log_softmax over the last dim keeps the sum of exponentials and
    // its log in the input dtype (each rounded), then x - max - log in f32 (measured:
    // bit-identical to torch 2.13 CPU; along another dim it rounds only once).
    const bool reduced =
        (x.dtype == DType::kBF16 || x.dtype == DType::kF16) && out.dtype == x.dtype;
    const bool last = rank > 0 && dims[0] == rank - 1;
    auto round = [&](NodeId v) {
      return reduced && last ? ConvertTo(b, ConvertTo(b, v, x.dtype), t) : v;
    };
    r = b.Subtract(shifted, round(b.Unary(OpKind::kLog, round(s))));
  } else {
    r = b.Divide(e, s);
  }
  if (kSafe) {
    NodeId all_masked = b.Compare(m, Splat(b, t, -INFINITY, kept), ComparisonKind::kEq);
    r = b.Select(BroadcastTo(b, all_masked, kept, x.sizes), Splat(b, t, 0, x.sizes), r);
  }
  return CheckOutputs(b, c, {Finish(b, r, out)});
}

// _softmax_backward_data(grad_output, output, dim, input_dtype)
//   = y * (dy - sum(dy * y, dim));
// _log_softmax_backward_data(grad_output, output, dim, input_dtype)
//   = dy - exp(y) * sum(dy, dim).
template <bool kLog>
LowerResult LowerSoftmaxBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg g, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg y, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(int64_t dim, IntAt(c, 2));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("non-floating softmax gradient");
  int64_t rank = static_cast<int64_t>(y.sizes.size());
  std::vector<int64_t> dims =
      rank == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{WrapDim(dim, rank)};
  DType t = ComputeType(g.dtype == DType::kF64 ? DType::kF64 : DType::kF32);
  std::vector<int64_t> kept = KeptSizes(y.sizes, dims);
  NodeId gv = BroadcastTo(b, ConvertTo(b, g.value, t), g.sizes, y.sizes);
  NodeId yv = ConvertTo(b, y.value, t);
  NodeId r;
  if (kLog) {
    NodeId s = BroadcastTo(b, ReduceKeep(b, gv, y.sizes, dims, ReduceKind::kAdd), kept, y.sizes);
    r = b.Subtract(gv, b.Multiply(b.Exp(yv), s));
  } else {
    NodeId s = BroadcastTo(b, ReduceKeep(b, b.Multiply(gv, yv), y.sizes, dims, ReduceKind::kAdd),
                           kept, y.sizes);
    r = b.Multiply(yv, b.Subtract(gv, s));
  }
  return CheckOutputs(b, c, {Finish(b, r, out)});
}

}  // namespace

void RegisterActivation(LoweringTable& t) {
  t.Add("aten::gelu", LowerGelu<false>);
  t.Add("aten::gelu_backward", LowerGelu<true>);
  t.Add("aten::silu", LowerSilu);
  t.Add("aten::silu_backward", LowerSiluBackward);
  t.Add("aten::sigmoid_backward", LowerSigmoidBackward);
  t.Add("aten::tanh_backward", LowerTanhBackward);
  t.Add("aten::threshold", LowerThreshold);
  t.Add("aten::threshold_backward", LowerThresholdBackward);
  t.Add("aten::hardtanh", LowerHardtanh<false>);
  t.Add("aten::hardtanh_backward", LowerHardtanh<true>);
  t.Add("aten::leaky_relu", LowerLeakyRelu<false>);
  t.Add("aten::leaky_relu_backward", LowerLeakyRelu<true>);
  t.Add("aten::elu", LowerElu<false>);
  t.Add("aten::elu_backward", LowerElu<true>);
  t.Add("aten::softplus", LowerSoftplus<false>);
  t.Add("aten::softplus_backward", LowerSoftplus<true>);
  t.Add("aten::mish", LowerMish<false>);
  t.Add("aten::mish_backward", LowerMish<true>);
  t.Add("aten::hardsigmoid", LowerHardSigmoid<false>);
  t.Add("aten::hardswish", LowerHardSigmoid<true>);
  t.Add("aten::hardsigmoid_backward", LowerHardBackward<false>);
  t.Add("aten::hardswish_backward", LowerHardBackward<true>);
  t.Add("aten::log_sigmoid_forward", LowerLogSigmoid);
  t.Add("aten::log_sigmoid_backward", LowerLogSigmoidBackward);
  t.Add("aten::_softmax", LowerSoftmax<false>);
  t.Add("aten::_log_softmax", LowerSoftmax<true>);
  t.Add("aten::_safe_softmax", LowerSoftmax<false, true>);
  t.Add("aten::_softmax_backward_data", LowerSoftmaxBackward<false>);
  t.Add("aten::_log_softmax_backward_data", LowerSoftmaxBackward<true>);
}

}  // namespace ember::lowering
