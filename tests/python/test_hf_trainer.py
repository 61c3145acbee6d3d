"""Hugging Face on ember with unchanged user code apart from naming the device:
`transformers.Trainer` fine-tunes small random-init GPT-2 and BERT models
(ACCELERATE_TORCH_DEVICE=ember, accelerate's own device setting), `accelerate.Accelerator`
runs a plain training loop, bf16 through ACCELERATE_MIXED_PRECISION=bf16 (transformers
refuses TrainingArguments(bf16=True) on a device it does not know). Oracle: the same run
on eager CPU from the same seed, dropout 0: losses equal within 1e-5 relative. No op
falls back to eager; compiles per step are counted. Trainer checkpoints call
`save_pretrained`, which finds tied weights through the tensors' storages."""

import contextlib
import os

import pytest
import torch
import transformers
from accelerate import Accelerator
from accelerate.state import AcceleratorState

import ember
from hf_tiny import bert_config, gpt2_config

transformers.logging.set_verbosity_error()

VOCAB, SEQ = 64, 16


@contextlib.contextmanager
def accelerate_env(device=None, mixed_precision=None):
    """accelerate's process-wide state is created once from the environment; start and
    end each run with a fresh one."""
    saved = {
        k: os.environ.get(k) for k in ("ACCELERATE_TORCH_DEVICE", "ACCELERATE_MIXED_PRECISION")
    }
    for k, v in (
        ("ACCELERATE_TORCH_DEVICE", device),
        ("ACCELERATE_MIXED_PRECISION", mixed_precision),
    ):
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        yield
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def gpt2():
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(gpt2_config(VOCAB))


def bert():
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(bert_config(VOCAB))


def lm_data(n=32):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        ids = torch.randint(1, VOCAB, (SEQ,), generator=g)
        out.append({"input_ids": ids, "labels": ids.clone()})
    return out


def cls_data(n=32):
    g = torch.Generator().manual_seed(2)
    out = []
    for i in range(n):
        ids = torch.randint(1, VOCAB, (SEQ,), generator=g)
        mask = torch.ones(SEQ, dtype=torch.long)
        mask[SEQ - (i % 5) :] = 0  # padded sequences exercise the attention mask
        out.append({"input_ids": ids, "attention_mask": mask, "labels": torch.tensor(i % 3)})
    return out


class StepCounts(transformers.TrainerCallback):
    """Per optimizer step: ember's syncs, graphs built, fallbacks; and where the model's
    parameters are."""

    def __init__(self):
        self.steps, self.devices = [], []
        self._mark = None

    @staticmethod
    def _now():
        c = ember.metrics.counters()
        return (
            c["syncs"],
            c["graphs_compiled"] + c["disk_cache_hits"],
            sum(c["fallbacks"].values()),
        )

    def on_step_begin(self, args, state, control, model=None, **kw):
        self._mark = self._now()
        self.devices.append({p.device.type for p in model.parameters()})

    def on_step_end(self, args, state, control, **kw):
        now = self._now()
        self.steps.append(
            dict(zip(("syncs", "built", "fallbacks"), (a - b for a, b in zip(now, self._mark))))
        )


def fine_tune(make_model, data, device, tmp_path, steps=4, mixed_precision=None, **kw):
    """Trainer.train() for `steps` steps; returns (per-step losses, StepCounts, model)."""
    with accelerate_env(device, mixed_precision):
        model = make_model()
        settings = dict(
            output_dir=str(tmp_path / (device or "cpu")),
            per_device_train_batch_size=4,
            max_steps=steps,
            logging_steps=1,
            learning_rate=1e-3,
            report_to=[],
            save_strategy="no",
            seed=0,
            disable_tqdm=True,
        )
        args = transformers.TrainingArguments(**{**settings, **kw})
        counts = StepCounts()
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=data, callbacks=[counts]
        )
        assert trainer.args.device.type == (device or "cpu")
        trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == steps
    return losses, counts, model


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_trainer_fine_tune_matches_eager(kind, tmp_path):
    make, data = {"gpt2": (gpt2, lm_data), "bert": (bert, cls_data)}[kind]
    eager, _, _ = fine_tune(make, data(), None, tmp_path)
    lazy, counts, _ = fine_tune(make, data(), "ember", tmp_path)
    assert lazy == pytest.approx(eager, rel=1e-5), (lazy, eager)
    assert counts.devices == [{"ember"}] * 4
    assert sum(s["fallbacks"] for s in counts.steps) == 0, counts.steps
    # the first two steps compile (optimizer state appears at step 2), later ones do not;
    # every step runs the same number of graphs (HF's own value reads split the step:
    # README, "Hugging Face")
    assert [s["built"] for s in counts.steps[2:]] == [0] * 2, counts.steps
    assert len({s["syncs"] for s in counts.steps}) == 1, counts.steps


