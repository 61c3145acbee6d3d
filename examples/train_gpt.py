"""A character-level GPT trained on a text file, on the ``ember`` device or eager CPU.

The model follows the nanoGPT design (decoder-only transformer): token and
position embeddings, pre-norm blocks of causal self-attention (through
``F.scaled_dot_product_attention`` with ``is_causal=True``) and a GELU MLP,
a final LayerNorm, and an output projection tied to the token embedding.
Training uses AdamW (weight decay on matrices only) with a linear warmup then
cosine decay of the learning rate, gradient clipping, dropout, a periodic
validation loss on fixed held-out batches, checkpoint save/resume, and ends by
sampling text.

Sampling runs the model on a fixed window of ``block_size`` tokens (real
tokens first, padding after; causal attention makes the padding invisible to
the positions read), so generation compiles one graph, not one per token.

Precision (``--precision``): ``fp32`` (default); ``bf16-mixed``, the forward and loss
under ``torch.autocast(device, dtype=torch.bfloat16)`` with f32 parameters and optimizer
(on ember, the CUDA-style autocast lists: docs/architecture.md "Autocast"); ``bf16-true``,
the parameters themselves in bf16 (updates below bf16's resolution are lost), with
``--master-weights`` the optimizer stepping f32 master copies (``ember.amp.MasterWeights``).

Usage:
    python examples/train_gpt.py --data ../shared/data/tinyshakespeare.txt
    python examples/train_gpt.py --data FILE --device cpu --steps 600 --json out.json
    python examples/train_gpt.py --data FILE --device cpu --compile   # torch.compile (Inductor)
    python examples/train_gpt.py --data FILE --plot loss.png  # train/validation loss curves
    python examples/train_gpt.py --data FILE --steps 300 --precision bf16-mixed

Importing this file has no side effects: ``GPT`` and ``GPTConfig`` are the model
(``python -m ember.bench`` builds it from here).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class GPTConfig:
    """Model shape, plus the training batch size the default config is measured with.

    vocab_size: number of token ids (65 = the characters of tinyshakespeare).
    block_size: context length in tokens (positions 0..block_size-1).
    n_layer, n_head, n_embd: depth, attention heads, model width (n_embd % n_head == 0).
    dropout: probability on embeddings, attention weights and residual branches.
    bias: whether Linear and LayerNorm layers carry biases.
    batch_size: sequences per training step (not a model shape; inputs are
        ``[batch_size, block_size]`` int64).
    """

    vocab_size: int = 65
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True
    batch_size: int = 32


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: [B, T, C] -> [B, T, C]."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"n_embd ({cfg.n_embd}) must be a multiple of n_head ({cfg.n_head})")
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        # [B, T, C] -> [B, n_head, T, head_dim]
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward: Linear(C, 4C) -> GELU -> Linear(4C, C) -> dropout."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Decoder-only transformer language model.

    forward(idx [B, T] int64, targets [B, T] int64 or None) -> (logits [B, T, vocab]
    float32, loss: mean cross-entropy scalar or None). T must be <= block_size.
    Weights are initialised N(0, 0.02), residual output projections N(0, 0.02/sqrt(2L))
    (GPT-2's scheme); the output head shares the token embedding's weight.
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(
                f"GPT.forward: sequence length {T} > block_size {self.config.block_size}"
            )
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizer(
        self, lr: float, weight_decay: float = 0.1, betas=(0.9, 0.95), master: bool = False
    ):
        """AdamW with weight decay on matrices (>= 2-d) and none on biases/LayerNorms;
        with `master`, over f32 master copies of (bf16) parameters
        (``ember.amp.MasterWeights``)."""
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        if master:
            from ember.amp import MasterWeights

            return MasterWeights(groups, torch.optim.AdamW, lr=lr, betas=betas)
        return torch.optim.AdamW(groups, lr=lr, betas=betas)


def lr_at(step: int, *, lr: float, warmup: int, total: int, min_lr: float) -> float:
    """Linear warmup over `warmup` steps to `lr`, then cosine decay to `min_lr` at `total`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= total:
        return min_lr
    ratio = (step - warmup) / max(1, total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


# ---------------------------------------------------------------------------- data


class DataError(Exception):
    """A problem with the --data file, stated in one line."""


class CharData:
    """A text file as character ids: vocabulary = the sorted set of its characters;
    the first 90% is the training split, the rest validation."""

    def __init__(self, path: str, block_size: int):
        if not os.path.exists(path):
            raise DataError(f"{path}: no such file")
        if not os.path.isfile(path):
            raise DataError(f"{path}: not a regular file")
        with open(path, "rb") as f:
            raw = f.read()
        if not raw:
            raise DataError(f"{path}: the file is empty")
        if b"\0" in raw:
            raise DataError(f"{path}: binary file (contains NUL bytes); expected UTF-8 text")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"{path}: not UTF-8 text (invalid byte at offset {e.start})") from None
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        data = torch.tensor([self.stoi[c] for c in text], dtype=torch.long)
        n = int(0.9 * len(data))
        self.train, self.val = data[:n], data[n:]
        # Each split needs at least one window of block_size inputs plus the next target.
        need = block_size + 1
        if len(self.val) < need:
            raise DataError(
                f"{path}: too short ({len(text)} characters); the context is {block_size} "
                f"characters and each of the train (90%) and validation (10%) splits needs "
                f"more than that, i.e. at least {math.ceil(need / 0.1)} characters"
            )

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in ids)

    def encode(self, s: str) -> list[int]:
        return [self.stoi[c] for c in s if c in self.stoi]


