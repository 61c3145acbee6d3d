"""Package, device registration, factories, host<->device copies, value reads."""

import copy

import numpy as np
import pytest
import torch

import ember
from conftest import DEV, close


def test_device_registration():
    assert ember.device() == torch.device("ember:0")
    assert torch.device("ember").type == "ember"
    assert torch._C._get_privateuse1_backend_name() == "ember"
    assert torch.ember.device_count() == 1 and torch.ember.is_available()
    with pytest.raises(ValueError):
        ember.device(1)


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.float64,
        torch.int64,
        torch.int32,
        torch.bool,
        torch.bfloat16,
        torch.float16,
        torch.uint8,
        torch.complex64,
    ],
)
def test_roundtrip_dtypes(dtype):
    a = (torch.randn(3, 4) * 10).to(dtype)
    b = a.to("ember")
    assert b.device.type == "ember" and b.dtype == dtype
    close(b, a)
    close(a.ember(), a)


def test_factories():
    close(torch.zeros(2, 3, device="ember"), torch.zeros(2, 3))
    close(torch.ones(2, 3, device=DEV, dtype=torch.int32), torch.ones(2, 3, dtype=torch.int32))
    close(torch.full((4,), 2.5, device=DEV), torch.full((4,), 2.5))
    close(torch.arange(10, device=DEV), torch.arange(10))
    close(torch.arange(0.0, 1.0, 0.25, device=DEV), torch.arange(0.0, 1.0, 0.25))
    close(torch.eye(3, device=DEV), torch.eye(3))
    close(torch.linspace(0, 1, 5, device=DEV), torch.linspace(0, 1, 5))
    close(torch.tensor([[1, 2], [3, 4]], device=DEV), torch.tensor([[1, 2], [3, 4]]))
    e = torch.empty(3, 5, device=DEV)
    assert e.shape == (3, 5) and e.device.type == "ember"


def test_copies_honour_strides_and_offsets():
    base = torch.arange(60.0).reshape(3, 4, 5)
    for src in [
        base.transpose(0, 2),
        base[1:, ::2, 1:4],
        base.select(1, 2),
        base.permute(2, 0, 1)[1:],
        base.expand(2, 3, 4, 5),
    ]:
        d = src.to(DEV)
        close(d, src)
        assert d.shape == src.shape
    # device -> host into a non-contiguous destination
    dst = torch.zeros(5, 4).t()
    dst.copy_(torch.arange(20.0).reshape(4, 5).to(DEV))
    close(dst, torch.arange(20.0).reshape(4, 5))
    # host -> device into a slice of a device tensor
    d = torch.zeros(4, 5, device=DEV)
    d[1:3, 2:].copy_(torch.ones(2, 3))
    ref = torch.zeros(4, 5)
    ref[1:3, 2:] = 1
    close(d, ref)


def test_strides_reported_as_eager():
    a = torch.randn(4, 6)
    d = a.to(DEV)
    for f in [
        lambda t: t,
        lambda t: t.t(),
        lambda t: t[1:, ::2],
        lambda t: t.unsqueeze(1),
        lambda t: t.expand(3, 4, 6),
        lambda t: t.reshape(2, 12),
        lambda t: t.permute(1, 0),
    ]:
        x, y = f(d), f(a)
        assert x.shape == y.shape
        assert x.stride() == y.stride(), (x.stride(), y.stride())
        assert x.storage_offset() == y.storage_offset()
        assert x.is_contiguous() == y.is_contiguous()
    c = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    dc = c.to(DEV)
    assert dc.stride() == c.stride()
    assert dc.is_contiguous(memory_format=torch.channels_last)
    close(dc, c)
    assert (dc + 1).stride() == (c + 1).stride()


def test_view_errors_match_eager():
    a = torch.randn(4, 6)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        a.t().view(24)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        a.to(DEV).t().view(24)


def test_value_reads():
    a = torch.tensor([1.5, -2.0, 3.0])
    d = a.to(DEV) * 2
    assert d.sum().item() == pytest.approx(5.0)
    assert d.tolist() == (a * 2).tolist()
    np.testing.assert_allclose(d.cpu().numpy(), (a * 2).numpy())
    assert ember.metrics.counters()["value_reads"] >= 1
    assert bool((d > 0).any())
    # Each value read is listed at the user's line (.item() and bool() above).
    c = ember.metrics.counters()
    assert sum(c["value_read_sites"].values()) == c["value_reads"]
    lines = {int(s.rsplit(":", 1)[1]) for s in c["value_read_sites"] if s.startswith(__file__)}
    first = test_value_reads.__code__.co_firstlineno
    assert {first + 3, first + 7} <= lines, c["value_read_sites"]
    s = str(d)
    assert "ember" in s and "3." in s and "-4." in s


def test_module_to_and_cpu():
    m = torch.nn.Linear(3, 2)
    m2 = copy.deepcopy(m).to(ember.device())
    assert m2.weight.device.type == "ember"
    x = torch.randn(5, 3)
    close(m2(x.to(DEV)), m(x), rtol=1e-5, atol=1e-5)
    m3 = torch.nn.Linear(3, 2).ember()
    assert m3.weight.device.type == "ember"


