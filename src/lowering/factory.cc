// Factories: arange (3 overloads), full/full_like/new_full, ones/zeros and
// their _like/new_ forms, scalar_tensor, fill (.Scalar, .Tensor), zero.
// Fill values and arange's start/end/step are graph inputs; dtype and sizes
// come from Meta. arange computes start + i * step in f64 (s64 for integer
// results) and converts once, like eager's CPU kernel (accumulate type).
#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

NodeId Fill(GraphBuilder& b, const Val& v, const OutputMeta& out) {
  Val w = v;
  w.tier = PromoTier::kWrapped;
  return Prepare(b, w, out.dtype, out.dtype, out.sizes);
}

// Constant-valued factories; value_at < 0: the constant `value`.
template <int kValueAt, int kConst>
LowerResult LowerConstant(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  const OutputMeta& out = c.outputs.at(0);
  if (kValueAt < 0) return CheckOutputs(b, c, {Splat(b, out.dtype, kConst, out.sizes)});
  EMBER_ASSIGN_OR_RETURN(Val v, ValAt(c, kValueAt));
  if (v.tier != PromoTier::kWrapped && !v.sizes.empty())
    return InvalidArgument(c.op, ": the fill value must be 0-d");
  return CheckOutputs(b, c, {Fill(b, v, out)});
}

// arange(end, ...), arange.start(start, end, ...), arange.start_step(start, end, step, ...)
template <int kForm>  // 0: end, 1: start/end, 2: start/end/step
LowerResult LowerArange(GraphBuilder& b, const AtenCall& c) {
  const OutputMeta& out = c.outputs.at(0);
  if (IsComplex(out.dtype) || out.dtype == DType::kPred) return Declined("arange dtype");
  if (out.sizes.size() != 1) return InvalidArgument(c.op, ": arange is 1-d");
  DType t = IsFloat(out.dtype) ? DType::kF64 : DType::kS64;
  std::optional<Val> start, step;
  if (kForm >= 1) {
    EMBER_ASSIGN_OR_RETURN(start, OptValAt(c, 0));
  }
  if (kForm == 2) {
    EMBER_ASSIGN_OR_RETURN(step, OptValAt(c, 2));
  }
  int64_t n = out.sizes[0];
  auto in = [&](const std::optional<Val>& v, double def) {
    if (!v) return Splat(b, t, def, {n});
    Val w = *v;
    w.tier = PromoTier::kWrapped;
    return Prepare(b, w, t, t, {n});
  };
  NodeId i = ConvertTo(b, b.Iota(Shape(DType::kS64, {n}), 0), t);
  NodeId r = b.Add(in(start, 0), b.Multiply(i, in(step, 1)));
  return CheckOutputs(b, c, {ConvertTo(b, r, out.dtype)});
}

}  // namespace

void RegisterFactory(LoweringTable& t) {
  t.Add("aten::full", LowerConstant<1, 0>);
  t.Add("aten::full_like", LowerConstant<1, 0>);
  t.Add("aten::new_full", LowerConstant<2, 0>);
  t.Add("aten::scalar_tensor", LowerConstant<0, 0>);
  t.Add("aten::fill.Scalar", LowerConstant<1, 0>);
  t.Add("aten::fill.Tensor", LowerConstant<1, 0>);
  for (const char* o : {"aten::zeros", "aten::zeros_like", "aten::new_zeros", "aten::zero"})
    t.Add(o, LowerConstant<-1, 0>);
  for (const char* o : {"aten::ones", "aten::ones_like", "aten::new_ones"})
    t.Add(o, LowerConstant<-1, 1>);
  t.Add("aten::arange", LowerArange<0>);
  t.Add("aten::arange.start", LowerArange<1>);
  t.Add("aten::arange.start_step", LowerArange<2>);
}

}  // namespace ember::lowering
