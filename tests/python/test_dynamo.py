"""torch.compile(model, backend="ember") (python/ember/dynamo.py) against eager CPU.

Every test checks values against eager and that the work really ran through Ember
(`syncs` / `graphs_compiled` moved), so a backend that silently ran eager would fail.
"""

import copy
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F

import ember

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import train_gpt  # noqa: E402

SMALL_GPT = dict(vocab_size=65, n_layer=2, n_head=4, n_embd=32, block_size=16, dropout=0.0)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    ember.dynamo.clear_counters()
    yield
    torch._dynamo.reset()
    ember.dynamo.replay = True


def dyn():
    return ember.dynamo.counters()


def counters():
    return ember.metrics.counters()


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(24, 48), nn.GELU(), nn.Linear(48, 48), nn.Tanh(), nn.Linear(48, 10)
    )


def gpt(seed=0):
    torch.manual_seed(seed)
    return train_gpt.GPT(train_gpt.GPTConfig(**SMALL_GPT))


def test_backend_is_registered_by_import_ember():
    assert "ember" in torch._dynamo.list_backends(exclude_tags=())
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("ember") is ember.dynamo.ember_backend


def test_mlp_inference_matches_eager_and_returns_cpu_tensors():
    m = mlp().eval()
    x = torch.randn(8, 24)
    cm = torch.compile(m, backend="ember")
    with torch.no_grad():
        want = m(x)
        got = cm(x)
    assert got.device.type == "cpu" and type(got) is torch.Tensor
    assert counters()["syncs"] >= 1 and counters()["graphs_compiled"] >= 1
    torch.testing.assert_close(got, want)
    assert not torch.equal(got, torch.zeros_like(got))


def test_char_gpt_inference_matches_eager():
    m = gpt().eval()
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, SMALL_GPT["vocab_size"], (2, SMALL_GPT["block_size"]), generator=g)
    tgt = torch.randint(0, SMALL_GPT["vocab_size"], (2, SMALL_GPT["block_size"]), generator=g)
    cm = torch.compile(m, backend="ember")
    with torch.no_grad():
        want_logits, want_loss = m(idx, tgt)
        got_logits, got_loss = cm(idx, tgt)
    assert counters()["syncs"] >= 1
    assert got_logits.device.type == "cpu"
    torch.testing.assert_close(got_logits, want_logits)
    torch.testing.assert_close(got_loss, want_loss)


@pytest.mark.parametrize("layout", ["heads_second", "contiguous"])
@pytest.mark.parametrize("mask", [None, "causal", "float"])
def test_flash_attention_matches_eager_through_the_lazy_devices_op(layout, mask):
    """AOTAutograd's CPU trace holds eager's flash attention op; the backend runs it as
    the lazy device does (ember::sdpa_flash_forward / _backward: no copies of q, k, v
    into eager's layout) where that op's result layouts are the graph's (both input
    layouts here), and as the ATen op otherwise. Values and gradients against eager
    CPU, replays included."""
    g = torch.Generator().manual_seed(4)

    def make(*shape):
        if layout == "heads_second":
            b, h, n, e = shape
            return torch.randn(b, n, h, e, generator=g).transpose(1, 2)
        return torch.randn(*shape, generator=g)

    kw = {"is_causal": True} if mask == "causal" else {}
    if mask == "float":
        kw["attn_mask"] = torch.randn(6, 6, generator=g)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **kw)

    cf = torch.compile(f, backend="ember")
    for i in range(3):
        q, k, v = (make(2, 3, 6, 4).requires_grad_(True) for _ in range(3))
        cot = torch.randn(2, 3, 6, 4, generator=g)
        want = f(q, k, v)
        want_grads = torch.autograd.grad(want, (q, k, v), cot)
        got = cf(q, k, v)
        got_grads = torch.autograd.grad(got, (q, k, v), cot)
        torch.testing.assert_close(got, want)
        for a, b in zip(got_grads, want_grads):
            torch.testing.assert_close(a, b)
        # The backward graph's: eager's gradients are heads-second for any input layout.
        assert "ember::sdpa_flash_backward" in ember.metrics.last_graph()["externs"]
    with torch.no_grad():
        q, k, v = (make(2, 3, 6, 4) for _ in range(3))
        torch.testing.assert_close(cf(q, k, v), f(q, k, v))
    assert "ember::sdpa_flash_forward" in ember.metrics.last_graph()["externs"]
    assert ember.dynamo.counters()["replays"] > 0


