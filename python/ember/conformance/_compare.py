"""Comparing an ember result with the eager-CPU oracle.

Tolerances follow PyTorch's own device-vs-CPU test, ``TestCommon.test_compare_cpu``
(test/test_ops.py): ``atol = rtol = 1e-4``, raised to ``torch.testing.assert_close``'s
default for the dtype where that is looser (bfloat16, float16) and to any
``toleranceOverride`` that the OpInfo attaches to ``test_compare_cpu`` for the dtype
(whatever device it names: those overrides record how far a correct non-CPU kernel may
drift from the CPU one). Integers and bool compare exactly. NaNs compare equal to NaNs,
strides are not compared (test_compare_cpu does not either).
"""

import math

import torch
from torch.testing._internal.common_device_type import toleranceOverride

# test_compare_cpu's tolerance (test/test_ops.py, "Lower tolerance because we are
# running this as a @slowTest").
_BASE_ATOL = 1e-4
_BASE_RTOL = 1e-4
# torch.testing.assert_close's defaults (torch/testing/_comparison.py), (rtol, atol).
_DTYPE_DEFAULTS = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex32: (1e-3, 1e-5),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


def tolerance(op, dtype, test_name="test_compare_cpu"):
    """(atol, rtol) for comparing ``op`` on ember with eager CPU at ``dtype``."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return 0.0, 0.0
    rtol_d, atol_d = _DTYPE_DEFAULTS.get(dtype, (0.0, 0.0))
    atol, rtol = max(_BASE_ATOL, atol_d), max(_BASE_RTOL, rtol_d)
    for info in getattr(op, "decorators", ()) or ():
        if getattr(info, "test_name", None) != test_name:
            continue
        if info.dtypes is not None and dtype not in info.dtypes:
            continue
        for dec in info.decorators:
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                atol = max(atol, dec.d[dtype].atol)
                rtol = max(rtol, dec.d[dtype].rtol)
    return atol, rtol


def tree_to_cpu(x):
    """Copies every tensor in a nested result to the CPU (detached)."""
    if isinstance(x, torch.Tensor):
        if x.device.type == "cpu":
            return x.detach()
        return x.detach().to("cpu")
    if isinstance(x, list):
        return [tree_to_cpu(v) for v in x]
    if isinstance(x, tuple) and not isinstance(x, torch.Size):  # incl. return_types.*
        return tuple(tree_to_cpu(v) for v in x)
    if isinstance(x, dict):
        return {k: tree_to_cpu(v) for k, v in x.items()}
    return x


def _flatten(x, path, out):
    if isinstance(x, (list, tuple)) and not isinstance(x, torch.Size):
        out.append((path, ("seq", len(x))))
        for i, v in enumerate(x):
            _flatten(v, f"{path}[{i}]", out)
    elif isinstance(x, dict):
        out.append((path, ("dict", tuple(sorted(map(str, x))))))
        for k in sorted(x, key=str):
            _flatten(x[k], f"{path}[{k!r}]", out)
    else:
        out.append((path, x))


def _max_abs_error(a, b):
    """max |a - b| over elements, NaN vs NaN counting as equal, inf vs other as inf."""
    if a.shape != b.shape or a.numel() == 0:
        return 0.0
    if a.is_sparse or b.is_sparse or a.layout != torch.strided or b.layout != torch.strided:
        a, b = a.to_dense(), b.to_dense()
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return float((a != b).any())
    if a.is_complex() or b.is_complex():
        a, b = (
            torch.view_as_real(a.to(torch.complex128)),
            torch.view_as_real(b.to(torch.complex128)),
        )
    a, b = a.to(torch.float64), b.to(torch.float64)
    both_nan = a.isnan() & b.isnan()
    same = (a == b) | both_nan
    diff = (a - b).abs()
    diff = torch.where(same, torch.zeros_like(diff), diff)
    diff = torch.where(diff.isnan(), torch.full_like(diff, math.inf), diff)
    return float(diff.max())


class Mismatch(Exception):
    """An ember result differs from its oracle; ``max_error`` is the largest absolute
    element difference (``inf`` for a structural difference: shape, dtype, type)."""

    def __init__(self, message, max_error):
        super().__init__(message)
        self.max_error = max_error


def compare(actual, expected, atol, rtol, values=True):
    """Raises Mismatch unless ``actual`` (ember, already on the CPU) matches ``expected``.

    Tensors: same shape, dtype and layout, values within ``atol + rtol * |expected|``
    (NaN == NaN; not compared when ``values`` is false). Sequences/dicts: element by
    element. Other values: ``==`` (only when ``values``).
    """
    fa, fe = [], []
    _flatten(actual, "out", fa)
    _flatten(expected, "out", fe)
    if [p for p, _ in fa] != [p for p, _ in fe]:
        raise Mismatch(
            f"result structure differs: {[p for p, _ in fa][:6]} vs {[p for p, _ in fe][:6]}",
            math.inf,
        )
    worst = 0.0
    first = None
    for (path, a), (_, e) in zip(fa, fe):
        if isinstance(e, torch.Tensor) or isinstance(a, torch.Tensor):
            if not (isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor)):
                raise Mismatch(
                    f"{path}: {type(a).__name__} where eager gives {type(e).__name__}", math.inf
                )
            if a.shape != e.shape or a.dtype != e.dtype or a.layout != e.layout:
                raise Mismatch(
                    f"{path}: {a.dtype}{list(a.shape)} ({a.layout}) where eager "
                    f"gives {e.dtype}{list(e.shape)} ({e.layout})",
                    math.inf,
                )
            if not values:
                continue
            try:
                torch.testing.assert_close(
                    a,
                    e,
                    atol=atol,
                    rtol=rtol,
                    equal_nan=True,
                    check_device=False,
                    check_stride=False,
                )
            except AssertionError as exc:
                err = _max_abs_error(a, e)
                worst = max(worst, err)
                if first is None:
                    first = f"{path}: " + " ".join(str(exc).split())[:300]
        elif not values:
            continue
        elif isinstance(e, float) and isinstance(a, float):
            if not (
                a == e or (math.isnan(a) and math.isnan(e)) or abs(a - e) <= atol + rtol * abs(e)
            ):
                worst = max(worst, abs(a - e))
                first = first or f"{path}: {a} != {e}"
        elif a != e and a is not e:
            raise Mismatch(f"{path}: {a!r} where eager gives {e!r}", math.inf)
    if first is not None:
        raise Mismatch(first, worst)


def identical(a, b):
    """True when two ember results are bit-identical (NaN == NaN): the flakiness check."""
    try:
        compare(a, b, 0.0, 0.0)
    except Mismatch:
        return False
    return True
