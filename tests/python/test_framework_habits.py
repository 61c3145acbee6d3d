"""What training frameworks do that plain loops rarely do, each against eager CPU:
`torch.tensor(data, device="ember")` then an in-place update (transformers' Trainer keeps
its running loss so), fused optimizers (`fused=True`, the Trainer's default AdamW), and
an optimizer built before `module.to("ember")` (accelerate's prepare()): the parameters
keep their identity, so it trains the moved model."""

import copy
import weakref

import pytest
import torch

import ember
from conftest import DEV


@pytest.mark.parametrize(
    "data", [0.0, [1.5, -2.0], [[1, 2], [3, 4]], True], ids=["0d", "1d", "2d_int", "bool"]
)
def test_torch_tensor_on_ember_is_an_ordinary_ember_tensor(data):
    t = torch.tensor(data, device=DEV)
    want = torch.tensor(data)
    assert t.device.type == "ember" and t.dtype == want.dtype
    assert ember._C.is_functional(t)
    if want.dtype != torch.bool:
        t += torch.ones_like(t)  # failed: "mutating a non-functional tensor ..."
        want += torch.ones_like(want)
    assert torch.equal(t.cpu(), want)
    assert torch.equal(torch.as_tensor(data, device=DEV).cpu(), torch.tensor(data))


OPTIMIZERS = {
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True),
    "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True, fused=True),
    "adam_tensor_lr": lambda p: torch.optim.Adam(p, lr=torch.tensor(1e-2), fused=True),
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1, fused=True),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, fused=True),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1, fused=True),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fused_optimizer_matches_eager(name):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    m = copy.deepcopy(ref).to(DEV)
    x = torch.randn(4, 6)
    for model, xx in ((ref, x), (m, x.to(DEV))):
        opt = OPTIMIZERS[name](model.parameters())
        for _ in range(3):
            model(xx).square().mean().backward()
            opt.step()
            opt.zero_grad()
    for (pname, p), q in zip(ref.named_parameters(), m.parameters()):
        # (rounding only: eager's float32 sqrt is not correctly rounded, ours is)
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6, msg=pname)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fused_optimizer_step_runs_in_place_on_its_outputs(name):
    # The functional variant (`_fused_adamw`) runs as its in-place op on the output
    # buffers: no result of the step is computed elsewhere and copied in. Once the
    # state exists, the step writes the parameters, gradients and state in their own
    # (donated) buffers: every storage stays where it was.
    torch.manual_seed(1)
    ps = [torch.randn(5, 4, requires_grad=True) for _ in range(3)]
    grads = [torch.randn(5, 4) for _ in ps]
    qs = [p.detach().clone().to(DEV).requires_grad_() for p in ps]
    for group, gs in ((ps, grads), (qs, [g.to(DEV) for g in grads])):
        for p, g in zip(group, gs):
            p.grad = g
    ref, opt = OPTIMIZERS[name](ps), OPTIMIZERS[name](qs)

    def storages():
        ts = [t for q in qs for t in (q, q.grad, *opt.state[q].values())]
        return [t.untyped_storage().data_ptr() for t in ts if torch.is_tensor(t) and t.dim()]

    for i in range(2):
        ref.step()
        ember.sync()
        ember.metrics.clear()
        before = storages()
        opt.step()
        ember.sync()
        c = ember.metrics.counters()
        assert c["extern_copies"] == 0, c["externs"]
        if i:
            assert storages() == before
    for p, q in zip(ps, qs):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)


def test_optimizer_built_before_the_move_trains_the_moved_model():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    m = copy.deepcopy(ref)
    ids = [id(p) for p in m.parameters()]
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)  # CPU parameters
    m.to(DEV)
    assert [id(p) for p in m.parameters()] == ids
    assert all(p.device.type == "ember" for g in opt.param_groups for p in g["params"])
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    x = torch.randn(4, 6)
    for model, o, xx in ((ref, ref_opt, x), (m, opt, x.to(DEV))):
        for _ in range(3):
            model(xx).square().mean().backward()
            o.step()
            o.zero_grad()
    for p, q in zip(ref.parameters(), m.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach())
    # and back: the same objects on the CPU, with the trained values
    m.cpu()
    assert [id(p) for p in m.parameters()] == ids
    for p, q in zip(ref.parameters(), m.parameters()):
        torch.testing.assert_close(q.detach(), p.detach())


def test_a_parameter_that_cannot_be_swapped_is_replaced_as_before():
    """A weak reference to a parameter rules out torch's swap: module.to() then makes new
    Parameters (the old behaviour), tied ones still tied."""

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(7, 4)
            self.head = torch.nn.Linear(4, 7, bias=False)
            self.head.weight = self.emb.weight

    m = Tied()
    keep = weakref.ref(m.head.bias if m.head.bias is not None else m.emb.weight)
    old = m.emb.weight
    m.to(DEV)
    assert keep() is not None and m.emb.weight is not old
    assert m.head.weight is m.emb.weight and m.emb.weight.device.type == "ember"
