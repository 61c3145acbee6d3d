"""Outputs of a benchmark run: the JSON document and the markdown table.

JSON (``to_json``): ``{"machine": {...}, "ceilings": {...}, "settings": {...},
"results": [...]}``; each result has the keys the issue fixes — ``model``, ``mode``,
``backend``, ``median_s``, ``ratio_to_eager``, ``ratio_to_inductor``, ``cold_compile_s``,
``warm_start_s``, ``peak_rss_mb``, ``numerics_ok`` — plus ``step_rss_growth_mb``,
``ember_peak_mb``, ``ember_planned_peak_mb`` (memory of the warm process's last steady
step: RSS growth, ember's max_memory_allocated above the step's start, the planned peak
of its program; see cost.py), ``min_s``, ``max_s``,
``repeats``, ``numerics_max_diff``, ``status``, ``gb_per_s`` / ``triad_fraction``
(memory-bound kernels), ``load_1m`` (1-minute load average when the model/mode
started), ``notes`` and ``processes`` (the cold and warm processes' wall
and CPU seconds, import/setup seconds, per-step seconds, peak RSS). Times in seconds, memory in MiB (2^20 bytes),
bandwidth in GB/s (10^9 bytes/s). Ratios are time / reference time, medians of the
per-round ratios (below 1: faster than the reference). A value that was not measured
is null, and ``status`` says why.
"""

from __future__ import annotations

import json

RESULT_KEYS = (
    "model",
    "mode",
    "backend",
    "median_s",
    "ratio_to_eager",
    "ratio_to_inductor",
    "cold_compile_s",
    "warm_start_s",
    "peak_rss_mb",
    "numerics_ok",
)


def to_json(doc: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def _ms(s):
    return "–" if s is None else (f"{s * 1e3:.3g}" if s < 1 else f"{s * 1e3:,.0f}")


def _sec(s):
    return "–" if s is None else f"{s:.2f}"


def _mib(v, digits=0):
    return "–" if v is None else f"{v:.{digits}f}"


def _ratio(r):
    return "–" if r is None else f"{r:.2f}"


def markdown(doc: dict) -> str:
    """The results as a markdown table, preceded by the machine line and ceilings."""
    m, c = doc["machine"], doc["ceilings"]
    lines = (
        []
        if doc.get("complete", True)
        else [
            "**Partial run** (interrupted or still running): only the rows below were measured.",
            "",
        ]
    )
    lines += [
        f"Machine: {m['cpu_model']}, {m['cores']} cores ({m['torch_threads']} torch threads), "
        f"{m['memory_gib']} GiB; load average {m['load_average_start'][0]:.1f} at start, "
        + (
            f"{m['load_average_end'][0]:.1f} at end"
            if m.get("load_average_end")
            else "(run not finished)"
        )
        + f". ember {m.get('ember_version')}, torch "
        f"{m['torch_version']}, commit `{m['commit']}`, ember backend `{m['ember_backend']}`.",
        "",
        f"Ceilings (same run, start / end): STREAM triad "
        f"{c['start']['triad_gb_per_s']:.1f} / {c['end']['triad_gb_per_s']:.1f} GB/s, "
        f"ATen f32 GEMM {c['start']['gemm_gflop_per_s']:.1f} / "
        f"{c['end']['gemm_gflop_per_s']:.1f} GFLOP/s."
        if c.get("end")
        else f"Ceilings (same run): STREAM triad {c['start']['triad_gb_per_s']:.1f} GB/s, "
        f"ATen f32 GEMM {c['start']['gemm_gflop_per_s']:.1f} GFLOP/s.",
        "",
        "| model | mode | backend | median ms (min–max) | ×eager | ×Inductor | cold compile s "
        "| warm start s | peak RSS MiB | step RSS growth MiB | ember step peak MiB (planned) "
        "| numerics | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["results"]:
        if r["median_s"] is None:
            t = "–"
        else:
            t = f"{_ms(r['median_s'])} ({_ms(r['min_s'])}–{_ms(r['max_s'])})"
        num = (
            "–"
            if r["numerics_ok"] is None
            else "ok"
            if r["numerics_ok"]
            else f"**WRONG** (diff {r['numerics_max_diff']:.2g})"
        )
        notes = []
        if r["status"] != "ok":
            notes.append(r["status"])
        if r.get("triad_fraction") is not None:
            notes.append(f"{r['gb_per_s']:.1f} GB/s = {r['triad_fraction']:.2f} of triad")
        notes += r.get("notes", [])
        rss = _mib(r["peak_rss_mb"])
        growth = _mib(r.get("step_rss_growth_mb"), 1)
        em = _mib(r.get("ember_peak_mb"), 1)
        if r.get("ember_planned_peak_mb") is not None:
            em += f" ({_mib(r['ember_planned_peak_mb'], 1)})"
        lines.append(
            f"| {r['model']} | {r['mode']} | {r['backend']} | {t} | {_ratio(r['ratio_to_eager'])}"
            f" | {_ratio(r['ratio_to_inductor'])} | {_sec(r['cold_compile_s'])} | "
            f"{_sec(r['warm_start_s'])} | {rss} | {growth} | {em} | {num} | {'; '.join(notes)} |"
        )
    return "\n".join(lines) + "\n"
