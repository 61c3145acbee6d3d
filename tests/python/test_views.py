"""Views and in-place ops behave exactly as eager (functionalization)."""

import pytest
import torch

from conftest import DEV, close


def pair(*shape):
    a = torch.randn(*shape)
    return a, a.to(DEV)


def test_view_sees_base_writes_and_base_sees_view_writes():
    a, d = pair(4, 5)
    va, vd = a[1:3], d[1:3]
    a.add_(1)
    d.add_(1)
    close(vd, va)
    va.mul_(3)
    vd.mul_(3)
    close(d, a)
    close(vd, va)


@pytest.mark.parametrize(
    "name,f",
    [
        ("split", lambda t: t.split(2)[1]),
        ("chunk", lambda t: t.chunk(3, dim=1)[0]),
        ("unbind", lambda t: t.unbind(0)[2]),
        ("narrow", lambda t: t.narrow(1, 1, 3)),
        ("select", lambda t: t.select(1, 2)),
        ("diagonal", lambda t: t.diagonal()),
        ("transpose", lambda t: t.transpose(0, 1)),
        ("expand", lambda t: t[:, :1].expand(4, 3)),
        ("view", lambda t: t.view(2, 10)),
        ("reshape", lambda t: t.reshape(20)),
        ("flatten", lambda t: t.flatten()),
        ("unsqueeze", lambda t: t.unsqueeze(0)),
        ("slice_step", lambda t: t[::2, 1::2]),
        ("t", lambda t: t.t()),
        ("permute", lambda t: t.permute(1, 0)),
    ],
)
def test_views_alias_input(name, f):
    a, d = pair(4, 5)
    va, vd = f(a), f(d)
    assert vd.shape == va.shape and vd.stride() == va.stride()
    assert vd.storage_offset() == va.storage_offset()
    # write through base, read view
    a.mul_(2).add_(1)
    d.mul_(2).add_(1)
    close(vd, va)
    # write through view (when eager allows it), read base
    if name != "expand":
        va.sub_(5)
        vd.sub_(5)
        close(d, a)
        close(vd, va)


def test_view_of_view_chain():
    a, d = pair(6, 8)
    va = a[1:5].t()[2:6].unsqueeze(0)
    vd = d[1:5].t()[2:6].unsqueeze(0)
    vd.fill_(7.0)
    va.fill_(7.0)
    close(d, a)
    d.zero_()
    a.zero_()
    close(vd, va)


def test_data_rebinding_breaks_aliasing():
    a, d = pair(3, 4)
    va, vd = a[0], d[0]
    a.data = torch.ones(3, 4)
    d.data = torch.ones(3, 4).to(DEV)
    a.add_(1)
    d.add_(1)
    close(d, a)
    close(vd, va)  # the old view keeps the old values


@pytest.mark.parametrize(
    "op",
    [
        "index_put_",
        "masked_fill_",
        "copy_slice",
        "setitem",
        "index_add_",
        "scatter_",
        "clamp_",
        "bool_mask_set",
    ],
)
def test_inplace_on_slices(op):
    a, d = pair(5, 6)
    idx = torch.tensor([0, 3])
    mask = torch.randn(2, 6) > 0

    def run(t, dev):
        ix = idx.to(dev)
        m = mask.to(dev)
        s = t[1:3]
        if op == "index_put_":
            t.index_put_((ix,), torch.full((6,), 9.0).to(dev))
        elif op == "masked_fill_":
            s.masked_fill_(m, -1.0)
        elif op == "copy_slice":
            s.copy_(torch.arange(12.0).reshape(2, 6).to(dev))
        elif op == "setitem":
            t[:, 2] = 4.0
            t[3:, 1:3] = torch.ones(2, 2).to(dev)
        elif op == "index_add_":
            s.index_add_(1, ix, torch.ones(2, 2).to(dev))
        elif op == "scatter_":
            s.scatter_(1, torch.tensor([[1], [2]]).to(dev), 5.0)
        elif op == "clamp_":
            s.clamp_(-0.1, 0.1)
        elif op == "bool_mask_set":
            s[m] = 3.0
        return s

    sa = run(a, "cpu")
    sd = run(d, DEV)
    close(d, a)
    close(sd, sa)


def test_inplace_on_expanded_view_errors_like_eager():
    a, d = pair(1, 4)
    with pytest.raises(RuntimeError):
        a.expand(3, 4).add_(1)
    with pytest.raises(RuntimeError):
        d.expand(3, 4).add_(1)


def test_out_variants_and_resize():
    a, d = pair(3, 4)
    out_a = torch.empty(0)
    out_d = torch.empty(0, device=DEV)
    torch.add(a, 1, out=out_a)
    torch.add(d, 1, out=out_d)
    close(out_d, out_a)
    assert out_d.shape == out_a.shape


def test_contiguous_and_clone_of_views():
    a, d = pair(4, 6)
    close(d.t().contiguous(), a.t().contiguous())
    assert d.t().contiguous().is_contiguous()
    c = d[:, 1:4].clone()
    d.zero_()
    close(c, a[:, 1:4])


def test_batchnorm_running_stats_update_in_place_like_eager():
    torch.manual_seed(0)
    ref = torch.nn.BatchNorm1d(4)
    bn = torch.nn.BatchNorm1d(4).to(DEV)
    x = torch.randn(8, 4)
    sd_ref, sd = ref.state_dict(), bn.state_dict()  # views of the buffers, as in eager
    bn(x.to(DEV))
    ref(x)
    close(bn.running_mean, ref.running_mean)  # updated at the call, before any sync
    close(sd["running_var"], sd_ref["running_var"])  # earlier views see the update
    close(sd["num_batches_tracked"], sd_ref["num_batches_tracked"])
    bn.eval()
    ref.eval()
    close(bn(x.to(DEV)), ref(x), rtol=1e-5, atol=1e-6)
