"""The conformance harness itself (python/ember/conformance): comparison, the
expected-failure checker, and crash/hang isolation of worker subprocesses."""

import math
import os

import pytest
import torch

from ember.conformance import _compare, _driver, _expected


def test_compare_accepts_within_tolerance_and_nan():
    e = torch.tensor([1.0, float("nan"), -2.0])
    _compare.compare(e + 1e-6, e, atol=1e-4, rtol=1e-4)


def test_compare_reports_max_error():
    e = torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(_compare.Mismatch) as info:
        _compare.compare((e + torch.tensor([0.0, 0.5, 0.25]),), (e,), atol=1e-4, rtol=1e-4)
    assert info.value.max_error == pytest.approx(0.5)


def test_compare_structure_and_dtype_are_mismatches():
    e = torch.zeros(2, 3)
    with pytest.raises(_compare.Mismatch) as info:
        _compare.compare(e.double(), e, atol=1, rtol=1)
    assert math.isinf(info.value.max_error)
    with pytest.raises(_compare.Mismatch):
        _compare.compare((e, e), (e,), atol=1, rtol=1)
    with pytest.raises(_compare.Mismatch):
        _compare.compare(3, 4, atol=0, rtol=0)
    # metadata-only comparison ignores values but not shapes
    _compare.compare(e + 5, e, atol=0, rtol=0, values=False)
    with pytest.raises(_compare.Mismatch):
        _compare.compare(torch.zeros(3, 2), e, atol=0, rtol=0, values=False)


def test_identical_is_bitwise():
    a = torch.tensor([1.0, float("nan")])
    assert _compare.identical(a, a.clone())
    assert not _compare.identical(a, a + 1e-7)


def test_tolerance_follows_opinfo_overrides():
    from torch.testing._internal.common_device_type import tol, toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo

    class FakeOp:
        decorators = (
            DecorateInfo(
                toleranceOverride({torch.float32: tol(atol=1e-2, rtol=0)}),
                "TestCommon",
                "test_compare_cpu",
                device_type="cuda",
            ),
        )

    assert _compare.tolerance(FakeOp(), torch.float32) == (1e-2, 1e-4)
    assert _compare.tolerance(FakeOp(), torch.bfloat16) == (1e-4, 1.6e-2)
    assert _compare.tolerance(FakeOp(), torch.int64) == (0.0, 0.0)


EXPECTED = """
# comment
abs float32 forward error ember: something
sin float32 backward@cpu mismatch codegen rounds differently
tan float32 forward any flaky on purpose
"""


def _res(outcome, message=None):
    return {"outcome": outcome, "message": message}


def test_expected_checker_new_fixed_changed_stale():
    entries = _expected.parse(EXPECTED)
    ok = [
        (
            "interpreter",
            {
                ("abs", "float32", "forward"): _res("error"),
                ("sin", "float32", "backward"): _res("pass"),
                ("tan", "float32", "forward"): _res("pass"),
            },
        ),
        ("cpu", {("sin", "float32", "backward"): _res("mismatch")}),
    ]
    assert _expected.check(ok, entries) == []
    bad = [
        (
            "interpreter",
            {
                ("abs", "float32", "forward"): _res("pass"),
                ("cos", "float32", "forward"): _res("mismatch", "boom"),
            },
        ),
        ("cpu", {("sin", "float32", "backward"): _res("error", "x")}),
    ]
    problems = _expected.check(bad, entries, known_ops={"abs", "sin", "cos"})
    text = "\n".join(problems)
    assert "NO LONGER FAILS abs float32 forward [backend interpreter]: pass" in text
    assert "NEW FAILURE cos float32 forward" in text
    assert "CHANGED sin float32 backward [backend cpu]" in text
    assert "STALE line 5: OpInfo has no entry 'tan'" in text
    assert len(problems) == 4


def test_expected_parse_errors_name_the_line():
    with pytest.raises(ValueError, match=":2:"):
        _expected.parse("abs float32 forward error why\nabs float32 sideways error why\n")
    with pytest.raises(ValueError, match="outcome"):
        _expected.parse("abs float32 forward broken why\n")


def test_expected_render_merges_backends_and_keeps_reasons():
    entries = _expected.parse(
        "abs float32 forward error a kept reason\nzeta float32 forward error not run this time\n"
    )
    runs = [
        (
            "interpreter",
            {
                ("abs", "float32", "forward"): _res("error"),
                ("sin", "float32", "forward"): _res("mismatch"),
                ("cos", "float32", "forward"): _res("pass"),
            },
        ),
        (
            "cpu",
            {
                ("abs", "float32", "forward"): _res("error"),
                ("sin", "float32", "forward"): _res("pass"),
            },
        ),
    ]
    text = _expected.render(runs, entries, lambda r: "new: " + r["outcome"])
    assert text.splitlines() == [
        "abs float32 forward error a kept reason",
        "sin float32 forward@interpreter mismatch new: mismatch",
        "zeta float32 forward error not run this time",
    ]
    assert _expected.check(runs, _expected.parse(text)) == []


def test_driver_isolates_crashes_and_hangs():
    """A worker that aborts or hangs costs only the item it was running; the sweep goes
    on in a fresh worker."""
    env = dict(os.environ, EMBER_CONFORMANCE_FAULT="abort:boom,hang:slow")
    items = [
        {"op": "boom", "dtype": "float32", "direction": "forward"},
        {"op": "slow", "dtype": "float32", "direction": "forward"},
    ]
    results, info = _driver.run_items(items, jobs=1, timeout=4, env=env)
    assert info["torch"] == torch.__version__
    r = results[("boom", "float32", "forward")]
    assert r["outcome"] == "error" and r["message"].startswith("crashed (signal SIGABRT)")
    r = results[("slow", "float32", "forward")]
    assert r["outcome"] == "error" and r["message"].startswith("timeout: no result after 4 s")
