"""Storage-level access to ember tensors (docs/architecture.md, "Storage").

Every ember tensor has a storage, shared by its views as in eager: ``untyped_storage()``
(identity: ``_cdata``), ``nbytes()``, ``size()`` and ``device`` are metadata and never
sync. Byte-level access points the storage at the host bytes of its tensor's value,
computing a pending value first (a sync counted as a value read):

* ``Tensor.data_ptr()``, ``UntypedStorage.data_ptr()``: the bytes' address, stable while
  the value lives (until the tensor is written);
* ``cpu()``, ``tolist()``, indexing, iteration, ``to("cpu")``: copies of the bytes;
* ``copy_()``, ``fill_()``, item assignment: write the bytes, as an in-place write of the
  whole tensor would (every tensor on the storage sees it);
* ``clone()``, ``copy.copy``/``copy.deepcopy``: a new ember storage with the same bytes;
* ``Tensor.set_(storage, offset, size, stride)`` puts a tensor on the storage, as a view
  of its base (``set_(tensor)`` is functionalization's own); a tensor of another dtype
  than the base's reads the same bytes through a dtype view, as eager reinterprets them
  (so torch's own ``UntypedStorage.float()``/``is_pinned()`` and a ``TypedStorage`` of any
  dtype over an ember storage work);
* a CPU storage's ``to(device="ember")``/``ember()`` (``torch.load`` of a saved storage
  restores it so) is a new ember storage with its bytes; ``_write_file`` and
  ``_set_from_file`` (legacy ``torch.save``/``torch.load``, hence ``pickle``) write and
  read the bytes through a CPU copy, and ``_byteswap`` rewrites them;
* ``resize_(0)`` frees the bytes and ``resize_(full size)`` gives new ones to define by
  the next write (FSDP2's pattern; C++ callers reach it through the device's resize hook).

``Tensor.storage()`` (a ``TypedStorage``) works through these. What cannot hold raises a
``RuntimeError`` naming the tensor-level path: ``share_memory_()``, ``pin_memory()``,
slicing a storage, moving it to another device type; so does every byte-level method of
a storage made without a tensor (``torch.UntypedStorage(n, device="ember")``).
"""

import functools

import torch

_HINT = (
    "ember: {what} is not supported for ember tensors' storages. Use tensor-level access "
    "instead: t.cpu() / t.tolist() / t.numpy() for values (t.cpu().untyped_storage() for "
    "a CPU storage), t.clone() to copy, torch.save(t) / pickle / copy.deepcopy(t) to "
    "serialize."
)


def _C():
    from ember import _C

    return _C


def _is_ember(storage) -> bool:
    try:
        return storage.device.type == "ember"
    except Exception:  # noqa: BLE001 - a storage without a device is not ours
        return False


def _bytes(storage):
    """A CPU uint8 tensor over the storage's bytes (no copy)."""
    if _is_ember(storage):
        return _C().storage_bytes(storage)
    return torch.empty(0, dtype=torch.uint8).set_(storage)


def _write(storage, new_bytes):
    _C().write_storage_bytes(storage, new_bytes.contiguous())


