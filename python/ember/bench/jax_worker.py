"""The JAX/XLA:CPU column's worker: the bench's MLP in JAX, run by a JAX environment's
Python (never imported by ember.bench; imports only numpy and jax).

    python jax_worker.py cost   --inputs F.npz --mode train|inference --startup K
                                --steady N --json OUT
    python jax_worker.py timing --inputs F.npz --mode ... --warmup K --repeats N
                                --budget S --json OUT --results OUT.npz

The workload comes from ``F.npz`` (written by ``jax_column.py`` from the torch model):
``w0, b0, w1, b1, w2, b2`` (the three ``nn.Linear`` layers' weights in torch's
``[out, in]`` layout and biases, float32), ``x`` (float32 ``[batch, in]``) and ``y``
(int64 ``[batch]``, class indices). The sizes are read from the arrays, so every bench
scale runs. The model is torch's: ``linear -> GELU (exact, erf) -> linear -> GELU ->
linear``; weights are transposed once to ``[in, out]`` at load (JAX's convention;
outside any timed region).

- **train**: one ``jax.jit`` function per step: forward, mean cross-entropy over the
  batch, ``jax.value_and_grad``, and AdamW with torch's defaults as the bench sets them
  (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 decoupled, no amsgrad),
  written out in ``jax.numpy`` after ``torch.optim.AdamW``'s update rule (Loshchilov &
  Hutter, "Decoupled Weight Decay Regularization", 2019): ``p *= 1 - lr*wd``; ``m =
  lerp(m, g, 1 - b1)``; ``v = b2*v + (1 - b2)*g*g``; ``p -= lr/(1 - b1^t) * m /
  (sqrt(v)/sqrt(1 - b2^t) + eps)``. Parameters and optimizer state are donated
  (``donate_argnums``), as a JAX training loop does, so XLA updates them in place. The
  step returns the loss of the forward (before the update), as torch's step does.
- **inference**: ``jax.jit`` of the forward, returning the logits.

A timed step is the call plus ``jax.block_until_ready`` of everything it returns (new
parameters and state included), so execution is inside the timed region; compilation
happens in the first call (the warm-up / start-up steps).

``cost`` reports what ``worker.py cost`` does (import, setup and per-step seconds, the
per-step check values: training the loss, inference the float64 L2 norm of the logits,
peak RSS from VmHWM) with XLA's persistent compilation cache in ``$EMBER_BENCH_JAX_CACHE``
(every entry cached: no minimum compile time or size). ``timing`` runs the warm-up steps
(their results go to ``--results``: ``steps``, one entry per step, for the numerics check
against eager, which the caller does; training also ``param0..param5``, the parameters
after the warm-up steps in torch's layout) and then timed steps until ``--budget`` seconds
have passed (at least 3) or ``--repeats`` are done.
"""

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

# Run as a script, this directory is sys.path[0]; its module names (profile, timing, ...)
# must not shadow the standard library's or jax's.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

# torch.optim.AdamW's defaults, with the bench's learning rate (backends.LR).
LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.999, 1e-8, 1e-2
N_LAYERS = 3


def _peak_rss_mb() -> float:
    """Peak RSS of this process image (VmHWM, MiB); see worker.py."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _setup_cache():
    import jax

    cache = os.environ.get("EMBER_BENCH_JAX_CACHE")
    if cache:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


class MLP:
    """The bench's MLP in JAX for one mode; ``step()`` returns what torch's runner returns
    (training: the scalar loss; inference: the logits) and ``block()`` waits for all of
    the last step's outputs."""

    def __init__(self, path: str, mode: str):
        import jax
        import jax.numpy as jnp
        import numpy as np

        self.jax, self.mode = jax, mode
        with np.load(path) as z:
            # [w0, b0, w1, b1, w2, b2]; weights [in, out] (torch's [out, in] transposed)
            params = []
            for i in range(N_LAYERS):
                params.append(jnp.asarray(np.ascontiguousarray(z[f"w{i}"].T)))
                params.append(jnp.asarray(z[f"b{i}"]))
            self.x = jnp.asarray(z["x"])
            self.y = jnp.asarray(z["y"].astype(np.int32))
        self.params = params

        def forward(params, x):
            for i in range(N_LAYERS):
                x = x @ params[2 * i] + params[2 * i + 1]
                if i + 1 < N_LAYERS:
                    x = jax.nn.gelu(x, approximate=False)
            return x

        def loss_fn(params, x, y):
            logp = jax.nn.log_softmax(forward(params, x), axis=-1)
            return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=-1))

        def adamw(p, g, m, v, t):
            p = p * (1.0 - LR * WEIGHT_DECAY)
            m = m + (g - m) * (1.0 - BETA1)
            v = v * BETA2 + (1.0 - BETA2) * g * g
            step_size = LR / (1.0 - BETA1**t)
            denom = jnp.sqrt(v) / jnp.sqrt(1.0 - BETA2**t) + EPS
            return p - step_size * m / denom, m, v

        def train_step(params, state, x, y):
            ms, vs, t = state
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            t = t + 1.0
            new = [adamw(*a, t) for a in zip(params, grads, ms, vs)]
            return [n[0] for n in new], ([n[1] for n in new], [n[2] for n in new], t), loss

        if mode == "train":
            zeros = [jnp.zeros_like(p) for p in params]
            self.state = (zeros, [jnp.zeros_like(p) for p in params], jnp.float32(0))
            self._train = jax.jit(train_step, donate_argnums=(0, 1))
        else:
            self._infer = jax.jit(forward)
        self._last = None

    def step(self):
        if self.mode == "train":
            self.params, self.state, loss = self._train(self.params, self.state, self.x, self.y)
            self._last = (self.params, self.state, loss)
            return loss
        out = self._infer(self.params, self.x)
        self._last = out
        return out

    def block(self):
        self.jax.block_until_ready(self._last)


