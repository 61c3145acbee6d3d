"""Shape bucketing (ember.config.shape_buckets; docs/architecture.md, "Recompiles"): a
graph that recompiles because an input dim changed length runs on a program padded to the
next bucket, compiled once per bucket, when every op reading the padded dim is pad-safe
(src/passes/pad_dimensions.h); otherwise the exact shape compiles and the log says why.
Results match eager within float tolerance."""

import logging

import pytest
import torch
import torch.nn.functional as F

import ember
from conftest import DEV, close


@pytest.fixture(autouse=True)
def _buckets():
    ember.sync()
    ember._C.clear_cache()
    ember.metrics.clear()
    ember.config.shape_buckets = [8, 16]
    yield
    ember.config.shape_buckets = None


class Block(torch.nn.Module):
    """Pre-norm causal self-attention and an MLP, position-wise apart from attention."""

    def __init__(self, c=16, heads=2, positions=32):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(c), torch.nn.LayerNorm(c)
        self.qkv, self.proj = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
        self.fc1, self.fc2 = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)
        self.pos = torch.nn.Embedding(positions, c)

    def forward(self, x):
        b, t, c = x.shape
        x = x + self.pos(torch.arange(t, device=x.device))
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def run_lengths(model, lengths, fn=None):
    torch.manual_seed(0)
    dev_model = type(model)()
    dev_model.load_state_dict(model.state_dict())
    dev_model.to(DEV)
    for t in lengths:
        x = torch.randn(2, t, 16)
        with torch.no_grad():
            want = model(x) if fn is None else fn(model, x)
            got = dev_model(x.to(DEV)) if fn is None else fn(dev_model, x.to(DEV))
        close(got, want, atol=1e-5, rtol=1e-5)


def test_lengths_of_one_bucket_share_one_program(caplog):
    torch.manual_seed(0)
    model = Block().eval()
    with caplog.at_level(logging.INFO, logger="ember"):
        run_lengths(model, [5, 6, 7, 8, 7, 9, 12, 16])
    c = ember.metrics.counters()
    # 5: the first graph, exact. 6: a recompile of input 0 dim 1, padded to 8 and
    # compiled; 7, 8 reuse it; 7 again is a cache hit; 9 compiles bucket 16; 12, 16 reuse.
    assert c["bucket_refusals"] == 0, [r.getMessage() for r in caplog.records]
    assert c["bucketed_graphs"] == 6 and c["bucket_reuses"] == 4, c
    assert c["graphs_compiled"] + c["disk_cache_hits"] == 7, c
    logged = [r.getMessage() for r in caplog.records if "shape bucketing" in r.getMessage()]
    assert len(logged) == 6, logged
    assert "dim 1 of length 6 padded to 8 (compiled for the bucket)" in logged[0], logged
    assert "of length 7 padded to 8 (the bucket's program, compiled before)" in logged[1], logged


def test_without_buckets_every_length_compiles():
    ember.config.shape_buckets = None
    torch.manual_seed(0)
    run_lengths(Block().eval(), [5, 6, 7])
    c = ember.metrics.counters()
    assert c["graphs_compiled"] + c["disk_cache_hits"] == 3 and c["bucketed_graphs"] == 0, c


def test_an_op_that_is_not_pad_safe_compiles_the_exact_shape(caplog):
    # flip moves the real positions: refused, exact shapes, same values.
    def flipped(m, x):
        return m(x).flip(1) + x.cumsum(1)

    torch.manual_seed(0)
    with caplog.at_level(logging.INFO, logger="ember"):
        run_lengths(Block().eval(), [5, 6, 7], fn=flipped)
    c = ember.metrics.counters()
    assert c["bucketed_graphs"] == 0 and c["bucket_refusals"] == 2, c
    logged = [r.getMessage() for r in caplog.records if "shape bucketing" in r.getMessage()]
    assert len(logged) == 2 and all("compiled the exact shape: " in m for m in logged), logged


def test_a_length_above_the_largest_bucket_compiles_exactly():
    for t in (18, 20):
        y = torch.randn(3, t)
        close((y.to(DEV) * 2).sin(), (y * 2).sin())
    c = ember.metrics.counters()
    assert c["bucketed_graphs"] == 0 and c["bucket_refusals"] == 1, c


def test_elementwise_and_reductions_over_the_padded_dim_match_eager():
    for t in (5, 6, 7, 11):
        x = torch.randn(4, t)
        want = (x.softmax(1), x.mean(1), x.amax(1), x.argmin(1), (x * x).sum(1))
        xd = x.to(DEV)
        got = (xd.softmax(1), xd.mean(1), xd.amax(1), xd.argmin(1), (xd * xd).sum(1))
        for g, w in zip(got, want):
            close(g, w, atol=1e-6, rtol=1e-5)
    assert ember.metrics.counters()["bucketed_graphs"] == 3


@pytest.mark.parametrize(
    "value, error",
    [([16, 8], ValueError), ([1, 8], ValueError), ("abc", TypeError), (8, TypeError)],
)
def test_bad_buckets_are_refused(value, error):
    with pytest.raises(error, match="shape_buckets"):
        ember.config.shape_buckets = value
    assert ember.config.shape_buckets == [8, 16]


@pytest.mark.parametrize("mask", ["none", "bool", "float"])
def test_attention_that_is_not_causal_masks_the_padded_keys(mask):
    torch.manual_seed(0)
    for t in (5, 6, 7):
        q, k, v = (torch.randn(2, 2, t, 8) for _ in range(3))
        m = None
        if mask == "bool":
            m = (torch.rand(t, t) > 0.3) | torch.eye(t, dtype=torch.bool)
        elif mask == "float":
            m = torch.randn(2, 1, t, t)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        md = None if m is None else m.to(DEV)
        got = F.scaled_dot_product_attention(q.to(DEV), k.to(DEV), v.to(DEV), attn_mask=md)
        close(got, want, atol=1e-5, rtol=1e-5)
    c = ember.metrics.counters()
    assert c["bucketed_graphs"] == 2 and c["bucket_refusals"] == 0, c


def test_an_in_graph_causal_mask_is_recomputed_at_the_padded_length():
    # A key-padding mask (an input, padded) and a causal tril made in the graph for the
    # length: the tril is recomputed at the padded length, padded keys get no weight.
    def attn(q, k, v, keep):
        t = q.shape[2]
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :] & causal)

    torch.manual_seed(0)
    for t in (5, 6, 7):
        q, k, v = (torch.randn(2, 2, t, 8) for _ in range(3))
        keep = torch.ones(2, t, dtype=torch.bool)
        keep[1, 1] = False
        got = attn(q.to(DEV), k.to(DEV), v.to(DEV), keep.to(DEV))
        close(got, attn(q, k, v, keep), atol=1e-5, rtol=1e-5)
    c = ember.metrics.counters()
    assert c["bucketed_graphs"] == 2 and c["bucket_refusals"] == 0, c
