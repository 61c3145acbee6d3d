// Matrix products as dot-general: mm, bmm, addmm, baddbmm, mv, dot.
// bf16/f16 products accumulate in f32 and round once (dot-general with an
// f32 result, then convert), as eager's CPU GEMM. addmm/baddbmm:
// beta * self + alpha * (m1 @ m2) with beta and alpha graph inputs; where
// beta == 0, self is ignored (NaN/inf in it do not propagate), as eager's GEMM.
// Integer products accumulate in their own type (eager's CPU behaviour).
#include "lowering/elementwise_util.h"
#include "lowering/lower_util.h"
#include "lowering/registry.h"

namespace ember::lowering {

namespace {

NodeId Dot(GraphBuilder& b, NodeId l, NodeId r, const DotDims& d, DType out) {
  DType acc = ComputeType(out);
  NodeId p = b.DotGeneral(ConvertTo(b, l, out), ConvertTo(b, r, out), d,
                          acc != out ? std::optional<DType>(acc) : std::nullopt);
  return p;
}

DotDims MatDims(bool batched) {
  DotDims d;
  if (batched) {
    d.lhs_batch = {0};
    d.rhs_batch = {0};
    d.lhs_contracting = {2};
    d.rhs_contracting = {1};
  } else {
    d.lhs_contracting = {1};
    d.rhs_contracting = {0};
  }
  return d;
}

Status CheckDtypes(const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(DeclineComplex(c));
  DType t = c.outputs.at(0).dtype;
  if (t == DType::kPred) return Declined("bool matmul");
  return OkStatus();
}

// mm(self, mat2), bmm(self, mat2), mv(self, vec), dot(self, tensor)
template <int kKind>  // 0: mm, 1: bmm, 2: mv, 3: dot
LowerResult LowerMm(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(CheckDtypes(c));
  EMBER_ASSIGN_OR_RETURN(TensorArg x, TensorAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg y, TensorAt(c, 1));
  const OutputMeta& out = c.outputs.at(0);
  DotDims d;
  if (kKind == 0 || kKind == 1) d = MatDims(kKind == 1);
  if (kKind == 2) {
    d.lhs_contracting = {1};
    d.rhs_contracting = {0};
  }
  if (kKind == 3) {
    d.lhs_contracting = {0};
    d.rhs_contracting = {0};
  }
  NodeId p = Dot(b, x.value, y.value, d, out.dtype);
  return CheckOutputs(b, c, {Finish(b, p, out)});
}

// addmm(self, mat1, mat2, *, beta=1, alpha=1), baddbmm(self, batch1, batch2, *, beta, alpha)
template <bool kBatched>
LowerResult LowerAddmm(GraphBuilder& b, const AtenCall& c) {
  EMBER_RETURN_IF_ERROR(CheckDtypes(c));
  EMBER_ASSIGN_OR_RETURN(Val self, ValAt(c, 0));
  EMBER_ASSIGN_OR_RETURN(TensorArg m1, TensorAt(c, 1));
  EMBER_ASSIGN_OR_RETURN(TensorArg m2, TensorAt(c, 2));
  EMBER_ASSIGN_OR_RETURN(auto beta, OptValAt(c, 3));
  EMBER_ASSIGN_OR_RETURN(auto alpha, OptValAt(c, 4));
  const OutputMeta& out = c.outputs.at(0);
  Ew e(b, out.dtype, out.sizes);
  NodeId p = ConvertTo(b, Dot(b, m1.value, m2.value, MatDims(kBatched), out.dtype), e.compute);
  if (alpha) p = b.Multiply(e(*alpha), p);
  NodeId s = e(self);
  if (beta) {
    NodeId bv = e(*beta);
    NodeId scaled = b.Multiply(bv, s);
    s = b.Select(b.Compare(bv, e.Const(0), ComparisonKind::kEq), e.Const(0), scaled);
  }
  return CheckOutputs(b, c, {Finish(b, b.Add(s, p), out)});
}

}  // namespace

void RegisterMatmul(LoweringTable& t) {
  t.Add("aten::mm", LowerMm<0>);
  t.Add("aten::bmm", LowerMm<1>);
  t.Add("aten::mv", LowerMm<2>);
  t.Add("aten::dot", LowerMm<3>);
  t.Add("aten::addmm", LowerAddmm<false>);
  t.Add("aten::baddbmm", LowerAddmm<true>);
}

}  // namespace ember::lowering
