"""``ember.export_stablehlo``: a model's optimized Ember IR as StableHLO MLIR text, the
input of XLA and the other OpenXLA compilers (issue 19, item 5).

The model goes the way of ``ember.export`` (python/ember/exporting.py): captured by
``torch.export.export`` and compiled by the lazy device, so the text is the graph Ember
itself runs (after simplification and fusion; each fusion's body is inlined). The
function ``@main`` takes the user's inputs in order and returns the outputs; weights,
buffers and scalars are constants of the module (``dense<"0x...">``, exact bytes).

Only static shapes. Ops are written in MLIR's generic form (``"stablehlo.add"(...)``);
``erf`` is ``chlo.erf`` (XLA legalizes it). Refused with ``EmberExportError`` listing
the ops: a graph with ATen externs (custom-calls to ATen kernels have no StableHLO
form), ember's RNG ops (``rng-uniform``/``rng-normal``: Philox streams XLA does not
reproduce), and ops this printer does not write yet.
"""

from __future__ import annotations

import math
import os
import re
import struct

import torch

from . import _C
from .exporting import EmberExportError, _capture, _Signature

__all__ = ["export_stablehlo"]

_TYPES = {
    "f32": "f32",
    "f64": "f64",
    "f16": "f16",
    "bf16": "bf16",
    "s64": "i64",
    "s32": "i32",
    "s16": "i16",
    "s8": "i8",
    "u8": "ui8",
    "pred": "i1",
}
_BINARY = {
    "add": "add",
    "subtract": "subtract",
    "multiply": "multiply",
    "divide": "divide",
    "maximum": "maximum",
    "minimum": "minimum",
    "power": "power",
    "remainder": "remainder",
    "and": "and",
    "or": "or",
    "xor": "xor",
    "atan2": "atan2",
}
_UNARY = {
    "negate": "stablehlo.negate",
    "exponential": "stablehlo.exponential",
    "exponential-minus-one": "stablehlo.exponential_minus_one",
    "log": "stablehlo.log",
    "log-plus-one": "stablehlo.log_plus_one",
    "tanh": "stablehlo.tanh",
    "logistic": "stablehlo.logistic",
    "rsqrt": "stablehlo.rsqrt",
    "sqrt": "stablehlo.sqrt",
    "abs": "stablehlo.abs",
    "floor": "stablehlo.floor",
    "ceil": "stablehlo.ceil",
    "sign": "stablehlo.sign",
    "sine": "stablehlo.sine",
    "cosine": "stablehlo.cosine",
    "not": "stablehlo.not",
    "round-nearest-even": "stablehlo.round_nearest_even",
    "erf": "chlo.erf",
}
_REDUCE = {"add": "add", "multiply": "multiply", "maximum": "maximum", "minimum": "minimum"}
_RNG = ("rng-uniform", "rng-normal", "rng-bit-generator")


def export_stablehlo(model: torch.nn.Module, example_inputs, path=None) -> str:
    """The StableHLO MLIR text of `model` at `example_inputs`' shapes (written to `path`
    too when given). `model` as for ``ember.export`` (eval mode; on ember it is moved to
    the CPU in place). Raises ``EmberExportError`` for ATen externs, RNG ops and ops
    without a StableHLO form here, listing them (and for what ``ember.export``
    refuses)."""
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    if any(t.device.type == "ember" for t in list(model.parameters()) + list(model.buffers())):
        model.cpu()
    args = tuple(a.to("cpu") if a.device.type == "ember" else a for a in example_inputs)
    try:
        ep = torch.export.export(model, args)
    except Exception as e:
        raise EmberExportError(f"ember.export_stablehlo: torch.export.export failed: {e}") from e
    sig = _Signature(ep, model, args, None)
    flat = sig.flat_state()
    program, _ = _capture(ep, flat, sig.bucket_inputs(args, 0), 0)
    text, ir, constants, externs = _C.export_parts(program)
    del program
    bad = sorted(set(externs))
    bad += sorted(set(re.findall(r"\b(" + "|".join(_RNG) + r")\(", ir)))
    if bad:
        raise EmberExportError(
            "ember.export_stablehlo: the graph has ops with no StableHLO form: "
            + ", ".join(bad)
            + " (ATen externs run ATen's own kernels; ember's RNG ops are Philox streams)"
        )
    graphs = _parse(ir)
    entry = graphs[next(iter(graphs))]
    params = _program_params(text)
    user_of_flat = {}
    k = 0
    for j, name in enumerate(sig.state_names):
        if name is None:
            user_of_flat[j] = k
            k += 1
    out = _Printer(graphs, params, flat, constants, user_of_flat, args).module(entry)
    if path is not None:
        tmp = os.fspath(path) + ".tmp"
        with open(tmp, "w") as f:
            f.write(out)
        os.replace(tmp, path)
    return out


