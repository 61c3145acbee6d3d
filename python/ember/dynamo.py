"""``torch.compile(model, backend="ember")``: a TorchDynamo backend on Ember's compiler.

Dynamo captures the user's Python into FX graphs (graph breaks split them); AOTAutograd
(``torch._dynamo.backends.common.aot_autograd``) functionalizes each one and, when a
gradient is needed, splits it into a forward and a backward graph of ATen ops (inference
graphs when none is). Each of those graphs is compiled here (``_compiler(kind)``), which
returns an ``EmberGraph``: a callable that runs the graph's ATen ops on ember tensors
(so they are recorded exactly as on the lazy device) and syncs once, so the lazy
device's whole pipeline applies — lowering to the core IR, simplification, fusion,
native kernels and the structural cache (the second call with the same shapes finds the
compiled program by its hash; ``ember.metrics.counters()["graphs_compiled"]`` does not
move).

Tensors and copies. The user's tensors stay CPU tensors, as with Inductor: each CPU
input is handed to the graph without a copy (``_C.wrap_host``: an ember tensor over the
same memory, only ever read) and each result comes back without a copy (``_C.data_of``:
the CPU tensor over the device buffer the program wrote). Input mutations (optimizer
state updated in place, BatchNorm's running statistics) stay in the graph
(``keep_inference_input_mutations``): the backend takes AOTAutograd's trailing
``copy_(input, value)`` nodes out, the program returns the new values, and the backend
writes them into the inputs itself after the run (``_split_input_mutations``). On a
replay the program writes each new value straight into its input's memory where it
can, as eager's in-place op does (``CapturedProgram.run`` donates the input: it reaches
the program as itself and shares its storage with no other input;
``counters()["written_in_place"]``; the version counter moves as ``copy_`` would move
it). Otherwise a parameter that covers its whole storage, shared with no other tensor,
takes the result's buffer (``counters()["buffers_moved"]``: the parameter object, its
storage and its views stay, its data pointer changes), and anything else is copied, as
AOTAutograd's copy-back did (``write_inputs = False`` restores that).

Models already on the ember device (``model.to(ember.device())``): Dynamo fakifies
their tensors like any device's (ember/_fake.py), and a graph whose inputs are ember
tensors runs its ATen ops on them directly: they are recorded on the lazy device like
the model's own ops, and the results are ember tensors, pending until read, so the
user's next ops join the same graph (no sync and no capture for such calls).

Shapes. A graph Dynamo makes dynamic (automatic dynamic shapes after a shape change, or
``dynamic=True``) runs unchanged; Ember compiles one program per concrete shape set and
keeps each in its cache, so alternating shapes recompile nothing after the first call of
each. Scalars in the graph (Python floats and ints that Dynamo passes as inputs) are
graph parameters on the lazy device (hashed by type), so a changing learning rate never
recompiles. Random ops (dropout) take their (seed, offset) from the ember generator
(``ember.manual_seed``): results are reproducible under Ember's seed, not bit-equal to
eager's CPU stream (Inductor's are not either).

Activation checkpointing. ``torch.utils.checkpoint`` inside a compiled region becomes
Dynamo's ``tag_activation_checkpoint``: its nodes carry recompute tags, AOTAutograd's
partitioner recomputes them in the backward graph instead of saving them, and the
forward and backward graphs are separate programs here, so nothing can merge the
recompute back (``counters()["checkpointed_graphs"]``, ``["recomputed_nodes"]``). A
backward graph of a forward with checkpointed regions that recomputes nothing means the
activations were saved after all: a RuntimeWarning says so. Random ops inside a
checkpointed region are replayed through the RNG state AOTAutograd saves
(``run_and_save_rng_state`` / ``run_with_rng_state``), here the ember generator's.

Unsupported: tensors on other devices (CUDA, meta), CPU and ember tensors mixed in one
graph, and tensor subclasses as inputs raise ``EmberCompileError`` naming the input.
"""

from __future__ import annotations

import math
import warnings

import torch

from . import _C, _post_import

