"""ember.bench: the smoke run through the JSON path, and the checks that make it honest."""

import json
import os
import subprocess
import sys

import pytest
import torch

from ember.bench import backends, cost, models, timing

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_smoke_json(tmp_path):
    """Tiny MLP training, eager vs ember vs torch.compile(backend="ember"), both phases
    (fresh processes), JSON written."""
    out = tmp_path / "bench.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "ember.bench",
            "--scale",
            "tiny",
            "--models",
            "mlp",
            "--modes",
            "train",
            "--backends",
            "eager,ember,ember_compile",
            "--repeats",
            "3",
            "--json",
            str(out),
            "--markdown",
            str(tmp_path / "bench.md"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["complete"] is True
    assert {"cpu_model", "cores", "torch_version", "commit"} <= set(doc["machine"])
    assert doc["ceilings"]["start"]["triad_gb_per_s"] > 0
    assert doc["ceilings"]["start"]["gemm_gflop_per_s"] > 0
    rows = {r["backend"]: r for r in doc["results"]}
    assert set(rows) == {"eager", "ember", "ember_compile"}
    for r in doc["results"]:
        assert {
            "model",
            "mode",
            "backend",
            "median_s",
            "ratio_to_eager",
            "ratio_to_inductor",
            "cold_compile_s",
            "warm_start_s",
            "peak_rss_mb",
            "numerics_ok",
        } <= set(r)
    e, m = rows["eager"], rows["ember"]
    assert e["ratio_to_eager"] == 1.0 and e["numerics_ok"] is True
    assert m["status"] == "ok", m["status"]
    assert m["numerics_ok"] is True  # ember's losses match eager's
    assert m["median_s"] > 0 and m["min_s"] <= m["median_s"] <= m["max_s"]
    assert m["repeats"] == 3
    assert m["cold_compile_s"] is not None and m["peak_rss_mb"] > 50
    c = rows["ember_compile"]  # torch.compile(model, backend="ember") (ember/dynamo.py)
    assert c["status"] == "ok", c["status"]
    assert c["numerics_ok"] is True
    assert c["median_s"] > 0 and c["repeats"] == 3
    assert "| mlp | train | ember |" in (tmp_path / "bench.md").read_text()


class _Runner:
    """A fake backend: `scale` multiplies the true output (1.0 = right answer)."""

    def __init__(self, scale):
        self.scale = scale
        self.x = torch.arange(6.0)

    def step(self):
        return self.x * self.scale

    def finish(self):
        pass

    @staticmethod
    def to_cpu(t):
        return t.double()


def test_wrong_answer_is_flagged():
    res = timing.interleaved(
        {"eager": _Runner(1.0), "fast_wrong": _Runner(1.01), "close": _Runner(1.0 + 1e-5)},
        warmup=2,
        repeats=4,
    )
    assert res["fast_wrong"]["numerics_ok"] is False
    assert abs(res["fast_wrong"]["numerics_max_diff"] - 0.05 / 5) < 1e-6
    assert res["close"]["numerics_ok"] is True
    assert res["eager"]["ratios"]["eager"] == 1.0
    assert len(res["close"]["times"]) == 4


def test_failing_backend_is_reported_not_fatal():
    class Broken(_Runner):
        def step(self):
            raise RuntimeError("no kernel for this op")

    res = timing.interleaved({"eager": _Runner(1.0), "broken": Broken(1.0)}, 1, 3)
    assert res["broken"]["status"].startswith("failed: RuntimeError: no kernel")
    assert res["broken"]["median_s"] is None and res["eager"]["median_s"] is not None


def test_compile_excess():
    # 3 start-up steps (compile in the first two) and 3 steady steps of 1 s.
    assert cost.excess([10.0, 3.0, 1.0, 1.0, 1.0, 1.0], 3) == 11.0
    assert cost.excess([1.0, 1.0], 3) is None


@pytest.mark.parametrize("name", ["resnet18", "gpt2", "bert"])
def test_workload_trains_on_ember_like_eager(name):
    """The default suite's CNN and Hugging Face workloads (tiny scale) train on ember
    through the bench's own runners: the loss after each of 2 AdamW steps matches eager's
    within the bench's numerics tolerance (timing.RTOL)."""
    w = models.build(name, "tiny")
    runners = {
        "eager": backends.make_runner("eager", w, "train"),
        "ember": backends.make_runner("ember", w, "train"),
    }
    res = timing.interleaved(runners, warmup=2, repeats=0)
    assert res["ember"]["status"] == "ok", res["ember"]["status"]
    assert res["ember"]["numerics_ok"] is True, res["ember"]["numerics_max_diff"]
