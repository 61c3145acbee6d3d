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


# --------------------------------------------------------------------------- step kernels


@pytest.mark.parametrize("name", models.STEP_KERNELS)
def test_step_kernel_row_runs_on_ember_like_eager(name):
    """Each backward-kernel row (tiny scale) gives eager's result on ember through the
    bench's runners, and carries the bytes it moves (for the fraction of triad)."""
    w = models.build(name, "tiny")
    assert w.modes == (models.INFER,)
    assert w.bytes_moved >= sum(t.numel() * t.element_size() for t in w.inputs)
    runners = {
        "eager": backends.make_runner("eager", w, "inference"),
        "ember": backends.make_runner("ember", w, "inference"),
    }
    res = timing.interleaved(runners, warmup=1, repeats=1)
    assert res["ember"]["status"] == "ok", res["ember"]["status"]
    assert res["ember"]["numerics_ok"] is True, res["ember"]["numerics_max_diff"]
    assert res["ember"]["median_s"] > 0


def test_step_kernel_rows_are_bigger_than_l3_at_full_scale():
    """At full scale every step-kernel row's largest operand is >= 64 MiB (twice the
    project machine's 32 MiB L3), and the default suite (not --quick) runs them."""
    from ember.bench import cli

    for name in models.STEP_KERNELS:
        w = models.build(name, "full")
        big = max(t.numel() * t.element_size() for t in w.inputs)
        assert big >= 60 * 2**20, (name, big)
        del w
    assert set(models.STEP_KERNELS) <= set(cli.DEFAULT_MODELS)
    assert not set(models.STEP_KERNELS) & set(cli.QUICK_MODELS)


def test_tuple_results_are_compared_whole():
    """A kernel returning several tensors (layer-norm backward's dx, dweight, dbias) is
    checked on all of them: a wrong dbias alone is flagged."""
    t = (torch.ones(3), torch.zeros(2))
    assert backends.Runner.to_cpu(t).tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    wrong = backends.Runner.to_cpu((torch.ones(3), torch.tensor([0.0, 0.1])))
    assert timing._diff(wrong, backends.Runner.to_cpu(t)) > timing.RTOL


# --------------------------------------------------------------------------- --profile


def test_profile_tiny_mlp_shows_ember_steps_beside_eager_ops(tmp_path):
    """--profile MODEL:MODE at tiny scale: both backends' tables, ember's program steps
    (fused kernels, the dot-general extern) among its events, eager's ATen ops in its,
    and a Chrome trace per backend."""
    from ember.bench import profile

    lines = []
    res = profile.profile(
        "mlp:train", "tiny", steps=2, rows=50, trace_dir=str(tmp_path), log=lines.append
    )
    assert set(res) == {"eager", "ember"}
    for b in ("eager", "ember"):
        assert res[b]["step_ms"] > 0
        assert res[b]["top"], b
        for name, ms, calls, share in res[b]["top"]:
            assert ms >= 0 and calls >= 0 and share >= 0
        assert (tmp_path / f"mlp-train-{b}.json").stat().st_size > 0
    eager_names = {row[0] for row in res["eager"]["top"]}
    ember_names = {row[0] for row in res["ember"]["top"]}
    assert "aten::addmm" in eager_names or "aten::mm" in eager_names, eager_names
    assert "ember.dot-general" in ember_names, ember_names
    assert any(n.startswith("ember_fused") for n in ember_names), ember_names
    assert any("mlp train on ember" in ln for ln in lines), lines


def test_profile_takes_the_backends_to_compare(capsys):
    """--profile with --backends: the compile path beside the lazy device (no eager
    needed), each backend's table printed; an unknown backend is a clear error."""
    from ember.bench import cli

    argv = ["--profile", "mlp:inference", "--scale", "tiny", "--backends", "ember,ember_compile"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "mlp inference on ember:" in out and "mlp inference on ember_compile:" in out
    assert "on eager" not in out
    from ember.bench import profile

    with pytest.raises(ValueError, match="unknown backend 'nosuch'"):
        profile.profile("mlp:inference", "tiny", backends=("nosuch",))


def test_profile_cli_rejects_an_unknown_workload(capsys):
    from ember.bench import cli

    assert cli.main(["--profile", "nosuch:train", "--scale", "tiny"]) == 2
    assert "unknown model 'nosuch'" in capsys.readouterr().err
    assert cli.main(["--profile", "mlp:backward", "--scale", "tiny"]) == 2
    assert "unknown mode 'backward'" in capsys.readouterr().err


# --------------------------------------------------------------------------- tracing cost


def test_tracing_overhead_reports_every_op_and_its_numerics(tmp_path):
    """bench/tracing_overhead.py (1 round, 3 calls per sample, thread CPU time): a row
    per op of its list with positive eager and ember costs, ember's result equal to
    eager's for every op, the geometric mean / worst summary, and the whole-AdamW-step
    timing (2 parameters of [8, 8] here) against eager's default, foreach and fused."""
    out = tmp_path / "t.json"
    env = dict(os.environ, EMBER_BACKEND="interpreter")  # no C++ compile per sample graph
    p = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "bench", "tracing_overhead.py"),
            "--rounds",
            "1",
            "--inner",
            "3",
            "--cpu",
            "--adamw-params",
            "2",
            "--adamw-size",
            "8",
            "--json",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    groups = {r["group"] for r in doc["rows"]}
    assert {"elementwise", "view", "inplace", "foreach", "matmul", "optimizer"} <= groups
    assert len(doc["rows"]) >= 50
    for r in doc["rows"]:
        assert r["eager_us"] > 0 and r["ember_us"] > 0 and r["ratio"] > 0, r
        assert r["numerics_max_diff"] <= 1e-5, r
    s = doc["summary"]
    assert s["worst_ratio"] >= s["geomean_ratio"] > 0
    assert s["worst_op"] in {r["op"] for r in doc["rows"]}
    assert doc["settings"]["clock"] == "thread_time" and doc["settings"]["threads"] == 1
    assert "geomean ratio" in p.stdout
    step = doc["adamw_step"]  # the whole AdamW step, ember against eager's three
    for k in ("eager default", "eager foreach", "eager fused"):
        assert step[k + " ms"] > 0 and step["ember / " + k] > 0, step
    assert step["ember default ms"] > 0 and "AdamW step, 2 parameters" in p.stdout


