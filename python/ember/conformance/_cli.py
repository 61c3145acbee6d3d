"""The command line, ``python -m ember.conformance [options]`` (``--help`` lists them).

Runs PyTorch's OpInfo database on ember against eager CPU, prints per-dtype counts,
optionally writes the JSON/Markdown report, checks or rewrites an expected-failure file.
Exit status: 0, or 1 when ``--check-expected`` finds the file untrue, 2 on bad usage.
"""

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time
import zlib


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m ember.conformance",
        description="Run PyTorch's OpInfo database (op_db) on the ember device and compare "
        "every sample with eager CPU.",
    )
    p.add_argument(
        "--ops",
        metavar="PATTERN",
        help="comma-separated fnmatch patterns of OpInfo keys (name or "
        "name.variant); a leading '-' excludes: 'nn.functional.*,-*dropout*'",
    )
    p.add_argument(
        "--dtypes",
        nargs="+",
        default=["float32"],
        metavar="DTYPE",
        help="dtypes to sweep (default float32): float32 bfloat16 float16 int64 bool ...",
    )
    p.add_argument(
        "--backward",
        action="store_true",
        help="also compare gradients where the OpInfo supports autograd",
    )
    p.add_argument("--no-forward", action="store_true", help="with --backward: only that")
    p.add_argument("--json", metavar="FILE", help="write the JSON report here")
    p.add_argument("--markdown", metavar="FILE", help="write the Markdown report here")
    p.add_argument(
        "--backend",
        choices=("cpu", "interpreter", "aten"),
        help="EMBER_BACKEND for the sweep (default: the environment's, else ember's default)",
    )
    p.add_argument(
        "--sampled-backend",
        choices=("cpu", "interpreter", "aten"),
        help="also run a sampled subset of the ops through this backend",
    )
    p.add_argument(
        "--sample-fraction",
        type=float,
        default=0.1,
        help="fraction of ops for --sampled-backend (stable hash of the key; default 0.1)",
    )
    p.add_argument("--jobs", "-j", type=int, default=1, help="worker processes (default 1)")
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds one (op, dtype, direction) item may run (default 300)",
    )
    p.add_argument(
        "--max-samples", type=int, help="compare at most this many samples per item (default: all)"
    )
    p.add_argument(
        "--check-expected",
        metavar="FILE",
        help="fail (exit 1) on a failure not in FILE and on an entry of FILE that now passes",
    )
    p.add_argument(
        "--write-expected",
        metavar="FILE",
        help="write the expected-failure file for this run's failures (keeps "
        "the reasons of entries that remain)",
    )
    p.add_argument("--list", action="store_true", help="list the items and exit")
    p.add_argument("--quiet", "-q", action="store_true", help="no per-item progress")
    return p


def _in_sample(key, fraction):
    return (zlib.crc32(key.encode()) % 10000) < fraction * 10000


def _progress(quiet, label):
    t0 = time.monotonic()

    def show(item, res, done, total):
        if quiet and res["outcome"] in ("pass", "skip"):
            return
        msg = res.get("message") or res.get("skip_reason") or ""
        print(
            f"[{label} {done}/{total} {time.monotonic() - t0:5.0f}s] {item['op']} "
            f"{item['dtype']} {item['direction']}: {res['outcome']}"
            + (f" — {msg[:160]}" if res["outcome"] != "pass" else ""),
            file=sys.stderr,
            flush=True,
        )

    return show


