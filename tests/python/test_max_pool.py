"""Max pooling on ember against eager CPU: values, indices and input gradients.

The lowering (src/lowering/pooling.cc) computes the indices from the window maximum and
the backward as an elementwise select (no scatter); these tests hold it to eager's
rules: the first maximum in row-major window order, a NaN winning, padding never
winning, and gradients accumulated where windows overlap.
"""

import pytest
import torch
import torch.nn.functional as F

import ember

DEV = ember.device()

CONFIGS = [
    # kernel, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),  # windows tile the input (the common CNN case)
    (3, 3, 1, 1, False),  # tiling with padding
    (2, None, 0, 1, True),  # ceil mode: a partial last window
    (3, 1, 1, 1, False),  # overlapping windows
    ((2, 3), (1, 2), (1, 0), (2, 1), False),  # dilation, uneven everything
]


def _input(shape, seed):
    g = torch.Generator().manual_seed(seed)
    # Small integers make ties common (the first maximum wins); NaN and -inf too.
    x = torch.randint(-3, 4, shape, generator=g).float()
    flat = x.view(-1)
    flat[torch.randint(0, flat.numel(), (3,), generator=g)] = float("nan")
    flat[torch.randint(0, flat.numel(), (5,), generator=g)] = float("-inf")
    return x


@pytest.mark.parametrize("cfg", CONFIGS)
def test_values_indices_and_gradients_match_eager(cfg):
    k, s, p, d, ceil = cfg
    x = _input((2, 3, 9, 7), seed=1)
    g = torch.randn(
        F.max_pool2d(x, k, s, p, d, ceil).shape, generator=torch.Generator().manual_seed(2)
    )

    xe = x.clone().requires_grad_()
    ve, ie = F.max_pool2d(xe, k, s, p, d, ceil, return_indices=True)
    ve.backward(g)

    xm = x.to(DEV).requires_grad_()
    vm, im = F.max_pool2d(xm, k, s, p, d, ceil, return_indices=True)
    vm.backward(g.to(DEV))

    torch.testing.assert_close(vm.cpu(), ve, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(im.cpu(), ie)
    overlapping = (s is not None and s != k) or d != 1
    tol = 1e-6 if overlapping else 0  # overlapping windows add several grads
    torch.testing.assert_close(xm.grad.cpu(), xe.grad, rtol=tol, atol=tol)


def test_tiling_windows_pool_in_one_kernel_and_backward_in_one():
    x = torch.randn(4, 8, 8, 8).to(DEV)
    ember.sync()
    v, i = F.max_pool2d(x, 2, return_indices=True)
    ember.sync()
    fwd = ember.metrics.last_graph()
    # values, and indices from the values: two fusions, one kernel whose loop computes
    # both (the indices read the values in registers; docs/codegen.md "Loop fusion")
    assert fwd["kernels"] == 1, fwd
    g = torch.randn(4, 8, 4, 4).to(DEV)
    ember.sync()
    dx = torch.ops.aten.max_pool2d_with_indices_backward(
        g, x, [2, 2], [2, 2], [0, 0], [1, 1], False, i
    )
    ember.sync()
    bwd = ember.metrics.last_graph()
    assert bwd["kernels"] == 1 and bwd["externs"] == {}, bwd  # one elementwise kernel
    expect = torch.ops.aten.max_pool2d_with_indices_backward(
        g.cpu(), x.cpu(), [2, 2], [2, 2], [0, 0], [1, 1], False, i.cpu()
    )
    torch.testing.assert_close(dx.cpu(), expect, rtol=0, atol=0)
