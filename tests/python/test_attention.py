"""scaled_dot_product_attention registered whole on ember (src/torch/attention.cpp,
src/lowering/attention.cc) against eager CPU.

Two kernels: ATen's CPU flash kernel as an extern (`ember::sdpa_flash_*`, the default
wherever it computes the call) and the lowered composite (`ember::sdpa_*`: dropout,
value head dim != query's, the backward of a float mask's gradient;
`sdpa_kernel([OVERRIDEABLE])` selects it for any call). Values: forward and the gradients of query, key, value and a float
mask for a fixed random cotangent, each case on every kernel that takes it; float32 at
rtol/atol 1e-5 (the composite computes the softmax in one pass per row, eager CPU's
flash kernel in blocks), bfloat16 at 2e-2 relative plus 2e-2 of the largest magnitude
(eager rounds intermediates to bf16, the composite keeps f32). Each value case also
checks which kernel took the call whole (its op in the pending graph) and that no
lowering failed or declined.

Dropout (composite): statistical (keep rate, scaling), the backward checked against
the mask the forward actually used (read back from its own output with value =
identity), the same mask in a later graph and in a checkpoint's recompute, fresh masks
per call, reproducibility under torch.manual_seed, and a seed that never changes the
graph (no recompile).
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

import ember
from conftest import DEV

F32, BF16 = torch.float32, torch.bfloat16


@pytest.fixture(params=["interpreter", "cpu"])
def backend(request):
    old = ember.config.backend
    ember.sync()
    ember.config.backend = request.param
    try:
        yield request.param
    finally:
        ember.sync()
        ember.config.backend = old


def _set_backend(name):
    ember.sync()
    ember.config.backend = name


def rnd(*shape, gen):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


# name -> (q shape, k shape, v shape, mask maker or None, kwargs)
CASES = {
    "plain": ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), None, {}),
    "causal_square": ((2, 2, 6, 8), (2, 2, 6, 8), (2, 2, 6, 8), None, {"is_causal": True}),
    "causal_rect": ((1, 2, 5, 4), (1, 2, 7, 4), (1, 2, 7, 3), None, {"is_causal": True}),
    "scale": ((2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4), None, {"scale": 0.3}),
    "float_mask_2d": ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), lambda g: rnd(5, 7, gen=g), {}),
    "float_mask_bcast": (
        (2, 3, 5, 4),
        (2, 3, 7, 4),
        (2, 3, 7, 6),
        lambda g: rnd(2, 1, 5, 7, gen=g),
        {},
    ),
    "bool_mask": (
        (2, 3, 5, 4),
        (2, 3, 7, 4),
        (2, 3, 7, 6),
        lambda g: (torch.rand(2, 3, 5, 7, generator=g) > 0.4) | torch.eye(5, 7, dtype=torch.bool),
        {},
    ),
    # Rows with nothing to attend to give 0 (eager's safe softmax), gradients 0 there.
    "bool_mask_empty_row": (
        (1, 2, 4, 8),
        (1, 2, 5, 8),
        (1, 2, 5, 3),
        lambda g: torch.ones(4, 5, dtype=torch.bool).index_fill(0, torch.tensor([1]), False),
        {},
    ),
    "float_mask_inf_row": (
        (1, 2, 4, 8),
        (1, 2, 5, 8),
        (1, 2, 5, 3),
        lambda g: rnd(4, 5, gen=g).index_fill(0, torch.tensor([2]), float("-inf")),
        {},
    ),
    # Equal head dims: the flash kernel's cases (and the composite's, forced).
    "plain_flash": ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4), None, {}),
    "bool_mask_flash": (
        (2, 3, 5, 4),
        (2, 3, 7, 4),
        (2, 3, 7, 4),
        lambda g: (torch.rand(2, 3, 5, 7, generator=g) > 0.4) | torch.eye(5, 7, dtype=torch.bool),
        {},
    ),
    "bool_mask_3d_empty_row_flash": (
        (1, 2, 4, 8),
        (1, 2, 5, 8),
        (1, 2, 5, 8),
        lambda g: torch.ones(2, 4, 5, dtype=torch.bool).index_fill(1, torch.tensor([1]), False),
        {},
    ),
    "float_mask_bcast_no_grad": (
        (2, 3, 5, 4),
        (2, 3, 7, 4),
        (2, 3, 7, 4),
        lambda g: rnd(2, 1, 5, 7, gen=g),
        {},
    ),
    "float_mask_3d_inf_row_no_grad": (
        (1, 2, 4, 8),
        (1, 2, 5, 8),
        (1, 2, 5, 8),
        lambda g: rnd(2, 4, 5, gen=g).index_fill(1, torch.tensor([2]), float("-inf")),
        {},
    ),
    "gqa_causal": (
        (1, 4, 5, 8),
        (1, 2, 5, 8),
        (1, 2, 5, 8),
        None,
        {"is_causal": True, "enable_gqa": True},
    ),
}
NO_MASK_GRAD = {"float_mask_bcast_no_grad", "float_mask_3d_inf_row_no_grad"}
FLASH, COMPOSITE = "ember::sdpa_flash_forward", "ember::sdpa_forward"


def _grad_mask(case, mask):
    return mask is not None and mask.dtype != torch.bool and case not in NO_MASK_GRAD


def _kernels(case):
    """The kernels that take `case`: flash where it computes it (the default), and the
    composite (forced with sdpa_kernel([OVERRIDEABLE]) where flash is the default)."""
    qs, _, vs, _, kw = CASES[case]
    flash = qs[3] == vs[3]
    if kw.get("enable_gqa"):
        return ["flash"]  # the composite takes no GQA (the math path would)
    return ["flash", "composite"] if flash else ["composite"]


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize(
    "case,kernel", [pytest.param(c, kern, id=f"{c}-{kern}") for c in CASES for kern in _kernels(c)]
)
def test_sdpa_matches_eager(case, kernel, dtype, backend):
    qs, ks, vs, mask_fn, kw = CASES[case]
    g = torch.Generator().manual_seed(list(CASES).index(case))
    q, k, v = rnd(*qs, gen=g), rnd(*ks, gen=g), rnd(*vs, gen=g)
    mask = mask_fn(g) if mask_fn else None
    grad_mask = _grad_mask(case, mask)
    cot = rnd(qs[0], qs[1], qs[2], vs[3], gen=g)
    forced = kernel == "composite" and "flash" in _kernels(case)

    def run(device):
        leaves = [t.to(device=device, dtype=dtype).requires_grad_() for t in (q, k, v)]
        m = None
        if mask is not None:
            m = mask.to(device) if mask.dtype == torch.bool else mask.to(device=device, dtype=dtype)
            if grad_mask:
                m.requires_grad_()
        if device == DEV and forced:
            with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
                out = F.scaled_dot_product_attention(*leaves, attn_mask=m, **kw)
        else:
            out = F.scaled_dot_product_attention(*leaves, attn_mask=m, **kw)
        if device == DEV:
            pending = ember.pending_graph()
            assert (FLASH if kernel == "flash" else COMPOSITE) + "(" in pending, pending
        (out * cot.to(device=device, dtype=dtype)).sum().backward()
        grads = [t.grad for t in leaves] + ([m.grad] if grad_mask else [])
        return [out] + grads

    want = run("cpu")
    got = run(DEV)
    ember.sync()
    assert got[0].stride() == want[0].stride()
    for i, (a, b) in enumerate(zip(got, want)):
        a = a.cpu().double()
        b = b.double()
        if dtype == BF16:
            tol = 2e-2 * max(1.0, b.abs().max().item())
            torch.testing.assert_close(a, b, rtol=2e-2, atol=tol, msg=lambda m: f"output {i}: {m}")
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"output {i}: {m}")
    c = ember.metrics.counters()
    assert not c["lowering_errors"], c["lowering_errors"]
    assert not c["lowering_declined"], c["lowering_declined"]


def test_flash_kernels_write_into_the_program_buffers():
    """The flash forward and backward externs run ATen's CPU flash kernels on the
    program's own buffers (their `.out` overloads): no result is copied, and the
    values are eager's, bit for bit (the same kernels; only the layouts differ)."""
    g = torch.Generator().manual_seed(7)
    x = rnd(2, 6, 3 * 16, gen=g)

    def run(device):
        xl = x.clone().to(device).requires_grad_()
        q, k, v = [t.view(2, 6, 2, 8).transpose(1, 2) for t in xl.split(16, dim=2)]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        (y.transpose(1, 2).reshape(2, 6, 16) * 1.5).sum().backward()
        return y, xl.grad

    want = run("cpu")
    before = ember.metrics.counters()["extern_copies"]
    got = run(DEV)
    ember.sync()
    assert ember.metrics.counters()["extern_copies"] == before
    for a, b in zip(got, want):
        assert torch.equal(a.cpu(), b)


