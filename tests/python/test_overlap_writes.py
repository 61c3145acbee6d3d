"""In-place writes into tensors whose elements share memory (expanded views), issue 4:
where eager raises, ember raises eager's error at the user's line; where eager allows
the write (fill_, zero_, deprecated masked_fill_/index_put_), ember raises a clear
error asking for a clone instead of computing a different value. Writes into
non-overlapping views of an expanded tensor still work as in eager."""

import pytest
import torch

from conftest import DEV, close

EAGER_RAISES = {
    "add_": lambda t: t.add_(1),
    "mul_": lambda t: t.mul_(2),
    "copy_": lambda t: t.copy_(torch.ones(3, 4, device=t.device)),
    "clamp_": lambda t: t.clamp_(0, 1),
    "uniform_": lambda t: t.uniform_(),
    "addcmul_": lambda t: t.addcmul_(
        torch.ones(3, 4, device=t.device), torch.ones(3, 4, device=t.device)
    ),
    "foreach_add_": lambda t: torch._foreach_add_([t], 1.0),
    "add_out": lambda t: torch.add(torch.ones(3, 4, device=t.device), 1, out=t),
}
EAGER_ALLOWS = {
    "fill_": lambda t: t.fill_(1.0),
    "zero_": lambda t: t.zero_(),
}


@pytest.mark.parametrize("name", list(EAGER_RAISES))
def test_overlapping_write_raises_eagers_error(name):
    op = EAGER_RAISES[name]
    with pytest.raises(RuntimeError) as eager:
        op(torch.zeros(1, 4).expand(3, 4))
    base = torch.zeros(1, 4, device=DEV)
    with pytest.raises(RuntimeError) as ours:
        op(base.expand(3, 4))
    assert str(ours.value).split("\n")[0] == str(eager.value).split("\n")[0]
    close(base, torch.zeros(1, 4))  # unchanged and readable


@pytest.mark.parametrize("name", list(EAGER_ALLOWS))
def test_write_eager_allows_raises_clear_ember_error(name):
    base = torch.arange(4.0).reshape(1, 4).to(DEV)
    with pytest.raises(RuntimeError, match=r"ember: aten::\w+ writes into a tensor .* clone\(\)"):
        EAGER_ALLOWS[name](base.expand(3, 4))
    close(base, torch.arange(4.0).reshape(1, 4))


def test_write_into_a_row_of_an_expanded_view_matches_eager():
    a = torch.arange(4.0).reshape(1, 4)
    d = a.to(DEV)
    a.expand(3, 4)[1].add_(1)
    d.expand(3, 4)[1].add_(1)
    close(d, a)
