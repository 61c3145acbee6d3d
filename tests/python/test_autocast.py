"""torch.autocast("ember"): every op of the policy lists torch publishes for backends
(ATen/autocast_mode.h, parsed here so a torch upgrade that adds an op fails until it is
covered) gives its documented output dtype (docs/architecture.md, "Autocast"):
lower_precision_fp ops the autocast dtype, fp32 and fp32_set_opt_dtype ops (and the two
norm overloads) float32, promote ops the widest input dtype. CPU autocast's result for
the same call is checked against the documented differences (CPU_DIFFERS)."""

import os
import re

import pytest
import torch

import ember  # noqa: F401

HEADER = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "autocast_mode.h")
LISTS = {
    "AT_FORALL_LOWER_PRECISION_FP": "lower",
    "AT_FORALL_FP32": "fp32",
    "AT_FORALL_FP32_SET_OPT_DTYPE": "fp32",
    "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE": "fp32",
    "AT_FORALL_PROMOTE": "promote",
}


def policy_lists():
    """[(policy, "op" or "op.overload")] from the header's #define lists."""
    text = open(HEADER).read()
    out = []
    for macro, policy in LISTS.items():
        m = re.search(r"#define " + macro + r"\(_\)(.*?)\n\n", text, re.S)
        assert m, f"{macro} not found in {HEADER}"
        body = m.group(1)
        if macro == "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE":
            names = re.findall(r'"([a-z_]+\.[A-Za-z_]+)"', body)
        else:
            names = []
            for args in re.findall(r"_\(([^()]*)\)", body):
                parts = [p.strip() for p in args.split(",")]
                names.append(parts[0] if len(parts) == 1 else f"{parts[0]}.{parts[1]}")
        out += [(policy, n) for n in names]
    return out


_ON = ["cpu"]  # the device the sample builders make their tensors on


