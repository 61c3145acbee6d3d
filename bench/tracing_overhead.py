"""Per-op tracing cost of the ember device against eager's per-op cost (issue 16, item 2).

The op list (``OPS``, one entry per op, by group) is what a training step dispatches:
elementwise (with autograd recording), reductions and norms, views, in-place ops (on an
activation under autograd, and on parameters and optimizer state under ``no_grad``, as
an optimizer does), ``_foreach_*`` ops over 8 tensors, matmuls, a small backward, and the
AdamW step (8 parameters, default settings of each device, and ``foreach=True``). Every
tensor has 64 elements (``[8, 8]``; ``[8]`` biases, ``[2, 4, 8]`` batches), float32, and
parameters and activations have ``requires_grad`` as in training.

Method: one **sample** of an op is ``--inner`` calls in a row on a fresh copy of its
state, timed as one region and divided by the count. On ember the region only traces
(autograd, functionalization, the lazy graph): nothing syncs inside it
(``sync_on_optimizer_step`` and ``sync_on_accumulate`` are off while it runs); the state
is materialized by an ``ember.sync()`` before and the traced work runs at a sync after,
both outside the timing. Eager samples the same op the same way on CPU tensors. Each
**round** takes one eager and one ember sample of every op, in an order that alternates
per round; an op's ratio is the median over rounds of ember's sample over eager's in the
same round (paired), its times the medians of the samples. The summary is the geometric
mean of the per-op ratios and the worst op (issue 16's targets: <= 1.0 and <= 2.0).

Clock: wall time (``time.perf_counter``) by default; ``--cpu`` measures the calling
thread's CPU time (``time.thread_time``) and, unless ``--threads`` says otherwise, runs
ATen on 1 thread, so all of an op's work (tracing on ember, the kernel on eager) is on
this thread and the figure holds on a loaded machine. The backward runs on the calling
thread on ember (``ember.config.backward_on_calling_thread``); on eager, autograd runs a
CPU backward on the calling thread too.

Before timing, each op runs once on both devices and its result (the output, the
mutated tensor, the gradients or the updated parameters) is compared with eager's
(``numerics`` in the output: a fast wrong trace does not count).

With ``--adamw-params N`` it also times a whole AdamW step over N parameters of
``[--adamw-size]**2`` (issue 16: 200 of 64x64) on ember (default settings; trace + run,
wall time) against eager's default, ``foreach=True`` and ``fused=True`` steps
(``measure_adamw_step``).

    python bench/tracing_overhead.py [--rounds 20] [--inner 50] [--cpu] [--threads N]
                                     [--ops REGEX] [--json FILE]
                                     [--adamw-params 200 [--adamw-size 64]]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import time

import torch
import torch.nn.functional as F

import ember

N_FOREACH = 8  # tensors per _foreach_* list and parameters of the AdamW step
LR = 1e-3


# --------------------------------------------------------------------------- states
# Each setup(device) returns a dict of tensors made from a fixed seed on the CPU and
# moved to `device`: the same values on both devices.


def _rand(g, *shape):
    return torch.randn(*shape, generator=g)


def _leaf(t, device):
    return t.to(device).requires_grad_(True)


def _st_grad(device):
    """Parameters/activations a, b [8,8] and a bias [8] requiring grad, a mask, a
    non-leaf activation h (requires grad, for in-place ops under autograd)."""
    g = torch.Generator().manual_seed(0)
    a, b = _leaf(_rand(g, 8, 8), device), _leaf(_rand(g, 8, 8), device)
    bias = _leaf(_rand(g, 8), device)
    x3 = _leaf(_rand(g, 2, 4, 8), device)
    mask = (_rand(g, 8, 8) > 0).to(device)
    tgt = torch.randint(0, 8, (8,), generator=g).to(device)
    h = a * 1.0
    return {"a": a, "b": b, "bias": bias, "x3": x3, "mask": mask, "tgt": tgt, "h": h}


def _st_opt(device):
    """A parameter p [8,8] (requires grad) with its gradient g and AdamW state m, v."""
    g = torch.Generator().manual_seed(1)
    p = _leaf(_rand(g, 8, 8), device)
    grad = _rand(g, 8, 8).to(device)
    m = _rand(g, 8, 8).to(device)
    v = _rand(g, 8, 8).abs().to(device)
    return {"p": p, "g": grad, "m": m, "v": v}


def _st_foreach(device):
    """Lists of N_FOREACH tensors of 64 elements: parameters ps (requires grad),
    gradients gs, AdamW state ms, vs (vs > 0)."""
    g = torch.Generator().manual_seed(2)
    ps = [_leaf(_rand(g, 8, 8), device) for _ in range(N_FOREACH)]
    gs = [_rand(g, 8, 8).to(device) for _ in range(N_FOREACH)]
    ms = [_rand(g, 8, 8).to(device) for _ in range(N_FOREACH)]
    vs = [_rand(g, 8, 8).abs().add(0.1).to(device) for _ in range(N_FOREACH)]
    return {"ps": ps, "gs": gs, "ms": ms, "vs": vs}


def _st_adamw(foreach):
    def setup(device):
        g = torch.Generator().manual_seed(3)
        ps = [_leaf(_rand(g, 8, 8), device) for _ in range(N_FOREACH)]
        for p in ps:
            p.grad = _rand(g, 8, 8).to(device)
        opt = torch.optim.AdamW(ps, lr=LR, foreach=foreach)
        opt.step()  # state (exp_avg, exp_avg_sq, step) exists before timing
        return {"ps": ps, "opt": opt}

    return setup


# --------------------------------------------------------------------------- the ops
# (group, name, setup, fn, no_grad). fn(state) returns what the numerics check compares.


def _backward(s):
    a, b = s["a"], s["b"]
    a.grad = b.grad = None
    (a * b).sum().backward()
    return [a.grad, b.grad]


def _adamw_step(s):
    s["opt"].step()
    return s["ps"]


OPS = [
    # elementwise, recorded by autograd
    ("elementwise", "add", _st_grad, lambda s: s["a"] + s["b"], False),
    ("elementwise", "sub", _st_grad, lambda s: s["a"] - s["b"], False),
    ("elementwise", "mul", _st_grad, lambda s: s["a"] * s["b"], False),
    ("elementwise", "div", _st_grad, lambda s: s["a"] / (s["b"].abs() + 1.0), False),
    ("elementwise", "add scalar", _st_grad, lambda s: s["a"] + 0.5, False),
    ("elementwise", "mul scalar", _st_grad, lambda s: s["a"] * 1.5, False),
    ("elementwise", "add bias [8]", _st_grad, lambda s: s["a"] + s["bias"], False),
    ("elementwise", "neg", _st_grad, lambda s: -s["a"], False),
    ("elementwise", "exp", _st_grad, lambda s: torch.exp(s["a"]), False),
    ("elementwise", "tanh", _st_grad, lambda s: torch.tanh(s["a"]), False),
    ("elementwise", "sigmoid", _st_grad, lambda s: torch.sigmoid(s["a"]), False),
    ("elementwise", "relu", _st_grad, lambda s: torch.relu(s["a"]), False),
    ("elementwise", "gelu", _st_grad, lambda s: F.gelu(s["a"]), False),
    ("elementwise", "silu", _st_grad, lambda s: F.silu(s["a"]), False),
    ("elementwise", "pow 2", _st_grad, lambda s: s["a"] ** 2, False),
    ("elementwise", "where", _st_grad, lambda s: torch.where(s["mask"], s["a"], s["b"]), False),
    ("elementwise", "masked_fill", _st_grad, lambda s: s["a"].masked_fill(s["mask"], 0.0), False),
    # reductions and norms
    ("reduction", "sum", _st_grad, lambda s: s["a"].sum(), False),
    ("reduction", "mean(-1)", _st_grad, lambda s: s["a"].mean(-1), False),
    ("reduction", "softmax(-1)", _st_grad, lambda s: torch.softmax(s["a"], -1), False),
    ("reduction", "log_softmax(-1)", _st_grad, lambda s: F.log_softmax(s["a"], -1), False),
    ("reduction", "layer_norm", _st_grad, lambda s: F.layer_norm(s["a"], (8,)), False),
    ("reduction", "cross_entropy", _st_grad, lambda s: F.cross_entropy(s["a"], s["tgt"]), False),
    # views
    ("view", "view", _st_grad, lambda s: s["a"].view(64), False),
    ("view", "reshape", _st_grad, lambda s: s["a"].reshape(4, 16), False),
    ("view", "t", _st_grad, lambda s: s["a"].t(), False),
    ("view", "transpose", _st_grad, lambda s: s["x3"].transpose(1, 2), False),
    ("view", "permute", _st_grad, lambda s: s["x3"].permute(2, 0, 1), False),
    ("view", "unsqueeze", _st_grad, lambda s: s["a"].unsqueeze(0), False),
    ("view", "expand", _st_grad, lambda s: s["bias"].expand(8, 8), False),
    ("view", "slice", _st_grad, lambda s: s["a"][2:6], False),
    ("view", "select", _st_grad, lambda s: s["a"][3], False),
    ("view", "split", _st_grad, lambda s: s["a"].split(4, dim=1), False),
    ("view", "contiguous of t", _st_grad, lambda s: s["a"].t().contiguous(), False),
    # in-place: on an activation under autograd, and on optimizer state under no_grad
    ("inplace", "relu_ (autograd)", _st_grad, lambda s: s["h"].relu_(), False),
    ("inplace", "mul_ (autograd)", _st_grad, lambda s: s["h"].mul_(0.5), False),
    ("inplace", "add_ (autograd)", _st_grad, lambda s: s["h"].add_(s["b"]), False),
    ("inplace", "add_ alpha", _st_opt, lambda s: s["p"].add_(s["g"], alpha=-LR), True),
    ("inplace", "mul_ scalar", _st_opt, lambda s: s["p"].mul_(0.999), True),
    ("inplace", "lerp_", _st_opt, lambda s: s["m"].lerp_(s["g"], 0.1), True),
    ("inplace", "addcmul_", _st_opt, lambda s: s["v"].addcmul_(s["g"], s["g"], value=1e-3), True),
    ("inplace", "addcdiv_", _st_opt, lambda s: s["p"].addcdiv_(s["m"], s["v"], value=-LR), True),
    ("inplace", "copy_", _st_opt, lambda s: s["m"].copy_(s["g"]), True),
    ("inplace", "zero_", _st_opt, lambda s: s["m"].zero_(), True),
    # _foreach_* over N_FOREACH tensors, under no_grad (an optimizer's)
    ("foreach", "_foreach_add_ alpha", _st_foreach, lambda s: torch._foreach_add_(s["ps"], s["gs"], alpha=-LR) or s["ps"], True),
    ("foreach", "_foreach_mul_ scalar", _st_foreach, lambda s: torch._foreach_mul_(s["ps"], 0.999) or s["ps"], True),
    ("foreach", "_foreach_lerp_", _st_foreach, lambda s: torch._foreach_lerp_(s["ms"], s["gs"], 0.1) or s["ms"], True),
    ("foreach", "_foreach_addcmul_", _st_foreach, lambda s: torch._foreach_addcmul_(s["vs"], s["gs"], s["gs"], 1e-3) or s["vs"], True),
    ("foreach", "_foreach_addcdiv_", _st_foreach, lambda s: torch._foreach_addcdiv_(s["ps"], s["ms"], s["vs"], -LR) or s["ps"], True),
    ("foreach", "_foreach_sqrt", _st_foreach, lambda s: torch._foreach_sqrt(s["vs"]), True),
    ("foreach", "_foreach_add scalar", _st_foreach, lambda s: torch._foreach_add(s["vs"], 1e-8), True),
    ("foreach", "_foreach_div_", _st_foreach, lambda s: torch._foreach_div_(s["ms"], s["vs"]) or s["ms"], True),
    # matmul
    ("matmul", "matmul [8,8]@[8,8]", _st_grad, lambda s: s["a"] @ s["b"], False),
    ("matmul", "mm", _st_grad, lambda s: torch.mm(s["a"], s["b"]), False),
    ("matmul", "linear", _st_grad, lambda s: F.linear(s["a"], s["b"], s["bias"]), False),
    ("matmul", "matmul [2,4,8]@[8,8]", _st_grad, lambda s: s["x3"] @ s["b"], False),
    ("matmul", "bmm [2,4,8]@[2,8,4]", _st_grad, lambda s: torch.bmm(s["x3"], s["x3"].transpose(1, 2)), False),
    # autograd and the optimizer
    ("autograd", "(a*b).sum().backward()", _st_grad, _backward, False),
    ("optimizer", "AdamW.step() default", _st_adamw(None), _adamw_step, True),
    ("optimizer", "AdamW.step() foreach", _st_adamw(True), _adamw_step, True),
]  # fmt: skip


# --------------------------------------------------------------------------- measuring


class _NoSync:
    """Ember's implicit syncs (optimizer step, gradient accumulation) off inside a region."""

    def __enter__(self):
        self.saved = (ember.config.sync_on_optimizer_step, ember.config.sync_on_accumulate)
        ember.config.sync_on_optimizer_step = False
        ember.config.sync_on_accumulate = False

    def __exit__(self, *exc):
        ember.config.sync_on_optimizer_step, ember.config.sync_on_accumulate = self.saved


