"""torch.save / torch.load / pickle / copy.deepcopy for ember tensors.

Ember tensors are pickled through their values, not their storages (like torch/xla):

* pickling (``torch.save``, ``pickle``) reduces an ember tensor to its CPU copy plus a
  rebuild function that moves it back to ember on load; so tensors that share an ember
  storage (views) are saved as separate copies and load unaliased, unlike eager's;
* a storage saved by itself (``torch.save(t.untyped_storage())``) goes through torch's
  own path and the storage methods of ``ember/_storage.py``; it loads as an ember
  storage;
* ``copy.deepcopy`` clones on the device (parameters already do);
* ``torch.load(..., map_location="ember")`` loads on the CPU and moves every tensor (and
  every storage loaded by itself) to ember, preserving aliasing between tensors that
  shared a storage in the file.
"""

import copy as _copy

import torch

_orig_reduce_ex_internal = torch.Tensor._reduce_ex_internal
_orig_deepcopy = torch.Tensor.__deepcopy__
_orig_load = torch.serialization.load


def _rebuild_from_cpu(data, requires_grad):
    t = data.to("ember")
    if requires_grad:
        t.requires_grad_(True)
    return t


def _reduce_ex_internal(self, proto):
    if self.device.type != "ember" or type(self) is not torch.Tensor:
        return _orig_reduce_ex_internal(self, proto)
    with torch.no_grad():
        host = self.detach().to("cpu")
    return (_rebuild_from_cpu, (host, self.requires_grad))


def _deepcopy(self, memo):
    if self.device.type != "ember" or type(self) is not torch.Tensor:
        return _orig_deepcopy(self, memo)
    if not self.is_leaf:
        raise RuntimeError(
            "Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
            "protocol at the moment."
        )
    if id(self) in memo:
        return memo[id(self)]
    with torch.no_grad():
        new = self.clone()
    new.requires_grad_(self.requires_grad)
    if self.grad is not None:
        new.grad = _copy.deepcopy(self.grad, memo)
    new.__dict__ = _copy.deepcopy(self.__dict__, memo)
    memo[id(self)] = new
    return new


def _is_ember_location(loc):
    if isinstance(loc, str):
        return loc.split(":")[0] == "ember"
    if isinstance(loc, torch.device):
        return loc.type == "ember"
    return False


def _to_ember(obj, groups):
    if isinstance(obj, (torch.UntypedStorage, torch.TypedStorage)):
        # a saved storage itself: a new ember storage with its bytes (ember/_storage.py)
        return obj.to(device="ember") if obj.device.type == "cpu" else obj
    if isinstance(obj, torch.Tensor):
        if obj.device.type != "cpu":
            return obj
        if isinstance(obj, torch.nn.Parameter):
            return torch.nn.Parameter(_move(obj.data, groups), obj.requires_grad)
        out = _move(obj, groups)
        if obj.requires_grad:
            out.requires_grad_(True)
        return out
    if isinstance(obj, dict):
        moved = {k: _to_ember(v, groups) for k, v in obj.items()}
        if type(obj) is dict:
            return moved
        try:
            new = _copy.copy(obj)
            new.clear()
            new.update(moved)
            return new
        except Exception:
            return moved
    if isinstance(obj, list):
        return [_to_ember(v, groups) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_to_ember(v, groups) for v in obj)
    if isinstance(obj, torch.nn.Module):
        return obj.to("ember")
    return obj


def _move(t, groups):
    """CPU tensor -> ember; tensors sharing a storage become views of one ember base."""
    t = t.detach()
    st = t.untyped_storage()
    key = (st.data_ptr(), t.dtype)
    if st.data_ptr() == 0 or st.nbytes() % t.element_size() != 0:
        return t.to("ember")
    if key not in groups:
        n = st.nbytes() // t.element_size()
        flat = torch.empty(0, dtype=t.dtype).set_(st, 0, (n,), (1,))
        groups[key] = flat.to("ember")
    base = groups[key]
    return base.as_strided(t.size(), t.stride(), t.storage_offset())


def load(f, map_location=None, *args, **kwargs):
    if _is_ember_location(map_location):
        obj = _orig_load(f, *args, map_location="cpu", **kwargs)
        return _to_ember(obj, {})
    return _orig_load(f, map_location, *args, **kwargs)


def install():
    torch.Tensor._reduce_ex_internal = _reduce_ex_internal
    torch.Tensor.__deepcopy__ = _deepcopy
    torch.serialization.load = load
    torch.load = load
    torch.serialization.add_safe_globals([_rebuild_from_cpu])
