"""torch.amp.GradScaler on ember: its two ATen ops lowered natively (src/lowering/amp.cc)
and bit-equal to eager's CPU kernels; a scaled training step with no ATen extern and no
sync beyond the scaler's own .item() and the optimizer step's; the skip path with an
injected inf, step for step against eager CPU."""

import copy

import pytest
import torch

import ember
from conftest import DEV


@pytest.fixture(params=["cpu", "interpreter"])
def backend(request):
    old = ember.config.backend
    ember.config.backend = request.param
    yield request.param
    ember.config.backend = old


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_unscale_matches_eager_bit_for_bit(backend, dtype):
    g = torch.Generator().manual_seed(0)
    cases = [
        ([torch.randn(5, 7, generator=g), torch.randn(3, generator=g)], 0.0, 2.0**-7),
        ([torch.randn(4, generator=g) * 1e4, torch.tensor(3.0)], 0.0, 0.3),  # 0-d grad
        ([torch.tensor([1.0, float("inf")]), torch.randn(6, generator=g)], 0.0, 0.5),
        ([torch.tensor([float("nan"), 2.0])], 0.0, 1.0),
        ([torch.randn(8, generator=g)], 0.25, 0.125),  # found_inf kept when all finite
        ([torch.tensor([-float("inf")])], 0.25, 2.0),
    ]
    for grads, found0, inv in cases:
        grads = [t.to(dtype) for t in grads]
        want = [t.clone() for t in grads]
        want_found = torch.tensor(found0)
        torch._amp_foreach_non_finite_check_and_unscale_(want, want_found, torch.tensor(inv))
        got = [t.to(DEV) for t in grads]
        found = torch.tensor(found0).to(DEV)
        torch._amp_foreach_non_finite_check_and_unscale_(got, found, torch.tensor(inv).to(DEV))
        for a, b in zip(got, want):
            assert a.dtype == b.dtype
            assert torch.equal(a.cpu(), b) or torch.allclose(a.cpu(), b, equal_nan=True)
            assert torch.equal(a.cpu().isnan(), b.isnan())
        assert torch.equal(found.cpu(), want_found), (found.cpu(), want_found)
    g = ember.metrics.last_graph()
    assert g["externs"] == {}, g["externs"]


def test_update_scale_matches_eager_bit_for_bit(backend):
    g = torch.Generator().manual_seed(1)
    cases = []
    for _ in range(30):
        s = float(torch.rand((), generator=g) * 1e5 + 0.1)
        f = float(torch.rand((), generator=g) * 2.5 + 0.3)
        b = float(torch.rand((), generator=g) * 0.9 + 0.05)
        cases.append((s, int(torch.randint(0, 3, (), generator=g)), 0.0, f, b, 3))
        cases.append((s, 0, 1.0, f, b, 1))
    cases += [
        (3e38, 1, 0.0, 2.0, 0.5, 2),  # growth overflows: the scale stays, tracker resets
        (4.0, 0, float("nan"), 2.0, 0.5, 2),  # NaN counts as found
        (65536.0, 1999, 0.0, 2.0, 0.5, 2000),
        (65536.0, 5, 0.0, 2.0, 0.5, 2000),
    ]
    for scale, tracker, found, growth, backoff, interval in cases:
        want_s = torch.tensor(scale)
        want_t = torch.tensor(tracker, dtype=torch.int32)
        torch._amp_update_scale_(want_s, want_t, torch.tensor(found), growth, backoff, interval)
        s = torch.tensor(scale).to(DEV)
        t = torch.tensor(tracker, dtype=torch.int32).to(DEV)
        torch._amp_update_scale_(s, t, torch.tensor(found).to(DEV), growth, backoff, interval)
        assert torch.equal(s.cpu(), want_s), (scale, tracker, found, growth, backoff, s, want_s)
        assert torch.equal(t.cpu(), want_t), (scale, tracker, found, t, want_t)
    assert ember.metrics.last_graph()["externs"] == {}


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def train(model, device, steps, inject_inf_at=(), autocast=False):
    """SGD + GradScaler; a gradient hook puts an inf into the first layer's weight
    gradient at the steps in `inject_inf_at`. Returns per step (scale, loss, skipped)."""
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**8, growth_interval=3)
    w = model[0].weight
    g = torch.Generator().manual_seed(3)
    state = {"step": 0}

    def poison(grad):
        if state["step"] in inject_inf_at:
            mask = torch.zeros_like(grad)
            mask[0, 0] = float("inf")
            return grad + mask
        return grad

    w.register_hook(poison)
    out = []
    for i in range(steps):
        state["step"] = i
        x = torch.randn(8, 16, generator=g).to(device)
        y = torch.randn(8, 4, generator=g).to(device)
        before = w.detach().cpu().clone()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        skipped = torch.equal(w.detach().cpu(), before)
        out.append((scaler.get_scale(), loss.item(), skipped))
    return out, model


