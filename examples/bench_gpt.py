"""Benchmark of examples/train_gpt.py's default config: ember vs eager CPU vs
torch.compile (Inductor), training steps on the same data.

Part 1, cost: one fresh process per mode (``train_gpt.py --steps N --json``, dropout
0, no validation, no sampling) with its own empty caches (EMBER_CACHE_DIR and
TORCHINDUCTOR_CACHE_DIR in a fresh temporary directory). Reported per mode:
- cold compile: ``sum(first K steps) - K * median(later steps)`` (K = 3, clamped at 0):
  every compile and first-run cost, whichever step it falls in (ember and Inductor both
  compile again at step 2, when AdamW's state exists), in seconds;
- the median of the later steps (the mode alone on the machine), graphs compiled,
  and peak RSS (VmHWM of the process, MiB: interpreter, torch, compilers included);
- the process's wall time.

Part 2, timing: one process, the three modes from the same initial weights on the same
batches, interleaved after warm-up: in round r each mode takes one full training step
(batch, forward, backward, gradient clipping, AdamW, zero_grad, loss read back) in an
order rotated by r, so load on the shared machine lands on all alike. Ratios are pair by
pair (round r's time over eager's in round r, median over rounds), with
``ember.bench.timing.interleaved``. The warm-up steps' losses are the numerics check:
each mode's loss after k = 1..warmup steps within 2e-3 (relative) of eager's.

Usage: python examples/bench_gpt.py --data FILE [--steps 20] [--interleaved 20] [--json OUT]
Prints the machine line (commit, EMBER_BACKEND, load average) and a Markdown table
(pasted into docs/performance.md); progress goes to stderr.
"""

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODES = (
    ("eager", ["--device", "cpu"]),
    ("ember", ["--device", "ember"]),
    ("compile", ["--device", "cpu", "--compile"]),
)
STARTUP = 3  # steps counted as start-up (compile) cost in part 1


def log(msg):
    print(
        f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}",
        file=sys.stderr,
        flush=True,
    )


def excess(step_s, startup=STARTUP):
    """sum(step_s[:startup]) - startup * median(step_s[startup:]), >= 0 (seconds)."""
    steady = statistics.median(step_s[startup:])
    return max(0.0, sum(step_s[:startup]) - startup * steady)


