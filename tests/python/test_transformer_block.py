"""Issue 6: a pre-norm transformer block (LayerNorm -> causal SDPA -> residual;
LayerNorm -> GELU MLP -> residual; the model of bench/transformer_block.py) trained on
ember (cpu backend) against eager CPU.

* 20 AdamW steps under a cosine LR schedule, dropout 0: the loss matches eager at
  rtol 1e-4 every step, and no graph is built after step 2.
* The training step's graph: only matmuls (dot-general) and attention (ATen's CPU
  flash kernel forward and backward) remain externs, elementwise chains and norms are
  fused kernels; with the composite attention (sdpa_kernel([OVERRIDEABLE])) attention
  is lowered (its softmax fused between dot-generals) and only matmuls are externs.
  The expected counts live in EXPECTED_STEP_GRAPH / EXPECTED_COMPOSITE_STEP_GRAPH below
  (update them there when the fusion changes).
"""

import copy
import re
import importlib.util
import pathlib

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import ember
from conftest import DEV
from training_util import fresh_graphs, graphs_built

_spec = importlib.util.spec_from_file_location(
    "transformer_block_bench",
    pathlib.Path(__file__).resolve().parents[2] / "bench" / "transformer_block.py",
)
tb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tb)

DIM, HEADS, BATCH, SEQ = 32, 4, 2, 16

# The step graph on the cpu backend (a step that has optimizer state), in one place:
# update here when the fusion changes. Top-level ops of the optimized core graph may
# only be parameters, fusions (native kernels) and dot-generals (the matmul extern);
# attention's scaling, causal mask and softmax are one fusion forward and one
# backward; the total kernel count may only go down.
EXPECTED_STEP_GRAPH = {
    "top_level_ops": {"parameter", "fusion", "dot-general", "custom-call", "get-tuple-element"},
    "core_externs": {"ember.dot-general": 12},  # 4 linears x (forward, input grad, weight
    # grad)
    # attention: ATen's CPU flash kernel forward and backward (src/torch/attention.cpp)
    "aten_externs": {"ember::sdpa_flash_forward": 1, "ember::sdpa_flash_backward": 1},
    # native kernels (independent fusions merged by level, docs/architecture.md "Runtime")
    "max_kernels": 34,
}
# The same step with the lowered composite attention (sdpa_kernel([OVERRIDEABLE])).
EXPECTED_COMPOSITE_STEP_GRAPH = {
    "top_level_ops": {"parameter", "fusion", "dot-general"},
    "core_externs": {"ember.dot-general": 18},  # 4 linears x (forward, input grad, weight
    # grad) = 12; attention QK^T, PV, dV, dP, dQ, dK = 6 (the backward's QK^T merges
    # with the forward's by CSE)
    "aten_externs": {},
    "attention_kernels": {"ember::sdpa_forward": 1, "ember::sdpa_backward": 1},
    # 33 before AdamW's lerp/addcmul/add-with-alpha were lowered as eager's single-rounding
    # multiply-add (f64 widening, docs/architecture.md "Lowering"), which costs one kernel
    "max_kernels": 34,
}


@pytest.fixture
def cpu_backend():
    old = ember.config.backend
    ember.sync()
    ember.config.backend = "cpu"
    try:
        yield
    finally:
        ember.sync()
        ember.config.backend = old


def _setup(steps):
    torch.manual_seed(0)
    ref = tb.Block(DIM, HEADS)
    dev = copy.deepcopy(ref).to(DEV)
    x = torch.randn(BATCH, SEQ, DIM)
    target = torch.randn(BATCH, SEQ, DIM)
    return (
        (ref, *tb.make_trainer(ref, steps), x, target),
        (dev, *tb.make_trainer(dev, steps), x.to(DEV), target.to(DEV)),
    )


def test_block_trains_like_eager_with_a_fixed_graph_count(cpu_backend):
    steps = 20
    eager, emb = _setup(steps)
    fresh_graphs()
    built_after = []
    for i in range(steps):
        want = tb.train_step(*eager).item()
        got = tb.train_step(*emb).item()
        assert got == pytest.approx(want, rel=1e-4), f"step {i}: ember {got} vs eager {want}"
        built_after.append(graphs_built())
    assert built_after[-1] == built_after[1], f"graphs built per step: {built_after}"
    c = ember.metrics.counters()
    assert not c["lowering_errors"], c["lowering_errors"]
    assert not any("scaled_dot_product_attention" in k for k in c["lowering_declined"]), c[
        "lowering_declined"
    ]


def _top_level_ops(ir_text):
    """(op name, metadata) of each node of the first (entry) graph of a dumped .ir."""
    entry = ir_text.split("\ngraph ")[0]
    out = []
    for line in entry.splitlines():
        m = re.match(r"\s+%\d+ = \S+ ([a-z-]+)\(.*?(?://\s*(.*))?$", line)
        if m:
            out.append((m.group(1), m.group(2) or ""))
    return out


@pytest.mark.parametrize("attention", ["flash", "composite"])
def test_block_step_graph_leaves_only_matmuls_and_attention_extern(
    attention, cpu_backend, tmp_path, monkeypatch
):
    want = EXPECTED_STEP_GRAPH if attention == "flash" else EXPECTED_COMPOSITE_STEP_GRAPH
    eager, emb = _setup(10)
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    fresh_graphs()  # the step graph is compiled (and dumped) again
    backends = [SDPBackend.OVERRIDEABLE]
    if attention == "flash":
        backends.append(SDPBackend.FLASH_ATTENTION)
    with sdpa_kernel(backends):
        for _ in range(3):
            tb.train_step(*emb)  # the optimizer's post-hook syncs the whole step
    g = ember.metrics.last_graph()
    assert g["backend"] == "cpu"
    assert g["externs"] == want["aten_externs"], f"ATen ops left as externs: {g['externs']}"
    assert g["core_externs"] == want["core_externs"], g["core_externs"]
    assert g["interpreted"] == 0, g
    assert 0 < g["kernels"] <= want["max_kernels"], g
    assert not g["declined"], g["declined"]
    assert not g["lowering_errors"], g["lowering_errors"]
    # The dumped core graph of the step (the largest one compiled).
    dumps = sorted(tmp_path.glob("*.after.ir"), key=lambda p: p.stat().st_size)
    assert dumps, "EMBER_DEBUG_DIR got no dump"
    ops = _top_level_ops(dumps[-1].read_text())
    assert sum(op == "dot-general" for op, _ in ops) == want["core_externs"]["ember.dot-general"]
    assert {op for op, _ in ops} <= want["top_level_ops"], sorted({op for op, _ in ops})
    for lazy_op, n in want.get("attention_kernels", {}).items():
        got = sum(op == "fusion" and meta.startswith(lazy_op) for op, meta in ops)
        assert got == n, f"{lazy_op}: {got} kernels, expected {n}"
