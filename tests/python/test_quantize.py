"""ember.quantize: quantized Linear/Conv1D on ember against the float64
dequantize-then-matmul reference on the CPU, bad input, state_dict round trips, a tiny
HF GPT-2, and torchao's configs on ember (see docs/architecture.md, "Quantization").

Tolerances: float32 activations (the default compute dtype) are compared with
``atol = rtol = 2e-5`` against the float64 product of the same float32 activations and
the dequantized weight (the kernels accumulate in float32 over K <= 320); bfloat16
compute against the float64 product of the bf16-rounded activations, with
``2e-2 * max|ref|`` (bf16's 2^-8 relative rounding of the result and the scales);
``int8_dynamic`` against the float64 product of the dequantized int8 activations
(quantized on the CPU by the same function) and weights, ``atol = rtol = 2e-5``.
"""

import copy
import io

import pytest
import torch
import torch.nn as nn

import ember
from ember import quantize as Q

DEV = ember.device()


def _linear(k, n, bias=True, seed=0):
    torch.manual_seed(seed)
    m = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        m.weight.mul_(torch.linspace(0.2, 3.0, n)[:, None])  # rows of different ranges
    return nn.Sequential(m)


def _ref(x, layer: Q.QuantizedLinear, activations=None):
    """float64 reference on the CPU: x (or given activations) @ dequantized W^T + b."""
    w = layer.dequantized_weight()
    xd = (x if activations is None else activations).double().cpu()
    y = xd.reshape(-1, w.shape[1]) @ w.t()
    if layer.bias is not None:
        y = y + layer.bias.detach().cpu().double()
    return y.reshape(*x.shape[:-1], w.shape[0])


def _dynamic_activations(x):
    q, s, z = Q.quantize_activation_per_row(x.reshape(-1, x.shape[-1]).cpu())
    return ((q.double() - z.double()) * s.double()).reshape(x.shape)


SHAPES = [  # (K, N, group, bias): K, N not multiples of the 16-row block or of 64/128
    (96, 40, 32, True),
    (160, 100, 32, False),
    (320, 24, 64, True),
    (256, 17, 128, False),
]


@pytest.mark.parametrize("scheme", ["int8_weight_only", "int4_weight_only", "int8_dynamic"])
@pytest.mark.parametrize("k,n,g,bias", SHAPES)
def test_quantized_linear_on_ember_matches_f64_dequantized_reference(scheme, k, n, g, bias):
    model = _linear(k, n, bias).to(DEV)
    ember.quantize(model, scheme, group_size=g)
    layer = model[0]
    assert isinstance(layer, Q.QuantizedLinear)
    for shape in [(1, k), (3, 5, k)]:
        x = torch.randn(*shape)
        y = model(x.to(DEV)).cpu()
        assert y.dtype == torch.float32 and y.shape == (*shape[:-1], n)
        acts = _dynamic_activations(x) if scheme == "int8_dynamic" else None
        torch.testing.assert_close(y.double(), _ref(x, layer, acts), atol=2e-5, rtol=2e-5)


def test_the_three_backends_agree():
    """The same quantized forward on the native kernels (cpu), the reference interpreter
    and one ATen call per op: int8_dynamic's activation quantization is lowered, so the
    interpreter checks the kernels; the fused ops are the same ATen externs in all three."""
    k, n = 160, 40
    x = torch.randn(3, k)
    for scheme in Q.SCHEMES:
        model = ember.quantize(
            _linear(k, n).to(DEV),
            scheme,
            group_size=32,
            compute_dtype=torch.bfloat16 if scheme != "int8_dynamic" else None,
        )
        out = {}
        old = ember.config.backend
        try:
            for b in ("cpu", "interpreter", "aten"):
                ember.config.backend = b
                out[b] = model(x.to(DEV)).cpu()
                assert ember.metrics.last_graph()["backend"] == b
        finally:
            ember.config.backend = old
        assert torch.equal(out["cpu"], out["interpreter"]), scheme
        assert torch.equal(out["cpu"], out["aten"]), scheme


@pytest.mark.parametrize("scheme", ["int8_weight_only", "int4_weight_only"])
def test_bf16_compute_dtype(scheme):
    k, n = 160, 40
    model = _linear(k, n).to(DEV)
    ember.quantize(model, scheme, group_size=32, compute_dtype=torch.bfloat16)
    layer = model[0]
    assert layer.compute_dtype == torch.bfloat16
    assert next(b for b in layer.buffers() if b.is_floating_point()).dtype == torch.bfloat16
    x = torch.randn(4, k)
    y = model(x.to(DEV)).cpu()
    assert y.dtype == torch.float32
    ref = _ref(x, layer, x.bfloat16())
    assert (y.double() - ref).abs().max() <= 2e-2 * ref.abs().max()


