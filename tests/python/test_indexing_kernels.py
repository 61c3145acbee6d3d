"""Native gather and scatter kernels (docs/codegen.md, "gather / scatter") end
to end: embedding lookups, cross-entropy's target pick and their backward scatter-adds
run as generated kernels on the `cpu` backend, nothing interpreted. Oracles: eager CPU
(forward bit for bit: a gather copies; gradients at float32 tolerance, since eager sums
duplicate indices in its own order) and the `interpreter` backend (bit for bit: the
scatter kernel adds duplicates in the interpreter's order, on any thread count)."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

import ember
from conftest import DEV, close


@contextlib.contextmanager
def backend(name):
    """ember.config.backend = name inside the block (pending work synced on both sides)."""
    old = ember.config.backend
    ember.sync()
    ember.config.backend = name
    try:
        yield
    finally:
        ember.sync()
        ember.config.backend = old


def _embedding_step(w, ids, tgt):
    """Embedding lookup, a linear read-out and cross-entropy; returns (loss, dW)."""
    w = w.detach().clone().requires_grad_(True)
    h = F.embedding(ids, w)  # gather
    logits = h @ w.t()  # tied read-out, as GPT's lm_head
    loss = F.cross_entropy(logits.reshape(-1, w.shape[0]), tgt.reshape(-1))  # gather
    loss.backward()  # scatter-adds (embedding backward)
    return loss.detach(), w.grad


def _inputs():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(65, 32, generator=g)
    ids = torch.randint(0, 65, (8, 64), generator=g)
    ids[:, :16] = 7  # many duplicates: one row receives 128+ updates
    tgt = torch.randint(0, 65, (8, 64), generator=g)
    return w, ids, tgt


def test_embedding_and_cross_entropy_run_as_kernels_and_match_eager():
    assert ember.config.backend == "cpu"
    w, ids, tgt = _inputs()
    loss_e, grad_e = _embedding_step(w, ids, tgt)
    loss, grad = _embedding_step(w.to(DEV), ids.to(DEV), tgt.to(DEV))
    loss, grad = loss.cpu(), grad.cpu()  # one graph: forward and backward
    g = ember.metrics.last_graph()
    assert g["interpreted"] == 0, g
    assert g["extern_ops"] == 0, g
    close(loss, loss_e)
    close(grad, grad_e)
    # the lookup itself is a copy: bit for bit
    assert torch.equal(F.embedding(ids.to(DEV), w.to(DEV)).cpu(), F.embedding(ids, w))


@pytest.mark.parametrize("padding_idx", [-1, 7])
def test_embedding_backward_is_one_kernel_with_its_mask(padding_idx):
    """Embedding backward (a scatter-add, no float reduction whose order the backends
    may choose differently) equals the interpreter bit for bit: the cpu kernel adds each
    row's duplicates in the interpreter's order (by row blocks over bucketed update
    rows). The padding mask ``select(ids == padding_idx, 0, dy)``, the zero destination
    and the reshaped ids are loop fusions read only by the scatter: they run inside the
    scatter's kernel (compile.cc, FuseIntoScatters)."""
    _, ids, _ = _inputs()
    g = torch.Generator().manual_seed(3)
    grad_out = torch.randn(8, 64, 32, generator=g) * 100
    results = {}
    for name in ("cpu", "interpreter"):
        with backend(name):
            r = torch.ops.aten.embedding_dense_backward(
                grad_out.to(DEV), ids.to(DEV), 65, padding_idx, False
            )
            results[name] = r.cpu()
            lg = ember.metrics.last_graph()
            assert lg["backend"] == name and lg["interpreted"] == (name == "interpreter"), lg
            if name == "cpu":
                assert lg["kernels"] == 1, lg
    assert torch.equal(results["cpu"], results["interpreter"])
    want = torch.ops.aten.embedding_dense_backward(grad_out, ids, 65, padding_idx, False)
    close(results["cpu"], want)
    # the duplicates' sums really are order-sensitive at this scale (else this could not fail)
    rows = grad_out.reshape(-1, 32)[ids.reshape(-1) == 7]
    assert not torch.equal(rows.sum(0), rows.flip(0).cumsum(0)[-1])
    if padding_idx >= 0:  # the padding row gets nothing (else this could not fail)
        assert torch.equal(results["cpu"][padding_idx], torch.zeros(32))
        assert (ids == padding_idx).any()


def test_index_add_with_duplicates_matches_eager():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(10, 33, generator=g)
    src = torch.randn(200, 33, generator=g) * 100
    idx = torch.randint(0, 10, (200,), generator=g)
    want = x.index_add(0, idx, src)
    got = x.to(DEV).index_add(0, idx.to(DEV), src.to(DEV)).cpu()
    close(got, want)


@pytest.mark.parametrize("bad", [-66, 65])
def test_out_of_range_ids_raise_eagers_error_type_at_the_users_line(bad):
    w, ids, _ = _inputs()
    ids[3, 5] = bad
    with pytest.raises(IndexError):
        F.embedding(ids, w)
    with pytest.raises(IndexError, match="out of range"):
        F.embedding(ids.to(DEV), w.to(DEV)).cpu()
    # tensors stay readable after the error
    assert torch.equal(w.to(DEV).cpu(), w)
