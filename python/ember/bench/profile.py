"""``python -m ember.bench --profile MODEL[:MODE]``: where a step's time goes, ember
beside eager.

Runs the workload's step (``train``: forward, backward, AdamW step; ``inference``) on
eager CPU and on the ember lazy device (or the backends given), warms each up, then profiles ``steps`` steps of
each with ``torch.profiler`` (no shapes recorded: recording shapes holds references that
change autograd's gradient layouts, so the profiled graph would differ). Ember's program
steps are profiler events (docs/architecture.md, "Profiling"): fused kernels by name,
ATen externs by op, ``ember.dot-general`` with its ``aten::mm`` inside. Prints, per
backend, the events with the most self CPU time, as milliseconds per step and a share of
the step's wall time; with ``trace_dir``, also each backend's Chrome trace.
"""

from __future__ import annotations

import os
import re
import time

import torch

from . import backends as B
from . import models


def _group(name: str) -> str:
    """Ember's kernels carry a per-program index (`ember_fused_mul_add_12`): grouped
    without it, so one row sums the kernels of one kind."""
    return re.sub(r"_\d+$", "", name) if name.startswith("ember_") else name


def _top(prof, steps: int, rows: int, wall_s: float) -> list:
    agg = {}
    for e in prof.key_averages():
        ms, n = agg.get(_group(e.key), (0.0, 0))
        agg[_group(e.key)] = (ms + e.self_cpu_time_total / 1e3 / steps, n + e.count // steps)
    out = sorted(agg.items(), key=lambda kv: -kv[1][0])[:rows]
    step_ms = wall_s * 1e3 / steps
    return [(k, ms, n, ms / step_ms if step_ms else 0.0) for k, (ms, n) in out]


def profile(
    spec: str,
    scale: str = "full",
    steps: int = 10,
    rows: int = 15,
    trace_dir=None,
    log=print,
    backends=("eager", "ember"),
) -> dict:
    """Profiles MODEL[:MODE] (default mode: train) on each of `backends` (names of
    ``ember.bench``'s backends: eager, inductor, ember, ember_compile); returns
    {backend: {"step_ms": wall ms per profiled step, "top": [(name, self ms/step,
    calls/step, share of step)]}} and logs one table per backend. Raises ValueError for
    an unknown model, mode or backend."""
    name, _, mode = spec.partition(":")
    mode = mode or models.TRAIN
    if name not in models.MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(models.MODEL_NAMES)}")
    if mode not in (models.TRAIN, models.INFER):
        raise ValueError(f"unknown mode {mode!r}; expected train or inference")
    unknown = [b for b in backends if b not in B.BACKENDS]
    if unknown:
        raise ValueError(
            f"unknown backend {unknown[0]!r}; expected some of {', '.join(B.BACKENDS)}"
        )
    w = models.build(name, scale)
    result = {}
    for backend in backends:
        r = B.make_runner(backend, w, mode)
        for _ in range(3):
            out = r.step()
            r.finish()
        del out
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            for _ in range(steps):
                out = r.step()
                r.finish()
            wall = time.perf_counter() - t0
        del out
        if trace_dir:
            os.makedirs(trace_dir, exist_ok=True)
            prof.export_chrome_trace(os.path.join(trace_dir, f"{name}-{mode}-{backend}.json"))
        top = _top(prof, steps, rows, wall)
        result[backend] = {"step_ms": wall * 1e3 / steps, "top": top}
        log(f"{name} {mode} on {backend}: {wall * 1e3 / steps:.2f} ms per step (profiled)")
        log(f"  {'self ms/step':>12} {'calls':>6} {'share':>6}  event")
        for k, ms, n, share in top:
            log(f"  {ms:12.3f} {n:6d} {share:6.1%}  {k}")
    return result
