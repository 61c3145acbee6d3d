"""The benchmark's fresh-process worker (run as a script, never imported by ember.bench).

    python worker.py cost   --model M --mode train|inference --backend B --scale S
                            --startup K --steady N --json OUT
    python worker.py timing --model M --mode ... --backends eager,torch_xla --scale S
                            --warmup K --repeats N --json OUT

``cost`` measures one backend alone in this process: seconds to import torch (and the
backend's package), to build the workload and runner, each of K start-up steps
(where compilation happens) and N steady steps, the result of every step (training: the
loss; inference: the output's float64 L2 norm) for the numerics check, the peak
resident set size (VmHWM, MiB) and the memory of the last steady step: its RSS growth
(``step_rss_growth_mb``: the peak RSS during the step, VmHWM reset just before it through
/proc/self/clear_refs, minus the RSS before it) and, for ember backends, ember's own
statistics (``ember_memory``: device memory allocated before the step, its peak above
that during the step, and the planned peak of the step's program). The caller chooses
the caches through the environment (EMBER_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR).

``timing`` runs ``timing.interleaved`` here; it exists for backends that cannot share
a process with the others (PyTorch/XLA runs in its own virtual environment with its own
torch). The first backend listed is the numerics reference; ``--timed`` names the
backends timed (the others only provide the reference values).

Only torch (plus the backend's package) is imported: models.py, backends.py and
timing.py are loaded from this directory by path, so the worker runs in environments
without ember (the eager/Inductor processes must not pay for importing ember either).
"""

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402

# Run as a script, this directory is sys.path[0]; its module names (models, timing, ...)
# must not shadow top-level packages for torch or transformers.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)


def _load(name):
    mod_name = f"_ember_bench_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(
        mod_name, os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)
    return mod