def _train(model, steps, backend, x, y, loss_fn):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    call, step = model, opt.step
    if backend is not None:
        call = torch.compile(model, backend=backend)
        step = torch.compile(opt.step, backend=backend)
    losses = []
    for _ in range(steps):
        loss = loss_fn(call, x, y)
        loss.backward()
        step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, opt


def test_mlp_adamw_training_matches_eager():
    ref, m = mlp(), mlp()
    x, y = torch.randn(16, 24), torch.randint(0, 10, (16,))
    ce = lambda f, x, y: F.cross_entropy(f(x), y)  # noqa: E731
    want, _ = _train(ref, 5, None, x, y, ce)
    got, opt = _train(m, 5, "ember", x, y, ce)
    assert counters()["syncs"] >= 15  # forward, backward, optimizer step per step
    assert got[-1] < got[0]
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want))
    for (name, a), b in zip(m.named_parameters(), ref.parameters()):
        assert a.device.type == "cpu"
        torch.testing.assert_close(a, b, msg=lambda s: f"{name}: {s}")
    # The optimizer state (updated in place inside the compiled step) matches too.
    st = opt.state[m[0].weight]
    assert float(st["step"]) == 5.0 and st["exp_avg"].abs().sum() > 0


def test_weight_gradients_come_from_the_product_in_transposed_order(tmp_path, monkeypatch):
    """AOTAutograd's backward returns a linear layer's weight gradient as t(mm(t(g), x));
    the backend rewrites it as mm(t(x), g) (ember.dynamo._transposed_products), so the
    backward program writes the gradient straight from the dot: no kernel of it copies a
    transpose (EMBER_DEBUG_DIR's kernel sources). The gradients equal eager's, with
    eager's strides."""
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    # Shapes no other test compiles: a program found in this process's memory cache
    # writes no kernel sources.
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(20, 36), nn.GELU(), nn.Linear(36, 12))
    m = copy.deepcopy(ref)
    x = torch.randn(16, 20)
    f = torch.compile(m, backend="ember")
    for _ in range(2):
        f(x).square().sum().backward()
        ref(x).square().sum().backward()
    assert dyn()["transposed_products"] >= 2
    for (name, a), b in zip(m.named_parameters(), ref.parameters()):
        assert a.grad.stride() == b.grad.stride(), name
        torch.testing.assert_close(a.grad, b.grad, msg=lambda s: f"{name}: {s}")
    kernels = [p.name for p in tmp_path.iterdir() if p.suffix == ".cc"]
    assert kernels and not [k for k in kernels if "transpose" in k], kernels


def test_char_gpt_adamw_training_matches_eager():
    ref, m = gpt(), gpt()
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, SMALL_GPT["vocab_size"], (4, SMALL_GPT["block_size"]), generator=g)
    tgt = torch.randint(0, SMALL_GPT["vocab_size"], (4, SMALL_GPT["block_size"]), generator=g)
    lm = lambda f, x, y: f(x, y)[1]  # noqa: E731
    want, _ = _train(ref, 3, None, idx, tgt, lm)
    got, _ = _train(m, 3, "ember", idx, tgt, lm)
    assert got[-1] < got[0]
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want))
    # Adam normalizes each gradient, so parameters whose gradient is rounding noise
    # (the key bias: softmax ignores it) move by up to ~lr on either side; a wrong
    # gradient moves a parameter by ~lr = 1e-2 per step.
    for (name, a), b in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=1e-3, msg=lambda s: f"{name}: {s}")


def test_attention_activations_reach_the_backward_row_major_without_copies():
    """Attention's saved q, k, v, output and logsumexp cross from the forward program to
    the backward row-major (the programs' own layout), so a replayed training step
    copies nothing on either side; gradients stay eager's."""
    ref, m = gpt(), gpt()
    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, SMALL_GPT["vocab_size"], (4, SMALL_GPT["block_size"]), generator=g)
    tgt = torch.randint(0, SMALL_GPT["vocab_size"], (4, SMALL_GPT["block_size"]), generator=g)
    cm = torch.compile(m, backend="ember")
    for step in range(3):
        if step == 2:
            before = dict(counters())
        cm(idx, tgt)[1].backward()
        ref(idx, tgt)[1].backward()
    # q, k, v, the output and the logsumexp of each layer's attention.
    assert dyn()["row_major_saved"] == 5 * SMALL_GPT["n_layer"]
    after = counters()
    assert dyn()["replays"] >= 2
    assert after["output_copies"] == before["output_copies"]
    assert after["input_copies"] == before["input_copies"]
    for (name, a), b in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, msg=lambda s: f"{name}: {s}")


