"""ember.export (python/ember/exporting.py) round trips through the C++ loader
(ember::LoadModel, include/ember/export/model.h), run in a process without Python: the
example binary examples/export/run_model.cpp (`ember-run-model`). Outputs are compared
with eager CPU; broken artifacts must be refused with a clear error."""

import glob
import hashlib
import json
import os
import pathlib
import subprocess

import pytest
import torch

import ember
from ember import exporting
from ember.exporting import EmberExportError

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAME = "ember-run-model"


def find_binary() -> str:
    """$EMBER_RUN_MODEL; else beside the extension being tested (EMBER_BUILD_DIR=
    <build>/src/torch -> <build>/examples/export); else scripts/setup.sh's pip build tree."""
    if os.environ.get("EMBER_RUN_MODEL"):
        return os.environ["EMBER_RUN_MODEL"]
    candidates = []
    if os.environ.get("EMBER_BUILD_DIR"):
        candidates.append(
            pathlib.Path(os.environ["EMBER_BUILD_DIR"]).parents[1] / "examples" / "export" / NAME
        )
    candidates += sorted(
        pathlib.Path(p)
        for p in glob.glob(str(ROOT / "build-pip" / "*" / "examples" / "export" / NAME))
    )
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    pytest.fail(f"{NAME} not built (looked in {[str(c) for c in candidates]})")


def load_safetensors(path):
    """name -> tensor of a safetensors file (8-byte header length, JSON header, bytes)."""
    data = pathlib.Path(path).read_bytes()
    n = int.from_bytes(data[:8], "little")
    dtypes = {v: k for k, v in exporting._SAFETENSORS.items()}
    out = {}
    for name, e in json.loads(data[8 : 8 + n]).items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = torch.frombuffer(bytearray(data[8 + n + a : 8 + n + b]), dtype=torch.uint8)
        out[name] = raw.view(dtypes[e["dtype"]]).reshape(e["shape"])
    return out


def run_model(artifact, inputs, tmp_path, *args):
    """Runs the binary on `inputs`; returns (returncode, stdout, stderr, outputs)."""
    inp = tmp_path / "in.safetensors"
    out = tmp_path / "out.safetensors"
    if out.exists():
        out.unlink()
    blob = exporting._safetensors({f"input.{i}": t for i, t in enumerate(inputs)})
    inp.write_bytes(blob)
    r = subprocess.run(
        [find_binary(), str(artifact), "--inputs", str(inp), "--outputs", str(out), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    outs = None
    if r.returncode == 0:
        d = load_safetensors(out)
        outs = [d[f"output.{k}"] for k in range(len(d))]
    return r.returncode, r.stdout, r.stderr, outs


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.norm = torch.nn.LayerNorm(64)
        self.fc2 = torch.nn.Linear(64, 8)

    def forward(self, x):
        h = torch.relu(self.norm(self.fc1(x)))
        return self.fc2(h), h.sum(-1)


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2)
        self.fc = torch.nn.Linear(8 * 3 * 3, 10)

    def forward(self, x):
        h = torch.relu(self.conv1(x))
        h = torch.nn.functional.max_pool2d(h, 2)
        h = torch.relu(self.conv2(h))
        return self.fc(h.flatten(1))


@pytest.fixture(scope="module")
def mlp_artifact(tmp_path_factory):
    torch.manual_seed(0)
    model = MLP().eval().to(ember.device())  # on ember: export moves it to the CPU
    x = torch.randn(3, 32)
    batch = torch.export.Dim("batch", min=1, max=8)
    path = tmp_path_factory.mktemp("mlp") / "mlp.ember"
    out = ember.export(model, (x,), dynamic_shapes=({0: batch},), path=path, batch_buckets=[4])
    assert out == str(path)
    assert all(p.device.type == "cpu" for p in model.parameters())
    return path, model


def test_mlp_round_trip_in_cpp_threads(mlp_artifact, tmp_path):
    path, model = mlp_artifact
    x = torch.randn(3, 32)  # batch 3: padded into bucket 4, sliced back
    rc, out, err, outs = run_model(path, [x], tmp_path, "--threads", "4")
    assert rc == 0, out + err
    assert "buckets: 4 8" in out, out
    assert "target: native" in out, out
    assert "kernels built at load: 0" in out, out  # loaded from the artifact
    with torch.no_grad():
        want = model(x)
    assert [tuple(o.shape) for o in outs] == [(3, 8), (3,)]
    for got, exp in zip(outs, want):
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)


