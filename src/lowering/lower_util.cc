#include "lowering/lower_util.h"

namespace ember::lowering {

namespace {
const Arg& NoneArg() {
  static const Arg none;
  return none;
}

Status WrongKind(const AtenCall& c, size_t i, const char* want) {
  return InvalidArgument(c.op, ": argument ", i, " must be ", want, " (bridge passed kind ",
                         static_cast<int>(ArgAt(c, i).kind), ")");
}
}  // namespace

const Arg& ArgAt(const AtenCall& c, size_t i) { return i < c.args.size() ? c.args[i] : NoneArg(); }
bool IsNoneAt(const AtenCall& c, size_t i) { return ArgAt(c, i).is_none(); }

StatusOr<TensorArg> TensorAt(const AtenCall& c, size_t i) {
  const Arg& a = ArgAt(c, i);
  if (a.kind != Arg::Kind::kTensor) return WrongKind(c, i, "a Tensor");
  return a.tensor;
}

StatusOr<std::optional<TensorArg>> OptTensorAt(const AtenCall& c, size_t i) {
  const Arg& a = ArgAt(c, i);
  if (a.is_none()) return std::optional<TensorArg>();
  if (a.kind != Arg::Kind::kTensor) return WrongKind(c, i, "a Tensor or None");
  return std::optional<TensorArg>(a.tensor);
}

StatusOr<std::vector<std::optional<TensorArg>>> TensorListAt(const AtenCall& c, size_t i) {
  const Arg& a = ArgAt(c, i);
  if (a.kind != Arg::Kind::kTensorList) return WrongKind(c, i, "a Tensor[]");
  return a.tensors;
}

StatusOr<int64_t> IntAt(const AtenCall& c, size_t i) {
  const Arg& a = ArgAt(c, i);
  if (a.kind != Arg::Kind::kInt) return WrongKind(c, i, "an int");
  return a.i;
}

StatusOr<std::optional<int64_t>> OptIntAt(const AtenCall& c, size_t i) {
  const Arg& a = ArgAt(c, i);
  if (a.is_none()) return std::optional<int64_t>();
  if (a.kind != Arg::Kind::kInt) return WrongKind(c, i, "an int or None");
  return std::optional<int64_t>(a.i);
}

StatusOr<bool> BoolAt(const AtenCall& c, size_t i) {
  const Arg& a = ArgAt(c, i);
  if (a.kind != Arg::Kind::kBool) return WrongKind(c, i, "a bool");
  return a.b;
}

StatusOr<std::vector<int64_t>> IntsAt(const AtenCall& c, size_t i) {
  const Arg& a = ArgAt(c, i);
  if (a.kind == Arg::Kind::kInt) return std::vector<int64_t>{a.i};  // int[1] given as an int
  if (a.kind != Arg::Kind::kIntList) return WrongKind(c, i, "an int[]");
  return a.ints;
}

StatusOr<std::optional<std::vector<int64_t>>> OptIntsAt(const AtenCall& c, size_t i) {
  const Arg& a = ArgAt(c, i);
  if (a.is_none()) return std::optional<std::vector<int64_t>>();
  EMBER_ASSIGN_OR_RETURN(auto v, IntsAt(c, i));
  return std::optional<std::vector<int64_t>>(std::move(v));
}

StatusOr<std::optional<std::string>> OptStringAt(const AtenCall& c, size_t i) {
  const Arg& a = ArgAt(c, i);
  if (a.is_none()) return std::optional<std::string>();
  if (a.kind != Arg::Kind::kString) return WrongKind(c, i, "a str or None");
  return std::optional<std::string>(a.s);
}

StatusOr<std::optional<DType>> OptDTypeAt(const AtenCall& c, size_t i) {
  const Arg& a = ArgAt(c, i);
  if (a.is_none()) return std::optional<DType>();
  if (a.kind != Arg::Kind::kDType) return WrongKind(c, i, "a ScalarType or None");
  return std::optional<DType>(a.dtype);
}

StatusOr<ScalarArg> ScalarAt(const AtenCall& c, size_t i) {
  const Arg& a = ArgAt(c, i);
  if (a.kind != Arg::Kind::kScalar) return WrongKind(c, i, "a Scalar");
  return a.scalar;
}

StatusOr<Val> ValAt(const AtenCall& c, size_t i) {
  const Arg& a = ArgAt(c, i);
  if (a.kind == Arg::Kind::kTensor) return ValOf(a.tensor);
  if (a.kind == Arg::Kind::kScalar) return ValOf(a.scalar);
  return WrongKind(c, i, "a Tensor or a Scalar");
}

StatusOr<std::optional<Val>> OptValAt(const AtenCall& c, size_t i) {
  if (IsNoneAt(c, i)) return std::optional<Val>();
  EMBER_ASSIGN_OR_RETURN(Val v, ValAt(c, i));
  return std::optional<Val>(v);
}

Status DeclineComplex(const AtenCall& c) {
  auto bad = [](DType t) { return IsComplex(t); };
  for (const Arg& a : c.args) {
    if (a.kind == Arg::Kind::kTensor && bad(a.tensor.dtype))
      return Declined("complex operands are not lowered");
    if (a.kind == Arg::Kind::kTensorList)
      for (const auto& t : a.tensors)
        if (t && bad(t->dtype)) return Declined("complex operands are not lowered");
  }
  for (const OutputMeta& o : c.outputs)
    if (o.defined && bad(o.dtype)) return Declined("complex results are not lowered");
  return OkStatus();
}

int64_t WrapDim(int64_t d, int64_t rank) {
  int64_t r = rank == 0 ? 1 : rank;
  return d < 0 ? d + r : d;
}

LowerResult CheckOutputs(const GraphBuilder& b, const AtenCall& c, std::vector<NodeId> nodes) {
  if (!b.status().ok()) return b.status();
  if (nodes.size() != c.outputs.size())
    return EMBER_INTERNAL_ERROR(c.op, ": lowering returned ", nodes.size(), " values for ",
                                c.outputs.size(), " outputs");
  for (size_t i = 0; i < nodes.size(); ++i) {
    const OutputMeta& o = c.outputs[i];
    if (!o.defined) continue;
    if (nodes[i] == kInvalidNode)
      return EMBER_INTERNAL_ERROR(c.op, ": lowering left output ", i, " undefined");
    Shape want(o.dtype, o.sizes);
    if (b.shape(nodes[i]) != want)
      return EMBER_INTERNAL_ERROR(c.op, ": output ", i, " lowered as ",
                                  b.shape(nodes[i]).ToString(), ", Meta says ", want.ToString());
  }
  return nodes;
}

}  // namespace ember::lowering