def per_process(data, steps, mode_args, tmp):
    """One cold process of train_gpt.py; returns its figures (see the module docstring)."""
    out = os.path.join(tmp, "r.json")
    env = dict(
        os.environ,
        EMBER_CACHE_DIR=os.path.join(tmp, "ember-cache"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor-cache"),
    )
    cmd = [
        sys.executable,
        os.path.join(HERE, "train_gpt.py"),
        "--data",
        data,
        "--steps",
        str(steps),
        "--eval-interval",
        "0",
        "--eval-iters",
        "1",
        "--sample-chars",
        "0",
        "--log-interval",
        "0",
        "--dropout",
        "0",
        "--json",
        out,
        *mode_args,
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with open(out) as f:
        r = json.load(f)
    s = r["step_seconds"]
    return {
        "first_s": s[0],
        "cold_compile_s": excess(s),
        "median_s": statistics.median(s[STARTUP:]),
        "graphs": r["graphs_compiled"],
        "rss_mb": r["peak_rss_mb"],
        "wall_s": wall,
        "train_loss": r["train_loss"],
        "step_seconds": s,
    }


class GPTStep:
    """One mode's copy of the model, optimizer and batch stream, as a runner for
    ember.bench.timing.interleaved: step() runs one training step and returns the loss,
    finish() waits for it (the loss is read back inside step already), to_cpu() reads it."""

    def __init__(self, train_gpt, base, data, device, compiled, seed):
        import torch

        self.tg, self.data, self.device = train_gpt, data, device
        self.model = copy.deepcopy(base).to(device)
        self.fwd = torch.compile(self.model) if compiled else self.model
        self.opt = self.model.configure_optimizer(1e-3)
        self.params = list(self.model.parameters())
        self.gen = torch.Generator().manual_seed(seed)  # the same batches for every mode
        self.cfg = base.config

    def step(self):
        import torch

        x, y = self.tg.get_batch(
            self.data.train, self.cfg.batch_size, self.cfg.block_size, self.gen
        )
        _, loss = self.fwd(x.to(self.device), y.to(self.device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        loss = loss.detach().to("cpu")  # the value read ends the step (as train_gpt.py)
        return loss

    def finish(self):
        pass

    @staticmethod
    def to_cpu(t):
        return t.double()


def interleaved(data_path, rounds, warmup):
    import torch

    import ember
    from ember.bench import timing

    sys.path.insert(0, HERE)
    import train_gpt

    data = train_gpt.CharData(data_path, train_gpt.GPTConfig().block_size)
    cfg = train_gpt.GPTConfig(vocab_size=data.vocab_size, dropout=0.0)
    torch.manual_seed(0)
    base = train_gpt.GPT(cfg)
    runners = {
        "eager": GPTStep(train_gpt, base, data, torch.device("cpu"), False, 1),
        "ember": GPTStep(train_gpt, base, data, ember.device(), False, 1),
        "compile": GPTStep(train_gpt, base, data, torch.device("cpu"), True, 1),
    }
    res = timing.interleaved(
        runners,
        warmup,
        rounds,
        reference="eager",
        on_error=lambda b, e: log(f"{b} failed: {type(e).__name__}: {e}"),
    )
    # The engine that ran ember's graphs (the bridge's default when EMBER_BACKEND is unset).
    backend = str(
        getattr(ember.config, "backend", None) or os.environ.get("EMBER_BACKEND") or "default"
    )
    return res, backend


def commit():
    try:
        return subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=20, help="steps per mode in part 1 (> 3)")
    p.add_argument("--interleaved", type=int, default=20, help="timed rounds in part 2")
    p.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="untimed steps per mode in part 2 (also the numerics check)",
    )
    p.add_argument("--json", help="write every figure here")
    args = p.parse_args()
    if args.steps <= STARTUP:
        p.error(f"--steps must be > {STARTUP}")

    import torch

    machine = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit(),
        "ember_backend": None,  # ember.config.backend, read in part 2
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load_average_start": os.getloadavg(),
    }
    log(f"bench_gpt: {json.dumps(machine)}")
    rows = {}
    for name, mode_args in MODES:
        with tempfile.TemporaryDirectory() as tmp:
            rows[name] = per_process(args.data, args.steps, mode_args, tmp)
        log(
            f"part 1 {name}: "
            + json.dumps(
                {k: v for k, v in rows[name].items() if k not in ("train_loss", "step_seconds")}
            )
        )
    machine["load_average_part2"] = os.getloadavg()
    tim, machine["ember_backend"] = interleaved(args.data, args.interleaved, args.warmup)
    machine["load_average_end"] = os.getloadavg()
    for name, t in tim.items():
        log(
            f"part 2 {name}: {t['status']}, median {t['median_s']}, ratios {t['ratios']}, "
            f"numerics max diff {t['numerics_max_diff']}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": machine,
                    "settings": vars(args),
                    "per_process": rows,
                    "interleaved": tim,
                },
                f,
                indent=1,
            )

    def ms(x):
        return "-" if x is None else f"{x * 1e3:.0f} ms"

    def ratio(t, ref):
        r = t["ratios"].get(ref)
        return "-" if r is None else f"{r:.2f}"

    la = machine
    print(
        f"Date {machine['date_utc']}, commit {machine['commit']}, EMBER_BACKEND="
        f"{machine['ember_backend']}, torch {machine['torch']}, {machine['threads']} threads, "
        f"load average {la['load_average_start'][0]:.1f} (start) / "
        f"{la['load_average_part2'][0]:.1f} (part 2) / {la['load_average_end'][0]:.1f} (end)"
    )
    print()
    print(
        "| mode | cold compile (first 3 steps' excess) | median step, own process | "
        "median step, interleaved (min-max) | vs eager (paired) | vs compile (paired) | "
        "numerics (3 steps vs eager) | graphs compiled | peak RSS |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        t = tim[name]
        span = (
            f"{ms(t['median_s'])} ({ms(t['min_s'])}-{ms(t['max_s'])})"
            if t["median_s"] is not None
            else t["status"]
        )
        num = (
            "-"
            if t["numerics_ok"] is None
            else f"{'ok' if t['numerics_ok'] else 'WRONG'} ({t['numerics_max_diff']:.1e})"
        )
        print(
            f"| {name} | {r['cold_compile_s']:.2f} s | {ms(r['median_s'])} | {span} | "
            f"{ratio(t, 'eager')} | {ratio(t, 'compile')} | {num} | {r['graphs']} | "
            f"{r['rss_mb']:.0f} MiB |"
        )


if __name__ == "__main__":
    main()
