"""The same training script run twice, in two fresh processes, gives bit-identical
results (weights, losses, dropout masks through the ember generator, shuffled data)."""

import os
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent("""
    import hashlib
    import torch, torch.nn.functional as F
    import ember
    torch.manual_seed(0)
    ember.manual_seed(0)
    dev = ember.device()
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(32, 3)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.utils.data.TensorDataset(torch.randn(40, 10), torch.randint(0, 3, (40,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True,
                                         generator=torch.Generator().manual_seed(1))
    losses = []
    for epoch in range(2):
        for x, y in loader:
            loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    h.update(torch.stack(losses).cpu().numpy().tobytes())
    print("DIGEST", h.hexdigest(), ember.metrics.counters()["graphs_compiled"])
""")


def _run(tmp_path, cache):
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / cache))
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("DIGEST")][0]
    _, digest, compiled = line.split()
    return digest, int(compiled)


def test_same_script_twice_is_bit_identical(tmp_path):
    d1, c1 = _run(tmp_path, "cache")
    d2, c2 = _run(tmp_path, "cache")  # second run: graphs come from the disk cache
    d3, _ = _run(tmp_path, "other")  # a cold cache computes the same bits
    assert d1 == d2 == d3
    assert c1 >= 1 and c2 == 0, (c1, c2)
