"""Input mutations under torch.compile(backend="ember") (python/ember/dynamo.py): the
optimizer's parameters and state, BatchNorm's running statistics, written back by the
backend itself (AOTAutograd keeps them in the graph), against eager CPU.

A written input that reaches the program as itself (no other input on its storage, no
output viewing it) is overwritten by the kernel computing its new value, as eager's
in-place op overwrites it (``written_in_place``); otherwise a parameter that shares its
storage with nothing takes the program's result buffer (``buffers_moved``); anything
else is copied. Each test checks the values against eager and which of these happened,
so a write that silently went missing fails.
"""

import numpy as np
import pytest
import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F

import ember


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    ember.dynamo.clear_counters()
    yield
    torch._dynamo.reset()


def dyn():
    return ember.dynamo.counters()


def mlp(seed=0, norm=False):
    torch.manual_seed(seed)
    # BatchNorm on the inputs: after a Linear, that Linear's bias would get a zero
    # gradient up to rounding, which AdamW's normalization turns into noise of order lr.
    layers = [nn.BatchNorm1d(12)] if norm else []
    layers += [nn.Linear(12, 16), nn.GELU(), nn.Linear(16, 5)]
    return nn.Sequential(*layers)


def train(model, steps, compiled, x, y):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    call, step = model, opt.step
    if compiled:
        call = torch.compile(model, backend="ember")
        step = torch.compile(opt.step, backend="ember")
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(call(x), y)
        loss.backward()
        step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, opt


def data():
    g = torch.Generator().manual_seed(3)
    return torch.randn(8, 12, generator=g), torch.randint(0, 5, (8,), generator=g)


def assert_same_state(opt_a, opt_b):
    for pa, pb in zip(opt_a.param_groups[0]["params"], opt_b.param_groups[0]["params"]):
        torch.testing.assert_close(pa, pb)
        sa, sb = opt_a.state[pa], opt_b.state[pb]
        for k in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(sa[k], sb[k])


def test_optimizer_step_writes_in_place_and_matches_eager():
    x, y = data()
    ref, m = mlp(), mlp()
    want, opt_ref = train(ref, 4, False, x, y)
    ptrs = [p.data_ptr() for p in m.parameters()]
    got, opt = train(m, 4, True, x, y)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want))
    assert_same_state(opt, opt_ref)
    c = dyn()
    n = len(list(m.parameters()))
    # Replayed steps 2..4 (the first is traced): 4 tensors per parameter written back
    # (value, exp_avg, exp_avg_sq, step), every one by the program into its own memory.
    assert c["replays"] >= 3 * 3 and c["input_writes"] >= 4 * n * 4, c
    assert c["written_in_place"] == 3 * 4 * n and c["buffers_moved"] == 0, c
    assert [p.data_ptr() for p in m.parameters()] == ptrs
    assert all(p.device.type == "cpu" for p in m.parameters())


def test_a_view_of_the_optimizer_state_sees_the_update():
    """The state written in place is the state eager's in-place ops leave: a view of
    exp_avg taken after the first step follows every later step."""
    x, y = data()
    ref, m = mlp(), mlp()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    call, step = torch.compile(m, backend="ember"), torch.compile(opt.step, backend="ember")
    views = None
    for i in range(4):
        for model, fwd, st, o in ((ref, ref, opt_ref.step, opt_ref), (m, call, step, opt)):
            F.cross_entropy(fwd(x), y).backward()
            st()
            o.zero_grad(set_to_none=True)
        if i == 0:
            views = [opt.state[p]["exp_avg"].view(-1) for p in m.parameters()]
    assert_same_state(opt, opt_ref)
    for v, p in zip(views, m.parameters()):
        torch.testing.assert_close(v, opt.state[p]["exp_avg"].reshape(-1))
        assert v.data_ptr() == opt.state[p]["exp_avg"].data_ptr()
    assert dyn()["written_in_place"] > 0


def test_written_inputs_sharing_a_storage_match_eager():
    """Two mutated inputs over one storage (and a third read) are not overwritten by
    the program in place (a kernel would see the other's new bytes): values as eager's."""

    def f(a, b, c):
        a.mul_(2).add_(c)
        b.add_(a.sum())
        return (a * b[: a.shape[0]]).sum()

    compiled = torch.compile(f, backend="ember")
    for i in range(3):
        base = torch.arange(12.0) + i
        ref_base = base.clone()
        c = torch.linspace(-1, 1, 4)
        got = compiled(base[:4], base[6:], c)
        want = f(ref_base[:4], ref_base[6:], c)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(base, ref_base)
    assert dyn()["replays"] == 2 and dyn()["written_in_place"] == 0, dyn()


