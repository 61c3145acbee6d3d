"""The benchmark's workloads: models built offline from random weights, with fixed inputs.

Each workload is a ``Workload``: a CPU ``torch.nn.Module`` (deterministic initialisation
from a seed), a tuple of CPU input tensors, and two functions:

- ``loss(model, *inputs) -> Tensor`` — a scalar float32 training loss (training mode);
- ``infer(model, *inputs) -> Tensor`` — the inference output (eval mode, no grad).

Sizes come in three scales: ``full`` (the default suite), ``quick`` (``--quick``) and
``tiny`` (the smoke test). The char-GPT is ``GPT``/``GPTConfig`` from the repository's
``examples/train_gpt.py`` (loaded by path); GPT-2 and BERT come from Hugging Face
``transformers``, built from a config (nothing is downloaded).

Memory-bound kernels carry ``bytes_moved`` (STREAM's convention: each input read once
and each output written once, no write-allocate traffic) so their times can be expressed
as a fraction of the STREAM triad: ``elementwise`` and ``softmax``, and the kernels of a
training step's backward (``bias_grad``, ``channel_sum``, ``layernorm_bwd``,
``softmax_bwd``, ``embedding_bwd``, ``cross_entropy``), each the ATen op(s) autograd
runs there, called directly in inference mode, with the innermost shapes of the gpt,
bert and resnet18 steps and the outer dim grown past the last-level cache at full scale.

This module imports only torch (and transformers for the Hugging Face models): the
cost-phase worker and the PyTorch/XLA worker load it by path, without ``ember``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

SCALES = ("tiny", "quick", "full")
TRAIN, INFER = "train", "inference"


@dataclasses.dataclass
class Workload:
    """One model with its inputs. ``modes`` lists the modes it supports."""

    name: str
    description: str
    model: nn.Module
    inputs: tuple
    loss: Callable | None
    infer: Callable
    modes: tuple = (TRAIN, INFER)
    bytes_moved: int | None = None  # memory-bound kernels only (per inference call)


# --------------------------------------------------------------------------- MLP


def _mlp(scale: str, seed: int) -> Workload:
    batch, d_in, hidden, d_out = {
        "tiny": (16, 32, 64, 10),
        "quick": (64, 784, 512, 10),
        "full": (128, 784, 1024, 10),
    }[scale]
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(d_in, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, d_out),
    )
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, d_in, generator=g)
    y = torch.randint(0, d_out, (batch,), generator=g)
    return Workload(
        "mlp",
        f"MLP {d_in}-{hidden}-{hidden}-{d_out} (GELU), batch {batch}",
        model,
        (x, y),
        loss=lambda m, x, y: F.cross_entropy(m(x), y),
        infer=lambda m, x, y: m(x),
    )


# --------------------------------------------------------------------------- char-GPT


def repo_root() -> str | None:
    """The Ember repository this package runs from (``python/ember/bench`` -> root), or
    ``$EMBER_REPO``; None when neither holds ``examples/train_gpt.py``."""
    candidates = [
        os.environ.get("EMBER_REPO"),
        os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")),
        os.getcwd(),
    ]
    for c in candidates:
        if c and os.path.isfile(os.path.join(c, "examples", "train_gpt.py")):
            return c
    return None


def load_train_gpt():
    """The module ``examples/train_gpt.py`` of the repository (GPT, GPTConfig).

    Raises FileNotFoundError naming where it looked when the file is not there (an
    installed wheel without the repository: set EMBER_REPO)."""
    root = repo_root()
    if root is None:
        raise FileNotFoundError(
            "model 'gpt' is built from examples/train_gpt.py of the Ember repository, which "
            "was not found next to this package or in the current directory; set EMBER_REPO "
            "to the repository root"
        )
    name = "ember_examples_train_gpt"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(root, "examples", "train_gpt.py")
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look the module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def _gpt(scale: str, seed: int) -> Workload:
    tg = load_train_gpt()
    cfg = tg.GPTConfig(dropout=0.0)  # the default config: 4 layers, 4 heads, 128, ctx 128
    if scale == "tiny":
        cfg = dataclasses.replace(cfg, n_layer=1, n_embd=32, n_head=2, block_size=16, batch_size=2)
    elif scale == "quick":
        cfg = dataclasses.replace(cfg, batch_size=8)
    torch.manual_seed(seed)
    model = tg.GPT(cfg)
    g = torch.Generator().manual_seed(seed + 1)
    idx = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.block_size), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.block_size), generator=g)
    return Workload(
        "gpt",
        f"char-GPT (examples/train_gpt.py) {cfg.n_layer} layers, {cfg.n_head} heads, "
        f"{cfg.n_embd}-dim, context {cfg.block_size}, vocab {cfg.vocab_size}, batch "
        f"{cfg.batch_size}",
        model,
        (idx, tgt),
        loss=lambda m, i, t: m(i, t)[1],
        infer=lambda m, i, t: m(i)[0],
    )


# --------------------------------------------------------------------------- ResNet-18


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with a residual connection (He et al. 2015, "Deep Residual
    Learning for Image Recognition", the ResNet-18/34 block). [N, C_in, H, W] ->
    [N, C_out, H/stride, W/stride]."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """ResNet-18 layout (stem 7x7/2 conv + 3x3/2 max-pool, stages of 2 BasicBlocks at
    widths w, 2w, 4w, 8w, global average pool, linear head). [N, 3, H, W] -> [N, classes]."""

    def __init__(self, width: int = 64, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, 2, 3, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        blocks, c = [], width
        for i, w in enumerate((width, 2 * width, 4 * width, 8 * width)):
            stride = 1 if i == 0 else 2
            blocks += [BasicBlock(c, w, stride), BasicBlock(w, w, 1)]
            c = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _resnet(scale: str, seed: int) -> Workload:
    # tiny: 64x64 so the last stage still normalizes over 2x2 positions x batch (BatchNorm
    # over 2 values amplifies float reassociation past the numerics tolerance).
    batch, width, hw = {"tiny": (4, 8, 64), "quick": (4, 64, 64), "full": (16, 64, 64)}[scale]
    torch.manual_seed(seed)
    model = ResNet18(width)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, 3, hw, hw, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    return Workload(
        "resnet18",
        f"ResNet-18 (width {width}) at {hw}x{hw}, 10 classes, batch {batch}",
        model,
        (x, y),
        loss=lambda m, x, y: F.cross_entropy(m(x), y),
        infer=lambda m, x, y: m(x),
    )


# --------------------------------------------------------------------------- Hugging Face


def _hf_sizes(scale: str):
    # (layers, hidden, heads, seq, batch, vocab)
    return {
        "tiny": (1, 32, 2, 16, 2, 100),
        "quick": (2, 128, 4, 64, 4, 1000),
        "full": (2, 128, 4, 128, 8, 1000),
    }[scale]


def _gpt2(scale: str, seed: int) -> Workload:
    from transformers import GPT2Config, GPT2LMHeadModel

    layers, hidden, heads, seq, batch, vocab = _hf_sizes(scale)
    cfg = GPT2Config(
        n_layer=layers,
        n_embd=hidden,
        n_head=heads,
        n_positions=seq,
        vocab_size=vocab,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg)
    # HF derives the loss from the class name and finds none for GPT2LMHeadModel: each
    # call then logs a warning and uses ForCausalLM. The logging call splits the step
    # into two graphs under torch.compile (every backend); naming the loss avoids it.
    model.loss_type = "ForCausalLM"
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    return Workload(
        "gpt2",
        f"HF GPT2LMHeadModel {layers} layers, {heads} heads, {hidden}-dim, seq {seq}, "
        f"vocab {vocab}, batch {batch}",
        model,
        (ids,),
        loss=lambda m, ids: m(input_ids=ids, labels=ids).loss,
        infer=lambda m, ids: m(input_ids=ids).logits,
    )


def _bert(scale: str, seed: int) -> Workload:
    from transformers import BertConfig, BertForMaskedLM

    layers, hidden, heads, seq, batch, vocab = _hf_sizes(scale)
    cfg = BertConfig(
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=seq,
        vocab_size=vocab,
        pad_token_id=0,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(seed)
    model = BertForMaskedLM(cfg)
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    return Workload(
        "bert",
        f"HF BertForMaskedLM {layers} layers, {heads} heads, {hidden}-dim, seq {seq}, "
        f"vocab {vocab}, batch {batch}",
        model,
        (ids,),
        loss=lambda m, ids: m(input_ids=ids, labels=ids).loss,
        infer=lambda m, ids: m(input_ids=ids).logits,
    )


# --------------------------------------------------------------------------- memory-bound


class _Elementwise(nn.Module):
    """x -> gelu(x * 1.5 + 0.25) * 0.5 - x: five elementwise ops, one fused pass ideally."""

    def forward(self, x):
        return F.gelu(x * 1.5 + 0.25) * 0.5 - x


class _Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def _memory(name: str, module: nn.Module, what: str, scale: str, seed: int) -> Workload:
    # full: 2^24 floats (64 MiB, twice the 32 MiB L3) in, the same out.
    rows, cols = {"tiny": (64, 256), "quick": (1024, 4096), "full": (4096, 4096)}[scale]
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(rows, cols, generator=g)
    return Workload(
        name,
        f"{what} over f32[{rows},{cols}] (memory-bound)",
        module,
        (x,),
        loss=None,
        infer=lambda m, x: m(x),
        modes=(INFER,),
        bytes_moved=2 * x.numel() * 4,
    )


# --------------------------------------------------------------------------- step kernels
#
# The backward kernels of the gpt, bert and resnet18 training steps, one row each. Each
# module calls the ATen op(s) that autograd calls in that step, on inputs made up front
# (a backward's saved tensors and incoming gradient), so every backend runs its own
# lowering of exactly that op. Sizes keep the models' innermost (feature) dims and grow
# the outer (token, batch) dim: at full scale the largest operand is 64 MiB, twice the
# 32 MiB L3 of the project's machine, as for ``elementwise``. f32 everywhere.

_aten = torch.ops.aten
F32 = 4


class _BiasGrad(nn.Module):
    """A Linear bias's gradient: the incoming gradient summed over the token dim,
    [T, F] -> [F] (a reduction over the non-innermost dim)."""

    def forward(self, dy):
        return dy.sum(0)


class _ChannelSum(nn.Module):
    """BatchNorm2d backward's per-channel sums: [N, C, H, W] -> [C] over (N, H, W), the
    kept dim in the middle."""

    def forward(self, dy):
        return dy.sum((0, 2, 3))


class _LayerNormBackward(nn.Module):
    """``aten.native_layer_norm_backward`` over the last dim: (dx, dweight, dbias)."""

    def forward(self, dy, x, mean, rstd, weight, bias):
        return _aten.native_layer_norm_backward(
            dy, x, [x.shape[-1]], mean, rstd, weight, bias, [True, True, True]
        )


class _SoftmaxBackward(nn.Module):
    """``aten._softmax_backward_data`` over the last dim: dx = y * (dy - sum(dy*y))."""

    def forward(self, dy, y):
        return _aten._softmax_backward_data(dy, y, -1, torch.float32)


class _EmbeddingBackward(nn.Module):
    """``aten.embedding_dense_backward``: the incoming gradient [B, T, C] scatter-added
    into [vocab, C] rows by the token ids [B, T] (many duplicates)."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab

    def forward(self, dy, ids):
        return _aten.embedding_dense_backward(dy, ids, self.vocab, -1, False)


