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


# Kind: a dtype mishandled (Meta vs CPU). Batch/layer norm on float16/bfloat16: Meta gives
# the statistics in float32 (CUDA's rule), the CPU kernel in the input dtype unless a
# parameter is float32; the executable's `.out` call then failed ("expected scalar type
# Half but found Float").


def test_norm_statistics_dtype_follows_cpu_for_reduced_precision():
    A = torch.ops.aten
    for dt in (torch.float16, torch.bfloat16):
        for pdt in (dt, torch.float32):  # same-dtype parameters, then mixed
            x = torch.randn(3, 2, 4, dtype=dt)
            w, b, rm = (
                torch.randn(2, dtype=pdt),
                torch.randn(2, dtype=pdt),
                torch.randn(2, dtype=pdt),
            )
            rv = torch.rand(2, dtype=pdt) + 0.5
            lw, lb = torch.randn(4, dtype=pdt), torch.randn(4, dtype=pdt)
            calls = [
                lambda d: A.native_batch_norm(
                    *(t.to(d) for t in (x, w, b, rm, rv)), True, 0.1, 1e-5
                ),
                lambda d: A.native_layer_norm(x.to(d), [4], lw.to(d), lb.to(d), 1e-5),
                lambda d: A._native_batch_norm_legit_functional(
                    *(t.to(d) for t in (x, w, b, rm, rv)), True, 0.1, 1e-5
                ),
            ]
            for f in calls:
                expected, got = f("cpu"), f(DEV)
                assert [t.dtype for t in got] == [t.dtype for t in expected]
                for g, e in zip(got, expected):
                    close(g, e, atol=1e-2, rtol=1e-2)


def test_embedding_bag_auxiliary_outputs_follow_cpu():
    """Same kind: _embedding_bag's offset2bag/bag_size/max_indices have CPU shapes that
    the Meta kernel does not give (the `.out` call failed: "size of tensor a (5) must
    match the size of tensor b (0)")."""
    w = torch.randn(5, 5)
    i = torch.tensor([0, 4, 2, 2, 1, 3])
    psw = torch.randn(6)
    for last, offsets in ((False, torch.tensor([0, 2])), (True, torch.tensor([0, 2, 6]))):
        for mode in ("sum", "mean", "max"):
            kw = dict(
                mode=mode,
                include_last_offset=last,
                per_sample_weights=psw if mode == "sum" else None,
            )
            expected = torch.nn.functional.embedding_bag(i, w, offsets, **kw)
            got = torch.nn.functional.embedding_bag(
                i.to(DEV),
                w.to(DEV),
                offsets.to(DEV),
                **{k: (v.to(DEV) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()},
            )
            close(got, expected)
            for f in (torch.ops.aten._embedding_bag, torch.ops.aten._embedding_bag_forward_only):
                m = {"sum": 0, "mean": 1, "max": 2}[mode]
                e = f(w, i, offsets, False, m, False, None, last)
                g = f(w.to(DEV), i.to(DEV), offsets.to(DEV), False, m, False, None, last)
                assert [t.shape for t in g] == [t.shape for t in e], (f, mode, last)
                close(g[0], e[0])


# Kind: wrong values from the executable (a bridge bug). An ATen `.out` kernel that
# resizes its `out` argument (binary_cross_entropy.out computes elementwise into `out`
# first) left a wrong value in the planned buffer on the first run of the graph; only
# later runs skipped the `.out` overload. Checked in a fresh process, since the first
# run in a process is the one that matters.


def test_resizing_out_kernel_first_run(tmp_path):
    import os
    import subprocess
    import sys

    code = (
        "import torch, ember\n"
        "F = torch.nn.functional\n"
        "x, t = torch.tensor([0.2, 0.5, 0.7]), torch.tensor([0.0, 1.0, 0.5])\n"
        "got = F.binary_cross_entropy(x.to('ember'), t.to('ember')).cpu()\n"
        "torch.testing.assert_close(got, F.binary_cross_entropy(x, t))\n"
        "got = F.mse_loss(x.to('ember'), t.to('ember')).cpu()\n"
        "torch.testing.assert_close(got, F.mse_loss(x, t))\n"
    )
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
