// scaled_dot_product_attention registered whole on the ember device (DESIGN §7,
// docs/lowering.md "Attention").
//
// torch's CompositeImplicit `scaled_dot_product_attention` asks the device's
// `_fused_sdp_choice_stub` which backend to use. For ember it answers
// `overrideable` when ember takes the call whole (4-D query/key/value of one float
// dtype with equal batch sizes, an optional bool or same-dtype float mask
// broadcastable to (B, H, L, S), not both a mask and is_causal; key/value with
// fewer heads than the query only with enable_gqa, where the flash kernel below
// computes the call, without a float mask) and `math` otherwise: other ranks, mixed
// dtypes, GQA with dropout or a float mask, and eager's error cases (a mask with is_causal: the
// math path raises eager's error; eager's CPU flash kernel, when it is chosen,
// applies both instead) take torch's math path, which decomposes into lowered ops
// (each such call counts in lowering_declined under
// "aten::scaled_dot_product_attention (math path: <reason>)").
// `torch.nn.attention.sdpa_kernel` is honoured: with the overrideable backend
// disabled ember takes the math path, with both disabled torch raises its "No
// viable backend" error.
//
// `_scaled_dot_product_fused_attention_overrideable` and its `_backward` are
// PrivateUse1 kernels; autograd comes from torch's derivatives.yaml entry for the
// overrideable op (its Autograd kernel saves the inputs, the output, the logsumexp
// and the philox seed/offset and calls the backward op). Each kernel records one
// lazy node of an `ember::` op (defined here, with Meta and CPU kernels), chosen at
// trace time:
//
// - flash: ATen's CPU flash kernel (`_scaled_dot_product_flash_attention_for_cpu`
//   and its backward: blocked, online softmax, the T x T scores never in memory,
//   the backward recomputing them from the saved log-sum-exp), for every call it
//   computes: no dropout (it draws no mask of ours), equal query/value head dims,
//   and the flash
//   backend enabled (`sdpa_kernel` without FLASH_ATTENTION selects the composite
//   below; `sdpa_kernel([OVERRIDEABLE])` measures it against flash). The ops have no
//   lowering, so each node is an ATen extern (aten_extern.h) running the CPU kernel:
//     ember::sdpa_flash_forward(q, k, v, attn_mask?, is_causal, scale)
//         -> (out, logsumexp [B, H, L] f32 (f64 for f64))
//     ember::sdpa_flash_backward(grad_out, q, k, v, out, logsumexp, attn_mask?,
//                                is_causal, scale) -> (grad_q, grad_k, grad_v)
//   A bool mask is passed as 0 / -inf of the query's dtype, a mask of other than 2
//   or 4 dims with leading 1s. Key/value with fewer heads (GQA) are read as such.
//   The flash backward computes no mask gradient: where a float mask needs one, the
//   backward is the composite's (the same formula, the scores recomputed from q, k).
// - composite: everything else ember takes (dropout, value head dim != query head
//   dim), and the backward of a float mask's gradient:
//     ember::sdpa_forward(q, k, v, attn_mask?, philox_seed, philox_offset,
//                         is_causal, [scale, dropout_p]) -> out
//     ember::sdpa_backward(grad_out, q, k, v, attn_mask?, philox_seed, philox_offset,
//                          is_causal, [scale, dropout_p]) -> (grad_q, grad_k, grad_v, grad_mask)
//   whose lowerings (src/lowering/attention.cc) fuse scaling, masking, softmax and
//   dropout around two dot-generals (the scores are materialised). scale and
//   dropout_p are plain arguments (part of the graph key: model constants), so the
//   backward rebuilds the forward's score and softmax nodes exactly and a training
//   step's graph computes them once (CSE). logsumexp is returned undefined.
//
// Dropout (composite only): philox_seed / philox_offset are 0-d int64 ember tensors
// holding a (seed, offset) pair of the device generator drawn at trace time (graph
// inputs, never part of the hash). The keep mask is element i of Ember's Philox draw
// rng-uniform(seed, offset, stream 0) < 1 - dropout_p (f32), on every backend: the
// lowered graph draws it with rng-uniform, the CPU kernels (aten backend, externs)
// with the same header-only Philox (src/eval/philox.h), so the backward regenerates
// exactly the forward's mask wherever each runs. Each call takes a fresh pair
// (offset advanced by B*H*L*S draws): two calls never share a mask; a checkpoint's
// recompute, replaying the generator's state, draws the same pair.
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../eval/philox.h"  // header-only, torch-free
#include "bridge.h"

