"""Regression tests for the kinds of conformance failures the OpInfo sweep found
(python -m ember.conformance; docs/conformance.md). One test per kind, eager CPU as the
oracle."""
import torch

from conftest import DEV, close


# Kind: torch.library custom ops (a bridge bug). A custom op whose implementation is
# registered for every device (CompositeExplicitAutograd) runs that Python implementation
# on ember's unwrapped tensors, below functionalization; nn.functional.linear_cross_entropy
# is one. `.to(dtype)` there used to return a functional wrapper.

@torch.library.custom_op("ember_test::to_double", mutates_args=())
def _to_double(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float64)


def test_custom_op_returning_to_dtype():
    """The wrapper was wrapped again by functionalization: an internal assert."""
    x = torch.randn(3, 4)
    close(_to_double(x.to(DEV)), _to_double(x))


@torch.library.custom_op("ember_test::scaled_mask", mutates_args=())
def _scaled_mask(x: torch.Tensor) -> torch.Tensor:
    y = (x > 0).to(torch.float32)
    d = y.sum()
    y.div_(torch.where(d == 0, torch.nan, -d))
    return y


def test_custom_op_inplace_after_to_dtype():
    """An in-place op on that wrapper, with functionalization off, ran TensorIterator on
    a tensor without storage: a segfault."""
    x = torch.randn(4, 5)
    close(_scaled_mask(x.to(DEV)), _scaled_mask(x))


# Kind: a Meta kernel that disagrees with the CPU kernel on output shapes (ember takes
# shapes from Meta). Batch norm in eval mode: Meta gives save_mean/save_invstd of shape
# [C], CPU empty tensors; ember returned [C] tensors of uninitialized memory.

def test_batch_norm_eval_mode_save_stats_follow_cpu():
    x, w, b = torch.randn(3, 2, 4), torch.randn(2), torch.randn(2)
    rm, rv = torch.randn(2), torch.rand(2) + 0.5
    expected = torch.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)
    got = torch.native_batch_norm(*(t.to(DEV) for t in (x, w, b, rm, rv)), False, 0.1, 1e-5)
    assert [tuple(t.shape) for t in got] == [(3, 2, 4), (0,), (0,)]
    close(got[0], expected[0])
    f = torch.ops.aten._native_batch_norm_legit_no_training
    got = f(*(t.to(DEV) for t in (x, w, b, rm, rv)), 0.1, 1e-5)
    assert [tuple(t.shape) for t in got] == [(3, 2, 4), (0,), (0,)]
    close(got[0], f(x, w, b, rm, rv, 0.1, 1e-5)[0])