def get_batch(split: torch.Tensor, batch_size: int, block_size: int, gen: torch.Generator):
    """Random windows from `split`: x, y int64 [batch_size, block_size] on CPU, y = x shifted by one."""
    ix = torch.randint(len(split) - block_size, (batch_size,), generator=gen)
    x = torch.stack([split[i : i + block_size] for i in ix.tolist()])
    y = torch.stack([split[i + 1 : i + 1 + block_size] for i in ix.tolist()])
    return x, y


@torch.no_grad()
def estimate_val_loss(model, batches, device) -> float:
    """Mean loss over fixed held-out batches (model in eval mode: no dropout)."""
    model.eval()
    total = None
    for x, y in batches:
        _, loss = model(x.to(device), y.to(device))
        total = loss if total is None else total + loss
    model.train()
    return (total / len(batches)).item()


@torch.no_grad()
def sample(
    model,
    data: CharData,
    device,
    *,
    prompt: str,
    n_chars: int,
    temperature: float,
    top_k: int | None,
    gen: torch.Generator,
) -> str:
    """Generates n_chars after `prompt`. Every forward sees a [1, block_size] window (real
    tokens, then zero padding that causal attention hides from the position read), so the
    model runs as one graph for all tokens; sampling itself runs on CPU."""
    model.eval()
    block = model.config.block_size
    ids = data.encode(prompt) or [data.stoi.get("\n", 0)]
    for _ in range(n_chars):
        ctx = ids[-block:]
        window = torch.zeros(1, block, dtype=torch.long)
        window[0, : len(ctx)] = torch.tensor(ctx)
        logits, _ = model(window.to(device))
        logits = logits.to("cpu")[0, len(ctx) - 1].float() / max(temperature, 1e-6)
        if top_k is not None:
            kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
            logits[logits < kth] = -float("inf")
        ids.append(int(torch.multinomial(F.softmax(logits, dim=-1), 1, generator=gen)))
    model.train()
    return data.decode(ids)


