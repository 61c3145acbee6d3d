"""The optional JAX/XLA:CPU column for the MLP (``--jax-venv DIR``).

JAX does not run PyTorch modules, so the column is the bench's MLP written again in JAX
(``jax_worker.py``), run by ``DIR/bin/python`` (a virtual environment with
``jax[cpu]``; no torch there) in processes of its own:

- inputs: the torch workload's initial weights and inputs (``nn.Linear`` weights and
  biases, ``x``, ``y``) are written to an ``.npz`` that every JAX process loads, so JAX
  starts from the same numbers as every other backend;
- cost phase: cold and warm processes as for the other backends (``cost.py``), with
  XLA's persistent compilation cache in a fresh directory;
- timing phase: ``jax_worker.py timing`` runs the warm-up steps (their results come back
  for the numerics check) and then times JAX alone. As for the PyTorch/XLA column the
  ratios are **not paired**: JAX's median over the main process's eager and Inductor
  medians, measured just before; the row's notes say so.

Numerics: the per-step values of the warm-up steps (training: the loss of steps 1..K;
inference: the logits) are compared with eager's for the same steps (an eager runner in
this process, from the same workload) by ``timing``'s rule; the cost processes' check
values with eager's cold process, as for every row. Setup: docs/benchmarks.md.
"""

from __future__ import annotations

import os
import tempfile

import torch

from . import backends as B
from . import cost, timing

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jax_worker.py")
MODELS = ("mlp",)  # the workloads jax_worker.py implements


def write_inputs(w, path: str) -> None:
    """The MLP workload `w`'s initial weights and inputs as the ``.npz`` the worker reads
    (w0, b0, w1, b1, w2, b2 in torch's layout, x float32, y int64)."""
    import numpy as np

    linears = [m for m in w.model.modules() if isinstance(m, torch.nn.Linear)]
    if len(linears) != 3:
        raise ValueError(f"the JAX column expects the bench's 3-layer MLP, got {w.description}")
    arrays = {}
    for i, lin in enumerate(linears):
        arrays[f"w{i}"] = lin.weight.detach().numpy()
        arrays[f"b{i}"] = lin.bias.detach().numpy()
    x, y = w.inputs
    arrays["x"], arrays["y"] = x.numpy(), y.numpy()
    np.savez(path, **arrays)


def _eager_reference(w, mode: str, steps: int) -> list:
    """Eager's results of `steps` steps from the workload's initial state (CPU float64)."""
    r = B.make_runner("eager", w, mode)
    out = []
    for _ in range(steps):
        out.append(r.to_cpu(r.step()))
    return out


def column(
    venv,
    w,
    mode,
    scale,
    s,
    cache_root,
    timeout,
    eager_checks,
    no_cost,
    make_result,
    medians,
) -> dict:
    """One result row for backend "jax" of workload `w` (one of MODELS) in `mode`
    (``make_result`` is cli._result; `medians`: {backend: median step seconds} of the
    main timing process, for the ratios)."""
    import numpy as np

    python = os.path.join(venv, "bin", "python")
    inputs = os.path.join(tempfile.mkdtemp(prefix=f"jax-{w.name}-{mode}-", dir=cache_root), "w.npz")
    write_inputs(w, inputs)
    csts = None
    if not no_cost:
        csts = cost.measure(
            w.name,
            mode,
            "jax",
            scale,
            s["startup"],
            s["steady"],
            cache_root,
            timeout,
            python=python,
            extra_env={"EMBER_BENCH_JAX_CACHE": os.path.join(os.path.dirname(inputs), "cache")},
            worker=WORKER,
            extra_args=("--inputs", inputs),
        )
    results = os.path.join(os.path.dirname(inputs), "results.npz")
    env = cost.worker_env(os.path.join(os.path.dirname(inputs), "timing"))
    out = cost.spawn(
        [
            "timing",
            "--inputs",
            inputs,
            "--mode",
            mode,
            "--warmup",
            str(s["warmup"]),
            "--repeats",
            str(s["repeats"]),
            "--budget",
            str(s["budget_s"]),
            "--results",
            results,
        ],
        env,
        timeout,
        python,
        WORKER,
    )
    tim = None
    if out.get("status") == "ok":
        tim = dict(out["timing"])
        tim["ratios"] = {}
        for ref in ("eager", "inductor"):
            if tim["median_s"] and medians.get(ref):
                tim["ratios"][ref] = tim["median_s"] / medians[ref]
        with np.load(results) as z:
            got = [torch.from_numpy(np.asarray(a)).double() for a in z["steps"]]
        ref = _eager_reference(w, mode, len(got))
        d = max(timing._diff(a, e) for a, e in zip(got, ref)) if got else None
        tim["numerics_max_diff"] = d
        tim["numerics_ok"] = None if d is None else d <= timing.RTOL
    r = make_result(w.name, mode, "jax", tim, csts, eager_checks, w.bytes_moved, 1.0)
    if tim is None:
        r["status"] = "timing process " + out.get("status", "failed")
    else:
        r["notes"].append(
            f"own process, jax {out['jax_version']} on {', '.join(out['devices'])}; "
            "ratios not paired: median / the main process's medians"
        )
        for b in ("ember", "ember_compile"):  # issue 15's target: ember within 1.2x of JAX
            if tim["median_s"] and medians.get(b):
                r["notes"].append(f"{b} median / this median: {medians[b] / tim['median_s']:.2f}")
    return r
