"""Ember's program steps as torch.profiler events (docs/architecture.md, "Profiling"):
each native kernel, extern and interpreted step of a sync is an event, named as the
kernel / ATen op, with the traced source lines as its metadata."""

import inspect

import torch

import ember
from conftest import DEV


def _line():
    return inspect.currentframe().f_back.f_lineno


def test_steps_are_profiler_events_with_source_lines():
    x, w = torch.randn(64, 48).to(DEV), torch.randn(32, 48).to(DEV)
    ember.sync()
    with torch.profiler.profile(record_shapes=True) as prof:
        y = torch.relu(x @ w.t()) * 2
        line = _line() - 1
        got = y.cpu()
    torch.testing.assert_close(got, torch.relu(x.cpu() @ w.cpu().t()) * 2)
    events = prof.events()
    names = [e.name for e in events]
    kernels = [e for e in events if e.name.startswith("ember_fused")]
    assert kernels, names
    assert any(f"test_profiler.py:{line}" in e.kwinputs.get("ember_source", "") for e in kernels)
    dots = [e for e in events if e.name == "ember.dot-general"]
    assert len(dots) == 1, names
    # ATen's GEMM call runs inside the extern's event
    mm = [e for e in events if e.name == "aten::mm"]
    assert any(
        m.time_range.start >= dots[0].time_range.start
        and m.time_range.end <= dots[0].time_range.end
        for m in mm
    )


def test_aten_extern_steps_are_named_by_their_op():
    x = torch.randn(4, 7).to(DEV)
    ember.sync()
    with torch.profiler.profile(record_shapes=True) as prof:
        v, i = x.sort(dim=1)  # no lowering: an ATen custom-call step
        line = _line() - 1
        v.cpu()
    steps = [e for e in prof.events() if "ember_source" in (e.kwinputs or {})]
    sort = [e for e in steps if e.name == "aten::sort"]
    assert sort, [e.name for e in steps]
    assert f"test_profiler.py:{line}" in sort[0].kwinputs["ember_source"]


def test_no_events_without_a_profiler():
    # the observer returns at once when nothing collects: results are unchanged
    x = torch.randn(16, 16)
    torch.testing.assert_close((x.to(DEV).exp() + 1).cpu(), x.exp() + 1)
