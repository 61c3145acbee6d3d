"""Fusion visible end to end (issue 6 §4): the MLP training step (forward, backward and
AdamW) on the default `cpu` backend runs as one graph where elementwise chains are fused
native kernels and only the matmuls stay extern (`ember.dot-general`, run by ATen).

The exact figures live in EXPECTED below, one place to update when fusion or codegen
changes them (docs/architecture.md, "Lowering"); the test prints what it measured."""

import torch
import torch.nn.functional as F

import ember
from training_util import DEV, fresh_graphs, mlp

# Per graph of the steady MLP step (3 Linear layers, ReLU, Tanh, cross-entropy, AdamW
# foreach over 6 parameters). Matmuls: 3 forward, 2 + 3 backward (the first layer's
# input needs no gradient).
EXPECTED = {
    "dot_generals": 8,
    "kernels": 12,  # native kernels (fusions): forward, backward and the AdamW update
    "interpreted": 0,
    "extern_ops": 0,  # no ATen op runs as an extern
}


def _steady_step_graph():
    torch.manual_seed(0)
    m = mlp().to(DEV)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.05)
    x, y = torch.randn(32, 10).to(DEV), torch.randint(0, 3, (32,)).to(DEV)
    fresh_graphs()
    for _ in range(3):  # step 1 creates the optimizer state; steps 2 and 3 are steady
        F.cross_entropy(m(x), y).backward()
        opt.step()
        opt.zero_grad()
    return ember.metrics.last_graph()


def test_mlp_adamw_step_fuses_elementwise_and_keeps_only_matmuls_extern():
    assert ember.config.backend == "cpu"
    g = _steady_step_graph()
    print(
        f"\nMLP AdamW step on {g['backend']}: {g['lazy_ops']} lazy ops -> {g['core_nodes']} core "
        f"nodes; {g['kernels']} kernels (core ops each: {g['kernel_ops']}), "
        f"{g['extern_steps']} extern steps {g['core_externs']}, {g['interpreted']} interpreted, "
        f"{g['copy_steps']} copies"
    )
    assert g["backend"] == "cpu"
    assert g["lowered_ops"] == g["lazy_ops"] and g["extern_ops"] == EXPECTED["extern_ops"], g
    assert g["externs"] == {}, g
    assert g["core_externs"] == {"ember.dot-general": EXPECTED["dot_generals"]}, g
    assert g["extern_steps"] == EXPECTED["dot_generals"], g
    assert g["interpreted"] == EXPECTED["interpreted"], g
    assert g["kernels"] == EXPECTED["kernels"], g
    assert len(g["kernel_ops"]) == g["kernels"]
    # fused: far fewer kernels than the core ops they compute, and chains (> 1 op) exist
    assert sum(g["kernel_ops"]) >= 3 * g["kernels"], g
    assert max(g["kernel_ops"]) >= 10, g
