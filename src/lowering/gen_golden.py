"""Generates lower_golden_cases.inc: ATen calls with inputs and eager outputs.

Each case calls an ATen overload on CPU (torch.ops.aten.<op>.<overload>) with
fixed pseudo-random inputs and records the outputs; lower_golden_test.cc
lowers the same call through the table, runs it on the reference interpreter
and compares (OpInfo-style tolerances per dtype). Regenerate after adding
cases:  python src/lowering/gen_golden.py > src/lowering/lower_golden_cases.inc
"""

import math

import torch

torch.manual_seed(0)
A = torch.ops.aten
DT = {
    torch.float32: "kF32",
    torch.bfloat16: "kBF16",
    torch.float64: "kF64",
    torch.int64: "kS64",
    torch.int32: "kS32",
    torch.bool: "kPred",
    torch.float16: "kF16",
    torch.uint8: "kU8",
    torch.int8: "kS8",
}


class S:  # a Scalar argument (graph input)
    def __init__(self, v):
        self.v = v


class W:  # a wrapped number (0-d CPU tensor from a Python number)
    def __init__(self, v):
        self.v = v


class Opaque:  # layout/device/generator/memory format: ignored by lowerings
    pass


O = Opaque()


def num(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    v = float(v)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return repr(v)


def lit(t):
    vals = (
        t.detach().reshape(-1).to(torch.float64).tolist()
        if t.dtype != torch.bool
        else t.reshape(-1).tolist()
    )
    sizes = ",".join(str(s) for s in t.shape)
    return f"L(DType::{DT[t.dtype]}, {{{sizes}}}, {{{', '.join(num(v) for v in vals)}}})"


def emit_arg(a):
    if isinstance(a, torch.Tensor):
        return f"h.AddTensor({lit(a)});"
    if isinstance(a, W):
        kind = "kF64" if isinstance(a.v, float) else ("kPred" if isinstance(a.v, bool) else "kS64")
        return f"h.AddTensor(L(DType::{kind}, {{}}, {{{num(a.v)}}}), true);"
    if isinstance(a, S):
        kind = "kBool" if isinstance(a.v, bool) else ("kInt" if isinstance(a.v, int) else "kFloat")
        return f"h.AddScalar(ScalarArg::Kind::{kind}, {num(a.v)});"
    if a is None:
        return "h.AddNone();"
    if a is O:
        return "h.AddOther();"
    if isinstance(a, bool):
        return f"h.AddBool({'true' if a else 'false'});"
    if isinstance(a, int):
        return f"h.AddInt({a});"
    if isinstance(a, str):
        return f'h.AddString("{a}");'
    if isinstance(a, torch.dtype):
        return f"h.AddDType(DType::{DT[a]});"
    if isinstance(a, list) and a and all(isinstance(x, bool) for x in a):
        return f"h.AddBools({{{', '.join('true' if x else 'false' for x in a)}}});"
    if isinstance(a, list) and a and all(isinstance(x, S) for x in a):
        return f"h.AddScalarList({{{', '.join(num(x.v) for x in a)}}});"
    if isinstance(a, list) and (not a or all(isinstance(x, int) for x in a)):
        return f"h.AddInts({{{', '.join(str(x) for x in a)}}});"
    if isinstance(a, list):
        items = ", ".join("std::nullopt" if x is None else lit(x) for x in a)
        return f"h.AddTensorList({{{items}}});"
    raise TypeError(a)


def to_torch(a):
    if isinstance(a, (S, W)):
        return a.v
    if a is O:
        return None
    if isinstance(a, list) and a and all(isinstance(x, S) for x in a):
        return [x.v for x in a]
    return a


CASES = []


def case(op, *args, kwargs_from=None, note=""):
    name, _, overload = op.partition(".")
    packet = getattr(A, name)
    fn = getattr(packet, overload or "default")
    targs = [to_torch(a) for a in args]
    schema = fn._schema
    # Arguments after the positional ones go by keyword (kwarg-only in the schema).
    pos = [p for p in schema.arguments if not p.kwarg_only]
    call_args, call_kwargs = targs[: len(pos)], {}
    for p, v in zip([p for p in schema.arguments if p.kwarg_only], targs[len(pos) :]):
        if v is not None or p.type.kind() == "OptionalType":
            call_kwargs[p.name] = v
    out = fn(*call_args, **call_kwargs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    flat = []
    for o in outs:
        flat.extend(o if isinstance(o, (list, tuple)) else [o])
    CASES.append((f"aten::{op}", args, flat, note))


def r(*shape, dtype=torch.float32, lo=-2.0, hi=2.0):
    return (torch.rand(*shape, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def ri(*shape, lo=0, hi=3, dtype=torch.int64):
    return torch.randint(lo, hi, shape, dtype=dtype)


def build():
    f32, bf16 = torch.float32, torch.bfloat16
    x = r(3, 4)
    # elementwise
    for dt in (f32, bf16):
        a, b = r(3, 4, dtype=dt), r(4, dtype=dt)
        case("add.Tensor", a, b, S(2))
        case("sub.Tensor", a, b, S(0.5))
        case("mul.Tensor", a, W(0.1))
        case("div.Tensor", a, b)
        case("rsub.Scalar", a, S(1.5), S(1))
        for op in (
            "exp",
            "log",
            "sqrt",
            "rsqrt",
            "tanh",
            "sigmoid",
            "erf",
            "log1p",
            "expm1",
            "sin",
            "cos",
            "abs",
            "neg",
            "reciprocal",
            "exp2",
            "log2",
            "log10",
            "floor",
            "ceil",
            "round",
            "trunc",
            "frac",
            "sign",
            "relu",
        ):
            arg = (
                r(3, 4, dtype=dt, lo=0.1, hi=3)
                if op in ("log", "sqrt", "rsqrt", "log2", "log10")
                else a
            )
            case(op, arg)
        case("pow.Tensor_Scalar", r(3, 4, dtype=dt, lo=0.1, hi=2), S(2.5))
        case("pow.Tensor_Tensor", r(3, 4, dtype=dt, lo=0.1, hi=2), r(4, dtype=dt))
        case("clamp", a, S(-0.5), S(0.5))
        case("clamp_min", a, S(0.0))
        case("lerp.Scalar", a, r(3, 4, dtype=dt), S(0.3))
        case("lerp.Tensor", a, r(3, 4, dtype=dt), r(3, 4, dtype=dt, lo=0, hi=1))
        case("addcmul", a, r(3, 4, dtype=dt), r(3, 4, dtype=dt), S(0.5))
        case("addcdiv", a, r(3, 4, dtype=dt), r(3, 4, dtype=dt, lo=0.5, hi=2), S(-0.1))
        case("where.self", r(3, 4) > 0, a, r(3, 1, dtype=dt))
        case("masked_fill.Scalar", a, r(4) > 0, S(-1e9 if dt == f32 else -3.0))
        case("maximum", a, r(3, 4, dtype=dt))
        case("remainder.Tensor", a, r(3, 4, dtype=dt, lo=0.5, hi=2))
        case("atan2", a, r(3, 4, dtype=dt))
    ia, ib = ri(6, lo=-9, hi=9), ri(6, lo=1, hi=5) * (ri(6, lo=0, hi=2) * 2 - 1)
    case("div.Tensor_mode", ia, ib, "floor")
    case("div.Tensor_mode", ia, ib, "trunc")
    case("remainder.Tensor", ia, ib)
    case("fmod.Tensor", ia, ib)
    case("mul.Tensor", ia.to(torch.int32), W(0.5))
    case("add.Tensor", ia.to(torch.int32), W(3), S(2))
    case("pow.Tensor_Scalar", ia, S(3))
    case("bitwise_and.Tensor", ia, ib)
    case("bitwise_left_shift.Tensor", ia, ri(6, lo=0, hi=70))
    case("bitwise_right_shift.Tensor", ia, ri(6, lo=0, hi=70))
    case("_to_copy", r(3, 4, lo=-300, hi=300), torch.int32, O, O, O, False, None)
    case("_to_copy", x, bf16, O, O, O, False, None)
    # comparison / logical
    for op in ("eq", "ne", "lt", "le", "gt", "ge"):
        case(
            f"{op}.Tensor",
            torch.tensor([1.0, float("nan"), 2.0, -0.0]),
            torch.tensor([1.0, float("nan"), 3.0, 0.0]),
        )
        case(f"{op}.Scalar", ia, S(1.5))
    case("logical_and", x, r(4) > 0)
    case("logical_xor", ia, ib)
    case("isnan", torch.tensor([1.0, float("nan"), float("inf")]))
    case("isinf", torch.tensor([1.0, float("nan"), float("-inf")]))
    case("signbit", torch.tensor([1.0, -0.0, 0.0, -3.0]))
    # reductions
    for dt in (f32, bf16):
        a = r(3, 4, 5, dtype=dt)
        case("sum.dim_IntList", a, [1, -1], False, None)
        case("mean.dim", a, [0], True, None)
        case("amax", a, [2], False)
        case("var.correction", a, [1], S(1), False)
        case("var.correction", a, None, S(0), True)
        case("std.correction", a, [2], None, False)
        case("logsumexp", a, [1], False)
        case("linalg_vector_norm", a, S(2), [2], False, None)
        case("linalg_vector_norm", a, S(float("inf")), None, False, None)
        case("linalg_vector_norm", a, S(1), [0, 1], True, None)
    case("sum.dim_IntList", ri(3, 4, dtype=torch.int32), [1], False, None)
    case("sum", r(5, 6) > 0, None)
    case("prod.dim_int", r(3, 4), 1, False, None)
    case("max.dim", torch.tensor([[1.0, 3.0, 3.0], [float("nan"), 1.0, float("nan")]]), 1, False)
    case("argmax", torch.tensor([[1.0, 3.0, 3.0], [2.0, 1.0, 2.0]]), None, False)
    case("argmin", torch.tensor([[1.0, 3.0, 3.0], [2.0, 1.0, 1.0]]), 1, True)
    case("var_mean.correction", r(4, 6), [1], S(1), False)
    case("any.dim", r(3, 4) > 1, 1, False)
    # activations
    for dt in (f32, bf16):
        a, g = r(3, 5, dtype=dt, lo=-4, hi=4), r(3, 5, dtype=dt)
        case("gelu", a, "none")
        case("gelu", a, "tanh")
        case("gelu_backward", g, a, "none")
        case("gelu_backward", g, a, "tanh")
        case("silu", a)
        case("silu_backward", g, a)
        case("sigmoid_backward", g, torch.sigmoid(a))
        case("tanh_backward", g, torch.tanh(a))
        case("threshold_backward", g, a, S(0))
        case("hardtanh", a, S(-1.0), S(1.0))
        case("hardtanh_backward", g, a, S(-1.0), S(1.0))
        case("leaky_relu", a, S(0.01))
        case("leaky_relu_backward", g, a, S(0.01), False)
        case("elu", a, S(1.0), S(1), S(1))
        case("elu_backward", g, S(1.0), S(1), S(1), False, a)
        case("softplus", a, S(1), S(20))
        case("softplus_backward", g, a, S(2), S(1))
        case("mish", a)
        case("mish_backward", g, a)
        case("hardswish", a)
        case("_softmax", a, 1, False)
        case("_log_softmax", a, 0, False)
        y = torch.softmax(a.float(), 1).to(dt)
        case("_softmax_backward_data", g, y, 1, dt)
        case("_log_softmax_backward_data", g, torch.log_softmax(a.float(), 1).to(dt), 1, dt)
    m = r(2, 4)
    m[0] = float("-inf")
    case("_safe_softmax", m, -1, None)
    # norms
    for dt in (f32, bf16):
        xin, w, bb = r(2, 3, 8, dtype=dt), r(8, dtype=dt), r(8, dtype=dt)
        case("native_layer_norm", xin, [8], w, bb, S(1e-5))
        out, mean, rstd = A.native_layer_norm(xin, [8], w, bb, 1e-5)
        case(
            "native_layer_norm_backward",
            r(2, 3, 8, dtype=dt),
            xin,
            [8],
            mean,
            rstd,
            w,
            bb,
            [True, True, True],
        )
    xg = r(2, 6, 5)
    case("native_group_norm", xg, r(6), r(6), 2, 6, 5, 3, S(1e-5))
    _, gm, gr = A.native_group_norm(xg, r(6), r(6), 2, 6, 5, 3, 1e-5)
    case("native_group_norm_backward", r(2, 6, 5), xg, gm, gr, r(6), 2, 6, 5, 3, [True, True, True])
    xb = r(4, 3, 5)
    rm, rv = r(3, lo=-0.5, hi=0.5), r(3, lo=0.5, hi=2)
    case("_native_batch_norm_legit_functional", xb, r(3), r(3), rm, rv, True, S(0.1), S(1e-5))
    case("_native_batch_norm_legit_no_training", xb, r(3), r(3), rm, rv, S(0.1), S(1e-5))
    _, sm, sr, _, _ = A._native_batch_norm_legit_functional(xb, r(3), r(3), rm, rv, True, 0.1, 1e-5)
    case(
        "native_batch_norm_backward",
        r(4, 3, 5),
        xb,
        r(3),
        rm,
        rv,
        sm,
        sr,
        True,
        S(1e-5),
        [True, True, True],
    )
    case(
        "native_batch_norm_backward",
        r(4, 3, 5),
        xb,
        r(3),
        rm,
        rv,
        None,
        None,
        False,
        S(1e-5),
        [True, True, True],
    )
    # losses
    logits = torch.log_softmax(r(5, 4), 1)
    tgt = torch.tensor([0, 3, -100, 2, 3])
    for red in (0, 1, 2):
        case("nll_loss_forward", logits, tgt, None, red, -100)
        case("nll_loss_forward", logits, tgt, r(4, lo=0.1, hi=2), red, -100)
    _, tw = A.nll_loss_forward(logits, tgt, None, 1, -100)
    case("nll_loss_backward", torch.tensor(0.7), logits, tgt, None, 1, -100, tw)
    case("nll_loss_backward", r(5), logits, tgt, r(4, lo=0.1, hi=2), 0, -100, tw)
    l2 = torch.log_softmax(r(2, 3, 2, 2), 1)
    t2 = ri(2, 2, 2, lo=0, hi=3)
    case("nll_loss2d_forward", l2, t2, None, 1, -100)
    _, tw2 = A.nll_loss2d_forward(l2, t2, None, 1, -100)
    case("nll_loss2d_backward", torch.tensor(1.3), l2, t2, None, 1, -100, tw2)
    case("mse_loss", r(3, 4), r(3, 4), 1)
    case("mse_loss", r(3, 4), r(3, 4), 0)
    case("mse_loss_backward", torch.tensor(0.5), r(3, 4), r(3, 4), 1)
    case(
        "binary_cross_entropy_with_logits", r(3, 4, lo=-5, hi=5), r(3, 4, lo=0, hi=1), None, None, 1
    )
    case(
        "binary_cross_entropy_with_logits",
        r(3, 4, lo=-5, hi=5),
        r(3, 4, lo=0, hi=1),
        r(4),
        r(4, lo=0.5, hi=3),
        0,
    )
    # matmul
    for dt in (f32, bf16):
        case("mm", r(3, 5, dtype=dt), r(5, 2, dtype=dt))
        case("bmm", r(2, 3, 5, dtype=dt), r(2, 5, 4, dtype=dt))
        case("addmm", r(4, dtype=dt), r(3, 5, dtype=dt), r(5, 4, dtype=dt), S(1), S(1))
        case(
            "baddbmm",
            r(2, 3, 4, dtype=dt),
            r(2, 3, 5, dtype=dt),
            r(2, 5, 4, dtype=dt),
            S(0.5),
            S(2.0),
        )
    nan_bias = torch.full((4,), float("nan"))
    case("addmm", nan_bias, r(3, 5), r(5, 4), S(0), S(1))
    # data movement
    t = r(2, 3, 4)
    case("view", t, [4, 6])
    case("transpose.int", t, 0, 2)
    case("permute", t, [1, 2, 0])
    case("expand", r(3, 1), [2, 3, 4], False)
    case("slice.Tensor", t, 2, 1, 100, 2)
    case("slice.Tensor", t, 1, -2, None, 1)
    case("select.int", t, 1, -1)
    case("split.Tensor", t, 3, 2)
    case("split_with_sizes", t, [1, 2], 1)
    case("unbind.int", t, 0)
    case("cat", [r(2, 3), ri(1, 3).to(torch.int32), torch.zeros(0)], 0)
    case("stack", [r(2, 3), r(2, 3)], 2)
    case("flip", t, [0, 2])
    case("roll", t, [1, -5], [2, 1])
    case("roll", t, [7], [])
    case("constant_pad_nd", t, [1, 2, -1, 0], S(0.5))
    case("triu", r(4, 5), 1)
    case("tril", r(2, 4, 4), -1)
    case("slice_scatter", r(6, 3), r(2, 3), 0, 1, 5, 3)
    case("select_scatter", r(4, 3), r(4), 1, 2)
    case("_unsafe_view", t, [24])
    case("squeeze.dim", r(2, 1, 3), 1)
    case("unsqueeze", t, -1)
    # indexing
    src = r(3, 5)
    case("gather", src, 1, ri(3, 4, lo=0, hi=5), False)
    case("gather", src, 0, ri(2, 5, lo=0, hi=3), False)
    case(
        "scatter.src",
        torch.zeros(3, 5),
        1,
        torch.tensor([[0, 1, 0], [4, 4, 2], [1, 2, 3]]),
        r(3, 4),
    )
    case("scatter.value", torch.zeros(3, 5), 0, torch.tensor([[0, 1, 2, 0, 1]]), S(2.5))
    case(
        "scatter_add",
        torch.zeros(3, 5),
        1,
        torch.tensor([[0, 0, 0], [4, 4, 2], [1, 2, 1]]),
        r(3, 3),
    )
    case("index_select", src, 1, torch.tensor([4, 0, 0, 2]))
    case("index_select", src, 0, torch.tensor([2, 2]).to(torch.int32))
    t3 = r(3, 4, 5)
    case("index.Tensor", t3, [None, torch.tensor([3, -1, 0])])
    case("index.Tensor", t3, [torch.tensor([[0], [2]]), None, torch.tensor([1, -2, 4])])
    case("index.Tensor", t3, [torch.tensor([2, 0]), torch.tensor([1, 3])])
    case("index.Tensor", t3, [None, torch.tensor([0, 1]), torch.tensor([[1], [2]])])
    dup = torch.tensor([1, 0, 1, 1])
    case("index_put", torch.zeros(3, 4), [dup], r(4, 4), True)
    case("index_put", torch.zeros(3, 4), [dup], r(4, 4), False)
    case("index_put", torch.zeros(3, 4), [None, torch.tensor([0, 3])], r(2), False)
    case("index_put", r(3, 4, 5), [torch.tensor([0, 2]), None, torch.tensor([1, 4])], r(2, 4), True)
    emb = r(6, 3)
    ids = torch.tensor([[0, 5, 2], [2, 2, 1]])
    case("embedding", emb, ids, -1, False, False)
    case("embedding_dense_backward", r(2, 3, 3), ids, 6, -1, False)
    case("embedding_dense_backward", r(2, 3, 3), ids, 6, 2, False)
    # backward helpers that autograd emits
    hx = r(3, 8, lo=-5, hi=5)
    case("hardsigmoid_backward", r(3, 8), hx)
    case("hardswish_backward", r(3, 8), hx)
    lo_, buf = A.log_sigmoid_forward(hx)
    case("log_sigmoid_forward", hx)
    case("log_sigmoid_backward", r(3, 8), hx, buf)
    case("select_backward", r(5), [3, 5], 0, -2)
    case("slice_backward", r(4, 2), [4, 5], 1, 1, 2**63 - 1, 2)
    case("slice_backward", r(2, 5), [4, 5], 0, -3, -1, 1)
    case("index_add", r(4, 3), 0, torch.tensor([3, 0, 3, 1, 3]), r(5, 3), S(0.5))
    case("index_add", r(3, 4), 1, torch.tensor([1, 1]), r(3, 2))
    # pooling
    img = r(2, 3, 7, 7)
    img[0, 0, 0, 0] = float("nan")
    img[1, 1, :3, :3] = float("-inf")
    for args in (
        ([2, 2], [], [0, 0], [1, 1], False),
        ([3, 3], [2, 2], [1, 1], [1, 1], True),
        ([2, 3], [1, 2], [1, 0], [2, 1], False),
    ):
        case("max_pool2d_with_indices", img, *args)
        vals, ind = A.max_pool2d_with_indices(img, *args)
        case("max_pool2d_with_indices_backward", r(*vals.shape), img, *args, ind)
    # factories (fill values as graph inputs)
    case("full", [2, 3], S(1.5), torch.float32, O, O, O)
    case("arange.start_step", S(1), S(10), S(3), torch.int64, O, O, O)
    case("arange.start_step", S(0.5), S(2.0), S(0.25), torch.float32, O, O, O)
    case("arange", S(5), torch.float32, O, O, O)
    case("scalar_tensor", S(2.5), torch.float32, O, O, O)
    case("fill.Scalar", r(2, 3, dtype=bf16), S(0.1))
    # foreach (AdamW / clip_grad_norm_)
    p1, p2 = r(3), r(2, 2)
    case("_foreach_add.Scalar", [p1, p2], S(0.5))
    case("_foreach_add.List", [p1, p2], [r(3), r(2, 2)], S(-1.5))
    case("_foreach_mul.Scalar", [p1, p2], S(0.9))
    case("_foreach_mul.Tensor", [p1, p2], torch.tensor(0.25))
    case("_foreach_div.ScalarList", [p1, p2], [S(2.0), S(4.0)])
    case("_foreach_addcmul.Scalar", [p1, p2], [r(3), r(2, 2)], [r(3), r(2, 2)], S(0.001))
    case(
        "_foreach_addcdiv.ScalarList",
        [p1, p2],
        [r(3), r(2, 2)],
        [r(3, lo=1, hi=2), r(2, 2, lo=1, hi=2)],
        [S(-0.1), S(-0.2)],
    )
    case(
        "_foreach_addcdiv.Tensor",
        [p1, p2],
        [r(3), r(2, 2)],
        [r(3, lo=1, hi=2), r(2, 2, lo=1, hi=2)],
        torch.tensor([-0.1, -0.2], dtype=torch.float64),
    )
    case("_foreach_lerp.Scalar", [p1, p2], [r(3), r(2, 2)], S(0.1))
    case("_foreach_sqrt", [r(3, lo=0, hi=2), r(2, 2, lo=0, hi=2)])
    case("_foreach_norm.Scalar", [p1, p2], S(2), None)
    case("_foreach_pow.ScalarAndTensor", S(0.9), [p1, p2])
    case("_foreach_sub.List", [p1, p2], [r(3), r(2, 2)], S(1))
    # New cases go here, at the end: the inputs are drawn from one seeded stream, so a
    # case added earlier would change the inputs (and goldens) of every case after it.
    inf, nan = float("inf"), float("nan")
    for dt in (f32, bf16):
        case("logaddexp", r(3, 4, dtype=dt, lo=-30, hi=30), r(4, dtype=dt, lo=-30, hi=30))
        case(
            "logaddexp",
            torch.tensor([inf, -inf, inf, -inf, nan, 1.0, 1e30, -1e30], dtype=dt),
            torch.tensor([inf, -inf, -inf, 2.0, 1.0, nan, 1e30, -1e30], dtype=dt),
        )


def main():
    build()
    print(
        "// Generated by src/lowering/gen_golden.py from eager PyTorch",
        torch.__version__,
        "on CPU.",
    )
    print("// Do not edit: regenerate.")
    for op, args, outs, note in CASES:
        body = " ".join(emit_arg(a) for a in args)
        out_lits = ", ".join(lit(o) for o in outs)
        print(f'{{"{op}", [](CallHarness& h) {{ {body} }}, {{{out_lits}}}}},')


if __name__ == "__main__":
    main()
