"""Quickstart: the same training loop on eager CPU and on the lazy ``ember`` device.

Trains a small MLP classifier (784 -> 256 -> 10, AdamW) for a few steps on a
fixed random data set, once on eager CPU and once on ``ember`` from the same
initial weights, and prints both loss curves, their largest difference, the
number of graphs ember compiled, and ember's metrics report.

Usage: python examples/quickstart.py [--steps N]
"""

import argparse
import copy
import time

import torch
import torch.nn.functional as F

import ember


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.GELU(), torch.nn.Linear(256, 10))


def train(model, x, y, device, steps):
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, seconds = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()  # on ember, the step ends here: the whole step runs as one graph
        opt.zero_grad()
        losses.append(loss.item())
        seconds.append(time.perf_counter() - t0)
    return losses, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(128, 784)
    y = torch.randint(0, 10, (128,))
    model = make_model()

    ember.metrics.clear()
    eager_losses, eager_s = train(copy.deepcopy(model), x, y, "cpu", args.steps)
    ember_losses, ember_s = train(copy.deepcopy(model), x, y, ember.device(), args.steps)

    print(f"{'step':>4} {'eager loss':>12} {'ember loss':>12}")
    for i, (a, b) in enumerate(zip(eager_losses, ember_losses)):
        print(f"{i:>4} {a:>12.6f} {b:>12.6f}")
    diff = max(abs(a - b) for a, b in zip(eager_losses, ember_losses))
    c = ember.metrics.counters()
    print(f"max |eager - ember| loss difference: {diff:.3g}")
    print(f"graphs compiled: {c['graphs_compiled']}, cache hits: {c['memory_cache_hits']}")
    mid = len(eager_s) // 2
    print(
        f"median step time: eager {sorted(eager_s)[mid] * 1e3:.2f} ms, "
        f"ember {sorted(ember_s)[mid] * 1e3:.2f} ms"
    )
    print(ember.metrics.report())
    if diff > 1e-4:
        raise SystemExit(f"ember and eager disagree (max loss difference {diff:.3g})")


if __name__ == "__main__":
    main()
