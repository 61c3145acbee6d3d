"""``python -m ember.bench``: the benchmark against the anchors (eager, Inductor, XLA).

    python -m ember.bench [--quick] [--models mlp,gpt,...] [--json FILE]
                          [--markdown FILE] [--plot FILE.png] [--torch-xla-venv DIR]
                          [--jax-venv DIR] [--profile MODEL[:MODE]]

Order of a run: machine info and ceilings (STREAM triad, ATen GEMM); then per model and
mode the cost phase (each backend in fresh cold and warm processes, ``cost.py``) followed
by the timing phase (all backends interleaved in this process with the warm caches,
``timing.py``); the optional PyTorch/XLA column (``xla.py``) and JAX column (MLP only,
``jax_column.py``); the ceilings again. The
markdown table goes to stdout, progress to stderr. Method and setup: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

import torch

from . import backends as B
from . import ceilings, cost, jax_column, machine, models, report, timing, xla

# Most telling first: a run cut short (rows are saved as they come) still has these.
DEFAULT_MODELS = ("gpt", "mlp", "elementwise", "softmax", "resnet18", "gpt2", "bert") + (
    models.STEP_KERNELS
)
# Sized from measured CPU seconds (docs/benchmarks.md, "Sizing"): Inductor's cold compile
# of the char-GPT training step alone is ~60-90 CPU seconds, so --quick leaves it out.
QUICK_MODELS = ("mlp", "elementwise", "softmax")
DEFAULT_BACKENDS = ("eager", "inductor", "ember", "ember_compile")
# Per scale: warm-up (= numerics) steps, the most interleaved rounds, the timing budget
# per group (s; rounds stop once it is spent and at least 3 are done, so millisecond steps
# get hundreds of rounds and second-long steps a few), cost-phase start-up and steady steps.
SETTINGS = {
    "full": dict(warmup=3, repeats=500, budget_s=20.0, startup=3, steady=3),
    "quick": dict(warmup=3, repeats=300, budget_s=8.0, startup=3, steady=2),
    "tiny": dict(warmup=2, repeats=3, budget_s=5.0, startup=3, steady=2),
}


def _csv(s: str) -> list:
    return [x for x in s.replace(" ", ",").split(",") if x]


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m ember.bench", description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smaller sizes and fewer repeats; models {','.join(QUICK_MODELS)} "
        "unless --models is given (within 4 minutes on 2 cores)",
    )
    p.add_argument(
        "--models",
        type=_csv,
        default=None,
        help=f"comma-separated, from {','.join(models.MODEL_NAMES)} "
        f"(default: {','.join(DEFAULT_MODELS)})",
    )
    p.add_argument("--modes", type=_csv, default=["train", "inference"])
    p.add_argument(
        "--backends",
        type=_csv,
        default=None,
        help=f"comma-separated, from {','.join(DEFAULT_BACKENDS)} (default: all; with "
        "--profile: eager,ember)",
    )
    p.add_argument(
        "--scale",
        choices=models.SCALES,
        default=None,
        help="model sizes (default: full, or quick with --quick; tiny is for tests)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="the most interleaved timing rounds (default: as many as the "
        "timing budget allows, up to 500)",
    )
    p.add_argument(
        "--no-cost",
        action="store_true",
        help="skip the fresh-process cost phase (no compile/RSS figures)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds before a fresh cost process is killed",
    )
    p.add_argument("--json", dest="json_path", help="write the JSON document here")
    p.add_argument("--markdown", help="write the markdown table here")
    p.add_argument("--plot", help="write the PNG bar chart of ratios to eager here")
    p.add_argument(
        "--profile",
        metavar="MODEL[:MODE]",
        help="instead of the suite: profile one workload (mode train or inference, default "
        "train) on eager and ember (or --backends) with torch.profiler and print where each "
        "step's time goes (ember.bench.profile)",
    )
    p.add_argument(
        "--trace-dir", help="with --profile: also write each backend's Chrome trace here"
    )
    p.add_argument(
        "--torch-xla-venv",
        help="a virtual environment with torch_xla (its own "
        "torch): adds the PyTorch/XLA column (PJRT_DEVICE=CPU)",
    )
    p.add_argument(
        "--jax-venv",
        help="a virtual environment with jax[cpu]: adds the JAX/XLA:CPU column for "
        f"{','.join(jax_column.MODELS)} (the model rewritten in JAX, same weights and inputs)",
    )
    a = p.parse_args(argv)
    a.scale = a.scale or ("quick" if a.quick else "full")
    a.models = a.models or list(QUICK_MODELS if a.quick else DEFAULT_MODELS)
    a.profile_backends = a.backends or ["eager", "ember"]
    a.backends = a.backends or list(DEFAULT_BACKENDS)
    for m in a.models:
        if m not in models.MODEL_NAMES:
            p.error(f"unknown model {m!r}; expected some of {','.join(models.MODEL_NAMES)}")
    for m in a.modes:
        if m not in (models.TRAIN, models.INFER):
            p.error(f"unknown mode {m!r}; expected train and/or inference")
    for b in a.backends:
        if b not in DEFAULT_BACKENDS:
            p.error(f"unknown backend {b!r}; expected some of {','.join(DEFAULT_BACKENDS)}")
    if "eager" not in a.backends and not a.profile:
        p.error("the eager backend is the reference for ratios and numerics; keep it")
    if a.torch_xla_venv and not os.path.isfile(os.path.join(a.torch_xla_venv, "bin", "python")):
        p.error(f"--torch-xla-venv {a.torch_xla_venv}: no bin/python there")
    if a.jax_venv and not os.path.isfile(os.path.join(a.jax_venv, "bin", "python")):
        p.error(f"--jax-venv {a.jax_venv}: no bin/python there")
    a.settings = dict(SETTINGS[a.scale])
    if a.repeats:
        a.settings["repeats"] = a.repeats
    return a


class _Log:
    def __init__(self):
        self.t0 = time.perf_counter()

    def __call__(self, msg):
        print(f"[{time.perf_counter() - self.t0:7.1f} s] {msg}", file=sys.stderr, flush=True)


def _checks_ok(checks, ref) -> tuple:
    """(ok, max diff) of a cost process's per-step values against eager's cold process."""
    if not checks or not ref or len(checks) != len(ref):
        return None, None
    d = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(checks, ref))
    d = float("inf") if d != d else d
    return d <= timing.RTOL, d


def _result(model, mode, backend, tim, cst, eager_checks, bytes_moved, triad):
    r = {
        "model": model,
        "mode": mode,
        "backend": backend,
        "median_s": None,
        "ratio_to_eager": None,
        "ratio_to_inductor": None,
        "cold_compile_s": None,
        "warm_start_s": None,
        "peak_rss_mb": None,
        "step_rss_growth_mb": None,
        "ember_peak_mb": None,
        "ember_planned_peak_mb": None,
        "numerics_ok": None,
        "min_s": None,
        "max_s": None,
        "repeats": 0,
        "numerics_max_diff": None,
        "status": "ok",
        "gb_per_s": None,
        "triad_fraction": None,
        "notes": [],
    }
    oks, diffs = [], []
    if cst is not None:
        r["cold_compile_s"], r["warm_start_s"] = cst["cold_compile_s"], cst["warm_start_s"]
        r["peak_rss_mb"] = cst["peak_rss_mb"]
        r["step_rss_growth_mb"] = cst.get("step_rss_growth_mb")
        em = cst.get("ember_memory") or {}
        r["ember_peak_mb"] = em.get("step_peak_mb")
        r["ember_planned_peak_mb"] = em.get("planned_peak_mb")
        if cst["status"] != "ok":
            r["status"] = "cost phase " + cst["status"]
        r["processes"] = {}
        for proc in ("cold", "warm"):
            run = cst.get(proc) or {}
            if run.get("status") == "ok":
                r["processes"][proc] = {
                    k: run.get(k)
                    for k in (
                        "wall_s",
                        "cpu_s",
                        "import_s",
                        "setup_s",
                        "step_s",
                        "peak_rss_mb",
                        "step_rss_growth_mb",
                        "ember_memory",
                    )
                }
                ok, d = _checks_ok(run["checks"], eager_checks)
                if ok is not None:
                    oks.append(ok)
                    diffs.append(d)
        if (cst.get("cold") or {}).get("ember"):
            e = cst["cold"]["ember"]
            note = (
                f"ember {e.get('backend')}: {e['graphs_compiled']} graphs compiled, "
                f"{e['fallbacks']} fallbacks"
            )
            g = e.get("last_graph")
            if g:
                note += (
                    f"; last graph: {g.get('kernels')} kernels, {g.get('extern_steps')} "
                    f"extern steps, {g.get('interpreted')} interpreted, "
                    f"{g.get('declined')} declined lowerings"
                )
            r["notes"].append(note)
    if tim is not None:
        if tim["status"] != "ok":
            r["status"] = "timing phase " + tim["status"] if r["status"] == "ok" else r["status"]
        r["median_s"], r["min_s"], r["max_s"] = tim["median_s"], tim["min_s"], tim["max_s"]
        r["repeats"] = len(tim["times"])
        r["ratio_to_eager"] = tim["ratios"].get("eager")
        r["ratio_to_inductor"] = tim["ratios"].get("inductor")
        if tim.get("numerics_ok") is not None:
            oks.append(tim["numerics_ok"])
            diffs.append(tim["numerics_max_diff"])
    if oks:
        r["numerics_ok"] = all(oks)
        r["numerics_max_diff"] = max(diffs)
    if bytes_moved and r["median_s"]:
        r["gb_per_s"] = bytes_moved / r["median_s"] / 1e9
        r["triad_fraction"] = r["gb_per_s"] / triad
    return r


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def _cpu_s() -> float:
    """CPU seconds of this process and its reaped children (the fresh processes)."""
    import resource

    t = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        ru = resource.getrusage(who)
        t += ru.ru_utime + ru.ru_stime
    return t


def run(a, save=lambda doc: None) -> dict:
    """The whole run (module docstring); the fresh processes' caches (hundreds of MiB of
    Inductor and Ember kernels) live in a temporary directory removed at the end."""
    with tempfile.TemporaryDirectory(prefix="ember-bench-caches-") as cache_root:
        return _run(a, save, cache_root)


def _run(a, save, cache_root) -> dict:
    log = _Log()
    # This process's own caches (timing phase) never touch the user's.
    os.environ.setdefault("EMBER_CACHE_DIR", os.path.join(cache_root, "timing-ember"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(cache_root, "timing-inductor"))
    info = machine.info()
    log(
        f"machine: {info['cpu_model']}, {info['cores']} cores, torch {info['torch_version']}, "
        f"commit {info['commit']}, ember backend {info['ember_backend']}, load "
        f"{info['load_average_start'][0]:.1f}"
    )
    quick_ceil = a.scale != "full"
    ceil = {"start": ceilings.measure(quick_ceil)}
    log(
        f"ceilings: triad {ceil['start']['triad_gb_per_s']:.1f} GB/s, GEMM "
        f"{ceil['start']['gemm_gflop_per_s']:.1f} GFLOP/s"
    )
    s = a.settings
    absent = {b: B.unavailable_reason(b) for b in a.backends}
    for b, why in absent.items():
        if why:
            log(f"backend {b}: {why}")
    results = []
    doc = {
        "machine": info,
        "ceilings": ceil,
        "settings": _settings(a, log),
        "results": results,
        "complete": False,
    }
    for name in a.models:
        try:
            w = models.build(name, a.scale)
        except Exception as e:  # noqa: BLE001 - e.g. transformers or train_gpt.py missing
            log(f"model {name}: cannot build: {type(e).__name__}: {e}")
            for mode in a.modes:
                for b in a.backends:
                    r = _result(name, mode, b, None, None, None, None, 1.0)
                    r["status"] = f"model not built: {type(e).__name__}: {e}"
                    results.append(r)
            continue
        log(f"model {name}: {w.description}")
        for mode in a.modes:
            if mode not in w.modes:
                continue
            load = os.getloadavg()[0]
            runnable = [b for b in a.backends if not absent[b]]
            csts = {}
            if not a.no_cost:
                for b in runnable:
                    log(f"  {name} {mode}: cost phase, {b} (cold + warm processes)")
                    csts[b] = cost.measure(
                        name, mode, b, a.scale, s["startup"], s["steady"], cache_root, a.timeout
                    )
                    c = csts[b]
                    cold, warm = c.get("cold") or {}, c.get("warm") or {}
                    log(
                        f"    {c['status']}; cold compile {_fmt(c['cold_compile_s'])} s, warm "
                        f"start {_fmt(c['warm_start_s'])} s, peak RSS {_fmt(c['peak_rss_mb'])}"
                        f" MiB; processes {_fmt(cold.get('wall_s'))} + "
                        f"{_fmt(warm.get('wall_s'))} s wall, {_fmt(cold.get('cpu_s'))} + "
                        f"{_fmt(warm.get('cpu_s'))} s CPU"
                    )
            # A backend that crashed its cost process stays out of this process.
            crashed = {
                b
                for b, c in csts.items()
                if (c.get("cold") or {}).get("status", "").startswith("failed: exit code")
                or "timed out" in c["status"]
            }
            runners = {}
            for b in runnable:
                if b in crashed:
                    continue
                if b in csts:
                    os.environ[
                        "TORCHINDUCTOR_CACHE_DIR" if b == "inductor" else "EMBER_CACHE_DIR"
                    ] = os.path.join(
                        csts[b]["cache_dir"], "inductor" if b == "inductor" else "ember"
                    )
                try:
                    runners[b] = B.make_runner(b, w, mode)
                except Exception as e:  # noqa: BLE001
                    log(f"    {b}: cannot set up: {e}")
            log(f"  {name} {mode}: timing phase, {', '.join(runners)} interleaved")
            tim = timing.interleaved(
                runners,
                s["warmup"],
                s["repeats"],
                budget_s=s["budget_s"],
                on_error=lambda b, e: log(f"    {b} failed: {type(e).__name__}: {e}"),
            )
            del runners
            gc.collect()
            eager_checks = ((csts.get("eager") or {}).get("cold") or {}).get("checks")
            for b in a.backends:
                if absent[b]:
                    r = _result(name, mode, b, None, None, None, None, 1.0)
                    r["status"] = absent[b]
                elif b in crashed and b not in tim:
                    r = _result(name, mode, b, None, csts.get(b), eager_checks, None, 1.0)
                else:
                    r = _result(
                        name,
                        mode,
                        b,
                        tim.get(b),
                        csts.get(b),
                        eager_checks,
                        w.bytes_moved,
                        ceil["start"]["triad_gb_per_s"],
                    )
                r["load_1m"] = load  # at the start of this (model, mode): a shared machine
                results.append(r)
                if r["median_s"]:
                    log(
                        f"    {b}: median {r['median_s'] * 1e3:.2f} ms, x{r['ratio_to_eager']:.2f}"
                        f" of eager, numerics {r['numerics_ok']}"
                    )
            if a.torch_xla_venv:
                log(f"  {name} {mode}: PyTorch/XLA ({a.torch_xla_venv})")
                r = xla.column(
                    a.torch_xla_venv,
                    name,
                    mode,
                    a.scale,
                    s,
                    cache_root,
                    a.timeout,
                    eager_checks,
                    w.bytes_moved,
                    ceil["start"]["triad_gb_per_s"],
                    a.no_cost,
                    _result,
                    {b: t["median_s"] for b, t in tim.items()},
                )
                r["load_1m"] = load
                results.append(r)
            if a.jax_venv and name in jax_column.MODELS:
                log(f"  {name} {mode}: JAX ({a.jax_venv})")
                r = jax_column.column(
                    a.jax_venv,
                    w,
                    mode,
                    a.scale,
                    s,
                    cache_root,
                    a.timeout,
                    eager_checks,
                    a.no_cost,
                    _result,
                    {b: t["median_s"] for b, t in tim.items()},
                )
                r["load_1m"] = load
                results.append(r)
                if r["median_s"]:
                    log(
                        f"    jax: median {r['median_s'] * 1e3:.2f} ms, x{_fmt(r['ratio_to_eager'])}"
                        f" of eager (unpaired), numerics {r['numerics_ok']}"
                    )
                else:
                    log(f"    jax: {r['status']}")
            doc["settings"] = _settings(a, log)
            save(doc)  # after every (model, mode): an interrupted run keeps what it measured
        del w
        gc.collect()
    ceil["end"] = ceilings.measure(quick_ceil)
    info["load_average_end"] = list(os.getloadavg())
    log(
        f"ceilings at end: triad {ceil['end']['triad_gb_per_s']:.1f} GB/s, GEMM "
        f"{ceil['end']['gemm_gflop_per_s']:.1f} GFLOP/s; total "
        f"{time.perf_counter() - log.t0:.0f} s"
    )
    doc["settings"] = _settings(a, log)
    doc["complete"] = True
    return doc


def _settings(a, log) -> dict:
    return dict(
        a.settings,
        scale=a.scale,
        models=a.models,
        modes=a.modes,
        backends=a.backends,
        cost_phase=not a.no_cost,
        torch_xla_venv=a.torch_xla_venv,
        jax_venv=a.jax_venv,
        numerics_rtol=timing.RTOL,
        command=" ".join(["python -m ember.bench"] + sys.argv[1:]),
        wall_s=time.perf_counter() - log.t0,
        cpu_s=_cpu_s(),
    )


def _saver(a):
    def save(doc):
        if a.json_path:  # first: a formatting problem below must not lose the measurements
            tmp = a.json_path + ".tmp"
            report.to_json(doc, tmp)
            os.replace(tmp, a.json_path)
        if a.markdown:
            with open(a.markdown, "w") as f:
                f.write(report.markdown(doc))

    return save


def main(argv=None) -> int:
    a = parse_args(argv)
    torch.manual_seed(0)
    if a.profile:
        from . import profile

        try:
            profile.profile(a.profile, a.scale, trace_dir=a.trace_dir, backends=a.profile_backends)
        except ValueError as e:
            print(f"python -m ember.bench: --profile: {e}", file=sys.stderr)
            return 2
        return 0
    save = _saver(a)
    doc = run(a, save)
    save(doc)
    md = report.markdown(doc)
    if a.plot:
        from . import plot

        plot.bar_chart(doc, a.plot)
    print(md)
    return 0
