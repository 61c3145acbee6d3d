"""Ember tensors' storages (issue 24; docs/architecture.md, "Storage").

Eager CPU is the oracle: storage identity of views, offsets, sizes in bytes and the
bytes themselves; data pointers are checked against the bytes they address (ctypes)."""

import copy
import ctypes
import io
import pickle
import threading
import time

import pytest
import torch

import ember
from conftest import DEV, close


def _counters():
    c = ember.metrics.counters()
    return c["syncs"], c["value_reads"]


def _bytes_at(ptr, n):
    return list(ctypes.string_at(ptr, n))


# Every view op, plus ops eager answers with a new storage (a copy) or with self.
VIEWS = {
    "view": lambda a: a.view(6, 4),
    "view_flat": lambda a: a.view(-1),
    "view_dtype": lambda a: a.view(torch.int32),
    "reshape_view": lambda a: a.reshape(2, 12),
    "reshape_copy": lambda a: a.t().reshape(-1),
    "slice": lambda a: a[1:],
    "slice_step": lambda a: a[::2, 1::2],
    "slice_cols": lambda a: a[:, 2:5],
    "select": lambda a: a[1],
    "select_col": lambda a: a[..., 3],
    "narrow": lambda a: a.narrow(1, 1, 3),
    "t": lambda a: a.t(),
    "T": lambda a: a.T,
    "mT": lambda a: a.mT,
    "transpose": lambda a: a.transpose(0, 1),
    "swapaxes": lambda a: a.swapaxes(0, 1),
    "permute": lambda a: a.permute(1, 0),
    "movedim": lambda a: a.movedim(0, 1),
    "unsqueeze": lambda a: a.unsqueeze(0),
    "squeeze": lambda a: a.unsqueeze(1).squeeze(1),
    "expand": lambda a: a[:1].expand(3, 6),
    "expand_as": lambda a: a[:, :1].expand_as(a),
    "diagonal": lambda a: a.diagonal(),
    "diagonal_offset": lambda a: a.diagonal(1),
    "as_strided": lambda a: a.as_strided((2, 2), (6, 1), 3),
    "unfold": lambda a: a.unfold(1, 2, 2),
    "split": lambda a: a.split(2)[1],
    "split_sizes": lambda a: a.split([1, 3])[1],
    "chunk": lambda a: a.chunk(3, 1)[2],
    "unbind": lambda a: a.unbind(0)[3],
    "tensor_split": lambda a: a.tensor_split(3, dim=1)[1],
    "detach": lambda a: a.detach(),
    "alias": lambda a: torch.ops.aten.alias(a),
    "flatten": lambda a: a.flatten(),
    "unflatten": lambda a: a.unflatten(1, (2, 3)),
    "view_as": lambda a: a.view_as(torch.empty(3, 8)),
    "contiguous_self": lambda a: a.contiguous(),
    "contiguous_copy": lambda a: a.t().contiguous(),
    "clone": lambda a: a.clone(),
    "to_dtype": lambda a: a.to(torch.float64),
    "chained": lambda a: a[1:].t()[2:].unsqueeze(0),
    "adjoint": lambda a: a.adjoint(),
    "H": lambda a: a.H,
    "mH": lambda a: a.mH,
    "swapdims": lambda a: a.swapdims(0, 1),
    "moveaxis": lambda a: a.moveaxis(0, 1),
    "hsplit": lambda a: a.hsplit(3)[1],
    "vsplit": lambda a: a.vsplit(2)[1],
    "dsplit": lambda a: a.view(2, 2, 6).dsplit(2)[1],
    "split_with_sizes": lambda a: a.split_with_sizes([2, 4], 1)[1],
    "tensor_split_indices": lambda a: a.tensor_split([1, 4], dim=1)[1],
    "reshape_as": lambda a: a.reshape_as(torch.empty(2, 12)),
    "ravel": lambda a: a.ravel(),
    "broadcast_to": lambda a: a[:1].broadcast_to(5, 6),
    "atleast_3d": lambda a: torch.atleast_3d(a),
    "squeeze_dims": lambda a: a.unsqueeze(0).unsqueeze(2).squeeze((0, 2)),
    "unflatten_neg": lambda a: a.unflatten(0, (2, -1)),
    "select_neg": lambda a: a.select(1, -1),
    "narrow_neg": lambda a: a.narrow(0, -2, 2),
    "index_int_slice": lambda a: a[2, 3:],
    "index_none_ellipsis": lambda a: a[None, ..., 1],
    "view_dtype_uint8": lambda a: a.view(torch.uint8),
    "view_dtype_f16_slice": lambda a: a.view(torch.float16)[:, 3:],
    "as_strided_overlapping": lambda a: a.as_strided((3, 3), (1, 1), 2),
    "view_as_complex": lambda a: torch.view_as_complex(a.view(4, 3, 2)),
    "unsafe_split": lambda a: a.unsafe_split(2)[1],
    "unsafe_chunk": lambda a: a.unsafe_chunk(2)[1],
}


