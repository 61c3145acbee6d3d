"""bf16 against f32 on this CPU: ATen's GEMM (eager torch.mm) and ember's own kernels
(elementwise, row softmax, reduction: fused native kernels on the `cpu` engine), each
pair timed interleaved in one process (f32, bf16, f32, bf16, ...), medians of
`--repeats` rounds. Prints one line per case: the f32 and bf16 medians and bf16/f32.

    python bench/bf16_speed.py [--repeats 9] [--threads N] [--json out.json]

Also prints the CPU's bf16-relevant flags (/proc/cpuinfo: avx512_bf16, amx_*). Results
go to docs/performance.md ("bf16 against f32"); numbers from a loaded machine are
ratios of interleaved runs, never absolute times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return sorted(x for x in have if "bf16" in x or x.startswith("amx"))
    except OSError:
        pass
    return []


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def interleaved(fns: dict, repeats: int) -> dict:
    """name -> median seconds, the callables run in turn each round (after a warm-up)."""
    for f in fns.values():
        f()
        f()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            times[k].append(timed(f))
    return {k: statistics.median(v) for k, v in times.items()}


def gemm_cases(n: int):
    out = {}
    for dt in (torch.float32, torch.bfloat16):
        a, b = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
        out[dt] = lambda a=a, b=b: torch.mm(a, b)
    return out


def ember_cases(kind: str, rows: int, cols: int):
    import ember

    out = {}
    for dt in (torch.float32, torch.bfloat16):
        x = torch.randn(rows, cols).to(dt).to("ember")
        ember.sync()

        def run(x=x):
            if kind == "gelu":
                y = F.gelu(x) * 1.5 + x
            elif kind == "softmax":
                y = F.softmax(x, dim=-1)
            elif kind == "sum":
                y = x.sum(dim=-1)
            else:  # matmul through ember (the dot-general extern: ATen's GEMM)
                y = x @ x
            ember.sync()
            return y

        out[dt] = run
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"CPU flags: {' '.join(cpu_flags()) or '(none)'}; torch threads {torch.get_num_threads()}"
    )
    cases = [(f"ATen GEMM {n}x{n}x{n}", gemm_cases(n)) for n in (256, 1024)]
    cases += [
        ("ember gelu*1.5+x kernel 2048x2048", ember_cases("gelu", 2048, 2048)),
        ("ember row softmax kernel 2048x2048", ember_cases("softmax", 2048, 2048)),
        ("ember row sum kernel 2048x2048", ember_cases("sum", 2048, 2048)),
        ("ember matmul (extern) 1024x1024x1024", ember_cases("matmul", 1024, 1024)),
    ]
    results = []
    for name, fns in cases:
        med = interleaved(fns, args.repeats)
        f32, bf16 = med[torch.float32], med[torch.bfloat16]
        results.append({"case": name, "f32_s": f32, "bf16_s": bf16, "bf16_over_f32": bf16 / f32})
        print(
            f"{name:<40} f32 {f32 * 1e3:9.3f} ms  bf16 {bf16 * 1e3:9.3f} ms  bf16/f32 {bf16 / f32:.2f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"flags": cpu_flags(), "threads": torch.get_num_threads(), "results": results},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
