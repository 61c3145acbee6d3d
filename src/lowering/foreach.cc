// The _foreach_* ops that SGD, Adam and AdamW (foreach=True) and
// clip_grad_norm_ emit. Each is its per-tensor op applied to element i of the
// lists (outputs flattened, one per tensor): the lowering builds the
// per-element AtenCall and calls the single-tensor lowering, so semantics
// (promotion, bf16 rounding) are shared. A `Tensor scalars` argument (a 1-d
// tensor of per-tensor values, as eager's convert_tensor_to_scalar_list) is
// sliced per element and used like a Scalar.
//
// Declining is decided for the whole call before any node is appended: the
// lists must hold floating tensors (what optimizers pass), for which no
// element lowering declines; anything else declines the whole call.
#include <string>

#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

// How each foreach argument maps to the element call.
enum class A : uint8_t {
  kList,        // Tensor[]: element i
  kSame,        // passed through unchanged (Scalar, Tensor, int, ...)
  kScalarList,  // Scalar[]: element i as a Scalar
  kTensorVals,  // Tensor of per-element values: element i as a wrapped 0-d tensor
};

struct ForeachSpec {
  const char* element_op;
  std::vector<A> args;
  std::vector<Arg> extra;  // appended after the mapped args (element defaults)
};

Arg NoneArg() { return Arg(); }

// Element calls for the whole list, or an error/decline.
StatusOr<std::vector<AtenCall>> ElementCalls(GraphBuilder& b, const AtenCall& c,
                                             const ForeachSpec& s, bool floats_only) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  size_t n = c.outputs.size();
  for (size_t k = 0; k < s.args.size(); ++k) {
    const Arg& a = ArgAt(c, k);
    if (s.args[k] == A::kList) {
      if (a.kind != Arg::Kind::kTensorList || a.tensors.size() != n)
        return InvalidArgument(c.op, ": argument ", k, " must be a list of ", n, " tensors");
      for (const auto& t : a.tensors) {
        if (!t) return InvalidArgument(c.op, ": absent tensor in list ", k);
        if (floats_only && !IsFloat(t->dtype))
          return Declined("non-floating tensors in a foreach op");
      }
    }
    if (s.args[k] == A::kScalarList && (a.kind != Arg::Kind::kScalarList || a.scalars.size() != n))
      return InvalidArgument(c.op, ": argument ", k, " must be a list of ", n, " scalars");
    if (s.args[k] == A::kTensorVals) {
      if (a.kind != Arg::Kind::kTensor || a.tensor.sizes.size() != 1 ||
          a.tensor.sizes[0] != static_cast<int64_t>(n))
        return InvalidArgument(c.op, ": argument ", k, " must be a 1-d tensor of ", n, " values");
    }
  }
  for (const OutputMeta& o : c.outputs)
    if (floats_only && o.defined && !IsFloat(o.dtype))
      return Declined("non-floating results in a foreach op");
  std::vector<AtenCall> calls(n);
  for (size_t i = 0; i < n; ++i) {
    AtenCall& e = calls[i];
    e.op = s.element_op;
    e.source = c.source;
    e.outputs = {c.outputs[i]};
    for (size_t k = 0; k < s.args.size(); ++k) {
      const Arg& a = ArgAt(c, k);
      Arg x;
      switch (s.args[k]) {
        case A::kList:
          x.kind = Arg::Kind::kTensor;
          x.tensor = *a.tensors[i];
          break;
        case A::kSame:
          x = a;
          break;
        case A::kScalarList:
          x.kind = Arg::Kind::kScalar;
          x.scalar = a.scalars[i];
          break;
        case A::kTensorVals:
          x.kind = Arg::Kind::kTensor;  // filled below (needs nodes)
          x.tensor = a.tensor;
          break;
      }
      e.args.push_back(x);
    }
    for (const Arg& x : s.extra) e.args.push_back(x);
  }
  (void)b;
  return calls;
}

