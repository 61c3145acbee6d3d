// The two ops of torch.amp.GradScaler, in their functional forms (what
// functionalization records for `_amp_foreach_non_finite_check_and_unscale_`
// and `_amp_update_scale_`), lowered to core ops so a scaled training step has
// no ATen extern (eager's CPU kernels: aten/src/ATen/native/cpu/
// AmpGradScalerKernels.cpp; the semantics below were checked against them bit
// for bit, tests/python/test_amp.py):
//
//   _amp_foreach_non_finite_check_and_unscale(Tensor[] self, Tensor found_inf,
//       Tensor inv_scale) -> (Tensor[] self_out, Tensor found_inf_out)
//     self_out[i] = self[i] * inv_scale, computed in f32 for f16/bf16 grads
//     (f64 for f64) and rounded once to the grad's dtype;
//     found_inf_out = 1 if any element of any self[i] is inf or NaN, else
//     found_inf unchanged (the flag accumulates over calls, never resets).
//   _amp_update_scale(Tensor self, Tensor growth_tracker, Tensor found_inf,
//       float scale_growth_factor, float scale_backoff_factor,
//       int growth_interval) -> (Tensor, Tensor growth_tracker_out)
//     found_inf != 0 (NaN counts):  scale * backoff, tracker 0;
//     else tracker + 1 == growth_interval:  scale * growth if that is finite
//       (else scale unchanged), tracker 0;
//     else: scale unchanged, tracker + 1.
//     The products are eager's: the f32 scale times the f64 factor in f64,
//     rounded once to f32.
// found_inf, inv_scale, scale and growth_tracker hold one element each (0-d
// or [1], as GradScaler makes them); scale and found_inf are f32, the tracker
// s32 (other dtypes decline).
#include <cmath>

#include "lowering/lower_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

// The one element of a single-element tensor as a 0-d value of dtype `to`.
StatusOr<NodeId> Scalar0d(GraphBuilder& b, const AtenCall& c, const TensorArg& t, DType to) {
  int64_t n = 1;
  for (int64_t d : t.sizes) n *= d;
  if (n != 1)
    return InvalidArgument(c.op, ": expected a one-element tensor, got ", t.sizes.size(),
                           "-d with ", n, " elements");
  NodeId v = t.sizes.empty() ? t.value : b.Reshape(t.value, {});
  return ConvertTo(b, v, to);
}

// A 0-d value back to `out`'s sizes (0-d or [1]) and dtype.
NodeId Back(GraphBuilder& b, NodeId v, const OutputMeta& out) {
  NodeId r = ConvertTo(b, v, out.dtype);
  return out.sizes.empty() ? r : b.Reshape(r, out.sizes);
}

bool OneElementF32(const TensorArg& t) {
  int64_t n = 1;
  for (int64_t d : t.sizes) n *= d;
  return n == 1 && t.dtype == DType::kF32;
}

// pred[] : whether any element of x is inf or NaN (!(|x| < inf)).
NodeId AnyNonFinite(GraphBuilder& b, const TensorArg& x) {
  const DType ct = x.dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  NodeId v = ConvertTo(b, x.value, ct);
  NodeId finite =
      b.Compare(b.Unary(OpKind::kAbs, v), Splat(b, ct, INFINITY, x.sizes), ComparisonKind::kLt);
  NodeId bad = b.Unary(OpKind::kNot, finite);
  if (x.sizes.empty()) return bad;
  std::vector<int64_t> all(x.sizes.size());
  for (size_t d = 0; d < all.size(); ++d) all[d] = static_cast<int64_t>(d);
  return b.Reduce(bad, all, ReduceKind::kOr);
}

