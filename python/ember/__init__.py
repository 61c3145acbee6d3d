"""Ember: lazy-tensor execution for PyTorch on the ``ember`` device.

``import ember`` registers PyTorch's PrivateUse1 backend under the name ``ember``.
Ops on ember tensors are recorded, not run; a sync (``ember.sync()``, a value read such
as ``.item()``/``.cpu()``/``print``, or ``optimizer.step()``) runs all pending work of all
live tensors as one cached program.
"""

import atexit as _atexit
import logging as _logging
import os as _os
import warnings as _warnings

import torch as _torch

# Development: EMBER_BUILD_DIR=<cmake build dir>/src/torch loads the extension from an
# incremental CMake build instead of an installed wheel.
if _os.environ.get("EMBER_BUILD_DIR"):
    __path__.append(_os.path.abspath(_os.environ["EMBER_BUILD_DIR"]))  # noqa: F821

from . import _C  # noqa: E402

# The version is decided in pyproject.toml ([project] version); CMake compiles it into the
# extension (include/ember/version.h), so this is the version of the C++ code loaded.
__version__ = _C.__version__
SUPPORTED_TORCH = ("2.13",)

_log = _logging.getLogger("ember")


def _warn(msg):
    _warnings.warn(msg, RuntimeWarning, stacklevel=2)


def _log_event(kind, msg):
    _log.info(msg)


_C._init(
    [_os.path.dirname(_torch.__file__) + _os.sep, _os.path.dirname(__file__) + _os.sep],
    _warn,
    _log_event,
)

from . import _device_module  # noqa: E402
from . import config  # noqa: E402
from . import data  # noqa: E402
from . import metrics  # noqa: E402
from .memory import (  # noqa: E402
    max_memory_allocated,
    memory_allocated,
    memory_stats,
    memory_summary,
    reset_peak_memory_stats,
)

if _torch._C._get_privateuse1_backend_name() != "ember":
    _torch.utils.rename_privateuse1_backend("ember")
    _torch._register_device_module("ember", _device_module)
    _torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )

from ._device_module import (  # noqa: E402
    device_count,
    get_rng_state,
    initial_seed,
    is_available,
    manual_seed,
    manual_seed_all,
    seed,
    set_rng_state,
    synchronize,
)
from . import _hooks  # noqa: E402,F401  (optimizer-step sync)
from . import serialization as _serialization  # noqa: E402
from . import _storage  # noqa: E402
from . import _fake  # noqa: E402  (FakeTensors of ember tensors)
from . import dynamo  # noqa: E402  (torch.compile(backend="ember"))
from . import _post_import  # noqa: E402
from . import checkpoint  # noqa: E402  (torch.utils.checkpoint's recompute kept apart)
from . import distributed  # noqa: E402  (c10d backend "ember", collectives on ember tensors)
from .exporting import export  # noqa: E402  (artifacts for ember::LoadModel)
from .export_stablehlo import export_stablehlo  # noqa: E402  (StableHLO MLIR text)
from . import quantize  # noqa: E402  (ember.quantize(model, scheme): callable module)
from .buckets import pad_to_bucket  # noqa: E402  (a varying dim padded to a few sizes)

# Programs still queued at interpreter exit run to completion (a pending torch.save's
# values included) before the process ends.
_atexit.register(_C.shutdown_queue)

_serialization.install()
_storage.install()
_fake.install()
dynamo.install()
checkpoint.install()
distributed.install()


def _register_lightning(package):
    """``Trainer(accelerator="ember")``: ember.lightning registers the accelerator in
    Lightning's registry, right after Lightning (`package`) is imported."""

    def register():
        try:
            from . import lightning

            lightning.register(package)
        except Exception as e:  # a Lightning ember does not know: say so, never break it
            _warnings.warn(
                f"ember: the accelerator was not registered with {package}: {e}", RuntimeWarning
            )

    _post_import.when_imported(package, register)


for _package in ("lightning.pytorch", "pytorch_lightning"):
    _register_lightning(_package)


def device(index: int = 0) -> _torch.device:
    """The ember device, ``torch.device("ember:0")``."""
    if index != 0:
        raise ValueError(f"ember has one device (ember:0); got index {index}")
    return _torch.device("ember", index)


def sync(wait: bool = True) -> None:
    """Run all pending work of all live ember tensors as one graph.

    With ``wait`` (the default) it returns once every program queued so far has run, so
    the time of ``step(); ember.sync()`` is the step's execution; ``wait=False`` only
    queues the program (what ``optimizer.step()`` does under asynchronous execution,
    ``ember.config.async_execution``). Raises the error of a queued program that nothing
    has raised yet (eager's exception type, naming the op and the traced line)."""
    _C.sync("ember.sync()", wait)


def pending_graph() -> str:
    """The lazy IR that the next sync would run (for debugging)."""
    return _C.pending_graph_text()


__all__ = [
    "device",
    "sync",
    "metrics",
    "config",
    "memory_allocated",
    "max_memory_allocated",
    "reset_peak_memory_stats",
    "memory_stats",
    "memory_summary",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
    "device_count",
    "is_available",
    "synchronize",
    "pending_graph",
    "data",
    "export",
    "export_stablehlo",
    "quantize",
    "pad_to_bucket",
]


def _install_repr():
    """print(t) of an ember tensor: one transfer to the host, formatted like eager
    (torch would otherwise print the functionalization wrapper)."""
    import torch._tensor_str as ts

    orig = ts._str

    def _str(self, *, tensor_contents=None):
        if self.device.type != "ember" or not _torch._is_functional_tensor(self):
            return orig(self, tensor_contents=tensor_contents)
        with _torch.no_grad():
            host = self.detach().to("cpu")
        s = orig(host, tensor_contents=tensor_contents)
        extra = [f"device='{self.device}'"]
        if self.grad_fn is not None:
            extra.append(f"grad_fn=<{type(self.grad_fn).__name__}>")
        elif self.requires_grad:
            extra.append("requires_grad=True")
        dev = extra.pop(0)
        body = s[:-1]
        cut = body.find(", dtype=")  # eager order: device=..., dtype=..., grad_fn=...
        if cut < 0:
            body = body + ", " + dev
        else:
            body = body[:cut] + ", " + dev + body[cut:]
        return body + "".join(", " + e for e in extra) + ")"

    ts._str = _str


_install_repr()
