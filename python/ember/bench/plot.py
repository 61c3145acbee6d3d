"""The PNG bar chart of a run: each backend's step time as a ratio to eager.

One group of bars per (model, mode), one bar per non-eager backend, log-scale y axis with
a line at 1 (eager). Lower is faster. Results without a time, or whose numerics check
failed (a fast wrong answer never counts), get no bar; the latter are marked "wrong".
Uses matplotlib's non-interactive Agg backend.
"""

from __future__ import annotations


def bar_chart(doc: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 - matplotlib.ticker.FuncFormatter below

    results = doc["results"]
    groups = []
    for r in results:
        key = (r["model"], r["mode"])
        if key not in groups:
            groups.append(key)
    backends = []
    for r in results:
        if r["backend"] != "eager" and r["backend"] not in backends:
            backends.append(r["backend"])
    by = {(r["model"], r["mode"], r["backend"]): r for r in results}
    # Backends with no time anywhere (absent, failed) get no slot, only a footnote.
    missing = [
        b
        for b in backends
        if all(by.get((m, mode, b), {}).get("ratio_to_eager") is None for m, mode in groups)
    ]
    backends = [b for b in backends if b not in missing]
    colors = dict(
        zip(
            ("inductor", "ember", "ember_compile", "torch_xla", "jax"),
            ("tab:blue", "tab:orange", "tab:red", "tab:green", "tab:purple"),
        )
    )
    width = 0.8 / max(1, len(backends))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(groups) + 2), 4.5))
    for j, b in enumerate(backends):
        xs, ys = [], []
        for i, (model, mode) in enumerate(groups):
            r = by.get((model, mode, b))
            x = i - 0.4 + width * (j + 0.5)
            if r is None or r["ratio_to_eager"] is None:
                continue
            if r["numerics_ok"] is False:
                ax.text(x, 1.0, "wrong", rotation=90, ha="center", va="bottom", fontsize=7)
                continue
            xs.append(x)
            ys.append(r["ratio_to_eager"])
        bars = ax.bar(xs, ys, width, label=b, color=colors.get(b))
        for bar, y in zip(bars, ys):
            ax.text(
                bar.get_x() + bar.get_width() / 2,
                y,
                f"{y:.2g}",
                ha="center",
                va="bottom",
                fontsize=6,
            )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    # Plain decimals on the log axis (0.5, 1, 2), not 5x10^-1.
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{m}\n{mode}" for m, mode in groups], fontsize=8)
    ax.set_ylabel("step time / eager step time (lower is faster)")
    m = doc["machine"]
    load = m.get("load_average_start")
    load = f", load {load[0]:.1f}" if isinstance(load, (list, tuple)) and load else ""
    ax.set_title(
        f"ember.bench {m['date_utc']} UTC, commit {m['commit']}, ember engine "
        f"{m.get('ember_backend')}, {m['cores']} cores{load}",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    if missing:
        fig.text(0.01, 0.01, "no times: " + ", ".join(missing) + " (see the table)", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