class _CrossEntropy(nn.Module):
    """Mean cross-entropy over [N, V] logits and its gradient, as ``F.cross_entropy``'s
    forward and backward run them: log-softmax, NLL, NLL backward (seed 1), log-softmax
    backward. Returns (loss, dlogits)."""

    def forward(self, logits, target):
        logp = _aten._log_softmax(logits, 1, False)
        loss, total = _aten.nll_loss_forward(logp, target, None, 1, -100)
        g = _aten.nll_loss_backward(torch.ones_like(loss), logp, target, None, 1, -100, total)
        return loss, _aten._log_softmax_backward_data(g, logp, 1, torch.float32)


def _kernel(name, module, what, inputs, bytes_moved) -> Workload:
    return Workload(
        name,
        f"{what} (memory-bound)",
        module,
        inputs,
        loss=None,
        infer=lambda m, *xs: m(*xs),
        modes=(INFER,),
        bytes_moved=bytes_moved,
    )


def _bias_grad(scale: str, seed: int) -> Workload:
    # gpt's MLP hidden (4 x 128 features); tokens: 32 x 128 in the gpt step, x8 at full.
    t, f = {"tiny": (64, 32), "quick": (8192, 512), "full": (32768, 512)}[scale]
    dy = torch.randn(t, f, generator=torch.Generator().manual_seed(seed + 1))
    return _kernel(
        "bias_grad",
        _BiasGrad(),
        f"bias gradient: sum over dim 0 of f32[{t},{f}] (gpt's MLP hidden)",
        (dy,),
        (t * f + f) * F32,
    )