__all__ = [
    "ember_backend",
    "EmberGraph",
    "EmberCompileError",
    "register",
    "install",
    "counters",
    "clear_counters",
]

_EMBER = torch.device("ember", 0)


class EmberCompileError(RuntimeError):
    """A graph given to the ember torch.compile backend that it cannot run."""


def _retarget(x):
    """`x` (an FX node argument) with every CPU device replaced by the ember device."""
    if isinstance(x, torch.device) and x.type == "cpu":
        return _EMBER
    if isinstance(x, (list, tuple)):
        return type(x)(_retarget(v) for v in x)
    if isinstance(x, dict):
        return {k: _retarget(v) for k, v in x.items()}
    return x


def _retarget_devices(gm: torch.fx.GraphModule) -> int:
    """Makes the graph's factory ops (``full``, ``arange``, ``empty``, ``scalar_tensor``,
    ``_to_copy(device=cpu)``, ...) create ember tensors and reads its CPU tensor
    constants (``get_attr``) through a copy to the ember device, so every value of the
    graph lives on the ember device. The constants themselves stay CPU tensors:
    Dynamo and AOTAutograd may still fakeify the module's attributes, which needs
    addressable storage. Returns the number of nodes changed."""
    changed = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function":
            args, kwargs = _retarget(node.args), _retarget(node.kwargs)
            if args != node.args or kwargs != node.kwargs:
                node.args, node.kwargs = args, kwargs
                changed += 1
        elif node.op == "get_attr":
            owner, _, name = node.target.rpartition(".")
            mod = gm.get_submodule(owner) if owner else gm
            value = getattr(mod, name)
            if isinstance(value, torch.Tensor) and value.device.type == "cpu":
                with gm.graph.inserting_after(node):
                    moved = gm.graph.call_function(
                        torch.ops.aten._to_copy.default, (node,), {"device": _EMBER}
                    )
                node.replace_all_uses_with(moved, delete_user_cb=lambda u: u is not moved)
                changed += 1
    if changed:
        gm.recompile()
    return changed


def _split_input_mutations(gm: torch.fx.GraphModule) -> tuple[list, int]:
    """Takes AOTAutograd's input mutations out of the graph (``keep_inference_input_mutations``
    leaves them in it as trailing ``copy_(input, value)`` nodes): each such node is removed
    and its value appended to the graph's outputs. Returns ([(input index, output
    position)], number of the graph's own outputs); the caller writes each value into its
    input after the run. Raises EmberCompileError for a ``copy_`` into an input that a
    later node still reads (AOTAutograd never emits one)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(placeholders)}
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    outs = output.args[0]
    if not isinstance(outs, (list, tuple)):
        outs = (outs,)
    n_out = len(outs)
    copies = [
        n
        for n in gm.graph.nodes
        if n.op == "call_function"
        and n.target is torch.ops.aten.copy_.default
        and n.args[0] in index
        and not n.users
    ]
    if not copies:
        return [], n_out
    writes, extra = [], []
    for c in copies:
        dst, src = c.args[0], c.args[1]
        if any(order[u] > order[c] for u in dst.users if u is not c):
            raise EmberCompileError(
                f"torch.compile(backend='ember'): graph input {index[dst]} is read after "
                f"its in-place update ({c.format_node()}); Ember applies input updates "
                "after the graph runs"
            )
        writes.append((index[dst], n_out + len(extra)))
        extra.append(src)
    for c in copies:
        gm.graph.erase_node(c)
    output.args = (tuple(outs) + tuple(extra),)
    gm.recompile()
    return writes, n_out


def _write_inputs(inputs, outs, writes) -> None:
    """Writes the graph's new input values (``outs[k]``) into its inputs (``inputs[j]``)
    for the pairs (j, k) of `writes`, as AOTAutograd's copy-back does."""
    with torch.no_grad():
        for j, k in writes:
            inputs[j].copy_(outs[k])


def _describe(t) -> str:
    return f"{type(t).__name__}(dtype={t.dtype}, shape={tuple(t.shape)}, device={t.device})"


