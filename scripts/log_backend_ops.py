"""Lists the ATen ops that reach the ember backend for the target models.

One training step (forward, backward, optimizer step, sync) of an MLP, a small
CNN and the char-level GPT of examples/train_gpt.py (embedding, layer norm,
causal SDPA, GELU MLP, cross_entropy, dropout, AdamW, grad clipping), each
under ember.metrics; prints, per model, the op names counted as externs (ops
that ran as ATen externs instead of being lowered), fallbacks, and (once the
bridge lowers graphs) the calls whose lowering declined or failed.

Run against a build: EMBER_BUILD_DIR=build-torch/src/torch PYTHONPATH=python python scripts/log_backend_ops.py
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import ember

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from train_gpt import GPT, GPTConfig  # noqa: E402


def step(model, make_loss, opt):
    opt.zero_grad(set_to_none=True)
    loss = make_loss(model)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    ember.sync()
    return loss


def run(name, model, make_loss, fused=False):
    dev = ember.device()
    model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, foreach=True)
    step(model, make_loss, opt)  # the first step creates optimizer state
    ember.metrics.clear()
    step(model, make_loss, opt)
    c = ember.metrics.counters()
    print(f"## {name}")
    for kind in ("externs", "fallbacks", "lowering_declined", "lowering_errors"):
        for op, n in sorted(c.get(kind, {}).items()):
            print(f"{kind} {op} {n}")


def main():
    torch.manual_seed(0)
    dev = ember.device()
    x = torch.randn(16, 32).to(dev)
    y = torch.randint(0, 10, (16,)).to(dev)
    mlp = nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10)
    )
    run("mlp", mlp, lambda m: F.cross_entropy(m(x), y))

    img = torch.randn(4, 3, 16, 16).to(dev)
    lab = torch.randint(0, 10, (4,)).to(dev)
    cnn = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.1),
        nn.Linear(16, 10),
    )
    run("cnn", cnn, lambda m: F.cross_entropy(m(img), lab, label_smoothing=0.1))

    cfg = GPTConfig(vocab_size=65, block_size=32, n_layer=2, n_head=4, n_embd=64, dropout=0.1)
    idx = torch.randint(0, 65, (4, 32)).to(dev)
    tgt = torch.randint(0, 65, (4, 32)).to(dev)
    run("gpt", GPT(cfg), lambda m: m(idx, tgt)[1])


if __name__ == "__main__":
    main()
