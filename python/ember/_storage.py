"""Storage-level access to ember tensors raises a clear error.

An ember tensor's values live in the lazy runtime (a pending graph value, or a device
buffer owned by the runtime), not in the tensor's storage: PyTorch's functionalization
wrapper gives each ember tensor a storage object without addressable data. Metadata
queries on it (``nbytes()``, ``size()``, ``device``, ``is_shared()``) work; every
operation that needs the bytes (``t.untyped_storage().cpu()``, ``tolist()``, indexing,
``copy_``, ``data_ptr()``, ``clone()``, deepcopy, pickling, ``t.storage()``) raises a
``RuntimeError`` naming the tensor-level equivalent, instead of PyTorch's internal
"invalid python storage" / device-mismatch errors.
"""

import functools

import torch

_HINT = (
    "ember: {what} is not supported for ember tensors: their values live in ember's lazy "
    "runtime, not in an addressable storage. Use tensor-level access instead: "
    "t.cpu() / t.tolist() / t.numpy() for values (t.cpu().untyped_storage() for a CPU "
    "storage), t.clone() to copy, torch.save(t) / pickle / copy.deepcopy(t) to serialize."
)

# UntypedStorage operations that need the storage's bytes.
_DATA_METHODS = (
    "__getitem__",
    "__setitem__",
    "__iter__",
    "__copy__",
    "__deepcopy__",
    "__reduce__",
    "copy_",
    "data_ptr",
    "clone",
    "tolist",
    "cpu",
    "to",
    "_to",
    "fill_",
    "pin_memory",
    "share_memory_",
    "resize_",
    "byteswap",
    "_byteswap",
    "_write_file",
    "mps",
    "hpu",
    "cuda",
)


def _is_ember(storage) -> bool:
    try:
        return storage.device.type == "ember"
    except Exception:  # noqa: BLE001 - a storage without a device is not ours
        return False


def _guard(name, orig):
    @functools.wraps(orig)
    def method(self, *args, **kwargs):
        if _is_ember(self):
            raise RuntimeError(_HINT.format(what=f"UntypedStorage.{name}()"))
        return orig(self, *args, **kwargs)

    return method


def _guard_tensor_storage(orig):
    @functools.wraps(orig)
    def storage(self, *args, **kwargs):
        if self.device.type == "ember":
            raise RuntimeError(_HINT.format(what="Tensor.storage() (a TypedStorage)"))
        return orig(self, *args, **kwargs)

    return storage


def install():
    cls = torch.UntypedStorage
    for name in _DATA_METHODS:
        orig = getattr(cls, name, None)
        if orig is None or getattr(orig, "_ember_guard", False):
            continue
        guarded = _guard(name, orig)
        guarded._ember_guard = True
        setattr(cls, name, guarded)
    if not getattr(torch.Tensor.storage, "_ember_guard", False):
        guarded = _guard_tensor_storage(torch.Tensor.storage)
        guarded._ember_guard = True
        torch.Tensor.storage = guarded