def _sample(op, device, inner, clock) -> float:
    """Seconds per call of `op` over `inner` calls on a fresh state on `device`."""
    _, _, setup, fn, no_grad = op
    on_ember = device.type == "ember"
    state = setup(device)
    if on_ember:
        ember.sync()
    ctx = torch.no_grad() if no_grad else torch.enable_grad()
    with ctx, _NoSync():
        t0 = clock()
        for _ in range(inner):
            out = fn(state)
        t = clock() - t0
    del out
    if on_ember:
        ember.sync()  # the traced work runs here, outside the timing
    del state
    return t / inner


def _flat(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x]
    out = []
    for y in x:
        out += _flat(y)
    return out


def check(op, dev) -> float:
    """max |ember - eager| / max(1, max |eager|) over the op's result, one call each."""
    _, _, setup, fn, no_grad = op
    res = []
    for device in (torch.device("cpu"), dev):
        state = setup(device)
        ctx = torch.no_grad() if no_grad else torch.enable_grad()
        with ctx, _NoSync():
            out = [t.detach() for t in _flat(fn(state))]
        res.append([t.to("cpu").double() for t in out])
    eager, got = res
    d = 0.0
    for e, m in zip(eager, got):
        if e.shape != m.shape:
            return float("inf")
        d = max(d, (m - e).abs().max().item() / max(1.0, e.abs().max().item()))
    return d if len(eager) == len(got) else float("inf")


