"""Hooks and runtime integration: DataLoader pinning and workers, threads, accelerator."""

import threading

import torch
from torch.utils.data import DataLoader, TensorDataset

import ember
from conftest import DEV, close


def test_dataloader_pin_memory_and_workers():
    ds = TensorDataset(torch.arange(40.0).reshape(20, 2), torch.arange(20))
    total = torch.zeros(2, device=DEV)
    for x, y in DataLoader(ds, batch_size=5, pin_memory=True, num_workers=2):
        total = total + x.to(DEV, non_blocking=True).sum(0)
    close(total, torch.arange(40.0).reshape(20, 2).sum(0))


def test_accelerator_reports_ember():
    assert torch.accelerator.current_accelerator().type == "ember"
    assert torch.accelerator.device_count() == 1


def test_manual_seed_reaches_ember():
    torch.manual_seed(7)
    a = torch.randn(5, device=DEV).cpu()
    torch.manual_seed(7)
    b = torch.randn(5, device=DEV).cpu()
    close(a, b)
    g = torch.Generator(device=DEV)
    g.manual_seed(3)
    c = torch.rand(4, device=DEV, generator=g).cpu()
    g.manual_seed(3)
    close(torch.rand(4, device=DEV, generator=g), c)


def test_dropout_training_is_reproducible():
    x = torch.ones(1000, device=DEV)
    torch.manual_seed(11)
    a = torch.nn.functional.dropout(x, 0.5).cpu()
    torch.manual_seed(11)
    b = torch.nn.functional.dropout(x, 0.5).cpu()
    close(a, b)
    kept = (a != 0).float().mean().item()
    assert 0.4 < kept < 0.6 and set(a.unique().tolist()) <= {0.0, 2.0}


def test_tracing_from_threads():
    a = torch.randn(64)
    results = {}

    def work(i):
        d = a.to(DEV)
        for _ in range(20):
            d = d * 1.5 - 0.5
        results[i] = d.cpu()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ref = a.clone()
    for _ in range(20):
        ref = ref * 1.5 - 0.5
    for i in range(4):
        close(results[i], ref)


def test_get_amp_supported_dtype():
    assert torch.bfloat16 in torch.ember.get_amp_supported_dtype()


def test_forked_child_refuses_cleanly():
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def child(q):
        try:
            torch.ones(2, device="ember")
            q.put("no error")
        except RuntimeError as e:
            q.put(str(e))

    p = ctx.Process(target=child, args=(q,))
    p.start()
    msg = q.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0 and "forked child" in msg


def test_out_of_memory_is_an_exception():
    import pytest

    with pytest.raises(RuntimeError, match="memory"):
        torch.empty(2**45, device=DEV)
    x = torch.ones(4096, device=DEV)
    y = x.expand(2**28, 4096).contiguous()  # 4 TiB, fails at sync
    z = x + 1
    with pytest.raises(RuntimeError, match="memory"):
        y.cpu()
    close(z, torch.full((4096,), 2.0))


def test_autocast_policies():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    da, db = a.to(DEV), b.to(DEV)
    with torch.autocast("ember", dtype=torch.bfloat16):
        mm = da @ db
        sm = torch.softmax(mm, dim=-1)
        lin = torch.nn.functional.linear(da, db)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = a @ b
    assert mm.dtype == torch.bfloat16 and lin.dtype == torch.bfloat16
    assert sm.dtype == torch.float32
    close(mm, ref)


def test_device_loader_moves_nested_batches():
    ds = TensorDataset(torch.arange(12.0).reshape(6, 2), torch.arange(6))
    seen = []
    for x, y in ember.data.DeviceLoader(DataLoader(ds, batch_size=2), DEV, prefetch=2):
        assert x.device.type == "ember" and y.device.type == "ember"
        seen.append((x * 2).sum().item())
    assert seen == [12.0, 44.0, 76.0]
    batches = list(ember.data.DeviceLoader([{"a": torch.ones(2), "b": [torch.zeros(1), 3]}]))
    assert batches[0]["a"].device.type == "ember" and batches[0]["b"][1] == 3
