"""Native kernels split their loops on ATen's intra-op pool (docs/architecture.md,
"Threads"): with two torch threads, a large fused kernel's work is shared by two
threads of this process, and its values are eager's."""

import os
import threading

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