def test_a_view_of_a_parameter_sees_the_update():
    x, y = data()
    ref, m = mlp(), mlp()
    views = [p.detach() for p in m.parameters()]  # share the parameters' storages
    _, opt_ref = train(ref, 3, False, x, y)
    _, opt = train(m, 3, True, x, y)
    assert_same_state(opt, opt_ref)
    for v, p in zip(views, m.parameters()):
        assert v.data_ptr() == p.data_ptr()
        torch.testing.assert_close(v, p.detach())
    assert dyn()["buffers_moved"] == 0 and dyn()["input_writes"] > 0


def test_parameters_over_numpy_memory_are_written_in_place():
    x, y = data()
    ref, m = mlp(), mlp()
    arrays = []
    for mod in m:
        if isinstance(mod, nn.Linear):
            a = mod.weight.detach().numpy().copy()
            mod.weight = nn.Parameter(torch.from_numpy(a))
            arrays.append((a, mod.weight))
    _, opt_ref = train(ref, 3, False, x, y)
    _, opt = train(m, 3, True, x, y)
    assert_same_state(opt, opt_ref)
    for a, p in arrays:
        np.testing.assert_array_equal(a, p.detach().numpy())
        assert a.ctypes.data == p.data_ptr()


def test_in_place_write_bumps_the_version_counter():
    """A parameter the compiled step wrote in place has a new version, as after eager's
    in-place update (autograd's saved-tensor checks and optimizers read it)."""
    x, y = data()
    m, ref = mlp(), mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    call = torch.compile(m, backend="ember")
    step = torch.compile(opt.step, backend="ember")
    for i in range(3):  # replayed from the second step on
        F.cross_entropy(ref(x), y).backward()
        opt_ref.step()
        opt_ref.zero_grad()
        F.cross_entropy(call(x), y).backward()
        versions = [p._version for p in m.parameters()]
        ptrs = [p.data_ptr() for p in m.parameters()]
        step()
        opt.zero_grad()
        assert all(p._version > v for p, v in zip(m.parameters(), versions)), i
        assert [p.data_ptr() for p in m.parameters()] == ptrs
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)
    assert dyn()["written_in_place"] == 2 * len(ptrs)


def test_moved_buffer_bumps_the_version_counter():
    """A new parameter value from a GEMM (an extern step, which never writes into its
    argument) takes the result's buffer instead of a copy, with a new version."""
    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(6, 6))
    r = torch.randn(6, 6) / 3
    w_ref = w.detach().clone()

    def rotate():
        with torch.no_grad():
            w.copy_(w @ r)

    step = torch.compile(rotate, backend="ember")
    for i in range(3):  # replayed from the second call on
        version, ptr = w._version, w.data_ptr()
        step()
        w_ref = w_ref @ r
        torch.testing.assert_close(w.detach(), w_ref)
        assert w._version > version, i
    assert dyn()["buffers_moved"] == 2 and dyn()["written_in_place"] == 0, dyn()
    assert w.data_ptr() != ptr


def test_batchnorm_running_stats_are_updated_like_eager():
    x, y = data()
    ref, m = mlp(norm=True), mlp(norm=True)
    want, opt_ref = train(ref, 3, False, x, y)
    got, opt = train(m, 3, True, x, y)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want))
    bn_ref, bn = ref[0], m[0]
    torch.testing.assert_close(bn.running_mean, bn_ref.running_mean)
    torch.testing.assert_close(bn.running_var, bn_ref.running_var)
    assert bn.num_batches_tracked.item() == bn_ref.num_batches_tracked.item() == 3
    assert_same_state(opt, opt_ref)


def test_training_a_model_on_the_ember_device_under_compile():
    """A model already on ember (issue 24's storages): forward, backward and the
    compiled optimizer step run lazily on ember tensors and match eager's training."""
    x, y = data()
    ref, m = mlp(norm=True), mlp(norm=True).to(ember.device())
    want, opt_ref = train(ref, 3, False, x, y)
    got, opt = train(m, 3, True, x.to(ember.device()), y.to(ember.device()))
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want))
    assert all(p.device.type == "ember" for p in m.parameters())
    for pa, pb in zip(opt.param_groups[0]["params"], opt_ref.param_groups[0]["params"]):
        torch.testing.assert_close(pa.cpu(), pb)
        torch.testing.assert_close(opt.state[pa]["exp_avg"].cpu(), opt_ref.state[pb]["exp_avg"])
    torch.testing.assert_close(m[0].running_mean.cpu(), ref[0].running_mean)
    assert dyn()["traces"] > 0 and dyn()["input_writes"] > 0
