"""The machine's ceilings, measured in the benchmark's own process and run.

- ``triad()``: STREAM triad bandwidth (McCalpin, "Memory Bandwidth and Machine Balance
  in Current High Performance Computers", 1995; the kernel ``a[i] = b[i] + s*c[i]``) with
  ATen's threaded CPU kernel ``torch.add(b, c, alpha=s, out=a)`` on float32 arrays of
  2^25 elements (128 MiB each, far above any cache). Bytes counted as STREAM does: three
  arrays (two reads, one write; no write-allocate traffic). Best of ``reps``.
- ``gemm()``: ATen float32 GEMM throughput, ``torch.mm`` of two n x n matrices (n = 2048),
  counted as 2 n^3 floating-point operations. Best of ``reps``.

Both run on torch's intra-op thread pool (``torch.get_num_threads()`` threads), the pool
eager and Inductor use. Returns plain dicts (units in the key names).
"""

from __future__ import annotations

import time

import torch


def triad(n: int = 1 << 25, reps: int = 10) -> dict:
    """{"triad_gb_per_s": best GB/s (1e9 bytes), "triad_median_gb_per_s", "elements"}."""
    b = torch.rand(n)
    c = torch.rand(n)
    a = torch.empty(n)
    a.zero_()  # first touch outside the timed loop
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        times.append(time.perf_counter() - t0)
    nbytes = 3 * n * a.element_size()
    times.sort()
    return {
        "triad_gb_per_s": nbytes / times[0] / 1e9,
        "triad_median_gb_per_s": nbytes / times[len(times) // 2] / 1e9,
        "elements": n,
    }


def gemm(n: int = 2048, reps: int = 5) -> dict:
    """{"gemm_gflop_per_s": best GFLOP/s, "gemm_median_gflop_per_s", "n"}."""
    x = torch.rand(n, n)
    y = torch.rand(n, n)
    out = torch.empty(n, n)
    torch.mm(x, y, out=out)  # warm-up (packing buffers, threads)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(x, y, out=out)
        times.append(time.perf_counter() - t0)
    times.sort()
    flops = 2.0 * n**3
    return {
        "gemm_gflop_per_s": flops / times[0] / 1e9,
        "gemm_median_gflop_per_s": flops / times[len(times) // 2] / 1e9,
        "n": n,
    }


def measure(quick: bool = False) -> dict:
    """Both ceilings (smaller/fewer repetitions when `quick`)."""
    t = triad(1 << (23 if quick else 25), 5 if quick else 10)
    g = gemm(1024 if quick else 2048, 3 if quick else 5)
    return {
        "triad_gb_per_s": t["triad_gb_per_s"],
        "triad_median_gb_per_s": t["triad_median_gb_per_s"],
        "triad_elements": t["elements"],
        "gemm_gflop_per_s": g["gemm_gflop_per_s"],
        "gemm_median_gflop_per_s": g["gemm_median_gflop_per_s"],
        "gemm_n": g["n"],
        "threads": torch.get_num_threads(),
    }
