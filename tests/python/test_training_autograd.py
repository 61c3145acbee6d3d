"""Autograd habits of training loops on ember, each against eager CPU, each with a
bounded number of compiled graphs."""

import threading

import pytest
import torch
import torch.nn.functional as F

import ember
from training_util import (
    DEV,
    StepCounter,
    assert_params_close,
    fresh_graphs,
    graphs_built,
    mlp,
    pair,
)


def _data(n=16, d=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, 3, (n,), generator=g)


def test_grad_lives_on_ember_and_equals_eager():
    torch.manual_seed(0)
    ref, m = pair(mlp())
    x, y = _data()
    fresh_graphs()
    F.cross_entropy(ref(x), y).backward()
    F.cross_entropy(m(x.to(DEV)), y.to(DEV)).backward()
    for (name, pr), pm in zip(ref.named_parameters(), m.parameters()):
        assert pm.grad is not None and pm.grad.device.type == "ember", name
        assert pm.grad.shape == pr.grad.shape and pm.grad.dtype == pr.grad.dtype
        torch.testing.assert_close(pm.grad.cpu(), pr.grad, rtol=1e-5, atol=1e-6)
    assert graphs_built() == 1


def test_no_grad_and_inference_mode():
    torch.manual_seed(0)
    ref, m = pair(mlp())
    x, _ = _data()
    dx = x.to(DEV)
    fresh_graphs()
    with torch.no_grad():
        out = m(dx)
        expect = ref(x)
    assert not out.requires_grad and out.grad_fn is None
    torch.testing.assert_close(out.cpu(), expect)
    with torch.inference_mode():
        out2 = m(dx)
        expect2 = ref(x)
    assert out2.is_inference() and not out2.requires_grad
    torch.testing.assert_close(out2.cpu(), expect2)
    # the same forward graph both times
    assert graphs_built() == 1
    # inference tensors are readable outside the mode and feed later no-grad work
    with torch.no_grad():
        torch.testing.assert_close((out2 * 2).cpu(), expect2 * 2)


def test_eval_mode_dropout_and_batchnorm():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(10, 16),
        torch.nn.BatchNorm1d(16),
        torch.nn.Dropout(0.5),
        torch.nn.ReLU(),
        torch.nn.Linear(16, 3),
    )
    ref, m = pair(net)
    x, y = _data()
    # one training step (batch statistics and running stats update; dropout masks differ
    # between devices, so this step uses p=0), then evaluation
    ref[2].p = m[2].p = 0.0
    fresh_graphs()
    for model, xx, yy in [(ref, x, y), (m, x.to(DEV), y.to(DEV))]:
        F.cross_entropy(model(xx), yy).backward()
    ref[2].p = m[2].p = 0.5
    ref.eval()
    m.eval()
    with torch.no_grad():
        torch.testing.assert_close(m(x.to(DEV)).cpu(), ref(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m[1].running_mean.cpu(), ref[1].running_mean)
    torch.testing.assert_close(m[1].running_var.cpu(), ref[1].running_var)
    assert int(m[1].num_batches_tracked) == 1
    # no optimizer step: the training pass and the evaluation run as one graph
    assert graphs_built() == 1


def test_retain_graph_backward_twice():
    torch.manual_seed(0)
    ref, m = pair(mlp())
    x, y = _data()
    fresh_graphs()
    for model, xx, yy in [(ref, x, y), (m, x.to(DEV), y.to(DEV))]:
        loss = F.cross_entropy(model(xx), yy)
        loss.backward(retain_graph=True)
        loss.backward()
    for pr, pm in zip(ref.parameters(), m.parameters()):
        torch.testing.assert_close(pm.grad.cpu(), pr.grad, rtol=1e-5, atol=1e-6)
    assert graphs_built() == 1


def test_create_graph_double_backward_gradient_penalty():
    torch.manual_seed(0)
    ref, m = pair(mlp())
    x, y = _data()
    fresh_graphs()
    for model, xx, yy in [(ref, x, y), (m, x.to(DEV), y.to(DEV))]:
        xx = xx.clone().requires_grad_()
        loss = F.cross_entropy(model(xx), yy)
        (gx,) = torch.autograd.grad(loss, xx, create_graph=True)
        (loss + 0.1 * gx.pow(2).sum()).backward()
    for pr, pm in zip(ref.parameters(), m.parameters()):
        torch.testing.assert_close(pm.grad.cpu(), pr.grad, rtol=1e-5, atol=1e-6)
    # higher-order: d2/dx2 of a scalar function
    a = torch.linspace(-1, 1, 7, requires_grad=True)
    d = a.detach().to(DEV).requires_grad_()
    for t in (a, d):
        (g,) = torch.autograd.grad(t.sin().mul(t).sum(), t, create_graph=True)
        g.sum().backward()
    torch.testing.assert_close(d.grad.cpu(), a.grad, rtol=1e-5, atol=1e-6)
    assert graphs_built() == 2


def test_tensor_hooks_and_retain_grad():
    a = torch.randn(5, 4, requires_grad=True)
    d = a.detach().to(DEV).requires_grad_()
    seen = {}
    fresh_graphs()
    for key, t in (("cpu", a), ("ember", d)):
        h = t * 3
        h.retain_grad()
        h.register_hook(lambda g, key=key: seen.__setitem__(key, g) or g * 2)
        t.register_hook(lambda g: g + 1)
        h.tanh().sum().backward()
        seen[key + "_h"] = h.grad
    assert seen["ember"].device.type == "ember"
    torch.testing.assert_close(seen["ember"].cpu(), seen["cpu"])
    torch.testing.assert_close(seen["ember_h"].cpu(), seen["cpu_h"])
    torch.testing.assert_close(d.grad.cpu(), a.grad)
    assert graphs_built() == 1


def test_module_hooks():
    torch.manual_seed(0)
    ref, m = pair(mlp())
    x, y = _data()
    rec = {}

    def install(model, key):
        model[0].register_forward_pre_hook(lambda mod, inp: (inp[0] * 0.5,))
        model[2].register_forward_hook(lambda mod, inp, out: out + 1.0)
        model[2].register_full_backward_hook(
            lambda mod, gin, gout, key=key: rec.__setitem__(key, (gin[0], gout[0]))
        )
        model[4].register_full_backward_pre_hook(lambda mod, gout: (gout[0] * 2,))

    install(ref, "cpu")
    install(m, "ember")
    fresh_graphs()
    for model, xx, yy in [(ref, x, y), (m, x.to(DEV), y.to(DEV))]:
        F.cross_entropy(model(xx), yy).backward()
    for a, b in zip(rec["ember"], rec["cpu"]):
        assert a.device.type == "ember"
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)
    for pr, pm in zip(ref.parameters(), m.parameters()):
        torch.testing.assert_close(pm.grad.cpu(), pr.grad, rtol=1e-5, atol=1e-6)
    assert graphs_built() == 1


