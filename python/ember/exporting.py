"""``ember.export``: a model compiled by Ember as one artifact file, for serving without
Python (the C++ loader ``ember::LoadModel``, include/ember/export/model.h; the example
``examples/export/run_model.cpp``). The file's format: docs/architecture.md, "Export
artifacts".

The model is captured by ``torch.export.export`` (the standard entry point), then each
batch bucket's graph runs once on the lazy device — the same lowering table, passes,
fusion and native kernels as ``model.to("ember")`` — and the compiled program is stored:
the optimized IR text, the kernels (for this CPU and for a baseline x86-64-v3 CPU) with
their C++ sources, the weights (safetensors), the signature and the ATen externs by
schema.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import os
import platform
import tempfile

import torch

from . import _C
from .dynamo import _retarget_devices

__all__ = ["FORMAT_VERSION", "TARGETS", "EmberExportError", "export"]

# The container's format version (src/export/artifact_file.h, kArtifactFormatVersion)
# and the manifest's (src/export/model.cpp, kManifestVersion).
FORMAT_VERSION = 1
MANIFEST_VERSION = 1
# The IR text version the C++ loader checks (include/ember/ir/text.h, kIrTextVersion).
IR_TEXT_VERSION = 2
# Kernel targets: this CPU (-march=native) and the baseline.
TARGETS = ("native", "x86-64-v3")

_EMBER = torch.device("ember", 0)
_DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
}
_SAFETENSORS = {
    torch.float32: "F32",
    torch.float64: "F64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


class EmberExportError(RuntimeError):
    """A model, example or dynamic-shape declaration that ``ember.export`` cannot store."""


def export(
    model: torch.nn.Module,
    example_inputs,
    dynamic_shapes=None,
    path=None,
    *,
    batch_buckets=None,
    targets=TARGETS,
) -> str:
    """Writes `model` as one Ember artifact file at `path` and returns `path`.

    Args:
      model: a ``torch.nn.Module`` (put it in ``eval()`` mode first: a graph that draws
        random numbers or updates buffers, dropout or BatchNorm in training mode, is
        refused). A model whose parameters or buffers are on the ember device is moved
        to the CPU **in place** (``model.cpu()``) before ``torch.export.export`` captures
        it; move it back with ``model.to(ember.device())``.
      example_inputs: a tuple of tensors (CPU or ember), the forward's positional
        arguments.
      dynamic_shapes: as ``torch.export.export``'s. One dynamic dim is supported, the
        batch: the same ``torch.export.Dim`` (with ``max`` set) in every input that has
        it. A dim declared dynamic that ``torch.export`` specialized to the example's
        size (its ``Dim.AUTO``/``Dim.DYNAMIC`` never say so) raises
        ``EmberExportError`` naming the input and dim.
      path: the artifact file (written to a temporary file beside it, fsync'ed and
        renamed into place: a reader never sees a partial artifact).
      batch_buckets: the batch sizes to compile (each in the Dim's range; the range's
        max is always added). Default: the powers of two in the range, and its max. A
        served batch is padded with zeros to the smallest bucket that holds it and the
        results are sliced back, which is exact for models whose samples do not
        interact (no batch statistics).
      targets: kernel targets to compile, of ``TARGETS``. The loader uses ``native`` on a
        CPU with the exporting machine's features, else ``x86-64-v3``.

    Raises ``EmberExportError`` for what an artifact cannot hold: non-tensor inputs or
    outputs, more than one dynamic symbol, a dim expression other than the batch
    symbol, buffer mutations, random ops, outputs that are inputs themselves, and
    ``torch.export``'s own errors (its message included).
    """
    if path is None:
        raise EmberExportError("ember.export: give the artifact's path (path=...)")
    path = os.fspath(path)
    bad = [t for t in targets if t not in TARGETS]
    if bad or not targets:
        raise EmberExportError(f"ember.export: targets must be of {TARGETS}, got {targets}")
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    if any(t.device.type == "ember" for t in list(model.parameters()) + list(model.buffers())):
        model.cpu()  # documented: in place
    args = tuple(
        a.to("cpu") if isinstance(a, torch.Tensor) and a.device.type == "ember" else a
        for a in example_inputs
    )
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise EmberExportError(
                f"ember.export: example input {i} is a {type(a).__name__}; only tensor "
                f"inputs can be exported"
            )
    try:
        ep = torch.export.export(model, args, dynamic_shapes=dynamic_shapes)
    except Exception as e:
        raise EmberExportError(f"ember.export: torch.export.export failed: {e}") from e
    sig = _Signature(ep, model, args, dynamic_shapes)
    buckets = sig.buckets(batch_buckets)
    flat = sig.flat_state()
    fast = os.environ.get("EMBER_CODEGEN_FAST", "") == "1"
    vector_math = os.environ.get("EMBER_CODEGEN_VECTOR_MATH", "") != "0"

    entries = {}
    weights = {name: t for name, t in zip(sig.state_names, flat) if name is not None}
    schemas = set()
    for b in buckets:
        program, cap_inputs = _capture(ep, flat, sig.bucket_inputs(args, b), b)
        text, ir, constants, ext = _C.export_parts(program)
        schemas.update(ext)
        for j, c in enumerate(constants):
            weights[f"__constant.{b}.{j}"] = c
        entries[f"buckets/{b}/program.txt"] = text.encode()
        entries[f"buckets/{b}/graph.ir"] = (
            ir + f"// ember IR text version {IR_TEXT_VERSION}\n"
        ).encode()
        for target in targets:
            for f in _C.export_compile(ir, text, target, fast, vector_math):
                rel = "/".join(f.split("/")[-3:])  # kernels/<k0k1>/<file>
                with open(f, "rb") as fh:
                    entries[f"kernels/{target}/{rel}"] = fh.read()
        del program, cap_inputs
    entries["weights.safetensors"] = _safetensors(weights)
    entries["manifest.txt"] = sig.manifest(buckets, fast, vector_math, sorted(schemas)).encode()
    _write_container(path, entries)
    return path


class _Signature:
    """The exported program's inputs, outputs and batch dim (see export)."""

    def __init__(self, ep, model, args, dynamic_shapes):
        from torch.export.graph_signature import InputKind, OutputKind

        self.ep = ep
        gs = ep.graph_signature
        placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
        outputs = next(n for n in ep.graph.nodes if n.op == "output").args[0]
        self.state_names = []  # per flat input: weight name, or None for user input k
        self.user = []  # (name, fake value, flat index)
        for j, spec in enumerate(gs.input_specs):
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                self.state_names.append(spec.target)
            elif spec.kind == InputKind.USER_INPUT:
                val = placeholders[spec.arg.name].meta.get("val")
                if not isinstance(val, torch.Tensor):
                    raise EmberExportError(
                        f"ember.export: input {spec.arg.name} is not a tensor ({val!r})"
                    )
                self.state_names.append(None)
                self.user.append((spec.arg.name, val, j))
            else:
                raise EmberExportError(
                    f"ember.export: the exported program has an input of kind {spec.kind.name} "
                    f"({spec.arg.name}); only parameters, buffers, tensor constants and tensor "
                    f"inputs can be exported"
                )
        self.outputs = []  # (name, fake value)
        for spec, node in zip(gs.output_specs, outputs):
            if spec.kind != OutputKind.USER_OUTPUT:
                raise EmberExportError(
                    f"ember.export: the model updates {spec.target} in place ({spec.kind.name}); "
                    f"a served model must not mutate its state (model.eval() stops BatchNorm's "
                    f"running statistics)"
                )
            val = node.meta.get("val") if hasattr(node, "meta") else None
            if not isinstance(val, torch.Tensor):
                raise EmberExportError(
                    f"ember.export: output {spec.arg.name} is not a tensor ({val!r})"
                )
            self.outputs.append((spec.arg.name, val))
        self.symbol = None
        self.in_dims = [self._batch_dim(f"input {n}", v) for n, v, _ in self.user]
        self.out_dims = [self._batch_dim(f"output {n}", v) for n, v in self.outputs]
        self._check_declared(model, args, dynamic_shapes)
        self.lo = self.hi = None
        if self.symbol is not None:
            vr = ep.range_constraints.get(self.symbol)
            lo = int(vr.lower) if vr is not None else 1
            try:
                hi = int(vr.upper)
            except (TypeError, ValueError, OverflowError, AttributeError):  # int_oo: no bound
                hi = None
            if vr is None or hi is None or hi > 2**31:
                raise EmberExportError(
                    f"ember.export: the batch dim {self.symbol} has no upper bound; declare "
                    f"it with torch.export.Dim(..., max=N) (the loader compiles buckets up "
                    f"to N)"
                )
            self.lo, self.hi = max(lo, 1), hi

    def _batch_dim(self, what, val):
        """The index of `val`'s batch dim (-1 for none); refuses other symbolic dims."""
        found = -1
        for d, s in enumerate(val.shape):
            if _static(s):
                continue
            expr = s.node.expr
            if not expr.is_Symbol:
                raise EmberExportError(
                    f"ember.export: {what} dim {d} has size {expr}; only a plain batch dim "
                    f"can vary in an artifact"
                )
            if self.symbol is None:
                self.symbol = expr
            elif expr != self.symbol:
                raise EmberExportError(
                    f"ember.export: {what} dim {d} varies as {expr}, besides the batch "
                    f"{self.symbol}; one dynamic dim (the batch) is supported"
                )
            if found >= 0:
                raise EmberExportError(f"ember.export: {what} has the batch symbol twice")
            found = d
        return found

    def _check_declared(self, model, args, dynamic_shapes):
        """A dim the user declared dynamic must be symbolic in the exported program."""
        if dynamic_shapes is None:
            return
        spec = dynamic_shapes
        if isinstance(spec, dict):
            names = list(inspect.signature(model.forward).parameters)
            spec = [spec.get(n) for n in names[: len(args)]]
        for i, s in enumerate(spec):
            if i >= len(self.user) or s is None:
                continue
            dims = s.items() if isinstance(s, dict) else enumerate(s)
            name, val, _ = self.user[i]
            for d, decl in dims:
                if decl is None or decl is torch.export.Dim.STATIC:
                    continue
                if _static(val.shape[d]):
                    raise EmberExportError(
                        f"ember.export: input {name} dim {d} was declared dynamic ({decl}), "
                        f"but torch.export specialized it to {int(val.shape[d])} (the model's "
                        f"code fixes that size); drop the declaration or fix the model"
                    )

    def buckets(self, given):
        if self.symbol is None:
            if given:
                raise EmberExportError(
                    "ember.export: batch_buckets given, but no input has a dynamic dim"
                )
            return [0]  # one program at the example's sizes, stored as bucket 0
        if given:
            bs = sorted({int(b) for b in given} | {self.hi})
            bad = [b for b in bs if not self.lo <= b <= self.hi]
            if bad:
                raise EmberExportError(
                    f"ember.export: batch buckets {bad} are outside the batch range "
                    f"[{self.lo}, {self.hi}]"
                )
            return bs
        bs, p = set(), 1
        while p <= self.hi:
            if p >= self.lo:
                bs.add(p)
            p *= 2
        return sorted(bs | {self.hi})

    def flat_state(self):
        """The flat inputs' weights (dense copies), None at user input positions."""
        ep = self.ep
        out = []
        for name in self.state_names:
            if name is None:
                out.append(None)
                continue
            t = ep.state_dict[name] if name in ep.state_dict else ep.constants[name]
            out.append(t.detach().to("cpu").contiguous().clone())
        return out

    def bucket_inputs(self, args, b):
        """The example inputs at batch `b` (rows repeated cyclically)."""
        out = []
        for (_, _, _), d, a in zip(self.user, self.in_dims, args):
            if d < 0 or b == 0:
                out.append(a.detach().contiguous())
                continue
            idx = torch.arange(b) % a.shape[d]
            out.append(a.detach().index_select(d, idx).contiguous())
        return out

    def manifest(self, buckets, fast, vector_math, schemas):
        lines = [
            f"ember-manifest {MANIFEST_VERSION}",
            f"ir_text_version {IR_TEXT_VERSION}",
            f"ember_version {_ember_version()}",
            f"torch_version {torch.__version__.split('+')[0]}",
            f"native_cpu_features {_C.export_cpu_features()}",
            f"machine {platform.machine()}",
            f"codegen_fast {int(fast)}",
            f"codegen_vector_math {int(vector_math)}",
            f"batch {self.lo} {self.hi}" if self.symbol is not None else "batch none",
        ]
        lines += [f"bucket {b}" for b in buckets]
        for (name, val, _), d in zip(self.user, self.in_dims):
            lines.append(f"input {name} {_dtype(val.dtype)} {_sizes(val, d, self.lo)} {d}")
        for (name, val), d in zip(self.outputs, self.out_dims):
            lines.append(f"output {name} {_dtype(val.dtype)} {_sizes(val, d, self.lo)} {d}")
        k = 0
        for j, name in enumerate(self.state_names):
            if name is None:
                lines.append(f"fx {j} input {k}")
                k += 1
            else:
                lines.append(f"fx {j} weight {name}")
        lines += [f"extern_schema {s}" for s in schemas]
        return "\n".join(lines) + "\n"


