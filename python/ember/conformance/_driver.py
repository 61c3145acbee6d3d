"""Running a list of work items in a pool of worker subprocesses.

Each worker (``_worker``) loads torch, ember and the OpInfo database once and then takes
items one at a time, so the pool balances itself. A worker that dies (abort, segfault,
``os._exit``) or runs one item past ``timeout`` seconds is killed and replaced; the item
it was running is recorded as an ``error`` ("crashed: ..." with the tail of its stderr,
or "timeout: ...") and the sweep continues. Workers are also replaced after
``recycle`` items, to bound the memory a long sweep accumulates.
"""

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time

_STARTUP_TIMEOUT = 600.0


def _error(message):
    return {
        "outcome": "error",
        "samples": 0,
        "passed": 0,
        "max_error": None,
        "message": message[:400],
        "skip_reason": None,
        "fallbacks": {},
        "externs": {},
        "seconds": 0.0,
    }


class _Worker:
    def __init__(self, env, logdir):
        rfd, wfd = os.pipe()
        self.log = tempfile.NamedTemporaryFile(
            "w+b", dir=logdir, prefix="worker-", suffix=".log", delete=False
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ember.conformance._worker", str(wfd)],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            pass_fds=(wfd,),
            env=env,
            start_new_session=True,
        )
        os.close(wfd)
        self.fd = rfd
        os.set_blocking(rfd, False)
        self.buf = b""
        self.ready = False
        self.info = None
        self.item = None
        self.since = time.monotonic()
        self.done = 0

    def send(self, item):
        self.item = item
        self.since = time.monotonic()
        self.proc.stdin.write((json.dumps(item) + "\n").encode())
        self.proc.stdin.flush()

    def lines(self):
        """Complete protocol lines read so far; None at end of file (the worker died)."""
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return []
        if not chunk:
            return None
        self.buf += chunk
        *full, self.buf = self.buf.split(b"\n")
        return [json.loads(x) for x in full if x.strip()]

    def tail(self, n=600):
        try:
            self.log.flush()
            with open(self.log.name, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - n))
                return " ".join(f.read().decode("utf-8", "replace").split())
        except OSError:
            return ""

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.close()

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass

    def status(self):
        rc = self.proc.wait()
        if rc < 0:
            try:
                return f"signal {signal.Signals(-rc).name}"
            except ValueError:
                return f"signal {-rc}"
        return f"exit code {rc}"


def run_items(items, *, jobs=1, timeout=300.0, env=None, recycle=400, progress=None):
    """Runs ``items`` (dicts with op/dtype/direction) and returns
    ``(results, info)``: results maps ``(op, dtype, direction)`` to ``_run.run_item``'s
    dict; info is the first worker's ready message (torch and ember versions, backend)."""
    env = dict(os.environ if env is None else env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    pending = list(reversed(items))
    results = {}
    info = None
    logdir = tempfile.mkdtemp(prefix="ember-conformance-")
    sel = selectors.DefaultSelector()
    workers = []
    startup_failures = 0

    def spawn():
        w = _Worker(env, logdir)
        sel.register(w.fd, selectors.EVENT_READ, w)
        workers.append(w)

    def retire(w, kill):
        sel.unregister(w.fd)
        workers.remove(w)
        if kill:
            w.kill()
        else:
            try:
                w.proc.stdin.close()
            except OSError:
                pass
            try:
                w.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
            w.close()

    def record(item, res):
        results[(item["op"], item["dtype"], item["direction"])] = res
        if progress:
            progress(item, res, len(results), len(items))

    def feed(w):
        if w.done >= recycle and pending:
            retire(w, kill=False)
            spawn()
        elif pending:
            w.send(pending.pop())
        else:
            retire(w, kill=False)

    try:
        for _ in range(max(1, min(jobs, len(items)))):
            spawn()
        while workers:
            now = time.monotonic()
            for w in list(workers):
                limit = timeout if w.ready else _STARTUP_TIMEOUT
                if now - w.since > limit:
                    if w.item is not None:
                        record(w.item, _error(f"timeout: no result after {limit:.0f} s"))
                    else:
                        startup_failures += 1
                    retire(w, kill=True)
                    if pending or (w.item is None and startup_failures < 3):
                        spawn()
            for key, _ in sel.select(timeout=1.0):
                w = key.data
                msgs = w.lines()
                if msgs is None:  # the worker is gone
                    status = w.status()
                    if w.item is not None:
                        record(w.item, _error(f"crashed ({status}) while running it: {w.tail()}"))
                    elif not w.ready:
                        startup_failures += 1
                        if startup_failures >= 3:
                            raise RuntimeError(
                                f"conformance workers fail to start ({status}): {w.tail(2000)}"
                            )
                    retire(w, kill=True)
                    if pending or not w.ready:
                        spawn()
                    continue
                for m in msgs:
                    if m["event"] == "ready":
                        w.ready = True
                        info = info or m
                        feed(w)
                    elif m["event"] == "start":
                        w.since = time.monotonic()
                    elif m["event"] == "result":
                        record(m["item"], m["result"])
                        w.item = None
                        w.done += 1
                        feed(w)
                    if w not in workers:
                        break
    finally:
        for w in list(workers):
            retire(w, kill=True)
        sel.close()
        try:
            os.rmdir(logdir)
        except OSError:
            pass
    for it in items:  # anything never run (cannot happen unless startup kept failing)
        results.setdefault(
            (it["op"], it["dtype"], it["direction"]), _error("not run: workers failed to start")
        )
    return results, info
