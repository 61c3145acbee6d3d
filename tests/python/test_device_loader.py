"""ember.data.DeviceLoader: batches equal the wrapped loader's (oracle: the same loader
iterated directly), on ember, moved ahead on a bounded background thread; no hang at the
end of an epoch, on break, on an exception in the loop or in the loader, or at
interpreter exit (each bounded by a deadline); DataLoader workers shut down; pinned
batches become device data without a copy; memory flat over 20 epochs; the uneven last
batch intact with exactly one extra compile; the same training result and graphs as a
plain `.to(ember)` loop."""

import collections
import contextlib
import gc
import multiprocessing
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import ember
from ember.data import DeviceLoader
from training_util import DEV, StepCounter, assert_params_close, fresh_graphs, mlp, pair

THREAD = "ember.data.DeviceLoader"


@contextlib.contextmanager
def deadline(seconds):
    """Fails the test (TimeoutError) if the block runs longer than `seconds`."""

    def fire(*_):
        raise TimeoutError(f"no result within {seconds} s: hang")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def loader_threads():
    return [t for t in threading.enumerate() if t.name == THREAD]


def wait_until(pred, seconds=10.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        gc.collect()
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def no_threads_or_workers():
    return not loader_threads() and not multiprocessing.active_children()


class Samples(Dataset):
    def __init__(self, n=22, delay=0.0, fail_at=None):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 10, generator=g)
        self.y = torch.randint(0, 3, (n,), generator=g)
        self.delay, self.fail_at = delay, fail_at

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if i == self.fail_at:
            raise ValueError(f"bad sample {i}")
        if self.delay:
            time.sleep(self.delay)
        return self.x[i], self.y[i]


Pair = collections.namedtuple("Pair", "x y")


def test_nested_batches_equal_the_loader_s():
    def batches():
        for i in range(4):
            x = torch.arange(6.0).reshape(2, 3) + i
            yield {"x": x, "rest": [Pair(x * 2, torch.tensor([i])), "tag", i]}

    with deadline(60):
        got = list(DeviceLoader(list(batches()), DEV))
    want = list(batches())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g["x"].device.type == "ember" and g["rest"][0].x.device.type == "ember"
        assert isinstance(g["rest"][0], Pair) and g["rest"][1:] == ["tag", w["rest"][2]]
        torch.testing.assert_close(g["x"].cpu(), w["x"])
        torch.testing.assert_close(g["rest"][0].x.cpu(), w["rest"][0].x)
        torch.testing.assert_close(g["rest"][0].y.cpu(), w["rest"][0].y)


def test_len_and_attributes_are_the_loader_s():
    dl = DataLoader(Samples(), batch_size=5)
    d = DeviceLoader(dl)
    assert len(d) == len(dl) == 5
    assert d.dataset is dl.dataset and d.batch_size == 5
    with pytest.raises(ValueError, match="prefetch"):
        DeviceLoader(dl, prefetch=-1)


@pytest.mark.parametrize("prefetch", [1, 2, 4])
def test_moves_at_most_prefetch_batches_ahead(prefetch):
    """The producer is at most `prefetch` batches ahead of the consumer, plus the one it
    is moving (a bounded queue)."""
    produced = []

    class Counting:
        def __iter__(self):
            for i in range(12):
                produced.append(i)
                yield torch.full((4,), float(i))

    ahead = []
    with deadline(60):
        for i, b in enumerate(DeviceLoader(Counting(), prefetch=prefetch)):
            time.sleep(0.05)  # a slow consumer: the producer fills the queue
            ahead.append(len(produced) - (i + 1))
            assert b.cpu()[0].item() == i
    assert max(ahead) <= prefetch + 1, ahead
    assert max(ahead) >= prefetch, ahead  # it did run ahead


def test_prefetch_zero_moves_on_the_calling_thread():
    with deadline(60):
        got = [
            x.device.type for x, _ in DeviceLoader(DataLoader(Samples(), batch_size=5), prefetch=0)
        ]
    assert got == ["ember"] * 5 and not loader_threads()