def test_trainer_bf16_through_accelerate_s_setting(tmp_path):
    """TrainingArguments(bf16=True) is refused for a device transformers does not know;
    ACCELERATE_MIXED_PRECISION=bf16 gives autocast on ember, float32 master weights."""
    with accelerate_env("ember"):
        with pytest.raises(ValueError, match="bf16"):
            transformers.TrainingArguments(output_dir=str(tmp_path), bf16=True, report_to=[])
    seen = []

    def make():
        model = gpt2()
        model.transformer.h[0].mlp.c_fc.register_forward_hook(
            lambda mod, inp, out: seen.append(
                (torch.is_autocast_enabled(out.device.type), out.dtype, mod.weight.dtype)
            )
        )
        return model

    lazy, counts, _ = fine_tune(make, lm_data(), "ember", tmp_path, steps=4, mixed_precision="bf16")
    ember_seen, seen[:] = list(seen), []
    eager, _, _ = fine_tune(make, lm_data(), None, tmp_path, steps=4, mixed_precision="bf16")
    assert set(ember_seen) == {(True, torch.bfloat16, torch.float32)}, ember_seen
    # GPT-2's Conv1D is addmm: bf16 on both; the policies differ elsewhere (torch's
    # backend lists on ember, the CPU's own on eager), so the curves agree loosely
    assert lazy == pytest.approx(eager, rel=2e-2), (lazy, eager)
    assert sum(s["fallbacks"] for s in counts.steps) == 0


def test_trainer_checkpoint_saves_the_model(tmp_path):
    """Trainer checkpoints call model.save_pretrained, which reads each tensor's storage
    (transformers' remove_tied_weights_from_state_dict -> safetensors' storage_ptr ->
    untyped_storage().data_ptr()); GPT-2 ties its head to the token embedding."""
    losses, _, _ = fine_tune(
        gpt2, lm_data(), "ember", tmp_path, steps=2, save_strategy="steps", save_steps=2
    )
    saved = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "ember" / "checkpoint-2"))
    assert isinstance(saved, transformers.GPT2LMHeadModel)


def plain_loop(device, mixed_precision=None, steps=4):
    with accelerate_env(device):
        acc = Accelerator(mixed_precision=mixed_precision)
        model = gpt2()
        mlp_dtypes = []
        model.transformer.h[0].mlp.c_fc.register_forward_hook(
            lambda mod, inp, out: mlp_dtypes.append(out.dtype)
        )
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # before prepare(), as usual
        data = lm_data(4 * steps)
        loader = torch.utils.data.DataLoader(
            data, batch_size=4, collate_fn=transformers.default_data_collator
        )
        model, opt, loader = acc.prepare(model, opt, loader)
        seen, losses = [], []
        for batch in loader:
            seen.append(
                (acc.device.type, batch["input_ids"].device.type, model.lm_head.weight.device.type)
            )
            out = model(**batch)  # prepare() wrapped forward in autocast when mixed
            seen[-1] += (mlp_dtypes[-1],)
            acc.backward(out.loss)
            opt.step()
            opt.zero_grad()
            losses.append(out.loss.item())
    return losses, seen


def test_accelerator_plain_loop_matches_eager():
    eager, _ = plain_loop(None)
    ember.metrics.clear()
    lazy, seen = plain_loop("ember")
    assert seen == [("ember", "ember", "ember", torch.float32)] * 4
    assert lazy == pytest.approx(eager, rel=1e-5), (lazy, eager)
    assert not ember.metrics.counters()["fallbacks"]
    _, seen = plain_loop("ember", mixed_precision="bf16", steps=1)
    assert [s[-1] for s in seen] == [torch.bfloat16]
    with pytest.raises(ValueError, match="fp16"):
        plain_loop("ember", mixed_precision="fp16", steps=1)


def test_generate_matches_eager_with_compiles_reported():
    model = gpt2().eval()
    prompt = torch.tensor([[5, 9, 2, 7]])
    want = model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
    lazy = gpt2().eval().to("ember")
    ember.metrics.clear()
    got = lazy.generate(prompt.to("ember"), max_new_tokens=4, do_sample=False, pad_token_id=0)
    c = ember.metrics.counters()
    assert torch.equal(got.cpu(), want)
    print(f"generate: 4 tokens, {c['graphs_compiled']} graphs compiled, {c['syncs']} syncs")
    # about one graph per generated length today (the KV cache grows)
    assert c["graphs_compiled"] <= 2 * 4 and not c["fallbacks"]
