"""What asynchronous execution buys a training loop: ember's training throughput with
``ember.config.async_execution`` on and off, against eager, interleaved in one process.

A round runs, for each of eager, ember (async) and ember (sync) in an order rotated by
the round, ``--steps`` consecutive training steps of the bench's model (forward,
cross-entropy, backward, ``AdamW.step()``, ``zero_grad``) and then waits for all of them
(``finish()``: ``ember.sync()``). With asynchronous execution the optimizer step's sync
only queues the program, so Python traces step N+1 while step N runs; without it every
sync runs its program before returning. The figure is wall time per step; ratios are
taken round by round (median). Both ember modes run the same compiled programs (the
same bits: tests/python/test_async_execution.py).

The overlap needs a free core: on a machine whose cores are all busy the two modes
converge. Quote the load (printed) with the figures.

    python bench/async_execution.py [--models mlp,gpt] [--rounds 15] [--steps 10]
"""

import argparse
import os
import statistics
import time


def measure(model_name, rounds, steps):
    import ember
    from ember.bench import backends, models

    w = models.build(model_name, "quick")
    runners = {
        "eager": backends.make_runner("eager", w, "train"),
        "ember": backends.make_runner("ember", w, "train"),
    }
    variants = [("eager", None), ("ember async", True), ("ember sync", False)]
    for _ in range(3):  # warm-up: both step graphs compiled, Meta-shape caches filled
        for r in runners.values():
            r.step()
            r.finish()
    times = {name: [] for name, _ in variants}
    old = ember.config.async_execution
    try:
        for i in range(rounds):
            k = i % len(variants)
            for name, async_on in variants[k:] + variants[:k]:
                r = runners["eager" if async_on is None else "ember"]
                if async_on is not None:
                    ember.config.async_execution = async_on
                t0 = time.perf_counter()
                for _ in range(steps):
                    res = r.step()
                r.finish()
                times[name].append((time.perf_counter() - t0) / steps)
                del res
    finally:
        ember.config.async_execution = old
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mlp,gpt", help="comma-separated bench models")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=10, help="consecutive steps per timing")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for m in args.models.split(","):
        t = measure(m, args.rounds, args.steps)
        med = {k: statistics.median(v) * 1e3 for k, v in t.items()}
        ratio = {
            k: statistics.median(a / b for a, b in zip(t[k], t["eager"])) for k in t if k != "eager"
        }
        speedup = statistics.median(s / a for a, s in zip(t["ember async"], t["ember sync"]))
        print(
            f"{m}: ms/step eager {med['eager']:.2f}, ember async {med['ember async']:.2f} "
            f"({ratio['ember async']:.2f}x eager), ember sync {med['ember sync']:.2f} "
            f"({ratio['ember sync']:.2f}x eager); async speedup {speedup:.2f}x "
            f"(paired medians over {args.rounds} rounds of {args.steps} steps)"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