def r(*shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(len(shape) + sum(shape))
    return torch.randn(*shape, generator=g).to(dtype).to(_ON[0])


def pos(*shape, dtype=torch.float32):
    return r(*shape, dtype=dtype).abs() + 0.5


def t(values, dtype=None):
    return torch.tensor(values, dtype=dtype).to(_ON[0])


B = torch.bfloat16
# Sample calls: name -> (callable, args builder). Lower-precision ops get f32 inputs
# (autocast lowers them); fp32 ops get bf16 inputs (autocast raises them); promote ops
# get mixed f32/bf16 inputs (autocast promotes to the widest).
A = torch.ops.aten
SAMPLES = {
    # ---- lower_precision_fp ----
    "_convolution.deprecated": lambda: A._convolution.deprecated(
        r(1, 2, 5, 5),
        r(3, 2, 3, 3),
        None,
        [1, 1],
        [0, 0],
        [1, 1],
        False,
        [0, 0],
        1,
        False,
        False,
        True,
    ),
    "_convolution": lambda: A._convolution(
        r(1, 2, 5, 5),
        r(3, 2, 3, 3),
        None,
        [1, 1],
        [0, 0],
        [1, 1],
        False,
        [0, 0],
        1,
        False,
        False,
        True,
        True,
    ),
    "conv1d": lambda: A.conv1d(r(1, 2, 6), r(3, 2, 3)),
    "conv2d": lambda: A.conv2d(r(1, 2, 5, 5), r(3, 2, 3, 3)),
    "conv3d": lambda: A.conv3d(r(1, 2, 4, 4, 4), r(3, 2, 2, 2, 2)),
    "conv_tbc": lambda: A.conv_tbc(r(5, 2, 3), r(2, 3, 4), r(4)),
    "conv_transpose1d": lambda: A.conv_transpose1d(r(1, 2, 5), r(2, 3, 3)),
    "conv_transpose2d.input": lambda: A.conv_transpose2d.input(r(1, 2, 4, 4), r(2, 3, 3, 3)),
    "conv_transpose3d.input": lambda: A.conv_transpose3d.input(r(1, 2, 3, 3, 3), r(2, 3, 2, 2, 2)),
    "convolution": lambda: A.convolution(
        r(1, 2, 5, 5), r(3, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1
    ),
    "prelu": lambda: A.prelu(r(2, 3, 4), r(3)),
    "addmm": lambda: A.addmm(r(3, 4), r(3, 5), r(5, 4)),
    "addmv": lambda: A.addmv(r(3), r(3, 5), r(5)),
    "addr": lambda: A.addr(r(3, 4), r(3), r(4)),
    "matmul": lambda: A.matmul(r(2, 3, 5), r(5, 4)),
    "einsum": lambda: A.einsum("ij,jk->ik", [r(3, 5), r(5, 4)]),
    "mm": lambda: A.mm(r(3, 5), r(5, 4)),
    "mv": lambda: A.mv(r(3, 5), r(5)),
    "linalg_vecdot": lambda: A.linalg_vecdot(r(3, 5), r(3, 5)),
    "linear": lambda: A.linear(r(3, 5), r(4, 5), r(4)),
    "addbmm": lambda: A.addbmm(r(3, 4), r(2, 3, 5), r(2, 5, 4)),
    "baddbmm": lambda: A.baddbmm(r(2, 3, 4), r(2, 3, 5), r(2, 5, 4)),
    "bmm": lambda: A.bmm(r(2, 3, 5), r(2, 5, 4)),
    "chain_matmul": lambda: A.chain_matmul([r(3, 5), r(5, 4), r(4, 2)]),
    "linalg_multi_dot": lambda: A.linalg_multi_dot([r(3, 5), r(5, 4), r(4, 2)]),
    "_thnn_fused_lstm_cell": lambda: A._thnn_fused_lstm_cell(r(2, 12), r(2, 12), r(2, 3)),
    "_thnn_fused_gru_cell": lambda: A._thnn_fused_gru_cell(r(2, 9), r(2, 9), r(2, 3)),
    # with biases: without them ember's lstm_cell/gru_cell take the CUDA-only fused
    # kernel (a known bridge gap, reported), with them the composite path
    "lstm_cell": lambda: A.lstm_cell(
        r(2, 4), [r(2, 3), r(2, 3)], r(12, 4), r(12, 3), r(12), r(12) * 0.5
    ),
    "gru_cell": lambda: A.gru_cell(r(2, 4), r(2, 3), r(9, 4), r(9, 3), r(9), r(9) * 0.5),
    "rnn_tanh_cell": lambda: A.rnn_tanh_cell(r(2, 4), r(2, 3), r(3, 4), r(3, 3)),
    "rnn_relu_cell": lambda: A.rnn_relu_cell(r(2, 4), r(2, 3), r(3, 4), r(3, 3)),
    "_scaled_dot_product_flash_attention": lambda: A._scaled_dot_product_flash_attention(
        r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8)
    ),
    "scaled_dot_product_attention": lambda: A.scaled_dot_product_attention(
        r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8)
    ),
    # ---- fp32 ----
    "acos": lambda: A.acos(r(4, dtype=B).clamp(-0.9, 0.9)),
    "asin": lambda: A.asin(r(4, dtype=B).clamp(-0.9, 0.9)),
    "cosh": lambda: A.cosh(r(4, dtype=B)),
    "erfinv": lambda: A.erfinv(r(4, dtype=B).clamp(-0.9, 0.9)),
    "exp": lambda: A.exp(r(4, dtype=B)),
    "expm1": lambda: A.expm1(r(4, dtype=B)),
    "log": lambda: A.log(pos(4, dtype=B)),
    "log10": lambda: A.log10(pos(4, dtype=B)),
    "log2": lambda: A.log2(pos(4, dtype=B)),
    "log1p": lambda: A.log1p(pos(4, dtype=B)),
    "reciprocal": lambda: A.reciprocal(pos(4, dtype=B)),
    "rsqrt": lambda: A.rsqrt(pos(4, dtype=B)),
    "sinh": lambda: A.sinh(r(4, dtype=B)),
    "tan": lambda: A.tan(r(4, dtype=B)),
    "pow.Tensor_Scalar": lambda: A.pow.Tensor_Scalar(pos(4, dtype=B), 1.5),
    "pow.Tensor_Tensor": lambda: A.pow.Tensor_Tensor(pos(4, dtype=B), r(4, dtype=B)),
    "pow.Scalar": lambda: A.pow.Scalar(2.0, r(4, dtype=B)),
    "softplus": lambda: A.softplus(r(4, dtype=B)),
    "layer_norm": lambda: A.layer_norm(r(2, 6, dtype=B), [6]),
    "native_layer_norm": lambda: A.native_layer_norm(r(2, 6, dtype=B), [6], None, None, 1e-5),
    "rms_norm": lambda: A.rms_norm(r(2, 6, dtype=B), [6]),
    "group_norm": lambda: A.group_norm(r(2, 4, 3, dtype=B), 2),
    "frobenius_norm.dim": lambda: A.frobenius_norm.dim(r(3, 4, dtype=B), [1]),
    "nuclear_norm": lambda: A.nuclear_norm(r(3, 4, dtype=B)),
    "nuclear_norm.dim": lambda: A.nuclear_norm.dim(r(2, 3, 4, dtype=B), [1, 2]),
    "cosine_similarity": lambda: A.cosine_similarity(r(3, 4, dtype=B), r(3, 4, dtype=B)),
    "poisson_nll_loss": lambda: A.poisson_nll_loss(
        r(4, dtype=B), pos(4, dtype=B), True, False, 1e-8, 1
    ),
    "cosine_embedding_loss": lambda: A.cosine_embedding_loss(
        r(3, 4, dtype=B), r(3, 4, dtype=B), t([1.0, -1.0, 1.0], B)
    ),
    "nll_loss": lambda: A.nll_loss(r(3, 5, dtype=B).log_softmax(1), t([0, 4, 2])),
    "nll_loss2d": lambda: A.nll_loss2d(
        r(2, 3, 2, 2, dtype=B).log_softmax(1), t([[[0, 1], [2, 0]], [[1, 1], [0, 2]]])
    ),
    "hinge_embedding_loss": lambda: A.hinge_embedding_loss(
        r(4, dtype=B), t([1.0, -1.0, 1.0, -1.0], B)
    ),
    "kl_div": lambda: A.kl_div(r(3, 4, dtype=B), pos(3, 4, dtype=B)),
    "l1_loss": lambda: A.l1_loss(r(3, 4, dtype=B), r(3, 4, dtype=B)),
    "smooth_l1_loss": lambda: A.smooth_l1_loss(r(3, 4, dtype=B), r(3, 4, dtype=B)),
    "huber_loss": lambda: A.huber_loss(r(3, 4, dtype=B), r(3, 4, dtype=B)),
    "mse_loss": lambda: A.mse_loss(r(3, 4, dtype=B), r(3, 4, dtype=B)),
    "margin_ranking_loss": lambda: A.margin_ranking_loss(
        r(4, dtype=B), r(4, dtype=B), t([1.0, -1.0, 1.0, -1.0], B)
    ),
    "multilabel_margin_loss": lambda: A.multilabel_margin_loss(
        r(2, 4, dtype=B), t([[3, 0, -1, 1], [1, 2, 3, -1]])
    ),
    "soft_margin_loss": lambda: A.soft_margin_loss(r(4, dtype=B), t([1.0, -1.0, 1.0, -1.0], B)),
    "triplet_margin_loss": lambda: A.triplet_margin_loss(
        r(3, 4, dtype=B), r(3, 4, dtype=B), r(3, 4, dtype=B)
    ),
    "multi_margin_loss": lambda: A.multi_margin_loss(r(3, 5, dtype=B), t([0, 4, 2])),
    "binary_cross_entropy_with_logits": lambda: A.binary_cross_entropy_with_logits(
        r(3, 4, dtype=B), pos(3, 4, dtype=B).clamp(0, 1)
    ),
    "dist": lambda: A.dist(r(3, 4, dtype=B), r(3, 4, dtype=B)),
    "pdist": lambda: A.pdist(r(4, 3, dtype=B)),
    "cdist": lambda: A.cdist(r(3, 4, dtype=B), r(2, 4, dtype=B)),
    "renorm": lambda: A.renorm(r(3, 4, dtype=B), 2, 0, 1.0),
    "logsumexp": lambda: A.logsumexp(r(3, 4, dtype=B), [1]),
    "upsample_nearest1d": lambda: A.upsample_nearest1d(r(1, 2, 3, dtype=B), [6]),
    "_upsample_nearest_exact1d": lambda: A._upsample_nearest_exact1d(r(1, 2, 3, dtype=B), [6]),
    "upsample_nearest2d": lambda: A.upsample_nearest2d(r(1, 2, 3, 3, dtype=B), [6, 6]),
    "_upsample_nearest_exact2d": lambda: A._upsample_nearest_exact2d(
        r(1, 2, 3, 3, dtype=B), [6, 6]
    ),
    "upsample_nearest3d": lambda: A.upsample_nearest3d(r(1, 1, 2, 2, 2, dtype=B), [4, 4, 4]),
    "_upsample_nearest_exact3d": lambda: A._upsample_nearest_exact3d(
        r(1, 1, 2, 2, 2, dtype=B), [4, 4, 4]
    ),
    "upsample_linear1d": lambda: A.upsample_linear1d(r(1, 2, 3, dtype=B), [6], False),
    "upsample_bilinear2d": lambda: A.upsample_bilinear2d(r(1, 2, 3, 3, dtype=B), [6, 6], False),
    "_upsample_bilinear2d_aa": lambda: A._upsample_bilinear2d_aa(
        r(1, 2, 3, 3, dtype=B), [6, 6], False
    ),
    "upsample_trilinear3d": lambda: A.upsample_trilinear3d(
        r(1, 1, 2, 2, 2, dtype=B), [4, 4, 4], False
    ),
    "upsample_bicubic2d": lambda: A.upsample_bicubic2d(r(1, 2, 3, 3, dtype=B), [6, 6], False),
    "_upsample_bicubic2d_aa": lambda: A._upsample_bicubic2d_aa(
        r(1, 2, 3, 3, dtype=B), [6, 6], False
    ),
    # ---- fp32_set_opt_dtype (no dtype argument given) and fp32_append_dtype ----
    "prod": lambda: A.prod(pos(4, dtype=B)),
    "prod.dim_int": lambda: A.prod.dim_int(pos(3, 4, dtype=B), 1),
    "softmax.int": lambda: A.softmax.int(r(3, 4, dtype=B), 1),
    "log_softmax.int": lambda: A.log_softmax.int(r(3, 4, dtype=B), 1),
    "cumprod": lambda: A.cumprod(pos(3, 4, dtype=B), 1),
    "cumsum": lambda: A.cumsum(r(3, 4, dtype=B), 1),
    "linalg_vector_norm": lambda: A.linalg_vector_norm(r(3, 4, dtype=B)),
    "linalg_matrix_norm": lambda: A.linalg_matrix_norm(r(3, 4, dtype=B), 1),
    "linalg_matrix_norm.str_ord": lambda: A.linalg_matrix_norm.str_ord(r(3, 4, dtype=B)),
    "sum": lambda: A.sum(r(3, 4, dtype=B)),
    "sum.dim_IntList": lambda: A.sum.dim_IntList(r(3, 4, dtype=B), [1]),
    "norm.Scalar": lambda: A.norm.Scalar(r(3, 4, dtype=B)),
    "norm.ScalarOpt_dim": lambda: A.norm.ScalarOpt_dim(r(3, 4, dtype=B), 2, [1]),
    # ---- promote (mixed f32 / bf16 operands) ----
    "addcdiv": lambda: A.addcdiv(r(4), r(4, dtype=B), pos(4)),
    "addcmul": lambda: A.addcmul(r(4), r(4, dtype=B), r(4)),
    "atan2": lambda: A.atan2(r(4, dtype=B), r(4)),
    "bilinear": lambda: A.bilinear(r(2, 3, dtype=B), r(2, 4), r(5, 3, 4)),
    "cross": lambda: A.cross(r(2, 3, dtype=B), r(2, 3)),
    "dot": lambda: A.dot(r(4, dtype=B), r(4)),
    "vdot": lambda: A.vdot(r(4, dtype=B), r(4)),
    "grid_sampler": lambda: A.grid_sampler(
        r(1, 1, 3, 3, dtype=B), r(1, 2, 2, 2) * 0.5, 0, 0, False
    ),
    "index_put": lambda: A.index_put(r(4), [t([0, 2])], r(2, dtype=B)),
    "tensordot": lambda: A.tensordot(r(3, 4, dtype=B), r(4, 2), [1], [0]),
    "scatter_add": lambda: A.scatter_add(r(3), 0, t([0, 2]), r(2, dtype=B)),
}

