"""Helpers for the training-habit tests (tests/python/test_training_*.py).

Each test compares a training loop on ember against the same loop in eager CPU and
counts the distinct graphs ember built for it. The graph counter is exact whatever ran
before: `fresh_graphs()` empties the in-memory graph cache, so a graph that an earlier
test already built is found in the disk cache (`disk_cache_hits`) instead of being a
silent memory hit; `graphs_built()` = `graphs_compiled` + `disk_cache_hits`.
"""
import copy
import gc

import torch

import ember

DEV = torch.device("ember")


def fresh_graphs():
    """Run pending work, then empty the in-memory graph cache and clear the counters."""
    ember.sync()
    ember._C.clear_cache()
    ember.metrics.clear()


def graphs_built():
    """Distinct graphs built since `fresh_graphs()` (memory-cache misses)."""
    c = ember.metrics.counters()
    return c["graphs_compiled"] + c["disk_cache_hits"]


class StepCounter:
    """Per-step deltas of (graphs built, memory-cache hits, syncs)."""

    def __init__(self):
        self.steps = []
        self._last = self._now()

    @staticmethod
    def _now():
        c = ember.metrics.counters()
        return (c["graphs_compiled"] + c["disk_cache_hits"], c["memory_cache_hits"], c["syncs"])

    def mark(self):
        now = self._now()
        self.steps.append(tuple(a - b for a, b in zip(now, self._last)))
        self._last = now

    def built(self, start=0, stop=None):
        return sum(s[0] for s in self.steps[start:stop])

    def hits(self, start=0, stop=None):
        return sum(s[1] for s in self.steps[start:stop])

    def syncs(self, start=0, stop=None):
        return sum(s[2] for s in self.steps[start:stop])


def mlp(d_in=10, hidden=32, d_out=3):
    return torch.nn.Sequential(
        torch.nn.Linear(d_in, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
        torch.nn.Linear(hidden, d_out))


def pair(model):
    """(eager model, ember copy with the same weights)."""
    return model, copy.deepcopy(model).to(DEV)


def assert_params_close(ref, m, **kw):
    ref_p = dict(ref.named_parameters())
    for name, p in m.named_parameters():
        assert p.device.type == "ember", name
        torch.testing.assert_close(p.detach().cpu(), ref_p[name].detach(),
                                   msg=lambda m, name=name: f"{name}: {m}", **kw)


def assert_params_equal(a, b):
    """Bit-identical parameters (both on any device)."""
    pa = dict(a.named_parameters())
    for name, p in b.named_parameters():
        x, y = p.detach().cpu(), pa[name].detach().cpu()
        assert torch.equal(x, y), f"{name}: max diff {(x - y).abs().max().item()}"


def collect():
    gc.collect()
    ember.sync()
