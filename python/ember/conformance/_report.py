"""The sweep's report: the JSON document and its Markdown rendering.

JSON shape (the ``ops`` part is fixed by issue 8)::

    {"ops": {"<op>": {"<dtype>": {"forward": "<outcome>", "backward": "<outcome>"}}},
     "summary": {...counts, pass rates, failure kinds, backend, command...},
     "details": {"<op>": {"<dtype>": {"<direction>": {samples, passed, max_error,
                 message, skip_reason, fallbacks, externs, seconds, kind}}}},
     "sampled": {...the same four keys for the sampled-backend run...}}   # optional

Outcomes: pass, mismatch, error, flaky, and skip (values not comparable per OpInfo:
random output or uninitialized memory; only shapes/dtypes were checked).
"""

import re

from ._run import OUTCOMES

# Failure kinds, first match wins: (kind, outcome it applies to or None, regex on the
# message). Kinds name the cause as far as the message tells it.
_KINDS = (
    ("timeout", "error", r"^timeout:"),
    ("crash", "error", r"^crashed"),
    ("harness", "error", r"^harness:"),
    ("sparse/quantized/nested layouts", "error", r"[Ss]parse|SparseCsr|quantiz|nested|layout"),
    ("data-dependent or unsupported op (fallback)", "error", r"fallback"),
    (
        "no kernel on the ember device",
        "error",
        r"Could not run|not implemented for 'PrivateUse1'|"
        r"NotImplementedError",
    ),
    ("meta shape inference", "error", r"\bmeta\b|Meta"),
    ("device mixing", "error", r"same device|device type"),
    ("view/aliasing", None, r"view|alias|storage|stride|as_strided|set_"),
    ("dtype/type promotion", None, r"dtype|promot|Half|BFloat16|Long|Bool|Float"),
    ("wrong shape/structure", "mismatch", r"where eager gives|structure differs"),
    ("wrong values", "mismatch", r""),
    ("nondeterministic result", "flaky", r""),
)


def kind_of(res):
    """The failure kind of a failed item's result (None for pass/skip)."""
    outcome = res["outcome"]
    if outcome not in ("mismatch", "error", "flaky"):
        return None
    msg = res.get("message") or ""
    # the part after "sample N (...): " says what went wrong
    tail = re.sub(r"^sample \d+ \(.*?\): ", "", msg, count=1) if msg.startswith("sample") else msg
    for kind, only, pattern in _KINDS:
        if only not in (None, outcome):
            continue
        if re.search(pattern, tail):
            return kind
    exc = re.match(r"(\w+(?:Error|Exception))", tail)
    return f"other {exc.group(1)}" if exc else "other error"


def _table(results, ops, dtypes, directions):
    table = {}
    for (op, dtype, direction), res in results.items():
        table.setdefault(op, {}).setdefault(dtype, {})[direction] = res["outcome"]
    return {op: table[op] for op in ops if op in table}


def _details(results, ops):
    det = {}
    for (op, dtype, direction), res in results.items():
        r = dict(res)
        r["kind"] = kind_of(res)
        det.setdefault(op, {}).setdefault(dtype, {})[direction] = r
    return {op: det[op] for op in ops if op in det}


def summarize(results, items, dtypes, directions):
    """Counts per dtype and direction: entries (the denominator: OpInfo entries
    supporting the dtype on CPU, with autograd for backward), outcomes, pass rate,
    failure kinds, and how many items used eager fallbacks."""
    counts, rates, kinds, fallbacks = {}, {}, {}, {}
    for dtype in dtypes:
        for direction in directions:
            keyed = [
                (it["op"], dtype, direction)
                for it in items
                if it["dtype"] == dtype and it["direction"] == direction
            ]
            if not keyed:
                continue
            c = {o: 0 for o in OUTCOMES}
            k = {}
            fb = 0
            for key in keyed:
                res = results[key]
                c[res["outcome"]] += 1
                kd = kind_of(res)
                if kd:
                    k[kd] = k.get(kd, 0) + 1
                fb += bool(res.get("fallbacks"))
            c["entries"] = len(keyed)
            counts.setdefault(dtype, {})[direction] = c
            rates.setdefault(dtype, {})[direction] = round(c["pass"] / len(keyed), 4)
            kinds.setdefault(dtype, {})[direction] = dict(
                sorted(k.items(), key=lambda kv: (-kv[1], kv[0]))
            )
            fallbacks.setdefault(dtype, {})[direction] = fb
    return {
        "counts": counts,
        "pass_rate": rates,
        "failure_kinds": kinds,
        "items_with_fallbacks": fallbacks,
    }


