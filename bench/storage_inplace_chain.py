"""Tracing cost of a chain of in-place ops on one ember tensor (issue 24's hot-path check).

In-place ops are where the storage work adds code to tracing: each written ember
argument's storage data pointer is checked (and released when a byte-level access set
it). Records ``--ops`` in-place elementwise ops (``mul_``, ``add_``, ``tanh_``, ``sub_``)
on a clone of a synced tensor, warm caches, and prints the minimum over ``--reps`` of
the time per traced op and of the sync that runs them. Compare two builds by running
this alternately in separate processes (docs/performance.md, "Storages of ember
tensors, before and after").

    python bench/storage_inplace_chain.py [--ops 1000] [--reps 9] [--numel 256]
"""

import argparse
import time

import torch

import ember


def chain(x, n_ops):
    x = x.clone()
    for _ in range(n_ops // 4):
        x.mul_(1.0001)
        x.add_(0.5)
        x.tanh_()
        x.sub_(0.25)
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--numel", type=int, default=256)
    args = ap.parse_args()
    x = torch.randn(args.numel).to("ember")
    ember.sync()
    for _ in range(2):  # warm: Meta-shape cache, graph cache
        out = chain(x, args.ops)
        ember.sync()
        del out
    trace, sync = [], []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        out = chain(x, args.ops)
        t1 = time.perf_counter()
        ember.sync()
        t2 = time.perf_counter()
        trace.append(t1 - t0)
        sync.append(t2 - t1)
        del out
    print(f"ops per graph           {args.ops}")
    print(f"ember tracing (in place) {min(trace) / args.ops * 1e6:8.2f} us/op")
    print(f"sync                     {min(sync) * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
