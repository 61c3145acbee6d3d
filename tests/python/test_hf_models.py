"""Hugging Face transformers models on ember vs eager CPU: GPT-2 and BERT from small
configs (random init, nothing downloaded), forward + backward, both attention
implementations (eager and sdpa). Oracle: the same model and inputs on eager CPU.
No op may fall back to eager outside a graph; value reads are counted and listed."""

import copy

import pytest
import torch
import transformers

import ember
from conftest import DEV
from hf_tiny import bert_config, gpt2_config

transformers.logging.set_verbosity_error()

VOCAB, SEQ = 96, 16
# Value reads the models may make per forward+backward (HF's mask helpers inspect
# masks); the sites are printed, and a regression beyond this bound fails.
MAX_VALUE_READS = 4


def gpt2(attn):
    return transformers.GPT2LMHeadModel(gpt2_config(VOCAB, attn_implementation=attn))


def bert(attn):
    return transformers.BertForSequenceClassification(bert_config(VOCAB, attn_implementation=attn))


def inputs(kind):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (2, SEQ), generator=g)
    mask = torch.ones(2, SEQ, dtype=torch.long)
    mask[1, SEQ - 5 :] = 0  # a padded second sequence exercises the attention mask
    labels = ids.clone() if kind == "gpt2" else torch.tensor([0, 2])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def run(model, batch, device):
    out = model(**{k: v.to(device) for k, v in batch.items()})
    out.loss.backward()
    return out.loss, out.logits


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_hf_forward_backward_matches_eager(kind, attn):
    torch.manual_seed(0)
    model = gpt2(attn) if kind == "gpt2" else bert(attn)
    model.train()  # dropout probabilities are 0: train mode is deterministic
    ref = copy.deepcopy(model)
    batch = inputs(kind)
    ref_loss, ref_logits = run(ref, batch, "cpu")

    model.to(DEV)
    ember.sync()
    ember.metrics.clear()
    loss, logits = run(model, batch, DEV)
    grads = {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}
    c = ember.metrics.counters()

    tol = dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loss.cpu(), ref_loss.detach(), **tol)
    torch.testing.assert_close(logits.cpu(), ref_logits.detach(), **tol)
    ref_grads = {n: p.grad for n, p in ref.named_parameters() if p.grad is not None}
    assert grads.keys() == ref_grads.keys()
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name], g, msg=lambda m: f"grad of {name}: {m}", **tol)

    assert c["fallbacks"] == {}, f"ops fell back to eager CPU: {c['fallbacks']}"
    sites = c["value_read_sites"]
    print(
        f"\n{kind}/{attn}: {c['value_reads']} value reads, {c['graphs_compiled']} graphs compiled"
    )
    for site, n in sorted(sites.items()):
        print(f"  value read x{n} at {site}")
    assert sum(sites.values()) == c["value_reads"]
    assert c["value_reads"] <= MAX_VALUE_READS, f"value reads: {sites}"