def _has_x86_64_v3():
    try:
        flags = pathlib.Path("/proc/cpuinfo").read_text().split("flags", 1)[1].split("\n", 1)[0]
    except (OSError, IndexError):
        return False
    return all(f in flags.split() for f in ("avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"))


@pytest.mark.skipif(not _has_x86_64_v3(), reason="this CPU cannot run x86-64-v3 code")
def test_mlp_baseline_kernels_and_largest_bucket(mlp_artifact, tmp_path):
    path, model = mlp_artifact
    x = torch.randn(8, 32)
    rc, out, err, outs = run_model(path, [x], tmp_path, "--target", "x86-64-v3")
    assert rc == 0, out + err
    assert "target: x86-64-v3" in out, out
    assert "kernels built at load: 0" in out, out
    with torch.no_grad():
        want = model(x)
    for got, exp in zip(outs, want):
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)


def test_batch_outside_the_range_is_refused(mlp_artifact, tmp_path):
    path, _ = mlp_artifact
    rc, out, err, _ = run_model(path, [torch.randn(9, 32)], tmp_path)
    assert rc == 1, out + err
    assert "batch size 9" in err and "[1, 8]" in err, err
    rc, out, err, _ = run_model(path, [torch.randn(2, 31)], tmp_path)
    assert rc == 1 and "expected sizes [1, 32], got [2, 31]" in err, err