def _storage_facts(base, v):
    """What eager and ember must agree on: storage identity, offsets, bytes."""
    same = v.untyped_storage()._cdata == base.untyped_storage()._cdata
    facts = {
        "same_storage": same,
        "storage_offset": v.storage_offset(),
        "nbytes": v.untyped_storage().nbytes(),
        "stride": v.stride(),
    }
    if same:
        facts["data_ptr_delta"] = v.data_ptr() - base.data_ptr()
    facts["bytes"] = v.untyped_storage().cpu().tolist()
    return facts


@pytest.mark.parametrize("pending", [False, True], ids=["data", "pending"])
@pytest.mark.parametrize("name", list(VIEWS))
def test_views_share_storage_as_in_eager(name, pending):
    a = torch.arange(24.0).reshape(4, 6)
    b = a.to(DEV)
    if pending:
        b = b * 1  # a pending value: the view is traced, the storage is metadata
    want = _storage_facts(a, VIEWS[name](a))
    got = _storage_facts(b, VIEWS[name](b))
    assert got == want


def test_complex_views_share_storage_as_in_eager():
    a = torch.randn(3, 4, dtype=torch.complex64)
    b = a.to(DEV)
    for f in (torch.view_as_real, lambda t: t.real, lambda t: t.imag):
        assert _storage_facts(b, f(b)) == _storage_facts(a, f(a))


CONJ_VIEWS = {
    "conj": lambda a: a.conj(),
    "resolve_conj": lambda a: a.conj().resolve_conj(),
    "H": lambda a: a.H,
    "mH": lambda a: a.mH,
    "adjoint": lambda a: a.adjoint(),
}


@pytest.mark.parametrize("name", list(CONJ_VIEWS))
def test_conjugate_views_as_in_eager(name):
    # eager's conj() is a view with the conjugate bit set (its bytes are the input's)
    a = torch.randn(3, 4, dtype=torch.complex64)
    b = a.to(DEV)
    va, vb = CONJ_VIEWS[name](a), CONJ_VIEWS[name](b)
    close(vb, va.resolve_conj())
    want = dict(_storage_facts(a, va), is_conj=va.is_conj())
    assert dict(_storage_facts(b, vb), is_conj=vb.is_conj()) == want


def test_metadata_never_syncs():
    t = torch.randn(4, 6).to(DEV) * 2
    syncs, reads = _counters()
    s = t.untyped_storage()
    assert s.nbytes() == 96 and s.size() == 96 and s.device.type == "ember"
    assert t[1:].untyped_storage()._cdata == s._cdata
    assert t.t().untyped_storage()._cdata == s._cdata
    assert t.storage_offset() == 0 and t[1:].storage_offset() == 6
    assert (t + 1).untyped_storage()._cdata != s._cdata
    assert ember._C.is_pending(t)
    assert _counters() == (syncs, reads)


BYTE_ACCESS = {
    "tensor_data_ptr": lambda t: t.data_ptr(),
    "view_data_ptr": lambda t: t[1:].data_ptr(),
    "storage_data_ptr": lambda t: t.untyped_storage().data_ptr(),
    "cpu": lambda t: t.untyped_storage().cpu(),
    "tolist": lambda t: t.untyped_storage().tolist(),
    "getitem": lambda t: t.untyped_storage()[3],
    "iter": lambda t: list(t.untyped_storage()),
    "to_cpu": lambda t: t.untyped_storage().to("cpu"),
}


