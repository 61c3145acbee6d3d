"""What reaches below the tensor to its storage, on ember (issue 24, part 2): Hugging
Face's and safetensors' tied-weight helpers, safetensors files, Tensor.set_ /
storage_offset / _make_subclass, FakeTensor, torch.compile and torch.export of models
on ember. Eager CPU is the oracle."""

import os

import pytest
import torch

import ember
from conftest import DEV, close


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.lin = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight  # tied, as a language model's head

    def forward(self, idx):
        return self.head(torch.relu(self.lin(self.emb(idx))))


def _groups(model, key):
    out = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        out.setdefault(key(p), set()).add(name)
    return sorted(sorted(g) for g in out.values())


@pytest.mark.parametrize("helper", ["transformers", "safetensors"])
def test_tied_weights_are_tied_and_distinct_ones_distinct(helper):
    if helper == "transformers":
        from transformers.pytorch_utils import id_tensor_storage as key
    else:
        from safetensors.torch import storage_ptr as key
    torch.manual_seed(0)
    cpu = Tied()
    want = _groups(cpu, key)
    assert ["emb.weight", "head.weight"] in want and len(want) == 3
    m = Tied()
    m.load_state_dict(cpu.state_dict())
    m = m.to(DEV)
    assert _groups(m, key) == want
    # still after a training step (new values, new buffers)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(torch.tensor([1, 2, 3]).to(DEV)).sum().backward()
    opt.step()
    assert _groups(m, key) == want


def test_safetensors_round_trip(tmp_path):
    from safetensors.torch import load_file, load_model, save_file, save_model

    torch.manual_seed(0)
    cpu = Tied()
    m = Tied()
    m.load_state_dict(cpu.state_dict())
    m = m.to(DEV)
    with torch.no_grad():
        m.lin.weight.mul_(2)  # pending when saved
        cpu.lin.weight.mul_(2)
    path = os.path.join(tmp_path, "lin.safetensors")
    save_file({"w": m.lin.weight, "b": m.lin.bias, "wt": m.lin.weight.t().contiguous()}, path)
    loaded = load_file(path, device="cpu")
    close(loaded["w"], cpu.lin.weight.detach())
    close(loaded["wt"], cpu.lin.weight.detach().t())
    back = {k: v.to(DEV) for k, v in loaded.items()}
    close(back["w"] @ back["wt"], cpu.lin.weight.detach() @ cpu.lin.weight.detach().t())
    # a whole model with tied weights: safetensors drops the duplicate and restores it
    path = os.path.join(tmp_path, "model.safetensors")
    save_model(m, path)
    fresh = Tied().to(DEV)
    load_model(fresh, path)
    for (n, a), (_, b) in zip(fresh.state_dict().items(), cpu.state_dict().items()):
        close(a, b, msg=n)
    idx = torch.tensor([[1, 2], [3, 4]])
    close(fresh(idx.to(DEV)), cpu(idx))


def test_storage_offset_set_and_make_subclass():
    a = torch.arange(12.0).reshape(3, 4)
    b = a.to(DEV)
    assert b[1:, 2:].storage_offset() == a[1:, 2:].storage_offset() == 6

    class Sub(torch.Tensor):
        pass

    for t in (a, b):
        s = torch.Tensor._make_subclass(Sub, t)
        assert type(s) is Sub and s.device == t.device
        assert s.untyped_storage()._cdata == t.untyped_storage()._cdata
        assert s.data_ptr() == t.data_ptr()
        close(s.as_subclass(torch.Tensor) * 2, a * 2)

    # set_: a tensor on another's storage, as eager
    for src in (a, b):
        t = torch.empty(0, device=src.device)
        t.set_(src)
        assert t.untyped_storage()._cdata == src.untyped_storage()._cdata
        close(t, a)
        u = torch.empty(0, device=src.device)
        u.set_(src.untyped_storage(), 2, (2, 3), (4, 1))
        assert u.storage_offset() == 2 and u.stride() == (4, 1)
        close(u, a.flatten()[2:].as_strided((2, 3), (4, 1)))


def test_fake_tensor_round_trip():
    from torch._subclasses.fake_tensor import FakeTensorMode

    a = torch.randn(4, 6).to(DEV) * 2  # pending: fakifying reads metadata only
    syncs = ember.metrics.counters()["syncs"]
    mode = FakeTensorMode()
    fa, fv = mode.from_tensor(a), mode.from_tensor(a[1:, 2:])
    assert ember._C.is_pending(a) and ember.metrics.counters()["syncs"] == syncs
    for f, t in ((fa, a), (fv, a[1:, 2:])):
        assert f.device == t.device and f.shape == t.shape
        assert f.stride() == t.stride() and f.storage_offset() == t.storage_offset()
    assert fv.untyped_storage()._cdata == fa.untyped_storage()._cdata
    with mode:
        out = fa @ fa.t() + 1
    assert out.device == a.device and out.shape == (4, 4)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "ember"])
def test_compile_a_model_on_ember(backend):
    torch._dynamo.reset()
    cpu = _mlp()
    m = _mlp().to(DEV)
    x = torch.randn(3, 4)
    f = torch.compile(m, backend=backend)
    for _ in range(2):
        out = f(x.to(DEV))
        assert out.device.type == "ember"
        close(out, cpu(x))
    # training through the compiled model: the same gradients as eager
    f(x.to(DEV)).square().sum().backward()
    cpu(x).square().sum().backward()
    for p, q in zip(m.parameters(), cpu.parameters()):
        close(p.grad, q.grad)


def test_compile_the_same_model_on_cpu_still_works():
    torch._dynamo.reset()
    cpu = _mlp()
    x = torch.randn(3, 4)
    out = torch.compile(_mlp(), backend="ember")(x)
    assert out.device.type == "cpu"
    close(out, cpu(x))


def test_export_a_model_on_ember():
    cpu = _mlp()
    m = _mlp().to(DEV)
    x = torch.randn(3, 4)
    ep = torch.export.export(m, (x.to(DEV),))
    assert {n.target for n in ep.graph.nodes if n.op == "call_function"} >= {
        torch.ops.aten.linear.default
    }
    out = ep.module()(x.to(DEV))
    assert out.device.type == "ember"
    close(out, cpu(x))
