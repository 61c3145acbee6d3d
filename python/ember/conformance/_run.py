"""Running one OpInfo entry, at one dtype, in one direction, on ember and on eager CPU.

As PyTorch's own device-vs-CPU test (``TestCommon.test_compare_cpu``) does, the samples
are made on the device under test (``op.sample_inputs("ember", dtype)``, seeded, so a
sample generator decides which tensors stay on the CPU, e.g. ``tensor_split``'s
indices) and copied to the CPU; the op runs on both, both results go through the
sample's ``output_process_fn_grad`` (OpInfo's canonicalisation, e.g. SVD signs) and are
compared (``_compare``). The samples are made a second time with the same seed and the
op runs on those too: if the two ember results are not bit-identical, and two eager CPU
runs are (CPU kernels such as LAPACK's gelsy do not always repeat), the sample is
*flaky*.

Backward: samples are made with ``requires_grad=True``; every differentiable output is
given the same random cotangent on both sides and ``torch.autograd.grad`` gives the
gradients of all inputs that require grad; those are compared (an unused input's
``None`` equals zeros). Samples without a differentiable output are not counted.

The outcome of an item is ``error`` if any sample raised on ember (and not on CPU),
else ``mismatch`` if any sample differed from CPU, else ``flaky`` if the two ember runs of
any sample differed, else ``pass``. Entries whose values OpInfo itself does not compare with CPU (random output,
uninitialized memory: ``_ops.value_skip_reason``) are checked for result structure,
shapes and dtypes only and get ``skip`` when those match.
"""

import math
import time

import torch

from . import _compare
from ._ops import value_skip_reason

OUTCOMES = ("pass", "mismatch", "error", "flaky", "skip")
_MAX_MESSAGE = 400


def _message(exc):
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:_MAX_MESSAGE]


def _map(x, f):
    if isinstance(x, torch.Tensor):
        return f(x)
    if isinstance(x, list):
        return [_map(v, f) for v in x]
    if isinstance(x, tuple) and not isinstance(x, torch.Size):
        return tuple(_map(v, f) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, f) for k, v in x.items()}
    return x