def test_elementwise_traced_and_synced():
    a = torch.randn(8, 16)
    b = torch.randn(16)
    d = a.to(DEV)
    e = b.to(DEV)
    ember.metrics.clear()
    out = ((d + e) * 0.5).exp().sub(1.0).clamp(min=-0.5).tanh()
    assert ember._C.is_pending(out)
    c = ember.metrics.counters()
    assert c["ops_traced"] >= 5 and c["syncs"] == 0
    close(out, ((a + b) * 0.5).exp().sub(1.0).clamp(min=-0.5).tanh())
    c = ember.metrics.counters()
    assert c["syncs"] == 1 and c["graphs_compiled"] == 1
    assert c["transfers_to_host"] == 1
    for k in [
        "syncs",
        "graphs_compiled",
        "memory_cache_hits",
        "disk_cache_hits",
        "compile_seconds",
        "execute_seconds",
        "transfers_to_device",
        "transfers_to_host",
        "ops_traced",
        "value_reads",
        "fallbacks",
        "externs",
    ]:
        assert k in c
    assert isinstance(c["fallbacks"], dict) and isinstance(c["externs"], dict)
    if ember.config.backend == "aten":  # one ATen kernel per op
        assert sum(c["externs"].values()) >= 5
    else:  # lowered to the core IR: no op needs an ATen extern
        assert ember.metrics.last_graph()["lowered_ops"] >= 5 and c["externs"] == {}
    assert "syncs" in ember.metrics.report()


def test_type_promotion_with_python_scalars():
    i = torch.arange(6, dtype=torch.int32)
    d = i.to(DEV)
    for f in [
        lambda t: t * 0.5,
        lambda t: t + 2,
        lambda t: t / 2,
        lambda t: t // 2,
        lambda t: 2**t,
        lambda t: t > 2.5,
        lambda t: t.float() * 3,
    ]:
        x, y = f(d), f(i)
        assert x.dtype == y.dtype
        close(x, y)
    h = torch.randn(3, dtype=torch.float16)
    assert (h.to(DEV) * 2.0).dtype == torch.float16


def test_memory_stats():
    ember.sync()
    before = ember.memory_allocated()
    t = torch.empty(1000, 1000, device=DEV)
    assert ember.memory_allocated() >= before + 4_000_000
    assert ember.max_memory_allocated() >= ember.memory_allocated()
    del t
    assert ember.memory_allocated() <= before
    ember.reset_peak_memory_stats()
    assert ember.max_memory_allocated() == ember.memory_allocated()


def test_bad_inputs_raise_eager_errors():
    a = torch.randn(3, 4).to(DEV)
    b = torch.randn(5, 6).to(DEV)
    with pytest.raises(RuntimeError, match="size of tensor a"):
        a + b
    with pytest.raises(RuntimeError):
        a @ b
    with pytest.raises(IndexError):
        a[5]
    with pytest.raises(RuntimeError):
        torch.randn(3).to(DEV).view(2, 2)
    # Everything stays usable after errors.
    close(a + 1, a.cpu() + 1)


def test_data_dependent_error_at_sync_names_op():
    x = torch.randn(4, 3).to(DEV)
    idx = torch.tensor([0, 7]).to(DEV)
    y = torch.index_select(x, 0, idx)
    z = x * 2  # independent of the failing op: stays readable
    with pytest.raises(IndexError, match="index_select.*test_device.py"):
        y.cpu()
    close(z, x.cpu() * 2)
    close(x + 0, x.cpu())
    # every later read raises the same error, with eager's exception type
    with pytest.raises(IndexError, match="index_select.*test_device.py"):
        y.cpu()


def test_repr_matches_eager_layout():
    d = torch.tensor([1, 2], dtype=torch.int32).to(DEV)
    assert repr(d) == "tensor([1, 2], device='ember:0', dtype=torch.int32)"
    w = torch.ones(2).to(DEV).requires_grad_()
    assert repr(w) == "tensor([1., 1.], device='ember:0', requires_grad=True)"
    assert "grad_fn=<MulBackward0>" in repr(w * 2)


@pytest.mark.parametrize(
    "dtype", [torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2]
)
def test_limited_dtypes_fail_at_users_line_like_eager(dtype):
    a = torch.arange(6).to(torch.float32).to(dtype)
    d = a.to(DEV)
    assert d.cpu().view(torch.uint8).tolist() == a.view(torch.uint8).tolist()
    try:
        ref = a + a
    except Exception as e:  # eager CPU has no kernel: same error type, at trace time
        with pytest.raises(type(e)):
            d + d
    else:
        close(d + d, ref)


def test_dtype_map_policy():
    m = ember._C.ir_dtype
    assert m(torch.float32) == "f32" and m(torch.bfloat16) == "bf16" and m(torch.bool) == "pred"
    assert m(torch.int64) == "s64" and m(torch.uint8) == "u8" and m(torch.uint32) == "u32"
    assert m(torch.complex64) == "c64" and m(torch.complex128) == "c128"
    assert m(torch.float8_e4m3fn) == "" and m(torch.quint8) == ""
    z = torch.tensor([1 + 2j, 3 - 1j]).to(DEV)  # complex: carried and computed by externs
    close(z * z.conj(), torch.tensor([1 + 2j, 3 - 1j]) * torch.tensor([1 - 2j, 3 + 1j]))


def test_mixed_devices_error_like_eager():
    d = torch.ones(3).to(DEV)
    with pytest.raises(RuntimeError, match="same device"):
        d + torch.ones(3)
    close(d + torch.tensor(2.0), torch.full((3,), 3.0))  # CPU scalars mix, as in eager
    close(d[torch.tensor([0, 2])], torch.ones(2))  # CPU indices, as in eager
    d[0:2] = torch.zeros(2)  # host -> device copy into a slice
    close(d, torch.tensor([0.0, 0.0, 1.0]))


def test_factory_like_ops_with_explicit_cpu_device():
    d = torch.randn(2, 3).to(DEV)
    o = torch.ones_like(d, device="cpu")
    assert o.device.type == "cpu"
    close(o, torch.ones(2, 3))
    z = d.new_zeros(4, device="cpu")
    assert z.device.type == "cpu"
    assert torch.zeros_like(d).device.type == "ember"
