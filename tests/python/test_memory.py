"""Memory statistics as torch.cuda has them (python/ember/memory.py): torch.ember.* and
ember.* against the buffers actually allocated — device tensors (their nbytes), a
running program's buffers (its outputs and intermediates, the plan in last_graph())."""

import gc

import pytest
import torch

import ember
from conftest import DEV

MiB = 2**20


def settle():
    ember.sync()
    gc.collect()


def test_the_torch_device_module_has_the_cuda_names():
    for name in (
        "memory_allocated",
        "max_memory_allocated",
        "reset_peak_memory_stats",
        "reset_max_memory_allocated",
        "memory_stats",
        "memory_summary",
    ):
        assert callable(getattr(torch.ember, name)), name
        assert getattr(torch.ember, name) is getattr(ember.memory, name)
    assert torch.ember.memory_allocated() == ember.memory_allocated()


def test_a_device_tensor_counts_its_bytes():
    settle()
    base = torch.ember.memory_allocated()
    t = torch.ones(1000, 257, dtype=torch.float32).to(DEV)
    ember.sync()
    assert torch.ember.memory_allocated() - base == t.nbytes == 1000 * 257 * 4
    u = torch.zeros(3, 5, dtype=torch.float16).to(DEV)
    ember.sync()
    assert torch.ember.memory_allocated() - base == t.nbytes + u.nbytes
    del t, u
    settle()
    assert torch.ember.memory_allocated() == base


def test_peak_and_reset():
    settle()
    base = torch.ember.memory_allocated()
    torch.ember.reset_peak_memory_stats()
    assert torch.ember.max_memory_allocated() == base
    t = torch.ones(4 * MiB // 4).to(DEV)
    ember.sync()
    del t
    settle()
    assert torch.ember.memory_allocated() == base
    assert torch.ember.max_memory_allocated() >= base + 4 * MiB
    torch.ember.reset_peak_memory_stats()
    assert torch.ember.max_memory_allocated() == base


def test_the_peak_includes_a_running_programs_intermediates():
    # exp(x) feeds a matmul (an extern step): it is materialized inside the program,
    # 4 MiB, and freed before the program ends: the peak sees it, the end state not.
    x = torch.randn(1024, 1024).to(DEV)
    w = torch.randn(1024, 8).to(DEV)
    settle()
    base = torch.ember.memory_allocated()
    torch.ember.reset_peak_memory_stats()
    y = x.exp() @ w
    ember.sync()
    after = torch.ember.memory_allocated()
    peak = torch.ember.max_memory_allocated()
    assert after - base == y.nbytes
    assert peak - base >= x.nbytes + y.nbytes  # the intermediate was live with the output
    del y
    settle()


def test_memory_stats_and_summary():
    settle()
    s = torch.ember.memory_stats()
    assert list(s) == sorted(s)
    assert s["allocated_bytes.all.current"] == torch.ember.memory_allocated()
    assert s["allocated_bytes.all.peak"] == torch.ember.max_memory_allocated()
    text = torch.ember.memory_summary()
    assert "allocated_bytes.all" in text
    assert str(round(s["allocated_bytes.all.current"] / 2**20, 2)) in text or "B" in text


@pytest.mark.parametrize("fn", ["memory_allocated", "max_memory_allocated"])
def test_device_argument_accepted(fn):
    f = getattr(torch.ember, fn)
    assert f() == f(0) == f("ember") == f(torch.device("ember", 0))


def test_last_graph_reports_the_planned_peak_and_the_run_stays_within_it():
    # exp(x) is materialized for the matmul (an extern step) and dies inside the program.
    x = torch.randn(1024, 1024).to(DEV)
    w = torch.randn(1024, 8).to(DEV)
    settle()
    base = torch.ember.memory_allocated()
    torch.ember.reset_peak_memory_stats()
    y = x.exp() @ w
    ember.sync()
    peak = torch.ember.max_memory_allocated() - base
    g = ember.metrics.last_graph()
    assert g["planned_peak_bytes"] >= x.nbytes + y.nbytes, g
    assert peak >= g["planned_peak_bytes"]
    assert peak <= g["planned_peak_bytes"] + g["planned_buffer_bytes"]
    del y
    settle()


def three_reduced_products(x, ws):
    return [(x @ w).amax(0) for w in ws]


@pytest.mark.parametrize("scheduled", [False, True])
def test_memory_scheduling_lowers_a_programs_peak(scheduled, monkeypatch):
    # Three 256x512 products (512 KiB each), each reduced: in trace order all three are
    # live at once; scheduled for memory, one at a time.
    if scheduled:  # off by default for now
        monkeypatch.setenv("EMBER_MEMORY_SCHEDULING", "1")
    ember._C.clear_cache()
    x = torch.randn(256, 128).to(DEV)
    ws = [torch.randn(128, 512).to(DEV) for _ in range(3)]
    settle()
    base = torch.ember.memory_allocated()
    torch.ember.reset_peak_memory_stats()
    outs = three_reduced_products(x, ws)
    ember.sync()
    peak = torch.ember.max_memory_allocated() - base
    planned = ember.metrics.last_graph()["planned_peak_bytes"]
    product = 256 * 512 * 4
    want = [t.amax(0) for t in (x.cpu() @ w.cpu() for w in ws)]
    for o, e in zip(outs, want):
        torch.testing.assert_close(o.cpu(), e)
    if scheduled:
        assert peak < 2 * product and planned < 2 * product, (peak, planned)
    else:
        assert peak >= 3 * product and planned >= 3 * product, (peak, planned)
    ember._C.clear_cache()
