"""Native kernels split their loops on ATen's intra-op pool (docs/architecture.md,
"Threads"): with two torch threads, a large fused kernel's work is shared by two
threads of this process, and its values are eager's."""

import os
import threading
import time

import torch

import ember


def _thread_ticks() -> dict:
    """CPU time (user + system clock ticks) of every thread of this process, by id."""
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        ticks[int(tid)] = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks


def test_large_fused_kernel_runs_on_two_threads():
    before_threads = torch.get_num_threads()
    before_async = ember.config.async_execution
    torch.set_num_threads(2)
    # Each program runs inside its sync, on this thread: the split is measured against
    # the thread that starts the kernel (with asynchronous execution that is the queue's
    # worker, and this thread only traces).
    ember.config.async_execution = False
    try:
        x = torch.randn(2048, 4096)
        xd = x.to(ember.device())

        def f(t):
            return torch.exp(torch.sin(t) * 1.5 - t)

        ember.sync()
        y = f(xd)
        ember.sync()  # compiles the kernel
        torch.testing.assert_close(y.cpu(), f(x), rtol=1e-5, atol=1e-6)
        main = threading.get_native_id()
        t0 = _thread_ticks()
        for _ in range(20):
            y = f(xd)
            ember.sync()
        t1 = _thread_ticks()
        main_ticks = t1.get(main, 0) - t0.get(main, 0)
        others = max((t1[t] - t0.get(t, 0) for t in t1 if t != main), default=0)
        assert main_ticks > 0
        # Half the range runs on the second thread (deterministic split); allow for
        # the main thread's tracing and sync overhead.
        assert others >= 0.3 * main_ticks, (main_ticks, t1, t0)
        torch.testing.assert_close(y.cpu(), f(x), rtol=1e-5, atol=1e-6)
    finally:
        torch.set_num_threads(before_threads)
        ember.config.async_execution = before_async


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_eager_ops_and_queued_programs_share_one_openmp_pool():
    """libgomp keeps a pool per master thread, and with more pool threads than CPUs it
    throttles every team's spin-waits (src/torch/openmp_team.h). The caller frees its
    pool when a program goes to the worker, and the idle worker frees its own: after a
    queued program the process holds neither, and an eager op starts the caller's again."""
    before_threads = torch.get_num_threads()
    before_async = ember.config.async_execution
    torch.set_num_threads(2)
    ember.config.async_execution = True
    try:
        x = torch.randn(2048, 4096)
        xd = x.to(ember.device())

        def eager_parallel():  # an eager op ATen splits over the caller's pool
            torch.exp(x).sum()
            time.sleep(0.2)  # past the worker's idle time; exited threads are gone

        def queued_program():  # a large fused kernel, queued to the worker
            y = torch.exp(torch.sin(xd) * 1.5 - xd)
            total = y.sum()
            # Queued, whatever its duration (a waited sync would run a program of under
            # 10 ms on this thread: docs/architecture.md, "Execution model").
            ember.sync(wait=False)
            total.item()  # waits; a 0-d copy starts no pool (y.cpu() would: a large copy)
            time.sleep(0.2)
            return y

        for _ in range(2):  # compiles; starts the worker
            eager_parallel()
            queued_program()
        eager_parallel()
        with_caller_pool = _threads()
        y = queued_program()
        with_no_pool = _threads()
        eager_parallel()
        again = _threads()
        torch.testing.assert_close(y.cpu(), torch.exp(torch.sin(x) * 1.5 - x), rtol=1e-5, atol=1e-6)
        pool = torch.get_num_threads() - 1  # a pool's threads besides its master
        assert with_no_pool == with_caller_pool - pool, (with_caller_pool, with_no_pool)
        assert again == with_caller_pool, (with_caller_pool, again)
    finally:
        torch.set_num_threads(before_threads)
        ember.config.async_execution = before_async
