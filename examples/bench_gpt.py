"""Benchmark of examples/train_gpt.py's default config: ember vs eager CPU vs
torch.compile (Inductor), training steps on the same data.

Part 1, one process per mode (so each has its own peak RSS and cold caches):
``train_gpt.py --steps N --json`` with empty graph caches (EMBER_CACHE_DIR,
TORCHINDUCTOR_CACHE_DIR in a fresh temp dir). Reports the first step (cold
compile + run), the median later step, graphs compiled and peak RSS.

Part 2, one process, interleaved: the three modes from the same initial
weights take one training step each in turn (after warm-up steps), so load on
the machine affects all alike; reports median step times and ratios to eager.

Usage: python examples/bench_gpt.py --data FILE [--steps 20] [--interleaved 20]
Prints a Markdown table (pasted into docs/performance.md).
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


def per_process(data, steps, mode_args, tmp):
    out = os.path.join(tmp, "r.json")
    env = dict(os.environ, EMBER_CACHE_DIR=os.path.join(tmp, "ember-cache"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor-cache"))
    cmd = [sys.executable, os.path.join(HERE, "train_gpt.py"), "--data", data, "--steps", str(steps),
           "--eval-interval", "0", "--eval-iters", "1", "--sample-chars", "0", "--log-interval", "0",
           "--dropout", "0", "--json", out, *mode_args]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with open(out) as f:
        r = json.load(f)
    s = r["step_seconds"]
    return {"first_s": s[0], "median_s": statistics.median(s[1:]), "graphs": r["graphs_compiled"],
            "rss_mb": r["peak_rss_mb"], "wall_s": wall}


def interleaved(data, steps, warmup):
    import torch
    import torch.nn.functional as F  # noqa: F401

    import ember
    sys.path.insert(0, HERE)
    import train_gpt

    args = train_gpt.parse_args(["--data", data, "--dropout", "0"])
    d = train_gpt.CharData(args.data, args.block_size)
    cfg = train_gpt.GPTConfig(vocab_size=d.vocab_size, dropout=0.0)
    torch.manual_seed(0)
    base = train_gpt.GPT(cfg)
    modes = {}
    for name, device, compiled in (("eager", "cpu", False), ("ember", ember.device(), False),
                                   ("compile", "cpu", True)):
        m = copy.deepcopy(base).to(device)
        opt = m.configure_optimizer(1e-3)
        modes[name] = (m, torch.compile(m) if compiled else m, opt, device)
    gen = torch.Generator().manual_seed(0)
    times = {k: [] for k in modes}
    for i in range(warmup + steps):
        x, y = train_gpt.get_batch(d.train, cfg.batch_size, cfg.block_size, gen)
        for name, (m, fwd, opt, device) in modes.items():
            t0 = time.perf_counter()
            _, loss = fwd(x.to(device), y.to(device))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()
            if i >= warmup:
                times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=20, help="steps per mode in part 1")
    p.add_argument("--interleaved", type=int, default=20, help="timed steps per mode in part 2")
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()

    import torch
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    rows = {}
    for name, mode_args in (("eager", ["--device", "cpu"]), ("ember", ["--device", "ember"]),
                            ("compile", ["--device", "cpu", "--compile"])):
        with tempfile.TemporaryDirectory() as tmp:
            rows[name] = per_process(args.data, args.steps, mode_args, tmp)
        print(name, json.dumps(rows[name]), flush=True)
    med = interleaved(args.data, args.interleaved, args.warmup)
    print("interleaved medians (s):", json.dumps(med))

    print()
    print("| mode | first step (cold compile + run) | median step, own process | "
          "median step, interleaved | vs eager (interleaved) | graphs compiled | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['first_s']:.2f} s | {r['median_s'] * 1e3:.0f} ms | "
              f"{med[name] * 1e3:.0f} ms | {med[name] / med['eager']:.2f}x | {r['graphs']} | "
              f"{r['rss_mb']:.0f} MiB |")


if __name__ == "__main__":
    main()