def test_quantized_weights_are_equal_on_cpu_and_ember_and_match_eager():
    k, n = 96, 40
    for scheme in Q.SCHEMES:
        cpu = ember.quantize(_linear(k, n), scheme, group_size=32)
        dev = ember.quantize(_linear(k, n).to(DEV), scheme, group_size=32)
        for (name, a), (_, b) in zip(cpu.state_dict().items(), dev.state_dict().items()):
            if name.endswith("_extra_state"):
                assert a == b
                continue
            assert b.device.type == "ember"
            assert torch.equal(a, b.cpu()), (scheme, name)
        x = torch.randn(2, k)
        torch.testing.assert_close(dev(x.to(DEV)).cpu(), cpu(x), atol=1e-6, rtol=1e-6)


def test_numerics_follow_torchao_formulas():
    w = torch.tensor([[-1.0, 0.5, 0.25, 1.0] * 8, [0.0, 2.0, -4.0, 1.0] * 8])
    q, s = Q.quantize_int8_per_channel(w)
    torch.testing.assert_close(s, torch.tensor([1 / 127.5, 4 / 127.5]))
    assert q.dtype == torch.int8 and q.min() >= -128 and q.max() <= 127
    assert q[1, 1] == 64  # round(2 / (4 / 127.5)) = round(63.75): torchao's 127.5, not 127
    assert torch.equal(q, torch.round(w / s[:, None]).clamp(-128, 127).to(torch.int8))
    q4, sc, z = Q.quantize_int4_groupwise(w, 32)
    torch.testing.assert_close(sc[:, 0], torch.tensor([2 / 15, 6 / 15]))
    torch.testing.assert_close(z[:, 0], torch.tensor([-1 + 16 / 15, -4 + 48 / 15]))
    assert q4.min() == 0 and q4.max() == 15
    # The dequantized int4 weight is within half a step of the float weight.
    assert (
        (Q.dequantize_int4(q4, sc, z) - w.double()).abs() <= sc.double()[:, :1] / 2 + 1e-6
    ).all()
    qx, xs, xz = Q.quantize_activation_per_row(torch.tensor([[-1.0, 0.0, 3.0]]))
    torch.testing.assert_close(xs, torch.tensor([[4 / 255]]))
    assert qx.tolist() == [[-128, int(xz), 127]]


def test_nothing_materializes_a_float_weight():
    """Each scheme's forward on ember is one program whose only extern is the fused op
    (lowered otherwise), and its own buffers stay far below a float copy of the weight."""
    k, n = 512, 256
    float_weight_bytes = k * n * 4
    for scheme, op in [
        ("int8_weight_only", "aten::_weight_int8pack_mm"),
        ("int4_weight_only", "aten::_weight_int4pack_mm_for_cpu"),
        ("int8_dynamic", "aten::_int_mm"),
    ]:
        model = ember.quantize(_linear(k, n).to(DEV), scheme, group_size=128)
        ember.sync()
        y = model(torch.randn(2, k).to(DEV))
        text = ember.pending_graph()
        ember.sync()
        g = ember.metrics.last_graph()
        assert g["externs"] == {op: 1}, (scheme, g["externs"])
        assert not g["lowering_errors"] and not g["declined"], g
        assert g["planned_peak_bytes"] < float_weight_bytes // 16, (scheme, g)
        assert "aten::mm" not in text and "aten::addmm" not in text, text
        y.cpu()


def test_hf_conv1d():
    from transformers.pytorch_utils import Conv1D

    k, n = 96, 40
    for scheme in Q.SCHEMES:
        torch.manual_seed(1)
        model = nn.Sequential(Conv1D(n, k)).to(DEV)
        w_float = model[0].weight.detach().cpu().clone()  # [in, out]
        ember.quantize(model, scheme, group_size=32)
        layer = model[0]
        assert isinstance(layer, Q.QuantizedLinear) and layer.in_features == k
        # The quantized weight is the transpose of Conv1D's [in, out] weight.
        assert (layer.dequantized_weight().t() - w_float.double()).abs().max() < 0.2
        x = torch.randn(2, 3, k)
        acts = _dynamic_activations(x) if scheme == "int8_dynamic" else None
        torch.testing.assert_close(
            model(x.to(DEV)).cpu().double(), _ref(x, layer, acts), atol=2e-5, rtol=2e-5
        )


