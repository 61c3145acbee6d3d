"""ember.export_stablehlo (python/ember/export_stablehlo.py): the StableHLO text of an
exported model compiled by JAX's XLA:CPU, its outputs compared with eager's and with
ember's (so the semantics of Ember's optimized IR are checked against XLA itself), and
the refusal of ATen externs with the ops listed.

JAX runs in its own interpreter ($EMBER_JAX_PYTHON, e.g. a venv with
`pip install "jax[cpu]==0.10.2" numpy`, docs/benchmarks.md), or in this one when it
imports jax; otherwise the XLA check is skipped."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import ember
from ember.exporting import EmberExportError

RUNNER = r"""
import sys, numpy as np, jax
text = open(sys.argv[1]).read()
args = np.load(sys.argv[2])
dev = jax.devices("cpu")
exe = dev[0].client.compile_and_load(text, dev)
ins = [jax.device_put(args[f"a{i}"], dev[0]) for i in range(len(args.files))]
res = exe.execute_sharded(ins).disassemble_into_single_device_arrays()
np.savez(sys.argv[3], **{f"o{k}": np.asarray(r[0]) for k, r in enumerate(res)})
"""


def jax_python():
    if os.environ.get("EMBER_JAX_PYTHON"):
        return os.environ["EMBER_JAX_PYTHON"]
    try:
        import jax  # noqa: F401
    except ImportError:
        return None
    return sys.executable


def run_xla(py, text, inputs, tmp_path):
    (tmp_path / "m.mlir").write_text(text)
    np.savez(tmp_path / "in.npz", **{f"a{i}": t.numpy() for i, t in enumerate(inputs)})
    r = subprocess.run(
        [
            py,
            "-c",
            RUNNER,
            str(tmp_path / "m.mlir"),
            str(tmp_path / "in.npz"),
            str(tmp_path / "out.npz"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:] + "\n" + text[:4000]
    d = np.load(tmp_path / "out.npz")
    return [torch.from_numpy(d[f"o{k}"]) for k in range(len(d.files))]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x, y):
        h = torch.nn.functional.gelu(self.norm(self.fc1(x)))  # erf
        h = torch.softmax(h, -1) * y.sum()
        return self.fc2(torch.relu(h)), h.amax(0)


def test_stablehlo_matches_eager_and_ember_on_xla(tmp_path):
    py = jax_python()
    if py is None:
        pytest.skip("no JAX: set EMBER_JAX_PYTHON to a Python with jax[cpu]")
    torch.manual_seed(0)
    model = Net().eval()
    x, y = torch.randn(8, 16), torch.randn(3)
    text = ember.export_stablehlo(model, (x, y), path=tmp_path / "net.mlir")
    assert text == (tmp_path / "net.mlir").read_text()
    assert '"stablehlo.dot_general"' in text and '"chlo.erf"' in text
    assert text.count("%arg") >= 2
    with torch.no_grad():
        want = model(x, y)
        on_ember = [t.cpu() for t in model.to(ember.device())(x.to("ember"), y.to("ember"))]
    model.cpu()
    got = run_xla(py, text, [x, y], tmp_path)
    assert len(got) == 2
    for g, w, e in zip(got, want, on_ember):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


class AddAlpha(torch.nn.Module):
    def forward(self, x, y):
        return torch.add(x, y, alpha=0.3)


def test_fused_multiply_add_is_written_in_stablehlo_ops(tmp_path):
    """Ember's fma (an f64 add with alpha) has no StableHLO op: it is written as a
    multiply and an add; XLA's result equals eager's within f64 rounding."""
    x, y = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    text = ember.export_stablehlo(AddAlpha(), (x, y))
    assert '"stablehlo.multiply"' in text and '"stablehlo.add"' in text
    assert "fma" not in text
    py = jax_python()
    if py is not None:
        (got,) = run_xla(py, text, [x, y], tmp_path)
        torch.testing.assert_close(got, torch.add(x, y, alpha=0.3))


class WithExtern(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(x, 1), torch.sort(x, 1).values


def test_aten_externs_are_refused_with_the_ops_listed(tmp_path):
    with pytest.raises(EmberExportError, match=r"aten::cumsum, aten::sort"):
        ember.export_stablehlo(WithExtern(), (torch.randn(2, 5),))