class _Node:
    __slots__ = ("args", "attrs", "calls", "dims", "dtype", "id", "op")


class _Graph:
    def __init__(self, name):
        self.name, self.nodes, self.root, self.params = name, {}, [], []

    def ops(self):
        return {n.op for n in self.nodes.values()}


_LINE = re.compile(r"^\s*%(\S+) = (\S+) ([a-z][a-z0-9-]*)\((.*?)\)(, .*)?$")


def _split_attrs(s):
    out, depth, cur = [], 0, ""
    for c in s:
        if c in "{(":
            depth += 1
        elif c in "})":
            depth -= 1
        if c == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
    if cur.strip():
        out.append(cur.strip())
    return out


def _parse(ir):
    """Ember IR text (src/ir/text.cc's grammar, the subset a lowered graph prints) ->
    name -> _Graph, the entry first."""
    graphs, g = {}, None
    for raw in ir.splitlines():
        line = raw.split(" // ", 1)[0].rstrip()
        if line.startswith("//") or not line.strip():
            continue
        if line.startswith("graph "):
            g = _Graph(line[6 : line.index("(")])
            graphs[g.name] = g
            continue
        s = line.strip()
        if s == "}":
            continue
        if s.startswith("ROOT"):
            g.root = [t.strip().lstrip("%") for t in s[4:].strip(" ()").split(",") if t.strip()]
            continue
        if s.startswith("ALIAS"):
            continue
        m = _LINE.match(line)
        if not m:
            raise EmberExportError(f"ember.export_stablehlo: cannot read IR line {s!r}")
        n = _Node()
        n.id, shape, n.op, inner, rest = m.groups()
        if shape.startswith("("):
            raise EmberExportError(f"ember.export_stablehlo: tuple-valued {n.op} (%{n.id})")
        n.dtype, dims = shape[:-1].split("[")
        n.dims = [int(d) for d in dims.split(",") if d]
        n.args = inner
        n.attrs, n.calls = {}, None
        for a in _split_attrs(rest[1:] if rest else ""):
            key, _, val = a.partition("=")
            if key == "calls":
                n.calls = val
            else:
                n.attrs[key] = val
        g.nodes[n.id] = n
    return graphs


def _ints(v):
    v = v.strip("{}")
    return [int(x) for x in v.split(",") if x.strip()]


def _program_params(text):
    """The program text's `param` records (src/export/program.h), in order."""
    out = []
    for line in text.splitlines():
        t = line.split()
        if t and t[0] == "param":
            out.append(t[1:])
    return out


def _dense_permutation(sizes, strides):
    """Dims outermost first by stride (src/torch/binding.h, dense_permutation)."""
    return sorted(range(len(sizes)), key=lambda d: (-strides[d], d))