@pytest.mark.parametrize("name", list(BYTE_ACCESS))
def test_byte_access_of_a_pending_tensor_is_a_counted_value_read(name):
    x = torch.randn(4, 6)
    t = x.to(DEV) * 2
    ember.sync()
    t = t + 1  # pending
    syncs, reads = _counters()
    BYTE_ACCESS[name](t)
    assert _counters() == (syncs + 1, reads + 1)
    assert not ember._C.is_pending(t)
    # a second access of the now materialized value neither syncs nor counts
    BYTE_ACCESS[name](t)
    assert _counters() == (syncs + 1, reads + 1)
    assert t.untyped_storage().tolist() == (x * 2 + 1).untyped_storage().tolist()


def _resume_once_counted(reads, timeout=10.0):
    """Resumes the paused queue once a value read past `reads` is counted (the read
    counts before it waits), or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while ember.metrics.counters()["value_reads"] == reads and time.monotonic() < deadline:
        time.sleep(0.005)
    ember._C._pause_queue(False)


@pytest.mark.parametrize("name", ["item"] + list(BYTE_ACCESS))
def test_byte_access_of_an_in_flight_tensor_is_counted_as_item_is(name):
    # "item" is the control: a value read that waits for its program
    read = (lambda t: t[0, 0].item()) if name == "item" else BYTE_ACCESS[name]
    old = ember.config.async_execution
    ember.config.async_execution = True
    try:
        x = torch.randn(4, 6)
        t = x.to(DEV) * 2
        ember.sync()
        ember._C._pause_queue(True)
        try:
            t = t + 1
            ember.sync(wait=False)  # queued behind the pause: t is in flight
            assert not ember._C.is_pending(t) and ember._C.queued_programs() == 1
            syncs, reads = _counters()
        finally:
            resume = threading.Thread(target=_resume_once_counted, args=(reads,))
            resume.start()
        read(t)  # counted, then waits for the program (resumed once counted)
        resume.join()
        assert _counters() == (syncs, reads + 1)
        sites = ember.metrics.counters()["value_read_sites"]
        assert any("test_storage.py" in site for site in sites), sites
        if name != "item":  # .item() counts every call; a byte access only a wait
            read(t)  # the value is there now: nothing more is counted
            assert _counters() == (syncs, reads + 1)
        assert t.untyped_storage().tolist() == (x * 2 + 1).untyped_storage().tolist()
    finally:
        ember._C._pause_queue(False)
        ember.sync()
        ember.config.async_execution = old


def test_data_ptr_points_at_the_bytes_and_is_stable_across_syncs():
    x = torch.randn(8, 4)
    t = x.to(DEV) * 3
    p = t.data_ptr()
    assert p != 0 and p % 16 == 0
    assert _bytes_at(p, 128) == (x * 3).untyped_storage().tolist()
    assert t.untyped_storage().data_ptr() == p
    assert t[2:].data_ptr() == p + 2 * 4 * 4
    assert t.t().data_ptr() == p
    for _ in range(3):
        u = t * 2 + 1  # other work on and beside it
        ember.sync()
        assert t.data_ptr() == p and t.untyped_storage().data_ptr() == p
    close(u, x * 6 + 1)
    assert _bytes_at(p, 128) == (x * 3).untyped_storage().tolist()


def test_a_write_gives_the_storage_the_new_bytes():
    x = torch.randn(6)
    t = x.to(DEV)
    s = t.untyped_storage()
    s.data_ptr()
    t.add_(1)
    v = t[2:]
    v.mul_(2)
    want = x.clone()
    want.add_(1)
    want[2:].mul_(2)
    assert s.tolist() == want.untyped_storage().tolist()
    assert _bytes_at(t.data_ptr(), 24) == want.untyped_storage().tolist()
    assert t.untyped_storage()._cdata == s._cdata == v.untyped_storage()._cdata


def test_a_write_lets_the_storage_release_the_old_bytes():
    t = torch.randn(256, 256).to(DEV)
    ember.sync()
    s = t.untyped_storage()
    s.data_ptr()  # the storage now points at (and holds) the buffer
    before = ember.memory_allocated()
    for _ in range(3):
        t.add_(1)
        ember.sync()
        # the old buffer was freed (not held by the storage until its next access)
        assert ember.memory_allocated() <= before
        s.data_ptr()


def test_storage_writes_reach_every_tensor_on_the_storage():
    a = torch.arange(12.0).reshape(3, 4)
    b = a.to(DEV)
    va, vb = a[1:], b[1:]
    ember.sync()
    ops = [
        lambda s: s.fill_(0),
        lambda s: s.__setitem__(5, 63),
        lambda s: s.__setitem__(slice(8, 12), 64),
        lambda s: s.copy_(torch.arange(12.0).flip(0).untyped_storage()),
        lambda s: s.copy_(torch.full((3, 4), 2.5).to(DEV).untyped_storage()),
    ]
    for op in ops:
        op(a.untyped_storage())
        op(b.untyped_storage())
        close(b, a)
        close(vb, va)
        close(b * 1, a * 1)
        assert b.untyped_storage().tolist() == a.untyped_storage().tolist()


def test_cpu_storage_copy_from_an_ember_storage():
    x = torch.randn(5)
    t = x.to(DEV) * 2
    c = torch.zeros(5)
    c.untyped_storage().copy_(t.untyped_storage())
    close(c, x * 2)


def test_clone_and_deepcopy_make_new_ember_storages():
    x = torch.randn(6)
    t = x.to(DEV) * 2
    s = t.untyped_storage()
    for c in (s.clone(), copy.deepcopy(s), copy.copy(s)):
        assert c.device.type == "ember" and c._cdata != s._cdata
        assert c.tolist() == (x * 2).untyped_storage().tolist()
    close(t, x * 2)


@pytest.mark.parametrize("pending", [False, True], ids=["data", "pending"])
def test_resize_to_zero_and_back_frees_and_reallocates(pending):
    from torch.distributed.fsdp._fully_shard._fsdp_param import alloc_storage, free_storage

    x = torch.randn(256, 256)
    p = torch.nn.Parameter(x.to(DEV))
    if pending:
        with torch.no_grad():
            p.mul_(1)
    else:
        ember.sync()
    s = p.untyped_storage()
    n = s.nbytes()
    assert n == 256 * 256 * 4
    before = ember.memory_allocated()
    free_storage(p)  # FSDP2's: untyped_storage().resize_(0)
    assert s.size() == 0 and p.untyped_storage().nbytes() == 0 and s.data_ptr() == 0
    if not pending:
        # freed at once; a pending value computed from the bytes (p.mul_ here) keeps them
        # until that tensor is next used (docs/architecture.md, "Storage")
        assert ember.memory_allocated() <= before - n
    with pytest.raises(RuntimeError, match="resized to 0 bytes"):
        p.cpu()
    assert p.shape == (256, 256) and p.stride() == (256, 1)  # metadata stays
    alloc_storage(p)  # FSDP2's: resize_(numel * itemsize)
    assert s.size() == n and s.data_ptr() != 0
    y = torch.randn(256, 256)
    with torch.no_grad():
        p.copy_(y.to(DEV))  # the next write defines the bytes
    close(p, y)
    close(p * 2 + 1, y * 2 + 1)
    assert s.tolist() == y.untyped_storage().tolist()


def test_resize_to_another_size_raises_clearly():
    t = torch.randn(8).to(DEV)
    with pytest.raises(RuntimeError, match=r"resize_\(16\).*0 bytes.*32 bytes"):
        t.untyped_storage().resize_(16)
    close(t, t.cpu())
    assert t.untyped_storage().nbytes() == 32


def test_donation_never_takes_bytes_a_held_storage_points_at():
    old = ember.config.donate_buffers
    ember.config.donate_buffers = True
    try:

        def run(hold):
            x = torch.randn(64)
            w = x.to(DEV)
            ember.sync()
            s, ptr = None, None
            if hold == "pointer":
                s = w.untyped_storage()
                ptr = s.data_ptr()
            elif hold == "storage":  # the storage object alone, never addressed
                s = w.untyped_storage()
            elif hold == "view_pointer":  # a view's data_ptr(); the view is dropped
                s = w[8:].untyped_storage()
                ptr = w[8:].data_ptr() - 8 * 4
            y = w * 2  # same shape: w's buffer could take y
            del w
            d0 = ember.metrics.counters()["donated_buffers"]
            ember.sync()
            close(y, x * 2)
            if s is not None:
                assert s.tolist() == x.untyped_storage().tolist()
            if ptr is not None:
                assert _bytes_at(ptr, 256) == x.untyped_storage().tolist()
            return ember.metrics.counters()["donated_buffers"] - d0

        for hold in ("pointer", "storage", "view_pointer"):
            assert run(hold) == 0, hold
        # control: without the held storage the buffer is donated
        assert run(None) == 1
    finally:
        ember.config.donate_buffers = old


REFUSED = {
    "share_memory_": lambda s: s.share_memory_(),
    "pin_memory": lambda s: s.pin_memory(),
    "slice": lambda s: s[1:3],
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_storage_ops_that_cannot_hold_raise_clearly(name):
    t = torch.arange(6.0).to(DEV) * 2
    with pytest.raises(RuntimeError, match=r"ember: .* not supported .*t\.cpu\(\)"):
        REFUSED[name](t.untyped_storage())
    close(t, torch.arange(6.0) * 2)


def test_a_storage_made_without_a_tensor_raises_clearly():
    s = torch.UntypedStorage(8, device=DEV)
    assert s.nbytes() == 8 and s.device.type == "ember"  # metadata
    for f in (
        lambda: s.data_ptr(),
        lambda: s.cpu(),
        lambda: s.copy_(torch.zeros(2).untyped_storage()),
        lambda: torch.empty(0, device=DEV).set_(s),
    ):
        with pytest.raises(RuntimeError, match="no ember tensor's.*untyped_storage"):
            f()


DTYPES = [torch.uint8, torch.bool, torch.int16, torch.float64, torch.complex64, torch.float32]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("pending", [False, True], ids=["data", "pending"])
def test_set_of_another_dtype_reads_the_same_bytes_as_eager(dtype, pending):
    a = torch.arange(1.0, 13.0).reshape(3, 4).t()  # a strided base
    b = a.to(DEV)
    if pending:
        b = b * 1
    ea = torch.empty(0, dtype=dtype).set_(a.untyped_storage())
    eb = torch.empty(0, dtype=dtype, device=DEV).set_(b.untyped_storage())
    assert eb.shape == ea.shape and eb.untyped_storage()._cdata == b.untyped_storage()._cdata
    close(eb.view(torch.uint8), ea.view(torch.uint8))
    # a dense layout at an offset; a write through it reaches the base
    ea = torch.empty(0, dtype=torch.int16).set_(a.untyped_storage(), 3, (2, 3))
    eb = torch.empty(0, dtype=torch.int16, device=DEV).set_(b.untyped_storage(), 3, (2, 3))
    close(eb, ea)
    ea.fill_(7)
    eb.fill_(7)
    close(b, a)
    close(b * 1, a * 1)
    # a strided layout reads the same elements
    layout = (5, (2, 3), (1, 4))
    ea = torch.empty(0, dtype=torch.int16).set_(a.untyped_storage(), *layout)
    eb = torch.empty(0, dtype=torch.int16, device=DEV).set_(b.untyped_storage(), *layout)
    close(eb, ea)
    with pytest.raises(RuntimeError, match="needs 52 bytes; the storage has 48"):
        torch.empty(0, dtype=torch.int32, device=DEV).set_(b.untyped_storage(), 11, (2,))


def test_a_write_through_a_strided_set_of_another_dtype():
    a = torch.arange(1.0, 13.0)
    b = a.to(DEV)
    layout = (5, (2, 3), (1, 4))
    ea = torch.empty(0, dtype=torch.int16).set_(a.untyped_storage(), *layout)
    eb = torch.empty(0, dtype=torch.int16, device=DEV).set_(b.untyped_storage(), *layout)
    ea.fill_(7)
    eb.fill_(7)
    close(b, a)


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_storage_casts_and_byteswap_equal_eager():
    a = torch.arange(-3.0, 3.0)
    b = a.to(DEV) * 1
    ua, ub = a.untyped_storage(), b.untyped_storage()
    for cast in ("float", "half", "bool", "int"):
        ta, tb = getattr(ua, cast)(), getattr(ub, cast)()
        assert tb.device.type == "ember" and tb.dtype == ta.dtype and tb.tolist() == ta.tolist()
        ta, tb = getattr(a.storage(), cast)(), getattr(b.storage(), cast)()
        assert tb.device.type == "ember" and tb.tolist() == ta.tolist()
    assert ub.is_pinned() is ua.is_pinned() is False
    ua.byteswap(torch.float32)
    ub.byteswap(torch.float32)
    assert ub.tolist() == ua.tolist()
    close(b, a)  # the tensor reads the swapped bytes
    close(b * 1, a * 1)


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_a_cpu_storage_moves_to_ember():
    c = torch.arange(4.0)
    for move in (lambda s: s.to(device="ember"), lambda s: s.ember(), lambda s: s.ember(0)):
        s = move(c.untyped_storage())
        assert s.device.type == "ember" and s.tolist() == c.untyped_storage().tolist()
        close(torch.empty(0, device=DEV).set_(s), c)
        typed = move(c.storage())
        assert typed.device.type == "ember" and typed.dtype == torch.float32
        assert typed.tolist() == c.storage().tolist()
    s = c.untyped_storage().to(device="ember")
    assert s.to(device="ember") is s and s.ember() is s


SAVES = {
    "torch.save": lambda obj, **kw: _save_load(obj, **kw),
    "legacy": lambda obj, **kw: _save_load(obj, _use_new_zipfile_serialization=False, **kw),
    "pickle": lambda obj, **kw: pickle.loads(pickle.dumps(obj)),
}


def _save_load(obj, map_location=None, **kw):
    buf = io.BytesIO()
    torch.save(obj, buf, **kw)
    buf.seek(0)
    return torch.load(buf, map_location=map_location, weights_only=False)


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
@pytest.mark.parametrize("how", list(SAVES))
def test_saving_a_storage_round_trips(how):
    a = torch.arange(6.0) * 2
    b = a.to(DEV) * 1  # pending when saved
    objs = {"typed": lambda t: t.storage(), "untyped": lambda t: t.untyped_storage()}
    for kind, get in objs.items():
        if kind == "untyped" and how != "torch.save":
            # eager's legacy format (pickle uses it) cannot load an UntypedStorage either
            with pytest.raises(AttributeError, match="dtype"):
                SAVES[how](get(a))
            continue
        want = SAVES[how](get(a))
        for loc in (None, "ember", "cpu") if how != "pickle" else (None,):
            kw = {} if how == "pickle" else {"map_location": loc}
            got = SAVES[how](get(b), **kw)
            assert type(got) is type(want) and got.tolist() == want.tolist(), (kind, loc)
            assert got.device.type == (loc or "ember"), (kind, loc)
    # a CPU storage loaded onto ember
    got = _save_load(a.storage(), map_location="ember")
    assert got.device.type == "ember" and got.tolist() == a.storage().tolist()


TYPED = {
    "size": lambda t: t.storage().size(),
    "len": lambda t: len(t.storage()),
    "dtype": lambda t: t.storage().dtype,
    "nbytes": lambda t: t.storage().nbytes(),
    "view_size": lambda t: t[2:].storage().size(),
    "data_ptr_is_tensor's": lambda t: t.storage().data_ptr() == t.data_ptr(),
    "tolist": lambda t: t.storage().tolist(),
    "getitem": lambda t: t.storage()[2],
    "cpu": lambda t: t.storage().cpu().tolist(),
    "clone": lambda t: t.storage().clone().tolist(),
    "deepcopy": lambda t: copy.deepcopy(t.storage()).tolist(),
    "double": lambda t: t.storage().double().tolist(),
    "element_size": lambda t: t.storage().element_size(),
    "is_pinned": lambda t: t.storage().is_pinned(),
}


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_typed_storage_equals_eager():
    a = torch.arange(6.0)
    b = a.to(DEV) * 1
    for name, f in TYPED.items():
        assert f(b) == f(a), name
    for t in (a, b):
        s = t.storage()
        s[1] = 42
        s[4:] = 7
    close(b, a)


def test_cpu_storages_are_untouched():
    c = torch.arange(3.0)
    assert c.untyped_storage().cpu().nbytes() == 12 and len(c.untyped_storage()) == 12
    assert c.data_ptr() == c.untyped_storage().data_ptr() != 0
    d = torch.empty(0).set_(c.untyped_storage(), 1, (2,), (1,))
    close(d, c[1:])
