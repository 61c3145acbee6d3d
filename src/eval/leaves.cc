// Reference semantics of the value-producing leaves: iota and constant.
// (parameter values come from the caller; the dispatcher handles them.)
//
// iota: element at multi-index idx has value idx[iota_dimension], converted
// to the result dtype like `convert` from s64 (f16/bf16 through f32; pred is
// idx != 0). constant: a copy of the node's literal.
#include "ember/ir/attributes.h"
#include "eval/element_access.h"
#include "eval/ops.h"

namespace ember::eval {
namespace {

template <DType D>
void IotaLoop(int64_t count, int64_t stride, int64_t size, Literal& out) {
  StorageT<D>* op = out.data_as<StorageT<D>>();
  for (int64_t i = 0; i < count; ++i) {
    op[i] = ConvertElement<DType::kS64, D>((i / stride) % size);
  }
}

StatusOr<Literal> Iota(const Node& n) {
  const Shape& shape = n.shape;
  if (shape.is_tuple()) return InvalidArgument("iota %", n.id, ": result cannot be a tuple");
  const int64_t dim = attr::IotaDimension(n, -1);
  if (dim < 0 || dim >= shape.rank()) {
    return InvalidArgument("iota %", n.id, ": iota_dimension ", dim, " out of range for ",
                           shape.ToString());
  }
  Literal out(shape);
  const int64_t count = shape.num_elements();
  if (count == 0) return out;
  const int64_t stride = shape.strides()[dim];
  const int64_t size = shape.dim(static_cast<int>(dim));
  DispatchDType(shape.dtype(),
                [&](auto d) { IotaLoop<decltype(d)::value>(count, stride, size, out); });
  return out;
}

}  // namespace

StatusOr<Literal> EvalLeaf(const Node& n, const Operands& in) {
  switch (n.op) {
    case OpKind::kIota:
      return Iota(n);
    case OpKind::kConstant:
      if (n.literal == nullptr) {
        return EMBER_INTERNAL_ERROR("constant %", n.id, " has no literal");
      }
      if (n.literal->shape() != n.shape) {
        return EMBER_INTERNAL_ERROR("constant %", n.id, ": literal is ",
                                    n.literal->shape().ToString(), " but the node is ",
                                    n.shape.ToString());
      }
      return Literal(*n.literal);
    default:
      return InvalidArgument(OpName(n.op), " %", n.id,
                             ": not evaluable as a leaf (parameters are bound by the caller)");
  }
}

}  // namespace ember::eval
