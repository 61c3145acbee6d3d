"""Runtime switches. Assign attributes: ``ember.config.max_pending_ops = 50_000``."""

import os as _os
import sys as _sys
import types as _types

from . import _C

_DEFAULTS = {
    # Sync after every optimizer.step() (switchable).
    "sync_on_optimizer_step": True,
    # Sync when a backward ends while an earlier backward's work is still pending
    # (gradient accumulation): a graph then holds at most two micro-batches, so memory
    # and compile time do not grow with the number of micro-batches.
    "sync_on_accumulate": True,
    # Sync early (with a one-time warning) when this many ops are pending; 0 disables.
    "max_pending_ops": 100_000,
    # Warn once when one call site has compiled more distinct graphs than this.
    "recompile_warn_limit": 8,
    # Record the Python source line of every traced op (for errors and debug dumps).
    "record_source": True,
    # Log (logger "ember", INFO) one line per recompile of a call site.
    "log_recompiles": True,
    # How a graph runs (docs/architecture.md, "Lowering"): "cpu" (lowered to the core IR,
    # fused, native kernels), "interpreter" (lowered, run by the reference interpreter:
    # no C++ compiler; fast for sweeps) or "aten" (one ATen kernel per op: the oracle).
    # Initial value: $EMBER_BACKEND, else "cpu".
    "backend": _os.environ.get("EMBER_BACKEND") or "cpu",
    # Lowered backends: a sync that replaces a device buffer no live tensor refers to
    # (a parameter, gradient or optimizer state updated in place) writes the new value
    # into it (donation; docs/architecture.md, "Donation"). False: every new value gets
    # a buffer of its own.
    "donate_buffers": True,
    # Run the backward of ember tensors on the calling thread (autograd's multithreading
    # off for that call), as PyTorch does for its own lazy device, instead of handing it
    # to autograd's per-device worker thread and waiting: tracing a backward needs no
    # device thread, and the handoff costs two thread wake-ups per backward
    # (docs/performance.md, "Fixed cost per step").
    "backward_on_calling_thread": True,
    # Asynchronous execution (docs/architecture.md, "Execution model"): True: a sync
    # queues its program and returns, so Python traces the next step while this one
    # runs; reading a value waits for the program that produces it. False runs each
    # program inside its sync (debugging). "auto" (default): asynchronous when the
    # machine has a CPU beyond torch.get_num_threads() for Python to trace on; otherwise a
    # program whose last run took under 10 ms runs inside its sync, since the tracer
    # and the program's threads would contend for the CPUs ("Threads on 2 cores").
    # The same values and bits in every mode.
    "async_execution": "auto",
    # Shape bucketing (docs/architecture.md, "Recompiles"): None (default) or ascending
    # lengths, e.g. [64, 128, 256, 512]. When a graph recompiles because input dims
    # changed size (a sequence length), those dims are padded up to the next bucket and
    # the graph runs on a program compiled once per bucket, provided every op reading the
    # padded dim is pad-safe (src/passes/pad_dimensions.h); otherwise the exact shape is
    # compiled and EMBER_LOG=recompile says why. Results match the unpadded program
    # within float tolerance, not bit for bit. A length above the largest bucket
    # compiles exactly.
    "shape_buckets": None,
}
_NATIVE = {
    "max_pending_ops",
    "recompile_warn_limit",
    "record_source",
    "log_recompiles",
    "backend",
    "donate_buffers",
    "async_execution",
    "shape_buckets",
}


def _check_buckets(value):
    if value is None:
        return None
    try:
        if isinstance(value, (str, bytes)):
            raise TypeError
        sizes = [int(v) for v in value]
    except (TypeError, ValueError):
        raise TypeError(
            f"ember.config.shape_buckets must be None or a list of lengths, got {value!r}"
        ) from None
    if any(s < 2 for s in sizes) or sizes != sorted(set(sizes)):
        raise ValueError(
            "ember.config.shape_buckets must be ascending lengths of at least 2, "
            f"got {list(value)!r}"
        )
    return sizes


class _Config(_types.ModuleType):
    def __setattr__(self, name, value):
        if name == "shape_buckets":
            value = _check_buckets(value)
        if name in _NATIVE:
            _C.set_config(name, value)
        elif name not in _DEFAULTS and not name.startswith("_"):
            raise AttributeError(f"unknown ember config option {name!r}")
        super().__setattr__(name, value)


_mod = _sys.modules[__name__]
_mod.__class__ = _Config
for _k, _v in _DEFAULTS.items():
    setattr(_mod, _k, _v)
