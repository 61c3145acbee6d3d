import os
import tempfile

import pytest
import torch

# A fresh graph disk cache for each test session, so compile counts are deterministic.
os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-test-cache-")
# Native kernels (backend "cpu") at -O1: the suite tests semantics, and every new graph
# runs the system compiler once (the cache above starts empty).
os.environ.setdefault("EMBER_CODEGEN_FAST", "1")

import ember  # noqa: E402

DEV = torch.device("ember")

# Tests compile many different graphs from the same helper line; the per-call-site
# recompile warning is tested on its own (test_sync.py).
ember.config.recompile_warn_limit = 1_000_000


@pytest.fixture(autouse=True)
def _fresh_metrics():
    ember.sync()
    ember.metrics.clear()
    yield


def close(a, b, **kw):
    """assert_close between an ember result and an eager CPU oracle."""
    if isinstance(a, torch.Tensor) and a.device.type == "ember":
        a = a.cpu()
    torch.testing.assert_close(a, b, **kw)


def _expected_failures():
    import pathlib

    out = {}
    path = pathlib.Path(__file__).with_name("expected_failures.txt")
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        node, reason = (part.strip() for part in line.split("|", 1))
        out[node] = reason
    return out


def pytest_collection_modifyitems(config, items):
    # "<node id>@<backend>[,<backend>...]": expected to fail only on those backends
    # (ember.config.backend at collection: the default, or $EMBER_BACKEND)
    xfails = {}
    for node, reason in _expected_failures().items():
        node, _, backends = node.partition("@")
        if not backends or ember.config.backend in backends.split(","):
            xfails[node] = reason
    for item in items:
        key = item.nodeid.split("tests/python/")[-1]
        if key in xfails:
            item.add_marker(pytest.mark.xfail(reason=xfails[key], strict=True))
