"""The op set under test: PyTorch's OpInfo database and what each entry supports.

An entry's key is ``name`` or ``name.variant_test_name`` (e.g. ``nn.functional.conv2d``,
``normal.in_place``), unique across ``op_db``.
"""

import fnmatch
import warnings

import torch

# Dtype names accepted on the command line (PyTorch's names, plus short forms).
DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "bool": torch.bool,
    "float64": torch.float64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "complex64": torch.complex64,
}
_SHORT = {
    "f32": "float32",
    "bf16": "bfloat16",
    "f16": "float16",
    "i64": "int64",
    "f64": "float64",
    "i32": "int32",
    "half": "float16",
    "float": "float32",
    "long": "int64",
}
DIRECTIONS = ("forward", "backward")

# Entries whose outputs are not a function of their inputs, beyond those OpInfo itself
# skips in test_compare_cpu with a reason (see value_skip_reason). OpInfo skips the first
# two there with the bare reason "Skipped!".
_EXTRA_NONDETERMINISTIC = {
    "empty_strided": "output is uninitialized memory",
    "normal.number_mean": "output is random",
    # OpInfo expects test_compare_cpu to fail on cuda/xpu for this (random) op.
    "nn.functional.alpha_dropout": "output is random (training=True samples)",
}
# Words in OpInfo's own skip reason for test_compare_cpu that mean "the values cannot be
# compared" (random outputs, uninitialized memory, unspecified order, undefined overflow).
_REASON_WORDS = ("non-deterministic", "nondeterministic", "undefined", "random")


def dtype_name(name):
    """Canonical dtype name for a command-line spelling; ValueError if unknown."""
    name = _SHORT.get(name, name)
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)}")
    return name


def op_key(op):
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def load_op_db():
    """{key: OpInfo} for every entry of torch's op_db, in op_db order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    return {op_key(op): op for op in op_db}


def select(keys, patterns):
    """Keys matching any of the comma-separated fnmatch ``patterns`` (all when None);
    a pattern starting with ``-`` removes matches instead."""
    if not patterns:
        return list(keys)
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    inc = [p for p in pats if not p.startswith("-")]
    exc = [p[1:] for p in pats if p.startswith("-")]
    out = []
    for k in keys:
        if inc and not any(fnmatch.fnmatchcase(k, p) for p in inc):
            continue
        if any(fnmatch.fnmatchcase(k, p) for p in exc):
            continue
        out.append(k)
    return out


def supports(op, dtype, direction):
    """Whether OpInfo says ``op`` runs on CPU at ``dtype`` (and differentiates there,
    for ``backward``)."""
    if dtype not in op.supported_dtypes("cpu"):
        return False
    if direction == "backward":
        return bool(op.supports_autograd) and dtype in op.supported_backward_dtypes("cpu")
    return True


def _skip_reason(decorator):
    """The reason of a ``unittest.skip(reason)`` decorator, else None."""
    if "skip" not in getattr(decorator, "__qualname__", ""):
        return None
    for cell in getattr(decorator, "__closure__", None) or ():
        if isinstance(cell.cell_contents, str):
            return cell.cell_contents
    return None


def value_skip_reason(op):
    """Why ``op``'s output values cannot be compared with eager CPU (random output,
    uninitialized memory, unspecified order), or None. Taken from OpInfo's own
    ``unittest.skip`` for ``TestCommon.test_compare_cpu`` when its reason says so,
    plus _EXTRA_NONDETERMINISTIC."""
    key = op_key(op)
    if key in _EXTRA_NONDETERMINISTIC:
        return _EXTRA_NONDETERMINISTIC[key]
    for info in getattr(op, "decorators", ()) or ():
        if getattr(info, "test_name", None) != "test_compare_cpu":
            continue
        if info.device_type not in (None, "cpu"):
            continue
        for dec in info.decorators:
            reason = _skip_reason(dec)
            if reason and any(w in reason.lower() for w in _REASON_WORDS):
                return reason
    return None