def _to_cpu(obj):
    """A copy of a nested state dict with every tensor on CPU (portable checkpoints)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu")
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB: VmHWM of /proc/self/status where
    there is one. Not ru_maxrss first: Linux carries ru_maxrss across execve, so a run
    started by a larger parent (a benchmark driver) would report the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


# ---------------------------------------------------------------------------- main


def parse_args(argv=None):
    d = GPTConfig()
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Text to train on: any UTF-8 file; the tests and docs use tinyshakespeare "
        "(about 1 MB, https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
        "tinyshakespeare/input.txt, kept in ../shared/data/ beside the checkout in CI).",
    )
    p.add_argument("--data", required=True, help="UTF-8 text file to train on")
    p.add_argument("--device", choices=("ember", "cpu"), default="ember", help="where to train")
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model with Inductor (eager CPU only, for comparison)",
    )
    p.add_argument("--steps", type=int, default=600, help="optimizer steps (total, across resumes)")
    p.add_argument(
        "--stop-at",
        type=int,
        default=None,
        help="end this run after this step (the LR schedule still spans --steps); "
        "continue later with --resume",
    )
    p.add_argument(
        "--precision",
        choices=("fp32", "bf16-mixed", "bf16-true"),
        default="fp32",
        help="fp32; bf16-mixed (autocast, f32 weights); bf16-true (bf16 weights)",
    )
    p.add_argument(
        "--master-weights",
        action="store_true",
        help="with --precision bf16-true: the optimizer steps f32 master weights",
    )
    p.add_argument("--seed", type=int, default=1337, help="weights, batches and sampling")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout probability")
    p.add_argument("--n-layer", type=int, default=d.n_layer, help="transformer blocks")
    p.add_argument("--n-head", type=int, default=d.n_head, help="attention heads")
    p.add_argument("--n-embd", type=int, default=d.n_embd, help="model width")
    p.add_argument("--block-size", type=int, default=d.block_size, help="context in tokens")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="sequences per step")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--min-lr", type=float, default=1e-4, help="learning rate at the end")
    p.add_argument(
        "--warmup", type=int, default=None, help="warmup steps (default: steps/10, <= 100)"
    )
    p.add_argument("--weight-decay", type=float, default=0.1, help="AdamW, matrices only")
    p.add_argument("--grad-clip", type=float, default=1.0, help="max gradient norm; 0 disables")
    p.add_argument(
        "--eval-interval",
        type=int,
        default=100,
        help="validation loss every N steps (and at the last step); 0: only at the end",
    )
    p.add_argument("--eval-iters", type=int, default=10, help="held-out batches per validation")
    p.add_argument("--log-interval", type=int, default=10, help="print the loss every N steps")
    p.add_argument(
        "--checkpoint", default=None, help="save model/optimizer state here at each validation"
    )
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument(
        "--sample-chars", type=int, default=200, help="characters to sample at the end (0: none)"
    )
    p.add_argument("--prompt", default="\n", help="text the sample starts from")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature")
    p.add_argument("--top-k", type=int, default=None, help="sample from the k likeliest")
    p.add_argument(
        "--json", default=None, help="write losses, step times, graphs compiled, peak RSS here"
    )
    p.add_argument(
        "--plot", default=None, help="draw the train and validation loss curves into this PNG"
    )
    args = p.parse_args(argv)
    if args.compile and args.device != "cpu":
        p.error("--compile uses Inductor, which runs on eager CPU: pass --device cpu")
    if args.master_weights and args.precision != "bf16-true":
        p.error("--master-weights needs --precision bf16-true")
    if args.resume and not args.checkpoint:
        p.error("--resume needs --checkpoint FILE")
    for name in ("steps", "n_layer", "n_head", "n_embd", "block_size", "batch_size", "eval_iters"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if not 0.0 <= args.dropout < 1.0:
        p.error("--dropout must be in [0, 1)")
    return args


def graphs_compiled(device: str, compiled: bool) -> int:
    if device == "ember":
        import ember

        return int(ember.metrics.counters()["graphs_compiled"])
    if compiled:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    return 0


def write_json(path, history, args) -> dict:
    """The --json result: history plus graphs_compiled and peak_rss_mb (written when
    `path` is set)."""
    result = dict(history)
    result["precision"] = args.precision + ("+master" if args.master_weights else "")
    result["graphs_compiled"] = graphs_compiled(args.device, args.compile)
    result["peak_rss_mb"] = peak_rss_mb()
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    return result


def plot_losses(path, history, title=""):
    """Writes a PNG of the training loss at every step and the validation loss at the
    steps it was measured (history as train() keeps it, resumed runs included), with
    matplotlib's Agg renderer (no display, no global backend change). Returns the
    matplotlib Figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    train_loss = history["train_loss"]
    ax.plot(range(1, len(train_loss) + 1), train_loss, color="C0", lw=1, label="train loss")
    ax.plot(
        history["val_steps"], history["val_loss"], "o-", color="C1", lw=2, label="validation loss"
    )
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per character)")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    return fig