def test_compiled_adamw_squares_gradients_as_eager_does():
    """AdamW's exp_avg_sq.addcmul_(g, g, value=1 - beta2) (the for-loop implementation,
    CPU's default) reaches the backend as prims.fma(g * g, value, v); it runs as eager's
    addcmul, so exp_avg_sq is eager's bit for bit, gradients small enough for g * g to
    underflow included."""
    g = torch.Generator().manual_seed(8)
    ps = [torch.randn(32, 16, generator=g), torch.randn(16, generator=g)]
    grads = [torch.randn(32, 16, generator=g) * 1e-3, torch.randn(16, generator=g) * 1e-21]

    def run(compiled):
        params = [p.clone().requires_grad_(True) for p in ps]
        opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=False)
        step = torch.compile(opt.step, backend="ember") if compiled else opt.step
        for _ in range(3):
            for p, gr in zip(params, grads):
                p.grad = gr.clone()
            step()
        return [opt.state[p]["exp_avg_sq"] for p in params]

    for got, want in zip(run(True), run(False)):
        assert torch.equal(got, want), int((got != want).sum())
    assert dyn()["addcmul_products"] == len(ps)
    assert dyn()["replays"] > 0


def test_graph_break_runs_both_graphs_through_ember():
    def f(x, w):
        y = torch.tanh(x @ w)
        torch._dynamo.graph_break()
        return (y * 3).softmax(-1)

    x, w = torch.randn(5, 7), torch.randn(7, 6)
    got = torch.compile(f, backend="ember")(x, w)
    torch.testing.assert_close(got, f(x, w))
    c = counters()
    assert c["syncs"] == 2  # one graph on each side of the break
    assert c["graphs_compiled"] + c["memory_cache_hits"] + c["disk_cache_hits"] == 2


def test_repeated_calls_compile_nothing_new():
    ember._C.clear_cache()  # earlier tests' graphs: found again on disk, not in memory
    m = mlp()
    x, y = torch.randn(16, 24), torch.randint(0, 10, (16,))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    cm, step = torch.compile(m, backend="ember"), torch.compile(opt.step, backend="ember")

    def train_step():
        F.cross_entropy(cm(x), y).backward()
        step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):  # warm-up: the first step also initializes the optimizer state
        train_step()
    before, traced = counters(), dyn()["traces"]
    dynamo_frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for _ in range(4):
        train_step()
    after = counters()
    # Forward, backward and step each ran their captured program: no tracing at all.
    assert dyn()["traces"] == traced and dyn()["replays"] >= 12, dyn()["refusal_reasons"]
    assert before["graphs_compiled"] + before["disk_cache_hits"] >= 3  # fw, bw, step
    assert after["graphs_compiled"] == before["graphs_compiled"]
    assert after["disk_cache_hits"] == before["disk_cache_hits"]
    assert after["memory_cache_hits"] == before["memory_cache_hits"] + 12
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == dynamo_frames


def test_dynamic_shapes_recompile_per_shape_in_ember_only_once():
    m = mlp().eval()
    cm = torch.compile(m, backend="ember")
    xs = {b: torch.randn(b, 24) for b in (4, 9, 13)}
    with torch.no_grad():
        for b in (4, 9, 13):
            torch.testing.assert_close(cm(xs[b]), m(xs[b]))
        compiled = counters()["graphs_compiled"]
        for b in (13, 4, 9, 4):
            torch.testing.assert_close(cm(xs[b]), m(xs[b]))
    assert counters()["graphs_compiled"] == compiled


def test_python_scalars_in_the_graph_do_not_specialize():
    def f(x, scale, n: int):
        return (x * scale).sum(-1) + n

    x = torch.randn(4, 6)
    cf = torch.compile(f, backend="ember", dynamic=True)
    for scale, n in ((0.5, 2), (1.5, 3), (-2.0, 7)):
        torch.testing.assert_close(cf(x, scale, n), f(x, scale, n))
    assert counters()["syncs"] >= 3