# Rerun captured programs (False: trace the FX graph on every call; for measurements).
replay = True
# Input mutations written back by EmberGraph (False: AOTAutograd's copy-back, as before
# the backend kept them; for A/B measurements). Read when a graph is compiled.
write_inputs = True
# Captured programs kept per graph (one per shape / scalar-input set; oldest dropped).
MAX_CAPTURES = 8
_counts = {
    "calls": 0,
    "traces": 0,
    "replays": 0,
    "captures": 0,
    "refusals": 0,
    "input_writes": 0,
    "buffers_moved": 0,
    "written_in_place": 0,
    "checkpointed_graphs": 0,
    "recomputed_nodes": 0,
    "transposed_products": 0,
    "row_major_saved": 0,
    "addcmul_products": 0,
}
_reasons = {}  # refusal reason -> count


def counters() -> dict:
    """Calls of compiled graphs since ``clear_counters()``: ``calls``; ``traces`` (the
    FX graph ran op by op on the lazy device), ``replays`` (a captured program ran),
    ``captures`` (programs captured), ``refusals`` (traces whose program could not be
    captured) and ``refusal_reasons`` (reason -> count); ``input_writes`` (new values
    of mutated inputs written back, e.g. an optimizer's parameters and state) and, of
    those, ``written_in_place`` (the program wrote the new value into the input's own
    memory, as eager's in-place op does) and ``buffers_moved`` (a parameter took the
    result's buffer instead of a copy).
    Compilations:
    ``checkpointed_graphs`` (forward graphs with activation-checkpointed nodes),
    ``recomputed_nodes`` (nodes their backward graphs recompute) and
    ``transposed_products`` (``t(mm(a, b))`` rewritten as ``mm(t(b), t(a))``),
    ``addcmul_products`` (``prims.fma(mul(a, b), value, c)`` rewritten as eager's
    ``addcmul``) and ``row_major_saved`` (saved activations handed to the backward
    row-major)."""
    out = dict(_counts)
    out["refusal_reasons"] = dict(_reasons)
    return out


def clear_counters() -> None:
    for k in _counts:
        _counts[k] = 0
    _reasons.clear()


def _refused(graph, why):
    graph.last_refusal = why
    _counts["refusals"] += 1
    _reasons[why] = _reasons.get(why, 0) + 1


