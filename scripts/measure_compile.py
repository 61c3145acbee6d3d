"""Compile cost per new graph on the CPU backend (docs/performance.md "Compile cost per
new graph"): runs two training steps (AdamW, clip_grad_norm_) of the MLP and/or the
char-GPT of scripts/log_backend_ops.py under ember and prints, per step, the wall time,
graphs compiled, compile seconds (ember.metrics) and the last graph's kernels,
interpreted steps, extern steps and core nodes; STEADY=n adds n more (cached) steps and
prints their median CPU and wall time.

    EMBER_BACKEND=cpu EMBER_CACHE_DIR=$(mktemp -d) EMBER_BUILD_DIR=build-torch/src/torch \
        PYTHONPATH=python python scripts/measure_compile.py [mlp] [gpt]

A fresh EMBER_CACHE_DIR makes step 0 a cold compile; EMBER_CODEGEN_FAST=1 compiles at
-O1; EMBER_CODEGEN_BATCH=0 / EMBER_MERGE_FUSIONS=0 turn off batch compiles / horizontal
fusion.
"""

import os
import sys
import time
import torch
import torch.nn as nn
import torch.nn.functional as F
import ember

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from train_gpt import GPT, GPTConfig
from log_backend_ops import step  # one training step + sync, shared with the op log


def run(name, model, make_loss):
    dev = ember.device()
    model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, foreach=True)
    steady = int(os.environ.get("STEADY", "0"))
    for i in range(2):
        ember.metrics.clear()
        t = time.perf_counter()
        step(model, make_loss, opt)
        dt = time.perf_counter() - t
        c = ember.metrics.counters()
        g = ember.metrics.last_graph()
        print(
            f"{name} step{i}: wall {dt:.2f}s graphs {c['graphs_compiled']} compile_s {c['compile_seconds']:.2f} "
            f"last: kernels {g.get('kernels')} interp {g.get('interpreted')} extern_steps {g.get('extern_steps')} core_nodes {g.get('core_nodes')}",
            flush=True,
        )
    ts = []
    for i in range(steady):
        t = time.perf_counter()
        c0 = time.process_time()
        step(model, make_loss, opt)
        ts.append((time.process_time() - c0, time.perf_counter() - t))
    if ts:
        cpu = sorted(x[0] for x in ts)
        wall = sorted(x[1] for x in ts)
        print(
            f"{name} steady median cpu {cpu[len(cpu) // 2] * 1e3:.2f} ms wall {wall[len(wall) // 2] * 1e3:.2f} ms over {len(ts)} steps",
            flush=True,
        )


torch.manual_seed(0)
dev = ember.device()
which = sys.argv[1:] or ["mlp", "gpt"]
if "mlp" in which:
    x = torch.randn(16, 32).to(dev)
    y = torch.randint(0, 10, (16,)).to(dev)
    mlp = nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10)
    )
    run("mlp", mlp, lambda m: F.cross_entropy(m(x), y))
if "gpt" in which:
    cfg = GPTConfig(vocab_size=65, block_size=32, n_layer=2, n_head=4, n_embd=64, dropout=0.1)
    idx = torch.randint(0, 65, (4, 32)).to(dev)
    tgt = torch.randint(0, 65, (4, 32)).to(dev)
    run("gpt", GPT(cfg), lambda m: m(idx, tgt)[1])