def _peak_rss_mb() -> float:
    """Peak resident set size of this process image in MiB: VmHWM of /proc/self/status.

    Not ru_maxrss: Linux carries ru_maxrss across execve, so a child started by a large
    parent (vfork + exec) would report the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _status_kb(field: str):
    """A /proc/self/status field in kB (VmRSS, VmHWM), or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Resets VmHWM to the current RSS (Linux: "5" > /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class _StepMemory:
    """The memory of one step: RSS growth (MiB) and, with ember loaded, ember's figures."""

    def __init__(self, ember_backend: bool):
        self.ember = ember_backend
        self.result = {"step_rss_growth_mb": None, "ember_memory": None}

    def __enter__(self):
        if self.ember:
            import ember

            ember.sync()
            self.base = ember.memory_allocated()
            ember.reset_peak_memory_stats()
        self.rss0 = _status_kb("VmRSS") if _reset_peak_rss() else None
        return self

    def __exit__(self, *exc):
        if self.rss0 is not None:
            hwm = _status_kb("VmHWM")
            if hwm is not None:
                self.result["step_rss_growth_mb"] = (hwm - self.rss0) / 1024.0
        if self.ember and exc[0] is None:
            import ember

            g = ember.metrics.last_graph()
            self.result["ember_memory"] = {
                "allocated_before_mb": self.base / 2**20,
                "step_peak_mb": (ember.max_memory_allocated() - self.base) / 2**20,
                "planned_peak_mb": (g["planned_peak_bytes"] / 2**20)
                if g.get("planned_peak_bytes") is not None
                else None,
            }
        return False


def _check_value(runner, mode, res) -> float:
    t = runner.to_cpu(res)
    return float(t.item()) if mode == "train" else float(t.norm().item())


def _ember_counters():
    import ember

    c = ember.metrics.counters()
    out = {
        k: c.get(k)
        for k in (
            "graphs_compiled",
            "memory_cache_hits",
            "disk_cache_hits",
            "compile_seconds",
            "execute_seconds",
        )
    }
    out["fallbacks"] = sum(c.get("fallbacks", {}).values())
    out["backend"] = str(
        getattr(ember.config, "backend", None) or os.environ.get("EMBER_BACKEND") or "default"
    )
    if hasattr(ember.metrics, "last_graph"):  # the lowering bridge: how the last graph ran
        g = ember.metrics.last_graph()
        out["last_graph"] = {
            k: g.get(k)
            for k in (
                "backend",
                "lazy_ops",
                "lowered_ops",
                "kernels",
                "interpreted",
                "extern_steps",
            )
        }
        out["last_graph"]["declined"] = sum((g.get("declined") or {}).values())
    return out


def cost(args) -> dict:
    import torch

    t_torch = time.perf_counter()
    models, backends = _load("models"), _load("backends")
    if args.backend in ("ember", "ember_compile"):
        import ember  # noqa: F401
    elif args.backend == "torch_xla":
        import torch_xla  # noqa: F401
    t_import = time.perf_counter()
    torch.manual_seed(0)
    w = models.build(args.model, args.scale)
    runner = backends.make_runner(args.backend, w, args.mode)
    t_setup = time.perf_counter()
    rss_setup = _peak_rss_mb()
    steps, checks = [], []
    n = args.startup + args.steady
    memory = _StepMemory(args.backend in ("ember", "ember_compile"))
    for i in range(n):
        if i == n - 1:  # the last steady step: its memory (outside the timed region)
            memory.__enter__()
        t0 = time.perf_counter()
        res = runner.step()
        runner.finish()
        steps.append(time.perf_counter() - t0)
        if i == n - 1:
            memory.__exit__(None, None, None)
        checks.append(_check_value(runner, args.mode, res))
    ru_self = resource.getrusage(resource.RUSAGE_SELF)
    ru_kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {
        # CPU seconds of this process and its reaped children (compiler subprocesses):
        # on a loaded machine, the figure that predicts wall time on an idle one.
        "cpu_s": ru_self.ru_utime + ru_self.ru_stime + ru_kids.ru_utime + ru_kids.ru_stime,
        "wall_s": time.perf_counter() - T_START,
        "torch_import_s": t_torch - T_START,
        "import_s": t_import - T_START,
        "setup_s": t_setup - t_import,
        "step_s": steps,
        "checks": checks,
        "rss_after_setup_mb": rss_setup,
        "peak_rss_mb": _peak_rss_mb(),
        "torch_version": torch.__version__,
        **memory.result,
    }
    if args.backend == "ember":
        out["ember"] = _ember_counters()
    return out


def timing(args) -> dict:
    import torch

    models, backends, timing_mod = _load("models"), _load("backends"), _load("timing")
    torch.manual_seed(0)
    w = models.build(args.model, args.scale)
    runners = {b: backends.make_runner(b, w, args.mode) for b in args.backends.split(",")}
    res = timing_mod.interleaved(
        runners,
        args.warmup,
        args.repeats,
        reference=args.backends.split(",")[0],
        budget_s=args.budget,
        timed=args.timed.split(",") if args.timed else None,
    )
    return {"timing": res, "torch_version": torch.__version__, "peak_rss_mb": _peak_rss_mb()}


def main(argv=None):
    p = argparse.ArgumentParser(description="ember.bench fresh-process worker")
    p.add_argument("what", choices=("cost", "timing"))
    p.add_argument("--model", required=True)
    p.add_argument("--mode", required=True, choices=("train", "inference"))
    p.add_argument("--scale", default="full")
    p.add_argument("--backend")
    p.add_argument("--backends")
    p.add_argument("--startup", type=int, default=3)
    p.add_argument("--steady", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10, help="the most timing rounds")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds after which timing rounds stop (once 3 are done)",
    )
    p.add_argument("--timed", help="backends to time (default: all; others: numerics only)")
    p.add_argument("--json", required=True)
    args = p.parse_args(argv)
    try:
        out = cost(args) if args.what == "cost" else timing(args)
        out["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - reported to the parent as this run's status
        import traceback

        out = {
            "status": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
            if str(e)
            else f"failed: {type(e).__name__}",
            "traceback": traceback.format_exc()[-4000:],
        }
    tmp = args.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
