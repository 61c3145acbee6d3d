// Ew: the operand preparer of one elementwise lowering. It fixes the op's
// common dtype (the result dtype, from Meta), its computation dtype (f32 for
// bf16/f16; u8 for bool arithmetic, whose result is then `!= 0`), and the
// result sizes; e(v) casts and broadcasts an operand (promotion.h rules).
#pragma once

#include <vector>

#include "lowering/promotion.h"

namespace ember::lowering {

struct Ew {
  Ew(GraphBuilder& builder, DType common_dtype, std::vector<int64_t> result_sizes)
      : b(builder), common(common_dtype), compute(ComputeType(common_dtype)),
        sizes(std::move(result_sizes)) {
    if (compute == DType::kPred) compute = DType::kU8;
  }
  NodeId operator()(const Val& v) const { return Prepare(b, v, common, compute, sizes); }
  NodeId Const(double v) const { return Splat(b, compute, v, sizes); }

  GraphBuilder& b;
  DType common;
  DType compute;
  std::vector<int64_t> sizes;
};

}  // namespace ember::lowering