def measure(ops, rounds: int, inner: int, clock) -> list:
    """[{group, op, eager_us, ember_us, ratio, numerics_max_diff}] (see module docstring)."""
    dev, cpu = ember.device(), torch.device("cpu")
    diffs = [check(op, dev) for op in ops]
    for op in ops:  # warm-up: Meta-shape and graph caches, lazy initialisation
        _sample(op, cpu, inner, clock)
        _sample(op, dev, inner, clock)
    times = {i: ([], []) for i in range(len(ops))}
    for r in range(rounds):
        for i, op in enumerate(ops):
            order = ((0, cpu), (1, dev)) if (r + i) % 2 == 0 else ((1, dev), (0, cpu))
            for k, device in order:
                times[i][k].append(_sample(op, device, inner, clock))
    out = []
    for i, op in enumerate(ops):
        e, m = times[i]
        out.append(
            {
                "group": op[0],
                "op": op[1],
                "eager_us": statistics.median(e) * 1e6,
                "ember_us": statistics.median(m) * 1e6,
                "ratio": statistics.median(b / a for a, b in zip(e, m) if a > 0),
                "numerics_max_diff": diffs[i],
            }
        )
    return out


# --------------------------------------------------------------------------- AdamW step


def _adamw_setup(device, n_params, size, **kw):
    g = torch.Generator().manual_seed(4)
    ps = [_leaf(_rand(g, size, size), device) for _ in range(n_params)]
    for p in ps:
        p.grad = _rand(g, size, size).to(device)
    opt = torch.optim.AdamW(ps, lr=LR, **kw)
    opt.step()  # state exists before timing
    if device.type == "ember":
        ember.sync()
    return opt