def _capture(ep, flat, user_inputs, b):
    """Runs the exported graph once on the lazy device with the bucket's inputs and
    returns the captured program (src/torch/capture.h) and the inputs it was run on."""
    inputs = list(flat)
    it = iter(user_inputs)
    inputs = [next(it) if t is None else t for t in inputs]
    gm = copy.deepcopy(ep.graph_module)
    _retarget_devices(gm)  # factory ops (arange, full, ...) make ember tensors
    with torch.no_grad():
        _C.sync("ember.export")  # earlier pending work is not the model's
        ins = [_C.wrap_host(t) for t in inputs]
        generation, rng = _C.sync_generation(), _C.get_rng_state()
        foreign = _C.pending_state_ids()
        outs = gm(*ins)
        del ins
        flat_out = outs if isinstance(outs, (list, tuple)) else (outs,)
        lazy = [o for o in flat_out if isinstance(o, torch.Tensor) and o.device.type == "ember"]
        if len(lazy) != len(flat_out):
            raise EmberExportError(
                "ember.export: an output of the graph is not a tensor computed on the device"
            )
        if not torch.equal(rng, _C.get_rng_state()):
            _C.sync("ember.export")
            raise EmberExportError(
                "ember.export: the model draws random numbers (dropout in training mode?); "
                "call model.eval() first"
            )
        program, why = _C.capture(inputs, lazy, generation, foreign, "ember.export")
    if program is None:
        raise EmberExportError(f"ember.export: the batch-{b} program could not be captured: {why}")
    try:
        return program, inputs
    finally:
        del lazy, outs, flat_out