def test_output_layout_follows_eager():
    """Eager CPU lays the output out like the query (flash kernel), row-major with
    dropout (math path); ember reports the same strides, so views behave alike."""
    q = torch.randn(2, 5, 3, 4).transpose(1, 2)
    for kw in ({}, {"is_causal": True}, {"attn_mask": torch.randn(5, 5)}):
        want = F.scaled_dot_product_attention(q, q, q, **kw)
        dkw = {k: (v.to(DEV) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
        got = F.scaled_dot_product_attention(q.to(DEV), q.to(DEV), q.to(DEV), **dkw)
        assert got.stride() == want.stride(), kw
        torch.testing.assert_close(
            got.transpose(1, 2).view(2, 5, 12).cpu(), want.transpose(1, 2).view(2, 5, 12)
        )
    got = F.scaled_dot_product_attention(q.to(DEV), q.to(DEV), q.to(DEV), dropout_p=0.5)
    assert got.is_contiguous()


@pytest.mark.parametrize("mask_grad", [True, False], ids=["mask_grad", "no_mask_grad"])
def test_aten_backend_runs_the_cpu_kernels(mask_grad):
    """The `aten` backend runs ember::sdpa_* / sdpa_flash_* through their CPU kernels:
    same values (a float mask's gradient comes from the composite backward)."""
    old = ember.config.backend
    try:
        _set_backend("aten")
        g = torch.Generator().manual_seed(3)
        q, k, v, m = (
            rnd(2, 2, 5, 4, gen=g),
            rnd(2, 2, 6, 4, gen=g),
            rnd(2, 2, 6, 4, gen=g),
            rnd(5, 6, gen=g),
        )
        outs = []
        for dev in ("cpu", DEV):
            ts = [t.float().to(dev).requires_grad_() for t in (q, k, v)]
            ts.append(m.float().to(dev).requires_grad_(mask_grad))
            o = F.scaled_dot_product_attention(ts[0], ts[1], ts[2], attn_mask=ts[3], scale=0.7)
            o.square().sum().backward()
            outs.append([o] + [t.grad for t in ts[: 4 if mask_grad else 3]])
        for a, b in zip(outs[1], outs[0]):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)
        externs = ember.metrics.counters()["externs"]
        assert "ember::sdpa_flash_forward" in externs
        assert ("ember::sdpa_backward" if mask_grad else "ember::sdpa_flash_backward") in externs
    finally:
        _set_backend(old)


def test_gqa_with_dropout_and_other_ranks_take_the_math_path(backend):
    """GQA is the flash kernel's (test_sdpa_matches_eager's gqa case); with dropout, or
    without enable_gqa, or for other ranks, ember takes the math path."""
    g = torch.Generator().manual_seed(1)
    q, k, v = rnd(1, 4, 5, 8, gen=g), rnd(1, 2, 5, 8, gen=g), rnd(1, 2, 5, 8, gen=g)
    qe, ke, ve = (t.float().to(DEV) for t in (q, k, v))
    torch.manual_seed(0)
    got = F.scaled_dot_product_attention(qe, ke, ve, enable_gqa=True, dropout_p=0.5)
    assert "ember::sdpa" not in ember.pending_graph()
    plain = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    assert got.cpu().isfinite().all() and not torch.allclose(got.cpu(), plain)  # dropped
    q3 = rnd(3, 5, 8, gen=g).float()
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q3.to(DEV), q3.to(DEV), q3.to(DEV)).cpu(),
        F.scaled_dot_product_attention(q3, q3, q3),
        rtol=1e-5,
        atol=1e-5,
    )
    declined = ember.metrics.counters()["lowering_declined"]
    assert declined.get("aten::scaled_dot_product_attention (math path: GQA with dropout)") == 1
    assert (
        declined.get("aten::scaled_dot_product_attention (math path: query/key/value not 4-D)") == 1
    )


