"""Input pipelines: ``DeviceLoader`` moves batches to ember ahead of use."""

import collections as _collections
import collections.abc as _abc

import torch


def _to(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, _abc.Mapping):
        return type(obj)({k: _to(v, device) for k, v in obj.items()})
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_to(v, device) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(v, device) for v in obj)
    return obj


class DeviceLoader:
    """Wraps an iterable of CPU batches (e.g. a DataLoader) and yields them on
    ``device``, transferring the next batch before the current one is handed out
    (``prefetch`` batches ahead). Tensors nested in tuples, lists and dicts move."""

    def __init__(self, loader, device=None, prefetch: int = 1):
        self.loader = loader
        self.device = torch.device(device) if device is not None else torch.device("ember")
        self.prefetch = max(0, int(prefetch))

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        queue = _collections.deque()
        it = iter(self.loader)
        exhausted = False
        while True:
            while not exhausted and len(queue) <= self.prefetch:
                try:
                    queue.append(_to(next(it), self.device))
                except StopIteration:
                    exhausted = True
            if not queue:
                return
            yield queue.popleft()
