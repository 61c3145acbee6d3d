"""Input mutations under torch.compile(backend="ember") (python/ember/dynamo.py): the
optimizer's parameters and state, BatchNorm's running statistics, written back by the
backend itself (AOTAutograd keeps them in the graph), against eager CPU.

A parameter that shares its storage with nothing takes the program's result buffer
(``buffers_moved``); anything else is copied. Each test checks the values against eager
and which of the two happened, so a write that silently went missing fails.
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


def test_optimizer_step_moves_parameter_buffers_and_matches_eager():
    x, y = data()
    ref, m = mlp(), mlp()
    want, opt_ref = train(ref, 4, False, x, y)
    got, opt = train(m, 4, True, x, y)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want))
    assert_same_state(opt, opt_ref)
    c = dyn()
    n = len(list(m.parameters()))
    # Replayed steps 2..4 (the first is traced): 4 tensors per parameter written back
    # (value, exp_avg, exp_avg_sq, step); the parameters themselves took the buffers.
    assert c["replays"] >= 3 * 3 and c["input_writes"] >= 4 * n * 4, c
    assert c["buffers_moved"] >= 3 * n, c
    assert all(p.device.type == "cpu" for p in m.parameters())


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


def test_moved_buffer_bumps_the_version_counter():
    """A parameter whose buffer the compiled step replaced has a new version, as after
    eager's in-place update (autograd's saved-tensor checks and optimizers read it)."""
    x, y = data()
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    call = torch.compile(m, backend="ember")
    step = torch.compile(opt.step, backend="ember")
    for i in range(3):  # replayed from the second step on
        F.cross_entropy(call(x), y).backward()
        versions = [p._version for p in m.parameters()]
        ptrs = [p.data_ptr() for p in m.parameters()]
        step()
        opt.zero_grad()
        assert all(p._version > v for p, v in zip(m.parameters(), versions)), i
    assert dyn()["buffers_moved"] > 0
    assert any(p.data_ptr() != q for p, q in zip(m.parameters(), ptrs))


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
