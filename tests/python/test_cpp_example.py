"""examples/cpp (ember-train-mlp): an MLP trained with libtorch's C++ frontend on ember,
in a process without Python. The binary compares itself with eager CPU; this test
re-checks its printed losses (ember vs eager, loss falls) and that fallbacks are counted."""

import glob
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAME = "ember-train-mlp"


def find_binary() -> str:
    """$EMBER_CPP_EXAMPLE; else beside the extension being tested (EMBER_BUILD_DIR=
    <build>/src/torch -> <build>/examples/cpp); else the pip build tree of
    scripts/setup.sh (build-pip/<wheel tag>/examples/cpp)."""
    if os.environ.get("EMBER_CPP_EXAMPLE"):
        return os.environ["EMBER_CPP_EXAMPLE"]
    candidates = []
    if os.environ.get("EMBER_BUILD_DIR"):
        candidates.append(
            pathlib.Path(os.environ["EMBER_BUILD_DIR"]).parents[1] / "examples" / "cpp" / NAME
        )
    candidates += sorted(
        pathlib.Path(p)
        for p in glob.glob(str(ROOT / "build-pip" / "*" / "examples" / "cpp" / NAME))
    )
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    pytest.fail(
        f"{NAME} not built (looked in {[str(c) for c in candidates]}): run scripts/setup.sh, "
        f"or `ninja -C <build> {NAME}` with EMBER_BUILD_DIR=<build>/src/torch"
    )


def test_cpp_mlp_trains_on_ember(tmp_path):
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run(
        [find_binary(), "--steps", "30"], capture_output=True, text=True, timeout=600, env=env
    )
    out = r.stdout
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{out}\nstderr:\n{r.stderr}"
    rows = [
        tuple(map(float, m.groups()[1:]))
        for m in re.finditer(r"^\s*(\d+)\s+([-\d.]+)\s+([-\d.]+)\s*$", out, re.M)
    ]
    assert len(rows) >= 5, out
    for ember_loss, eager_loss in rows:
        assert ember_loss == pytest.approx(eager_loss, rel=1e-4), out
    assert rows[-1][0] < 0.5 * rows[0][0], out  # the loss falls
    m = re.search(r"^fallbacks: (\d+)$", out, re.M)
    assert m, out
    listed = re.findall(r"^  (\S+)\s+(\d+)$", out, re.M)
    assert sum(int(n) for _, n in listed) == int(m.group(1)), out
    g = re.search(r"(\d+) graphs compiled", out)
    # A few graphs (the first step also creates AdamW's state; fallbacks split a step
    # into segments), not one per step.
    assert g and 1 <= int(g.group(1)) <= 8, out
    assert out.rstrip().endswith("OK")
