"""The optional PyTorch/XLA column (``--torch-xla-venv DIR``).

torch_xla pins its own torch (2.9 for torch_xla 2.9), so it cannot share a process with
torch 2.13 and ember: everything runs through ``worker.py`` with ``DIR/bin/python`` and
``PJRT_DEVICE=CPU``:

- cost phase: cold and warm processes exactly as for the other backends (``cost.py``),
  with XLA's persistent compilation cache in the fresh cache directory;
- timing phase: ``worker.py timing`` in that environment: eager (torch 2.9) runs the
  warm-up steps as the numerics reference, then torch_xla alone is timed. Eager is not
  timed there: once the PJRT CPU client is up, its threads compete with eager's OpenMP
  threads on a 2-core machine (eager torch 2.9 took 1.2 s per tiny-MLP step beside it,
  1 ms in a plain process), so pairing them would flatter XLA. The ratios are therefore
  **not paired**: XLA's median over the main process's eager (torch 2.13) and Inductor
  medians, run just before; the row's notes say so.

Numerics: XLA's per-step values are compared with eager's in both processes (torch 2.9
eager in the timing process, torch 2.13 eager's cold process for the cost phase).
Setup: docs/benchmarks.md.
"""

from __future__ import annotations

import os

from . import cost


def column(
    venv,
    model,
    mode,
    scale,
    s,
    cache_root,
    timeout,
    eager_checks,
    bytes_moved,
    triad,
    no_cost,
    make_result,
    medians,
) -> dict:
    """One result row for backend "torch_xla" (``make_result`` is cli._result; `medians`:
    {backend: median step seconds} of the main timing process, for the ratios)."""
    python = os.path.join(venv, "bin", "python")
    csts = None
    env_extra = {"PJRT_DEVICE": "CPU"}
    if not no_cost:
        cache = os.path.join(cache_root, f"xla-{model}-{mode}")
        csts = cost.measure(
            model,
            mode,
            "torch_xla",
            scale,
            s["startup"],
            s["steady"],
            cache_root,
            timeout,
            python=python,
            extra_env=dict(env_extra, EMBER_BENCH_XLA_CACHE=cache),
        )
    env = cost.worker_env(os.path.join(cache_root, f"xla-timing-{model}-{mode}"), dict(env_extra))
    out = cost.spawn(
        [
            "timing",
            "--model",
            model,
            "--mode",
            mode,
            "--scale",
            scale,
            "--backends",
            "eager,torch_xla",
            "--timed",
            "torch_xla",
            "--warmup",
            str(s["warmup"]),
            "--repeats",
            str(s["repeats"]),
            "--budget",
            str(s["budget_s"]),
        ],
        env,
        timeout,
        python,
    )
    tim = None
    if out.get("status") == "ok":
        tim = dict(out["timing"]["torch_xla"])
        tim["ratios"] = {}
        for ref in ("eager", "inductor"):
            if tim["median_s"] and medians.get(ref):
                tim["ratios"][ref] = tim["median_s"] / medians[ref]
    r = make_result(model, mode, "torch_xla", tim, csts, eager_checks, bytes_moved, triad)
    if tim is None:
        r["status"] = "timing process " + out.get("status", "failed")
    else:
        r["notes"].append(
            f"own process, torch {out['torch_version']}; ratios not paired: "
            "median / the main process's medians"
        )
    return r
