"""Training-step time of an MLP on ember vs eager CPU, interleaved in one process.

Each repetition times one eager step, then one ember step (forward, cross-entropy,
backward, AdamW step, zero_grad; on ember the step's sync runs inside
`optimizer.step()`, so the timed interval includes tracing, graph lookup and
execution). Warm-up steps fill the Meta-shape and graph caches first; the figures are
medians, and the ratio is ember / eager (below 1: ember is faster).

    python bench/train_step.py [--reps 30] [--warmup 5] [--configs small,medium]
"""

import argparse
import copy
import statistics
import time

import torch
import torch.nn.functional as F

import ember

CONFIGS = {
    # name: (batch, input, hidden, classes)
    "small": (32, 64, 64, 10),  # per-op overhead dominates
    "medium": (128, 784, 512, 10),  # matmuls dominate
}


def make(d_in, hidden, d_out):
    return torch.nn.Sequential(
        torch.nn.Linear(d_in, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, d_out),
    )


def step(model, opt, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def run(name, reps, warmup):
    batch, d_in, hidden, d_out = CONFIGS[name]
    torch.manual_seed(0)
    cpu_model = make(d_in, hidden, d_out)
    dev_model = copy.deepcopy(cpu_model).to("ember")
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-3)
    dev_opt = torch.optim.AdamW(dev_model.parameters(), lr=1e-3)
    x, y = torch.randn(batch, d_in), torch.randint(0, d_out, (batch,))
    dx, dy = x.to("ember"), y.to("ember")
    for _ in range(warmup):
        step(cpu_model, cpu_opt, x, y)
        step(dev_model, dev_opt, dx, dy)
    ember.sync()
    ember.metrics.clear()
    eager, lazy, traced, synced = [], [], [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        step(cpu_model, cpu_opt, x, y)
        t1 = time.perf_counter()
        step(dev_model, dev_opt, dx, dy)
        t2 = time.perf_counter()
        eager.append(t1 - t0)
        lazy.append(t2 - t1)
    # same weights after the same steps (sanity: the benchmark measures correct work)
    for a, b in zip(cpu_model.parameters(), dev_model.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-4, atol=1e-5)
    # Where ember's step time goes: the same step with the optimizer-step sync switched
    # off, traced, then synced explicitly (not interleaved; medians).
    ember.config.sync_on_optimizer_step = False
    try:
        for _ in range(reps):
            t0 = time.perf_counter()
            step(dev_model, dev_opt, dx, dy)
            t1 = time.perf_counter()
            ember.sync()
            t2 = time.perf_counter()
            traced.append(t1 - t0)
            synced.append(t2 - t1)
    finally:
        ember.config.sync_on_optimizer_step = True
    c = ember.metrics.counters()
    e, m = statistics.median(eager), statistics.median(lazy)
    params = sum(p.numel() for p in cpu_model.parameters())
    print(
        f"{name:<7} batch={batch} mlp={d_in}-{hidden}-{hidden}-{d_out} ({params} params): "
        f"eager {e * 1e3:.3f} ms, ember {m * 1e3:.3f} ms, ratio ember/eager {m / e:.2f} "
        f"| ember trace {statistics.median(traced) * 1e3:.3f} ms + sync "
        f"{statistics.median(synced) * 1e3:.3f} ms (execute {c['execute_seconds'] / (2 * reps) * 1e3:.3f} ms) "
        f"| {c['syncs']} syncs, {c['graphs_compiled']} compiled, {c['memory_cache_hits']} memory hits"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--configs", default="small,medium")
    args = ap.parse_args()
    for name in args.configs.split(","):
        run(name, args.reps, args.warmup)


if __name__ == "__main__":
    main()