def test_input_mutation_is_written_back():
    def f(buf, x):
        buf.mul_(0.9).add_(x, alpha=0.1)
        return buf.sum()

    buf, x = torch.randn(6, 5), torch.randn(6, 5)
    ref = buf.clone()
    cf = torch.compile(f, backend="ember")
    for _ in range(3):
        got = cf(buf, x)
        want = f(ref, x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(buf, ref)
    assert counters()["syncs"] >= 3


def test_tensor_constants_in_the_graph_move_to_ember():
    """A tensor created inside the compiled code is a constant of the FX graph
    (get_attr + lift_fresh_copy; HF GPT-2's DynamicCache starts so): it is read through a
    copy to the ember device, forward and backward, and stays a CPU tensor in the module
    for Dynamo's and AOTAutograd's fake tensors."""

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            start = torch.tensor([[0.5, -1.0, 2.0, 0.25]])  # a graph constant
            return self.lin(torch.cat([start.expand(1, 4), x], 0)).sum()

    torch.manual_seed(0)
    m, x = M(), torch.randn(3, 4)
    ref = copy.deepcopy(m)
    cm = torch.compile(m, backend="ember")
    for _ in range(2):
        got = cm(x)
        got.backward()
        want = ref(x)
        want.backward()
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(m.lin.weight.grad, ref.lin.weight.grad)
    assert dyn()["traces"] + dyn()["replays"] >= 4


def test_dropout_runs_on_ember_generator():
    def f(x):
        return F.dropout(x, p=0.5, training=True)

    x = torch.rand(64, 64) + 1.0
    cf = torch.compile(f, backend="ember")
    ember.manual_seed(7)
    a = cf(x)
    ember.manual_seed(7)
    b = cf(x)
    c = cf(x)
    kept = a != 0
    assert 0.4 < kept.float().mean().item() < 0.6
    torch.testing.assert_close(a[kept], 2 * x[kept])
    assert torch.equal(a, b)  # reproducible under ember.manual_seed
    assert not torch.equal(b, c)  # a fresh mask per call


def test_model_on_the_ember_device_joins_the_lazy_graph():
    # Dynamo fakifies ember tensors through their storages (ember/_fake.py); the
    # compiled graph's ops are traced on the ember inputs and nothing syncs: the
    # results are pending ember tensors, as from the uncompiled model.
    m = mlp().to(ember.device())
    cm = torch.compile(m, backend="ember")
    x = torch.randn(16, 24)
    cm(x.to(ember.device()))  # compiles
    syncs = ember.metrics.counters()["syncs"]
    out = cm(x.to(ember.device())) * 2
    assert ember._C.is_pending(out) and ember.metrics.counters()["syncs"] == syncs
    want = m.cpu()(x) * 2
    torch.testing.assert_close(out.cpu(), want)


def test_meta_input_is_a_clear_error():
    def f(x):
        return x.sin() + 1

    with pytest.raises(Exception, match=r"graph input 0 is on meta.*CPU tensors"):
        torch.compile(f, backend="ember")(torch.randn(3, device="meta"))


def test_error_in_the_graph_names_the_op_and_keeps_tensors_usable():
    def f(x, i):
        return x.sin()[i]

    x = torch.randn(4, 3)
    cf = torch.compile(f, backend="ember")
    with pytest.raises(IndexError, match="index"):
        cf(x, torch.tensor([0, 9]))
    torch.testing.assert_close(cf(x, torch.tensor([3, 1])), f(x, torch.tensor([3, 1])))


def test_entry_point_resolves_backend_without_importing_ember(tmp_path):
    text = (ROOT / "pyproject.toml").read_text()
    assert (
        '[project.entry-points.torch_dynamo_backends]\nember = "ember.dynamo:ember_backend"' in text
    )
    # An installed wheel's metadata, reduced to the entry point (what pip writes).
    dist = tmp_path / "ember-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ember\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(
        "[torch_dynamo_backends]\nember = ember.dynamo:ember_backend\n"
    )
    code = textwrap.dedent("""
        import sys, torch
        f = torch.compile(lambda x: (x * 2).exp(), backend="ember")
        x = torch.randn(5)
        torch.testing.assert_close(f(x), (x * 2).exp())
        import ember
        assert ember.metrics.counters()["syncs"] == 1, ember.metrics.counters()
        print("ok", "ember" in sys.modules)
    """)
    env = dict(os.environ)
    # The ember this process imported (the installed wheel in CI, python/ with
    # EMBER_BUILD_DIR in a development build); python/ alone has no compiled _C.
    ember_parent = str(pathlib.Path(ember.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), ember_parent, env.get("PYTHONPATH", "")])
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok True")


