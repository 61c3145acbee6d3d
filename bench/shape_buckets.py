"""Shape bucketing (``ember.config.shape_buckets``; issue 16, item 5): a loop whose
sequence length changes every step, with and without buckets.

The model is a pre-norm transformer block (causal SDPA, LayerNorm, GELU MLP, a position
embedding indexed by ``arange(t)``: the block of ``tests/python/test_shape_buckets.py``)
at width ``--width``, run under ``no_grad`` on ``--steps`` batches of 2 sequences whose
lengths are drawn uniformly from ``[--min, --max]`` (seeded). Each mode runs in a fresh
process with an empty kernel cache (``EMBER_CACHE_DIR``), so compile time is counted as
a user's first run pays it. Printed per mode: wall time of the whole loop, graph-cache
misses, how many ran padded and reused a bucket's program, system-compiler runs, compile
seconds, and the largest difference from eager over all steps.

Usage: ``python bench/shape_buckets.py [--steps 40] [--buckets 16,32,64]``.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile


def run_mode(args, buckets):
    import random
    import time

    import torch

    import ember

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
    from test_shape_buckets import Block

    ember.config.shape_buckets = buckets
    dev = ember.device()
    torch.manual_seed(0)
    model = Block(c=args.width, positions=args.max).eval()
    dmodel = Block(c=args.width, positions=args.max).eval()
    dmodel.load_state_dict(model.state_dict())
    dmodel.to(dev)
    rng = random.Random(1)
    lengths = [rng.randint(args.min, args.max) for _ in range(args.steps)]
    xs = [torch.randn(2, t, args.width) for t in lengths]
    ember.metrics.clear()
    worst = 0.0
    t0 = time.perf_counter()
    for x in xs:
        with torch.no_grad():
            got = dmodel(x.to(dev)).cpu()
        with torch.no_grad():
            worst = max(worst, (got - model(x)).abs().max().item())
    seconds = time.perf_counter() - t0
    c = ember.metrics.counters()
    return {
        "buckets": buckets,
        "distinct_lengths": len(set(lengths)),
        "seconds": seconds,
        "graph_misses": c["graphs_compiled"] + c["disk_cache_hits"],
        "bucketed": c["bucketed_graphs"],
        "reuses": c["bucket_reuses"],
        "refusals": c["bucket_refusals"],
        "kernel_compiles": c["kernel_compiles"],
        "compile_seconds": c["compile_seconds"],
        "max_abs_diff": worst,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--min", type=int, default=5)
    p.add_argument("--max", type=int, default=60)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--buckets", default="16,32,64")
    p.add_argument("--mode", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.mode is not None:
        buckets = None if args.mode == "off" else [int(b) for b in args.mode.split(",")]
        print(json.dumps(run_mode(args, buckets)))
        return
    rows = []
    for mode in ("off", args.buckets):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, EMBER_CACHE_DIR=cache)
            cmd = [sys.executable, __file__, "--mode", mode] + [
                f"--{k}={getattr(args, k)}" for k in ("steps", "min", "max", "width")
            ]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"{args.steps} steps, lengths {args.min}..{args.max} "
        f"({rows[0]['distinct_lengths']} distinct), width {args.width}, load "
        f"{os.getloadavg()[0]:.2f}"
    )
    print(
        "| buckets | wall s | graph misses | padded | reused | refused | kernel compiles "
        "| compile s | max abs diff vs eager |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['buckets'] or 'off'} | {r['seconds']:.2f} | {r['graph_misses']} | "
            f"{r['bucketed']} | {r['reuses']} | {r['refusals']} | {r['kernel_compiles']} | "
            f"{r['compile_seconds']:.2f} | {r['max_abs_diff']:.2e} |"
        )


if __name__ == "__main__":
    main()
