"""The timing phase: backends' steps interleaved in one process, with a numerics check.

``interleaved(runners, warmup, repeats)`` takes runners of one workload in one mode (see
``backends.py``; the first, normally ``eager``, is the numerics reference) and:

1. warm-up: runs ``warmup`` steps on each backend in turn, reading back every step's
   result. These results are the numerics check: training compares each step's loss with
   the reference's (the loss after k steps, k = 1..warmup), inference compares the whole
   output. A backend whose step raises is dropped with the error as its status.
2. timing: ``repeats`` rounds; in round r every backend runs one step (``step()`` then
   ``finish()``, so execution is inside the timed region), in an order rotated by r
   (A B C, B C A, ...) so that machine drift and order effects spread over all backends.
3. statistics: median, min and max of each backend's step times; ratios to a reference
   are computed pair by pair — round r's time divided by the reference's time in the same
   round — and the median of those per-round ratios is reported.

Times are wall-clock seconds (``time.perf_counter``). Imports only torch and the
standard library (the PyTorch/XLA worker loads it by path).
"""

from __future__ import annotations

import statistics
import time

import torch

# A fast wrong answer never counts: result vs reference, |a - b| <= RTOL * max(1, |ref|).
# Float32 steps reassociate sums differently per backend; 2e-3 relative after a few
# AdamW steps is far above that noise and far below a real bug's error.
RTOL = 2e-3


def _diff(a: torch.Tensor, ref: torch.Tensor) -> float:
    """max |a - ref| / max(1, max |ref|); inf on a shape mismatch or a NaN."""
    if a.shape != ref.shape:
        return float("inf")
    d = (a - ref).abs().max().item() / max(1.0, ref.abs().max().item())
    return float("inf") if d != d else d


def interleaved(
    runners: dict,
    warmup: int,
    repeats: int,
    reference: str = "eager",
    on_error=None,
    budget_s: float | None = None,
    min_repeats: int = 3,
    timed=None,
) -> dict:
    """Runs the phase described in the module docstring.

    runners: {backend: Runner}, insertion order; `reference` must be one of them.
    Returns {backend: {"status", "times", "median_s", "min_s", "max_s", "ratios": {ref:
    median per-round ratio}, "numerics_max_diff", "numerics_ok", "results"}}; a failed
    backend has status "failed: ..." and no times. `on_error(backend, exc)` is called on
    a failure (for logging). With `budget_s`, rounds stop once the timing loop has run
    that long and at least `min_repeats` rounds are done (each backend then has the same
    number of timed steps). `timed` (default: all) limits the timing rounds to those
    backends; the others only take part in the warm-up (numerics reference)."""
    out = {b: {"status": "ok", "times": [], "results": []} for b in runners}
    live = dict(runners)

    for b, r in list(live.items()):
        try:
            for _ in range(warmup):
                res = r.step()
                r.finish()
                out[b]["results"].append(r.to_cpu(res))
        except Exception as e:  # noqa: BLE001 - one backend's failure must not stop the rest
            out[b]["status"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
            if on_error:
                on_error(b, e)
            del live[b]

    ref = out.get(reference, {}).get("results") if reference in live else None
    for b in runners:
        o = out[b]
        if ref is None or o["status"] != "ok":
            o["numerics_max_diff"], o["numerics_ok"] = None, None
            continue
        # Training: every step's loss; inference: every output (the same each step).
        d = max(_diff(a, e) for a, e in zip(o["results"], ref))
        o["numerics_max_diff"], o["numerics_ok"] = d, d <= RTOL

    names = [b for b in live if timed is None or b in timed]
    t_loop = time.perf_counter()
    for i in range(repeats):
        if budget_s is not None and i >= min_repeats and time.perf_counter() - t_loop > budget_s:
            break
        k = i % max(1, len(names))
        for b in names[k:] + names[:k]:
            if b not in live:
                continue
            r = live[b]
            try:
                t0 = time.perf_counter()
                res = r.step()  # held across finish(): a lazy result must stay live to run
                r.finish()
                out[b]["times"].append(time.perf_counter() - t0)
                del res
            except Exception as e:  # noqa: BLE001
                out[b]["status"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
                out[b]["times"] = []
                if on_error:
                    on_error(b, e)
                del live[b]

    for b, o in out.items():
        t = o["times"]
        o["median_s"] = statistics.median(t) if t else None
        o["min_s"] = min(t) if t else None
        o["max_s"] = max(t) if t else None
        o["ratios"] = {}
        for ref_b, ref_o in out.items():
            rt = ref_o["times"]
            if t and rt and len(rt) == len(t):
                o["ratios"][ref_b] = statistics.median(a / c for a, c in zip(t, rt))
        del o["results"]
    return out
