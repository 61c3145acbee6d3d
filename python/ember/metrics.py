"""Counters of the lazy runtime: ``counters()``, ``report()``, ``clear()``."""
from . import _C

_KEYS = (
    "syncs", "graphs_compiled", "memory_cache_hits", "disk_cache_hits", "compile_seconds",
    "execute_seconds", "transfers_to_device", "transfers_to_host", "ops_traced", "value_reads",
    "fallbacks", "externs", "value_read_sites",
)


def counters() -> dict:
    """A dict with at least the keys in ``_KEYS`` (fallbacks/externs: op name -> count;
    value_read_sites: the user's "file:line" of each value read -> count)."""
    return _C.counters()


def clear() -> None:
    _C.clear_counters()


def report() -> str:
    c = counters()
    lines = ["ember metrics"]
    for k, v in c.items():
        if isinstance(v, dict):
            continue
        if isinstance(v, float):
            lines.append(f"  {k:<22} {v:.6f}")
        else:
            lines.append(f"  {k:<22} {v}")
    for k in ("fallbacks", "externs", "value_read_sites"):
        d = c[k]
        lines.append(f"  {k}: {sum(d.values())} total" + ("" if d else " (none)"))
        for name, n in sorted(d.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {name:<40} {n}")
    return "\n".join(lines)