# ---------------------------------------------------------------------------------------
# Bad input: a Python error naming the expected shapes, never a crash


def test_group_size_must_divide_k_and_be_supported():
    model = _linear(100, 32)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=r"group_size 32 does not divide in_features K=100"):
        ember.quantize(model, "int4_weight_only", group_size=32)
    assert isinstance(model[0], nn.Linear)  # nothing changed
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match=r"group_size must be one of \(32, 64, 128, 256\)"):
        ember.quantize(_linear(96, 32), "int4_weight_only", group_size=48)
    with pytest.raises(ValueError, match="does not divide"):
        Q.quantize_int4_groupwise(torch.randn(16, 100), 32)
    with pytest.raises(ValueError, match="does not divide in_features K=96"):
        Q.int4_weight_only_linear(
            torch.randn(2, 96), torch.zeros(16, 48, dtype=torch.uint8), torch.ones(1, 16, 2), 64
        )
    with pytest.raises(ValueError, match="unknown scheme"):
        ember.quantize(_linear(96, 32), "int3")


def test_inconsistent_packed_shapes():
    x = torch.randn(2, 64).to(DEV)
    q = torch.zeros(32, 64, dtype=torch.int8).to(DEV)
    with pytest.raises(ValueError, match=r"expected scales of shape \(32,\), got \(31,\)"):
        Q.int8_weight_only_linear(x, q, torch.ones(31).to(DEV))
    with pytest.raises(
        ValueError,
        match=r"expected an input \[\.\.\., K=64\], got shape "
        r"\(2, 63\)",
    ):
        Q.int8_weight_only_linear(torch.randn(2, 63).to(DEV), q, torch.ones(32).to(DEV))
    with pytest.raises(ValueError, match=r"expected a bias \[N=32\], got \(30,\)"):
        Q.int8_weight_only_linear(x, q, torch.ones(32).to(DEV), torch.zeros(30).to(DEV))
    packed = torch.zeros(32, 32, dtype=torch.uint8).to(DEV)  # N=32, K=64
    with pytest.raises(
        ValueError,
        match=r"expected scales of shape \(2, 32, 2\), got "
        r"\(2, 16, 2\)",
    ):
        Q.int4_weight_only_linear(x, packed, torch.ones(2, 16, 2).to(DEV), 32)
    with pytest.raises(ValueError, match="needs a multiple of 16"):
        Q.int4_weight_only_linear(
            x, torch.zeros(24, 32, dtype=torch.uint8).to(DEV), torch.ones(2, 24, 2).to(DEV), 32
        )
    with pytest.raises(TypeError, match=r"expected a packed uint8 weight \[N, K/2\]"):
        Q.int4_weight_only_linear(
            x, torch.zeros(32, 32, dtype=torch.int8).to(DEV), torch.ones(2, 32, 2).to(DEV), 32
        )
    with pytest.raises(ValueError, match=r"expected int32 col_sums \[N=32\]"):
        Q.int8_dynamic_linear(
            x,
            torch.zeros(64, 32, dtype=torch.int8).to(DEV),
            torch.ones(32).to(DEV),
            torch.zeros(32).to(DEV),
        )
    with pytest.raises(ValueError, match=r"expected scales and zeros \[N=16, K/group\]"):
        Q.pack_int4(torch.zeros(16, 64, dtype=torch.int32), torch.ones(16, 2), torch.ones(16, 3))


def test_empty_scales():
    x = torch.randn(2, 64).to(DEV)
    with pytest.raises(
        ValueError,
        match=r"the scales are empty \(shape \(0,\)\); expected "
        r"\(32,\)",
    ):
        Q.int8_weight_only_linear(
            x, torch.zeros(32, 64, dtype=torch.int8).to(DEV), torch.ones(0).to(DEV)
        )
    with pytest.raises(
        ValueError,
        match=r"scales_and_zeros is empty .* expected "
        r"\(2, 32, 2\)",
    ):
        Q.int4_weight_only_linear(
            x, torch.zeros(32, 32, dtype=torch.uint8).to(DEV), torch.ones(0, 32, 2).to(DEV), 32
        )
    with pytest.raises(ValueError, match="the weight is empty"):
        Q.quantize_int8_per_channel(torch.ones(0, 8))