def measure_adamw_step(n_params: int, size: int, rounds: int, steps: int) -> dict:
    """Seconds per AdamW step over `n_params` parameters of [size, size] (wall time):
    eager's default, foreach=True and fused=True on CPU, ember's default step and ember's
    fused=True step (traced, then run: ``optimizer.step()`` queues it, ``ember.sync()`` waits for it;
    both inside the timing). Paired rounds (order alternating), medians; ember's ratio
    to each eager variant is the median of the per-round ratios."""
    cpu, dev = torch.device("cpu"), ember.device()
    variants = {
        "eager default": (cpu, {}),
        "eager foreach": (cpu, {"foreach": True}),
        "eager fused": (cpu, {"fused": True}),
        "ember default": (dev, {}),
        "ember fused": (dev, {"fused": True}),
    }
    opts = {k: _adamw_setup(d, n_params, size, **kw) for k, (d, kw) in variants.items()}

    def one(name):
        opt = opts[name]
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.step()
        if name.startswith("ember"):
            ember.sync()
        return (time.perf_counter() - t0) / steps

    for name in opts:  # warm-up: the step graph compiled, caches filled
        one(name)
        one(name)
    times = {k: [] for k in opts}
    names = list(opts)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            times[name].append(one(name))
    out = {"params": n_params, "size": size, "steps_per_sample": steps}
    for k, v in times.items():
        out[k + " ms"] = statistics.median(v) * 1e3

    def paired(num, den):  # median of the per-round ratios
        return statistics.median(b / a for a, b in zip(times[den], times[num]))

    for k in ("eager default", "eager foreach", "eager fused"):
        out["ember / " + k] = paired("ember default", k)
    out["ember fused / eager fused"] = paired("ember fused", "eager fused")
    return out