def test_sdpa_kernel_context_is_honoured(backend):
    q = torch.randn(1, 2, 5, 4)
    d = q.to(DEV)
    with sdpa_kernel([SDPBackend.MATH]):
        got = F.scaled_dot_product_attention(d, d, d, is_causal=True)
        assert "ember::sdpa_forward" not in ember.pending_graph()
    torch.testing.assert_close(got.cpu(), F.scaled_dot_product_attention(q, q, q, is_causal=True))
    declined = ember.metrics.counters()["lowering_declined"]
    assert (
        "aten::scaled_dot_product_attention (math path: overrideable backend disabled (sdpa_kernel))"
        in declined
    )
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):  # no FLASH_ATTENTION: the composite
        whole = F.scaled_dot_product_attention(d, d, d, is_causal=True)
        assert "ember::sdpa_forward(" in ember.pending_graph()
    torch.testing.assert_close(whole.cpu(), got.cpu())
    flash = F.scaled_dot_product_attention(d, d, d, is_causal=True)  # the default
    assert "ember::sdpa_flash_forward(" in ember.pending_graph()
    torch.testing.assert_close(flash.cpu(), got.cpu())
    with (
        sdpa_kernel([SDPBackend.FLASH_ATTENTION]),
        pytest.raises(RuntimeError, match="No viable backend"),
    ):
        F.scaled_dot_product_attention(d, d, d)


