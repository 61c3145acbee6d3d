"""The recompile report (docs/architecture.md, "Recompiles"): one line per recompile under
EMBER_LOG=recompile (and logger "ember"), naming what changed against the nearest cached
graph of the same structure: a dim of an input, a dtype, or a Python scalar baked into
the graph; counted in ember.metrics (recompiles, recompiles_by_reason)."""

import logging

import pytest
import torch

import ember
from conftest import DEV, close


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch):
    # Families of graphs compiled by earlier tests must not be the nearest graph here.
    ember.sync()
    ember._C.clear_cache()
    ember.metrics.clear()
    monkeypatch.setenv("EMBER_LOG", "recompile")
    yield


def report_lines(capfd):
    err = capfd.readouterr().err
    return [ln for ln in err.splitlines() if ln.startswith("recompile: ")]


def test_dim_change_names_the_input_and_dim(capfd, caplog):
    a = torch.randn(4, 3)
    with caplog.at_level(logging.INFO, logger="ember"):
        outs = []
        for n in (5, 5, 7):
            b = torch.randn(4, n)
            outs.append(
                ((a.to(DEV) * 2).sum(1, keepdim=True) + b.to(DEV), (a * 2).sum(1, True) + b)
            )
            ember.sync()
    lines = report_lines(capfd)
    assert len(lines) == 1, lines
    # Inputs in first-use order: `a` (read by mul), the Python 2, then `b`, whose dim 1
    # changed: named with the op and line that read it first.
    assert "input 2 dim 1: 5 -> 7 (now Float[4,7], read first by aten::add.Tensor at " in lines[0]
    assert "test_recompile.py:" in lines[0] and "input 0" not in lines[0], lines
    logged = [r.getMessage() for r in caplog.records if "recompiling" in r.getMessage()]
    assert logged == [lines[0][len("recompile: ") :]]
    c = ember.metrics.counters()
    assert c["recompiles"] == 1 and c["recompiles_by_reason"] == {"dim": 1}, c
    assert c["graphs_compiled"] == 2
    for got, want in outs:
        close(got, want)


def test_dtype_change_names_the_input(capfd):
    for dt in (torch.float32, torch.float32, torch.float64):
        x = torch.arange(6, dtype=dt).reshape(2, 3)
        y = (x.to(DEV) * x.to(DEV)).exp()
        close(y, (x * x).exp())
    lines = report_lines(capfd)
    assert len(lines) == 1 and "input 0 dtype Float -> Double" in lines[0], lines
    assert ember.metrics.counters()["recompiles_by_reason"] == {"dtype": 1}


def test_baked_python_scalar_names_the_op_and_value(capfd):
    x = torch.randn(3, 8)
    dx = x.to(DEV)
    for k in (1, 1, 3):
        close(torch.roll(dx * 2, k, 1), torch.roll(x * 2, k, 1))
    lines = report_lines(capfd)
    assert len(lines) == 1, lines
    assert "aten::roll argument shifts: [1] -> [3]" in lines[0], lines
    assert "Python scalar baked into the graph" in lines[0] and "test_recompile.py:" in lines[0]
    assert ember.metrics.counters()["recompiles_by_reason"] == {"scalar": 1}


def test_baked_slice_bound_is_named_before_the_output_shapes_it_sets(capfd):
    x = torch.randn(4, 10)
    dx = x.to(DEV)
    for n in (6, 8):
        close((dx + 1)[:, :n].sum(0), (x + 1)[:, :n].sum(0))
    lines = report_lines(capfd)
    assert len(lines) == 1 and "argument end: 6 -> 8" in lines[0], lines
    assert ember.metrics.counters()["recompiles_by_reason"] == {"scalar": 1}


def test_python_int_becoming_a_float_is_a_scalar_kind_change(capfd):
    x = torch.randn(5)
    dx = x.to(DEV)
    for s in (2, 3, 2.5):  # equal kinds share a graph whatever the value
        close(dx * s, x * s)
    lines = report_lines(capfd)
    assert len(lines) == 1 and "a Python int, now a float" in lines[0], lines
    assert ember.metrics.counters()["recompiles_by_reason"] == {"scalar_type": 1}


def test_a_new_structure_elsewhere_is_not_a_recompile(capfd):
    x = torch.randn(4).to(DEV)
    (x * 2).sum().item()
    x.exp().max().item()
    assert report_lines(capfd) == []
    assert ember.metrics.counters()["recompiles"] == 0


def test_nearest_graph_of_the_family_is_the_reference(capfd):
    # Graphs for (4, 2) and (16, 3) are cached; (5, 2) differs from the first in one
    # value and from the last compiled in two: it is reported against the first.
    def f(n, m):
        return (torch.ones(n, m, device=DEV) * 3).sum()

    f(4, 2).item()
    f(16, 3).item()
    capfd.readouterr()
    f(5, 2).item()
    lines = report_lines(capfd)
    assert len(lines) == 1 and "size: [4,2] -> [5,2]" in lines[0], lines
    assert "nearest of 2 cached graphs" in lines[0], lines


def test_pad_to_bucket_compiles_one_graph_per_bucket():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    dlin = torch.nn.Linear(4, 3).to(DEV)
    dlin.load_state_dict(lin.state_dict())
    for n in (3, 5, 8, 9, 12, 16):
        x = torch.randn(2, n, 4)
        padded, mask = ember.pad_to_bucket(x, 1, [8, 16])
        assert padded.shape == (2, 8 if n <= 8 else 16, 4) and mask.sum() == n
        assert torch.equal(padded[:, :n], x) and not padded[:, n:].any()
        px, pm = padded.to(DEV), mask.to(DEV)
        # Masked mean over the sequence: the padded rows never count.
        got = (dlin(px) * pm[None, :, None]).sum(1) / pm.sum()
        close(got, lin(x).mean(1), rtol=1e-5, atol=1e-6)
    assert ember.metrics.counters()["graphs_compiled"] == 2  # one graph per bucket


def test_pad_to_bucket_of_an_ember_tensor_stays_on_ember():
    x = torch.arange(10.0).reshape(2, 5)
    padded, mask = ember.pad_to_bucket(x.to(DEV), -1, (4, 8))
    assert padded.device.type == "ember" and mask.device.type == "ember"
    close(padded, torch.cat([x, torch.zeros(2, 3)], 1))
    close(mask, torch.tensor([True] * 5 + [False] * 3))
    with pytest.raises(ValueError, match="exceeds the largest bucket 8"):
        ember.pad_to_bucket(torch.ones(9), 0, [4, 8])