class EmberGraph:
    """One AOTAutograd graph (forward, backward or inference) compiled for Ember.

    Called with AOTAutograd's boxed convention (``_boxed_call``): one list of the
    graph's flat inputs (CPU tensors, Python scalars, SymInt values), which it empties
    so inputs can be freed early (or with the inputs as arguments); returns the graph's
    outputs, tensors as CPU tensors. The first call with a given input signature
    (tensor sizes, strides, dtypes; scalar values) traces the graph on the lazy device
    and captures the program its sync ran (``_C.capture``); later calls with that
    signature run the program on the new inputs directly (``CapturedProgram.run``).
    Graphs that cannot be captured (random ops; see src/torch/capture.h) are traced on
    every call (``last_refusal`` says why). Raises ``EmberCompileError`` for an input on
    another device or a tensor subclass; errors of the program itself are the lazy
    device's (eager's exception type, naming the ATen op and its operands).
    """

    def __init__(self, gm: torch.fx.GraphModule, kind: str):
        # An instance attribute, so Dynamo's disable() wrapper of the backward (which
        # copies __dict__) is called boxed too.
        self._boxed_call = True
        # (input index, output position) per input update; the graph's own outputs.
        self.writes, self.n_out = _split_input_mutations(gm)
        self.gm = gm
        self.kind = kind
        self.calls = 0
        self.traces = 0
        self.captures = []  # (scalar inputs, CapturedProgram, output template)
        self.last_refusal = None

    def _check(self, i, a, allowed=("cpu",)):
        if type(a) is not torch.Tensor and type(a) is not torch.nn.Parameter:
            raise EmberCompileError(
                f"torch.compile(backend='ember'): {self.kind} graph input {i} is a tensor "
                f"subclass ({_describe(a)}); Ember runs plain tensors only"
            )
        if a.device.type not in allowed and not (a.device.type == "cpu" and a.dim() == 0):
            raise EmberCompileError(
                f"torch.compile(backend='ember'): {self.kind} graph input {i} is on "
                f"{a.device} ({_describe(a)}); Ember takes the CPU tensors of a CPU model "
                f"(results come back on the CPU) or the ember tensors of a model on ember "
                f"(results stay on ember), not a mix"
            )

    def _run_lazily(self, args):
        """A graph of a model on ember: its ops are traced on the ember inputs, and the
        results stay ember tensors (pending)."""
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                self._check(i, a, allowed=("ember",))
        ins = list(args)
        args.clear()
        _counts["traces"] += 1
        self.traces += 1
        with torch.no_grad():
            outs = self.gm(*ins)
            if not self.writes:
                return outs
            _write_inputs(ins, outs, self.writes)
            _counts["input_writes"] += len(self.writes)
            return type(outs)(outs[: self.n_out])

    def __call__(self, *args):
        if len(args) == 1 and type(args[0]) is list:
            args = args[0]  # boxed (graph inputs are never lists)
        else:
            args = list(args)  # the backward, called through Dynamo's disable() wrapper
        self.calls += 1
        _counts["calls"] += 1
        tensors = [a if isinstance(a, torch.Tensor) else None for a in args]
        scalars = tuple(a for a, t in zip(args, tensors) if t is None)
        # A replay first: CapturedProgram.run checks every input's device, sizes,
        # strides and dtype itself (None for anything else, ember tensors included).
        if replay and self.captures:
            for key, program, template, writes in self.captures:
                if key == scalars:
                    try:
                        res = program.run(tensors, writes)
                    except Exception:
                        _counts["replays"] += 1  # the program ran and failed
                        raise
                    if res is not None:
                        _counts["replays"] += 1
                        _counts["input_writes"] += len(writes)
                        _counts["buffers_moved"] += res[1]
                        _counts["written_in_place"] += res[2]
                        args.clear()
                        return _fill(template, res[0], self.n_out)
        if any(t is not None and t.device.type == "ember" for t in tensors):
            return self._run_lazily(args)
        for i, a in enumerate(tensors):
            if a is not None:
                self._check(i, a)
        self.traces += 1
        _counts["traces"] += 1
        with torch.no_grad():
            ins = [_C.wrap_host(a) if t is not None else a for a, t in zip(args, tensors)]
            args.clear()
            generation, rng = _C.sync_generation(), _C.get_rng_state()
            foreign = _C.pending_state_ids()
            outs = self.gm(*ins)
            del ins
            flat = outs if isinstance(outs, (list, tuple)) else (outs,)
            # Output position -> index among the tensor outputs (CapturedProgram.run's).
            tensor_index = {}
            for i, o in enumerate(flat):
                if isinstance(o, torch.Tensor):
                    tensor_index[i] = len(tensor_index)
            lazy = [o for o in flat if isinstance(o, torch.Tensor) and o.device.type == "ember"]
            if not replay:
                _C.sync("torch.compile(backend='ember')")
            elif not torch.equal(rng, _C.get_rng_state()):
                _C.sync("torch.compile(backend='ember')")
                _refused(self, "the graph draws random numbers")
            else:
                program, why = _C.capture(
                    tensors, lazy, generation, foreign, "torch.compile(backend='ember')"
                )
                if len(lazy) != sum(isinstance(o, torch.Tensor) for o in flat):
                    program, why = None, "an output is not an ember tensor"
                if program is None:
                    _refused(self, why)
                else:
                    _counts["captures"] += 1
                    slots = [True if isinstance(o, torch.Tensor) else (False, o) for o in flat]
                    kind = type(outs) if isinstance(outs, (list, tuple)) else None
                    writes = [(j, tensor_index[k]) for j, k in self.writes]
                    self.captures.append((scalars, program, (kind, slots), writes))
                    del self.captures[:-MAX_CAPTURES]
            host = _to_host(outs)
            if not self.writes:
                return host
            _write_inputs(tensors, host, self.writes)
            _counts["input_writes"] += len(self.writes)
            return type(host)(host[: self.n_out])


