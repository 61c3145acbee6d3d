// Type promotion, broadcasting and conversion shared by every ATen lowering.
//
// Promotion follows eager PyTorch (torch.result_type, c10's promoteTypes and
// ATen's ResultTypeState): operands fall in three priority tiers — tensors
// with at least one dimension, 0-d tensors, and wrapped numbers / Scalar
// arguments. Each tier is promoted within itself; a lower tier changes the
// result only when its category (bool < integral < floating < complex) is
// higher. A floating wrapped number or float Scalar counts as the default
// dtype (f32), an integral one as s64, a bool as pred.
//
// Computation: bf16/f16 values are computed in f32 and rounded once when the
// op's result is stored (eager's "opmath"); a tensor operand of another dtype
// is first cast to the op's common dtype (TensorIterator's cast), a
// wrapped number or Scalar goes straight to the computation type (eager reads
// CPU scalars as opmath values).
#pragma once

#include <optional>
#include <vector>

#include "ember/ir/builder.h"
#include "ember/lowering/aten.h"

namespace ember::lowering {

enum class PromoTier : uint8_t { kDimensioned, kZeroDim, kWrapped };

// An elementwise operand: a tensor argument or a Scalar graph input.
struct Val {
  NodeId id = kInvalidNode;
  DType dtype = DType::kF32;
  std::vector<int64_t> sizes;
  PromoTier tier = PromoTier::kDimensioned;
};

Val ValOf(const TensorArg& t);
Val ValOf(const ScalarArg& s);
// A tensor or Scalar argument as a Val; InvalidArgument for other kinds.
StatusOr<Val> ValOfArg(const Arg& a, const char* op, size_t index);

// c10::promoteTypes: nullopt where eager raises (u16/u32/u64 with another
// type, complex with anything here).
std::optional<DType> PromoteTypes(DType a, DType b);
// torch.result_type over the operands (nullopt: eager would raise).
std::optional<DType> ResultType(const std::vector<Val>& operands);

// f32 for bf16/f16, else `t` (the dtype elementwise math runs in).
DType ComputeType(DType t);

// Broadcast of two size lists (numpy rules); nullopt if incompatible.
std::optional<std::vector<int64_t>> BroadcastShapes(const std::vector<int64_t>& a,
                                                    const std::vector<int64_t>& b);

// x (with `from` sizes) broadcast to `to` (right-aligned, size-1 dims
// stretched). Returns x unchanged when the sizes are equal.
NodeId BroadcastTo(GraphBuilder& b, NodeId x, const std::vector<int64_t>& from,
                   const std::vector<int64_t>& to);
// Convert when the dtype differs.
NodeId ConvertTo(GraphBuilder& b, NodeId x, DType to);

// An operand ready for elementwise math: cast to `common` (tensors only),
// then to `compute`, then broadcast to `sizes`.
NodeId Prepare(GraphBuilder& b, const Val& v, DType common, DType compute,
               const std::vector<int64_t>& sizes);

// A computed value converted to the output's dtype (no-op if equal).
NodeId Finish(GraphBuilder& b, NodeId x, const OutputMeta& out);

// A scalar constant of dtype t broadcast to `sizes` (a splat).
NodeId Splat(GraphBuilder& b, DType t, double v, const std::vector<int64_t>& sizes);

}  // namespace ember::lowering