def _train_losses_and_params(replay):
    ember.dynamo.replay = replay
    m = gpt()
    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, SMALL_GPT["vocab_size"], (4, SMALL_GPT["block_size"]), generator=g)
    tgt = torch.randint(0, SMALL_GPT["vocab_size"], (4, SMALL_GPT["block_size"]), generator=g)
    losses, _ = _train(m, 4, "ember", idx, tgt, lambda f, x, y: f(x, y)[1])
    torch._dynamo.reset()
    return losses, [p.detach().clone() for p in m.parameters()]


def test_replayed_program_equals_traced_program_bit_for_bit():
    traced_losses, traced = _train_losses_and_params(replay=False)
    assert dyn()["replays"] == 0 and dyn()["traces"] >= 12
    ember.dynamo.clear_counters()
    replay_losses, replayed = _train_losses_and_params(replay=True)
    c = dyn()
    # Steps 2-4 replay forward, backward and step (the forward's CPU flash attention at
    # dropout_p 0 draws no random numbers).
    assert c["replays"] >= 9 and c["refusals"] == 0, c
    assert replay_losses == traced_losses
    for a, b in zip(replayed, traced):
        assert torch.equal(a, b)


def test_replay_takes_new_strides_and_offsets_by_tracing_or_viewing():
    def f(x, w):
        return torch.relu(x @ w.t()) + x.sum()

    w = torch.randn(5, 6)
    cf = torch.compile(f, backend="ember")
    base = torch.randn(4, 8)
    x1 = base[:, :6].contiguous()
    torch.testing.assert_close(cf(x1, w), f(x1, w))
    torch.testing.assert_close(cf(x1 * 2, w), f(x1 * 2, w))  # same signature: replayed
    assert dyn()["replays"] == 1
    # A non-contiguous view (other strides): a new signature, traced and correct.
    xv = base[:, 1:7]
    torch.testing.assert_close(cf(xv, w), f(xv, w))
    # Same strides at another storage offset: replayed, reading the right elements.
    xv2 = base[:, 2:8]
    torch.testing.assert_close(cf(xv2, w), f(xv2, w))
    assert dyn()["replays"] >= 1 and dyn()["refusals"] == 0, dyn()


def test_random_graphs_are_traced_every_call():
    def f(x):
        return F.dropout(x, p=0.5, training=True) * 2

    x = torch.ones(32, 32)
    cf = torch.compile(f, backend="ember")
    a, b = cf(x), cf(x)
    assert not torch.equal(a, b)
    c = dyn()
    assert c["replays"] == 0 and c["refusals"] == 2, c


class _Attention(nn.Module):
    """Causal attention at dropout_p 0, then nn.Dropout(p): AOTAutograd's graphs hold
    eager's CPU flash attention (an op tagged random) with dropout_p 0."""

    def __init__(self, p):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(16, 48)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 8).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.drop(y).transpose(1, 2).reshape(b, t, 16)


@pytest.mark.parametrize("mode", ["eval", "train_p0"])
def test_graphs_that_draw_no_random_numbers_are_replayed(mode):
    """Attention at dropout_p 0 with dropout in eval (p 0.3) or in training at p 0 draws
    no random numbers: every graph is captured and replayed, with eager's outputs (and
    gradients in training)."""
    train = mode == "train_p0"
    m = _Attention(0.0 if train else 0.3).train(train)
    ref = copy.deepcopy(m)
    cm = torch.compile(m, backend="ember")
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(2, 8, 16, generator=g)
        with torch.set_grad_enabled(train):
            got, want = cm(x), ref(x)
        torch.testing.assert_close(got, want)
        if train:
            got.square().sum().backward()
            want.square().sum().backward()
            for a, b in zip(m.parameters(), ref.parameters()):
                torch.testing.assert_close(a.grad, b.grad)
    c = dyn()
    graphs = 2 if train else 1  # forward and backward, or inference
    assert c["refusals"] == 0 and c["captures"] == graphs, c
    assert c["replays"] == 2 * graphs, c


def test_replay_error_is_eager_error_and_inputs_stay_intact():
    def f(x, i):
        return x.exp()[i]

    x = torch.randn(4, 3)
    keep = x.clone()
    cf = torch.compile(f, backend="ember")
    ok = torch.tensor([1, 2])
    torch.testing.assert_close(cf(x, ok), f(x, ok))
    with pytest.raises(IndexError, match="index"):
        cf(x, torch.tensor([0, 7]))  # the captured program, run on a bad index
    assert dyn()["replays"] >= 1
    assert torch.equal(x, keep)
    torch.testing.assert_close(cf(x, torch.tensor([3, 0])), f(x, torch.tensor([3, 0])))