def test_unsupported_dtypes():
    with pytest.raises(TypeError, match="float32, bfloat16 or float16 weights, got torch.float64"):
        ember.quantize(_linear(64, 32).double(), "int8_weight_only")
    model = ember.quantize(_linear(64, 32).to(DEV), "int8_weight_only")
    with pytest.raises(
        TypeError, match="float32, bfloat16 or float16 activations, got torch.float64"
    ):
        model(torch.randn(2, 64, dtype=torch.float64).to(DEV))
    with pytest.raises(TypeError, match="got torch.int64"):
        model(torch.ones(2, 64, dtype=torch.int64).to(DEV))
    with pytest.raises(TypeError, match=r"expected an int8 weight \[N, K\], got torch.uint8"):
        Q.int8_weight_only_linear(
            torch.randn(2, 64), torch.zeros(32, 64, dtype=torch.uint8), torch.ones(32)
        )
    with pytest.raises(
        TypeError, match="expected float32/bfloat16/float16 scales, got torch.int32"
    ):
        Q.int8_weight_only_linear(
            torch.randn(2, 64),
            torch.zeros(32, 64, dtype=torch.int8),
            torch.ones(32, dtype=torch.int32),
        )
    with pytest.raises(TypeError, match="compute_dtype must be"):
        ember.quantize(_linear(64, 32), "int8_weight_only", compute_dtype=torch.float64)


# ---------------------------------------------------------------------------------------
# state_dict


@pytest.mark.parametrize("scheme", Q.SCHEMES)
def test_state_dict_round_trip_keeps_the_quantized_form(scheme):
    k, n = 128, 48
    model = ember.quantize(_linear(k, n, seed=0).to(DEV), scheme, group_size=64)
    x = torch.randn(3, k)
    y = model(x.to(DEV)).cpu()
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    assert not any(key.endswith(".weight") for key in sd), list(sd)
    assert sd["0._extra_state"]["scheme"] == scheme
    ints = [v for v in sd.values() if isinstance(v, torch.Tensor) and not v.is_floating_point()]
    assert ints and all(v.dtype in (torch.int8, torch.uint8, torch.int32) for v in ints)
    # Into a model of another initialisation quantized the same way, on ember and on CPU.
    for where in (DEV, "cpu"):
        other = ember.quantize(_linear(k, n, seed=5).to(where), scheme, group_size=64)
        other.load_state_dict(sd)
        torch.testing.assert_close(other(x.to(where)).cpu(), y, atol=1e-6, rtol=1e-6)
    # A model quantized differently refuses it, naming the layout.
    if scheme == "int4_weight_only":
        wrong = ember.quantize(_linear(k, n), scheme, group_size=32)
        with pytest.raises(
            ValueError,
            match=r"scales_and_zeros expects torch.float32 "
            r"\(4, 48, 2\), the state_dict has",
        ):
            wrong.load_state_dict(sd)
        # The packed int4 layout is the CPU capability's: another one is refused.
        assert sd["0._extra_state"]["int4_layout"] == torch.backends.cpu.get_cpu_capability()
        other_cpu = dict(sd)
        other_cpu["0._extra_state"] = dict(sd["0._extra_state"], int4_layout="OTHER")
        with pytest.raises(ValueError, match="packed for another CPU capability"):
            ember.quantize(_linear(k, n), scheme, group_size=64).load_state_dict(other_cpu)


# ---------------------------------------------------------------------------------------
# Hugging Face GPT-2 (tiny config, built locally)


def _gpt2(seed=0):
    from hf_tiny import gpt2_config
    from transformers import GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(gpt2_config(96, n_embd=64)).eval()


def _dequantized_copy(model, quantized):
    """A float64 CPU copy of `model` whose projections hold `quantized`'s dequantized
    weights (Conv1D keeps [in, out])."""
    ref = copy.deepcopy(model).double()
    mods = dict(quantized.named_modules())
    with torch.no_grad():
        for name, m in ref.named_modules():
            q = mods.get(name)
            if isinstance(q, Q.QuantizedLinear):
                w = q.dequantized_weight()
                m.weight.copy_(w if isinstance(m, nn.Linear) else w.t())
            elif isinstance(q, Q.QuantizedEmbedding):
                m.weight.copy_(Q.dequantize_int8(q.weight_int8.cpu(), q.scales.cpu()))
    return ref


@pytest.mark.parametrize("scheme", ["int8_weight_only", "int4_weight_only"])
def test_gpt2_forward_against_dequantized_reference(scheme):
    base = _gpt2()
    model = copy.deepcopy(base).to(DEV)
    ember.quantize(model, scheme, group_size=32)
    # Every Conv1D is quantized; the LM head is tied to wte and stays in float, tied.
    assert len(model.quantized_modules) == 8, model.quantized_modules
    assert "lm_head" in model.kept_in_float
    assert model.lm_head.weight is model.transformer.wte.weight
    assert isinstance(model.transformer.h[0].attn.c_attn, Q.QuantizedLinear)
    ids = torch.randint(0, 96, (2, 12))
    with torch.no_grad():
        logits = model(ids.to(DEV)).logits.cpu()
        ref = _dequantized_copy(base, model)(ids).logits
    assert (logits.double() - ref).abs().max() < 1e-4 * max(1.0, ref.abs().max())
    with torch.no_grad():  # and the quantization error itself is small
        assert (ref - base.double()(ids).logits).abs().max() < 0.1 * ref.abs().max()


