"""Asynchronous execution (docs/architecture.md, "Execution model"): a sync queues its
program and returns; reads wait for the program producing their value. Oracles: the
same steps with ember.config.async_execution off (same bits) and eager CPU."""

import copy
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember
from conftest import DEV, close


@pytest.fixture
def async_mode():
    """Asynchronous execution on (the default "auto" runs short programs inside their
    sync on a machine without a spare CPU), restored afterwards."""
    old = ember.config.async_execution
    ember.config.async_execution = True
    yield
    ember.sync()
    ember.config.async_execution = old


@pytest.fixture
def donating(async_mode):
    """Asynchronous execution with donation on (the default; a test before may have
    switched it off), restored afterwards."""
    ember.config.async_execution = True
    old = ember.config.donate_buffers
    ember.config.donate_buffers = True
    yield
    ember.config.donate_buffers = old


def _mlp_steps(steps, async_on, read_every=None):
    ember.config.async_execution = async_on
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.Linear(32, 5)).to(DEV)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 12, generator=g).to(DEV), torch.randint(0, 5, (8,), generator=g).to(DEV)
    losses = []
    for i in range(steps):
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if read_every and i % read_every == 0:
            losses.append(loss.item())  # a value read mid-loop: waits for that step only
    ember.sync()
    return losses, [p.detach().cpu() for p in m.parameters()]


def test_async_steps_give_the_bits_of_synchronous_steps(async_mode):
    a_losses, a_params = _mlp_steps(6, True, read_every=2)
    s_losses, s_params = _mlp_steps(6, False, read_every=2)
    assert a_losses == s_losses
    for a, s in zip(a_params, s_params):
        assert torch.equal(a, s)


def test_optimizer_step_queues_and_returns(async_mode):
    ember.config.async_execution = True
    ember._C._pause_queue(True)  # the worker starts nothing: the step stays queued
    try:
        m = nn.Linear(4, 3).to(DEV)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        m(torch.randn(2, 4).to(DEV)).sum().backward()
        opt.step()  # returns although its program has not run
        assert ember._C.queued_programs() >= 1
        assert not ember._C.is_pending(m.weight)  # in flight, not pending
        w = m.weight * 2  # traced on the in-flight value: no wait
    finally:
        ember._C._pause_queue(False)
    close(w, m.weight.detach().cpu() * 2)


def test_step_traced_on_in_flight_parameters_hits_the_cache(async_mode):
    """The forward's views of the weights (Linear's `w.t()`) taken while the previous
    step's program is still queued are view futures, leaves like views of device data:
    the step graph is the same whether or not that program has finished, so a steady
    loop compiles nothing however tracing and execution interleave."""
    ember.config.async_execution = True
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    ref = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    ref.load_state_dict(m.state_dict())
    m = m.to(DEV)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    xc = torch.randn(4, 6)
    x = xc.to(DEV)

    def step(model, o, inp):
        model(inp).square().sum().backward()
        o.step()
        o.zero_grad()

    for _ in range(3):  # warm: both step graphs compiled, every program finished
        step(m, opt, x)
        ember.sync()
    compiled = ember.metrics.counters()["graphs_compiled"]
    for _ in range(3):  # traced while the previous step's program waits in the queue
        ember._C._pause_queue(True)
        try:
            step(m, opt, x)
        finally:
            ember._C._pause_queue(False)
    ember.sync()
    assert ember.metrics.counters()["graphs_compiled"] == compiled
    for _ in range(6):
        step(ref, ropt, xc)
    for p, q in zip(m.parameters(), ref.parameters()):
        close(p, q.detach(), rtol=1e-5, atol=1e-6)


def test_view_of_an_in_flight_tensor_reads_the_view(async_mode):
    ember.config.async_execution = True
    a = torch.randn(4, 6).to(DEV)
    ember.sync()
    ember._C._pause_queue(True)
    try:
        b = a * 2 + 1
        ember.sync(wait=False)  # b in flight
        views = [b.t(), b[1:3, 2:], b.view(3, 8), b.transpose(0, 1)[2], b.unbind(1)[4]]
        vv = b.t()[1:, ::2]  # a view of a view future
        assert ember._C.queued_programs() == 1
        assert not any(ember._C.is_pending(v) for v in views + [vv])  # no traced node
    finally:
        ember._C._pause_queue(False)
    ref = a.cpu() * 2 + 1
    expect = [ref.t(), ref[1:3, 2:], ref.view(3, 8), ref.transpose(0, 1)[2], ref.unbind(1)[4]]
    for v, e in zip(views, expect):
        assert v.shape == e.shape and v.stride() == e.stride()
        close(v, e)
    close(vv, ref.t()[1:, ::2])
    close(views[0] @ views[0].t(), ref.t() @ ref)  # traced on a view future


