"""FakeTensors of ember tensors: ``torch.compile`` and ``torch.export`` of models on ember.

An ember tensor is a functionalization wrapper (``FunctionalTensorWrapper``) over the
lazy tensor, as an XLA or ``torch.lazy`` tensor is. FakeTensor's converter
(``torch._subclasses.meta_utils``) fakifies those two device types as plain tensors of
their device, but takes any other functional tensor for a functionalization layer of
its own (``torch.func.functionalize``'s) and fakifies the tensor inside it, which is
neither a leaf nor the user's tensor (its metadata check fails). Ember tensors are
fakified as XLA's are: the converter's describer sees them as plain tensors of the
ember device, so the FakeTensor has the tensor's sizes, strides, storage offset,
autograd metadata and storage (views of one base share one fake storage, as the real
ones share one storage: docs/architecture.md, "Storage").
"""

import functools

import torch

from . import _post_import

_MODULE = "torch._subclasses.meta_utils"


def _plain_for_ember(is_functional):
    @functools.wraps(is_functional)
    def check(t):
        return is_functional(t) and t.device.type != "ember"

    return check


def _patch() -> None:
    from torch._subclasses import meta_utils

    cls = meta_utils.MetaTensorDescriber
    orig = cls.describe_tensor
    if getattr(orig, "_ember_plain", False):
        return

    @functools.wraps(orig)
    def describe_tensor(self, t, *args, **kwargs):
        if t.device.type != "ember":
            return orig(self, t, *args, **kwargs)
        real = torch._is_functional_tensor
        torch._is_functional_tensor = _plain_for_ember(real)
        try:
            return orig(self, t, *args, **kwargs)
        finally:
            torch._is_functional_tensor = real

    describe_tensor._ember_plain = True
    cls.describe_tensor = describe_tensor


def install() -> None:
    """``import ember`` calls this: patch now if the converter is loaded, else on import."""
    _post_import.when_imported(_MODULE, _patch)