def test_gpt2_int8_dynamic_matches_eager_cpu():
    base = _gpt2()
    ids = torch.randint(0, 96, (2, 12))
    dev_model = ember.quantize(copy.deepcopy(base).to(DEV), "int8_dynamic")
    cpu_model = ember.quantize(copy.deepcopy(base), "int8_dynamic")
    with torch.no_grad():
        a = dev_model(ids.to(DEV)).logits.cpu()
        b = cpu_model(ids).logits
        f = base(ids).logits
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert (a - f).abs().max() < 0.05 * f.abs().max()


def test_gpt2_include_embeddings_shares_one_int8_weight():
    base = _gpt2()
    model = ember.quantize(
        copy.deepcopy(base).to(DEV), "int8_weight_only", group_size=32, include_embeddings=True
    )
    wte, head = model.transformer.wte, model.lm_head
    assert isinstance(wte, Q.QuantizedEmbedding) and isinstance(head, Q.QuantizedLinear)
    assert head.weight_int8 is wte.weight_int8 and head.scales is wte.scales
    assert not model.kept_in_float
    ids = torch.randint(0, 96, (2, 12))
    with torch.no_grad():
        logits = model(ids.to(DEV)).logits.cpu()
        ref = _dequantized_copy(base, model)(ids).logits
    assert (logits.double() - ref).abs().max() < 1e-4 * max(1.0, ref.abs().max())
    # The shared tensor is saved once and loads back into both modules.
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    other = ember.quantize(
        _gpt2(seed=3).to(DEV), "int8_weight_only", group_size=32, include_embeddings=True
    )
    other.load_state_dict(torch.load(buf, weights_only=True))
    assert other.lm_head.weight_int8 is other.transformer.wte.weight_int8
    with torch.no_grad():
        torch.testing.assert_close(other(ids.to(DEV)).logits.cpu(), logits)
    with pytest.raises(ValueError, match="include_embeddings=True is supported for the int8"):
        ember.quantize(_gpt2(), "int4_weight_only", group_size=32, include_embeddings=True)


# ---------------------------------------------------------------------------------------
# torchao 0.18 (requirements.txt): what its configs do on ember


_TORCHAO_SCRIPT = """
import copy, torch, torch.nn as nn, ember
import torchao.quantization as ao
dev = ember.device()
for config in (ao.Int8WeightOnlyConfig(), ao.Int8DynamicActivationInt8WeightConfig()):
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(64, 32))
    on_dev = copy.deepcopy(cpu).to(dev)
    ao.quantize_(cpu, config)
    ao.quantize_(on_dev, copy.deepcopy(config))
    assert type(on_dev[0].weight).__name__ == "Int8Tensor", type(on_dev[0].weight)
    x = torch.randn(4, 64)
    torch.testing.assert_close(on_dev(x.to(dev)).cpu(), cpu(x), atol=1e-5, rtol=1e-5)
    print(type(config).__name__, "ok")
try:
    ao.quantize_(nn.Sequential(nn.Linear(64, 32)).to(dev), ao.Int4WeightOnlyConfig(group_size=32))
except (ImportError, AssertionError, NotImplementedError) as e:
    print("Int4WeightOnlyConfig", type(e).__name__, e)
else:
    print("Int4WeightOnlyConfig worked")
"""


def test_torchao_configs_on_ember():
    """torchao's int8 configs on an ember model equal the same configs on the CPU; its
    int4 config has no CPU path in 0.18 ("plain" needs the mslk package, CUDA kernels).
    Run in a child process, so that torchao's registrations stay out of this one."""
    import importlib.util
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("torchao") is None:
        pytest.skip("torchao is not installed (requirements.txt installs it)")
    r = subprocess.run(
        [sys.executable, "-c", _TORCHAO_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        "Int8WeightOnlyConfig ok" in r.stdout
        and "Int8DynamicActivationInt8WeightConfig ok" in r.stdout
    ), r.stdout
    assert "Int4WeightOnlyConfig ImportError Requires mslk" in r.stdout, r.stdout
