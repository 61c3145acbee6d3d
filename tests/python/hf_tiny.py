"""Tiny Hugging Face configs the tests build locally (nothing downloaded)."""

import transformers


def gpt2_config(vocab_size, **overrides):
    """A GPT-2 of 2 layers, 2 heads and width 32 without dropout, 32 positions, bos and
    eos token 0; `overrides` are further GPT2Config arguments (n_positions,
    attn_implementation, pad_token_id, n_embd, ...)."""
    kw = dict(
        vocab_size=vocab_size,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    kw.update(overrides)
    return transformers.GPT2Config(**kw)


def bert_config(vocab_size, **overrides):
    """A BERT of 2 layers, 2 heads, width 32 and feed-forward 64 without dropout, 32
    positions, 3 labels; `overrides` are further BertConfig arguments."""
    kw = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=3,
    )
    kw.update(overrides)
    return transformers.BertConfig(**kw)
