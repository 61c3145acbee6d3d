"""Lightning's Trainer on ember (ember.lightning): `Trainer(accelerator="ember")` with
otherwise unchanged user code. Oracle: the same Trainer on `accelerator="cpu"` from the
same seed. Checked: parameters on ember in float32, autocast active (bf16-mixed,
16-mixed) with an enabled ember GradScaler (16-mixed); fit, validation, ModelCheckpoint
and resume; syncs and compiles per step counted from one training step's start to the
next (so the logger, the progress bar and checkpointing of that step are included)."""

import os
import pathlib
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import ember

import lightning as L  # noqa: E402  (import ember first: it registers the accelerator)
from lightning.fabric.utilities.exceptions import MisconfigurationException  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar  # noqa: E402
from lightning.pytorch.loggers import CSVLogger  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from train_digits import DigitsCNN, load_digits_split  # noqa: E402
from train_gpt import GPT, GPTConfig  # noqa: E402

warnings.filterwarnings("ignore", module="lightning")
os.environ.setdefault("PL_DISABLE_FORK", "1")


def counters():
    c = ember.metrics.counters()
    return {
        "syncs": c["syncs"],
        "built": c["graphs_compiled"] + c["disk_cache_hits"],
        "value_reads": c["value_reads"],
        "fallbacks": sum(c["fallbacks"].values()),
        # value reads per source file (basename:line)
        "sites": {os.path.basename(k): v for k, v in c["value_read_sites"].items()},
    }


def delta(now, mark):
    out = {}
    for k, v in now.items():
        if isinstance(v, dict):
            out[k] = {s: n - mark[k].get(s, 0) for s, n in v.items() if n != mark[k].get(s, 0)}
        else:
            out[k] = v - mark[k]
    return out


# Lightning turns logged metrics into Python numbers for the logger and the progress bar
# (lightning/fabric/utilities/apply_func.py, convert_tensors_to_scalars: `.item()`).
LIGHTNING_READS = "apply_func.py"


class Count(L.Callback):
    """Deltas of counters() per phase: each training step (its batch start to the next
    phase: the step, its logging, progress bar and checkpoint hooks), each validation
    run, and each epoch's end (after validation: epoch-end checkpoints and logging)."""

    def __init__(self):
        self.phases = []  # (kind, delta)
        self._open = None

    def _switch(self, kind):
        now = counters()
        if self._open is not None:
            k, mark = self._open
            self.phases.append((k, delta(now, mark)))
        self._open = (kind, now) if kind else None

    @property
    def steps(self):
        return [d for k, d in self.phases if k == "step"]

    @property
    def vals(self):
        return [d for k, d in self.phases if k == "val"]

    @property
    def epoch_ends(self):
        return [d for k, d in self.phases if k == "epoch_end"]

    def on_train_batch_start(self, *a):
        self._switch("step")

    def on_validation_start(self, *a):
        self._switch("val")

    def on_validation_end(self, *a):
        self._switch("epoch_end")

    def on_train_end(self, *a):
        self._switch(None)


class Digits(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = DigitsCNN()
        self.seen = []
        self.losses = []

    def training_step(self, batch, i):
        x, y = batch
        logits = self.net(x)
        self.seen.append(
            (
                self.net.conv1.weight.device.type,
                self.net.conv1.weight.dtype,
                x.device.type,
                torch.is_autocast_enabled(x.device.type),
                logits.dtype,
            )
        )
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss, prog_bar=True)
        self.losses.append(loss.detach())
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def digits_loaders():
    x, y, xt, yt = load_digits_split(0)
    train = torch.utils.data.TensorDataset(x[:320], y[:320])  # 5 batches of 64
    val = torch.utils.data.TensorDataset(xt[:128], yt[:128])
    return (
        torch.utils.data.DataLoader(train, batch_size=64),
        torch.utils.data.DataLoader(val, batch_size=64),
    )


def trainer(accelerator, tmp_path, precision="32-true", **kw):
    kw.setdefault("max_epochs", 2)
    return L.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,
        logger=CSVLogger(str(tmp_path), name=accelerator),
        log_every_n_steps=1,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kw,
    )


