"""Attention alone at the bench's shapes: ember's ``scaled_dot_product_attention`` against
eager's CPU SDPA (which picks ATen's flash kernel) and ATen's
``_scaled_dot_product_flash_attention_for_cpu`` (and its backward) called directly,
interleaved in one process.

Shapes (batch, heads, length, head dim; f32) are those of the bench's models at full
scale: ``gpt`` (examples/train_gpt.py: causal), ``gpt2`` (HF GPT-2: causal) and ``bert``
(HF BERT: no mask). A round runs each variant ``--reps`` times in an order rotated by the
round. q, k, v are contiguous; in ``fwd+bwd`` they are leaves whose gradients
(laid out [B, T, H, E] by the flash kernels) ``AccumulateGrad`` copies, in both eager
and ember (in the models the gradients flow on through a transpose instead). ``ember
flash`` is ember's default (ATen's CPU flash kernel as an extern),
``ember composite`` the lowered composite (``sdpa_kernel([OVERRIDEABLE])``, the
path before it); ``fwd`` is the forward alone, ``fwd+bwd`` the forward and ``backward`` of a
random output gradient (ember: one sync after the backward, which waits for
the result). Figures are the medians over rounds of time per call, and each variant's
ratio to eager, taken round by round (paired median). Quote the load (printed).

    python bench/attention.py [--rounds 15] [--reps 10] [--shapes gpt,gpt2,bert]
    python bench/attention.py --models gpt,gpt2,bert [--mode train] [--rounds 9] [--reps 2]

With ``--models``, whole steps of the bench's models (full scale; ``ember.bench``'s
runners): eager, ember with flash attention (the default) and ember with the
composite (``sdpa_kernel`` around each step), interleaved the same way.
"""

import argparse
import os
import statistics
import time

SHAPES = {
    "gpt": (32, 4, 128, 32, True),
    "gpt2": (8, 4, 128, 32, True),
    "bert": (8, 4, 128, 32, False),
}


def variants(shape, backward):
    import ember
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import torch

    b, h, t, e, causal = shape
    g = torch.Generator().manual_seed(0)
    cpu = [torch.randn(b, h, t, e, generator=g) for _ in range(3)]
    go = torch.randn(b, h, t, e, generator=g)
    dev = ember.device()

    def eager():
        q, k, v = [x.detach().requires_grad_(backward) for x in cpu]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if backward:
            o.backward(go)
        return o

    def aten():
        q, k, v = cpu
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
        if backward:
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                go, q, k, v, o, lse, 0.0, causal
            )
        return o

    dq = [x.to(dev) for x in cpu]
    dgo = go.to(dev)

    def on_ember(backends):
        def run():
            q, k, v = [x.detach().requires_grad_(backward) for x in dq]
            with sdpa_kernel(backends):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            if backward:
                o.backward(dgo)
            ember.sync()
            return o

        return run

    return {
        "eager": eager,
        "aten flash": aten,
        "ember flash": on_ember([SDPBackend.OVERRIDEABLE, SDPBackend.FLASH_ATTENTION]),
        "ember composite": on_ember([SDPBackend.OVERRIDEABLE]),
    }


def measure(shape, backward, rounds, reps):
    fns = variants(shape, backward)
    names = list(fns)
    for _ in range(3):
        for f in fns.values():
            f()
    times = {n: [] for n in names}
    for i in range(rounds):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            t0 = time.perf_counter()
            for _ in range(reps):
                fns[n]()
            times[n].append((time.perf_counter() - t0) / reps)
    return times


def measure_models(names, mode, rounds, reps):
    """Whole steps of the bench's models (full scale): eager, ember (flash attention, the
    default) and ember with the composite (sdpa_kernel([OVERRIDEABLE]) around each
    step), interleaved; {variant: [seconds per step per round]}."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ember.bench import backends, models

    out = {}
    for name in names:
        w = models.build(name, "full")
        eager = backends.make_runner("eager", w, mode)
        emb = backends.make_runner("ember", w, mode)
        flash = [SDPBackend.OVERRIDEABLE, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]
        composite = [SDPBackend.OVERRIDEABLE, SDPBackend.MATH]
        variants = {
            "eager": (eager, flash),
            "ember flash": (emb, flash),
            "ember composite": (emb, composite),
        }
        for r, kinds in list(variants.values()) * 3:  # warm-up: every graph compiled
            with sdpa_kernel(kinds):
                r.step()
            r.finish()
        times = {n: [] for n in variants}
        names_v = list(variants)
        for i in range(rounds):
            k = i % len(names_v)
            for n in names_v[k:] + names_v[:k]:
                r, kinds = variants[n]
                t0 = time.perf_counter()
                with sdpa_kernel(kinds):
                    for _ in range(reps):
                        r.step()
                r.finish()
                times[n].append((time.perf_counter() - t0) / reps)
        out[name] = times
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--shapes", default="gpt,gpt2,bert")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    ap.add_argument(
        "--models",
        default="",
        help="instead of attention alone: whole steps of these bench models (gpt,gpt2,bert)",
    )
    ap.add_argument("--mode", default="train", help="with --models: train or inference")
    a = ap.parse_args()
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    import torch

    print(f"load average at start: {os.getloadavg()}, threads {torch.get_num_threads()}")
    if a.models:
        res = measure_models(a.models.split(","), a.mode, a.rounds, a.reps)
        for name, times in res.items():
            row = [f"{name:5s} {a.mode}"]
            for n, ts in times.items():
                ratio = statistics.median(x / y for x, y in zip(ts, times["eager"]))
                vs_c = statistics.median(x / y for x, y in zip(ts, times["ember composite"]))
                row.append(
                    f"{n} {statistics.median(ts) * 1e3:7.2f} ms ({ratio:.2f}x eager, "
                    f"{vs_c:.2f}x composite)"
                )
            print(" | ".join(row), flush=True)
        print(f"load average at end: {os.getloadavg()}")
        return
    for name in a.shapes.split(","):
        shape = SHAPES[name]
        for backward in (False, True):
            times = measure(shape, backward, a.rounds, a.reps)
            mode = "fwd+bwd" if backward else "fwd"
            row = [f"{name:5s} {shape[:4]!s:18s} causal={int(shape[4])} {mode:8s}"]
            for n, ts in times.items():
                ratio = statistics.median(x / y for x, y in zip(ts, times["eager"]))
                row.append(f"{n} {statistics.median(ts) * 1e3:7.3f} ms ({ratio:.2f}x eager)")
            print(" | ".join(row), flush=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
