"""A sweep worker process: ``python -m ember.conformance._worker FD``.

Reads work items, one JSON object a line, from stdin (``{"op", "dtype", "direction"}``)
and writes JSON lines to file descriptor FD: ``{"event": "ready", ...}`` once the op
database is loaded, then per item ``{"event": "start", ...}`` and ``{"event": "result",
"result": {...}}`` (``_run.run_item``). The parent (``_driver``) notices a crash or
hang from a missing result and records it against the item that had started.
Anything an op prints goes to the worker's stdout/stderr, never into the protocol.
"""

import json
import os
import sys
import warnings


def _backend_reported(ember):
    """The execution backend as the ember build reports it, or None if it has no such
    switch (before EMBER_BACKEND existed every op ran as one ATen extern)."""
    for getter in (lambda: ember.config.backend, lambda: ember._C.backend()):
        try:
            value = getter()
        except Exception:
            continue
        if value is not None:
            return str(value)
    return None


def _inject_fault(op):
    """Fault injection for the harness's own tests (tests/python/test_conformance_harness.py):
    EMBER_CONFORMANCE_FAULT="abort:<op>,hang:<op>" makes the worker abort or hang when
    it starts that op."""
    for fault in os.environ.get("EMBER_CONFORMANCE_FAULT", "").split(","):
        kind, _, target = fault.partition(":")
        if target != op:
            continue
        if kind == "abort":
            os.abort()
        if kind == "hang":
            import time

            time.sleep(1e6)


def main(argv):
    out = os.fdopen(int(argv[1]), "w", buffering=1)

    def send(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    warnings.simplefilter("ignore")
    import torch

    if os.environ.get("EMBER_CONFORMANCE_THREADS"):
        torch.set_num_threads(int(os.environ["EMBER_CONFORMANCE_THREADS"]))
    import ember

    ember.config.recompile_warn_limit = 1 << 30
    ember.config.log_recompiles = False
    from . import _ops, _run

    send(
        {
            "event": "ready",
            "pid": os.getpid(),
            "torch": torch.__version__,
            "ember": ember.__version__,
            "backend": _backend_reported(ember),
        }
    )
    db = None  # loaded on the first item, under the item timeout
    for line in sys.stdin:
        if not line.strip():
            continue
        item = json.loads(line)
        send({"event": "start", "item": item})
        _inject_fault(item["op"])
        try:
            if db is None:
                db = _ops.load_op_db()
            res = _run.run_item(
                db[item["op"]],
                _ops.DTYPES[item["dtype"]],
                item["direction"],
                max_samples=item.get("max_samples"),
            )
        except BaseException as exc:  # the harness itself failed on this item
            res = {
                "outcome": "error",
                "samples": 0,
                "passed": 0,
                "max_error": None,
                "message": f"harness: {type(exc).__name__}: {exc}"[:400],
                "skip_reason": None,
                "fallbacks": {},
                "externs": {},
                "seconds": 0.0,
            }
        send({"event": "result", "item": item, "result": res})


if __name__ == "__main__":
    main(sys.argv)