LowerResult LowerUnscale(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(auto grads, TensorListAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg found, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(TensorArg inv, TensorAt(c, 2));
  if (c.outputs.size() != grads.size() + 1)
    return InvalidArgument(c.op, ": expected ", grads.size() + 1, " outputs");
  for (const auto& g : grads) {
    if (!g) return InvalidArgument(c.op, ": absent tensor in the gradient list");
    if (!IsFloat(g->dtype)) return Declined("non-floating gradients");
  }
  if (!OneElementF32(found) || !OneElementF32(inv))
    return Declined("found_inf and inv_scale must be one-element f32 tensors");
  std::vector<NodeId> outs;
  NodeId any = kInvalidNode;
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorArg& g = *grads[i];
    const DType ct = ComputeType(g.dtype);
    EMBER_ASSIGN_OR_RETURN(NodeId s, Scalar0d(b, c, inv, ct));
    NodeId x = ConvertTo(b, g.value, ct);
    NodeId scaled = b.Multiply(x, g.sizes.empty() ? s : b.BroadcastInDim(s, g.sizes, {}));
    outs.push_back(Finish(b, scaled, c.outputs[i]));
    NodeId bad = AnyNonFinite(b, g);
    any = any == kInvalidNode ? bad : b.Binary(OpKind::kOr, any, bad);
  }
  EMBER_ASSIGN_OR_RETURN(NodeId f, Scalar0d(b, c, found, DType::kF32));
  NodeId flag = any == kInvalidNode ? f : b.Select(any, b.ConstantScalar(DType::kF32, 1), f);
  outs.push_back(Back(b, flag, c.outputs.back()));
  return CheckOutputs(b, c, std::move(outs));
}

LowerResult LowerUpdateScale(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(TensorArg scale, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg tracker, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(TensorArg found, TensorAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(ScalarArg growth, ScalarAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(ScalarArg backoff, ScalarAt(c, 4));
  EMBER_ASSIGN_OR_RETURN(int64_t interval, IntAt(c, 5));
  if (c.outputs.size() != 2) return InvalidArgument(c.op, ": expected 2 outputs");
  if (!OneElementF32(scale) || !OneElementF32(found) || tracker.dtype != DType::kS32 ||
      tracker.sizes.size() > 1 || (tracker.sizes.size() == 1 && tracker.sizes[0] != 1))
    return Declined("scale/found_inf must be one-element f32, growth_tracker one-element s32");
  EMBER_ASSIGN_OR_RETURN(NodeId s, Scalar0d(b, c, scale, DType::kF64));
  EMBER_ASSIGN_OR_RETURN(NodeId t, Scalar0d(b, c, tracker, DType::kS32));
  EMBER_ASSIGN_OR_RETURN(NodeId f, Scalar0d(b, c, found, DType::kF32));
  auto f32_product = [&](const ScalarArg& factor) {
    return ConvertTo(b, b.Multiply(s, ConvertTo(b, factor.value, DType::kF64)), DType::kF32);
  };
  NodeId s32 = ConvertTo(b, s, DType::kF32);
  NodeId backed = f32_product(backoff);
  NodeId grown = f32_product(growth);
  NodeId grown_finite = b.Compare(b.Unary(OpKind::kAbs, grown),
                                  b.ConstantScalar(DType::kF32, INFINITY), ComparisonKind::kLt);
  NodeId succ = b.Add(t, b.ConstantScalar(DType::kS32, 1));
  NodeId grow = b.Compare(succ, b.ConstantScalar(DType::kS32, static_cast<double>(interval)),
                          ComparisonKind::kEq);
  NodeId is_found = b.Compare(f, b.ConstantScalar(DType::kF32, 0), ComparisonKind::kNe);
  NodeId zero = b.ConstantScalar(DType::kS32, 0);
  // NaN != 0 is true, as eager's `if (*found_inf)`.
  NodeId not_found_scale = b.Select(grow, b.Select(grown_finite, grown, s32), s32);
  NodeId new_scale = b.Select(is_found, backed, not_found_scale);
  NodeId new_tracker = b.Select(is_found, zero, b.Select(grow, zero, succ));
  return CheckOutputs(b, c, {Back(b, new_scale, c.outputs[0]), Back(b, new_tracker, c.outputs[1])});
}

}  // namespace

void RegisterAmp(LoweringTable& t) {
  t.Add("aten::_amp_foreach_non_finite_check_and_unscale", LowerUnscale);
  t.Add("aten::_amp_update_scale", LowerUpdateScale);
}

}  // namespace ember::lowering
