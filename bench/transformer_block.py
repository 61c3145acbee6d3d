"""Training step of a pre-norm transformer block: ember vs eager vs torch.compile (Inductor).

The block (issue 6): x + attn(LayerNorm(x)) with causal scaled_dot_product_attention,
then h + MLP(LayerNorm(h)) with a GELU MLP; loss = mean squared error against a fixed
target; AdamW under a cosine LR schedule. One step = forward, backward, optimizer step,
scheduler step, zero_grad; on ember the step's sync runs inside `optimizer.step()`, so
the timed interval includes tracing, graph lookup and execution.

The three variants run interleaved in one process (each repetition times one step of
each, in turn), after warm-up steps that fill the caches and compile. Figures: median
and min-max of the per-step wall time, the ratio to eager's median, and kernels per
step: eager = ATen ops dispatched (counted with a TorchDispatchMode, outside the timed
steps), Inductor = kernels it generated for the compiled forward+backward (its
`generated_kernel_count` metric; the optimizer step runs eagerly there), ember = native
kernels and extern steps of the step's graph (`ember.metrics.last_graph()`).

    python bench/transformer_block.py [--reps 20] [--warmup 3] [--batch 8] [--seq 128]
        [--dim 256] [--heads 4] [--backend cpu] [--threads N] [--no-compile] [--json out.json]
"""

import argparse
import copy
import json
import os
import statistics
import subprocess
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a GELU MLP, both residual."""

    def __init__(self, dim, heads, dropout=0.0):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def make_trainer(model, steps_total, lr=1e-3):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps_total)
    return opt, sched


def train_step(model, opt, sched, x, target, forward=None):
    out = (model if forward is None else forward)(x)
    loss = F.mse_loss(out, target)
    loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad()
    return loss


def eager_op_count(model, x, target):
    """ATen ops dispatched by one eager training step (forward, backward, AdamW)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    m = copy.deepcopy(model)
    opt, sched = make_trainer(m, 100)
    train_step(m, opt, sched, x, target)  # optimizer state exists from now on
    with Count():
        train_step(m, opt, sched, x, target)
    return Count.n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (Inductor)")
    ap.add_argument(
        "--backend",
        default="cpu",
        choices=("cpu", "interpreter", "aten"),
        help="ember.config.backend for the ember variant (default cpu: native kernels)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch.set_num_threads for every variant (0: torch's default); ember's "
        "native kernels run on the same ATen pool",
    )
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()

    import ember

    ember.config.backend = args.backend
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base = Block(args.dim, args.heads)
    x = torch.randn(args.batch, args.seq, args.dim)
    target = torch.randn(args.batch, args.seq, args.dim)
    steps_total = args.warmup + args.reps + 10

    variants = {}
    m = copy.deepcopy(base)
    variants["eager"] = (m, *make_trainer(m, steps_total), x, target, None)
    m = copy.deepcopy(base).to("ember")
    variants["ember"] = (m, *make_trainer(m, steps_total), x.to("ember"), target.to("ember"), None)
    if not args.no_compile:
        m = copy.deepcopy(base)
        variants["inductor"] = (m, *make_trainer(m, steps_total), x, target, torch.compile(m))

    load_start = os.getloadavg()
    kernels = {"eager": eager_op_count(base, x, target)}
    compile_s = {}
    for name, v in variants.items():
        t0 = time.perf_counter()
        if name == "inductor":
            from torch._inductor import metrics as ind_metrics

            ind_metrics.reset()
        for _ in range(args.warmup):
            train_step(*v)
        if name == "ember":
            ember.sync()
            g = ember.metrics.last_graph()
            kernels["ember"] = {
                "kernels": g.get("kernels"),
                "extern_steps": g.get("extern_steps"),
                "interpreted": g.get("interpreted"),
                "core_externs": g.get("core_externs"),
                "externs": g.get("externs"),
            }
        if name == "inductor":
            kernels["inductor"] = ind_metrics.generated_kernel_count
        compile_s[name] = time.perf_counter() - t0

    times = {n: [] for n in variants}
    ember.metrics.clear()
    for _ in range(args.reps):
        for name, v in variants.items():
            t0 = time.perf_counter()
            train_step(*v)
            if name == "ember":
                ember.sync()
            times[name].append(time.perf_counter() - t0)
    c = ember.metrics.counters()
    load_end = os.getloadavg()

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        ).stdout.strip()
    except OSError:
        commit = "?"
    eager_med = statistics.median(times["eager"])
    res = {
        "config": vars(args),
        "commit": commit,
        "load_start": load_start,
        "load_end": load_end,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "warmup_seconds": compile_s,
        "kernels_per_step": kernels,
        "ember_during_timing": {k: c[k] for k in ("graphs_compiled", "syncs", "execute_seconds")},
        "variants": {},
    }
    print(
        f"transformer block train step: batch {args.batch}, seq {args.seq}, dim {args.dim}, heads {args.heads}; "
        f"ember backend {args.backend}; "
        f"{args.reps} reps; commit {commit}; load {load_start[0]:.1f} -> {load_end[0]:.1f}"
    )
    print(f"{'variant':<10} {'median ms':>10} {'min-max ms':>18} {'/ eager':>8}  kernels per step")
    for name, ts in times.items():
        med = statistics.median(ts)
        res["variants"][name] = {
            "median_s": med,
            "min_s": min(ts),
            "max_s": max(ts),
            "ratio": med / eager_med,
        }
        print(
            f"{name:<10} {med * 1e3:10.2f} {min(ts) * 1e3:8.2f}-{max(ts) * 1e3:<8.2f} {med / eager_med:8.2f}  "
            f"{kernels.get(name)}"
        )
    print(
        f"ember during timing: graphs_compiled {c['graphs_compiled']}, syncs {c['syncs']}, "
        f"execute_seconds {c['execute_seconds']:.3f} (of {sum(times['ember']):.3f} s timed)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
