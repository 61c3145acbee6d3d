"""Where ember's fixed cost per step goes: the bench's MLP (and, optionally, char-GPT)
training step split into phases, ember vs eager, interleaved in one process.

Each round runs one eager step and one ember step (order alternating), each split into
forward, backward, optimizer step (with the optimizer-step sync switched off) and
``ember.sync()`` (eager: nothing pending, ~0), plus one inference call per backend.
On ember the forward/backward/optimizer phases only record ops, so their time is the
per-op fixed cost (Python + dispatch + tracing); the sync phase is graph building,
cache lookup and execution. Figures are medians over the rounds; ratios are computed
round by round (ember / eager, median). ``--cpu`` measures the calling thread's CPU
time (``time.thread_time``) instead of wall time: with ``torch.set_num_threads(1)`` and
``EMBER_NUM_THREADS=1`` (set by ``--threads 1``, the default) all work runs on this
thread, so the figures hold on a loaded machine where wall times do not.

``--live N`` keeps N more small tensors alive on the device (a model's many buffers, a
dataset held on the device): a sync's fixed cost must not grow with them.

``--sync-log`` reruns itself with ``EMBER_LOG=sync`` and prints the medians of the
sync's own phases (gather, build + hash, lookup, argument buffers, execution, output
tensors, state binding; src/torch/sync.cpp) for the ember training step.

    python bench/step_overhead.py [--models mlp,gpt] [--rounds 60] [--cpu] [--sync-log] [--live N]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time


def measure(model_name, rounds, clock, threads, live=0):
    import torch

    import ember
    from ember.bench import backends, models

    torch.set_num_threads(threads)
    w = models.build(model_name, "quick")
    train = {b: backends.make_runner(b, w, "train") for b in ("eager", "ember")}
    infer = {b: backends.make_runner(b, w, "inference") for b in ("eager", "ember")}
    phases = ("forward", "backward", "optimizer", "sync", "step", "inference")
    res = {b: {p: [] for p in phases} for b in train}
    held = [torch.zeros(4, device=ember.device()) + i for i in range(live)]  # noqa: F841
    ember.sync()
    for _ in range(3):  # warm-up: Meta-shape and graph caches
        for b in train:
            train[b].step()
            train[b].finish()
            out = infer[b].step()
            infer[b].finish()
            del out
    for i in range(rounds):
        order = list(train) if i % 2 == 0 else list(train)[::-1]
        for b in order:
            r = train[b]
            ember.config.sync_on_optimizer_step = False
            try:
                t0 = clock()
                loss = r._fn(r._call, *r.inputs)
                t1 = clock()
                loss.backward()
                t2 = clock()
                r.opt.step()
                r.opt.zero_grad(set_to_none=True)
                t3 = clock()
                ember.sync()
                t4 = clock()
            finally:
                ember.config.sync_on_optimizer_step = True
            del loss
            t5 = clock()
            out = infer[b].step()
            infer[b].finish()
            t6 = clock()
            del out
            for p, v in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0, t6 - t5)):
                res[b][p].append(v)
    return phases, res


def sync_log_medians(args):
    """Medians of the EMBER_LOG=sync fields over the ember training steps of a child run."""
    env = dict(os.environ, EMBER_LOG="sync")
    cmd = [
        sys.executable,
        __file__,
        "--models",
        "mlp",
        "--rounds",
        str(args.rounds),
        "--threads",
        str(args.threads),
        "--live",
        str(args.live),
        "--quiet",
    ]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    fields = {}
    for line in p.stderr.splitlines():
        if not line.startswith("sync: ") or " hit " not in line:
            continue
        m = re.search(r"ops=(\d+)", line)
        if not m or int(m.group(1)) < 20:  # the training step's graph, not inference's
            continue
        for k, v in re.findall(r"(\w+)=([0-9.]+)", line):
            fields.setdefault(k, []).append(float(v))
    return {k: statistics.median(v) for k, v in fields.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cpu", action="store_true", help="thread CPU time instead of wall time")
    ap.add_argument("--sync-log", action="store_true")
    ap.add_argument("--live", type=int, default=0, help="more live device tensors to hold")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("EMBER_NUM_THREADS", str(args.threads))
    clock = time.thread_time if args.cpu else time.perf_counter
    for name in args.models.split(","):
        phases, res = measure(name, args.rounds, clock, args.threads, args.live)
        if args.quiet:
            continue
        print(
            f"{name} ({'thread CPU' if args.cpu else 'wall'} time, {args.threads} thread(s), "
            f"{args.rounds} rounds, {args.live} more live tensors, load {os.getloadavg()[0]:.1f}): medians in microseconds"
        )
        print(f"{'phase':<10} {'eager':>9} {'ember':>9} {'ember/eager':>12}")
        for p in phases:
            e, m = res["eager"][p], res["ember"][p]
            ratio = (
                statistics.median(b / a for a, b in zip(e, m) if a > 0)
                if p != "sync"
                else float("nan")
            )
            print(
                f"{p:<10} {statistics.median(e) * 1e6:9.0f} {statistics.median(m) * 1e6:9.0f} "
                f"{ratio:12.2f}"
            )
    if args.sync_log and not args.quiet:
        med = sync_log_medians(args)
        keys = ("gather", "build", "lookup", "args", "exec", "outputs", "bind")
        print(
            "ember training step's sync (EMBER_LOG=sync medians, us): "
            + ", ".join(f"{k} {med[k]:.1f}" for k in keys if k in med)
            + f"; fixed (all but exec) {sum(med.get(k, 0) for k in keys if k != 'exec'):.1f}"
        )


if __name__ == "__main__":
    main()