def train(args) -> dict:
    """Trains as `args` (from parse_args) say; returns the --json dict (plus "val_steps").
    Raises DataError for a bad --data file or checkpoint."""
    data = CharData(args.data, args.block_size)
    if args.device == "ember":
        import ember

        device = ember.device()
        ember.metrics.clear()
    else:
        device = torch.device("cpu")

    cfg = GPTConfig(
        vocab_size=data.vocab_size,
        block_size=args.block_size,
        n_layer=args.n_layer,
        n_head=args.n_head,
        n_embd=args.n_embd,
        dropout=args.dropout,
        batch_size=args.batch_size,
    )
    # Weights are drawn on CPU from the seed, so every device starts from the same model.
    torch.manual_seed(args.seed)
    model = GPT(cfg)
    model.to(device)
    if args.precision == "bf16-true":
        model.to(torch.bfloat16)
    opt = model.configure_optimizer(args.lr, args.weight_decay, master=args.master_weights)
    batch_gen = torch.Generator().manual_seed(args.seed)
    val_gen = torch.Generator().manual_seed(args.seed + 1)
    val_batches = [
        get_batch(data.val, cfg.batch_size, cfg.block_size, val_gen) for _ in range(args.eval_iters)
    ]
    history = {"train_loss": [], "val_loss": [], "val_steps": [], "step_seconds": []}

    start = 0
    if args.resume:
        if not os.path.exists(args.checkpoint):
            raise DataError(f"{args.checkpoint}: no checkpoint to resume from")
        ck = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
        if ck["config"] != dataclasses.asdict(cfg):
            raise DataError(
                f"{args.checkpoint}: saved for config {ck['config']}, not {dataclasses.asdict(cfg)}"
            )
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        batch_gen.set_state(ck["batch_rng"])
        if args.device == "ember":
            import ember

            ember.set_rng_state(ck["device_rng"])
        else:
            torch.set_rng_state(ck["device_rng"])
        start = ck["step"]
        history = ck["history"]
        print(f"resumed from {args.checkpoint} at step {start}")

    def save(step):
        if args.device == "ember":
            import ember

            rng = ember.get_rng_state()
        else:
            rng = torch.get_rng_state()
        tmp = args.checkpoint + ".tmp"
        torch.save(
            {
                "model": {k: v.to("cpu") for k, v in model.state_dict().items()},
                "optimizer": _to_cpu(opt.state_dict()),
                "config": dataclasses.asdict(cfg),
                "step": step,
                "batch_rng": batch_gen.get_state(),
                "device_rng": rng,
                "history": history,
            },
            tmp,
        )
        os.replace(tmp, args.checkpoint)

    step_fn_model = torch.compile(model) if args.compile else model

    def autocast():
        return torch.autocast(
            device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16-mixed"
        )

    warmup = args.warmup if args.warmup is not None else max(1, min(100, args.steps // 10))
    params = [p for p in model.parameters()]
    print(
        f"GPT: {model.num_parameters() / 1e6:.2f}M parameters, vocab {cfg.vocab_size}, "
        f"{cfg.n_layer} layers x {cfg.n_head} heads x {cfg.n_embd}, context {cfg.block_size}, "
        f"batch {cfg.batch_size}; device {args.device}{' + torch.compile' if args.compile else ''}"
        f", precision {args.precision}{' + f32 master weights' if args.master_weights else ''}"
    )
    model.train()
    end = args.steps if args.stop_at is None else min(args.steps, args.stop_at)
    for step in range(start, end):
        t0 = time.perf_counter()
        lr = lr_at(step, lr=args.lr, warmup=warmup, total=args.steps, min_lr=args.min_lr)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = get_batch(data.train, cfg.batch_size, cfg.block_size, batch_gen)
        with autocast():
            _, loss = step_fn_model(x.to(device), y.to(device))
        loss.backward()
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
        opt.step()  # on ember, the whole training step runs here as one cached graph
        opt.zero_grad(set_to_none=True)
        loss_value = loss.item()
        history["step_seconds"].append(time.perf_counter() - t0)
        history["train_loss"].append(loss_value)
        if not math.isfinite(loss_value):
            raise RuntimeError(f"training diverged: loss {loss_value} at step {step + 1}")
        done = step + 1
        if args.log_interval and (done % args.log_interval == 0 or done == 1):
            print(
                f"step {done:5d}  loss {loss_value:.4f}  lr {lr:.2e}  "
                f"{history['step_seconds'][-1] * 1e3:7.1f} ms",
                flush=True,
            )
        if (args.eval_interval and done % args.eval_interval == 0) or done == end:
            with autocast():
                val = estimate_val_loss(model, val_batches, device)
            history["val_loss"].append(val)
            history["val_steps"].append(done)
            print(f"step {done:5d}  val loss {val:.4f}", flush=True)
            if args.checkpoint:
                save(done)
            if args.json:  # partial results of a long run, completed at the end
                write_json(args.json, history, args)

    if args.sample_chars > 0:
        text = sample(
            model,
            data,
            device,
            prompt=args.prompt,
            n_chars=args.sample_chars,
            temperature=args.temperature,
            top_k=args.top_k,
            gen=torch.Generator().manual_seed(args.seed),
        )
        print("---- sample ----")
        print(text)
        print("----------------")

    result = write_json(args.json, history, args)
    if args.plot:
        plot_losses(args.plot, history, f"char-GPT on {os.path.basename(args.data)}, {args.device}")
        print(f"wrote {args.plot}")
    secs = sorted(history["step_seconds"][1:] or history["step_seconds"])
    if secs:
        print(
            f"median step {secs[len(secs) // 2] * 1e3:.1f} ms, first step "
            f"{history['step_seconds'][0]:.2f} s, graphs compiled {result['graphs_compiled']}, "
            f"peak RSS {result['peak_rss_mb']:.0f} MiB"
        )
    if args.device == "ember":
        import ember

        c = ember.metrics.counters()
        fb = sum(c["fallbacks"].values())
        print(
            f"ember: {c['syncs']} syncs, {c['graphs_compiled']} graphs compiled, "
            f"{c['memory_cache_hits']} cache hits, {fb} fallbacks"
            + (f" ({', '.join(sorted(c['fallbacks']))})" if fb else "")
        )
    return result


def main(argv=None) -> None:
    args = parse_args(argv)
    try:
        train(args)
    except DataError as e:
        sys.exit(f"train_gpt.py: error: {e}")


if __name__ == "__main__":
    main()