def test_error_in_a_queued_program_names_the_line_and_spares_the_rest(async_mode):
    ember.config.async_execution = True
    x = torch.randn(5, 3).to(DEV)
    idx = torch.tensor([0, 9]).to(DEV)
    ember.sync()
    ok = x.exp()
    bad = x.index_select(0, idx)  # the failing line
    line = sys._getframe().f_lineno - 1
    ember.sync(wait=False)  # queued; the error is raised later
    with pytest.raises(IndexError, match=rf"index_select.*test_async_execution\.py:{line}"):
        bad.cpu()
    close(ok, x.cpu().exp())
    with pytest.raises(IndexError, match="index_select"):  # every read raises it again
        bad.sum().cpu()


def test_program_reading_a_failed_programs_result_fails_only_its_dependents(async_mode):
    """Traced while the failing program is still queued, `later` reads its result (an
    in-flight input that fails) and `other` does not: `later` raises the first error,
    `other` is computed."""
    ember.config.async_execution = True
    x = torch.randn(5, 3).to(DEV)
    idx = torch.tensor([0, 9]).to(DEV)
    ember.sync()
    ember._C._pause_queue(True)
    try:
        bad = x.index_select(0, idx)
        ember.sync(wait=False)  # queued, fails when it runs
        later = bad * 2  # traced on the in-flight (to fail) value
        other = x + 1
        ember.sync(wait=False)
    finally:
        ember._C._pause_queue(False)
    with pytest.raises(IndexError, match="index_select"):
        later.cpu()
    close(other, x.cpu() + 1)


def test_error_nobody_reads_surfaces_at_the_next_sync_once(async_mode):
    ember.config.async_execution = True
    x = torch.randn(5, 3).to(DEV)
    idx = torch.tensor([7]).to(DEV)
    ember.sync()
    bad = x.index_select(0, idx)
    ember.sync(wait=False)
    ember._C.drain()
    del bad  # nothing will read it
    with pytest.raises(IndexError, match="index_select"):
        ember.sync()
    ember.sync()  # raised once


def test_tensor_traced_during_a_queued_program_never_recomputes_it(donating):
    """The forced interleaving of test_two_python_threads_train_concurrently: thread B
    traces ops on thread A's tensors while A's program waits in the queue. B gets
    in-flight leaves, never A's pending nodes, so even with donation on, B's values are
    computed from A's results (never from a buffer A's program overwrote)."""
    try:
        for it in range(5):  # a fixed count, every iteration the same interleaving
            torch.manual_seed(it)
            p = torch.randn(64).to(DEV)
            ember.sync()
            ref = p.cpu()
            ember._C._pause_queue(True)
            p.mul_(2).add_(1)  # p's old buffer: only the graph refers to it (donatable)
            ember.sync(wait=False)  # A's program: queued, not run
            seen = {}

            def trace_b():
                seen["q"] = p * 3  # B, while A's program is queued

            t = threading.Thread(target=trace_b)
            t.start()
            t.join()
            ember._C._pause_queue(False)
            close(p, ref * 2 + 1)
            close(seen["q"], (ref * 2 + 1) * 3)
    finally:
        ember._C._pause_queue(False)


def test_value_read_before_another_threads_sync_is_read_from_its_future(donating):
    """The read-then-attach interleaving (test_runtime.py::test_tracing_from_threads got
    values 1.5^17 too large with donation on), forced each iteration: thread B reads p's
    pending value as the operand of `p * 3` and stops before binding its result; the
    main thread's sync claims p and writes it into p's old buffer (donated); then B
    registers its node. B's graph reads p's future, never recomputing p from the
    donated buffer (which would give (2(2r+1)+1)*3)."""
    try:
        for it in range(8):  # a fixed count, every iteration the same interleaving
            torch.manual_seed(it)
            p = torch.randn(64).to(DEV)
            ember.sync()
            ref = p.cpu()
            p.mul_(2).add_(1)  # p's old buffer: only the graph refers to it (donatable)
            seen = {}
            ember._C._pause_trace_after_operands(True)
            t = threading.Thread(target=lambda: seen.__setitem__("q", p * 3))
            t.start()
            ember._C._wait_for_trace_pause()  # B holds p's pending node, unregistered
            donated = ember.metrics.counters()["donated_buffers"]
            ember.sync()  # claims p, runs, donates p's old buffer
            assert ember.metrics.counters()["donated_buffers"] > donated
            ember._C._pause_trace_after_operands(False)
            t.join(timeout=120)
            assert not t.is_alive()
            close(p, ref * 2 + 1)
            close(seen["q"], (ref * 2 + 1) * 3)
    finally:
        ember._C._pause_trace_after_operands(False)