@pytest.mark.parametrize("workers", [1, 2])
def test_epoch_end_ends_thread_and_workers(workers):
    dl = DataLoader(Samples(), batch_size=5, num_workers=workers)
    d = DeviceLoader(dl)
    with deadline(120):
        for epoch in range(3):
            sizes = [len(x) for x, _ in d]
            assert sizes == [5, 5, 5, 5, 2]
            assert wait_until(no_threads_or_workers), (
                loader_threads(),
                multiprocessing.active_children(),
            )


def test_break_ends_thread_and_workers():
    d = DeviceLoader(DataLoader(Samples(delay=0.01), batch_size=2, num_workers=2))
    with deadline(60):
        for i, (x, _) in enumerate(d):
            if i == 1:
                break
        assert wait_until(no_threads_or_workers), (
            loader_threads(),
            multiprocessing.active_children(),
        )
        # the loader is reusable after a break
        assert len(list(d)) == 11


def test_exception_in_the_loop_ends_thread_and_workers():
    d = DeviceLoader(DataLoader(Samples(), batch_size=2, num_workers=2))
    with deadline(60):
        with pytest.raises(KeyError, match="user error"):
            for i, (x, _) in enumerate(d):
                if i == 2:
                    raise KeyError("user error")
        assert wait_until(no_threads_or_workers), (
            loader_threads(),
            multiprocessing.active_children(),
        )


@pytest.mark.parametrize("workers", [0, 1])
def test_exception_in_the_loader_is_raised_on_the_calling_thread(workers):
    d = DeviceLoader(DataLoader(Samples(fail_at=7), batch_size=2, num_workers=workers))
    seen = []
    with deadline(60):
        with pytest.raises(ValueError, match="bad sample 7"):
            for x, _ in d:
                seen.append(len(x))
        # (a DataLoader whose worker raised takes ~5 s to end its workers, DeviceLoader
        # or not: torch's own shutdown; the thread ends at once)
        assert wait_until(lambda: not loader_threads())
    assert seen == [2, 2, 2]  # batches before the failing one arrived intact


def test_close_stops_a_slow_producer_without_waiting_for_it():
    it = iter(DeviceLoader(DataLoader(Samples(delay=0.2), batch_size=2)))
    with deadline(30):
        next(it)
        t0 = time.monotonic()
        it.close()
        assert time.monotonic() - t0 < 0.2  # does not wait for the batch being loaded
        with pytest.raises(StopIteration):
            next(it)
        assert wait_until(lambda: not loader_threads())


def test_interpreter_exit_with_an_open_iterator():
    """An iterator left open at exit (workers running, the queue full): the process exits
    promptly with status 0 and no error output, and leaves no worker behind."""
    code = textwrap.dedent(
        """
        import sys, time, torch, ember
        from torch.utils.data import DataLoader, Dataset
        class Slow(Dataset):
            def __len__(self): return 1000
            def __getitem__(self, i):
                time.sleep(0.01)
                return torch.full((3,), float(i))
        it = iter(ember.data.DeviceLoader(DataLoader(Slow(), batch_size=4, num_workers=2)))
        print(next(it).cpu()[0, 0].item(), flush=True)
        time.sleep(0.3)  # the producer fills its queue and blocks
        import multiprocessing
        print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
        """
    )
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 45
    lines = r.stdout.split("\n")
    assert lines[0] == "0.0", r.stdout
    assert "Error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    pids = [int(p) for p in lines[1].split()]
    assert len(pids) == 2  # the workers ran ...
    for pid in pids:  # ... and are gone
        assert not _alive(pid), pid


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_pinned_batches_become_device_data_without_a_copy():
    dl = DataLoader(Samples(), batch_size=5, pin_memory=True, num_workers=1)
    before = ember.memory_allocated()
    with deadline(60):
        for (x, y), (rx, ry) in zip(DeviceLoader(dl), DataLoader(Samples(), batch_size=5)):
            assert x.device.type == "ember"
            host = ember._C.data_of(x)
            assert host.is_pinned()  # the pinned block itself: no copy into the device
            # The previous batch's programs finished and released their results (a read
            # returns when its value is ready, before the queue's worker frees the job).
            ember.sync()
            assert ember.memory_allocated() == before  # borrowed, not a device buffer
            torch.testing.assert_close(x.cpu(), rx)
            torch.testing.assert_close(y.cpu(), ry)
            torch.testing.assert_close((x * 2).sum(1).cpu(), (rx * 2).sum(1))


