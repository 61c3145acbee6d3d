"""torch.save/torch.load (incl. map_location="ember"), pickle, deepcopy."""

import copy
import io
import pickle

import torch

from conftest import DEV, close


def _net():
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
    )


def _trained(model, dev):
    model.train()
    for _ in range(2):
        model(torch.randn(16, 4).to(dev)).sum().backward()
    return model


def test_tensor_save_load_roundtrip():
    a = torch.randn(3, 5).t()
    d = a.to(DEV)
    buf = io.BytesIO()
    torch.save({"x": d, "y": d * 2, "n": 3}, buf)
    buf.seek(0)
    out = torch.load(buf)
    assert out["x"].device.type == "ember" and out["n"] == 3
    close(out["x"], a)
    close(out["y"], a * 2)


def test_pickle_and_deepcopy_tensor():
    a = torch.randn(4)
    d = a.to(DEV).requires_grad_()
    p = pickle.loads(pickle.dumps(d))
    assert p.device.type == "ember" and p.requires_grad
    close(p.detach(), a)
    c = copy.deepcopy(d)
    assert c.requires_grad and c.device.type == "ember"
    with torch.no_grad():
        d.add_(1)
    close(c.detach(), a)  # independent copy


def test_model_state_dict_with_batchnorm_buffers():
    torch.manual_seed(0)
    m = _trained(_net().to(DEV), DEV)
    sd = m.state_dict()
    assert sd["1.running_mean"].device.type == "ember"
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    sd2 = torch.load(buf)
    m2 = _net().to(DEV)
    m2.load_state_dict(sd2)
    for k, v in m.state_dict().items():
        close(m2.state_dict()[k], v.cpu())
    assert int(m2[1].num_batches_tracked) == 2


def test_cpu_checkpoint_into_ember_model_and_map_location():
    torch.manual_seed(0)
    ref = _trained(_net(), "cpu")
    buf = io.BytesIO()
    torch.save(ref.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, map_location="ember")
    assert all(v.device.type == "ember" for v in sd.values())
    m = _net().to(DEV)
    m.load_state_dict(sd)
    buf.seek(0)
    m_cpu_loaded = _net().to(DEV)
    m_cpu_loaded.load_state_dict(torch.load(buf))  # CPU tensors copied into ember params
    x = torch.randn(5, 4)
    ref.eval(), m.eval(), m_cpu_loaded.eval()
    close(m(x.to(DEV)), ref(x).detach(), rtol=1e-5, atol=1e-5)
    close(m_cpu_loaded(x.to(DEV)), ref(x).detach(), rtol=1e-5, atol=1e-5)


def test_map_location_keeps_aliasing():
    base = torch.arange(12.0)
    buf = io.BytesIO()
    torch.save({"base": base, "view": base[2:6]}, buf)
    buf.seek(0)
    out = torch.load(buf, map_location="ember")
    out["base"].mul_(10)
    close(out["view"], base[2:6] * 10)


def test_deepcopy_model_with_batchnorm():
    torch.manual_seed(0)
    m = _trained(_net().to(DEV), DEV)
    m2 = copy.deepcopy(m)
    for (k, v), (k2, v2) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert k == k2 and v2.device.type == "ember"
        close(v2, v.cpu())
    with torch.no_grad():
        m[0].weight.add_(1)
    assert not torch.equal(m[0].weight.cpu(), m2[0].weight.cpu())


def test_optimizer_state_dict_roundtrip():
    torch.manual_seed(0)
    m = _net().to(DEV)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    m(torch.randn(8, 4).to(DEV)).sum().backward()
    opt.step()
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    opt2 = torch.optim.AdamW(m.parameters(), lr=1e-2)
    opt2.load_state_dict(torch.load(buf))
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    for k in s1:
        for name in ("exp_avg", "exp_avg_sq"):
            close(s2[k][name], s1[k][name].cpu())


def test_storage_level_copies_equal_eager():
    t = torch.arange(6.0).to(DEV)
    want = torch.arange(6.0).untyped_storage().tolist()
    for f in [
        lambda: copy.deepcopy(t.untyped_storage()).tolist(),
        lambda: t.untyped_storage().clone().tolist(),
        lambda: t.untyped_storage().cpu().tolist(),
        lambda: t.untyped_storage().tolist(),
    ]:
        assert f() == want
    close(t, torch.arange(6.0))
