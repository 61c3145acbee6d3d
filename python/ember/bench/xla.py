"""The optional PyTorch/XLA column (``--torch-xla-venv DIR``).

torch_xla pins its own torch (2.9 for torch_xla 2.9), so it cannot share a process with
torch 2.13 and ember: everything runs through ``worker.py`` with ``DIR/bin/python`` and
``PJRT_DEVICE=CPU``:

- cost phase: cold and warm processes exactly as for the other backends (``cost.py``),
  with XLA's persistent compilation cache in the fresh cache directory;
- timing phase: ``worker.py timing`` interleaves that environment's own eager CPU and
  torch_xla in one process, so ``ratio_to_eager`` pairs XLA with eager of the same torch
  (2.9) round by round. ``ratio_to_inductor`` is null: no Inductor runs in that process.

Numerics: XLA's per-step values are compared with eager's in both processes (its own
eager in the timing process, torch 2.13 eager's cold process for the cost phase).
Setup: docs/benchmarks.md.
"""
from __future__ import annotations

import os

from . import cost


def column(venv, model, mode, scale, s, cache_root, timeout, eager_checks, bytes_moved, triad,
           no_cost, make_result) -> dict:
    """One result row for backend "torch_xla" (``make_result`` is cli._result)."""
    python = os.path.join(venv, "bin", "python")
    csts = None
    env_extra = {"PJRT_DEVICE": "CPU"}
    if not no_cost:
        cache = os.path.join(cache_root, f"xla-{model}-{mode}")
        csts = cost.measure(model, mode, "torch_xla", scale, s["startup"], s["steady"],
                            cache_root, timeout, python=python,
                            extra_env=dict(env_extra, EMBER_BENCH_XLA_CACHE=cache))
    env = cost.worker_env(os.path.join(cache_root, f"xla-timing-{model}-{mode}"),
                          dict(env_extra))
    out = cost.spawn(["timing", "--model", model, "--mode", mode, "--scale", scale,
                      "--backends", "eager,torch_xla", "--warmup", str(s["warmup"]),
                      "--repeats", str(s["repeats"])], env, timeout, python)
    tim = None
    if out.get("status") == "ok":
        tim = out["timing"]["torch_xla"]
    r = make_result(model, mode, "torch_xla", tim, csts, eager_checks, bytes_moved, triad)
    if tim is None:
        r["status"] = "timing process " + out.get("status", "failed")
    else:
        r["notes"].append(f"timed against eager torch {out['torch_version']} in its own "
                          f"process (eager there: {out['timing']['eager']['median_s'] * 1e3:.3g} ms)")
    return r