def _tensors(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)) and not isinstance(x, torch.Size):
        for v in x:
            _tensors(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _tensors(v, out)
    return out


def describe(sample):
    """A short text of a sample's inputs: tensor dtypes/shapes and small values."""

    def d(x):
        if isinstance(x, torch.Tensor):
            s = f"{str(x.dtype).replace('torch.', '')}{list(x.shape)}"
            if x.layout != torch.strided:
                s += f"({str(x.layout).replace('torch.', '')})"
            elif not x.is_contiguous():
                s += f"(stride={x.stride()})"
            return s
        if isinstance(x, (list, tuple)) and not isinstance(x, torch.Size):
            inner = ", ".join(d(v) for v in x[:6]) + (", ..." if len(x) > 6 else "")
            return f"[{inner}]" if isinstance(x, list) else f"({inner})"
        if isinstance(x, dict):
            return "{" + ", ".join(f"{k}={d(v)}" for k, v in x.items()) + "}"
        return repr(x)[:40]

    parts = [d(sample.input)] + [d(a) for a in sample.args]
    parts += [f"{k}={d(v)}" for k, v in sample.kwargs.items()]
    return ", ".join(parts)[:300]


def _to_cpu(sample):
    """A CPU copy of an ember sample (what test_compare_cpu does): tensors are copied
    with their values, the same ember tensor gives the same CPU tensor, and a tensor
    that requires grad becomes a CPU leaf that requires grad. Returns (input, args,
    kwargs) and the list of (ember tensor, cpu tensor) pairs that require grad."""
    memo, leaves = {}, []

    def f(t):
        hit = memo.get(id(t))
        if hit is not None:
            return hit
        with torch.no_grad():
            c = t.detach().to("cpu")
        if t.requires_grad:
            c.requires_grad_(True)
            leaves.append((t, c))
        memo[id(t)] = c
        return c

    return (_map(sample.input, f), _map(sample.args, f), _map(sample.kwargs, f)), leaves


def _call(op, sample, inputs):
    inp, args, kwargs = inputs
    return sample.output_process_fn_grad(op(inp, *args, **kwargs))


def _own(sample):
    return (sample.input, sample.args, sample.kwargs)


def _forward(op, s1, s2):
    cpu_inputs, _ = _to_cpu(s1)
    try:
        expected = _compare.tree_to_cpu(_call(op, s1, cpu_inputs))
    except Exception as exc:  # an invalid sample: ember must raise the same kind
        expected = exc
    try:
        r1 = _compare.tree_to_cpu(_call(op, s1, _own(s1)))
    except Exception as exc:
        if isinstance(expected, Exception) and type(exc) is type(expected):
            return None, None
        return exc, None
    if isinstance(expected, Exception):
        return None, _compare.Mismatch(
            f"eager raises {_message(expected)}; ember does not", math.inf
        )
    r2 = _compare.tree_to_cpu(_call(op, s2, _own(s2)))
    if not _compare.identical(r1, r2):
        # Eager CPU itself may not repeat (e.g. LAPACK gelsy on an underdetermined
        # system): then differing ember runs are no fault of ember's.
        again, _ = _to_cpu(s2)
        if not _compare.identical(_compare.tree_to_cpu(_call(op, s2, again)), expected):
            r2 = r1
    return expected, (r1, r2)


def _grad_leaves(sample):
    ts = [t for t in _tensors(_own(sample), []) if t.requires_grad]
    return list({id(t): t for t in ts}.values())


def _grads(op, sample, inputs, leaves, cotangent_seed):
    out = _call(op, sample, inputs)
    outs = [t for t in _tensors(out, []) if t.requires_grad]
    if not outs:
        return None
    gen = torch.Generator().manual_seed(cotangent_seed)
    cots = [torch.randn(t.shape, dtype=t.dtype, generator=gen).to(t.device) for t in outs]
    grads = torch.autograd.grad(outs, leaves, cots, allow_unused=True)
    return [
        torch.zeros(leaf.shape, dtype=leaf.dtype) if g is None else g.detach().to("cpu")
        for g, leaf in zip(grads, leaves)
    ]


def _backward(op, s1, s2, seed):
    ember_leaves = _grad_leaves(s1)
    if not ember_leaves:
        return "no-grad", None
    cpu_inputs, pairs = _to_cpu(s1)
    cpu_of = {id(e): c for e, c in pairs}
    expected = _grads(op, s1, cpu_inputs, [cpu_of[id(t)] for t in ember_leaves], seed)
    if expected is None:
        return "no-grad", None
    runs = []
    for s in (s1, s2):
        try:
            got = _grads(op, s, _own(s), _grad_leaves(s), seed)
        except Exception as exc:
            return exc, None
        if got is None:
            return None, _compare.Mismatch("no ember output requires grad", math.inf)
        runs.append(got)
    return expected, tuple(runs)


def _samples(op, device, dtype, requires_grad, seed):
    torch.manual_seed(seed)  # seeds the ember generator too
    return list(op.sample_inputs(device, dtype, requires_grad=requires_grad))


def run_item(op, dtype, direction, device="ember", max_samples=None):
    """Runs one (op, dtype, direction) item; returns a JSON-able dict with ``outcome``
    (one of OUTCOMES), ``samples`` (compared), ``passed``, ``max_error`` (mismatches),
    ``message`` (the first failure: what and on which sample), ``skip_reason``,
    ``fallbacks``/``externs`` (ember op counters during the item) and ``seconds``."""
    import ember

    t0 = time.perf_counter()
    ember.sync()
    ember.metrics.clear()
    skip_reason = value_skip_reason(op)
    res = {
        "outcome": "pass",
        "samples": 0,
        "passed": 0,
        "max_error": None,
        "message": None,
        "skip_reason": skip_reason,
    }
    worst = {"error": None, "flaky": None, "mismatch": None}
    max_err = 0.0
    backward = direction == "backward"
    try:
        first = _samples(op, device, dtype, backward, 0)
        second = _samples(op, device, dtype, backward, 0)
    except Exception as exc:
        first, second = [], []
        worst["error"] = f"sample_inputs on ember: {_message(exc)}"
    if len(first) != len(second):
        worst["flaky"] = f"sample_inputs on ember gave {len(first)} then {len(second)} samples"
        first = second = []
    for i, (sample, again) in enumerate(zip(first, second)):
        if max_samples is not None and res["samples"] >= max_samples:
            break
        torch.manual_seed(1000 + i)
        try:
            if backward:
                expected, got = _backward(op, sample, again, 1000 + i)
            else:
                expected, got = _forward(op, sample, again)
        except Exception as exc:  # an ember failure outside the guarded calls
            expected, got = exc, None
        if isinstance(expected, str):  # "no-grad": not differentiable, not counted
            continue
        res["samples"] += 1
        where = f"sample {i} ({describe(sample)})"
        if isinstance(expected, Exception) and got is None:
            worst["error"] = worst["error"] or f"{where}: {_message(expected)}"
            continue
        if isinstance(got, _compare.Mismatch):
            max_err = max(max_err, got.max_error)
            worst["mismatch"] = worst["mismatch"] or f"{where}: {got}"
            continue
        if expected is None:  # both raised alike
            res["passed"] += 1
            continue
        r1, r2 = got
        atol, rtol = _compare.tolerance(op, dtype)
        try:
            _compare.compare(r1, expected, atol, rtol, values=not skip_reason)
        except _compare.Mismatch as m:
            max_err = max(max_err, m.max_error)
            worst["mismatch"] = worst["mismatch"] or f"{where}: {m}"
            continue
        finally:
            if not skip_reason and not _compare.identical(r1, r2):
                worst["flaky"] = worst["flaky"] or f"{where}: two ember runs differ"
        res["passed"] += 1
    for kind in ("error", "mismatch", "flaky"):
        if worst[kind]:
            res["outcome"] = kind
            res["message"] = worst[kind]
            break
    else:
        if skip_reason:
            res["outcome"] = "skip"
        elif res["samples"] == 0:
            res["outcome"] = "skip"
            res["skip_reason"] = "OpInfo yields no sample for this dtype/direction"
    if worst["mismatch"]:
        res["max_error"] = max_err
    c = ember.metrics.counters()
    res["fallbacks"] = dict(c.get("fallbacks", {}))
    res["externs"] = dict(c.get("externs", {}))
    res["seconds"] = round(time.perf_counter() - t0, 3)
    return res
