"""Device memory statistics, as ``torch.cuda`` has them (``torch.ember.memory_allocated()``
and friends; also ``ember.memory_allocated()``).

What is counted (bytes, process-wide, all threads): every ember device buffer — the
storage of device tensors (the bridge's device allocator) and every buffer a running
program allocates: its planned buffers (allocated once per run), kernel outputs,
extern and interpreter results, donation copies. Zero-copy views of host memory
(``torch.compile`` inputs, borrowed tensors) count 0: their owner counts them. The peak
is updated on every allocation, so it includes the peak inside a running program.
"""

import collections

from . import _C


def memory_allocated(device=None) -> int:
    """Bytes of device memory in use now (device tensors and live program buffers)."""
    return _C.memory_allocated()


def max_memory_allocated(device=None) -> int:
    """The largest ``memory_allocated()`` since start or ``reset_peak_memory_stats()``."""
    return _C.max_memory_allocated()


def reset_peak_memory_stats(device=None) -> None:
    """Sets the peak to the current ``memory_allocated()``."""
    _C.reset_peak_memory_stats()


def reset_max_memory_allocated(device=None) -> None:
    """Same as ``reset_peak_memory_stats()`` (torch.cuda's older name)."""
    reset_peak_memory_stats(device)


def memory_stats(device=None) -> dict:
    """An ordered dict of memory figures under torch.cuda's key names:
    ``allocated_bytes.all.current`` / ``.peak`` (= ``memory_allocated()`` /
    ``max_memory_allocated()``), and, ``active_bytes.all.*`` equal to them (ember frees
    a buffer when its last reference goes: nothing is allocated and inactive)."""
    cur, peak = _C.memory_allocated(), _C.max_memory_allocated()
    stats = {
        "allocated_bytes.all.current": cur,
        "allocated_bytes.all.peak": peak,
        "active_bytes.all.current": cur,
        "active_bytes.all.peak": peak,
    }
    return collections.OrderedDict(sorted(stats.items()))


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def memory_summary(device=None, abbreviated=False) -> str:
    """A human-readable table of ``memory_stats()`` (current and peak per figure)."""
    s = memory_stats(device)
    rows = sorted({k.rsplit(".", 1)[0] for k in s})
    lines = ["ember memory summary", f"  {'figure':<32} {'current':>12} {'peak':>12}"]
    for r in rows:
        cur, peak = s.get(r + ".current"), s.get(r + ".peak")
        fmt = _fmt_bytes if "bytes" in r else str
        lines.append(
            f"  {r:<32} {fmt(cur) if cur is not None else '-':>12} "
            f"{fmt(peak) if peak is not None else '-':>12}"
        )
    return "\n".join(lines)
