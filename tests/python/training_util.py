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
        torch.nn.Linear(d_in, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, d_out),
    )


def pair(model):
    """(eager model, ember copy with the same weights)."""
    return model, copy.deepcopy(model).to(DEV)


def assert_params_close(ref, m, **kw):
    ref_p = dict(ref.named_parameters())
    for name, p in m.named_parameters():
        assert p.device.type == "ember", name
        torch.testing.assert_close(
            p.detach().cpu(), ref_p[name].detach(), msg=lambda m, name=name: f"{name}: {m}", **kw
        )


# Where ember and eager differ in the last bits and no formula change removes it
# (measured on torch 2.13 CPU, AVX512; docs/architecture.md, "Lowering"):
#  - sqrt: ember's is correctly rounded, eager's float32 sqrt (MKL VML) is not: 15.6% of
#    random inputs come out 1 ulp off. Adam-family / RMSprop denominators sqrt(v) + eps
#    inherit that ulp, and the update lr * m / (sqrt(v) + eps) carries it into the
#    parameters; with the sqrt rounded as eager's, ember's AdamW step is bit-identical.
#  - tanh, exp, log come from different vector math (Sleef in eager), reductions sum in
#    a different order (sum, softmax, cross-entropy, bias gradients).
# Tests that differ only by these compare with torch's float32 defaults:
F32_TOL = dict(rtol=1.3e-6, atol=1e-5)


def assert_as_accurate_as_eager(x, r, t, what, *, rtol=1e-5, atol=1e-6):
    """Ember's tensor `x` against eager float32's `r`, with the same computation run in
    float64 (`t`) as the arbiter: every element is within (rtol, atol) of eager's, or
    no farther from the float64 value than twice eager's largest float32 error in this
    tensor (where the float32 value is rounding noise, which of the two lands nearer to
    float64 is chance, element by element).

    For ill-conditioned elements: Adam normalises each gradient element, so a gradient
    that is the small difference of large terms (its last bits set by summation order)
    gives an update whose float32 value is itself rounding noise at the ~1e-5 level, in
    eager as much as in ember (gradient accumulation, 2.weight[26, 37]: ember is 8.7e-6
    from float64, eager 2.0e-5); centered RMSprop divides by the square root of such a
    difference (square_avg - grad_avg**2)."""
    x, r, t = (v.detach().cpu().double() for v in (x, r, t))
    near_eager = (x - r).abs() <= atol + rtol * r.abs()
    eager_err = (r - t).abs().max()
    as_accurate = (x - t).abs() <= 2 * eager_err
    bad = ~(near_eager | as_accurate)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} elements differ from eager by up to "
        f"{(x - r).abs()[bad].max().item():.3g} and from float64 by up to "
        f"{(x - t).abs()[bad].max().item():.3g}, over twice eager's largest float32 error "
        f"{eager_err.item():.3g}"
    )


def assert_params_as_accurate_as_eager(ref, m, ref64, **tol):
    """assert_as_accurate_as_eager for every parameter of `m` (ember) against `ref`
    (eager float32) and `ref64` (eager float64)."""
    ref_p, p64 = dict(ref.named_parameters()), dict(ref64.named_parameters())
    for name, p in m.named_parameters():
        assert p.device.type == "ember", name
        assert_as_accurate_as_eager(p, ref_p[name], p64[name], name, **tol)


def assert_params_equal(a, b):
    """Bit-identical parameters (both on any device)."""
    pa = dict(a.named_parameters())
    for name, p in b.named_parameters():
        x, y = p.detach().cpu(), pa[name].detach().cpu()
        assert torch.equal(x, y), f"{name}: max diff {(x - y).abs().max().item()}"


def collect():
    gc.collect()
    ember.sync()