def main(argv=None):
    args = _parser().parse_args(argv)
    from . import _driver, _expected, _ops, _report

    try:
        dtypes = [_ops.dtype_name(d) for d in args.dtypes]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    directions = ([] if args.no_forward else ["forward"]) + (["backward"] if args.backward else [])
    if not directions:
        print("error: --no-forward needs --backward", file=sys.stderr)
        return 2
    entries = []
    if args.check_expected or args.write_expected:
        path = args.check_expected or args.write_expected
        if os.path.exists(path):
            with open(path) as f:
                entries = _expected.parse(f.read(), path)
        elif args.check_expected:
            print(f"error: {path} does not exist", file=sys.stderr)
            return 2

    db = _ops.load_op_db()
    keys = _ops.select(db, args.ops)
    items = [
        {"op": k, "dtype": d, "direction": r, "max_samples": args.max_samples}
        for k in keys
        for d in dtypes
        for r in directions
        if _ops.supports(db[k], _ops.DTYPES[d], r)
    ]
    if args.list:
        for it in items:
            print(it["op"], it["dtype"], it["direction"])
        return 0

    env = dict(os.environ)
    own_cache = tempfile.mkdtemp(prefix="ember-conformance-cache-")
    env["EMBER_CACHE_DIR"] = own_cache  # fresh: no graph compiled by another build
    if args.jobs > 1:
        per = str(max(1, (os.cpu_count() or 1) // args.jobs))
        env["EMBER_CONFORMANCE_THREADS"] = per
        env.setdefault("EMBER_NUM_THREADS", per)
    backend = args.backend or os.environ.get("EMBER_BACKEND") or "default"
    runs = []
    plan = [(backend, items, None)]
    if args.sampled_backend:
        sampled = [it for it in items if _in_sample(it["op"], args.sample_fraction)]
        plan.append((args.sampled_backend, sampled, args.sample_fraction))
    try:
        for label, its, fraction in plan:
            run_env = dict(env)
            if label != "default":
                run_env["EMBER_BACKEND"] = label
            t0 = time.monotonic()
            results, info = _driver.run_items(
                its,
                jobs=args.jobs,
                timeout=args.timeout,
                env=run_env,
                progress=_progress(args.quiet, label),
            )
            runs.append(
                {
                    "backend": label,
                    "reported": (info or {}).get("backend"),
                    "items": its,
                    "results": results,
                    "fraction": fraction,
                    "seconds": round(time.monotonic() - t0, 1),
                    "torch": (info or {}).get("torch"),
                    "ember": (info or {}).get("ember"),
                }
            )
    finally:
        shutil.rmtree(own_cache, ignore_errors=True)

    meta = {
        "command": "python -m ember.conformance "
        + " ".join(map(shlex.quote, sys.argv[1:] if argv is None else argv)),
        "torch": runs[0]["torch"],
        "ember": runs[0]["ember"],
    }
    report = _report.build(runs[0], keys, meta)
    if len(runs) > 1:
        report["sampled"] = _report.build(runs[1], keys, meta)
    for title, sec in [("", report)] + ([("sampled ", report["sampled"])] if len(runs) > 1 else []):
        s = sec["summary"]
        print(
            f"{title}backend {s['backend']} (reported: {s['backend_reported']}), "
            f"{s['ops_run']} ops, {s['seconds']:.0f} s"
        )
        for dtype, per in s["counts"].items():
            for direction, c in per.items():
                print(
                    f"  {dtype:9} {direction:8} entries {c['entries']:4}  pass {c['pass']:4} "
                    f"({100 * s['pass_rate'][dtype][direction]:.1f}%)  mismatch "
                    f"{c['mismatch']}  error {c['error']}  flaky {c['flaky']}  "
                    f"skip {c['skip']}"
                )
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, sort_keys=False)
            f.write("\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# Ember conformance report (PyTorch OpInfo)\n\n" + _report.markdown(report))
    pairs = [(r["backend"], r["results"]) for r in runs]
    if args.write_expected:

        def reason_of(res):
            return f"[{_report.kind_of(res)}] {res.get('message') or ''}"[:300]

        header = (
            "# Expected conformance failures (python -m ember.conformance "
            "--check-expected).\n# <op> <dtype> <direction>[@backend] "
            "<mismatch|error|flaky|any> <reason>\n"
        )
        with open(args.write_expected, "w") as f:
            f.write(header + _expected.render(pairs, entries, reason_of))
        print(f"wrote {args.write_expected}")
    if args.check_expected:
        problems = _expected.check(pairs, entries, known_ops=set(db) if not args.ops else None)
        for p in problems:
            print(p)
        if problems:
            print(f"conformance: {len(problems)} difference(s) from {args.check_expected}")
            return 1
        print(f"conformance: results agree with {args.check_expected}")
    return 0