def _fill(template, tensors, n_out):
    """The graph's first `n_out` outputs from a captured run: `tensors` at the tensor
    positions, the first call's values (ints, None) elsewhere."""
    kind, slots = template
    it = iter(tensors)
    out = [next(it) if s is True else s[1] for s in slots[:n_out]]
    return out[0] if kind is None else kind(out)


def _to_host(outs):
    if isinstance(outs, torch.Tensor):
        return _C.data_of(outs) if outs.device.type == "ember" else outs
    if isinstance(outs, (list, tuple)):
        return type(outs)(_to_host(o) for o in outs)
    return outs


def _run_and_save_rng_state(op, *args, **kwargs):
    """run_and_save_rng_state on ember: the ember generator's state, then op's result."""
    return _C.get_rng_state(), op(*args, **kwargs)


def _run_with_rng_state(rng_state, op, *args, **kwargs):
    """run_with_rng_state on ember: op run with the generator set to `rng_state` (a
    state `_run_and_save_rng_state` returned), the current state restored after."""
    saved = _C.get_rng_state()
    _C.set_rng_state(rng_state.to("cpu", torch.uint8).contiguous())
    try:
        return op(*args, **kwargs)
    finally:
        _C.set_rng_state(saved)


def _ember_rng_ops(gm: torch.fx.GraphModule) -> int:
    """Replaces AOTAutograd's RNG-state operators (the recompute of random ops in
    checkpointed regions; their CPU/CUDA kernels read those devices' generators) by
    the ember generator's. Returns the number of nodes changed."""
    from torch._prims import rng_prims

    swap = {
        rng_prims.run_and_save_rng_state: _run_and_save_rng_state,
        rng_prims.run_with_rng_state: _run_with_rng_state,
    }
    changed = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in swap:
            node.target = swap[node.target]
            changed += 1
    if changed:
        gm.recompile()
    return changed


def _layout_of(sizes, strides):
    """Strides of a dense tensor of `sizes` laid out in the order of `strides` (outermost
    first, ties kept in dimension order): what ember's attention metas allocate."""
    order = sorted(range(len(sizes)), key=lambda d: -strides[d])
    out, step = [0] * len(sizes), 1
    for d in reversed(order):
        out[d] = step
        step *= sizes[d]
    return tuple(out)


def _ember_attention(gm: torch.fx.GraphModule) -> int:
    """Replaces eager's CPU flash attention (``_scaled_dot_product_flash_attention_for_cpu``
    and its backward, which AOTAutograd's CPU trace of ``scaled_dot_product_attention``
    holds) by the ops the lazy device records for the same call,
    ``ember::sdpa_flash_forward`` / ``_backward`` (src/torch/attention.cpp): the same CPU
    kernel, but the ops read their operands through their strides (``flexible_layout``),
    so the program hands them its row-major buffers instead of copying q, k, v into
    eager's layout. Only calls without dropout whose results have the layouts the ember
    ops give (the FX graph's later views rely on them) are replaced. Returns the number
    of nodes changed."""
    aten = torch.ops.aten
    fwd = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    bwd = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if fwd is None or bwd is None or not hasattr(torch.ops.ember, "sdpa_flash_forward"):
        return 0

    def val(n):
        return n.meta.get("val") if isinstance(n, torch.fx.Node) else None

    def same_layouts(node, expected):
        got = node.meta.get("val")
        return isinstance(got, (list, tuple)) and all(
            isinstance(g, torch.Tensor) and tuple(g.stride()) == e for g, e in zip(got, expected)
        )

    changed = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (fwd.default, bwd.default):
            continue
        is_fwd = node.target is fwd.default
        schema = node.target._schema
        named = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
        for a, v in zip(schema.arguments, node.args):
            named[a.name] = v
        named.update(node.kwargs)
        q, k, v = (val(named[n]) for n in ("query", "key", "value"))
        if any(t is None or t.dim() != 4 for t in (q, k, v)) or named["dropout_p"] != 0:
            continue
        scale = named.get("scale")
        if scale is None:
            scale = 1.0 / math.sqrt(q.shape[-1])
        mask = named.get("attn_mask")
        if is_fwd:
            o_sizes = (q.shape[0], q.shape[1], q.shape[2], v.shape[3])
            expected = [_layout_of(o_sizes, q.stride())]
            if not same_layouts(node, expected):
                continue
            args = (named["query"], named["key"], named["value"], mask, named["is_causal"], scale)
            target = torch.ops.ember.sdpa_flash_forward.default
        else:

            def heads_second(t):
                b, h, n, e = t.shape
                return (n * h * e, e, h * e, 1)

            if not same_layouts(node, [heads_second(q), heads_second(k), heads_second(v)]):
                continue
            args = (named["grad_out"], named["query"], named["key"], named["value"])
            args += (named["out"], named["logsumexp"], mask, named["is_causal"], scale)
            target = torch.ops.ember.sdpa_flash_backward.default
        node.target, node.args, node.kwargs = target, args, {}
        changed += 1
    if changed:
        gm.recompile()
    return changed