def test_mask_with_is_causal_raises_like_eager():
    """The math path raises eager's error (eager's CPU flash kernel, when chosen, would
    apply both instead; ember always takes the math path for this pair)."""
    g = torch.Generator().manual_seed(5)
    q, k, v, m = (
        rnd(*s, gen=g).float() for s in ((1, 2, 6, 4), (1, 2, 6, 4), (1, 2, 6, 3), (6, 6))
    )
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True)
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal"):
        F.scaled_dot_product_attention(
            q.to(DEV), k.to(DEV), v.to(DEV), attn_mask=m.to(DEV), is_causal=True
        )
    x = torch.ones(2, device=DEV) * 3  # the device stays usable
    assert x.cpu().tolist() == [3.0, 3.0]


# ---------------------------------------------------------------- dropout
def _dropout_setup(B=2, H=4, L=64, S=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, 8, generator=g)
    k = torch.randn(B, H, S, 8, generator=g)
    v = torch.eye(S).expand(B, H, S, S).contiguous()  # out = dropped probabilities
    return q, k, v


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_keep_rate_scale_and_backward_use_the_forward_mask(p, backend):
    q, k, v = _dropout_setup()
    scale = 1 / math.sqrt(q.shape[-1])
    qe, ke, ve = (t.to(DEV).requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qe, ke, ve, dropout_p=p)
    assert "ember::sdpa_forward(" in ember.pending_graph()  # the composite draws the mask
    cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
    (out * cot.to(DEV)).sum().backward()
    z = out.detach().cpu()  # Z = P * keep / (1 - p) (v = identity)
    probs = torch.softmax(q @ k.transpose(-2, -1) * scale, -1)
    keep = z != 0
    rate = keep.double().mean().item()
    n = keep.numel()
    assert abs(rate - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n), (rate, 1 - p)
    torch.testing.assert_close(z[keep], (probs / (1 - p))[keep], rtol=1e-5, atol=1e-6)
    # Gradients from the forward's own mask.
    gv = z.transpose(-2, -1) @ cot
    dp = (cot @ v.transpose(-2, -1)) * keep / (1 - p)
    ds = probs * (dp - (dp * probs).sum(-1, keepdim=True))
    gq = ds @ k * scale
    gk = ds.transpose(-2, -1) @ q * scale
    torch.testing.assert_close(ve.grad.cpu(), gv, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(qe.grad.cpu(), gq, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ke.grad.cpu(), gk, rtol=1e-4, atol=1e-5)


def test_dropout_backward_in_a_later_graph_regenerates_the_mask(backend):
    """Forward synced alone (a value read), backward in its own graph: same mask."""
    p = 0.3
    q, k, v = _dropout_setup(B=1, H=2, L=16, S=16)
    qe, ke, ve = (t.to(DEV).requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qe, ke, ve, dropout_p=p)
    z = out.detach().cpu()
    out.sum().backward()
    gv = z.transpose(-2, -1) @ torch.ones_like(z)
    torch.testing.assert_close(ve.grad.cpu(), gv, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_dropout_checkpoint_recompute_and_backward_use_the_forward_mask(reentrant, backend):
    """Under torch.utils.checkpoint the backward recomputes the forward (restoring the
    generator's state: the same (seed, offset) pair) and differentiates the recompute:
    v = identity makes out = Z, so grad v = Z^T cot checks the recompute's mask against
    the forward's output, and the gradients equal those of the run without checkpoint."""
    p = 0.3
    q, k, v = _dropout_setup(B=1, H=2, L=16, S=16)
    cot = torch.randn(1, 2, 16, 16, generator=torch.Generator().manual_seed(3))
    runs = []
    for ckpt in (False, True):
        torch.manual_seed(11)
        qe, ke, ve = (t.to(DEV).requires_grad_() for t in (q, k, v))
        if ckpt:
            out = checkpoint(
                lambda *qkv: F.scaled_dot_product_attention(*qkv, dropout_p=p),
                qe,
                ke,
                ve,
                use_reentrant=reentrant,
            )
        else:
            out = F.scaled_dot_product_attention(qe, ke, ve, dropout_p=p)
        z = out.detach().cpu()
        out.backward(cot.to(DEV))
        runs.append([z] + [t.grad.cpu() for t in (qe, ke, ve)])
        torch.testing.assert_close(runs[-1][3], z.transpose(-2, -1) @ cot, rtol=1e-5, atol=1e-6)
    assert 0 < (runs[0][0] == 0).float().mean().item() < 1
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_dropout_masks_differ_per_call_and_reproduce_under_manual_seed(backend):
    q, k, v = _dropout_setup(B=1, H=2, L=32, S=32)
    qe, ke, ve = (t.to(DEV) for t in (q, k, v))

    def two_calls(seed):
        torch.manual_seed(seed)
        a = F.scaled_dot_product_attention(qe, ke, ve, dropout_p=0.5)
        b = F.scaled_dot_product_attention(qe, ke, ve, dropout_p=0.5)
        return (a != 0).cpu(), (b != 0).cpu()

    a0, b0 = two_calls(0)
    compiled = ember.metrics.counters()["graphs_compiled"]
    a1, b1 = two_calls(0)
    a2, b2 = two_calls(1)
    assert not torch.equal(a0, b0)  # two calls never share a mask
    assert torch.equal(a0, a1) and torch.equal(b0, b1)  # manual_seed reproduces
    assert not torch.equal(a0, a2)  # another seed, other masks
    assert ember.metrics.counters()["graphs_compiled"] == compiled  # the seed is no graph key


def test_dropout_p_one_and_zero(backend):
    q, k, v = _dropout_setup(B=1, H=1, L=8, S=8)
    out1 = F.scaled_dot_product_attention(q.to(DEV), k.to(DEV), v.to(DEV), dropout_p=1.0)
    assert torch.equal(out1.cpu(), torch.zeros(1, 1, 8, 8))
    out0 = F.scaled_dot_product_attention(q.to(DEV), k.to(DEV), v.to(DEV), dropout_p=0.0)
    torch.testing.assert_close(
        out0.cpu(), F.scaled_dot_product_attention(q, k, v), rtol=1e-5, atol=1e-6
    )