def _channel_sum(scale: str, seed: int) -> Workload:
    # resnet18's first stage: 64 channels at 16x16 (64x64 input); batch 16 in the step.
    n, c, hw = {"tiny": (4, 8, 8), "quick": (256, 64, 16), "full": (1024, 64, 16)}[scale]
    dy = torch.randn(n, c, hw, hw, generator=torch.Generator().manual_seed(seed + 1))
    return _kernel(
        "channel_sum",
        _ChannelSum(),
        f"BatchNorm channel sum over (0,2,3) of f32[{n},{c},{hw},{hw}] (resnet18 stage 1)",
        (dy,),
        (dy.numel() + c) * F32,
    )


def _layernorm_bwd(scale: str, seed: int) -> Workload:
    # gpt's and bert's LayerNorm over 128 features; tokens 4096 (gpt) x32 at full.
    t, d = {"tiny": (64, 32), "quick": (32768, 128), "full": (131072, 128)}[scale]
    g = torch.Generator().manual_seed(seed + 1)
    x, dy = torch.randn(t, d, generator=g), torch.randn(t, d, generator=g)
    w, b = 1.0 + 0.1 * torch.randn(d, generator=g), 0.1 * torch.randn(d, generator=g)
    _, mean, rstd = _aten.native_layer_norm(x, [d], w, b, 1e-5)
    return _kernel(
        "layernorm_bwd",
        _LayerNormBackward(),
        f"LayerNorm backward over f32[{t},{d}] (gpt/bert), dx, dweight, dbias",
        (dy, x, mean, rstd, w, b),
        (3 * t * d + 2 * t + 4 * d) * F32,
    )


