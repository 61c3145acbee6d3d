"""A sweep of common ops (forward) against eager CPU; each runs as an ATen extern or a
counted fallback inside the lazy graph."""

import pytest
import torch
import torch.nn.functional as F

from conftest import DEV, close

torch.manual_seed(0)
A = torch.randn(4, 6)
B = torch.randn(4, 6)
I = torch.randint(0, 4, (5,))
IMG = torch.randn(2, 3, 8, 8)

CASES = {
    "cat": lambda a, b, i, img: torch.cat([a, b, a], dim=1),
    "stack": lambda a, b, i, img: torch.stack([a, b]),
    "where": lambda a, b, i, img: torch.where(a > 0, a, b),
    "topk": lambda a, b, i, img: torch.topk(a, 3, dim=1).values,
    "sort": lambda a, b, i, img: torch.sort(a, dim=0).values,
    "argmax": lambda a, b, i, img: a.argmax(dim=1),
    "cumsum": lambda a, b, i, img: a.cumsum(1),
    "max_dim": lambda a, b, i, img: a.max(dim=0).indices,
    "gather": lambda a, b, i, img: a.gather(
        1, torch.zeros(4, 2, dtype=torch.long, device=a.device)
    ),
    "index": lambda a, b, i, img: a[i.clamp(max=3)],
    "embedding": lambda a, b, i, img: F.embedding(i, a),
    "softmax": lambda a, b, i, img: F.softmax(a, -1),
    "log_softmax": lambda a, b, i, img: F.log_softmax(a, 0),
    "layer_norm": lambda a, b, i, img: F.layer_norm(a, (6,)),
    "gelu": lambda a, b, i, img: F.gelu(a),
    "silu": lambda a, b, i, img: F.silu(a),
    "mse": lambda a, b, i, img: F.mse_loss(a, b),
    "bce": lambda a, b, i, img: F.binary_cross_entropy_with_logits(a, (b > 0).float()),
    "conv": lambda a, b, i, img: F.conv2d(
        img, torch.ones(4, 3, 3, 3, device=img.device), padding=1
    ),
    "max_pool": lambda a, b, i, img: F.max_pool2d(img, 2),
    "avg_pool": lambda a, b, i, img: F.avg_pool2d(img, 2),
    "interpolate": lambda a, b, i, img: F.interpolate(img, scale_factor=2, mode="nearest"),
    "pad": lambda a, b, i, img: F.pad(a, (1, 2)),
    "einsum": lambda a, b, i, img: torch.einsum("ij,kj->ik", a, b),
    "norm": lambda a, b, i, img: torch.linalg.vector_norm(a, dim=1),
    "var_mean": lambda a, b, i, img: torch.var_mean(a, dim=1)[0],
    "flip": lambda a, b, i, img: a.flip(0),
    "roll": lambda a, b, i, img: a.roll(2, 1),
    "tril": lambda a, b, i, img: a.tril(),
    "repeat": lambda a, b, i, img: a.repeat(2, 1),
    "one_hot": lambda a, b, i, img: F.one_hot(i, 4),
    "sdpa": lambda a, b, i, img: F.scaled_dot_product_attention(
        a.view(1, 2, 2, 6), b.view(1, 2, 2, 6), a.view(1, 2, 2, 6), is_causal=True
    ),
    "bool_ops": lambda a, b, i, img: ((a > 0) & (b < 0)) | ~(a > b),
    "int_div": lambda a, b, i, img: (i * 7) // 3 % 4,
    "clone_cl": lambda a, b, i, img: img.contiguous(memory_format=torch.channels_last) * 2,
    "nonzero_where": lambda a, b, i, img: torch.where(a > 0)[1],
    "unique": lambda a, b, i, img: torch.unique(i),
    "amax": lambda a, b, i, img: a.amax(dim=(0, 1)),
    "chunk_cat": lambda a, b, i, img: torch.cat(a.chunk(3, 1)[::-1], 1),
}


@pytest.mark.filterwarnings("error")  # no spurious warnings from .out kernels
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_eager(name):
    f = CASES[name]
    ref = f(A, B, I, IMG)
    out = f(A.to(DEV), B.to(DEV), I.to(DEV), IMG.to(DEV))
    assert out.dtype == ref.dtype and out.shape == ref.shape
    assert out.stride() == ref.stride()
    close(out, ref, rtol=1e-5, atol=1e-5)


def test_detach_and_data_alias_like_eager():
    p = torch.nn.Parameter(torch.ones(3).to(DEV))
    p.data.mul_(2)
    p.detach().add_(1)
    close(p.detach(), torch.full((3,), 3.0))


GRAD_CASES = [
    "cat",
    "stack",
    "where",
    "topk",
    "sort",
    "cumsum",
    "gather",
    "index",
    "softmax",
    "log_softmax",
    "layer_norm",
    "gelu",
    "silu",
    "mse",
    "bce",
    "conv",
    "max_pool",
    "avg_pool",
    "interpolate",
    "pad",
    "einsum",
    "norm",
    "var_mean",
    "flip",
    "roll",
    "tril",
    "repeat",
    "sdpa",
    "amax",
    "chunk_cat",
    "embedding",
]


@pytest.mark.parametrize("name", GRAD_CASES)
def test_op_backward_matches_eager(name):
    f = CASES[name]
    a, b, img = (t.clone().requires_grad_() for t in (A, B, IMG))
    da, db, dimg = (t.detach().to(DEV).requires_grad_() for t in (A, B, IMG))
    out = f(a, b, I, img)
    dout = f(da, db, I.to(DEV), dimg)
    g = torch.randn(out.shape)
    out.backward(g)
    dout.backward(g.to(DEV))
    for x, dx in [(a, da), (b, db), (img, dimg)]:
        if x.grad is None:
            assert dx.grad is None
        else:
            close(dx.grad, x.grad, rtol=1e-4, atol=1e-5)
