// Random ops on the graph's Philox generator (rng-uniform / rng-normal with
// the call's (seed, offset) graph inputs and stream number, AtenCall::rng):
// rand, rand_like, randn, randn_like, uniform (functional uniform_),
// normal_functional (functional normal_), bernoulli (probabilities tensor),
// bernoulli.p, randint (.low), native_dropout and native_dropout_backward.
// Values follow eager's definitions, not its bit streams: U[0,1) scaled to
// [from, to), mean + std * N(0,1), bernoulli(p) = U < p; dropout keeps an
// element with probability 1 - p and scales kept ones by 1/(1 - p) (0 when
// p == 1, as eager). bf16/f16 results are drawn in f32 and rounded. A call without
// AtenCall::rng declines (the bridge did not give it a generator state).
#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

Status NeedRng(const AtenCall& c) {
  if (!c.rng) return Declined("random op without (seed, offset) inputs");
  return DeclineComplex(c);
}

NodeId Uniform(GraphBuilder& b, const AtenCall& c, DType t, const std::vector<int64_t>& sizes) {
  return b.RngUniform(c.rng->first, c.rng->second, Shape(t, sizes), c.rng_stream);
}

NodeId Normal(GraphBuilder& b, const AtenCall& c, DType t, const std::vector<int64_t>& sizes) {
  return b.RngNormal(c.rng->first, c.rng->second, Shape(t, sizes), c.rng_stream);
}

DType DrawType(DType out) { return out == DType::kF64 ? DType::kF64 : DType::kF32; }

// rand / rand_like / randn / randn_like: only the output metadata matters.
template <bool kNormal>
LowerResult LowerDraw(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(NeedRng(c));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("random draw of a non-floating dtype");
  DType t = DrawType(out.dtype);
  NodeId r = kNormal ? Normal(b, c, t, out.sizes) : Uniform(b, c, t, out.sizes);
  return CheckOutputs(b, c, {Finish(b, r, out)});
}

