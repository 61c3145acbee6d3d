"""The module torch looks up by name for the ``ember`` device
(``torch._register_device_module``): device count, RNG, AMP dtypes, memory statistics,
streams and events (``ember/streams.py``)."""

import torch

from . import _C
from .memory import (  # noqa: F401  (torch.ember.memory_allocated(), ...)
    max_memory_allocated,
    memory_allocated,
    memory_stats,
    memory_summary,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
)
from .streams import (  # noqa: F401  (torch.ember.Stream, Event, current_stream(), ...)
    Event,
    Stream,
    current_stream,
    default_stream,
    set_stream,
    stream,
)


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device) -> None:
    idx = torch.device(device).index if not isinstance(device, int) else device
    if idx not in (None, 0):
        raise ValueError(f"ember has one device (ember:0); got {device}")


def synchronize(device=None) -> None:
    _C.sync("ember.synchronize()", True)


# torch.utils.checkpoint stashes and restores a device's RNG state only when its module
# says it is initialized; ember's generator exists from import on.
_initialized = True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return _C.is_in_bad_fork()


def _lazy_init() -> None:
    pass


def manual_seed(seed: int) -> None:
    _C.manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    _C.seed()


def seed_all() -> None:
    _C.seed()


def initial_seed() -> int:
    return _C.initial_seed()


def get_rng_state(device="ember") -> torch.Tensor:
    return _C.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device="ember") -> None:
    _C.set_rng_state(new_state.to("cpu", torch.uint8).contiguous())


def get_rng_state_all():
    return [get_rng_state()]


def set_rng_state_all(states) -> None:
    set_rng_state(states[0])


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


def default_generator():
    return _C.default_generator()


class device:  # context manager for API compatibility with torch.cuda.device
    def __init__(self, device):
        set_device(device)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