def fit_digits(accelerator, tmp_path, precision, callbacks=(), **kw):
    model = Digits()
    count = Count()
    t = trainer(accelerator, tmp_path, precision, callbacks=[count, *callbacks], **kw)
    t.fit(model, *digits_loaders())
    return t, model, count


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_digits_fit_on_ember_matches_cpu(tmp_path, precision):
    ckpt = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), every_n_train_steps=3, save_last=True)
    t, model, count = fit_digits("ember", tmp_path, precision, [ckpt], max_epochs=3)
    ref_t, ref, _ = fit_digits("cpu", tmp_path, precision, max_epochs=3)

    assert t.strategy.root_device == ember.device()
    mixed = precision == "bf16-mixed"
    # parameters on ember in float32 (master weights), autocast active iff mixed
    assert set(model.seen) == {
        ("ember", torch.float32, "ember", mixed, torch.bfloat16 if mixed else torch.float32)
    }
    # (after fit, Lightning's Strategy.teardown moves the model back to the CPU, as for CUDA)

    losses = torch.stack([loss.cpu() for loss in model.losses])
    ref_losses = torch.stack(ref.losses)
    # float32: rounding differences only; bf16: ember's autocast policy (torch's lists
    # for backends) casts more ops than the CPU's, so the curves agree less closely
    tol = dict(rtol=2e-2, atol=2e-2) if mixed else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(losses, ref_losses, **tol)
    assert losses[-1] < losses[0]
    for key in ("val_loss", "val_acc"):
        torch.testing.assert_close(
            t.callback_metrics[key].cpu(), ref_t.callback_metrics[key], **tol
        )

    # 15 steps over 3 epochs, each step one graph (the optimizer step's sync), whatever
    # the logger, the progress bar and the checkpoints every 3 steps do. Compiles: steps 1
    # and 2 (optimizer state appears at step 2), and the second epoch's first step once:
    # torchmetrics' reset of Lightning's logged-metric accumulators at the epoch's end
    # leaves 6 clones pending, which that step's graph runs; the third epoch hits it.
    assert len(count.steps) == 15, count.steps
    assert [s["syncs"] for s in count.steps] == [1] * 15, count.steps
    assert [s["built"] for s in count.steps] == [1, 1] + [0] * 3 + [1] + [0] * 9, count.steps
    # the logger's and progress bar's reads are of values that step computed: no graph
    for s in count.steps:
        assert s["sites"] and all(k.startswith(LIGHTNING_READS) for k in s["sites"]), s
    assert sum(s["fallbacks"] for s in count.steps + count.vals) == 0
    # validation: one graph per batch shape, compiled in the first epoch only; the
    # epoch's end (last.ckpt, logging) runs no graph
    assert len(count.vals) == 3 and count.vals[1]["built"] == count.vals[2]["built"] == 0
    assert all(e["syncs"] == 0 and e["built"] == 0 for e in count.epoch_ends), count.phases
    assert (tmp_path / "ckpt" / "last.ckpt").is_file()
    assert len(list((tmp_path / "ckpt").glob("epoch=*.ckpt"))) == 1  # save_top_k=1
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert saved["global_step"] == 15
    for name, p in model.named_parameters():
        assert torch.equal(saved["state_dict"][name], p.detach().cpu()), name


