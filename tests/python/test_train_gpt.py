"""examples/train_gpt.py: ember vs eager CPU on tinyshakespeare at equal seed
(dropout 0), checkpoint resume, one graph for sampling, and bad --data input."""

import json
import math
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import ember

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import train_gpt  # noqa: E402

# A reduced config keeps the suite fast (the default config is measured in
# docs/performance.md); the code path is the same.
SMALL = [
    "--n-layer",
    "2",
    "--n-head",
    "4",
    "--n-embd",
    "64",
    "--block-size",
    "64",
    "--batch-size",
    "8",
    "--eval-iters",
    "2",
    "--sample-chars",
    "0",
    "--log-interval",
    "0",
]


def shakespeare() -> str:
    """../shared/data/tinyshakespeare.txt beside the checkout (as in CI), else
    $EMBER_DATA_DIR or /work/shared/data."""
    dirs = [ROOT.parent / "shared" / "data", pathlib.Path("/work/shared/data")]
    if os.environ.get("EMBER_DATA_DIR"):
        dirs.insert(0, pathlib.Path(os.environ["EMBER_DATA_DIR"]))
    for d in dirs:
        if (d / "tinyshakespeare.txt").is_file():
            return str(d / "tinyshakespeare.txt")
    pytest.fail(f"tinyshakespeare.txt not found in any of {[str(d) for d in dirs]}")


def train(*extra):
    return train_gpt.train(train_gpt.parse_args(["--data", shakespeare(), *SMALL, *extra]))


