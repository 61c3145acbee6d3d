"""PyTorch Lightning on the ember device: ``lightning.Trainer(accelerator="ember")``.

``import ember`` registers the accelerator "ember" in Lightning's ``AcceleratorRegistry``
as soon as Lightning is imported, under either package name: ``lightning.pytorch`` (the
``lightning`` package) and ``pytorch_lightning`` (a post-import hook each: ``import
ember`` does not import Lightning). ``register(package)`` does it at once. Nothing of
Lightning is patched. Supported: Lightning 2.6, ``devices=1``, the default
``strategy="auto"`` (or a ``SingleDeviceStrategy``), and every precision Lightning
offers that autocast supports on ember: ``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``,
``"bf16-true"``, ``"16-true"``, ``"64-true"``.

What the accelerator does beyond naming the device, and why (Lightning 2.6 source,
``trainer/connectors/accelerator_connector.py``):

- ``strategy="auto"`` picks ``SingleDeviceStrategy(device="cpu")`` for any accelerator
  that is not CUDA, MPS or XLA, so the model would train on the CPU. Lightning offers no
  hook for the automatic strategy choice; the accelerator's ``setup(trainer)`` hook runs
  first in ``Strategy.setup`` (before the model moves), and there it sets that
  strategy's root device to ``ember:0``. Any other strategy, or a single-device strategy
  on a third device, raises ``MisconfigurationException``.
- ``precision="bf16-mixed"``/``"16-mixed"`` build ``MixedPrecision(device="cuda")``,
  whose ``torch.autocast("cuda")`` does not apply to ember tensors (the step would run in
  float32), and for ``"16-mixed"`` a CUDA ``GradScaler`` that disables itself without
  CUDA (torch warns when the Trainer is built). ``setup`` points the plugin's public
  ``device`` at ``"ember"`` and gives ``"16-mixed"`` an enabled
  ``torch.amp.GradScaler("ember")``. Master weights stay float32 (autocast casts per op).
- ``devices`` other than 1 (``strategy="ddp"``) raise: ember has one device per
  process until torch.distributed runs on it.

Lightning's ``Fabric`` keeps a registry of its own and has no setup hook on its
accelerator; it is not covered (``Fabric(accelerator="ember")`` raises Lightning's
"invalid accelerator name" error).
"""

from __future__ import annotations

import importlib

import torch

import ember

__all__ = ["PACKAGES", "accelerator", "register"]

# Lightning's package names -> the Fabric package each builds on.
PACKAGES = {"lightning.pytorch": "lightning.fabric", "pytorch_lightning": "lightning_fabric"}

_ONE_DEVICE = (1, "1", "auto", -1, "-1", [0], (0,), "0,")
_classes = {}


def accelerator(package: str = "lightning.pytorch"):
    """The ``EmberAccelerator`` class for Lightning package ``package`` (one of
    ``PACKAGES``; each has its own Accelerator base class). Imports that package."""
    if package not in _classes:
        _classes[package] = _define(package)
    return _classes[package]


def _define(package):
    pl_accelerators = importlib.import_module(f"{package}.accelerators")
    MixedPrecision = importlib.import_module(f"{package}.plugins.precision").MixedPrecision
    SingleDeviceStrategy = importlib.import_module(f"{package}.strategies").SingleDeviceStrategy
    rank_zero_info = importlib.import_module(f"{package}.utilities.rank_zero").rank_zero_info
    Misconfiguration = importlib.import_module(
        f"{PACKAGES[package]}.utilities.exceptions"
    ).MisconfigurationException

    def retarget(strategy) -> None:
        """Puts the strategy Lightning built for ``accelerator="ember"`` on ember:0 and
        points a ``MixedPrecision`` plugin built for CUDA at ember (module docstring).
        Idempotent. Raises ``MisconfigurationException`` for a strategy other than
        single-device, or a single-device strategy on a device other than cpu/ember."""
        if not isinstance(strategy, SingleDeviceStrategy):
            raise Misconfiguration(
                "accelerator='ember' supports the single-device strategy only "
                f"(strategy='auto' with devices=1); got {type(strategy).__name__}"
            )
        root = strategy.root_device
        if root.type == "cpu":
            # Lightning's strategy="auto" choice for an accelerator it does not know.
            strategy._root_device = ember.device()
            rank_zero_info(f"ember: {type(strategy).__name__} runs on {ember.device()}")
        elif root.type != "ember":
            raise Misconfiguration(
                f"accelerator='ember' with a {type(strategy).__name__} on {root}: use ember:0"
            )
        plugin = strategy.precision_plugin
        if isinstance(plugin, MixedPrecision) and plugin.device != "ember":
            plugin.device = "ember"
            scaler = plugin.scaler
            if plugin.precision == "16-mixed" and (scaler is None or not scaler.is_enabled()):
                plugin.scaler = torch.amp.GradScaler("ember")

    class EmberAccelerator(pl_accelerators.Accelerator):
        """Lightning's accelerator for ``ember:0`` (see ``ember.lightning``'s docstring
        for what it adjusts in the strategy and precision plugin Lightning chose)."""

        def setup_device(self, device: torch.device) -> None:
            # Lightning calls this before `setup` with the strategy's root device, which
            # is still the CPU on the first run of a strategy="auto" Trainer.
            if device.type not in ("ember", "cpu"):
                raise Misconfiguration(f"accelerator='ember' got device {device}")

        def setup(self, trainer) -> None:
            retarget(trainer.strategy)

        def get_device_stats(self, device) -> dict:
            """``DeviceStatsMonitor``'s figures: ember's allocator statistics, bytes."""
            return {
                "memory_allocated": ember.memory_allocated(),
                "max_memory_allocated": ember.max_memory_allocated(),
            }

        def teardown(self) -> None:
            pass

        @staticmethod
        def parse_devices(devices) -> int:
            if devices in _ONE_DEVICE:
                return 1
            raise Misconfiguration(
                f"accelerator='ember' runs on one device per process (devices=1); got "
                f"devices={devices!r}. Several ranks on ember need torch.distributed on "
                "the ember device, which is not supported yet."
            )

        @staticmethod
        def get_parallel_devices(devices) -> list:
            return [ember.device()]

        @staticmethod
        def auto_device_count() -> int:
            return 1

        @staticmethod
        def is_available() -> bool:
            return True

        @staticmethod
        def name() -> str:
            return "ember"

        @classmethod
        def register_accelerators(cls, accelerator_registry) -> None:
            accelerator_registry.register(
                cls.name(), cls, description="ember lazy-tensor device (ember.lightning)"
            )

    EmberAccelerator.__qualname__ = EmberAccelerator.__name__
    EmberAccelerator.__module__ = __name__
    EmberAccelerator.retarget = staticmethod(retarget)
    return EmberAccelerator


def register(package: str = "lightning.pytorch") -> None:
    """Registers "ember" in ``<package>.accelerators.AcceleratorRegistry`` (idempotent;
    ``import ember`` arranges it when the package is imported)."""
    cls = accelerator(package)
    registry = importlib.import_module(f"{package}.accelerators").AcceleratorRegistry
    if cls.name() not in registry:
        cls.register_accelerators(registry)


def __getattr__(name):
    if name == "EmberAccelerator":  # the lightning.pytorch one
        return accelerator("lightning.pytorch")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