namespace ember_torch {
namespace {

bool is_float_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

// Why ATen's CPU flash kernel cannot compute this call ("" when it can).
std::string flash_declines(const at::Tensor& q, const at::Tensor& v,
                           const std::optional<at::Tensor>& mask, double dropout_p) {
  if (!at::globalContext().userEnabledFlashSDP()) return "flash backend disabled (sdpa_kernel)";
  if (dropout_p > 0) return "dropout";
  if (q.size(3) != v.size(3)) return "value head dim differs from query's";
  return "";
}

// Why ember does not take this call whole ("" when it does). Key/value with fewer
// heads than the query (GQA) need `gqa` (enable_gqa) and the flash kernel.
std::string decline_reason(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::optional<at::Tensor>& mask, bool is_causal, double dropout_p,
                           bool gqa) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return "query/key/value not 4-D";
  if (q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type())
    return "query/key/value dtypes differ";
  if (!is_float_dtype(q.scalar_type())) return "non-floating query";
  if (q.size(0) != k.size(0) || q.size(0) != v.size(0)) return "batch sizes differ";
  if (k.size(1) != v.size(1)) return "key/value head counts differ";
  if (q.size(1) != k.size(1)) {
    if (!gqa) return "head counts differ (GQA)";
    if (q.size(1) % k.size(1) != 0) return "query heads not a multiple of key heads (GQA)";
    std::string f = flash_declines(q, v, mask, dropout_p);
    if (!f.empty()) return "GQA with " + f;
    // The backward of a float mask's gradient is the composite's, which has no GQA.
    if (mask && mask->defined() && mask->scalar_type() != at::kBool)
      return "GQA with a float attn_mask";
  }
  if (q.size(3) != k.size(3)) return "query/key head dims differ";
  if (k.size(2) != v.size(2)) return "key/value lengths differ";
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0) return "empty input";
  for (const auto* t : {&q, &k, &v}) {
    if (t->device().type() != kDeviceType) return "an input not on ember";
  }
  if (mask && mask->defined()) {
    if (is_causal) return "attn_mask with is_causal";
    if (mask->device().type() != kDeviceType) return "attn_mask not on ember";
    if (mask->scalar_type() != at::kBool && mask->scalar_type() != q.scalar_type())
      return "attn_mask dtype differs from query";
    if (mask->dim() > 4) return "attn_mask of more than 4 dims";
    const int64_t full[4] = {q.size(0), q.size(1), q.size(2), k.size(2)};
    for (int64_t i = 0; i < mask->dim(); ++i) {
      int64_t m = mask->size(mask->dim() - 1 - i), f = full[3 - i];
      if (m != 1 && m != f) return "attn_mask not broadcastable to (B, H, L, S)";
    }
  }
  return "";
}

void note_math_path(const std::string& reason) {
  std::lock_guard<std::mutex> g(metrics().mu);
  metrics().lowering_declined["aten::scaled_dot_product_attention (math path: " + reason + ")"]++;
}

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  const auto& ctx = at::globalContext();
  std::string why = ctx.userEnabledOverrideableSDP()
                        ? decline_reason(q, k, v, mask, is_causal, dropout_p, enable_gqa)
                        : "overrideable backend disabled (sdpa_kernel)";
  if (why.empty()) return static_cast<int64_t>(at::SDPBackend::overrideable);
  // torch raises "No viable backend" for `error` when math is disabled too.
  if (!ctx.userEnabledMathSDP()) return static_cast<int64_t>(at::SDPBackend::error);
  note_math_path(why);
  return static_cast<int64_t>(at::SDPBackend::math);
}

// A 0-d int64 ember tensor holding `v`'s bits (device data).
at::Tensor int64_scalar(uint64_t v) {
  at::Tensor t = alloc_buffer({}, {}, at::kLong);
  *t.data_ptr<int64_t>() = static_cast<int64_t>(v);
  return make_lazy_data(t);
}