def test_two_threads_train_while_programs_run(async_mode):
    """Two Python threads train their own models at once; each one's syncs claim the
    other's pending work too. The models and inputs are made on this thread first
    (torch's default generator is shared: seeding inside the threads would race)."""
    ember.config.async_execution = True
    init = {}
    for k in (0, 1):
        torch.manual_seed(k)
        init[k] = (nn.Linear(6, 2), torch.randn(4, 6))

    def train(model, x, steps=10):
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(steps):
            model(x).square().sum().backward()
            opt.step()
            opt.zero_grad()
        return model.weight.detach().cpu()

    results = {}
    on_dev = {k: (copy.deepcopy(m).to(DEV), x.to(DEV)) for k, (m, x) in init.items()}
    threads = [
        threading.Thread(target=lambda k=k: results.__setitem__(k, train(*on_dev[k])))
        for k in (0, 1)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for k, (m, x) in init.items():
        close(results[k], train(copy.deepcopy(m), x), rtol=1e-5, atol=1e-6)


def _run_child(code, timeout=120, **kw):
    env = dict(os.environ)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def test_exit_with_programs_queued_drains_and_saves(tmp_path):
    path = tmp_path / "t.pt"
    code = f"""
        import torch, ember
        ember.config.async_execution = True
        x = torch.randn(256, 256).to("ember")
        for _ in range(20):
            x = torch.tanh(x @ x.t() / 256)
        ember.sync(wait=False)
        torch.save(x, {str(path)!r})  # waits for x's program
        y = x * 2
        ember.sync(wait=False)  # still queued when the interpreter exits
        print("done", time.monotonic(), flush=True)
    """
    r = _run_child("import time\n" + textwrap.dedent(code), timeout=240)
    exited = time.monotonic()
    assert r.returncode == 0, r.stderr[-3000:]
    assert "done" in r.stdout
    # From the last line to the end of the process: the drain at exit (CLOCK_MONOTONIC
    # is one clock for both processes). Generous for a loaded 2-core machine; a hang
    # would last until the timeout.
    assert exited - float(r.stdout.split()[-1]) < 30
    assert torch.load(path, map_location="cpu", weights_only=False).shape == (256, 256)


def test_keyboard_interrupt_abandons_the_step_and_the_next_one_runs():
    """Ctrl-C while a read waits for a long program (few ops, each a big GEMM: cheap to
    compile, seconds to run) stops it between steps; the inputs keep their values and
    the next step runs."""
    code = """
        import signal, threading, time, os, torch, ember
        # Python's own Ctrl-C handler, even when started with SIGINT ignored (a
        # background job of a non-interactive shell inherits SIG_IGN).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        ember.config.async_execution = True
        w = torch.randn(1536, 1536).to("ember") / 40
        ember.sync()
        x = w
        for _ in range(60):
            x = torch.sin(x @ w) + 1
        t0 = time.monotonic()
        ember.sync(wait=False)
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        try:
            x.cpu()  # x is in flight: the read only waits (no sync, nothing to compile)
            print("not interrupted after %.1f s" % (time.monotonic() - t0))
        except KeyboardInterrupt:
            print("interrupted after %.1f s" % (time.monotonic() - t0))
        y = (w * 2).sum().item()  # the next step runs
        print("next", abs(y - (w.cpu() * 2).sum().item()) < 1e-2)
        print("w intact", torch.isfinite(w.cpu()).all().item())
    """
    r = _run_child(code, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "interrupted after" in out and "not interrupted" not in out, out
    assert "next True" in out, out
    assert "w intact True" in out, out


def _finishes_while_the_queue_is_paused(fn, within=60.0):
    """Whether fn() returns within `within` seconds with the queue paused (a program
    handed to the worker waits until the queue is resumed)."""
    done = threading.Event()
    result = {}

    def body():
        result["value"] = fn()
        done.set()

    ember._C._pause_queue(True)
    try:
        t = threading.Thread(target=body)
        t.start()
        finished = done.wait(within)
    finally:
        ember._C._pause_queue(False)
    t.join()
    return finished, result.get("value")


def test_a_waited_short_program_runs_on_the_calling_thread(async_mode):
    """ember.sync() and a value read wait for their program anyway: with nothing else
    queued, a program whose last run was short runs on the calling thread (no hand-off
    to the worker), with the queue's results. A program never run before goes to the
    worker, and so does one while the worker holds its OpenMP pool (it frees the pool
    after 20 ms idle: src/torch/openmp_team.h)."""
    ember.config.async_execution = True
    x = torch.randn(16, 16)
    xd = x.to(DEV)
    ember.sync()

    def step():
        return torch.tanh(xd @ xd.t()) + 1

    first = step()
    finished, _ = _finishes_while_the_queue_is_paused(lambda: first.cpu(), within=0.5)
    assert not finished  # first run of this graph: handed to the worker
    close(first, torch.tanh(x @ x.t()) + 1)
    time.sleep(0.1)  # the worker idles and frees its pool
    y = step()
    finished, _ = _finishes_while_the_queue_is_paused(lambda: ember.sync())
    assert finished  # ran here: the queue is paused
    close(y, torch.tanh(x @ x.t()) + 1)
    z = step()
    finished, value = _finishes_while_the_queue_is_paused(lambda: z.cpu())
    assert finished
    close(value, torch.tanh(x @ x.t()) + 1)
    assert ember._C.queued_programs() == 0


def test_async_off_runs_each_program_inside_its_sync(async_mode):
    ember.config.async_execution = False
    ember._C._pause_queue(True)  # nothing may go through the queue
    try:
        x = torch.randn(3, 3).to(DEV)
        y = (x + 1).sum()
        ember.sync(wait=False)
        assert ember._C.queued_programs() == 0
        close(y, (x.cpu() + 1).sum())
    finally:
        ember._C._pause_queue(False)


def test_donated_step_keeps_every_tensor_correct_while_another_thread_traces(donating):
    """The interleaving that made donation unsafe, forced each iteration: the step's
    sync is queued (the queue paused: it has not run) with the weight's old buffer
    donated, and then a second thread traces a tensor computed from the old weight and
    one from the new weight. Both read futures of the queued program, never its nodes
    (which would read the donated buffer after the run): values equal eager's."""
    _donated_steps_with_a_second_thread_tracing()


def _donated_steps_with_a_second_thread_tracing():
    torch.manual_seed(0)
    ref = nn.Linear(16, 16)
    m = copy.deepcopy(ref).to(DEV)
    opts = [torch.optim.SGD(mm.parameters(), lr=0.1, momentum=0.9) for mm in (ref, m)]
    x = torch.randn(4, 16)
    xd = x.to(DEV)
    ember.sync()
    donated = ember.metrics.counters()["donated_buffers"]
    for _ in range(8):
        old_ref = ref.weight.detach() * 3
        old = m.weight.detach() * 3  # pending: reads the old weight's buffer
        for mm, opt, xx in ((ref, opts[0], x), (m, opts[1], xd)):
            mm(xx).square().mean().backward()
            opt.step()
            opt.zero_grad()
        out = {}

        def trace():
            out["from_old"] = old * 2
            out["from_new"] = m.weight.detach() + 1

        ember._C._pause_queue(True)
        try:
            ember.sync(wait=False)  # queued, not run: the weight's old buffer is donated
            t = threading.Thread(target=trace)
            t.start()
            t.join()
        finally:
            ember._C._pause_queue(False)
        close(out["from_old"], old_ref * 2)
        close(out["from_new"], ref.weight.detach() + 1)
    # buffers of the weight, bias and momentum buffers are donated from the second step on
    assert ember.metrics.counters()["donated_buffers"] - donated >= 2 * 7


def test_auto_runs_short_programs_in_their_sync_only_without_a_spare_cpu(async_mode):
    """async_execution="auto": with as many ATen threads as CPUs, a short program runs
    inside ember.sync(wait=False) (the tracer would contend with the worker's team);
    with a CPU to spare it is queued. The first run of a graph always goes to the
    worker."""
    cpus = len(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    ember.config.async_execution = "auto"
    x = torch.randn(8, 8)
    xd = x.to(DEV)
    ember.sync()

    def queued_after_sync():
        y = torch.tanh(xd) * 3
        ember._C._pause_queue(True)
        try:
            ember.sync(wait=False)
            queued = ember._C.queued_programs()
        finally:
            ember._C._pause_queue(False)
        close(y, torch.tanh(x) * 3)
        return queued

    try:
        torch.set_num_threads(cpus)
        assert queued_after_sync() == 1  # first run: the worker
        time.sleep(0.1)  # the worker frees its OpenMP pool
        assert queued_after_sync() == 0  # ran inside the sync
        if cpus >= 2:
            torch.set_num_threads(cpus - 1)
            assert queued_after_sync() == 1  # a CPU to spare: queued
    finally:
        torch.set_num_threads(threads)


def test_async_execution_accepts_true_false_and_auto(async_mode):
    for v in (True, False, "auto"):
        ember.config.async_execution = v
        assert ember.config.async_execution == v
    with pytest.raises(ValueError, match="True, False or 'auto'"):
        ember.config.async_execution = "sometimes"