def test_requires_grad_and_detach():
    a = torch.randn(3, 4)
    d = a.to(DEV)
    assert not d.requires_grad
    d.requires_grad_()
    assert d.is_leaf and d.requires_grad
    e = d.detach()
    assert not e.requires_grad and e.device.type == "ember"
    # detach shares the data, as in eager
    a2 = a.clone().requires_grad_()
    a2.detach().mul_(2)
    e.mul_(2)
    torch.testing.assert_close(d.detach().cpu(), a2.detach())
    # a detached branch does not contribute gradients
    for t in (a2, d):
        (t * t.detach()).sum().backward()
    torch.testing.assert_close(d.grad.cpu(), a2.grad)
    with pytest.raises(RuntimeError, match="leaf variables"):
        (d * 2).requires_grad_(False)


def test_frozen_parameters():
    torch.manual_seed(0)
    ref, m = pair(mlp())
    for model in (ref, m):
        model[0].requires_grad_(False)
    x, y = _data()
    opts = [torch.optim.SGD(mod.parameters(), lr=0.1, momentum=0.9) for mod in (ref, m)]
    w0 = m[0].weight.detach().cpu().clone()
    fresh_graphs()
    steps = StepCounter()
    for _ in range(4):
        for model, opt, xx, yy in [(ref, opts[0], x, y), (m, opts[1], x.to(DEV), y.to(DEV))]:
            F.cross_entropy(model(xx), yy).backward()
            opt.step()
            opt.zero_grad()
        steps.mark()
    assert m[0].weight.grad is None
    assert torch.equal(m[0].weight.detach().cpu(), w0)
    assert_params_close(ref, m, rtol=1e-5, atol=1e-6)
    assert steps.built() <= 2 and steps.built(2) == 0, steps.steps


@pytest.mark.parametrize("on_caller", [True, False])
def test_backward_thread(on_caller):
    """By default an ember backward (and autograd.grad) runs on the calling thread
    (ember.config.backward_on_calling_thread); switched off, on autograd's device thread,
    as a backward started from C++ does. Gradients are eager's either way."""
    old = ember.config.backward_on_calling_thread
    ember.config.backward_on_calling_thread = on_caller
    try:
        d = torch.randn(4, device=DEV, requires_grad=True)
        threads = []
        d.register_hook(lambda g: threads.append(threading.get_ident()) or g)
        (d * 2).sum().backward()
        (g,) = torch.autograd.grad((d * d).sum(), d)
        assert len(threads) == 2
        for t in threads:
            assert (t == threading.get_ident()) == on_caller
        torch.testing.assert_close(d.grad.cpu(), torch.full((4,), 2.0))
        torch.testing.assert_close(g.cpu(), 2 * d.detach().cpu())
        # The caller's autograd multithreading setting is restored.
        assert torch._C._is_multithreading_enabled()
    finally:
        ember.config.backward_on_calling_thread = old


def test_two_python_threads_train_concurrently():
    """Each thread traces its own model (forward, backward on its own thread,
    optimizer step with its sync) while the other does the same; syncs are
    process-wide, so each may run the other's pending work. Results equal eager."""
    torch.manual_seed(0)
    models = [pair(mlp()) for _ in range(2)]
    data = [_data(seed=s) for s in range(2)]
    errors = []

    def train(k):
        try:
            _, m = models[k]
            x, y = data[k]
            opt = torch.optim.Adam(m.parameters(), lr=1e-2)
            dx, dy = x.to(DEV), y.to(DEV)
            for _ in range(5):
                F.cross_entropy(m(dx), dy).backward()
                opt.step()
                opt.zero_grad()
        except Exception as e:  # surfaced in the main thread
            errors.append(e)

    threads = [threading.Thread(target=train, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(2):
        ref, m = models[k]
        x, y = data[k]
        opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
        for _ in range(5):
            F.cross_entropy(ref(x), y).backward()
            opt.step()
            opt.zero_grad()
        assert_params_close(ref, m, rtol=1e-5, atol=1e-6)