double scale_of(const at::Tensor& q, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

// A call that reaches the overrideable kernels came through fused_sdp_choice (or was
// made directly): key/value with fewer heads are read as GQA.
void check_supported(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::optional<at::Tensor>& mask, bool is_causal, double dropout_p) {
  std::string why = decline_reason(q, k, v, mask, is_causal, dropout_p, /*gqa=*/true);
  TORCH_CHECK(why.empty(), op, " on ember: unsupported call (", why, "); query ", q.sizes(), " ",
              q.scalar_type(), ", key ", k.sizes(), ", value ", v.sizes(),
              "; use torch.nn.functional.scaled_dot_product_attention, which takes the math path");
  TORCH_CHECK(dropout_p >= 0 && dropout_p <= 1, op, ": dropout_p must be in [0, 1], got ",
              dropout_p);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
overrideable_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                     bool return_debug_mask, std::optional<double> scale) {
  const char* name = "_scaled_dot_product_fused_attention_overrideable";
  check_supported(name, q, k, v, attn_bias, is_causal, dropout_p);
  TORCH_CHECK(!return_debug_mask, name, " on ember: return_debug_mask=True is not supported");
  const double sc = scale_of(q, scale);
  if (flash_declines(q, v, attn_bias, dropout_p).empty()) {
    static auto flash = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("ember::sdpa_flash_forward", "")
                            .typed<std::tuple<at::Tensor, at::Tensor>(
                                const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                const std::optional<at::Tensor>&, bool, double)>();
    auto [out, lse] = flash.call(q, k, v, attn_bias, is_causal, sc);
    return {out,
            lse,
            at::Tensor(),
            at::Tensor(),
            c10::SymInt(q.size(2)),
            c10::SymInt(k.size(2)),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
  uint64_t seed = 0, offset = 0;
  if (dropout_p > 0) {
    auto pr = next_rng_pair(std::nullopt,
                            static_cast<uint64_t>(q.size(0) * q.size(1) * q.size(2) * k.size(2)));
    seed = pr.first;
    offset = pr.second;
  }
  at::Tensor seed_t = int64_scalar(seed), offset_t = int64_scalar(offset);
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("ember::sdpa_forward", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         const std::optional<at::Tensor>&, const at::Tensor&,
                                         const at::Tensor&, bool, at::ArrayRef<double>)>();
  std::vector<double> sd = {sc, dropout_p};
  at::Tensor out = op.call(q, k, v, attn_bias, seed_t, offset_t, is_causal, sd);
  return {out,
          at::Tensor(),
          at::Tensor(),
          at::Tensor(),
          c10::SymInt(q.size(2)),
          c10::SymInt(k.size(2)),
          seed_t,
          offset_t,
          at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> overrideable_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k,
    c10::SymInt max_q, c10::SymInt max_k, double dropout_p, bool is_causal,
    const at::Tensor& philox_seed, const at::Tensor& philox_offset, std::optional<double> scale) {
  const char* name = "_scaled_dot_product_fused_attention_overrideable_backward";
  std::optional<at::Tensor> mask;
  if (attn_bias.defined()) mask = attn_bias;
  const bool mask_grad = grad_input_mask[3] && mask && at::isFloatingType(mask->scalar_type());
  // The forward ran the flash kernel (and checked the call, whatever sdpa_kernel says now).
  if (logsumexp.defined() && !mask_grad) {
    static auto flash = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("ember::sdpa_flash_backward", "")
                            .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                                const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                const std::optional<at::Tensor>&, bool, double)>();
    auto [gq, gk, gv] =
        flash.call(grad_out, q, k, v, out, logsumexp, mask, is_causal, scale_of(q, scale));
    return {grad_input_mask[0] ? gq : at::Tensor(), grad_input_mask[1] ? gk : at::Tensor(),
            grad_input_mask[2] ? gv : at::Tensor(), at::Tensor()};
  }
  // The composite: the forward's, or a flash forward whose float mask needs its gradient
  // (the flash backward computes none; no dropout, so the pair is never read).
  check_supported(name, q, k, v, mask, is_causal, dropout_p);
  at::Tensor seed_t = philox_seed, offset_t = philox_offset;
  if (logsumexp.defined() && !seed_t.defined()) seed_t = offset_t = int64_scalar(0);
  TORCH_CHECK(
      seed_t.defined() && offset_t.defined() && seed_t.numel() == 1 && offset_t.numel() == 1, name,
      " on ember: philox_seed/philox_offset must be the forward's 0-d tensors");
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("ember::sdpa_backward", "")
                       .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
                           const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                           const at::Tensor&, bool, at::ArrayRef<double>)>();
  std::vector<double> sd = {scale_of(q, scale), dropout_p};
  auto [gq, gk, gv, gm] = op.call(grad_out, q, k, v, mask, seed_t, offset_t, is_causal, sd);
  return {grad_input_mask[0] ? gq : at::Tensor(), grad_input_mask[1] ? gk : at::Tensor(),
          grad_input_mask[2] ? gv : at::Tensor(), mask_grad ? gm : at::Tensor()};
}

// ---------------------------------------------------------------- ember:: ops
// The forward output's layout, as eager CPU returns it: its flash kernel lays the
// output out like the query (dims in the query's stride order); its math path, which
// eager takes for dropout, returns a row-major matmul result.
at::Tensor empty_output(const at::Tensor& q, const at::Tensor& v, double dropout_p,
                        const at::TensorOptions& o) {
  std::vector<int64_t> sizes = {q.size(0), q.size(1), q.size(2), v.size(3)};
  if (dropout_p > 0) return at::empty(sizes, o);
  std::vector<int64_t> order = {0, 1, 2, 3};  // outermost first
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return q.stride(a) > q.stride(b); });
  std::vector<int64_t> perm_sizes(4), inverse(4);
  for (int64_t j = 0; j < 4; ++j) {
    perm_sizes[j] = sizes[order[j]];
    inverse[order[j]] = j;
  }
  return at::empty(perm_sizes, o).permute(inverse);
}