def test_the_loader_process_has_no_python():
    r = subprocess.run(
        ["ldd", find_binary()], check=False, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert "libtorch_cpu" in r.stdout and "ember_torch" in r.stdout, r.stdout
    assert "libpython" not in r.stdout and "torch_python" not in r.stdout, r.stdout


def test_conv_net_round_trip(tmp_path):
    torch.manual_seed(1)
    model = ConvNet().eval()
    x = torch.randn(2, 3, 16, 16)
    path = ember.export(model, (x,), path=tmp_path / "conv.ember", targets=("native",))
    x2 = torch.randn(2, 3, 16, 16)
    rc, out, err, outs = run_model(path, [x2], tmp_path)
    assert rc == 0, out + err
    assert "buckets: 0" in out, out  # static shapes: one program
    with torch.no_grad():
        torch.testing.assert_close(outs[0], model(x2), rtol=1e-4, atol=1e-5)


def _entries(path):
    """The container's entries (name -> bytes), read as src/export/artifact_file.h says."""
    data = pathlib.Path(path).read_bytes()
    lines = data.split(b"\n", 3)
    size = int(lines[2].split()[1])
    header, body = lines[3][:size], lines[3][size:]
    out = {}
    for line in header.decode().splitlines():
        _, off, n, _, name = line.split()
        out[name] = body[int(off) : int(off) + int(n)]
    return out


def test_broken_artifacts_are_refused(mlp_artifact, tmp_path):
    path, _ = mlp_artifact
    good = pathlib.Path(path).read_bytes()
    x = [torch.randn(2, 32)]
    cases = {}
    flipped = bytearray(good)
    flipped[-100] ^= 0xFF  # inside the last entry's bytes
    cases["corrupt"] = (bytes(flipped), "does not match its SHA-256")
    cases["truncated"] = (good[: len(good) - 1000], "truncated")
    cases["format"] = (good.replace(b"format 1\n", b"format 9\n", 1), "format version 9")
    entries = _entries(path)
    manifest = entries["manifest.txt"].replace(b"ir_text_version 2", b"ir_text_version 99")
    other = tmp_path / "ir99.ember"
    exporting._write_container(str(other), dict(entries, **{"manifest.txt": manifest}))
    cases["ir"] = (other.read_bytes(), "IR text version 99")
    cases["not"] = (b"PK\x03\x04 a zip file", "not an ember artifact")
    for kind, (blob, message) in cases.items():
        bad = tmp_path / f"{kind}.ember"
        bad.write_bytes(blob)
        rc, out, err, _ = run_model(bad, x, tmp_path)
        assert rc == 1, (kind, out, err)
        assert message in err, (kind, err)
    # The original still loads: the refusals changed nothing.
    assert hashlib.sha256(pathlib.Path(path).read_bytes()).digest() == hashlib.sha256(good).digest()


class Fixed(torch.nn.Module):
    def forward(self, x):
        return x.reshape(4, -1).sum(0)  # fixes the batch to 4


def test_a_declared_dynamic_dim_that_export_specialized_is_an_error(tmp_path):
    with pytest.raises(EmberExportError, match=r"input x dim 0 was declared dynamic"):
        ember.export(
            Fixed(),
            (torch.randn(4, 3),),
            dynamic_shapes=({0: torch.export.Dim.AUTO},),
            path=tmp_path / "f.ember",
        )
    assert not (tmp_path / "f.ember").exists()


def test_unbounded_batch_and_bad_buckets_are_errors(tmp_path):
    x = torch.randn(3, 32)
    with pytest.raises(EmberExportError, match=r"no upper bound"):
        ember.export(
            MLP().eval(), (x,), dynamic_shapes=({0: torch.export.Dim("b")},), path=tmp_path / "a"
        )
    with pytest.raises(EmberExportError, match=r"outside the batch range \[1, 8\]"):
        ember.export(
            MLP().eval(),
            (x,),
            dynamic_shapes=({0: torch.export.Dim("b", min=1, max=8)},),
            path=tmp_path / "a",
            batch_buckets=[16],
        )


def test_char_gpt_round_trip_with_batch_buckets(tmp_path):
    import sys

    sys.path.insert(0, str(ROOT / "examples"))
    import train_gpt

    class LM(torch.nn.Module):  # logits only (forward also returns loss=None)
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, idx):
            return self.m(idx)[0]

    torch.manual_seed(0)
    cfg = train_gpt.GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16)
    model = LM(train_gpt.GPT(cfg)).eval()
    batch = torch.export.Dim("batch", min=1, max=2)
    path = ember.export(
        model,
        (torch.randint(0, 65, (2, 16)),),
        dynamic_shapes=({0: batch},),
        path=tmp_path / "gpt.ember",
        targets=("native",),
    )
    idx = torch.randint(0, 65, (1, 16))
    rc, out, err, outs = run_model(path, [idx], tmp_path, "--threads", "2")
    assert rc == 0, out + err
    assert "buckets: 1 2" in out, out
    with torch.no_grad():
        torch.testing.assert_close(outs[0], model(idx), rtol=1e-4, atol=1e-5)


def test_hf_gpt2_forward_round_trip_with_an_aten_extern(tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()

    class LM(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=96,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="sdpa",
    )
    model = LM(transformers.GPT2LMHeadModel(cfg)).eval()
    ids = torch.randint(0, 96, (2, 16))
    path = ember.export(model, (ids,), path=tmp_path / "gpt2.ember", targets=("native",))
    manifest = _entries(path)["manifest.txt"].decode()
    # HF's position ids (cumsum of the mask) run as an ATen extern, found in C++ through
    # the c10 dispatcher by its schema.
    assert "extern_schema aten::cumsum" in manifest, manifest
    ids2 = torch.randint(0, 96, (2, 16))
    rc, out, err, outs = run_model(path, [ids2], tmp_path)
    assert rc == 0, out + err
    with torch.no_grad():
        torch.testing.assert_close(outs[0], model(ids2), rtol=1e-4, atol=1e-5)