def test_grad_scaler_training_matches_eager_including_the_skip_path():
    ref_model = mlp()
    model = copy.deepcopy(ref_model)
    inject = (2, 3, 7)
    want, ref_model = train(ref_model, "cpu", 10, inject)
    got, model = train(model, "ember", 10, inject)
    # The scale sequence (grown every 3 good steps, halved on each inf) is exact;
    # skipped steps leave the weights untouched, on both.
    assert [s for s, _, _ in got] == [s for s, _, _ in want]
    assert [k for _, _, k in got] == [k for _, _, k in want]
    assert [k for _, _, k in want] == [i in inject for i in range(10)]
    for (_, a, _), (_, b, _) in zip(got, want):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def test_a_scaled_step_has_no_extern_and_no_extra_sync():
    model = mlp().to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("ember", init_scale=2.0**8, growth_interval=2)
    x = torch.randn(8, 16).to(DEV)
    y = torch.randn(8, 4).to(DEV)
    for i in range(4):
        ember.sync()
        ember.metrics.clear()
        with torch.autocast("ember", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)  # found_inf.item(): sync 1 (forward, backward, unscale)
        graph1 = ember.metrics.last_graph()
        scaler.update()
        opt.zero_grad()
        c = ember.metrics.counters()
        # sync 1 and the optimizer step's sync; update_scale_ joins the next program
        assert c["syncs"] == 2, c["syncs"]
        assert c["value_reads"] == 1
        assert graph1["externs"] == {}, graph1["externs"]
        assert ember.metrics.last_graph()["externs"] == {}
        assert c["fallbacks"] == {}


@pytest.mark.parametrize("device", ["cpu", "ember"])
def test_pure_bf16_loses_small_updates_and_master_weights_keep_them(device):
    # 100 SGD steps of 1e-4 on parameters at 1.0: each update is below half the gap
    # between 1.0 and its bf16 neighbours (2^-9), so bf16 parameters never move; f32
    # masters reach 0.99, whose bf16 rounding the model then sees.
    from ember.amp import MasterWeights

    def run(master):
        p = torch.nn.Parameter(torch.ones(8, dtype=torch.bfloat16, device=device))
        opt = (
            MasterWeights([p], torch.optim.SGD, lr=1e-4)
            if master
            else torch.optim.SGD([p], lr=1e-4)
        )
        for _ in range(100):
            p.sum().backward()  # gradient 1 everywhere
            opt.step()
            opt.zero_grad()
        return p.detach().cpu(), opt

    lost, _ = run(False)
    assert torch.equal(lost, torch.ones(8, dtype=torch.bfloat16))
    kept, opt = run(True)
    assert torch.equal(kept, torch.full((8,), 0.99).to(torch.bfloat16))
    torch.testing.assert_close(
        opt.masters[0].detach().cpu(), torch.full((8,), 0.99), rtol=0, atol=1e-5
    )
    assert opt.masters[0].dtype == torch.float32


def test_master_weights_state_dict_round_trip():
    from ember.amp import MasterWeights

    p = torch.nn.Parameter(torch.randn(4).to(torch.bfloat16).to(DEV))
    opt = MasterWeights([p], torch.optim.AdamW, lr=1e-2)
    p.square().sum().backward()
    opt.step()
    state = opt.state_dict()
    q = torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16, device=DEV))
    opt2 = MasterWeights([q], torch.optim.AdamW, lr=1e-2)
    opt2.load_state_dict(state)
    assert torch.equal(opt2.masters[0].detach().cpu(), opt.masters[0].detach().cpu())
    assert torch.equal(q.detach().cpu(), p.detach().cpu())
    with pytest.raises(ValueError, match="require grad"):
        MasterWeights([torch.zeros(2)], torch.optim.SGD, lr=1)
