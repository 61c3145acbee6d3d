"""DataLoader habits feeding ember: forked workers (which never touch the parent's device
state), pinned memory, drop_last either way. Results equal eager CPU fed by the same
loader; graph counts are bounded by the distinct batch shapes."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import ember
from training_util import DEV, StepCounter, assert_params_close, fresh_graphs, mlp, pair


class _Samples(Dataset):
    """CPU samples; each records whether it was produced in a forked worker."""

    def __init__(self, n=20):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 10, generator=g)
        self.y = torch.randint(0, 3, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        forked = info is not None and ember._C.is_in_bad_fork()
        return self.x[i], self.y[i], torch.tensor(forked)


def _train(loader, epochs=2):
    torch.manual_seed(0)
    ref, m = pair(mlp())
    opts = [torch.optim.SGD(mod.parameters(), lr=0.05, momentum=0.9) for mod in (ref, m)]
    fresh_graphs()
    counter = StepCounter()
    seen = []
    for _ in range(epochs):
        for x, y, forked in loader:
            seen.append((x, forked))
            for model, opt, dev in [(ref, opts[0], "cpu"), (m, opts[1], DEV)]:
                F.cross_entropy(
                    model(x.to(dev, non_blocking=True)), y.to(dev, non_blocking=True)
                ).backward()
                opt.step()
                opt.zero_grad()
        counter.mark()
    assert_params_close(ref, m, rtol=1e-5, atol=1e-6)
    return counter, seen


def test_forked_workers_feed_ember_training():
    parent_pending = torch.ones(3, device=DEV) * 2  # live device state in the parent
    loader = DataLoader(_Samples(), batch_size=5, num_workers=2, multiprocessing_context="fork")
    counter, seen = _train(loader)
    # every batch came from a forked worker, which produced CPU tensors only
    assert all(bool(f.all()) for _, f in seen)
    assert all(x.device.type == "cpu" for x, _ in seen)
    assert not ember._C.is_in_bad_fork()
    torch.testing.assert_close(parent_pending.cpu(), torch.full((3,), 2.0))
    assert counter.built() <= 2 and counter.built(1) == 0, counter.steps


def test_worker_using_ember_raises_clearly():
    class Bad(_Samples):
        def __getitem__(self, i):
            return torch.ones(2, device=DEV)

    loader = DataLoader(Bad(4), batch_size=2, num_workers=1, multiprocessing_context="fork")
    with pytest.raises(RuntimeError, match="fork"):
        next(iter(loader))


def test_pin_memory():
    loader = DataLoader(_Samples(), batch_size=5, pin_memory=True)
    counter, seen = _train(loader)
    assert all(x.is_pinned() for x, _ in seen)
    assert counter.built() <= 2 and counter.built(1) == 0, counter.steps


@pytest.mark.parametrize("drop_last", [True, False])
def test_drop_last(drop_last):
    loader = DataLoader(
        _Samples(22),
        batch_size=5,
        shuffle=True,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(3),
    )
    counter, seen = _train(loader, epochs=2)
    sizes = [len(x) for x, _ in seen]
    assert sizes == ([5] * 4 if drop_last else [5] * 4 + [2]) * 2
    # batch 5 (first step, steady) [+ the last batch of 2]; nothing new in epoch 2
    assert counter.built() <= (2 if drop_last else 3) and counter.built(1) == 0, counter.steps
