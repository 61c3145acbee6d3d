"""The expected-failure file and the checker that keeps it truthful.

Format: one entry a line, ``#`` starts a comment line::

    <op key> <dtype> <direction>[@<backend>] <outcome> <reason, free text>

``outcome`` is ``mismatch``, ``error``, ``flaky`` or ``any`` (a nondeterministic
failure that may also pass); an entry without ``@backend`` holds for every backend.
The checker fails on a failure without an entry (new failure), on an entry whose item
now passes (fixed: remove the entry), and on an entry whose outcome changed. Entries for
items that did not run (filtered out, not in the sampled set) are not judged; entries
naming an op that OpInfo no longer has are stale.
"""

import dataclasses

FAILURES = ("mismatch", "error", "flaky")
_OUTCOMES = FAILURES + ("any",)


@dataclasses.dataclass
class Entry:
    op: str
    dtype: str
    direction: str
    backend: str  # None: every backend
    outcome: str
    reason: str
    line: int


def parse(text, path="<expected>"):
    """Entries of an expected-failure file; ValueError naming the line if malformed."""
    entries = []
    seen = set()
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 4)
        if len(parts) < 5:
            raise ValueError(
                f"{path}:{n}: expected '<op> <dtype> <direction>[@backend] "
                f"<outcome> <reason>', got {raw!r}"
            )
        op, dtype, direction, outcome, reason = parts
        direction, _, backend = direction.partition("@")
        if direction not in ("forward", "backward"):
            raise ValueError(
                f"{path}:{n}: direction must be forward or backward, got {direction!r}"
            )
        if outcome not in _OUTCOMES:
            raise ValueError(
                f"{path}:{n}: outcome must be one of {', '.join(_OUTCOMES)}, got {outcome!r}"
            )
        key = (op, dtype, direction, backend or None)
        if key in seen:
            raise ValueError(f"{path}:{n}: duplicate entry for {op} {dtype} {direction}")
        seen.add(key)
        entries.append(Entry(op, dtype, direction, backend or None, outcome, reason, n))
    return entries


def _lookup(entries, op, dtype, direction, backend):
    exact = general = None
    for e in entries:
        if (e.op, e.dtype, e.direction) != (op, dtype, direction):
            continue
        if e.backend == backend:
            exact = e
        elif e.backend is None:
            general = e
    return exact or general


def check(runs, entries, known_ops=None):
    """Problems (strings) of a sweep against the entries; empty when the file is true.

    ``runs``: ``[(backend, results)]`` with results mapping (op, dtype, direction) to an
    outcome dict. ``known_ops``: every op key OpInfo has (to find stale entries)."""
    problems = []
    used = set()
    for backend, results in runs:
        for (op, dtype, direction), res in sorted(results.items()):
            outcome = res["outcome"]
            e = _lookup(entries, op, dtype, direction, backend)
            if e is not None:
                used.add(e.line)
            where = f"{op} {dtype} {direction} [backend {backend}]"
            if outcome in FAILURES:
                if e is None:
                    problems.append(f"NEW FAILURE {where}: {outcome}: {res.get('message')}")
                elif e.outcome not in ("any", outcome):
                    problems.append(
                        f"CHANGED {where}: expected {e.outcome} (line {e.line}),"
                        f" got {outcome}: {res.get('message')}"
                    )
            elif e is not None and e.outcome != "any":
                problems.append(
                    f"NO LONGER FAILS {where}: {outcome}, expected {e.outcome} "
                    f"(line {e.line}: {e.reason}); remove the entry"
                )
    if known_ops is not None:
        for e in entries:
            if e.op not in known_ops:
                problems.append(f"STALE line {e.line}: OpInfo has no entry {e.op!r}")
    return problems


def render(runs, entries, reason_of):
    """The expected-failure file for these results: one entry per failing item, without
    ``@backend`` when it fails alike on every backend that ran it. Existing entries keep
    their reasons (and ``any``); new ones get ``reason_of(result)``. Entries for items
    that did not run are kept as they are."""
    by_item = {}
    for backend, results in runs:
        for key, res in results.items():
            by_item.setdefault(key, {})[backend] = res
    lines = []
    for (op, dtype, direction), per in sorted(by_item.items()):
        failing = {b: r for b, r in per.items() if r["outcome"] in FAILURES}
        if not failing:
            continue
        outcomes = {r["outcome"] for r in failing.values()}
        targets = [None] if len(failing) == len(per) and len(outcomes) == 1 else sorted(failing)
        for b in targets:
            res = failing[b] if b is not None else next(iter(failing.values()))
            old = _lookup(entries, op, dtype, direction, b)
            outcome = "any" if old is not None and old.outcome == "any" else res["outcome"]
            reason = old.reason if old is not None else reason_of(res)
            d = direction + (f"@{b}" if b is not None else "")
            lines.append(f"{op} {dtype} {d} {outcome} {reason}")
    ran = {(k, b) for b, results in runs for k in results}
    for e in entries:  # items that did not run this time keep their entries
        key = (e.op, e.dtype, e.direction)
        if key in by_item and (e.backend is None or (key, e.backend) in ran):
            continue
        d = e.direction + (f"@{e.backend}" if e.backend else "")
        lines.append(f"{e.op} {e.dtype} {d} {e.outcome} {e.reason}")
    lines.sort()
    return "\n".join(lines) + ("\n" if lines else "")