# --------------------------------------------------------------------------- JAX column

JAX_VENV = os.environ.get("EMBER_BENCH_JAX_VENV")
needs_jax = pytest.mark.skipif(
    not (JAX_VENV and os.path.isfile(os.path.join(JAX_VENV, "bin", "python"))),
    reason="needs a JAX virtual environment in $EMBER_BENCH_JAX_VENV (docs/benchmarks.md, "
    "'JAX/XLA:CPU'): jax is not a dependency of the project's own .venv",
)


@needs_jax
@pytest.mark.parametrize("mode", ["train", "inference"])
def test_jax_worker_computes_eagers_steps(tmp_path, mode):
    """The JAX MLP from the torch model's weights and inputs: training, the loss of each
    of 3 AdamW steps and the parameters after them equal eager's (parameters within
    1e-6: without the decoupled weight decay they differ by ~5e-6); inference, the
    logits."""
    import numpy as np

    from ember.bench import jax_column

    w = models.build("mlp", "tiny")
    inputs, results = tmp_path / "w.npz", tmp_path / "r.npz"
    jax_column.write_inputs(w, str(inputs))
    out = cost.spawn(
        ["timing", "--inputs", str(inputs), "--mode", mode, "--warmup", "3", "--repeats", "2"]
        + ["--results", str(results)],
        dict(os.environ),
        300,
        os.path.join(JAX_VENV, "bin", "python"),
        jax_column.WORKER,
    )
    assert out["status"] == "ok", out.get("traceback", out["status"])
    assert len(out["timing"]["times"]) == 2 and out["timing"]["median_s"] > 0
    eager = backends.make_runner("eager", w, mode)
    ref = [eager.to_cpu(eager.step()) for _ in range(3)]
    z = np.load(results)
    got = [torch.from_numpy(np.asarray(a)).double() for a in z["steps"]]
    for g, r in zip(got, ref, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)
    if mode == "train":
        for i, p in enumerate(eager.model.parameters()):
            torch.testing.assert_close(
                torch.from_numpy(z[f"param{i}"]), p.detach(), rtol=0, atol=1e-6
            )


@needs_jax
def test_jax_column_row(monkeypatch):
    """ember.bench --jax-venv at tiny scale, training: a "jax" row for the MLP with both
    phases, numerics checked against eager, unpaired ratios said so (the worker test
    covers inference)."""
    from ember.bench import cli

    for k in ("EMBER_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):  # cli.run points them at
        monkeypatch.setenv(k, os.environ.get(k, ""))  # its own caches: restored after

    a = cli.parse_args(
        ["--scale", "tiny", "--models", "mlp", "--modes", "train"]
        + ["--backends", "eager", "--repeats", "3", "--jax-venv", JAX_VENV]
    )
    doc = cli.run(a)
    rows = [r for r in doc["results"] if r["backend"] == "jax"]
    assert [(r["model"], r["mode"]) for r in rows] == [("mlp", "train")]
    for r in rows:
        assert r["status"] == "ok", r["status"]
        assert r["numerics_ok"] is True, r["numerics_max_diff"]
        assert r["median_s"] > 0 and r["repeats"] >= 3 and r["ratio_to_eager"] > 0
        assert r["cold_compile_s"] is not None and r["peak_rss_mb"] > 50
        assert any("ratios not paired" in n for n in r["notes"]), r["notes"]
    assert doc["settings"]["jax_venv"] == JAX_VENV


def test_jax_venv_must_hold_a_python(tmp_path):
    from ember.bench import cli

    with pytest.raises(SystemExit):
        cli.parse_args(["--jax-venv", str(tmp_path)])