def _static(size) -> bool:
    """Whether an exported size is a number (an int, or a SymInt specialized to one)."""
    return isinstance(size, int) or size.node.expr.is_number


def _dtype(dt):
    if dt not in _DTYPES:
        raise EmberExportError(f"ember.export: dtype {dt} cannot be exported")
    return _DTYPES[dt]


def _sizes(val, d, lo):
    """`val`'s sizes, comma-separated, the batch dim `d` as the range's min `lo`."""
    return ",".join(str(lo) if i == d else str(int(s)) for i, s in enumerate(val.shape)) or "-"


def _ember_version():
    """Ember's version: pyproject.toml's, compiled into the extension (ember/version.h), so
    a development tree (PYTHONPATH=python) reports the same as an installed wheel."""
    return _C.__version__


def _safetensors(tensors) -> bytes:
    """The safetensors bytes of `tensors` (name -> CPU tensor), names sorted."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        if t.dtype not in _SAFETENSORS:
            raise EmberExportError(f"ember.export: weight {name} has dtype {t.dtype}")
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {
            "dtype": _SAFETENSORS[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [off, off + len(data)],
        }
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return len(h).to_bytes(8, "little") + h + b"".join(blobs)


def _write_container(path, entries):
    """The container (src/export/artifact_file.h), written atomically: a temporary file
    in the same directory, fsync'ed, renamed over `path`."""
    offsets, data, lines = {}, [], []
    off = 0
    for name in sorted(entries):
        blob = entries[name]
        if not name or any(c.isspace() for c in name):
            raise EmberExportError(f"ember.export: bad entry name {name!r}")
        sha = hashlib.sha256(blob).hexdigest()
        if sha not in offsets:
            offsets[sha] = off
            data.append(blob)
            off += len(blob)
        lines.append(f"entry {offsets[sha]} {len(blob)} {sha} {name}\n")
    header = "".join(lines).encode()
    pre = (
        b"EMBER-ARTIFACT\n"
        + f"format {FORMAT_VERSION}\n".encode()
        + f"header {len(header)} {hashlib.sha256(header).hexdigest()}\n".encode()
    )
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pre)
            f.write(header)
            for blob in data:
                f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