def build(run, ops_order, meta):
    """The report section of one run: ``run`` has backend, reported backend, items,
    results, seconds; ``meta`` is merged into the summary (command, torch, ...)."""
    dtypes = list(dict.fromkeys(it["dtype"] for it in run["items"]))
    directions = [
        d for d in ("forward", "backward") if any(it["direction"] == d for it in run["items"])
    ]
    summary = dict(meta)
    summary.update(
        {
            "backend": run["backend"],
            "backend_reported": run["reported"],
            "seconds": run["seconds"],
            "dtypes": dtypes,
            "directions": directions,
            "ops_run": len({it["op"] for it in run["items"]}),
        }
    )
    if run.get("fraction") is not None:
        summary["sample_fraction"] = run["fraction"]
    summary.update(summarize(run["results"], run["items"], dtypes, directions))
    return {
        "ops": _table(run["results"], ops_order, dtypes, directions),
        "summary": summary,
        "details": _details(run["results"], ops_order),
    }


def _backend_text(summary):
    b = summary["backend"]
    rep = summary.get("backend_reported")
    if rep is None:
        return (
            f"`{b}` (this ember build has no EMBER_BACKEND switch: every op ran as an ATen extern)"
        )
    return f"`{b}` (ember reports `{rep}`)"


def _counts_table(summary):
    out = [
        "| dtype | direction | entries | pass | mismatch | error | flaky | skip | pass rate |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for dtype, per in summary["counts"].items():
        for direction, c in per.items():
            rate = summary["pass_rate"][dtype][direction]
            out.append(
                f"| {dtype} | {direction} | {c['entries']} | {c['pass']} | "
                f"{c['mismatch']} | {c['error']} | {c['flaky']} | {c['skip']} | "
                f"{100 * rate:.1f}% |"
            )
    return out


def _esc(s):
    return (s or "").replace("|", "\\|").replace("\n", " ")


def markdown(report):
    """The report as Markdown: counts, failure kinds, every failure with its message."""
    out = []
    sections = [("", report)] + (
        [("Sampled run: ", report["sampled"])] if report.get("sampled") else []
    )
    for title, sec in sections:
        s = sec["summary"]
        out.append(f"## {title}backend {_backend_text(s)}")
        out.append("")
        if s.get("sample_fraction") is not None:
            out.append(
                f"Ops sampled: {s['ops_run']} (fraction {s['sample_fraction']}, "
                f"chosen by a stable hash of the op key)."
            )
            out.append("")
        out.append(
            f"Command: `{s.get('command', '')}` — ember {s.get('ember')}, torch {s.get('torch')}, "
            f"{s['seconds']:.0f} s."
        )
        out.append("")
        out += _counts_table(s)
        out.append("")
        out.append("### Failure kinds")
        out.append("")
        for dtype, per in s["failure_kinds"].items():
            for direction, kinds in per.items():
                if kinds:
                    items = ", ".join(f"{k}: {n}" for k, n in kinds.items())
                    out.append(f"- {dtype} {direction}: {items}")
        out.append("")
        out.append("### Failures")
        out.append("")
        out.append("| op | dtype | direction | outcome | kind | max error | message |")
        out.append("|---|---|---|---|---|---:|---|")
        for op, per in sec["details"].items():
            for dtype, dirs in per.items():
                for direction, r in dirs.items():
                    if r["outcome"] in ("pass", "skip"):
                        continue
                    err = "" if r["max_error"] is None else f"{r['max_error']:.3g}"
                    out.append(
                        f"| {op} | {dtype} | {direction} | {r['outcome']} | "
                        f"{r['kind']} | {err} | {_esc(r['message'])[:240]} |"
                    )
        out.append("")
    return "\n".join(out) + "\n"