def _check_value(mode, res) -> float:
    import numpy as np

    a = np.asarray(res, dtype=np.float64)
    return float(a) if mode == "train" else float(np.linalg.norm(a))


def cost(args) -> dict:
    import jax

    t_import = time.perf_counter()
    _setup_cache()
    m = MLP(args.inputs, args.mode)
    t_setup = time.perf_counter()
    rss_setup = _peak_rss_mb()
    steps, checks = [], []
    for _ in range(args.startup + args.steady):
        t0 = time.perf_counter()
        res = m.step()
        m.block()
        steps.append(time.perf_counter() - t0)
        checks.append(_check_value(args.mode, res))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "wall_s": time.perf_counter() - T_START,
        "import_s": t_import - T_START,
        "setup_s": t_setup - t_import,
        "step_s": steps,
        "checks": checks,
        "rss_after_setup_mb": rss_setup,
        "peak_rss_mb": _peak_rss_mb(),
        "jax_version": jax.__version__,
    }


def timing(args) -> dict:
    import jax
    import numpy as np

    _setup_cache()
    m = MLP(args.inputs, args.mode)
    results = []
    for _ in range(args.warmup):
        res = m.step()
        m.block()
        results.append(np.asarray(res))
    # Training: the parameters after the warm-up steps (copied to the host before the
    # timed steps donate them), in torch's layout: [w0, b0, ...] with w [out, in].
    params = {}
    if args.mode == "train":
        for i, p in enumerate(m.params):
            params[f"param{i}"] = np.asarray(p).T if i % 2 == 0 else np.asarray(p)
    times = []
    t_loop = time.perf_counter()
    for i in range(args.repeats):
        if args.budget is not None and i >= 3 and time.perf_counter() - t_loop > args.budget:
            break
        t0 = time.perf_counter()
        m.step()
        m.block()
        times.append(time.perf_counter() - t0)
    np.savez(args.results, steps=np.stack(results), **params)
    return {
        "timing": {
            "status": "ok",
            "times": times,
            "median_s": statistics.median(times) if times else None,
            "min_s": min(times) if times else None,
            "max_s": max(times) if times else None,
        },
        "jax_version": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "peak_rss_mb": _peak_rss_mb(),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description="ember.bench JAX/XLA:CPU worker (the MLP)")
    p.add_argument("what", choices=("cost", "timing"))
    p.add_argument("--inputs", required=True, help=".npz of weights and inputs")
    p.add_argument("--mode", required=True, choices=("train", "inference"))
    p.add_argument("--startup", type=int, default=3)
    p.add_argument("--steady", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--budget", type=float, default=None)
    p.add_argument("--results", help="timing: .npz for the warm-up steps' results")
    p.add_argument("--json", required=True)
    args, _ = p.parse_known_args(argv)  # cost.measure's --model/--backend/--scale: unused
    try:
        out = cost(args) if args.what == "cost" else timing(args)
        out["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - reported to the parent as this run's status
        import traceback

        out = {
            "status": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
            if str(e)
            else f"failed: {type(e).__name__}",
            "traceback": traceback.format_exc()[-4000:],
        }
    tmp = args.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