// uniform(self, from=0, to=1, *, generator) -> from + (to - from) * U
// normal_functional(self, mean=0, std=1, *, generator) -> mean + std * N
template <bool kNormal>
LowerResult LowerAffineDraw(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(NeedRng(c));
  EMBER_ASSIGN_OR_RETURN(Val a, ValAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(Val s, ValAt(c, 2));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("random draw of a non-floating dtype");
  DType t = DrawType(out.dtype);
  a.tier = s.tier = PromoTier::kWrapped;
  NodeId av = Prepare(b, a, t, t, out.sizes), sv = Prepare(b, s, t, t, out.sizes);
  NodeId r = kNormal ? b.Add(av, b.Multiply(sv, Normal(b, c, t, out.sizes)))
                     : b.Add(av, b.Multiply(b.Subtract(sv, av), Uniform(b, c, t, out.sizes)));
  return CheckOutputs(b, c, {Finish(b, r, out)});
}

// bernoulli(self, *, generator): self holds probabilities.
// bernoulli.p(self, p=0.5, *, generator): one probability.
template <bool kScalarP>
LowerResult LowerBernoulli(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(NeedRng(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  const OutputMeta& out = c.outputs.at(0);
  DType t = DrawType(IsFloat(x.dtype) ? x.dtype : DType::kF32);
  NodeId p;
  if (kScalarP) {
    EMBER_ASSIGN_OR_RETURN(Val pv, ValAt(c, 1));
    pv.tier = PromoTier::kWrapped;
    p = Prepare(b, pv, t, t, out.sizes);
  } else {
    if (!IsFloat(x.dtype)) return Declined("bernoulli of non-floating probabilities");
    p = ConvertTo(b, x.value, t);
  }
  NodeId hit = b.Compare(Uniform(b, c, t, out.sizes), p, ComparisonKind::kLt);
  return CheckOutputs(b, c, {Finish(b, hit, out)});
}

// native_dropout(input, p, train?) -> (output, mask)
LowerResult LowerNativeDropout(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(Val p, ValAt(c, 1));
  bool train = true;
  if (!IsNoneAt(c, 2)) {
    EMBER_ASSIGN_OR_RETURN(train, BoolAt(c, 2));
  }
  if (c.outputs.size() != 2) return InvalidArgument(c.op, ": expected two outputs");
  const OutputMeta& out = c.outputs[0];
  const OutputMeta& mout = c.outputs[1];
  if (!IsFloat(out.dtype)) return Declined("dropout of non-floating values");
  if (!train) {
    return CheckOutputs(b, c, {x.value, Splat(b, mout.dtype, 1, mout.sizes)});
  }
  if (!c.rng) return Declined("random op without (seed, offset) inputs");
  DType t = ComputeType(out.dtype);
  p.tier = PromoTier::kWrapped;
  NodeId keep_p =
      b.Subtract(Splat(b, DType::kF64, 1, {}), Prepare(b, p, DType::kF64, DType::kF64, {}));
  NodeId zero = b.ConstantScalar(DType::kF64, 0);
  NodeId scale = b.Select(b.Compare(keep_p, zero, ComparisonKind::kEq), zero,
                          b.Divide(b.ConstantScalar(DType::kF64, 1), keep_p));
  NodeId u = Uniform(b, c, DType::kF32, x.sizes);
  NodeId mask = b.Compare(u, BroadcastTo(b, ConvertTo(b, keep_p, DType::kF32), {}, x.sizes),
                          ComparisonKind::kLt);
  NodeId xv = ConvertTo(b, x.value, t);
  NodeId kept = b.Multiply(xv, ConvertTo(b, mask, t));
  NodeId y = b.Multiply(kept, BroadcastTo(b, ConvertTo(b, scale, t), {}, x.sizes));
  return CheckOutputs(b, c, {Finish(b, y, out), Finish(b, mask, mout)});
}

// native_dropout_backward(grad_output, mask, scale) = grad * mask * scale
LowerResult LowerNativeDropoutBackward(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(Val g, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg mask, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(Val scale, ValAt(c, 2));
  const OutputMeta& out = c.outputs.at(0);
  if (!IsFloat(out.dtype)) return Declined("non-floating gradient");
  Ew e(b, out.dtype, out.sizes);
  Val m = ValOf(mask);
  NodeId r = b.Multiply(b.Multiply(e(g), e(m)), e(scale));
  return CheckOutputs(b, c, {Finish(b, r, out)});
}

// randint(high, size, ...), randint.low(low, high, size, ...): low +
// floor(U * (high - low)) with U an f64 draw in [0, 1) (uniform over the
// range up to f64 rounding; eager draws 32/64-bit integers modulo the range),
// capped at high - 1.
template <bool kLow>
LowerResult LowerRandint(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(NeedRng(c));
  int64_t low = 0, high;
  if (kLow) {
    EMBER_ASSIGN_OR_RETURN(low, IntAt(c, 0));
    EMBER_ASSIGN_OR_RETURN(high, IntAt(c, 1));
  } else {
    EMBER_ASSIGN_OR_RETURN(high, IntAt(c, 0));
  }
  const OutputMeta& out = c.outputs.at(0);
  if (high <= low) return Declined("randint with high <= low (eager raises)");
  if (static_cast<uint64_t>(high) - static_cast<uint64_t>(low) > (uint64_t{1} << 53))
    return Declined("randint range above 2^53");
  if (!IsInteger(out.dtype) && !IsFloat(out.dtype)) return Declined("randint dtype");
  NodeId u = Uniform(b, c, DType::kF64, out.sizes);
  NodeId v =
      b.Unary(OpKind::kFloor, b.Multiply(u, Splat(b, DType::kF64, double(high - low), out.sizes)));
  v = b.Minimum(v, Splat(b, DType::kF64, double(high - low - 1), out.sizes));
  NodeId r = b.Add(ConvertTo(b, v, DType::kS64), Splat(b, DType::kS64, double(low), out.sizes));
  return CheckOutputs(b, c, {ConvertTo(b, r, out.dtype)});
}

}  // namespace

void RegisterRandom(LoweringTable& t) {
  t.Add("aten::randint", LowerRandint<false>);
  t.Add("aten::randint.low", LowerRandint<true>);
  t.Add("aten::rand", LowerDraw<false>);
  t.Add("aten::rand_like", LowerDraw<false>);
  t.Add("aten::randn", LowerDraw<true>);
  t.Add("aten::randn_like", LowerDraw<true>);
  t.Add("aten::uniform", LowerAffineDraw<false>);
  t.Add("aten::normal_functional", LowerAffineDraw<true>);
  t.Add("aten::bernoulli", LowerBernoulli<false>);
  t.Add("aten::bernoulli.p", LowerBernoulli<true>);
  t.Add("aten::native_dropout", LowerNativeDropout);
  t.Add("aten::native_dropout_backward", LowerNativeDropoutBackward);
}

}  // namespace ember::lowering