def test_resume_from_a_model_checkpoint_continues_exactly(tmp_path):
    """Fit 2 epochs straight, and 1 epoch then resume from ModelCheckpoint's last.ckpt for
    the second: the same parameters bit for bit; the resumed fit compiles nothing new
    (this process built those graphs)."""
    straight = Digits()
    trainer("ember", tmp_path / "a", max_epochs=2).fit(straight, *digits_loaders())

    first = Digits()
    ckpt = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), save_last=True)
    trainer("ember", tmp_path / "b", max_epochs=1, callbacks=[ckpt]).fit(first, *digits_loaders())
    resumed = Digits()
    count = Count()
    t = trainer("ember", tmp_path / "c", max_epochs=2, callbacks=[count])
    t.fit(resumed, *digits_loaders(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert t.global_step == 10 and len(count.steps) == 5
    for (name, p), q in zip(straight.named_parameters(), resumed.parameters()):
        assert torch.equal(p.detach().cpu(), q.detach().cpu()), name
    assert [s["built"] for s in count.steps] == [0] * 5, count.steps
    assert [s["syncs"] for s in count.steps] == [1] * 5, count.steps


def test_validate_matches_cpu(tmp_path):
    _, val = digits_loaders()
    model = Digits()
    got = trainer("ember", tmp_path).validate(model, val, verbose=False)
    want = trainer("cpu", tmp_path).validate(Digits(), val, verbose=False)
    assert got[0].keys() == want[0].keys() == {"val_loss", "val_acc"}
    for k in got[0]:
        assert got[0][k] == pytest.approx(want[0][k], rel=1e-5, abs=1e-6), k


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 4)
        self.dtypes = []

    def training_step(self, batch, i):
        x, y = batch
        out = self.lin(x)
        self.dtypes.append((out.dtype, torch.is_autocast_enabled("ember")))
        loss = F.cross_entropy(out, y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def tiny_loader():
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(
        torch.randn(32, 8, generator=g), torch.randint(0, 4, (32,), generator=g)
    )
    return torch.utils.data.DataLoader(ds, batch_size=8)


def test_16_mixed_uses_an_enabled_ember_grad_scaler(tmp_path):
    model = Tiny()
    t = trainer("ember", tmp_path, "16-mixed", max_epochs=1, callbacks=[TQDMProgressBar()])
    t.fit(model, tiny_loader())
    scaler = t.precision_plugin.scaler
    assert isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled()
    assert scaler._device == "ember" and scaler.get_scale() == 65536.0
    assert model.dtypes == [(torch.float16, True)] * 4
    assert model.lin.weight.dtype == torch.float32


def test_one_device_per_process(tmp_path):
    with pytest.raises(MisconfigurationException, match="one device per process"):
        L.Trainer(accelerator="ember", devices=2)


class CharGPT(L.LightningModule):
    def __init__(self, vocab):
        super().__init__()
        torch.manual_seed(0)
        self.gpt = GPT(GPTConfig(vocab_size=vocab, block_size=16, n_layer=1, n_head=2, n_embd=32))
        self.seen = []
        self.losses = []

    def training_step(self, batch, i):
        x, y = batch
        logits, loss = self.gpt(x, y)
        self.seen.append((self.gpt.lm_head.weight.device.type, logits.dtype))
        self.log("loss", loss, prog_bar=True)
        self.losses.append(loss.detach())
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def test_char_gpt_bf16_mixed_trains_like_cpu(tmp_path):
    text = "the quick brown fox jumps over the lazy dog. " * 40
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text])
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, len(ids) - 17, (48,), generator=g)
    x = torch.stack([ids[s : s + 16] for s in starts])
    y = torch.stack([ids[s + 1 : s + 17] for s in starts])
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    runs = {}
    for acc in ("ember", "cpu"):
        model, count = CharGPT(len(chars)), Count()
        bar = TQDMProgressBar(refresh_rate=1)
        trainer(acc, tmp_path, "bf16-mixed", max_epochs=1, callbacks=[count, bar]).fit(
            model, loader
        )
        runs[acc] = (model, count)
    model, count = runs["ember"]
    assert set(model.seen) == {("ember", torch.bfloat16)}
    losses = torch.stack([v.cpu() for v in model.losses])
    torch.testing.assert_close(losses, torch.stack(runs["cpu"][0].losses), rtol=3e-2, atol=3e-2)
    assert losses[-1] < losses[0]
    assert [s["syncs"] for s in count.steps] == [1] * 6, count.steps
    assert [s["built"] for s in count.steps[2:]] == [0] * 4, count.steps
    # TQDM's refresh every step reads the logged loss: a synced value, no graph
    for s in count.steps:
        assert s["sites"] and all(k.startswith(LIGHTNING_READS) for k in s["sites"]), s


def test_the_pytorch_lightning_package_name_too(tmp_path):
    """`import pytorch_lightning` (the same Lightning under its other package name, with
    classes of its own) gets the accelerator as well."""
    import pytorch_lightning as pl

    class PlTiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 4)
            self.seen = []

        def training_step(self, batch, i):
            x, y = batch
            out = self.lin(x)
            self.seen.append((self.lin.weight.device.type, out.dtype))
            return F.cross_entropy(out, y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = PlTiny()
    t = pl.Trainer(
        accelerator="ember",
        devices=1,
        precision="bf16-mixed",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        default_root_dir=str(tmp_path),
    )
    t.fit(model, tiny_loader())
    assert model.seen == [("ember", torch.bfloat16)] * 2
    assert isinstance(t.accelerator, ember.lightning.accelerator("pytorch_lightning"))