template <const ForeachSpec* S, bool kFloatsOnly>
LowerResult LowerForeach(GraphBuilder& b, const AtenCall& c) {
  EMBER_ASSIGN_OR_RETURN(std::vector<AtenCall> calls, ElementCalls(b, c, *S, kFloatsOnly));
  LowerFn fn = LoweringTable::Get().Find(S->element_op);
  if (!fn) return EMBER_INTERNAL_ERROR(c.op, ": no element lowering ", S->element_op);
  std::vector<NodeId> outs;
  for (size_t i = 0; i < calls.size(); ++i) {
    for (size_t k = 0; k < S->args.size(); ++k) {
      if (S->args[k] != A::kTensorVals) continue;
      TensorArg& t = calls[i].args[k].tensor;
      NodeId v = b.Slice(t.value, {static_cast<int64_t>(i)}, {static_cast<int64_t>(i) + 1}, {1});
      t.value = b.Reshape(v, {});
      t.sizes = {};
      t.wrapped_number = true;
    }
    LowerResult r = fn(b, calls[i]);
    if (!r.ok()) {
      if (IsDeclined(r.status()))
        return EMBER_INTERNAL_ERROR(c.op, ": element ", i, " declined after nodes were added (",
                                    r.status().message(), ")");
      return r.status();
    }
    outs.push_back(r->at(0));
  }
  return CheckOutputs(b, c, outs);
}

Arg BoolArg(bool v) {
  Arg a;
  a.kind = Arg::Kind::kBool;
  a.b = v;
  return a;
}

using L = std::vector<A>;
// Binary arithmetic: (list, other[, alpha]).
const ForeachSpec kAddList{"aten::add.Tensor", L{A::kList, A::kList, A::kSame}, {}};
const ForeachSpec kAddScalar{"aten::add.Scalar", L{A::kList, A::kSame}, {NoneArg()}};
const ForeachSpec kAddScalarList{"aten::add.Scalar", L{A::kList, A::kScalarList}, {NoneArg()}};
const ForeachSpec kAddTensor{"aten::add.Tensor", L{A::kList, A::kSame, A::kSame}, {}};
const ForeachSpec kSubList{"aten::sub.Tensor", L{A::kList, A::kList, A::kSame}, {}};
const ForeachSpec kSubScalar{"aten::sub.Scalar", L{A::kList, A::kSame}, {NoneArg()}};
const ForeachSpec kSubScalarList{"aten::sub.Scalar", L{A::kList, A::kScalarList}, {NoneArg()}};
const ForeachSpec kMulList{"aten::mul.Tensor", L{A::kList, A::kList}, {}};
const ForeachSpec kMulScalar{"aten::mul.Scalar", L{A::kList, A::kSame}, {}};
const ForeachSpec kMulScalarList{"aten::mul.Scalar", L{A::kList, A::kScalarList}, {}};
const ForeachSpec kMulTensor{"aten::mul.Tensor", L{A::kList, A::kSame}, {}};
const ForeachSpec kDivList{"aten::div.Tensor", L{A::kList, A::kList}, {}};
const ForeachSpec kDivScalar{"aten::div.Scalar", L{A::kList, A::kSame}, {}};
const ForeachSpec kDivScalarList{"aten::div.Scalar", L{A::kList, A::kScalarList}, {}};
const ForeachSpec kDivTensor{"aten::div.Tensor", L{A::kList, A::kSame}, {}};
const ForeachSpec kMaxList{"aten::maximum", L{A::kList, A::kList}, {}};
const ForeachSpec kMinList{"aten::minimum", L{A::kList, A::kList}, {}};
const ForeachSpec kClampMinScalar{"aten::clamp_min", L{A::kList, A::kSame}, {}};
const ForeachSpec kClampMinScalarList{"aten::clamp_min", L{A::kList, A::kScalarList}, {}};
const ForeachSpec kClampMaxScalar{"aten::clamp_max", L{A::kList, A::kSame}, {}};
const ForeachSpec kClampMaxScalarList{"aten::clamp_max", L{A::kList, A::kScalarList}, {}};
const ForeachSpec kPowList{"aten::pow.Tensor_Tensor", L{A::kList, A::kList}, {}};
const ForeachSpec kPowScalar{"aten::pow.Tensor_Scalar", L{A::kList, A::kSame}, {}};
const ForeachSpec kPowScalarList{"aten::pow.Tensor_Scalar", L{A::kList, A::kScalarList}, {}};
const ForeachSpec kPowScalarAndTensor{"aten::pow.Scalar", L{A::kSame, A::kList}, {}};
// Ternary.
const ForeachSpec kAddcmulScalar{"aten::addcmul", L{A::kList, A::kList, A::kList, A::kSame}, {}};
const ForeachSpec kAddcmulScalarList{
    "aten::addcmul", L{A::kList, A::kList, A::kList, A::kScalarList}, {}};
