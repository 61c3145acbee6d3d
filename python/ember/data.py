"""Input pipelines: ``DeviceLoader`` moves batches to ember on a background thread.

``DeviceLoader(loader, device, prefetch=2)`` wraps any iterable of CPU batches (a
``DataLoader``, with or without workers) and yields the same batches on ``device``. A
background thread pulls batches from ``loader`` and moves them, at most ``prefetch``
batches ahead (a bounded queue), so host-side loading, collation and the transfer overlap
the training step on the calling thread. Tensors nested in tuples, lists, named tuples
and mappings move; other objects pass through unchanged.

The thread only creates *device data* (a copy of each CPU tensor into the device
allocator, or, for a pinned tensor, an ember tensor over its memory): never pending ops,
so a sync on another thread never sees the loader's tensors as pending work and the
graphs a training step compiles do not depend on how far ahead the loader is
(docs/architecture.md, "Input pipelines").

``pin_memory=True`` on the wrapped DataLoader costs no extra copy: ember's device memory
is host memory, so a pinned batch (a fresh block of ember's pinned allocator, made by the
DataLoader's pinning copy) becomes the ember tensor's device data without another copy.

Shutdown: the thread stops at the end of the epoch, when the iterator is dropped
(``break``, an exception in the loop) or closed (``close()``), and at interpreter exit;
a DataLoader's worker processes end with it. An exception raised by ``loader`` is raised
again from ``next()`` on the calling thread, with its original traceback.
"""

from __future__ import annotations

import atexit as _atexit
import collections.abc as _abc
import queue as _queue
import threading as _threading
import weakref as _weakref

import torch

from . import _C

__all__ = ["DeviceLoader"]

_POLL_S = 0.05  # how often a blocked producer or consumer checks for shutdown
_EXIT_JOIN_S = 5.0  # at interpreter exit, how long to wait for all producer threads


def _to(obj, device, wrap_pinned: bool):
    if isinstance(obj, torch.Tensor):
        if wrap_pinned and obj.device.type == "cpu" and obj.is_pinned():
            return _C.wrap_host(obj)  # the pinned block becomes device data: no copy
        return obj.to(device, non_blocking=True)
    if isinstance(obj, _abc.Mapping):
        return type(obj)({k: _to(v, device, wrap_pinned) for k, v in obj.items()})
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_to(v, device, wrap_pinned) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(v, device, wrap_pinned) for v in obj)
    return obj


class DeviceLoader:
    """``loader``'s batches on ``device`` (default ``ember:0``), moved on a background
    thread at most ``prefetch`` batches ahead (``prefetch=0``: moved on the calling
    thread, no thread). ``len()`` and other attributes (``dataset``, ``sampler``,
    ``batch_size``, ...) are the wrapped loader's. Each ``iter()`` starts one epoch with
    a thread of its own; after an epoch left early it first waits for the previous
    thread to finish the batch it was loading.

    Raises ``ValueError`` for a negative ``prefetch``."""

    def __init__(self, loader, device=None, prefetch: int = 2):
        if int(prefetch) < 0:
            raise ValueError(f"DeviceLoader: prefetch must be >= 0, got {prefetch}")
        self.loader = loader
        self.device = torch.device(device) if device is not None else torch.device("ember", 0)
        self.prefetch = int(prefetch)
        self._last = None  # (thread, stop event) of the latest iterator's producer

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):
        if name in ("loader", "_last"):  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self):
        wrap_pinned = self.device.type == "ember"
        if self.prefetch == 0:
            return (_to(b, self.device, wrap_pinned) for b in self.loader)
        if self._last is not None and self._last[1].is_set():
            # The previous epoch was left early (break): its producer may still be inside
            # next() of the loader's iterator, which a DataLoader with persistent workers
            # reuses for this epoch. It ends after that batch.
            self._last[0].join()
        it = _PrefetchIterator(self.loader, self.device, self.prefetch, wrap_pinned)
        self._last = (it._thread, it._stop)
        return it


# Producer -> consumer messages: (_BATCH, batch), (_ERROR, exception), (_END, None).
_BATCH, _ERROR, _END = 0, 1, 2


def _put(q, stop, msg) -> bool:
    while not stop.is_set():
        try:
            q.put(msg, timeout=_POLL_S)
            return True
        except _queue.Full:
            pass
    return False


def _produce(loader, device, wrap_pinned, q, stop):
    """The producer thread. Holds no reference to the iterator object, so dropping that
    (``break``) runs its finalizer, which sets ``stop``."""
    msg = (_END, None)
    try:
        it = iter(loader)
        while not stop.is_set():
            try:
                batch = next(it)
            except StopIteration:
                break
            if not _put(q, stop, (_BATCH, _to(batch, device, wrap_pinned))):
                break
            batch = None
    except BaseException as e:  # noqa: BLE001 (re-raised on the consumer's thread)
        msg = (_ERROR, e)
    finally:
        it = None  # a DataLoader iterator shuts its workers down here
    _put(q, stop, msg)


class _PrefetchIterator:
    def __init__(self, loader, device, prefetch, wrap_pinned):
        self._queue = _queue.Queue(maxsize=prefetch)
        self._stop = _threading.Event()
        self._thread = _threading.Thread(
            target=_produce,
            args=(loader, device, wrap_pinned, self._queue, self._stop),
            name="ember.data.DeviceLoader",
            daemon=True,
        )
        self._done = False
        _live.add(self)
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        while True:
            try:
                kind, value = self._queue.get(timeout=_POLL_S)
                break
            except _queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    self.close()
                    raise RuntimeError("ember.data.DeviceLoader: its thread ended early") from None
        if kind == _BATCH:
            return value
        self.close()
        if kind == _ERROR:
            raise value
        raise StopIteration

    def close(self, timeout: float | None = 0.0) -> None:
        """Stops the thread (it ends after the batch it is loading) and drops the batches
        it moved ahead; waits up to ``timeout`` seconds for it (None: until it ends)."""
        self._done = True
        self._stop.set()
        try:
            while True:
                self._queue.get_nowait()
        except _queue.Empty:
            pass
        if timeout is None or timeout > 0:
            self._thread.join(timeout)

    def __del__(self):
        self.close()


_live = _weakref.WeakSet()


@_atexit.register
def _stop_all():
    """Interpreter exit: stop every producer thread, then give them a bounded time to end
    (each drops its DataLoader iterator, which ends that loader's worker processes)."""
    import time

    its = list(_live)
    for it in its:
        it.close()
    deadline = time.monotonic() + _EXIT_JOIN_S
    for it in its:
        it._thread.join(max(0.0, deadline - time.monotonic()))
