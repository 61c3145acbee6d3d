"""Counters of the lazy runtime: ``counters()``, ``report()``, ``clear()``."""

from . import _C

_KEYS = (
    "syncs",
    "graphs_compiled",
    "memory_cache_hits",
    "disk_cache_hits",
    "compile_seconds",
    "execute_seconds",
    "transfers_to_device",
    "transfers_to_host",
    "ops_traced",
    "value_reads",
    "fallbacks",
    "externs",
    "value_read_sites",
    "recompiles",
    "recompiles_by_reason",
    "bucketed_graphs",
    "bucket_reuses",
    "bucket_refusals",
)


def counters() -> dict:
    """A dict with at least the keys in ``_KEYS`` (fallbacks/externs: op name -> count;
    value_read_sites: the user's "file:line" of each value read -> count; recompiles:
    compiles the recompile report explained, by reason in recompiles_by_reason: "dim",
    "dtype", "layout", "scalar" (a baked Python scalar), "scalar_type", "structure";
    shape bucketing (``ember.config.shape_buckets``): bucketed_graphs, graphs that run on a
    program padded to a bucket; bucket_reuses, those of them that reused a program
    compiled for another length; bucket_refusals, graphs compiled at their exact shape
    because an op was not pad-safe)."""
    return _C.counters()


def last_graph() -> dict:
    """Figures of the graph the last sync ran (compiled now or found in a cache).

    Keys: ``backend`` ("cpu", "interpreter" or "aten"); ``lazy_ops`` (lazy op nodes);
    ``lowered_ops`` (lowered to core IR ops); ``extern_ops`` (run as ATen custom-calls);
    ``kernels`` (native kernel steps, fused elementwise chains count once);
    ``kernel_ops`` (per kernel step, in run order: the core ops it computes);
    ``interpreted`` (reference-interpreter steps); ``extern_steps``; ``copy_steps``
    (runtime copies: donated outputs written into their input's buffer); ``core_nodes``
    (nodes of the optimized core graph); ``parameters``; ``planned_peak_bytes`` (the
    most bytes of the program's own buffers live at once over its step schedule, outputs
    included, arguments excluded; 0 for the interpreter and aten backends);
    ``planned_buffer_bytes`` (of those, the planned buffers a run allocates at its start
    and holds to its end); ``externs`` (ATen op -> extern
    steps); ``core_externs`` (e.g. ``ember.dot-general`` -> steps); ``declined`` (ATen op
    -> calls its lowering declined); ``lowering_errors`` (ATen op -> failed lowerings,
    which ran as externs instead). Empty figures before the first sync.
    """
    return _C.last_graph()


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
    for k in (
        "fallbacks",
        "externs",
        "value_read_sites",
        "recompiles_by_reason",
        "lowering_declined",
        "lowering_errors",
    ):
        d = c[k]
        lines.append(f"  {k}: {sum(d.values())} total" + ("" if d else " (none)"))
        for name, n in sorted(d.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {name:<40} {n}")
    return "\n".join(lines)
