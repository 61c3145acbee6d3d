"""Autograd through ember tensors (backward runs on an autograd worker thread)."""

import copy

import torch
import torch.nn.functional as F

import ember
from conftest import DEV, close


def test_simple_grad():
    a = torch.randn(4, 3, requires_grad=True)
    d = a.detach().to(DEV).requires_grad_()
    ((a.sin() * a).sum()).backward()
    ((d.sin() * d).sum()).backward()
    close(d.grad, a.grad)


def _mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(10, 32),
        torch.nn.ReLU(),
        torch.nn.Linear(32, 32),
        torch.nn.GELU(),
        torch.nn.Linear(32, 3),
    )


def test_mlp_training_matches_eager():
    torch.manual_seed(0)
    ref = _mlp()
    m = copy.deepcopy(ref).to(DEV)
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    opt_m = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(64, 10)
    y = torch.randint(0, 3, (64,))
    dx, dy = x.to(DEV), y.to(DEV)
    ember.metrics.clear()
    losses = []
    for _ in range(4):
        for model, opt, xx, yy in [(ref, opt_r, x, y), (m, opt_m, dx, dy)]:
            loss = F.cross_entropy(model(xx), yy)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss)
    for pr, pm in zip(ref.parameters(), m.parameters()):
        close(pm, pr.detach(), rtol=1e-4, atol=1e-5)
    close(losses[-1], losses[-2].detach(), rtol=1e-4, atol=1e-5)
    c = ember.metrics.counters()
    # one graph for the first step (no optimizer state yet), then a fixed set reused
    assert c["graphs_compiled"] <= 3, c["graphs_compiled"]
    assert c["memory_cache_hits"] >= 2
    assert c["fallbacks"] == {}, c["fallbacks"]


def test_adamw_matches_eager():
    torch.manual_seed(1)
    ref = _mlp()
    m = copy.deepcopy(ref).to(DEV)
    opt_r = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt_m = torch.optim.AdamW(m.parameters(), lr=1e-2)
    x = torch.randn(16, 10)
    for _ in range(3):
        for model, opt, xx in [(ref, opt_r, x), (m, opt_m, x.to(DEV))]:
            model(xx).square().mean().backward()
            opt.step()
            opt.zero_grad()
    for pr, pm in zip(ref.parameters(), m.parameters()):
        close(pm, pr.detach(), rtol=1e-4, atol=1e-5)


def test_grad_of_views_and_inplace():
    a = torch.randn(5, 4, requires_grad=True)
    d = a.detach().to(DEV).requires_grad_()

    def f(t):
        u = t * 1.0
        u[1:3].mul_(2)
        return (u.t()[::2] ** 2).sum()

    f(a).backward()
    f(d).backward()
    close(d.grad, a.grad)


def test_batchnorm_conv_training():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 2),
    )
    m = copy.deepcopy(ref).to(DEV)
    x = torch.randn(4, 3, 8, 8)
    for model, xx in [(ref, x), (m, x.to(DEV))]:
        model(xx).sum().backward()
    for pr, pm in zip(ref.parameters(), m.parameters()):
        close(pm.grad, pr.grad, rtol=1e-4, atol=1e-5)
    close(m[1].running_mean, ref[1].running_mean)
    close(m[1].running_var, ref[1].running_var)


def test_transformer_lm_training_matches_eager():
    import torch.nn as nn

    torch.manual_seed(0)
    ref = nn.ModuleList(
        [
            nn.Embedding(50, 32),
            nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
            nn.Linear(32, 50),
        ]
    )
    m = copy.deepcopy(ref).to(DEV)
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt_m = torch.optim.SGD(m.parameters(), lr=0.1)
    tok = torch.randint(0, 50, (4, 10))
    mask = nn.Transformer.generate_square_subsequent_mask(10)

    def loss_of(mod, t, mk):
        h = mod[1](mod[0](t), src_mask=mk, is_causal=True)
        return F.cross_entropy(mod[2](h).flatten(0, 1), t.flatten())

    ember.metrics.clear()
    losses = []
    for _ in range(3):
        for mod, opt, t, mk in [(ref, opt_r, tok, mask), (m, opt_m, tok.to(DEV), mask.to(DEV))]:
            loss = loss_of(mod, t, mk)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss)
    close(losses[-1], losses[-2].detach(), rtol=1e-4, atol=1e-4)
    for a, b in zip(ref.parameters(), m.parameters()):
        close(b, a.detach(), rtol=1e-4, atol=1e-4)
    assert ember.metrics.counters()["fallbacks"] == {}


def test_tied_weights_stay_tied_and_gpt_block_trains():
    import torch.nn as nn

    torch.manual_seed(0)

    class TinyGPT(nn.Module):
        def __init__(self, V=32, d=16):
            super().__init__()
            self.tok = nn.Embedding(V, d)
            self.ln1 = nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.head = nn.Linear(d, V, bias=False)
            self.head.weight = self.tok.weight  # tied

        def forward(self, idx):
            T = idx.shape[1]
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=idx.device), 1)
            x = self.tok(idx)
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
            return self.head(x + self.mlp(x))

    ref = TinyGPT()
    m = copy.deepcopy(ref).to(DEV)
    assert m.head.weight is m.tok.weight
    # SGD: Adam turns the ~0 gradient of the attention key bias (softmax-invariant) into
    # +-lr steps, amplifying rounding noise; SGD keeps the comparison tight.
    opts = [torch.optim.SGD(mod.parameters(), lr=0.05, momentum=0.9) for mod in (ref, m)]
    data = torch.randint(0, 32, (4, 9))
    ember.metrics.clear()
    for _ in range(4):
        for mod, opt, d in [(ref, opts[0], data), (m, opts[1], data.to(DEV))]:
            loss = F.cross_entropy(mod(d[:, :-1]).reshape(-1, 32), d[:, 1:].reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(mod.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
    for a, b in zip(ref.parameters(), m.parameters()):
        close(b, a.detach(), rtol=1e-3, atol=1e-4)
    c = ember.metrics.counters()
    assert c["fallbacks"] == {} and c["graphs_compiled"] <= 3