const ForeachSpec kAddcmulTensor{
    "aten::addcmul", L{A::kList, A::kList, A::kList, A::kTensorVals}, {}};
const ForeachSpec kAddcdivScalar{"aten::addcdiv", L{A::kList, A::kList, A::kList, A::kSame}, {}};
const ForeachSpec kAddcdivScalarList{
    "aten::addcdiv", L{A::kList, A::kList, A::kList, A::kScalarList}, {}};
const ForeachSpec kAddcdivTensor{
    "aten::addcdiv", L{A::kList, A::kList, A::kList, A::kTensorVals}, {}};
const ForeachSpec kLerpScalar{"aten::lerp.Scalar", L{A::kList, A::kList, A::kSame}, {}};
const ForeachSpec kLerpList{"aten::lerp.Tensor", L{A::kList, A::kList, A::kList}, {}};
const ForeachSpec kLerpScalarList{"aten::lerp.Scalar", L{A::kList, A::kList, A::kScalarList}, {}};
// Unary.
#define EMBER_FOREACH_UNARY(name) const ForeachSpec k_##name{"aten::" #name, L{A::kList}, {}};
EMBER_FOREACH_UNARY(sqrt)
EMBER_FOREACH_UNARY(neg)
EMBER_FOREACH_UNARY(abs)
EMBER_FOREACH_UNARY(exp)
EMBER_FOREACH_UNARY(log)
EMBER_FOREACH_UNARY(reciprocal)
EMBER_FOREACH_UNARY(sign)
EMBER_FOREACH_UNARY(sigmoid)
EMBER_FOREACH_UNARY(tanh)
EMBER_FOREACH_UNARY(rsqrt)
EMBER_FOREACH_UNARY(zero)
#undef EMBER_FOREACH_UNARY
// _foreach_norm.Scalar(self, ord=2, dtype=None) -> linalg_vector_norm(x, ord, None, False, dtype)
const ForeachSpec kNorm{
    "aten::linalg_vector_norm", L{A::kList, A::kSame}, {NoneArg(), BoolArg(false)}};
// _foreach_copy(self, src, non_blocking) -> src cast to self's dtype
const ForeachSpec kCopy{"aten::_to_copy", L{A::kList}, {}};

// _foreach_norm's dtype argument goes after dim/keepdim in the element call.
LowerResult LowerForeachNorm(GraphBuilder& b, const AtenCall& c) {
  AtenCall adj = c;
  Arg dtype = ArgAt(c, 2);
  adj.args.resize(2);
  ForeachSpec spec = kNorm;
  spec.extra.push_back(dtype);
  EMBER_ASSIGN_OR_RETURN(std::vector<AtenCall> calls, ElementCalls(b, adj, spec, true));
  LowerFn fn = LoweringTable::Get().Find(spec.element_op);
  std::vector<NodeId> outs;
  for (auto& e : calls) {
    LowerResult r = fn(b, e);
    if (!r.ok()) {
      if (IsDeclined(r.status())) return EMBER_INTERNAL_ERROR(c.op, ": element declined late");
      return r.status();
    }
    outs.push_back(r->at(0));
  }
  return CheckOutputs(b, c, outs);
}

