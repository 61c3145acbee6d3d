// Argument accessors and small helpers shared by the lowering families.
//
// Accessors check the argument's kind and return InvalidArgument naming the
// op and the position when the bridge passed something else (a bridge bug,
// never a user error: Meta kernels have already checked user arguments).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ember/lowering/aten.h"
#include "lowering/promotion.h"

namespace ember::lowering {

const Arg& ArgAt(const AtenCall& c, size_t i);  // a kNone Arg when i is past the end
bool IsNoneAt(const AtenCall& c, size_t i);

StatusOr<TensorArg> TensorAt(const AtenCall& c, size_t i);
// None -> nullopt.
StatusOr<std::optional<TensorArg>> OptTensorAt(const AtenCall& c, size_t i);
StatusOr<std::vector<std::optional<TensorArg>>> TensorListAt(const AtenCall& c, size_t i);
StatusOr<int64_t> IntAt(const AtenCall& c, size_t i);
StatusOr<std::optional<int64_t>> OptIntAt(const AtenCall& c, size_t i);
StatusOr<bool> BoolAt(const AtenCall& c, size_t i);
StatusOr<std::vector<int64_t>> IntsAt(const AtenCall& c, size_t i);
// None -> nullopt (an `int[1]? dim` argument).
StatusOr<std::optional<std::vector<int64_t>>> OptIntsAt(const AtenCall& c, size_t i);
StatusOr<std::optional<std::string>> OptStringAt(const AtenCall& c, size_t i);
StatusOr<std::optional<DType>> OptDTypeAt(const AtenCall& c, size_t i);
StatusOr<ScalarArg> ScalarAt(const AtenCall& c, size_t i);
// Tensor or Scalar.
StatusOr<Val> ValAt(const AtenCall& c, size_t i);
// An optional Tensor or Scalar (None -> nullopt).
StatusOr<std::optional<Val>> OptValAt(const AtenCall& c, size_t i);

// Declined when a tensor argument or output is complex (Ember computes no
// complex arithmetic) or when an output dtype is a torch dtype without an
// IR equivalent.
Status DeclineComplex(const AtenCall& c);

// Wraps a negative dim (eager's maybe_wrap_dim); rank 0 accepts -1 and 0.
int64_t WrapDim(int64_t d, int64_t rank);

// Checks that the lowering produced one node per output with the output's
// shape; InvalidArgument naming the op otherwise (catches lowering bugs
// before the bridge wires a wrong value).
LowerResult CheckOutputs(const GraphBuilder& b, const AtenCall& c, std::vector<NodeId> nodes);

}  // namespace ember::lowering
