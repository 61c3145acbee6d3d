"""The cache in front of in-place Meta kernels (functionalization's shape check of every
in-place op) never hides an error: a bad in-place call raises eager's error every time,
also after the same op succeeded with other shapes, and values stay equal to eager."""

import pytest
import torch

from conftest import DEV, close


def test_inplace_shape_errors_repeat_after_success():
    a, d = torch.ones(2, 4), torch.ones(2, 4, device=DEV)
    for t, dev in ((a, "cpu"), (d, DEV)):
        t.add_(torch.ones(4, device=dev), alpha=2.0)  # succeeds, cached
        t.add_(torch.ones(4, device=dev), alpha=0.5)  # same signature, other alpha
    close(d, a)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            a.add_(torch.ones(3))
        # eager's type; the message is the Meta kernel's ("... broadcast ... [2, 4]")
        with pytest.raises(RuntimeError, match=r"3.*\[2, 4\]"):
            d.add_(torch.ones(3, device=DEV))
    # broadcasting the written tensor itself is an error for in-place ops only
    for _ in range(2):
        with pytest.raises(RuntimeError):
            torch.ones(1, 4, device=DEV).mul_(torch.ones(3, 4, device=DEV))
    close(d, a)


def test_inplace_dtype_rules_follow_scalar_type():
    i = torch.arange(4, device=DEV)
    i.add_(2)  # int scalar on an int tensor: fine, cached by type
    with pytest.raises(RuntimeError):
        i.add_(torch.ones(4, device=DEV))  # float result cannot be cast to int64 in place
    with pytest.raises(RuntimeError):
        i.add_(1, alpha=0.5)  # float alpha on an integral tensor
    close(i, torch.arange(4) + 2)


def test_foreach_inplace_ops_match_eager_over_steps():
    xs = [torch.randn(3, 2), torch.randn(5)]
    ds = [x.to(DEV) for x in xs]
    for step in range(3):
        for ts in (xs, ds):
            torch._foreach_mul_(ts, 0.5 + step)
            torch._foreach_addcmul_(ts, ts, ts, value=0.1 * step)
            torch._foreach_lerp_(ts, [t * 2 for t in ts], 0.25)
    for d, x in zip(ds, xs):
        close(d, x)


def test_foreach_inplace_shape_errors_repeat_and_leave_values():
    """Functionalization's meta reference runs in the bridge (once per passing signature,
    meta.cpp): a `_foreach_*_` call whose written tensor would broadcast raises every
    time, after calls of the same op that passed, and changes no tensor (eager's CPU
    kernel loops per tensor and has written the first one when it raises, so the values
    are compared with eager's before the bad calls)."""
    xs = [torch.randn(8), torch.randn(1)]
    ds = [x.to(DEV) for x in xs]
    ok = [torch.randn(8), torch.randn(1)]
    torch._foreach_add_(ds, [o.to(DEV) for o in ok])  # passes, cached
    torch._foreach_add_(xs, ok)
    for d, x in zip(ds, xs):
        close(d, x)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            torch._foreach_add_([x.clone() for x in xs], [torch.ones(8), torch.ones(8)])
        with pytest.raises(RuntimeError, match=r"broadcast"):
            torch._foreach_add_(ds, [torch.ones(8, device=DEV), torch.ones(8, device=DEV)])
    for d, x in zip(ds, xs):
        assert d.shape == x.shape
        close(d, x)
