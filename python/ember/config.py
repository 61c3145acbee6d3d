"""Runtime switches. Assign attributes: ``ember.config.max_pending_ops = 50_000``."""
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
}
_NATIVE = {"max_pending_ops", "recompile_warn_limit", "record_source", "log_recompiles"}


class _Config(_types.ModuleType):
    def __setattr__(self, name, value):
        if name in _NATIVE:
            _C.set_config(name, value)
        elif name not in _DEFAULTS and not name.startswith("_"):
            raise AttributeError(f"unknown ember config option {name!r}")
        super().__setattr__(name, value)


_mod = _sys.modules[__name__]
_mod.__class__ = _Config
for _k, _v in _DEFAULTS.items():
    setattr(_mod, _k, _v)
