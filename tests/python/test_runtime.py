"""Hooks and runtime integration: DataLoader pinning and workers, threads, accelerator."""

import threading

import pytest
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


# Random ops without a Generator argument: whether a call draws (src/torch/trace.cpp,
# call_draws). name -> (call on a tensor of 64 elements, its result depends on the draws)
def _flash_cpu(x):
    q = x.reshape(2, 2, 4, 4)
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q * 0.5, q + 1, 0.0)[0]


RANDOM_CALLS = {
    "native_dropout_train": (lambda x: torch.native_dropout(x, 0.5, True), True),
    "native_dropout_eval": (lambda x: torch.native_dropout(x, 0.5, False), False),
    "native_dropout_p0_train": (lambda x: torch.native_dropout(x, 0.0, True), False),
    "native_dropout_p0_train_none": (lambda x: torch.native_dropout(x, 0.0, None), False),
    "flash_attention_for_cpu_p0": (_flash_cpu, False),
    "randn_like": (torch.randn_like, True),
    "rand_like_no_elements": (lambda x: torch.rand_like(x[:0]), False),
}


@pytest.mark.parametrize("name", sorted(RANDOM_CALLS))
def test_random_op_moves_the_ember_generator_when_eager_draws(name):
    """A random call moves the ember generator exactly when eager's kernel moves the CPU
    generator (eval dropout, attention at dropout_p 0 and empty draws do not), never
    touches the CPU generator, and equals eager where its result does not depend on the
    draws."""
    fn, random_result = RANDOM_CALLS[name]
    x = torch.randn(64)
    cpu = torch.get_rng_state()
    want = fn(x)
    eager_draws = not torch.equal(torch.get_rng_state(), cpu)
    ember.manual_seed(5)
    before, cpu = ember.get_rng_state(), torch.get_rng_state()
    got = fn(x.to(DEV))
    got = [t.cpu() for t in got] if isinstance(got, tuple) else got.cpu()
    assert torch.equal(torch.get_rng_state(), cpu), "ember moved the CPU generator"
    assert (not torch.equal(ember.get_rng_state(), before)) == eager_draws
    if not random_result:
        close(got, want)


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