def summary(rows) -> dict:
    """Geometric mean and worst of the per-op ratios, overall and per group."""
    geo = math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows))
    worst = max(rows, key=lambda r: r["ratio"])
    groups = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(math.log(r["ratio"]))
    return {
        "geomean_ratio": geo,
        "worst_ratio": worst["ratio"],
        "worst_op": worst["op"],
        "group_geomean_ratio": {g: math.exp(statistics.fmean(v)) for g, v in groups.items()},
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--inner", type=int, default=50, help="calls per timed sample")
    ap.add_argument("--cpu", action="store_true", help="thread CPU time instead of wall time")
    ap.add_argument(
        "--threads", type=int, default=None, help="ATen threads (default: 1 with --cpu)"
    )
    ap.add_argument("--ops", help="only the ops whose group or name matches this regex")
    ap.add_argument("--json", help="write the rows and the summary here")
    ap.add_argument(
        "--adamw-params",
        type=int,
        default=0,
        help="also time a whole AdamW step over this many parameters (issue 16: 200)",
    )
    ap.add_argument("--adamw-size", type=int, default=64, help="parameters are [N, N]")
    args = ap.parse_args(argv)
    # Every op's samples are graphs of their own, traced from the same lines: by design.
    ember.config.recompile_warn_limit = 1_000_000
    threads = args.threads or (1 if args.cpu else None)
    if threads:
        torch.set_num_threads(threads)
    clock = time.thread_time if args.cpu else time.perf_counter
    ops = [op for op in OPS if not args.ops or re.search(args.ops, f"{op[0]} {op[1]}")]
    load = os.getloadavg()[0]
    rows = measure(ops, args.rounds, args.inner, clock)
    s = summary(rows)
    print(
        f"per-op cost, ember trace vs eager ({'thread CPU' if args.cpu else 'wall'} time, "
        f"{torch.get_num_threads()} ATen thread(s), {args.rounds} rounds x {args.inner} calls, "
        f"load {load:.1f} -> {os.getloadavg()[0]:.1f}, ember backend {ember.config.backend})"
    )
    print(f"{'group':<12} {'op':<28} {'eager us':>9} {'ember us':>9} {'ratio':>7}  numerics")
    for r in rows:
        ok = "ok" if r["numerics_max_diff"] <= 1e-5 else f"DIFF {r['numerics_max_diff']:.2g}"
        print(
            f"{r['group']:<12} {r['op']:<28} {r['eager_us']:9.2f} {r['ember_us']:9.2f} "
            f"{r['ratio']:7.2f}  {ok}"
        )
    print(
        "groups: "
        + ", ".join(f"{g} {v:.2f}" for g, v in s["group_geomean_ratio"].items())
        + f"\ngeomean ratio {s['geomean_ratio']:.2f} (target <= 1.0); worst "
        f"{s['worst_ratio']:.2f} ({s['worst_op']}; target <= 2.0)"
    )
    step = None
    if args.adamw_params:
        step = measure_adamw_step(args.adamw_params, args.adamw_size, args.rounds, 5)
        print(
            f"AdamW step, {args.adamw_params} parameters of "
            f"[{args.adamw_size}, {args.adamw_size}] (wall time, trace + run on ember): "
            + ", ".join(f"{k[:-3]} {v:.3f} ms" for k, v in step.items() if k.endswith(" ms"))
            + "; ember / eager: "
            + ", ".join(
                f"{k.split()[1]} {step['ember / ' + k]:.2f}"
                for k in ("eager default", "eager foreach", "eager fused")
            )
            + f"; ember fused / eager fused {step['ember fused / eager fused']:.2f}"
        )
    if args.json:
        doc = {
            "rows": rows,
            "summary": s,
            "adamw_step": step,
            "settings": {
                "rounds": args.rounds,
                "inner": args.inner,
                "clock": "thread_time" if args.cpu else "perf_counter",
                "threads": torch.get_num_threads(),
                "load_start": load,
                "load_end": os.getloadavg()[0],
                "backend": ember.config.backend,
            },
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
