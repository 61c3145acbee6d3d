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
      : b(builder),
        common(common_dtype),
        compute(ComputeType(common_dtype)),
        sizes(std::move(result_sizes)) {
    if (compute == DType::kPred) compute = DType::kU8;
  }
  NodeId operator()(const Val& v) const { return Prepare(b, v, common, compute, sizes); }
  NodeId Const(double v) const { return Splat(b, compute, v, sizes); }
  // x * y + z rounded once, as a fused multiply-add: eager's CPU kernels (AVX2 and
  // AVX512 builds) compute add/sub with alpha, lerp and addcmul with an FMA (explicit
  // vec::fmadd, or the compiler contracting a * b + c), so rounding the product first
  // differs from eager in the last bit of ~0.2% (add) to ~12% (lerp) of elements (15%
  // for an f64 add with alpha 0.3). f64 computations use the IR's fma. For an f32
  // computation the operands go to f64, where the product of two f32 values is exact,
  // and the sum is rounded to f64 and then to f32 (a double rounding that can differ
  // from one rounding only when the f64 sum lies exactly halfway between two f32
  // values: ~2^-29 of random cases); kernels compute it in f32 where the factor is
  // +-1 (codegen/cpu/f32_muladd.h). The f32 fma measured no faster (docs/performance.md,
  // the MLP training step under torch.compile). Other compute dtypes (integers) use the
  // plain product and sum.
  NodeId MulAdd(NodeId x, NodeId y, NodeId z) const {
    if (compute == DType::kF64) return b.Fma(x, y, z);
    if (compute != DType::kF32) return b.Add(b.Multiply(x, y), z);
    auto wide = [&](NodeId v) { return ConvertTo(b, v, DType::kF64); };
    return ConvertTo(b, b.Add(b.Multiply(wide(x), wide(y)), wide(z)), DType::kF32);
  }

  GraphBuilder& b;
  DType common;
  DType compute;
  std::vector<int64_t> sizes;
};

}  // namespace ember::lowering
