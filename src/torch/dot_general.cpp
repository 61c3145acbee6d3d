// The `ember.dot-general` extern: every dot-general of a lowered graph runs as one
// ATen GEMM call (docs/architecture.md, "Same program, same bits").
#include <ATen/ATen.h>
#include <ATen/Config.h>
#include <ATen/TensorUtils.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "../ir/log.h"
#include "dtype_map.h"
#include "ember/eval/extern_registry.h"
#include "ember/ir/attributes.h"
#include "ember/ir/graph.h"
#include "lower.h"

// oneDNN's matmul as ATen runs it for addmm/bmm when oneDNN is chosen (mkldnn_matmul in
// aten/src/ATen/native/mkldnn/Matmul.cpp: result = alpha * mat1 @ mat2 + beta * result,
// 2-D or 3-D operands, row-major or transposed, written into `result`). Exported by
// libtorch_cpu but its header is not installed, so it is declared here; torch is pinned.
namespace at::native {
TORCH_API void mkldnn_matmul(const at::Tensor& mat1, const at::Tensor& mat2,
                             const at::Tensor& result, float beta, float alpha);
}  // namespace at::native

namespace ember_torch {
namespace {

constexpr uintptr_t kGemmAlignment = 64;  // AlignedBytes / c10's CPU allocator

bool aligned(const at::Tensor& t) {
  return t.numel() == 0 || reinterpret_cast<uintptr_t>(t.data_ptr()) % kGemmAlignment == 0;
}

// `t` (dense row-major over its own dims, as every IR value is) with its dims put in the
// order `perm` and grouped into the matrix batch `[B, R, C]`: a view when the grouping
// is expressible with strides (ATen's rule, computeStride), else a row-major copy.
// `*copied` is set for a copy. Both outcomes depend only on the operand's shape and the
// dot's dimension numbers, never on where the value came from.
at::Tensor as_matrices(const at::Tensor& t, const std::vector<int64_t>& perm, int64_t B, int64_t R,
                       int64_t C, bool* copied) {
  at::Tensor p = t.permute(perm);
  std::vector<int64_t> shape = {B, R, C};
  if (auto st = at::detail::computeStride(p.sizes(), p.strides(), shape)) {
    at::Tensor v = p.as_strided(shape, *st, p.storage_offset());
    if (aligned(v)) return v;
    // A misaligned borrowed input (a view at an odd offset): the same strides on
    // aligned memory, so the GEMM call is the one an aligned operand gets.
    at::Tensor a = at::empty_strided(shape, *st, t.options());
    a.copy_(v);
    *copied = true;
    return a;
  }
  *copied = true;
  return p.reshape(shape).contiguous();
}

std::atomic<int64_t> g_gemm_copies{0};

// Whether oneDNN's f32 matmul is a candidate here: ATen built with it, the user has not
// turned it off (torch.backends.mkldnn.enabled), the CPU has what mkldnn_matmul requires
// for f32 (AVX-512 BW/VL/DQ), and it is not an Intel CPU. MKL runs its AVX-512 sgemm
// kernels only on Intel CPUs (elsewhere its AVX2 path), so only there does oneDNN's
// AVX-512 matmul have the edge use_onednn measured: on an Intel Xeon (family 6 model
// 207) oneDNN was 0.98-1.14x MKL's time on the products use_onednn hands it
// (docs/performance.md, "The GEMM library per dot").
bool onednn_available() {
  static const bool built = AT_MKLDNN_ENABLED() && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") &&
                            __builtin_cpu_supports("avx512dq") && !__builtin_cpu_is("intel");
  return built && at::globalContext().userEnabledMkldnn();
}

// Which library multiplies a dot's matrices: MKL's sgemm through ATen's mm/bmm (eager's
// choice for f32 linear layers), or oneDNN's matmul. Measured through this extern on
// the project's 2-core AMD Zen 4 VM (docs/performance.md, "The GEMM library per dot"),
// oneDNN was 4-17% faster on f32 products of 2^27 flops or more whose lhs is row-major
// with 256 or more contracting elements, or transposed (a weight gradient, x^T @ g)
// with at most 1024; it was 3-20% slower with a row-major lhs and 128 contracting
// elements or a transposed one and 4096, and its call costs tens of microseconds more
// on small products. Batches stay with bmm. The choice reads only the dot (dtypes,
// sizes, operand strides as as_matrices gives them), so one logical program makes one
// call: same program, same bits. `a` and `b` are the operands as_matrices gives, already
// in the compute type `ct`; `ot` is the result's.
bool use_onednn(const at::Tensor& a, const at::Tensor& b, at::ScalarType ct, at::ScalarType ot) {
  if (ct != at::kFloat || ot != at::kFloat || a.size(0) != 1 || !onednn_available()) return false;
  const int64_t M = a.size(1), K = a.size(2), N = b.size(2);
  if (2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) <
      static_cast<double>(int64_t{1} << 27))
    return false;
  // Row-major or transposed: mkldnn_matmul's formats that need no copy.
  auto rows = [](const at::Tensor& m) { return m.stride(2) == 1 && m.stride(1) == m.size(2); };
  auto cols = [](const at::Tensor& m) { return m.stride(1) == 1 && m.stride(2) == m.size(1); };
  if (!rows(b) && !cols(b)) return false;
  if (rows(a)) return K >= 256;
  return cols(a) && K <= 1024;
}

// dot-general as one ATen GEMM call (at::mm for one matrix, at::bmm for a batch).
// lhs is viewed as [B, M, K] (batch dims, free dims, contracting dims), rhs as
// [B, K, N], the result is the row-major [B, M, N] of the output buffer (XLA's
// DotGeneral result order: batch, lhs free, rhs free), written in place.
//
// No copies for the layouts a model produces: an IR value is dense row-major, so a
// [M, K] operand is a plain matrix and a [K, M] one (contracting dim first) a
// transposed one; ATen hands MKL the transpose flag instead of copying. F.linear's
// weight [N, K] read as the rhs [K, N] (`x @ w.t()`, folded into the dot's dims by
// simplify's dot-of-transpose) is a transposed rhs, as in eager's addmm.
//
// Same program, same bits (docs/architecture.md): the GEMM call — which ATen entry
// point, the operand strides, alignment (64 bytes), the output — is a function of the
// dot-general node alone (operand shapes, dimension numbers, dtypes), never of how an
// operand was produced or who consumes the result. A transposed value reaches the dot
// as one IR form whatever its history (simplify folds transposes into the dimension
// numbers), so one logical program makes one call. EMBER_LOG=gemm prints each call.
ember::Status aten_dot_general(ember::ExternCall& c) {
  try {
    const ember::Node& n = *c.node;
    const ember::Literal& l = *c.inputs[0];
    const ember::Literal& r = *c.inputs[1];
    ember::Literal& o = *c.outputs[0];
    auto lt = to_torch_dtype(l.dtype());
    auto rt = to_torch_dtype(r.dtype());
    const auto& lb = ember::attr::LhsBatchDims(n);
    const auto& rb = ember::attr::RhsBatchDims(n);
    const auto& lc = ember::attr::LhsContractingDims(n);
    const auto& rc = ember::attr::RhsContractingDims(n);
    at::Tensor lhs =
        at::from_blob(const_cast<void*>(l.data()), l.shape().dims(), at::TensorOptions().dtype(lt));
    at::Tensor rhs =
        at::from_blob(const_cast<void*>(r.data()), r.shape().dims(), at::TensorOptions().dtype(rt));
    auto free_dims = [](int64_t rank, const std::vector<int64_t>& a,
                        const std::vector<int64_t>& b) {
      std::vector<int64_t> f;
      for (int64_t d = 0; d < rank; ++d) {
        if (std::find(a.begin(), a.end(), d) == a.end() &&
            std::find(b.begin(), b.end(), d) == b.end()) {
          f.push_back(d);
        }
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
    auto ot = to_torch_dtype(o.dtype());
    // Mixed dtypes: bf16/f16 operands with an f32 result (the lowering's
    // accumulate-in-f32 form) multiply in the result type, so the product is rounded
    // once, to the result, as eager's reduced-precision GEMM does (computing in bf16
    // and widening would round twice). Other mixes compute in the promoted type.
    at::ScalarType ct = ot;
    if (!(lt == rt && lt == ot && lt != at::kBool) &&
        !(at::isFloatingType(ot) && at::isFloatingType(lt) && at::isFloatingType(rt))) {
      ct = at::promote_types(lt, rt);
      if (ct == at::kBool) ct = at::kLong;
    }
    bool lcopy = false, rcopy = false;
    if (lhs.scalar_type() != ct) {
      lhs = lhs.to(ct);
      lcopy = true;
    }
    if (rhs.scalar_type() != ct) {
      rhs = rhs.to(ct);
      rcopy = true;
    }
    at::Tensor a = as_matrices(lhs, lperm, B, M, K, &lcopy);
    at::Tensor bm = as_matrices(rhs, rperm, B, K, N, &rcopy);
    at::Tensor out = at::from_blob(o.data(), {B, M, N}, at::TensorOptions().dtype(ot));
    // The GEMM writes the output buffer itself (64-byte aligned), or a temporary in the
    // compute type when that differs from the result type.
    const bool direct = ct == ot && aligned(out);
    at::Tensor res = direct ? out : at::empty({B, M, N}, out.options().dtype(ct));
    const bool onednn = use_onednn(a, bm, ct, ot);
    if (onednn) {
      // result = alpha * a @ b + beta * result with beta 0 and alpha 1, written into the
      // output buffer.
      at::native::mkldnn_matmul(a.select(0, 0), bm.select(0, 0), res.select(0, 0), 0.0f, 1.0f);
    } else if (B == 1) {
      at::Tensor res2 = res.select(0, 0);
      at::mm_out(res2, a.select(0, 0), bm.select(0, 0));
    } else {
      at::bmm_out(res, a, bm);
    }
    if (!direct) out.copy_(res);
    const int64_t copies = (lcopy ? 1 : 0) + (rcopy ? 1 : 0);
    if (copies) g_gemm_copies += copies;
    static const bool log = ember::LogEnabled("gemm");
    if (log) {
      ember::LogLine(
          "gemm",
          c10::str(onednn   ? "onednn"
                   : B == 1 ? "mm"
                            : "bmm",
                   " B=", B, " M=", M, " N=", N, " K=", K, " lhs strides ", a.strides(),
                   " rhs strides ", bm.strides(), " ", c10::toString(ct), "->", c10::toString(ot),
                   " operand copies ", copies, direct ? "" : " (result copied)"));
    }
    return ember::OkStatus();
  } catch (const std::exception& e) {
    auto* ce = dynamic_cast<const c10::Error*>(&e);
    return ember::Status(
        ember::StatusCode::kInternal,
        std::string("dot-general (ATen): ") + (ce ? ce->what_without_backtrace() : e.what()));
  }
}

}  // namespace

int64_t gemm_operand_copies() { return g_gemm_copies.load(); }

void register_aten_dot_general() {
  ember::ExternRegistry::Global().Register("ember.dot-general", &aten_dot_general);
}

}  // namespace ember_torch
