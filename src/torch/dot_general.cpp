// The `ember.dot-general` extern: every dot-general of a lowered graph runs as one
// ATen GEMM call (docs/architecture.md, "Same program, same bits").
#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dtype_map.h"
#include "ember/eval/extern_registry.h"
#include "ember/ir/graph.h"
#include "lower.h"

namespace ember_torch {
namespace {

// An operand handed to the GEMM in its one canonical form: dense row-major and
// 64-byte aligned (a copy when it is not). See aten_dot_general.
bool is_canonical_gemm_layout(const at::Tensor& t) {
  constexpr uintptr_t kAlign = 64;  // c10's CPU allocator alignment
  // exact row-major strides (is_contiguous() ignores those of size-1 dims, which the
  // GEMM's transpose choice may still read)
  auto cs = c10::contiguous_strides(t.sizes());
  return t.strides() == c10::IntArrayRef(cs) &&
         reinterpret_cast<uintptr_t>(t.data_ptr()) % kAlign == 0;
}

at::Tensor canonical_gemm_operand(const at::Tensor& t) {
  if (is_canonical_gemm_layout(t)) return t;
  at::Tensor c = at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
  if (t.dim() == 3 && t.size(0) == 1) {
    // One matrix (mm, F.linear's weight read transposed): copied as a 2-D tensor, so
    // ATen takes its blocked transpose copy instead of the element-wise strided loop
    // (the MLP step spent 14% of its samples in that loop).
    c.select(0, 0).copy_(t.select(0, 0));
  } else {
    c.copy_(t);
  }
  return c;
}

// dot-general through ATen's batched matmul: lhs -> [B, M, K], rhs -> [B, K, N]
// (permute + reshape), out [B, M, N] is the result's row-major layout (batch dims,
// lhs free dims, rhs free dims: XLA's DotGeneral result order).
//
// Same logical dot-general -> same bits. The GEMM is always called on the logical
// [B, M, K] and [B, K, N] matrices in one canonical layout (dense row-major, 64-byte
// aligned; the result written to a 64-byte aligned [B, M, N]), never on a strided view
// of the operand as it arrived. MKL's sgemm rounds differently for a transposed operand
// than for the same matrix materialized (eager's mm of two transposed f32[32,16] and
// f32[16,10] views differs from the mm of their contiguous copies in 21 of 320
// elements) and, per Intel's reproducibility
// notes, may for differently aligned arrays. Without this, the simplify rule
// dot-of-transpose (which hands the extern an untransposed operand with mapped dims
// where the graph had a transpose, but not where the transpose had already been
// materialized, e.g. a parameter read through a view) made a resumed training run
// differ from a straight one (docs/architecture.md "Lowering", "Same program, same
// bits"). Cost: one copy of an operand that is read transposed (what a transpose
// kernel did before that rule existed).
ember::Status aten_dot_general(ember::ExternCall& c) {
  try {
    const ember::Node& n = *c.node;
    const ember::Literal& l = *c.inputs[0];
    const ember::Literal& r = *c.inputs[1];
    ember::Literal& o = *c.outputs[0];
    auto lt = to_torch_dtype(l.dtype());
    auto rt = to_torch_dtype(r.dtype());
    const auto& lb = n.attrs.GetInts("lhs_batch_dims");
    const auto& rb = n.attrs.GetInts("rhs_batch_dims");
    const auto& lc = n.attrs.GetInts("lhs_contracting_dims");
    const auto& rc = n.attrs.GetInts("rhs_contracting_dims");
    at::Tensor lhs =
        at::from_blob(const_cast<void*>(l.data()), l.shape().dims(), at::TensorOptions().dtype(lt));
    at::Tensor rhs =
        at::from_blob(const_cast<void*>(r.data()), r.shape().dims(), at::TensorOptions().dtype(rt));
    auto free_dims = [](int64_t rank, const std::vector<int64_t>& a,
                        const std::vector<int64_t>& b) {
      std::vector<int64_t> f;
      for (int64_t d = 0; d < rank; ++d) {
        if (std::find(a.begin(), a.end(), d) == a.end() &&
            std::find(b.begin(), b.end(), d) == b.end())
          f.push_back(d);
      }
      return f;
    };
    auto lf = free_dims(lhs.dim(), lb, lc);
    auto rf = free_dims(rhs.dim(), rb, rc);
    auto prod = [](const at::Tensor& t, const std::vector<int64_t>& ds) {
      int64_t p = 1;
      for (int64_t d : ds) p *= t.size(d);
      return p;
    };
    std::vector<int64_t> lperm(lb), rperm(rb);
    lperm.insert(lperm.end(), lf.begin(), lf.end());
    lperm.insert(lperm.end(), lc.begin(), lc.end());
    rperm.insert(rperm.end(), rc.begin(), rc.end());
    rperm.insert(rperm.end(), rf.begin(), rf.end());
    const int64_t B = prod(lhs, lb), M = prod(lhs, lf), K = prod(lhs, lc), N = prod(rhs, rf);
    at::Tensor a = lhs.permute(lperm).reshape({B, M, K});
    at::Tensor bm = rhs.permute(rperm).reshape({B, K, N});
    auto ot = to_torch_dtype(o.dtype());
    at::Tensor out = at::from_blob(o.data(), {B, M, N}, at::TensorOptions().dtype(ot));
    // The GEMM's own output: `out` when aligned, else an aligned temporary copied back.
    at::Tensor res = is_canonical_gemm_layout(out) ? out : at::empty({B, M, N}, out.options());
    if (lt == rt && lt == ot && lt != at::kBool) {
      at::bmm_out(res, canonical_gemm_operand(a), canonical_gemm_operand(bm));
    } else if (at::isFloatingType(ot) && at::isFloatingType(lt) && at::isFloatingType(rt)) {
      // A wider result (bf16/f16 operands, f32 result: the lowering's accumulate-in-f32
      // form): multiply in the result type, so the product is rounded once, to the
      // result, as eager's reduced-precision GEMM does (f32 accumulation). Computing in
      // bf16 and widening would round twice (addmm + bias then differed in ~30% of
      // elements from eager's).
      at::bmm_out(res, canonical_gemm_operand(a.to(ot)), canonical_gemm_operand(bm.to(ot)));
    } else {
      auto ct = at::promote_types(lt, rt);
      if (ct == at::kBool) ct = at::kLong;
      res.copy_(at::bmm(canonical_gemm_operand(a.to(ct)), canonical_gemm_operand(bm.to(ct))));
    }
    if (!res.is_same(out)) out.copy_(res);
    return ember::OkStatus();
  } catch (const std::exception& e) {
    auto* ce = dynamic_cast<const c10::Error*>(&e);
    return ember::Status(
        ember::StatusCode::kInternal,
        std::string("dot-general (ATen): ") + (ce ? ce->what_without_backtrace() : e.what()));
  }
}

}  // namespace

void register_aten_dot_general() {
  ember::ExternRegistry::Global().Register("ember.dot-general", &aten_dot_general);
}

}  // namespace ember_torch
