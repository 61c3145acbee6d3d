"""The cost phase: each backend alone in fresh processes (compile time, warm start, memory).

For one (model, mode, backend), ``measure`` makes a fresh, empty cache directory and runs
``worker.py cost`` twice in new processes with ``EMBER_CACHE_DIR`` and
``TORCHINDUCTOR_CACHE_DIR`` pointing into it:

1. **cold**: empty caches. Its start-up steps compile; ``cold_compile_s`` is their excess
   over steady state: ``sum(first K steps) - K * median(the N steady steps)`` (K =
   ``startup``, N = ``steady``), clamped at 0. This is the compile (and first-run) cost a
   user waits for, whatever step it falls in (Inductor and ember both compile again when
   the optimizer's state appears in step 2).
2. **warm**: a second process on the same, now filled, caches; ``warm_start_s`` is the
   same excess. In-memory state starts empty, so it measures what the disk caches save.

Memory is measured in the warm process (the cold one's peak includes compilation):
``peak_rss_mb`` is its peak resident set size (VmHWM: the interpreter, torch, the model),
``step_rss_growth_mb`` the RSS growth over its last steady step (how eager's peak is
compared, issue 17), ``ember_memory`` ember's statistics for that step. The cache
directory is returned so the timing phase can run with the warm caches.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")


def excess(step_s: list, startup: int) -> float | None:
    """sum(step_s[:startup]) - startup * median(step_s[startup:]), >= 0 (seconds)."""
    if len(step_s) <= startup:
        return None
    steady = statistics.median(step_s[startup:])
    return max(0.0, sum(step_s[:startup]) - startup * steady)


def worker_env(cache_dir: str, extra: dict | None = None) -> dict:
    """The environment of a worker: ours, with the caches redirected into `cache_dir` and
    the directory holding the ``ember`` package first on PYTHONPATH."""
    env = dict(os.environ)
    env["EMBER_CACHE_DIR"] = os.path.join(cache_dir, "ember")
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache_dir, "inductor")
    pkg_parent = os.path.dirname(os.path.dirname(os.path.dirname(WORKER)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def spawn(
    args: list, env: dict, timeout: float, python: str = sys.executable, worker: str = WORKER
) -> dict:
    """Runs ``python worker *args --json F`` (default worker: ``worker.py``) and returns
    its JSON; on a crash, a timeout or a missing result, {"status": "failed: ..."} with
    the last stderr line."""
    with tempfile.TemporaryDirectory(prefix="ember-bench-") as d:
        out = os.path.join(d, "result.json")
        try:
            p = subprocess.run(
                [python, worker, *args, "--json", out],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"status": f"failed: timed out after {timeout:.0f} s"}
        if os.path.exists(out):
            with open(out) as f:
                res = json.load(f)
            if p.returncode != 0 and res.get("status") == "ok":
                res["status"] = f"failed: exit code {p.returncode}"
            return res
        tail = [ln for ln in (p.stderr or "").splitlines() if ln.strip()][-1:] or [""]
        return {"status": f"failed: exit code {p.returncode} (no result): {tail[0][:300]}"}


def measure(
    model: str,
    mode: str,
    backend: str,
    scale: str,
    startup: int,
    steady: int,
    cache_root: str,
    timeout: float,
    python: str = sys.executable,
    extra_env: dict | None = None,
    worker: str = WORKER,
    extra_args: tuple = (),
) -> dict:
    """Cold then warm process for one backend (see the module docstring); `worker` is
    the script run (``worker.py``, or ``jax_worker.py`` for the JAX column) with
    `extra_args` after the common ones.

    Returns {"status", "cold", "warm" (the workers' JSON), "cold_compile_s",
    "warm_start_s", "peak_rss_mb", "step_rss_growth_mb", "ember_memory", "cache_dir"}
    (memory from the warm process)."""
    cache_dir = tempfile.mkdtemp(prefix=f"{model}-{mode}-{backend}-", dir=cache_root)
    env = worker_env(cache_dir, extra_env)
    args = [
        "cost",
        "--model",
        model,
        "--mode",
        mode,
        "--backend",
        backend,
        "--scale",
        scale,
        "--startup",
        str(startup),
        "--steady",
        str(steady),
        *extra_args,
    ]
    cold = spawn(args, env, timeout, python, worker)
    res = {
        "status": cold["status"],
        "cold": cold,
        "warm": None,
        "cold_compile_s": None,
        "warm_start_s": None,
        "peak_rss_mb": None,
        "step_rss_growth_mb": None,
        "ember_memory": None,
        "cache_dir": cache_dir,
    }
    if cold["status"] != "ok":
        return res
    warm = spawn(args, env, timeout, python, worker)
    res["warm"] = warm
    res["cold_compile_s"] = excess(cold["step_s"], startup)
    if warm["status"] == "ok":
        res["warm_start_s"] = excess(warm["step_s"], startup)
        for k in ("peak_rss_mb", "step_rss_growth_mb", "ember_memory"):
            res[k] = warm.get(k)
    else:
        res["status"] = "warm process " + warm["status"]
    return res
