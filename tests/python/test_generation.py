"""Hugging Face generate() on ember (issue 16 item 5): with cache_implementation="static"
a decoding loop compiles one graph for the prefill and one for every decode step, however
many tokens it generates (docs/architecture.md, "Recompiles": appends to a device tensor
run after the program, eager views of the growing ids key like any other view). Tokens
are compared with eager CPU; a tiny GPT-2 built locally (nothing downloaded)."""

import pytest
import torch

import ember
from conftest import DEV

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

VOCAB = 96


def tiny_gpt2():
    from hf_tiny import gpt2_config

    torch.manual_seed(0)
    cfg = gpt2_config(VOCAB, n_positions=128, pad_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def generate(model, ids, n, device):
    kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, cache_implementation="static")
    with torch.no_grad():
        out = model.generate(ids.to(device), attention_mask=torch.ones_like(ids).to(device), **kw)
    return out.cpu()


def compiles():
    c = ember.metrics.counters()
    return c["graphs_compiled"] + c["disk_cache_hits"]  # graphs built (not found in memory)


def test_static_cache_generate_compiles_prefill_and_decode_once():
    cpu = tiny_gpt2()
    dev = tiny_gpt2().to(DEV)
    ids = torch.randint(1, VOCAB, (1, 5), generator=torch.Generator().manual_seed(1))
    # The first call compiles HF's one-time input checks (value reads on the prompt:
    # a few small graphs, keyed by the prompt's shape) besides prefill and decode.
    torch.testing.assert_close(generate(dev, ids, 2, DEV), generate(cpu, ids, 2, "cpu"))
    counts = {}
    for n in (8, 64):
        ember.metrics.clear()
        got = generate(dev, ids, n, DEV)
        counts[n] = compiles()
        torch.testing.assert_close(got, generate(cpu, ids, n, "cpu"))
        assert got.shape == (1, 5 + n)
        # Each step's append to the ids and positions ran after its program.
        assert ember.metrics.counters()["tail_ops"] > 0
    # A static cache of another length is another prefill and decode graph: 2 each time.
    assert counts[8] == counts[64] and counts[64] <= 2, counts
