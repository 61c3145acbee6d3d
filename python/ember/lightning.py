"""PyTorch Lightning on the ember device: ``lightning.Trainer(accelerator="ember")``.

``import ember`` registers the accelerator "ember" in Lightning's ``AcceleratorRegistry``
as soon as ``lightning.pytorch`` is imported (a post-import hook: ``import ember`` does
not import Lightning); importing this module registers it at once. Nothing of Lightning
is patched. Supported: Lightning 2.6 (``lightning`` package, ``lightning.pytorch``),
``devices=1``, the default ``strategy="auto"`` (or ``SingleDeviceStrategy``), and every
precision Lightning offers that autocast supports on ember: ``"32-true"``,
``"bf16-mixed"``, ``"16-mixed"``, ``"bf16-true"``, ``"16-true"``, ``"64-true"``.

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

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.accelerators import Accelerator, AcceleratorRegistry
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.strategies import SingleDeviceStrategy
from lightning.pytorch.utilities.rank_zero import rank_zero_info

import ember

__all__ = ["EmberAccelerator", "register"]

_ONE_DEVICE = (1, "1", "auto", -1, "-1", [0], (0,), "0,")


class EmberAccelerator(Accelerator):
    """Lightning's accelerator for ``ember:0`` (see the module docstring for what it
    adjusts in the strategy and precision plugin Lightning chose)."""

    def setup_device(self, device: torch.device) -> None:
        # Lightning calls this before `setup` with the strategy's root device, which is
        # still the CPU on the first run of a strategy="auto" Trainer.
        if device.type not in ("ember", "cpu"):
            raise MisconfigurationException(f"accelerator='ember' got device {device}")

    def setup(self, trainer) -> None:
        retarget(trainer.strategy)

    def get_device_stats(self, device) -> dict:
        """``DeviceStatsMonitor``'s figures: ember's allocator statistics in bytes."""
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
        raise MisconfigurationException(
            f"accelerator='ember' runs on one device per process (devices=1); got "
            f"devices={devices!r}. Several ranks on ember need torch.distributed on the "
            "ember device, which is not supported yet."
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


def retarget(strategy) -> None:
    """Puts the strategy Lightning built for ``accelerator="ember"`` on ember:0 and points
    a ``MixedPrecision`` plugin built for CUDA at ember (module docstring). Idempotent.

    Raises ``MisconfigurationException`` for a strategy other than single-device, or a
    single-device strategy on a device other than cpu/ember."""
    if not isinstance(strategy, SingleDeviceStrategy):
        raise MisconfigurationException(
            f"accelerator='ember' supports the single-device strategy only (strategy='auto' "
            f"with devices=1); got {type(strategy).__name__}"
        )
    root = strategy.root_device
    if root.type == "cpu":
        # Lightning's strategy="auto" choice for an accelerator it does not know.
        strategy._root_device = ember.device()
        rank_zero_info(f"ember: {type(strategy).__name__} runs on {ember.device()}")
    elif root.type != "ember":
        raise MisconfigurationException(
            f"accelerator='ember' with a {type(strategy).__name__} on {root}: use ember:0"
        )
    plugin = strategy.precision_plugin
    if isinstance(plugin, MixedPrecision) and plugin.device != "ember":
        plugin.device = "ember"
        if plugin.precision == "16-mixed" and (
            plugin.scaler is None or not plugin.scaler.is_enabled()
        ):
            plugin.scaler = torch.amp.GradScaler("ember")


def register() -> None:
    """Registers "ember" in ``lightning.pytorch.accelerators.AcceleratorRegistry``
    (idempotent; ``import ember`` arranges it when Lightning is imported)."""
    if EmberAccelerator.name() not in AcceleratorRegistry:
        EmberAccelerator.register_accelerators(AcceleratorRegistry)


register()