def _as_dtype(base, nbytes, dtype):
    """The storage's first ``nbytes`` bytes as a flat tensor of ``dtype``: a view of
    ``base`` (the storage's tensor), so writes through it reach every tensor on it."""
    flat = base.as_strided((nbytes // base.element_size(),), (1,), 0).view(torch.uint8)
    size = torch._utils._element_size(dtype)
    return flat[: nbytes // size * size].view(dtype)


_NO_TENSOR = (
    "ember: {what} of an ember storage that is no ember tensor's (made by "
    "torch.UntypedStorage(n, device='ember'), or a FakeTensor's): it holds no bytes ember "
    "can read or write. Make ember storages through tensors, e.g. torch.empty(n, "
    "dtype=torch.uint8, device='ember').untyped_storage(), or cpu_storage.to(device='ember')."
)


# ---------------------------------------------------------------- ember implementations
def _data_ptr(self):
    return _C().storage_data_ptr(self)


def _cpu(self):
    return _C().storage_bytes(self).clone().untyped_storage()


def _tolist(self):
    return _C().storage_bytes(self).tolist()


def _iter(self):
    return iter(_tolist(self))


def _getitem(self, idx):
    if not isinstance(idx, int):
        raise RuntimeError(  # noqa: TRY004 - eager takes slices; ember refuses them
            _HINT.format(what="slicing an ember storage (a storage view of its bytes)")
        )
    return int(_C().storage_bytes(self)[idx])


def _setitem(self, idx, value):
    b = _C().storage_bytes(self).clone()
    b[idx] = value
    _write(self, b)


def _copy_(self, src, non_blocking=None):
    if self.nbytes() != src.nbytes():
        raise RuntimeError(
            f"ember: UntypedStorage.copy_(): sizes differ ({self.nbytes()} and "
            f"{src.nbytes()} bytes)"
        )
    _write(self, _bytes(src).clone())
    return self


def _fill_(self, value):
    _write(self, torch.full((self.nbytes(),), value, dtype=torch.uint8))
    return self


def _clone(self):
    return _C().storage_bytes(self).to("ember").untyped_storage()


def _to(self, *args, device=None, non_blocking=False, **kwargs):
    target = device if device is not None else (args[0] if args else None)
    target = torch.device(target) if target is not None else self.device
    if target.type == "cpu":
        return _cpu(self)
    if target.type == "ember":
        return self
    raise RuntimeError(_HINT.format(what=f"UntypedStorage.to({target})"))


def _write_file(self, *args, **kwargs):
    return _cpu(self)._write_file(*args, **kwargs)


def _set_from_file(self, f, offset, is_real_file, element_size):
    cpu = torch.UntypedStorage(self.nbytes())
    cpu._set_from_file(f, offset, is_real_file, element_size)
    _write(self, _bytes(cpu))
    return self


def _byteswap(self, elem_size):
    cpu = _cpu(self)
    cpu._byteswap(elem_size)
    _write(self, _bytes(cpu))


def _resize_(self, nbytes):
    _C().resize_storage_bytes(self, nbytes)
    return self


def _deepcopy(self, memo):
    key = self._cdata
    if key in memo:
        return memo[key]
    r = _clone(self)
    memo[key] = r
    return r


# UntypedStorage methods with an ember meaning, and those that cannot have one.
_EMBER_METHODS = {
    "data_ptr": _data_ptr,
    "cpu": _cpu,
    "tolist": _tolist,
    "__iter__": _iter,
    "__getitem__": _getitem,
    "__setitem__": _setitem,
    "copy_": _copy_,
    "fill_": _fill_,
    "clone": _clone,
    "to": _to,
    "resize_": _resize_,
    "_write_file": _write_file,
    "_set_from_file": _set_from_file,
    "_byteswap": _byteswap,
    "__copy__": _clone,
    "__deepcopy__": _deepcopy,
}
_REFUSED_METHODS = (
    "pin_memory",
    "share_memory_",
    "mps",
    "hpu",
    "cuda",
)


def _dispatch(name, orig, impl):
    @functools.wraps(orig)
    def method(self, *args, **kwargs):
        if _is_ember(self):
            if impl is None:
                raise RuntimeError(_HINT.format(what=f"UntypedStorage.{name}()"))
            if not _C().is_ember_storage(self):
                raise RuntimeError(_NO_TENSOR.format(what=f"UntypedStorage.{name}()"))
            return impl(self, *args, **kwargs)
        if name == "copy_" and args and _is_ember(args[0]):
            # cpu_storage.copy_(ember_storage): the ember storage's bytes.
            return orig(self, _cpu(args[0]), *args[1:], **kwargs)
        if name in ("to", "ember") and _to_ember(name, *args, **kwargs):
            # A storage of another device to ember: a new ember storage with its bytes
            # (torch's own path would copy into a storage made without a tensor).
            return _bytes(self).to("ember").untyped_storage()
        return orig(self, *args, **kwargs)

    return method


def _to_ember(name, *args, device=None, **kwargs):
    """Whether a storage's ``to(...)``/``ember(...)`` call moves it to ember."""
    target = device if device is not None else (args[0] if args else None)
    if name == "ember":  # ember(), ember(index)
        return True
    if target is None:
        return False
    try:
        return torch.device(target).type == "ember"
    except (RuntimeError, TypeError):
        return False


def _tensor_data_ptr(orig):
    @functools.wraps(orig)
    def data_ptr(self):
        if self.device.type == "ember" and _C().is_functional(self):
            return _C().tensor_data_ptr(self)
        return orig(self)  # also ember FakeTensors and inner tensors: torch's own answer

    return data_ptr


def _tensor_set(orig):
    @functools.wraps(orig)
    def set_(self, source=None, storage_offset=0, size=None, stride=None):
        if isinstance(source, torch.TypedStorage):
            source = source._untyped_storage
        if not (isinstance(source, torch.UntypedStorage) and _is_ember(source)):
            args = [] if source is None else [source]
            if size is not None:
                args += [storage_offset, size] + ([] if stride is None else [stride])
            return orig(self, *args)
        if not _C().is_ember_storage(source):
            raise RuntimeError(_NO_TENSOR.format(what="Tensor.set_()"))
        base = _C().storage_tensor(source)
        if base.dtype == self.dtype:
            if size is None:
                size, storage_offset = (source.nbytes() // self.element_size(),), 0
            if stride is None:
                stride = torch._prims_common.make_contiguous_strides_for(size)
            return orig(self, base.as_strided(size, stride, storage_offset))
        # Another dtype: the same bytes read as self's dtype (as eager's set_ reinterprets
        # them), through dtype views of the storage's flat bytes. Functionalization takes
        # as_strided only first in a view chain, so a dense layout is a slice of them;
        # any other is an as_strided that reads, and a write through it is refused.
        flat = _as_dtype(base, source.nbytes(), self.dtype)
        if size is None:
            return orig(self, flat)
        size = tuple(size)
        dense = torch._prims_common.make_contiguous_strides_for(size)
        stride = dense if stride is None else tuple(stride)
        numel = functools.reduce(lambda x, y: x * y, size, 1)
        if stride == dense or numel <= 1:
            end = storage_offset + numel
            if storage_offset < 0 or end > flat.numel():
                raise RuntimeError(
                    f"ember: Tensor.set_(): size {list(size)} at storage offset "
                    f"{storage_offset} needs {end * self.element_size()} bytes; the storage "
                    f"has {source.nbytes()}"
                )
            return orig(self, flat[storage_offset:end].view(size))
        return orig(self, flat.as_strided(size, stride, storage_offset))

    return set_


def _install(owner, name, wrapper):
    orig = getattr(owner, name, None)
    if orig is None or getattr(orig, "_ember_guard", False):
        return
    wrapped = wrapper(orig)
    wrapped._ember_guard = True
    setattr(owner, name, wrapped)


def install():
    cls = torch.UntypedStorage
    for name, impl in _EMBER_METHODS.items():
        _install(cls, name, lambda orig, n=name, i=impl: _dispatch(n, orig, i))
    for name in _REFUSED_METHODS:
        _install(cls, name, lambda orig, n=name: _dispatch(n, orig, None))
    # storage.ember(): torch's generated method (ember/__init__.py); a CPU storage moves
    # through _dispatch's "to ember" branch, an ember storage is returned as it is.
    _install(cls, "ember", lambda orig: _dispatch("ember", orig, lambda self, *a, **k: self))
    _install(torch.Tensor, "data_ptr", _tensor_data_ptr)
    _install(torch.Tensor, "set_", _tensor_set)