def test_train_gpt_30_steps_ember_matches_eager(tmp_path):
    eager = train("--device", "cpu", "--steps", "30", "--dropout", "0", "--eval-interval", "15")
    lazy = train(
        "--device",
        "ember",
        "--steps",
        "30",
        "--dropout",
        "0",
        "--eval-interval",
        "15",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert len(lazy["train_loss"]) == len(eager["train_loss"]) == 30
    for step, (a, b) in enumerate(zip(lazy["train_loss"], eager["train_loss"]), 1):
        assert a == pytest.approx(b, rel=1e-3), f"train loss at step {step}: ember {a}, eager {b}"
    assert lazy["val_steps"] == eager["val_steps"] == [15, 30]
    assert lazy["val_loss"] == pytest.approx(eager["val_loss"], rel=1e-3)
    assert eager["train_loss"][-1] < 0.85 * eager["train_loss"][0]  # it learns
    # One graph for the training step (+ one for the first step, which also creates the
    # optimizer state) and one for validation: no per-step recompilation.
    assert lazy["graphs_compiled"] <= 4, lazy["graphs_compiled"]
    written = json.loads((tmp_path / "r.json").read_text())
    assert set(written) >= {
        "train_loss",
        "val_loss",
        "step_seconds",
        "graphs_compiled",
        "peak_rss_mb",
    }
    assert len(written["step_seconds"]) == 30 and written["peak_rss_mb"] > 0


def test_train_gpt_step_runs_nothing_in_the_interpreter():
    """The training step's graph (dropout 0) is native kernels, dot-general externs and
    the attention kernels (ATen's CPU flash kernel as externs) only: the embedding lookups, cross-entropy's target pick (gather) and the embedding
    backward (scatter-add) are generated kernels (docs/codegen.md, "gather / scatter");
    before them they were 5 interpreted steps."""
    args = train_gpt.parse_args(["--data", shakespeare(), *SMALL, "--dropout", "0"])
    data = train_gpt.CharData(args.data, args.block_size)
    cfg = train_gpt.GPTConfig(
        vocab_size=data.vocab_size,
        block_size=args.block_size,
        n_layer=args.n_layer,
        n_head=args.n_head,
        n_embd=args.n_embd,
        dropout=0.0,
        batch_size=args.batch_size,
    )
    torch.manual_seed(0)
    model = train_gpt.GPT(cfg).to(ember.device())
    opt = model.configure_optimizer(1e-3, 0.1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(2):  # the second step is the steady one (optimizer state exists)
        x, y = train_gpt.get_batch(data.train, cfg.batch_size, cfg.block_size, gen)
        _, loss = model(x.to(ember.device()), y.to(ember.device()))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    g = ember.metrics.last_graph()
    print(
        f"\nGPT step: {g['kernels']} kernels, {g['extern_steps']} extern steps "
        f"{g['core_externs']}, {g['interpreted']} interpreted, {g['core_nodes']} core nodes"
    )
    assert g["backend"] == "cpu"
    assert g["interpreted"] == 0, g
    # Attention is ATen's CPU flash kernel, one extern each way per layer.
    flash = {"ember::sdpa_flash_forward": cfg.n_layer, "ember::sdpa_flash_backward": cfg.n_layer}
    assert g["externs"] == flash and set(g["core_externs"]) == {"ember.dot-general"}, g
    assert math.isfinite(loss.item())


def test_train_gpt_resume_continues_exactly(tmp_path):
    # Dropout on: the resumed run must also restore the device RNG and the batch sampler.
    ck = str(tmp_path / "ck.pt")
    straight = train(
        "--device", "ember", "--steps", "6", "--eval-interval", "3", "--dropout", "0.1"
    )
    train(
        "--device",
        "ember",
        "--steps",
        "6",
        "--stop-at",
        "3",
        "--eval-interval",
        "3",
        "--dropout",
        "0.1",
        "--checkpoint",
        ck,
    )
    resumed = train(
        "--device",
        "ember",
        "--steps",
        "6",
        "--eval-interval",
        "3",
        "--dropout",
        "0.1",
        "--checkpoint",
        ck,
        "--resume",
    )
    assert resumed["train_loss"] == pytest.approx(straight["train_loss"], rel=1e-5)
    assert resumed["val_loss"] == pytest.approx(straight["val_loss"], rel=1e-5)


def test_sampling_compiles_one_graph():
    args = train_gpt.parse_args(["--data", shakespeare(), *SMALL])
    data = train_gpt.CharData(args.data, args.block_size)
    torch.manual_seed(0)
    model = train_gpt.GPT(
        train_gpt.GPTConfig(
            vocab_size=data.vocab_size, block_size=64, n_layer=2, n_head=4, n_embd=64
        )
    )
    cpu_text = train_gpt.sample(
        model,
        data,
        "cpu",
        prompt="ROMEO:",
        n_chars=70,
        temperature=1.0,
        top_k=None,
        gen=torch.Generator().manual_seed(3),
    )
    model.to(ember.device())
    ember.sync()
    before = ember.metrics.counters()["graphs_compiled"]
    text = train_gpt.sample(
        model,
        data,
        ember.device(),
        prompt="ROMEO:",
        n_chars=70,
        temperature=1.0,
        top_k=None,
        gen=torch.Generator().manual_seed(3),
    )
    # 70 tokens, crossing the 64-token window (sliding), with one compiled graph.
    assert ember.metrics.counters()["graphs_compiled"] - before == 1
    assert len(text) == len("ROMEO:") + 70 and text.startswith("ROMEO:")
    assert text == cpu_text  # same logits (to rounding) and the same sampler seed


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "no such file"),
        (b"", "the file is empty"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", "binary file"),
        (b"\xff\xfe\xfa not utf-8", "not UTF-8 text"),
        (b"To be, or not to be\n" * 20, "too short"),
    ],
)
def test_bad_data_exits_with_one_line(tmp_path, content, message):
    path = tmp_path / "data.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SystemExit) as e:
        train_gpt.main(["--data", str(path), "--device", "cpu", "--steps", "1"])
    text = str(e.value.code)
    assert text.startswith("train_gpt.py: error: ") and message in text and "\n" not in text


def test_bad_data_from_the_command_line_prints_no_traceback(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "train_gpt.py"),
            "--data",
            str(tmp_path / "missing.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"train_gpt.py: error: {tmp_path / 'missing.txt'}: no such file"
    ]


def test_train_gpt_20_steps_bf16_mixed_on_ember():
    # The CI version of the 300-step bf16 benchmark (docs/performance.md): bf16
    # autocast on ember trains without NaN (train() raises on a non-finite loss) to a
    # validation loss within 2% of eager f32's at equal seed (dropout 0).
    common = ("--steps", "20", "--dropout", "0", "--eval-interval", "20")
    f32 = train("--device", "cpu", *common)
    bf16 = train("--device", "ember", *common, "--precision", "bf16-mixed")
    assert bf16["precision"] == "bf16-mixed"
    assert all(math.isfinite(v) for v in bf16["train_loss"])
    assert bf16["train_loss"][0] != f32["train_loss"][0]  # bf16 math did run
    assert abs(bf16["val_loss"][-1] - f32["val_loss"][-1]) <= 0.02 * f32["val_loss"][-1], (
        bf16["val_loss"],
        f32["val_loss"],
    )