at::Tensor mask_grad_like(const at::Tensor& q, const std::optional<at::Tensor>& mask,
                          const at::TensorOptions& o) {
  if (mask && mask->defined() && at::isFloatingType(mask->scalar_type())) {
    return at::empty(mask->sizes(), o.dtype(mask->scalar_type()));
  }
  return at::empty({0}, o.dtype(q.scalar_type()));
}

at::Tensor sdpa_forward_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& mask, const at::Tensor& seed,
                             const at::Tensor& offset, bool is_causal, at::ArrayRef<double> sd) {
  return empty_output(q, v, sd.at(1), q.options());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_backward_meta(
    const at::Tensor& go, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& mask, const at::Tensor& seed, const at::Tensor& offset,
    bool is_causal, at::ArrayRef<double> sd) {
  auto o = q.options();
  return {at::empty(q.sizes(), o), at::empty(k.sizes(), o), at::empty(v.sizes(), o),
          mask_grad_like(q, mask, o)};
}

// CPU reference (aten backend, externs): the same algorithm as the lowering,
// in f32 (f64 for f64 inputs).
struct CpuProbs {
  at::Tensor probs;  // softmax of the masked, scaled scores; 0 on fully masked rows
  at::Tensor keep;   // dropout: kept elements scaled by 1 / (1 - p) (undefined without dropout)
};

at::Tensor keep_scaled(const at::Tensor& seed_t, const at::Tensor& offset_t, at::IntArrayRef sizes,
                       double p, at::ScalarType ct) {
  uint64_t seed = static_cast<uint64_t>(seed_t.item<int64_t>());
  uint64_t offset = static_cast<uint64_t>(offset_t.item<int64_t>());
  at::Tensor keep = at::empty(sizes, at::TensorOptions().dtype(at::kBool));
  bool* kp = keep.data_ptr<bool>();
  const float keep_p = static_cast<float>(1.0 - p);
  const int64_t n = keep.numel();
  for (int64_t b = 0; b * 4 < n; ++b) {
    auto block = ember::EmberRngBlock(seed, offset, 0, static_cast<uint64_t>(b));
    for (int64_t j = 0; j < 4 && b * 4 + j < n; ++j) {
      kp[b * 4 + j] = ember::UniformFloatFromBits(block[j]) < keep_p;
    }
  }
  double s = p >= 1 ? 0.0 : 1.0 / (1.0 - p);
  return keep.to(ct).mul_(s);
}

CpuProbs cpu_probs(const at::Tensor& q, const at::Tensor& k, const std::optional<at::Tensor>& mask,
                   const at::Tensor& seed, const at::Tensor& offset, bool is_causal,
                   at::ArrayRef<double> sd, at::ScalarType ct) {
  const double inf = std::numeric_limits<double>::infinity();
  at::Tensor s = at::matmul(q.to(ct), k.to(ct).transpose(-2, -1)).mul_(sd[0]);
  if (mask && mask->defined()) {
    if (mask->scalar_type() == at::kBool)
      s.masked_fill_(mask->logical_not(), -inf);
    else
      s.add_(mask->to(ct));
  }
  if (is_causal) {
    at::Tensor allowed =
        at::ones({q.size(2), k.size(2)}, at::TensorOptions().dtype(at::kBool)).tril();
    s.masked_fill_(allowed.logical_not(), -inf);
  }
  at::Tensor m = std::get<0>(s.max(-1, true));
  at::Tensor e = (s - m).exp_();
  at::Tensor p = e / e.sum(-1, true);
  p.masked_fill_(m == -inf, 0);
  CpuProbs r{p, at::Tensor()};
  if (sd[1] > 0) r.keep = keep_scaled(seed, offset, p.sizes(), sd[1], ct);
  return r;
}

at::ScalarType compute_type(const at::Tensor& q) {
  return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

at::Tensor sdpa_forward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::optional<at::Tensor>& mask, const at::Tensor& seed,
                            const at::Tensor& offset, bool is_causal, at::ArrayRef<double> sd) {
  TORCH_CHECK(sd.size() == 2, "ember::sdpa_forward: scale_dropout must hold [scale, dropout_p]");
  at::ScalarType ct = compute_type(q);
  CpuProbs pr = cpu_probs(q, k, mask, seed, offset, is_causal, sd, ct);
  at::Tensor z = pr.keep.defined() ? pr.probs * pr.keep : pr.probs;
  at::Tensor out = empty_output(q, v, sd[1], q.options());
  out.copy_(at::matmul(z, v.to(ct)));
  return out;
}

at::Tensor sum_to_mask(const at::Tensor& ds, const at::Tensor& mask) {
  at::Tensor g = ds;
  while (g.dim() > mask.dim()) g = g.sum(0);
  for (int64_t d = 0; d < mask.dim(); ++d) {
    if (mask.size(d) == 1 && g.size(d) != 1) g = g.sum(d, true);
  }
  return g.to(mask.scalar_type()).contiguous();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_backward_cpu(
    const at::Tensor& go, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& mask, const at::Tensor& seed, const at::Tensor& offset,
    bool is_causal, at::ArrayRef<double> sd) {
  TORCH_CHECK(sd.size() == 2, "ember::sdpa_backward: scale_dropout must hold [scale, dropout_p]");
  at::ScalarType ct = compute_type(q);
  CpuProbs pr = cpu_probs(q, k, mask, seed, offset, is_causal, sd, ct);
  at::Tensor z = pr.keep.defined() ? pr.probs * pr.keep : pr.probs;
  at::Tensor gof = go.to(ct), qf = q.to(ct), kf = k.to(ct), vf = v.to(ct);
  at::Tensor gv = at::matmul(z.transpose(-2, -1), gof);
  at::Tensor dp = at::matmul(gof, vf.transpose(-2, -1));
  if (pr.keep.defined()) dp = dp * pr.keep;
  at::Tensor ds = pr.probs * (dp - (dp * pr.probs).sum(-1, true));
  at::Tensor gq = at::matmul(ds, kf).mul_(sd[0]);
  at::Tensor gk = at::matmul(ds.transpose(-2, -1), qf).mul_(sd[0]);
  at::Tensor gm = mask_grad_like(q, mask, q.options());
  if (gm.numel() > 0) gm = sum_to_mask(ds, *mask);
  return {gq.to(q.scalar_type()), gk.to(q.scalar_type()), gv.to(q.scalar_type()), gm};
}

// ------------------------------------------------------- flash (ATen's CPU kernel)
// The layouts ATen's CPU flash kernel returns: out like the query (empty_output), the
// logsumexp [B, H, L] laid out as [B, L, H], each gradient [B, H, n, E] as [B, n, H, E].
at::Tensor heads_second(int64_t b, int64_t h, int64_t n, int64_t e, const at::TensorOptions& o) {
  return at::empty({b, n, h, e}, o).transpose(1, 2);
}

at::ScalarType lse_type(const at::Tensor& q) {
  return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

std::tuple<at::Tensor, at::Tensor> sdpa_flash_forward_meta(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v,
                                                           const std::optional<at::Tensor>& mask,
                                                           bool is_causal, double scale) {
  at::Tensor lse =
      at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(lse_type(q))).transpose(1, 2);
  return {empty_output(q, v, 0, q.options()), lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sdpa_flash_backward_meta(
    const at::Tensor& go, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& mask,
    bool is_causal, double scale) {
  auto o = q.options();
  return {heads_second(q.size(0), q.size(1), q.size(2), q.size(3), o),
          heads_second(k.size(0), k.size(1), k.size(2), k.size(3), o),
          heads_second(v.size(0), v.size(1), v.size(2), v.size(3), o)};
}

// The mask as the flash kernel takes it: of the query's dtype (a bool mask as 0 where
// true, -inf where false), 2-D or 4-D (leading 1s added).
std::optional<at::Tensor> flash_mask(const std::optional<at::Tensor>& mask, const at::Tensor& q) {
  if (!mask || !mask->defined()) return std::nullopt;
  at::Tensor m = *mask;
  if (m.scalar_type() == at::kBool) {
    m = at::zeros(m.sizes(), q.options())
            .masked_fill_(m.logical_not(), -std::numeric_limits<double>::infinity());
  }
  if (m.dim() != 2) {
    while (m.dim() < 4) m = m.unsqueeze(0);
  }
  return m;
}

// The kernel reads rows with unit stride: anything else is made contiguous.
at::Tensor unit_last(const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

std::tuple<at::Tensor, at::Tensor> sdpa_flash_forward_cpu(const at::Tensor& q, const at::Tensor& k,
                                                          const at::Tensor& v,
                                                          const std::optional<at::Tensor>& mask,
                                                          bool is_causal, double scale) {
  return at::_scaled_dot_product_flash_attention_for_cpu(
      unit_last(q), unit_last(k), unit_last(v), 0.0, is_causal, flash_mask(mask, q), scale);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sdpa_flash_backward_cpu(
    const at::Tensor& go, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& mask,
    bool is_causal, double scale) {
  return at::_scaled_dot_product_flash_attention_for_cpu_backward(
      unit_last(go), unit_last(q), unit_last(k), unit_last(v), unit_last(out), lse, 0.0, is_causal,
      flash_mask(mask, q), scale);
}

// The `.out` overloads an ATen extern calls (aten_step.cpp finds them): the stubs
// ATen's flash functions call, writing straight into the program's buffers. `out` and
// the gradients are dense [B, H, n, E] in any layout (an extern's buffers are
// row-major); the kernels read their strides through the [B, n, H, E] views ATen's
// wrappers pass, so the result is the functional op's, bit for bit, with no result
// copy (the functional op's results are laid out heads-second and were relayouted into
// the row-major buffers). The logsumexp goes through a [B, L, H] temporary, as ATen
// lays it out (1/E of the output's size).
std::tuple<at::Tensor&, at::Tensor&> sdpa_flash_forward_out_cpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& mask, bool is_causal, double scale, at::Tensor& out,
    at::Tensor& lse) {
  at::Tensor lse_blh = at::empty({q.size(0), q.size(2), q.size(1)}, lse.options());
  at::native::flash_attention_kernel(at::kCPU, out.transpose(1, 2), lse_blh, unit_last(q),
                                     unit_last(k), unit_last(v), 0.0, is_causal,
                                     flash_mask(mask, q), scale);
  lse.copy_(lse_blh.transpose(1, 2));
  return {out, lse};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> sdpa_flash_backward_out_cpu(
    const at::Tensor& go, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& mask,
    bool is_causal, double scale, at::Tensor& grad_q, at::Tensor& grad_k, at::Tensor& grad_v) {
  // The kernel accumulates into the gradients, which ATen's wrapper zero-fills.
  at::Tensor gq = grad_q.transpose(1, 2).zero_();
  at::Tensor gk = grad_k.transpose(1, 2).zero_();
  at::Tensor gv = grad_v.transpose(1, 2).zero_();
  at::native::flash_attention_backward_kernel(
      at::kCPU, gq, gk, gv, unit_last(go).transpose(1, 2), unit_last(q).transpose(1, 2),
      unit_last(k).transpose(1, 2), unit_last(v).transpose(1, 2), unit_last(out).transpose(1, 2),
      lse.transpose(1, 2), 0.0, is_causal, flash_mask(mask, q), scale);
  return {grad_q, grad_k, grad_v};
}

}  // namespace
}  // namespace ember_torch

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &ember_torch::fused_sdp_choice)
}  // namespace at::native

// Every kernel here reads its operands through their strides (torch's
// `flexible_layout`): an ATen extern hands them the runtime's row-major buffers as
// they are, with no relayout to eager's layout.
TORCH_LIBRARY(ember, m) {
  m.def(
      "sdpa_forward(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, Tensor philox_seed, "
      "Tensor philox_offset, bool is_causal, float[] scale_dropout) -> Tensor",
      {at::Tag::flexible_layout});
  m.def(
      "sdpa_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor? attn_mask, "
      "Tensor philox_seed, Tensor philox_offset, bool is_causal, float[] scale_dropout) "
      "-> (Tensor, Tensor, Tensor, Tensor)",
      {at::Tag::flexible_layout});
  m.def(
      "sdpa_flash_forward(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, "
      "bool is_causal, float scale) -> (Tensor output, Tensor logsumexp)",
      {at::Tag::flexible_layout});
  m.def(
      "sdpa_flash_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, "
      "Tensor logsumexp, Tensor? attn_mask, bool is_causal, float scale) "
      "-> (Tensor grad_query, Tensor grad_key, Tensor grad_value)",
      {at::Tag::flexible_layout});
  m.def(
      "sdpa_flash_forward.out(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, "
      "bool is_causal, float scale, *, Tensor(a!) output, Tensor(b!) logsumexp) "
      "-> (Tensor(a!), Tensor(b!))",
      {at::Tag::flexible_layout});
  m.def(
      "sdpa_flash_backward.out(Tensor grad_out, Tensor query, Tensor key, Tensor value, "
      "Tensor out, Tensor logsumexp, Tensor? attn_mask, bool is_causal, float scale, *, "
      "Tensor(a!) grad_query, Tensor(b!) grad_key, Tensor(c!) grad_value) "
      "-> (Tensor(a!), Tensor(b!), Tensor(c!))",
      {at::Tag::flexible_layout});
}

TORCH_LIBRARY_IMPL(ember, Meta, m) {
  m.impl("sdpa_forward", TORCH_FN(ember_torch::sdpa_forward_meta));
  m.impl("sdpa_backward", TORCH_FN(ember_torch::sdpa_backward_meta));
  m.impl("sdpa_flash_forward", TORCH_FN(ember_torch::sdpa_flash_forward_meta));
  m.impl("sdpa_flash_backward", TORCH_FN(ember_torch::sdpa_flash_backward_meta));
}

TORCH_LIBRARY_IMPL(ember, CPU, m) {
  m.impl("sdpa_forward", TORCH_FN(ember_torch::sdpa_forward_cpu));
  m.impl("sdpa_backward", TORCH_FN(ember_torch::sdpa_backward_cpu));
  m.impl("sdpa_flash_forward", TORCH_FN(ember_torch::sdpa_flash_forward_cpu));
  m.impl("sdpa_flash_backward", TORCH_FN(ember_torch::sdpa_flash_backward_cpu));
  m.impl("sdpa_flash_forward.out", TORCH_FN(ember_torch::sdpa_flash_forward_out_cpu));
  m.impl("sdpa_flash_backward.out", TORCH_FN(ember_torch::sdpa_flash_backward_out_cpu));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(ember_torch::fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable",
         TORCH_FN(ember_torch::overrideable_forward));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         TORCH_FN(ember_torch::overrideable_backward));
}