def _substitute(gm: torch.fx.GraphModule, old, new, consumed) -> None:
    """Puts node `new` (computing `old`'s value) in `old`'s place, with its meta (value,
    provenance), and erases `old` and `consumed` (an operand of `old` nothing else used)."""
    new.meta.update(old.meta)
    old.replace_all_uses_with(new)
    gm.graph.erase_node(old)
    gm.graph.erase_node(consumed)


def _transposed_products(gm: torch.fx.GraphModule) -> int:
    """Rewrites ``t(mm(a, b))`` (also ``permute(.., [1, 0])`` and ``transpose(.., 0, 1)``)
    whose product has no other user into ``mm(t(b), t(a))``: the same matrix, made by the
    dot in that order. AOTAutograd's backward of a linear layer returns its weight
    gradient as ``t(mm(t(g), x))``; as written, the program computed the product and then
    copied it transposed, a pass over the whole weight (on the lazy device the operands'
    transposes fold into the dot's dimension numbers, so the rewritten form copies
    nothing). Returns the number rewritten."""
    aten = torch.ops.aten

    def is_swap(n):
        if n.op != "call_function":
            return False
        if n.target is aten.t.default:
            return True
        if n.target is aten.permute.default:
            return list(n.args[1]) == [1, 0]
        if n.target is aten.transpose.int:
            return sorted(d % 2 for d in n.args[1:3]) == [0, 1]
        return False

    count = 0
    for n in list(gm.graph.nodes):
        if not is_swap(n):
            continue
        m = n.args[0]
        if not (
            isinstance(m, torch.fx.Node)
            and m.op == "call_function"
            and m.target is aten.mm.default
            and len(m.users) == 1
        ):
            continue
        a, b = m.args[:2]
        with gm.graph.inserting_before(n):
            bt = gm.graph.call_function(aten.t.default, (b,))
            at = gm.graph.call_function(aten.t.default, (a,))
            mm = gm.graph.call_function(aten.mm.default, (bt, at))
        for node, src in ((bt, b), (at, a)):
            v = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
            if isinstance(v, torch.Tensor):
                node.meta["val"] = v.t()
        _substitute(gm, n, mm, m)  # the same matrix: the swap's value and provenance
        count += 1
    if count:
        gm.recompile()
    return count