# Ops of the lists eager cannot run on a CPU (their kernels exist for CUDA only): the
# autocast cast is applied and the op then fails in the CPU kernel on both devices.
CUDA_ONLY = {"_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "_scaled_dot_product_flash_attention"}

# CPU autocast (torch.autocast("cpu")) uses lists of its own: for these ops its result
# dtype (for the samples' inputs; "error": the call raises) differs from ember's
# CUDA-style one.
CPU_DIFFERS = {
    # CPU keeps these in float32 (not on its lower-precision list)
    **dict.fromkeys(
        ["_convolution", "convolution", "addmv", "addr", "mv", "lstm_cell", "gru_cell"],
        torch.float32,
    ),
    # CPU leaves these in bf16 (not on its fp32 lists)
    **dict.fromkeys(
        [
            "acos",
            "asin",
            "cosh",
            "erfinv",
            "exp",
            "expm1",
            "log",
            "log10",
            "log2",
            "log1p",
            "reciprocal",
            "rsqrt",
            "sinh",
            "tan",
            "pow.Tensor_Scalar",
            "pow.Tensor_Tensor",
            "pow.Scalar",
            "softplus",
            "layer_norm",
            "native_layer_norm",
            "rms_norm",
            "group_norm",
            "frobenius_norm.dim",
            "cosine_similarity",
            "dist",
            "renorm",
            "logsumexp",
            "upsample_nearest1d",
            "_upsample_nearest_exact1d",
            "upsample_nearest2d",
            "_upsample_nearest_exact2d",
            "upsample_nearest3d",
            "_upsample_nearest_exact3d",
            "upsample_linear1d",
            "upsample_bilinear2d",
            "upsample_trilinear3d",
            "upsample_bicubic2d",
            "softmax.int",
            "log_softmax.int",
            "cumprod",
            "cumsum",
            "linalg_vector_norm",
            "linalg_matrix_norm",
            "linalg_matrix_norm.str_ord",
            "sum",
            "sum.dim_IntList",
            "norm.Scalar",
            "norm.ScalarOpt_dim",
        ],
        torch.bfloat16,
    ),
    # left in bf16 by CPU autocast, which its CPU kernel then rejects
    **dict.fromkeys(
        [
            "nuclear_norm",
            "nuclear_norm.dim",
            "pdist",
            "_upsample_bilinear2d_aa",
            "_upsample_bicubic2d_aa",
        ],
        "error",
    ),
    # CPU has no promote list: mixed bf16/f32 operands raise
    **dict.fromkeys(
        ["bilinear", "cross", "dot", "vdot", "index_put", "tensordot", "scatter_add"], "error"
    ),
}


def first_tensor(out):
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out


def result_dtype(device, name, dtype):
    """The dtype of the sample's (first) result under torch.autocast(device, dtype)."""
    _ON[0] = device
    try:
        with torch.autocast(device, dtype=dtype):
            out = first_tensor(SAMPLES[name]())
        return out.dtype
    finally:
        _ON[0] = "cpu"


def expected(policy, dtype):
    return dtype if policy == "lower" else torch.float32


ENTRIES = policy_lists()


def test_every_listed_op_has_a_sample():
    names = {n for _, n in ENTRIES}
    missing = sorted(n for n in names if n not in SAMPLES)
    assert not missing, f"autocast list ops without a sample call: {missing}"
    assert sorted(set(SAMPLES) - names) == [], "samples for ops no longer in the lists"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize(
    "policy,name",
    [pytest.param(p, n, id=f"{p}:{n}") for p, n in ENTRIES if n not in CUDA_ONLY],
)
def test_ember_autocast_gives_the_documented_dtype(policy, name, dtype):
    assert result_dtype("ember", name, dtype) == expected(policy, dtype)


@pytest.mark.parametrize("name", sorted(CUDA_ONLY))
def test_cuda_only_ops_are_cast_then_fail_in_the_cpu_kernel(name):
    for device in ("cpu", "ember"):
        with pytest.raises((RuntimeError, NotImplementedError)):
            result_dtype(device, name, torch.bfloat16)


def test_cpu_autocast_differs_where_documented():
    got = {}
    for policy, name in ENTRIES:
        if name in CUDA_ONLY:
            continue
        try:
            cpu = result_dtype("cpu", name, torch.bfloat16)
        except RuntimeError:
            cpu = "error"
        if cpu != expected(policy, torch.bfloat16):
            got[name] = cpu
    assert got == CPU_DIFFERS
