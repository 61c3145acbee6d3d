"""Optimizers, zero_grad, LR schedulers and gradient clipping on ember against eager
CPU. Optimizer state created on the first step costs at most one extra graph (step 1);
from step 3 on every step is a memory-cache hit of one graph."""

import copy

import pytest
import torch
import torch.nn.functional as F

from training_util import (
    DEV,
    StepCounter,
    assert_as_accurate_as_eager,
    assert_params_as_accurate_as_eager,
    assert_params_close,
    fresh_graphs,
    mlp,
    pair,
)

OPTIMIZERS = {
    "sgd": (torch.optim.SGD, dict(lr=0.05)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.1)),
    "sgd_nesterov": (
        torch.optim.SGD,
        dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2),
    ),
    "adam": (torch.optim.Adam, dict(lr=1e-2)),
    "adam_amsgrad": (torch.optim.Adam, dict(lr=1e-2, amsgrad=True, weight_decay=1e-2)),
    "adamw": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    "rmsprop": (torch.optim.RMSprop, dict(lr=1e-2)),
    "rmsprop_centered_momentum": (torch.optim.RMSprop, dict(lr=1e-2, momentum=0.5, centered=True)),
    "adagrad": (torch.optim.Adagrad, dict(lr=0.1, lr_decay=1e-2, initial_accumulator_value=0.1)),
}

_TOL = dict(rtol=1e-5, atol=1e-6)


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(16, 10, generator=g), torch.randint(0, 3, (16,), generator=g)


def _train(ref, m, make_opt, steps, *, sched=None, clip=None, set_to_none=True):
    x, y = _data()
    opts = [make_opt(ref.parameters()), make_opt(m.parameters())]
    scheds = [sched(o) for o in opts] if sched else [None, None]
    fresh_graphs()
    counter = StepCounter()
    results = [[], []]
    for _ in range(steps):
        for k, (model, xx, yy) in enumerate([(ref, x, y), (m, x.to(DEV), y.to(DEV))]):
            loss = F.cross_entropy(model(xx), yy)
            loss.backward()
            if clip is not None:
                results[k].append(clip(model.parameters()))
            opts[k].step()
            if scheds[k] is not None:
                scheds[k].step()
            opts[k].zero_grad(set_to_none=set_to_none)
        counter.mark()
    return counter, results, opts


def _train64(model, make_opt, steps):
    """The loop of _train in float64 on CPU (the arbiter for last-bit differences)."""
    x, y = _data()
    opt = make_opt(model.parameters())
    for _ in range(steps):
        F.cross_entropy(model(x.double()), y).backward()
        opt.step()
        opt.zero_grad()
    return opt


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "forloop"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_matches_eager(name, foreach):
    cls, kw = OPTIMIZERS[name]
    torch.manual_seed(0)
    ref, m = pair(mlp())
    ref64 = copy.deepcopy(ref).double()
    counter, _, opts = _train(ref, m, lambda p: cls(p, foreach=foreach, **kw), 5)
    opt64 = _train64(ref64, lambda p: cls(p, foreach=foreach, **kw), 5)
    # Centered RMSprop divides by sqrt(square_avg - grad_avg**2) + eps, a difference of
    # nearly equal terms: elements off by more than _TOL must be at least as close to a
    # float64 run as eager's are (training_util.assert_as_accurate_as_eager).
    assert_params_as_accurate_as_eager(ref, m, ref64, **_TOL)
    for s_r, s_m, s_64 in zip(opts[0].state.values(), opts[1].state.values(), opt64.state.values()):
        for key, v in s_r.items():
            if isinstance(v, torch.Tensor):
                assert_as_accurate_as_eager(s_m[key], v, s_64[key], key, **_TOL)
    # step 1 (state created) and the steady step: two graphs; then cache hits only
    assert counter.built() <= 2, counter.steps
    assert counter.built(2) == 0 and counter.hits(2) == 3, counter.steps
    assert counter.syncs() == 5, counter.steps


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad(set_to_none):
    torch.manual_seed(0)
    ref, m = pair(mlp())
    counter, _, _ = _train(
        ref, m, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), 5, set_to_none=set_to_none
    )
    assert_params_close(ref, m, **_TOL)
    for p in m.parameters():
        if set_to_none:
            assert p.grad is None
        else:
            assert p.grad is not None and p.grad.device.type == "ember"
            assert torch.count_nonzero(p.grad.cpu()) == 0
    # set_to_none=False: step 2 also differs from step 3 (grads exist from then on)
    limit = 2 if set_to_none else 3
    assert counter.built() <= limit and counter.built(limit) == 0, counter.steps


SCHEDULERS = {
    "step": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
    "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=6, eta_min=1e-4),
    # warmup from lr = 0: the scalar is a graph input, so lr = 0 never specialises
    "lambda_warmup": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, s / 3)),
    "onecycle": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=8),
}


@pytest.mark.parametrize("opt", ["sgd_momentum", "adamw"])
@pytest.mark.parametrize("sched", list(SCHEDULERS))
def test_lr_scheduler(sched, opt):
    cls, kw = OPTIMIZERS[opt]
    torch.manual_seed(0)
    ref, m = pair(mlp())
    counter, _, opts = _train(ref, m, lambda p: cls(p, **kw), 8, sched=SCHEDULERS[sched])
    assert opts[0].param_groups[0]["lr"] == opts[1].param_groups[0]["lr"]
    assert_params_close(ref, m, **_TOL)
    assert counter.built() <= 2 and counter.built(2) == 0, counter.steps


@pytest.mark.parametrize("foreach", [None, False], ids=["default", "forloop"])
def test_clip_grad_norm(foreach):
    torch.manual_seed(0)
    ref, m = pair(mlp())
    clip = lambda ps: torch.nn.utils.clip_grad_norm_(ps, max_norm=0.5, foreach=foreach)  # noqa: E731
    counter, norms, _ = _train(
        ref, m, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 5, clip=clip
    )
    assert_params_close(ref, m, **_TOL)
    assert all(n.device.type == "ember" for n in norms[1])
    torch.testing.assert_close(torch.stack(norms[1]).cpu(), torch.stack(norms[0]).detach(), **_TOL)
    assert counter.built() <= 2 and counter.built(2) == 0, counter.steps
    assert counter.syncs() == 5  # the norm stays lazy: no extra sync


@pytest.mark.parametrize("foreach", [None, False], ids=["default", "forloop"])
def test_clip_grad_value(foreach):
    torch.manual_seed(0)
    ref, m = pair(mlp())
    clip = lambda ps: torch.nn.utils.clip_grad_value_(ps, clip_value=0.01, foreach=foreach)  # noqa: E731
    counter, _, _ = _train(ref, m, lambda p: torch.optim.Adam(p, lr=1e-2), 5, clip=clip)
    assert_params_close(ref, m, **_TOL)
    assert counter.built() <= 2 and counter.built(2) == 0, counter.steps