def _addcmul_products(gm: torch.fx.GraphModule) -> int:
    """Rewrites ``prims.fma(mul(a, b), value, c)`` whose product has no other user into
    ``addcmul(c, a, b, value=value)``. AOTAutograd decomposes ``addcmul`` (the
    ``exp_avg_sq`` update of the for-loop optimizers, CPU's default) that way, rounding
    the product ``a * b`` first; eager's kernel rounds ``value * a`` first and then computes
    ``(value * a) * b + c`` once. Besides bits, that matters for speed: a squared
    gradient under ~1e-19 underflows to a denormal in the decomposed form, and every
    such element then costs the CPU a microcode assist (the MLP training step under
    torch.compile slowed from 8 to 12 ms per step as its gradients shrank), while
    eager's form never forms it. Returns the number rewritten."""
    try:
        fma = torch.ops.prims.fma.default
    except AttributeError:  # torch._prims not loaded: nothing can hold it
        return 0
    aten = torch.ops.aten
    count = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not fma or n.kwargs or len(n.args) != 3:
            continue
        prod, value, c = n.args
        if not (
            isinstance(prod, torch.fx.Node)
            and prod.op == "call_function"
            and prod.target is aten.mul.Tensor
            and len(prod.users) == 1
            and not prod.kwargs
            and all(isinstance(t, torch.fx.Node) for t in prod.args)
            and isinstance(c, torch.fx.Node)
            and isinstance(value, (int, float))
        ):
            continue
        vals = [t.meta.get("val") for t in (*prod.args, c, n)]
        if not all(isinstance(v, torch.Tensor) for v in vals):
            continue
        if len({(v.dtype, tuple(v.shape)) for v in vals}) != 1 or not vals[0].is_floating_point():
            continue
        with gm.graph.inserting_before(n):
            new = gm.graph.call_function(aten.addcmul.default, (c, *prod.args), {"value": value})
        _substitute(gm, n, new, prod)
        count += 1
    if count:
        gm.recompile()
    return count


def _recompute_tagged(gm: torch.fx.GraphModule) -> int:
    """Nodes of `gm` that come from an activation-checkpointed region."""
    return sum(1 for n in gm.graph.nodes if n.meta.get("recompute") is not None)


def _compiler(kind, state):
    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        """AOTAutograd's compiler hook: `gm` (functional ATen ops) -> EmberGraph."""
        tagged = _recompute_tagged(gm)
        if kind == "forward" and tagged:
            state["checkpointed"] = tagged
            _counts["checkpointed_graphs"] += 1
        elif kind == "backward" and state.get("checkpointed"):
            _counts["recomputed_nodes"] += tagged
            if not tagged:
                warnings.warn(
                    "torch.compile(backend='ember'): the forward graph has "
                    f"{state['checkpointed']} activation-checkpointed nodes but its backward "
                    "recomputes none of them: AOTAutograd's partitioner saved their "
                    "activations, so this graph runs without checkpointing",
                    RuntimeWarning,
                    stacklevel=2,
                )
        _retarget_devices(gm)
        _ember_rng_ops(gm)
        _ember_attention(gm)
        _counts["transposed_products"] += _transposed_products(gm)
        _counts["addcmul_products"] += _addcmul_products(gm)
        return EmberGraph(gm, kind)

    compile_graph.__name__ = f"ember_{kind}_compiler"
    return compile_graph


# AOTAutograd's partition function (None: its default, which honours checkpoint tags).
_partition_fn = None
# Saved activations handed to the backward row-major where only attention reads them
# (False: in eager's layouts, as before; for A/B measurements). Read when partitioning.
row_major_saved = True


