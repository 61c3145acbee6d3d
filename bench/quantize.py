"""Quantized Linear against f32, on ember and in eager, interleaved in one process.

One ``nn.Linear(K, N)`` (default 4096x4096: 64 MiB of f32 weights, more than the L3)
at batch 1 (decode) and 32, for f32 and the schemes of ``ember.quantize``
(``int8_weight_only`` and ``int4_weight_only`` run ATen's fused
``_weight_int8pack_mm`` / ``_weight_int4pack_mm_for_cpu``, ``int8_dynamic`` the
per-row activation quantization and ``torch._int_mm``; ``/bf16``: the weight-only
schemes with ``compute_dtype=torch.bfloat16``, ATen's fast path). A round runs one call of every
variant in an order rotated by the round; ember's calls end with ``ember.sync()`` (the
program has run). Printed per batch: each variant's median time, and the medians of the
per-round ratios to ember f32 and to eager f32 (paired: same round). Also the bytes of
the weights each variant reads and the bandwidth that makes at batch 1.

    python bench/quantize.py [--k 4096] [--n 4096] [--batches 1,32] [--rounds 40]
        [--group-size 128] [--threads N] [--schemes a,b]
"""

import argparse
import os
import statistics
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument(
        "--schemes",
        default="",
        help="comma-separated subset, e.g. int8_weight_only/bf16,int8_dynamic",
    )
    args = ap.parse_args()

    import torch
    import torch.nn as nn

    import ember

    if args.threads:
        torch.set_num_threads(args.threads)
    dev = ember.device()
    ember.config.recompile_warn_limit = 64  # one call site runs every variant's program
    print(
        f"load at start: {os.getloadavg()[0]:.2f}; torch threads "
        f"{torch.get_num_threads()}; Linear({args.k}, {args.n}), {args.rounds} rounds"
    )
    torch.manual_seed(0)
    base = nn.Linear(args.k, args.n)
    schemes = [
        "f32",
        "int8_weight_only",
        "int8_weight_only/bf16",
        "int4_weight_only",
        "int4_weight_only/bf16",
        "int8_dynamic",
    ]
    if args.schemes:
        schemes = ["f32"] + [s for s in args.schemes.split(",") if s != "f32"]
    models = {}
    for s in schemes:
        for where in ("eager", "ember"):
            m = nn.Sequential(nn.Linear(args.k, args.n))
            m.load_state_dict(nn.Sequential(base).state_dict())
            m.requires_grad_(False)
            if where == "ember":
                m = m.to(dev)
            if s != "f32":
                scheme, _, cd = s.partition("/")
                ember.quantize(
                    m,
                    scheme,
                    group_size=args.group_size,
                    compute_dtype=torch.bfloat16 if cd == "bf16" else None,
                )
            models[(s, where)] = m

    def weight_bytes(m):
        return sum(
            b.numel() * b.element_size()
            for b in list(m.buffers())
            + [p for n, p in m.named_parameters() if n.endswith("weight")]
        )

    for batch in [int(b) for b in args.batches.split(",")]:
        x_cpu = torch.randn(batch, args.k)
        x_dev = x_cpu.to(dev)
        keys = list(models)
        times = {k: [] for k in keys}
        with torch.no_grad():
            # Warm-up (compiles ember's programs) and a check against eager f32.
            ref = models[("f32", "eager")](x_cpu)
            for k, m in models.items():
                for _ in range(3):
                    y = m(x_dev if k[1] == "ember" else x_cpu)
                    if k[1] == "ember":
                        ember.sync()
                err = (y.cpu() - ref).abs().max().item() / ref.abs().max().item()
                assert err < 0.2, f"{k}: relative error {err:.3g} against eager f32"
            for r in range(args.rounds):
                order = keys[r % len(keys) :] + keys[: r % len(keys)]
                for k in order:
                    m = models[k]
                    x = x_dev if k[1] == "ember" else x_cpu
                    t0 = time.perf_counter()
                    y = m(x)
                    if k[1] == "ember":
                        ember.sync()
                    times[k].append(time.perf_counter() - t0)
                    del y
        print(f"\nbatch {batch} (load {os.getloadavg()[0]:.2f})")
        print(
            f"{'variant':<28}{'median us':>10}{'/ember f32':>12}{'/eager f32':>12}"
            f"{'weight MiB':>12}{'GB/s':>8}"
        )
        for k in keys:
            med = statistics.median(times[k])
            r_em = statistics.median(a / b for a, b in zip(times[k], times[("f32", "ember")]))
            r_eg = statistics.median(a / b for a, b in zip(times[k], times[("f32", "eager")]))
            wb = weight_bytes(models[k])
            print(
                f"{k[0] + ' ' + k[1]:<28}{med * 1e6:>10.0f}{r_em:>12.3f}{r_eg:>12.3f}"
                f"{wb / 2**20:>12.1f}{wb / med / 1e9:>8.1f}"
            )
    print(f"\nload at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