def _softmax_bwd(scale: str, seed: int) -> Workload:
    # bert's attention probabilities [batch, 4 heads, 128, 128]; batch 8 in the step.
    b, h, s = {"tiny": (2, 2, 16), "quick": (64, 4, 128), "full": (256, 4, 128)}[scale]
    g = torch.Generator().manual_seed(seed + 1)
    y = torch.softmax(torch.randn(b, h, s, s, generator=g), -1)
    dy = torch.randn(b, h, s, s, generator=g)
    return _kernel(
        "softmax_bwd",
        _SoftmaxBackward(),
        f"softmax backward over f32[{b},{h},{s},{s}] (bert's attention probabilities)",
        (dy, y),
        3 * y.numel() * F32,
    )


def _embedding_bwd(scale: str, seed: int) -> Workload:
    # bert's/gpt2's token embedding (vocab 1000, 128-dim), seq 128; batch 8 in the step.
    b, s, c, v = {
        "tiny": (2, 16, 16, 10),
        "quick": (256, 128, 128, 1000),
        "full": (1024, 128, 128, 1000),
    }[scale]
    g = torch.Generator().manual_seed(seed + 1)
    dy = torch.randn(b, s, c, generator=g)
    ids = torch.randint(0, v, (b, s), generator=g)
    return _kernel(
        "embedding_bwd",
        _EmbeddingBackward(v),
        f"embedding backward: f32[{b},{s},{c}] scatter-added into [{v},{c}] by ids "
        f"[{b},{s}] (bert/gpt2 tokens)",
        (dy, ids),
        (b * s * c + v * c) * F32 + ids.numel() * 8,
    )


def _cross_entropy(scale: str, seed: int) -> Workload:
    # gpt2's/bert's LM head: vocab 1000; tokens 8 x 128 in the step, x16 at full.
    n, v = {"tiny": (32, 10), "quick": (4096, 1000), "full": (16384, 1000)}[scale]
    g = torch.Generator().manual_seed(seed + 1)
    logits = torch.randn(n, v, generator=g)
    target = torch.randint(0, v, (n,), generator=g)
    return _kernel(
        "cross_entropy",
        _CrossEntropy(),
        f"cross-entropy forward + backward over f32[{n},{v}] logits (gpt2/bert LM head)",
        (logits, target),
        (2 * n * v + 1) * F32 + n * 8,
    )


BUILDERS = {
    "mlp": _mlp,
    "gpt": _gpt,
    "resnet18": _resnet,
    "gpt2": _gpt2,
    "bert": _bert,
    "elementwise": lambda s, seed: _memory(
        "elementwise", _Elementwise(), "gelu(x*1.5+0.25)*0.5-x", s, seed
    ),
    "softmax": lambda s, seed: _memory("softmax", _Softmax(), "row softmax", s, seed),
    "bias_grad": _bias_grad,
    "channel_sum": _channel_sum,
    "layernorm_bwd": _layernorm_bwd,
    "softmax_bwd": _softmax_bwd,
    "embedding_bwd": _embedding_bwd,
    "cross_entropy": _cross_entropy,
}
STEP_KERNELS = (
    "bias_grad",
    "channel_sum",
    "layernorm_bwd",
    "softmax_bwd",
    "embedding_bwd",
    "cross_entropy",
)
MODEL_NAMES = tuple(BUILDERS)


def build(name: str, scale: str = "full", seed: int = 0) -> Workload:
    """The workload `name` (one of MODEL_NAMES) at `scale` (one of SCALES), weights and
    inputs drawn from `seed`. Raises ValueError for an unknown name or scale."""
    if name not in BUILDERS:
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODEL_NAMES)}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; expected one of {', '.join(SCALES)}")
    return BUILDERS[name](scale, seed)