def _layout_blind_readers() -> set:
    """Backward ops that read each operand through its strides and lay out their results
    the same whatever their operands' layouts (the CPU flash attention's backward, ATen's
    and ember's): a saved tensor that only these read may be saved in any layout."""
    ops = set()
    for ns, name in (
        (torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward"),
        (torch.ops.ember, "sdpa_flash_backward"),
    ):
        op = getattr(ns, name, None)
        if op is not None:
            ops.add(op.default)
    return ops


def _aliases_read_only_by(node: torch.fx.Node, readers) -> list | None:
    """`node` and its ``detach`` aliases (AOTAutograd saves attention's output as a
    detached alias) when every use of them is one of `readers`; None otherwise, or when
    nothing uses `node`."""
    if not node.users:
        return None
    found = [node]
    for user in node.users:
        if user.target is torch.ops.aten.detach.default:
            more = _aliases_read_only_by(user, readers)
            if more is None:
                return None
            found += more
        elif user.target not in readers:
            return None
    return found


def _row_major_saved(fw: torch.fx.GraphModule, bw: torch.fx.GraphModule, num_fwd_outputs) -> int:
    """Makes the forward return row-major each saved activation that is not row-major
    and that the backward reads only through ops of ``_layout_blind_readers()``, and gives
    the backward's matching input that layout. A saved activation crosses no user code:
    its layout is the backend's to choose. Eager lays attention's q, k, v out as strided
    views of the qkv projection and its output and logsumexp heads-second; the program
    computes them row-major (its attention extern reads and writes row-major buffers),
    so in eager's layouts each was copied on leaving the forward and again (q, k, v) on
    entering the backward. Returns the number of saved tensors changed."""
    readers = _layout_blind_readers()
    bw_inputs = {n.name: n for n in bw.graph.find_nodes(op="placeholder")}
    out = fw.graph.output_node()
    outs = list(out.args[0])
    changed = 0
    for i in range(num_fwd_outputs, len(outs)):
        node = outs[i]
        if not isinstance(node, torch.fx.Node) or node.op != "call_function":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.is_contiguous():
            continue
        use = bw_inputs.get(node.name)
        aliases = _aliases_read_only_by(use, readers) if use is not None else None
        if not aliases:
            continue
        with fw.graph.inserting_before(out):
            saved = fw.graph.call_function(
                torch.ops.aten.clone.default, (node,), {"memory_format": torch.contiguous_format}
            )
        saved.meta.update(node.meta)
        saved.meta["val"] = val.clone(memory_format=torch.contiguous_format)
        for alias in aliases:
            alias.meta["val"] = saved.meta["val"]
        outs[i] = saved
        changed += 1
    if changed:
        out.args = (tuple(outs),) + tuple(out.args[1:])
        fw.recompile()
        bw.recompile()
    return changed


def _partition(joint, joint_inputs, *, num_fwd_outputs, **kwargs):
    """AOTAutograd's partition (``_partition_fn`` or its default), then
    ``_row_major_saved``."""
    from torch._functorch.partitioners import default_partition

    fw, bw = (_partition_fn or default_partition)(
        joint, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs
    )
    if row_major_saved:
        _counts["row_major_saved"] += _row_major_saved(fw, bw, num_fwd_outputs)
    return fw, bw


def ember_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The torch.compile backend "ember" (Dynamo's ``CompilerFn``): `gm` with fake
    `example_inputs` -> a callable running it through AOTAutograd and ``EmberGraph``s
    (forward and backward compilers for training, the inference compiler otherwise).
    Each Dynamo graph gets its own compilers, so its backward compiler knows whether
    its forward was checkpointed."""
    from torch._dynamo.backends.common import aot_autograd

    state = {}
    backend = aot_autograd(
        fw_compiler=_compiler("forward", state),
        bw_compiler=_compiler("backward", state),
        inference_compiler=_compiler("inference", state),
        # Input mutations stay in the graph (EmberGraph writes them back itself, moving a
        # parameter's new buffer in where it can) instead of AOTAutograd's copy-back.
        keep_inference_input_mutations=write_inputs,
        partition_fn=_partition,
    )
    return backend(gm, example_inputs, **kwargs)


def register() -> None:
    """Registers ``ember_backend`` as torch.compile's backend "ember" (idempotent).

    Needs ``torch._dynamo`` imported (``install()`` arranges that). When Dynamo has
    discovered the installed package's ``torch_dynamo_backends`` entry point, its lookup
    loads and registers that itself, so this does nothing."""
    from torch._dynamo.backends import registry

    if "ember" in registry._COMPILER_FNS:
        return
    if registry._BACKENDS.get("ember") is not None:
        return  # an entry point Dynamo's lookup loads and registers
    registry.register_backend(compiler_fn=ember_backend, name="ember")


_REGISTRY = "torch._dynamo.backends.registry"


def install() -> None:
    """``import ember`` calls this: register now if Dynamo is loaded, else on its import."""
    _post_import.when_imported(_REGISTRY, register)
