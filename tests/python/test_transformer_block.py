"""Issue 6: a pre-norm transformer block (LayerNorm -> causal SDPA -> residual;
LayerNorm -> GELU MLP -> residual; the model of bench/transformer_block.py) trained on
ember (cpu backend) against eager CPU.

* 20 AdamW steps under a cosine LR schedule, dropout 0: the loss matches eager at
  rtol 1e-4 every step, and no graph is built after step 2.
* The training step's graph: only matmuls (dot-general) remain externs; attention is
  taken whole and lowered, elementwise chains, softmax and norms are fused kernels.
  The expected counts live in EXPECTED_STEP_GRAPH below (update them there when the
  fusion changes).
"""

import copy
import re
import importlib.util
import pathlib

import pytest
import torch
import torch.nn.functional as F

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
    "top_level_ops": {"parameter", "fusion", "dot-general"},
    "core_externs": {"ember.dot-general": 18},  # 4 linears x (forward, input grad, weight
    # grad) = 12; attention QK^T, PV, dV, dP, dQ, dK = 6 (the backward's QK^T merges
    # with the forward's by CSE)
    "attention_kernels": {"ember::sdpa_forward": 1, "ember::sdpa_backward": 1},
    # native kernels (independent fusions merged by level, docs/architecture.md "Runtime");
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


def test_block_step_graph_leaves_only_matmuls_extern(cpu_backend, tmp_path, monkeypatch):
    eager, emb = _setup(10)
    monkeypatch.setenv("EMBER_DEBUG_DIR", str(tmp_path))
    fresh_graphs()  # the step graph is compiled (and dumped) again
    for _ in range(3):
        tb.train_step(*emb)  # the optimizer's post-hook syncs the whole step
    g = ember.metrics.last_graph()
    assert g["backend"] == "cpu"
    assert not g["externs"], f"ATen ops left as externs: {g['externs']}"
    assert g["core_externs"] == EXPECTED_STEP_GRAPH["core_externs"], g["core_externs"]
    assert g["interpreted"] == 0, g
    assert 0 < g["kernels"] <= EXPECTED_STEP_GRAPH["max_kernels"], g
    assert not g["declined"], g["declined"]
    assert not g["lowering_errors"], g["lowering_errors"]
    # The dumped core graph of the step (the largest one compiled).
    dumps = sorted(tmp_path.glob("*.after.ir"), key=lambda p: p.stat().st_size)
    assert dumps, "EMBER_DEBUG_DIR got no dump"
    ops = _top_level_ops(dumps[-1].read_text())
    assert (
        sum(op == "dot-general" for op, _ in ops)
        == EXPECTED_STEP_GRAPH["core_externs"]["ember.dot-general"]
    )
    assert {op for op, _ in ops} <= EXPECTED_STEP_GRAPH["top_level_ops"], sorted(
        {op for op, _ in ops}
    )
    for lazy_op, n in EXPECTED_STEP_GRAPH["attention_kernels"].items():
        got = sum(op == "fusion" and meta.startswith(lazy_op) for op, meta in ops)
        assert got == n, f"{lazy_op}: {got} kernels, expected {n}"
