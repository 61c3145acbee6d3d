"""Where a ``torch.compile(backend="ember")`` step's time goes, against the lazy device
and eager, interleaved in one process.

For each model (the bench's ``quick`` workloads) and mode, a round runs one step of each
of eager, the lazy device (``ember``) and ``ember_compile`` in an order rotated by the
round; the figures are per-round ratios to eager (medians). For ``ember_compile`` the
step is then split (medians over the rounds, µs per step):

- ``programs``: how many compiled-graph calls a step makes (``EmberGraph`` calls);
- ``run``: the programs' execution (``ember.metrics`` ``execute_seconds``);
- ``graph_py``: the rest of ``EmberGraph.__call__`` (signature check, binding, output
  filling; the lazy trace and sync when a graph is not replayed);
- ``outside``: the step minus the above: Dynamo's guards, AOTAutograd's runtime
  wrappers (autograd.Function), autograd's engine for the backward, ``zero_grad``, the
  loss.

``ember_compile_copyback`` is the same backend with ``ember.dynamo.write_inputs =
False``: AOTAutograd copies mutated inputs back (the behaviour before the backend wrote
them itself), for an A/B in the same process. ``--inductor`` adds
``torch.compile(backend="inductor")`` (the per-call overhead to match; at ``--scale
tiny`` a step is mostly overhead).

    python bench/compile_overhead.py [--models mlp,gpt] [--modes train,inference]
        [--rounds 30] [--scale quick|tiny|full] [--inductor]
"""

import argparse
import os
import statistics
import time


def _instrument():
    """Wraps EmberGraph.__call__ and CapturedProgram-running to accumulate time."""
    import ember.dynamo as dyn

    acc = {"calls": 0, "graph_s": 0.0, "run_s": 0.0}
    orig_call = dyn.EmberGraph.__call__

    def timed_call(self, *args):
        t0 = time.perf_counter()
        try:
            return orig_call(self, *args)
        finally:
            acc["graph_s"] += time.perf_counter() - t0
            acc["calls"] += 1

    dyn.EmberGraph.__call__ = timed_call
    return acc


def _check_same(runners):
    """The compiled runners' parameters equal eager's after the warm-up (rtol 2e-3)."""
    ref = [p.detach() for p in runners["eager"].model.parameters()]
    for n, r in runners.items():
        for a, b in zip(r.model.parameters(), ref):
            d = (a.detach().cpu() - b).abs().max().item() / max(1.0, b.abs().max().item())
            assert d < 2e-3, f"{n}: parameters differ from eager's by {d:.2e}"


def measure(model_name, mode, rounds, profile=False, scale="quick", inductor=False):
    import ember
    from ember.bench import backends, models

    w = models.build(model_name, scale)
    names = ["eager", "ember", "ember_compile", "ember_compile_copyback"]
    if inductor:
        names.append("inductor")
    runners = {}
    for n in names:
        ember.dynamo.write_inputs = n != "ember_compile_copyback"
        runners[n] = backends.make_runner(n.replace("_copyback", ""), w, mode)
    ember.dynamo.write_inputs = True
    for _ in range(4):  # the same number of steps on each: the numerics are compared
        for r in runners.values():
            r.step()
            r.finish()
    _check_same(runners)
    acc = _instrument()
    times = {n: [] for n in names}
    split = {"programs": [], "graph_us": [], "run_us": [], "lazy_run_us": []}
    for i in range(rounds):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            r = runners[n]
            acc.update(calls=0, graph_s=0.0)
            x0 = ember.metrics.counters()["execute_seconds"]
            t0 = time.perf_counter()
            res = r.step()
            r.finish()
            times[n].append(time.perf_counter() - t0)
            acc["run_s"] = ember.metrics.counters()["execute_seconds"] - x0
            del res
            if n == "ember":
                split["lazy_run_us"].append(acc["run_s"] * 1e6)
            if n == "ember_compile":
                split["programs"].append(acc["calls"])
                split["graph_us"].append(acc["graph_s"] * 1e6)
                split["run_us"].append(acc["run_s"] * 1e6)
    if profile:
        import cProfile
        import pstats

        pr = cProfile.Profile()
        r = runners["ember_compile"]
        pr.enable()
        for _ in range(20):
            r.step()
            r.finish()
        pr.disable()
        print(f"--- cProfile, 20 ember_compile steps of {model_name} {mode}")
        pstats.Stats(pr).sort_stats("tottime").print_stats(25)
    return times, split


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,gpt")
    ap.add_argument("--modes", default="train,inference")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--profile", action="store_true", help="also print a cProfile table")
    ap.add_argument("--scale", default="quick", choices=("tiny", "quick", "full"))
    ap.add_argument("--inductor", action="store_true", help="also time Inductor")
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (start)")
    for m in a.models.split(","):
        for mode in a.modes.split(","):
            times, split = measure(m, mode, a.rounds, a.profile, a.scale, a.inductor)
            eager = times["eager"]
            ratio = {
                n: statistics.median(t / e for t, e in zip(ts, eager)) for n, ts in times.items()
            }
            step_us = [t * 1e6 for t in times["ember_compile"]]
            outside = [s - g for s, g in zip(step_us, split["graph_us"])]
            py = [g - r for g, r in zip(split["graph_us"], split["run_us"])]
            med = statistics.median
            print(
                f"{m} {mode}: eager {med(eager) * 1e6:.0f} us; x eager: ember "
                f"{ratio['ember']:.2f}, ember_compile {ratio['ember_compile']:.2f} "
                f"(AOTAutograd copy-back: {ratio['ember_compile_copyback']:.2f}); "
                f"ember_compile step {med(step_us):.0f} us = programs "
                f"{med(split['programs'])} (run {med(split['run_us']):.0f} us, graph_py "
                f"{med(py):.0f} us) + outside {med(outside):.0f} us; lazy device: step "
                f"{med(times['ember']) * 1e6:.0f} us, run {med(split['lazy_run_us']):.0f} us"
                + (
                    f"; inductor x eager {ratio['inductor']:.2f}, step "
                    f"{med(times['inductor']) * 1e6:.0f} us"
                    if "inductor" in times
                    else ""
                )
            )
    print(f"load average {os.getloadavg()[0]:.2f} (end)")


if __name__ == "__main__":
    main()
