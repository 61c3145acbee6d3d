"""Throughput of ``ember.data.DeviceLoader`` against a plain ``DataLoader`` +
``.to(ember)`` loop, on the digits and char-GPT input pipelines, interleaved in one
process.

Each pipeline trains its example's model (``examples/train_digits.py``'s CNN on the
digits images, ``examples/train_gpt.py``'s GPT, reduced, on random windows of a text)
for epochs of ``--steps`` steps (the dataset cut to that many full batches), one epoch
per loop kind, alternating plain and
DeviceLoader epochs for ``--rounds`` rounds after a warm-up epoch each. Three producer
settings per pipeline:

- ``plain``: the DataLoader as the example would build it;
- ``slow producer``: each batch's collation also waits ``--produce-ms`` (I/O or decoding
  that releases the GIL), so loading costs about as much as the step;
- ``slow consumer``: each step also waits ``--consume-ms`` after its sync (a bigger
  model), so the step dominates.

Reported: the median epoch time of each loop kind and the median of the per-round ratios
``plain / DeviceLoader`` (throughput of DeviceLoader relative to the plain loop; > 1 is
faster). ``--workers`` sets the DataLoader's ``num_workers`` (default 1: the worker
process already overlaps loading; with 0 the DeviceLoader's thread is the only overlap).

    python bench/device_loader.py [--pipelines digits,gpt] [--workers 1] [--rounds 5]
        [--steps 20] [--produce-ms 5] [--consume-ms 5] [--json FILE]
"""

import argparse
import json
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import ember  # noqa: E402
from ember.data import DeviceLoader  # noqa: E402

DEV = ember.device()


class Windows(Dataset):
    """Random (x, y) windows of `block` characters of a token tensor (char-GPT input)."""

    def __init__(self, tokens, block, n):
        g = torch.Generator().manual_seed(0)
        self.tokens, self.block = tokens, block
        self.starts = torch.randint(0, len(tokens) - block - 1, (n,), generator=g)

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        s = int(self.starts[i])
        chunk = self.tokens[s : s + self.block + 1]
        return chunk[:-1], chunk[1:]


def slow_collate(delay_s):
    from torch.utils.data import default_collate

    def collate(samples):
        time.sleep(delay_s)
        return default_collate(samples)

    return collate


def digits(args):
    from train_digits import DigitsCNN, load_digits_split

    x, y, _, _ = load_digits_split(0)
    torch.manual_seed(0)
    model = DigitsCNN().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def step(batch):
        xb, yb = batch
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    n = 64 * args.steps
    if n > len(y):
        raise SystemExit(
            f"digits: {len(y)} training images hold fewer than {args.steps} batches of 64"
        )
    return TensorDataset(x[:n], y[:n]), 64, step


def gpt(args):
    from train_gpt import GPT, GPTConfig

    text = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
    if not text.is_file():
        text = pathlib.Path("/work/shared/data/tinyshakespeare.txt")
    data = text.read_text()[:200_000] if text.is_file() else "hello ember " * 20_000
    chars = sorted(set(data))
    tokens = torch.tensor([chars.index(c) for c in data], dtype=torch.long)
    cfg = GPTConfig(vocab_size=len(chars), block_size=64, n_layer=2, n_head=4, n_embd=64)
    cfg.dropout = 0.0
    torch.manual_seed(0)
    model = GPT(cfg).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(batch):
        xb, yb = batch
        _, loss = model(xb, yb)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Windows(tokens, cfg.block_size, 16 * args.steps), 16, step


def epoch(kind, loader, step, steps, consume_s):
    it = DeviceLoader(loader) if kind == "device_loader" else loader
    t0 = time.perf_counter()
    n = 0
    for batch in it:
        if kind == "plain":
            batch = [t.to(DEV, non_blocking=True) for t in batch]
        step(batch)
        if consume_s:
            time.sleep(consume_s)
        n += 1
    ember.sync()
    assert n == steps, (n, steps)
    return time.perf_counter() - t0


def run(name, build, setting, args):
    dataset, batch, step = build(args)
    produce = args.produce_ms / 1e3 if setting == "slow producer" else 0.0
    consume = args.consume_ms / 1e3 if setting == "slow consumer" else 0.0
    loader = DataLoader(
        dataset,
        batch_size=batch,
        shuffle=True,
        drop_last=True,
        num_workers=args.workers,
        collate_fn=slow_collate(produce) if produce else None,
        persistent_workers=args.workers > 0,
        generator=torch.Generator().manual_seed(0),
    )
    kinds = ("plain", "device_loader")
    for k in kinds:  # warm-up: graphs compiled, workers started
        epoch(k, loader, step, args.steps, consume)
    times = {k: [] for k in kinds}
    ratios = []
    for r in range(args.rounds):
        order = kinds if r % 2 == 0 else kinds[::-1]
        got = {k: epoch(k, loader, step, args.steps, consume) for k in order}
        for k in kinds:
            times[k].append(got[k])
        ratios.append(got["plain"] / got["device_loader"])
    row = {
        "pipeline": name,
        "setting": setting,
        "workers": args.workers,
        "steps": args.steps,
        "plain_ms_per_step": 1e3 * statistics.median(times["plain"]) / args.steps,
        "device_loader_ms_per_step": 1e3 * statistics.median(times["device_loader"]) / args.steps,
        "throughput_ratio": statistics.median(ratios),
    }
    print(
        f"{name:<7} {setting:<14} workers={args.workers}"
        f"  plain {row['plain_ms_per_step']:7.2f} ms/step"
        f"  DeviceLoader {row['device_loader_ms_per_step']:7.2f} ms/step"
        f"  throughput x{row['throughput_ratio']:.2f}",
        flush=True,
    )
    return row


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--pipelines", default="digits,gpt")
    p.add_argument("--settings", default="plain,slow producer,slow consumer")
    p.add_argument("--workers", type=int, default=1, help="DataLoader num_workers")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20, help="steps per timed epoch")
    p.add_argument("--produce-ms", type=float, default=5.0, help="slow producer: wait per batch")
    p.add_argument("--consume-ms", type=float, default=5.0, help="slow consumer: wait per step")
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args(argv)
    builders = {"digits": digits, "gpt": gpt}
    rows = []
    for name in args.pipelines.split(","):
        for setting in args.settings.split(","):
            rows.append(run(name, builders[name], setting, args))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