class _Printer:
    def __init__(self, graphs, params, flat, constants, user_of_flat, args):
        self.graphs, self.params, self.flat = graphs, params, flat
        self.constants, self.user_of_flat, self.args = constants, user_of_flat, args
        self.lines, self.n = [], 0

    def fresh(self):
        self.n += 1
        return f"%v{self.n}"

    @staticmethod
    def ty(dtype, dims):
        if dtype not in _TYPES:
            raise EmberExportError(f"ember.export_stablehlo: dtype {dtype}")
        return "tensor<" + "".join(f"{d}x" for d in dims) + _TYPES[dtype] + ">"

    def emit(self, op, operands, types_in, ty_out, attrs="", region=""):
        v = self.fresh()
        a = f" {{{attrs}}}" if attrs else ""
        self.lines.append(
            f'    {v} = "{op}"({", ".join(operands)}){region}{a} : '
            f"({', '.join(types_in)}) -> {ty_out}"
        )
        return v

    def constant_bytes(self, t, dtype, dims):
        t = t.contiguous()
        if dtype == "pred":
            t = t.to(torch.uint8)
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        if dtype == "pred" or t.numel() == 1:
            vals = t.reshape(-1).tolist()
            if len(set(vals)) == 1:
                return self.splat(vals[0], dtype, dims)
        ty = self.ty(dtype, dims)
        return self.emit(
            "stablehlo.constant", [], [], ty, f'value = dense<"0x{raw.hex().upper()}"> : {ty}'
        )

    def splat(self, v, dtype, dims):
        ty = self.ty(dtype, dims)
        if dtype == "pred":
            lit = "true" if v else "false"
        elif dtype in ("f32", "f64", "f16", "bf16"):
            v = float(v)
            if math.isfinite(v):
                lit = f"{v:.17e}"  # MLIR's float literal: digits '.' digits 'e' exponent
            else:  # bit pattern
                fmt = {"f32": ("<f", "<I", 8), "f64": ("<d", "<Q", 16)}.get(dtype)
                if fmt is None:
                    raise EmberExportError(f"ember.export_stablehlo: non-finite {dtype} constant")
                bits = struct.unpack(fmt[1], struct.pack(fmt[0], v))[0]
                lit = f"0x{bits:0{fmt[2]}X}"
        else:
            lit = str(int(v))
        return self.emit("stablehlo.constant", [], [], ty, f"value = dense<{lit}> : {ty}")

    def module(self, g):
        args_sig, env = [], {}
        user_args = {}  # core parameter -> user input
        for i, rec in enumerate(self.params):
            if rec[0] == "input" and self.flat[int(rec[1])] is None:
                k = self.user_of_flat[int(rec[1])]
                a = self.args[k]
                whole = (
                    rec[2] == "0"
                    and [int(x) for x in rec[3].split(",") if rec[3] != "-"] == list(a.shape)
                    and int(rec[5]) == 0
                    and [int(x) for x in rec[4].split(",") if rec[4] != "-"]
                    == list(a.contiguous().stride())
                )
                if not whole or k in user_args.values():
                    raise EmberExportError(
                        f"ember.export_stablehlo: user input {k} is read through a view "
                        f"(sizes {rec[3]}, strides {rec[4]}); only whole inputs are supported"
                    )
                user_args[i] = k
        order = sorted(user_args, key=lambda i: user_args[i])
        if len(order) != len(self.args):
            raise EmberExportError(
                "ember.export_stablehlo: every input must be read by the graph (an unused "
                "input has no function argument)"
            )
        param_nodes = {int(n.args): n for n in g.nodes.values() if n.op == "parameter"}
        for pos, i in enumerate(order):
            n = param_nodes[i]
            t = self.ty(n.dtype, n.dims)
            args_sig.append(f"%arg{pos}: {t}")
            env[n.id] = f"%arg{pos}"
        for i, rec in enumerate(self.params):
            if i in user_args:
                continue
            n = param_nodes[i]
            env[n.id] = self.param_value(rec, n)
        outs = self.body(g, env)
        out_types = [self.type_of(g, r) for r in g.root]
        self.lines.append(f'    "func.return"({", ".join(outs)}) : ({", ".join(out_types)}) -> ()')
        head = [
            "module @ember {",
            f"  func.func public @main({', '.join(args_sig)}) -> ({', '.join(out_types)}) {{",
        ]
        return "\n".join(head + self.lines + ["  }", "}"]) + "\n"

    def param_value(self, rec, n):
        kind = rec[0]
        if kind == "scalar":
            tok = rec[2]
            v = {
                "b": lambda s: s == "b1",
                "i": lambda s: int(s[1:]),
                "d": lambda s: float.fromhex(s[1:]),
            }
            if tok[0] not in v:
                raise EmberExportError(f"ember.export_stablehlo: scalar {tok}")
            return self.splat(v[tok[0]](tok), n.dtype, n.dims)
        if kind == "constant":
            return self.constant_bytes(self.constants[int(rec[1])], n.dtype, n.dims)
        base = self.flat[int(rec[1])]
        sizes = [int(x) for x in rec[3].split(",")] if rec[3] != "-" else []
        strides = [int(x) for x in rec[4].split(",")] if rec[4] != "-" else []
        v = base.as_strided(sizes, strides, base.storage_offset() + int(rec[5]))
        if rec[2] == "1":
            v = v.permute(_dense_permutation(sizes, strides))
        return self.constant_bytes(v.contiguous(), n.dtype, n.dims)

    def type_of(self, g, nid):
        n = g.nodes[nid]
        return self.ty(n.dtype, n.dims)

    def body(self, g, env):
        for n in g.nodes.values():
            if n.id in env:
                continue
            if n.op == "parameter":
                raise EmberExportError("ember.export_stablehlo: internal: unbound parameter")
            env[n.id] = self.node(g, n, env)
        return [env[r] for r in g.root]

    def operands(self, n):
        return [a.strip().lstrip("%") for a in n.args.split(",") if a.strip()]

    def node(self, g, n, env):
        ops = self.operands(n) if n.op != "constant" else []
        vals = [env[o] for o in ops]
        tys = [self.type_of(g, o) for o in ops]
        out = self.ty(n.dtype, n.dims)
        op, a = n.op, n.attrs
        if op == "fusion":
            body = self.graphs[n.calls]
            benv = {}
            for bn in body.nodes.values():
                if bn.op == "parameter":
                    benv[bn.id] = vals[int(bn.args)]
            return self.body(body, benv)[0]
        if op == "constant":
            elems = n.args.strip("{}").split(",")
            if len(elems) == 1 and elems[0].strip():
                e = elems[0].strip()
                v = {"true": 1, "false": 0}.get(e)
                if v is None:
                    v = float(e) if n.dtype.startswith(("f", "b")) and n.dtype != "pred" else int(e)
                return self.splat(v, n.dtype, n.dims)
            values = [x.strip() for x in elems if x.strip()]
            dt = {
                "f32": torch.float32,
                "f64": torch.float64,
                "s64": torch.int64,
                "s32": torch.int32,
            }
            if n.dtype not in dt:
                raise EmberExportError(f"ember.export_stablehlo: {n.dtype} array constant")
            t = torch.tensor([float(x) for x in values], dtype=torch.float64).to(dt[n.dtype])
            return self.constant_bytes(t.reshape(n.dims), n.dtype, n.dims)
        if op in _BINARY:
            return self.emit(f"stablehlo.{_BINARY[op]}", vals, tys, out)
        if op in _UNARY:
            return self.emit(_UNARY[op], vals, tys, out)
        if op == "convert":
            return self.emit("stablehlo.convert", vals, tys, out)
        if op == "select":
            return self.emit("stablehlo.select", vals, tys, out)
        if op == "fma":
            # StableHLO has no fused multiply-add: f32 operands are widened to f64, where
            # their product is exact, and the sum rounded back (one rounding but for a
            # double rounding in ~2^-28 of cases); f64 ones round the product first.
            if n.dtype == "f32":
                wide = self.ty("f64", n.dims)
                w = [self.emit("stablehlo.convert", [v], [t], wide) for v, t in zip(vals, tys)]
                p = self.emit("stablehlo.multiply", w[:2], [wide, wide], wide)
                r = self.emit("stablehlo.add", [p, w[2]], [wide, wide], wide)
                return self.emit("stablehlo.convert", [r], [wide], out)
            p = self.emit("stablehlo.multiply", vals[:2], tys[:2], out)
            return self.emit("stablehlo.add", [p, vals[2]], [out, tys[2]], out)
        if op == "compare":
            d = a["direction"]
            src = g.nodes[ops[0]].dtype
            kind = (
                "FLOAT"
                if src[0] in "fb" and src != "pred"
                else ("UNSIGNED" if src in ("u8", "pred") else "SIGNED")
            )
            return self.emit(
                "stablehlo.compare",
                vals,
                tys,
                out,
                f"comparison_direction = #stablehlo<comparison_direction {d}>, "
                f"compare_type = #stablehlo<comparison_type {kind}>",
            )
        if op == "broadcast-in-dim":
            dims = _ints(a["dimensions"])
            return self.emit(
                "stablehlo.broadcast_in_dim",
                vals,
                tys,
                out,
                f"broadcast_dimensions = array<i64{_arr(dims)}>",
            )
        if op == "reshape":
            return self.emit("stablehlo.reshape", vals, tys, out)
        if op == "transpose":
            return self.emit(
                "stablehlo.transpose",
                vals,
                tys,
                out,
                f"permutation = array<i64{_arr(_ints(a['dimensions']))}>",
            )
        if op == "iota":
            return self.emit(
                "stablehlo.iota", [], [], out, f"iota_dimension = {int(a['iota_dimension'])} : i64"
            )
        if op == "slice":
            return self.emit(
                "stablehlo.slice",
                vals,
                tys,
                out,
                f"start_indices = array<i64{_arr(_ints(a['start_indices']))}>, "
                f"limit_indices = array<i64{_arr(_ints(a['limit_indices']))}>, "
                f"strides = array<i64{_arr(_ints(a['strides']))}>",
            )
        if op == "concatenate":
            return self.emit(
                "stablehlo.concatenate", vals, tys, out, f"dimension = {int(a['dimension'])} : i64"
            )
        if op == "reduce":
            return self.reduce(g, n, vals, tys, out)
        if op == "dot-general":
            return self.emit(
                "stablehlo.dot_general",
                vals,
                tys,
                out,
                "dot_dimension_numbers = #stablehlo.dot<"
                f"lhs_batching_dimensions = [{_csv(a['lhs_batch_dims'])}], "
                f"rhs_batching_dimensions = [{_csv(a['rhs_batch_dims'])}], "
                f"lhs_contracting_dimensions = [{_csv(a['lhs_contracting_dims'])}], "
                f"rhs_contracting_dimensions = [{_csv(a['rhs_contracting_dims'])}]>",
            )
        raise EmberExportError(
            f"ember.export_stablehlo: the graph has ops with no StableHLO form here: {op} (%{n.id})"
        )

    def reduce(self, g, n, vals, tys, out):
        kind = n.attrs["to_apply"]
        if kind not in _REDUCE:
            raise EmberExportError(f"ember.export_stablehlo: reduce to_apply={kind}")
        src = g.nodes[self.operands(n)[0]].dtype
        floating = src[0] in "fb" and src != "pred"
        init = {
            "add": 0,
            "multiply": 1,
            "maximum": -math.inf if floating else -(2**63),
            "minimum": math.inf if floating else 2**63 - 1,
        }[kind]
        if not floating and src != "s64" and kind in ("maximum", "minimum"):
            raise EmberExportError(f"ember.export_stablehlo: integer {kind}-reduce of {src}")
        z = self.splat(init, n.dtype, [])
        st = self.ty(n.dtype, [])
        region = (
            " ({\n"
            f"    ^bb0(%a: {st}, %b: {st}):\n"
            f'      %r = "stablehlo.{_REDUCE[kind]}"(%a, %b) : ({st}, {st}) -> {st}\n'
            f'      "stablehlo.return"(%r) : ({st}) -> ()\n'
            "    })"
        )
        return self.emit(
            "stablehlo.reduce",
            vals + [z],
            tys + [st],
            out,
            f"dimensions = array<i64{_arr(_ints(n.attrs['dimensions']))}>",
            region,
        )


def _arr(v):
    return (": " + ", ".join(str(x) for x in v)) if v else ""


def _csv(v):
    return ", ".join(str(x) for x in _ints(v))
