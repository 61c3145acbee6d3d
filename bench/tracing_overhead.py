"""Tracing overhead of the ember device.

Records a 1000-op elementwise graph (warm caches: the graph was compiled and the
Meta-shape cache filled by earlier repetitions) and reports the time per op, in µs and
as a ratio to running the same ops on device="meta" (PyTorch's own shape-only
execution, the floor for any tracer that runs Meta kernels). Sync time is reported
separately.

    python bench/tracing_overhead.py [--ops 1000] [--reps 5] [--numel 256]
"""

import argparse
import time

import torch

import ember


def chain(x, n_ops):
    # A mix of unary/binary elementwise ops with Python scalars (graph inputs).
    for i in range(n_ops // 4):
        x = x * 1.0001
        x = x + 0.5
        x = torch.tanh(x)
        x = x - 0.25
    return x


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--numel", type=int, default=256)
    args = ap.parse_args()
    n = args.ops

    meta_x = torch.randn(args.numel, device="meta")
    dev_x = torch.randn(args.numel).to("ember")
    ember.sync()

    # Warm up both (Meta-shape cache, graph cache).
    for _ in range(2):
        chain(meta_x, n)
        out = chain(dev_x, n)  # keep the result live, or the sync has nothing to run
        ember.sync()
        del out

    meta_times, trace_times, sync_times = [], [], []
    ember.metrics.clear()
    for _ in range(args.reps):
        t, _ = timed(lambda: chain(meta_x, n))
        meta_times.append(t)
        t, out = timed(lambda: chain(dev_x, n))
        trace_times.append(t)
        t, _ = timed(ember.sync)
        sync_times.append(t)
        del out
    c = ember.metrics.counters()
    meta = min(meta_times)  # min: the machine is shared, noise only adds time
    trace = min(trace_times)
    sync = min(sync_times)
    print(f"ops per graph           {n}")
    print(f"meta device             {meta / n * 1e6:8.2f} us/op")
    print(f"ember tracing           {trace / n * 1e6:8.2f} us/op")
    print(f"ratio ember/meta        {trace / meta:8.2f}")
    print(f"sync (run {n} externs)  {sync * 1e3:8.2f} ms  ({sync / n * 1e6:.2f} us/op)")
    print(
        f"graphs compiled in timed reps: {c['graphs_compiled']}  "
        f"memory cache hits: {c['memory_cache_hits']}"
    )


if __name__ == "__main__":
    main()