@pytest.mark.parametrize("pin", [False, True])
def test_memory_flat_over_20_epochs(pin):
    dl = DataLoader(Samples(40), batch_size=8, pin_memory=pin)
    d = DeviceLoader(dl)
    w = torch.ones(10, device=DEV)
    per_epoch = []
    with deadline(120):
        for _ in range(20):
            total = torch.zeros((), device=DEV)
            for x, _y in d:
                total = total + (x @ w).sum()
            total.item()  # one graph per epoch, the same each epoch
            del total, x, _y
            gc.collect()
            per_epoch.append(ember.memory_allocated())
    assert len(set(per_epoch)) == 1, per_epoch


def _train(batches, epochs, counter_every_epoch=True):
    torch.manual_seed(0)
    ref, m = pair(mlp())
    opts = [torch.optim.SGD(mod.parameters(), lr=0.05, momentum=0.9) for mod in (ref, m)]
    fresh_graphs()
    counter = StepCounter()
    seen = []
    for _ in range(epochs):
        for (x, y), (rx, ry) in batches():
            seen.append((x.device.type, len(x)))
            torch.testing.assert_close(x.cpu(), rx)  # intact, whatever its size
            for model, opt, xx, yy in [(ref, opts[0], rx, ry), (m, opts[1], x, y)]:
                F.cross_entropy(model(xx), yy).backward()
                opt.step()
                opt.zero_grad()
        counter.mark()
    assert_params_close(ref, m, rtol=1e-5, atol=1e-6)
    return m, counter, seen


@pytest.mark.parametrize("drop_last", [True, False])
def test_uneven_last_batch_intact_with_one_extra_compile(drop_last):
    """22 samples in batches of 5: 4 full batches (+ one of 2). The step compiles twice
    for the full batch (optimizer state appears at step 2) and once more for the last
    batch; the second epoch only hits the cache."""
    dl = DataLoader(Samples(22), batch_size=5, num_workers=1, drop_last=drop_last)
    ref = DataLoader(Samples(22), batch_size=5, drop_last=drop_last)
    with deadline(180):
        _, counter, seen = _train(lambda: zip(DeviceLoader(dl), ref), epochs=2)
    assert [n for _, n in seen] == ([5] * 4 if drop_last else [5] * 4 + [2]) * 2
    assert all(d == "ember" for d, _ in seen)
    assert counter.built(0, 1) == (2 if drop_last else 3), counter.steps
    assert counter.built(1) == 0 and counter.hits(1) == len(seen) // 2, counter.steps


def test_training_equals_the_plain_loop_bit_for_bit():
    """The loader's thread creates device data while the calling thread traces and syncs:
    the trained parameters and the graphs built equal a plain `.to(ember)` loop's."""
    dl = DataLoader(Samples(22), batch_size=5, num_workers=1)
    ref = DataLoader(Samples(22), batch_size=5)
    with deadline(180):
        plain, c_plain, _ = _train(
            lambda: zip(((x.to(DEV), y.to(DEV)) for x, y in dl), ref), epochs=2
        )
        loaded, c_loaded, _ = _train(lambda: zip(DeviceLoader(dl), ref), epochs=2)
    for (name, p), q in zip(plain.named_parameters(), loaded.parameters()):
        assert torch.equal(p.detach().cpu(), q.detach().cpu()), name
    assert [s[0] for s in c_plain.steps] == [s[0] for s in c_loaded.steps]


def test_break_then_the_next_epoch_with_persistent_workers():
    """A DataLoader with persistent workers reuses one iterator across epochs; an epoch
    left early is followed by a complete, correct one."""
    dl = DataLoader(Samples(delay=0.005), batch_size=2, num_workers=2, persistent_workers=True)
    d = DeviceLoader(dl)
    ref = [x for x, _ in DataLoader(Samples(), batch_size=2)]
    with deadline(120):
        for _ in range(3):
            for i, (x, _) in enumerate(d):
                torch.testing.assert_close(x.cpu(), ref[i])
                if i == 2:
                    break
        got = [x.cpu() for x, _ in d]
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    del d, dl
    assert wait_until(no_threads_or_workers)