// _foreach_copy(self, src, non_blocking): each output is src[i] in self[i]'s dtype.
LowerResult LowerForeachCopy(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  EMBER_ASSIGN_OR_RETURN(auto src, TensorListAt(c, 1));
  if (src.size() != c.outputs.size()) return InvalidArgument(c.op, ": list length mismatch");
  std::vector<NodeId> outs;
  for (size_t i = 0; i < src.size(); ++i) {
    if (!src[i] || src[i]->sizes != c.outputs[i].sizes) return Declined("copy that broadcasts");
  }
  for (size_t i = 0; i < src.size(); ++i)
    outs.push_back(ConvertTo(b, src[i]->value, c.outputs[i].dtype));
  return CheckOutputs(b, c, outs);
}

}  // namespace

void RegisterForeach(LoweringTable& t) {
  auto add = [&t](const std::string& name, LowerFn fn) { t.Add("aten::_foreach_" + name, fn); };
  add("add.List", LowerForeach<&kAddList, true>);
  add("add.Scalar", LowerForeach<&kAddScalar, true>);
  add("add.ScalarList", LowerForeach<&kAddScalarList, true>);
  add("add.Tensor", LowerForeach<&kAddTensor, true>);
  add("sub.List", LowerForeach<&kSubList, true>);
  add("sub.Scalar", LowerForeach<&kSubScalar, true>);
  add("sub.ScalarList", LowerForeach<&kSubScalarList, true>);
  add("mul.List", LowerForeach<&kMulList, true>);
  add("mul.Scalar", LowerForeach<&kMulScalar, true>);
  add("mul.ScalarList", LowerForeach<&kMulScalarList, true>);
  add("mul.Tensor", LowerForeach<&kMulTensor, true>);
  add("div.List", LowerForeach<&kDivList, true>);
  add("div.Scalar", LowerForeach<&kDivScalar, true>);
  add("div.ScalarList", LowerForeach<&kDivScalarList, true>);
  add("div.Tensor", LowerForeach<&kDivTensor, true>);
  add("maximum.List", LowerForeach<&kMaxList, true>);
  add("minimum.List", LowerForeach<&kMinList, true>);
  add("clamp_min.Scalar", LowerForeach<&kClampMinScalar, true>);
  add("clamp_min.ScalarList", LowerForeach<&kClampMinScalarList, true>);
  add("clamp_max.Scalar", LowerForeach<&kClampMaxScalar, true>);
  add("clamp_max.ScalarList", LowerForeach<&kClampMaxScalarList, true>);
  add("pow.List", LowerForeach<&kPowList, true>);
  add("pow.Scalar", LowerForeach<&kPowScalar, true>);
  add("pow.ScalarList", LowerForeach<&kPowScalarList, true>);
  add("pow.ScalarAndTensor", LowerForeach<&kPowScalarAndTensor, true>);
  add("addcmul.Scalar", LowerForeach<&kAddcmulScalar, true>);
  add("addcmul.ScalarList", LowerForeach<&kAddcmulScalarList, true>);
  add("addcmul.Tensor", LowerForeach<&kAddcmulTensor, true>);
  add("addcdiv.Scalar", LowerForeach<&kAddcdivScalar, true>);
  add("addcdiv.ScalarList", LowerForeach<&kAddcdivScalarList, true>);
  add("addcdiv.Tensor", LowerForeach<&kAddcdivTensor, true>);
  add("lerp.Scalar", LowerForeach<&kLerpScalar, true>);
  add("lerp.List", LowerForeach<&kLerpList, true>);
  add("lerp.ScalarList", LowerForeach<&kLerpScalarList, true>);
  add("sqrt", LowerForeach<&k_sqrt, true>);
  add("neg", LowerForeach<&k_neg, true>);
  add("abs", LowerForeach<&k_abs, true>);
  add("exp", LowerForeach<&k_exp, true>);
  add("log", LowerForeach<&k_log, true>);
  add("reciprocal", LowerForeach<&k_reciprocal, true>);
  add("sign", LowerForeach<&k_sign, true>);
  add("sigmoid", LowerForeach<&k_sigmoid, true>);
  add("tanh", LowerForeach<&k_tanh, true>);
  add("rsqrt", LowerForeach<&k_rsqrt, true>);
  add("zero", LowerForeach<&k_zero, false>);
  add("norm.Scalar", LowerForeachNorm);
  add("copy", LowerForeachCopy);
}

}  // namespace ember::lowering
