"""Weight quantization: ``ember.quantize(model, scheme, group_size=128)``.

Schemes (numerics as torchao 0.18's configs of the same names):

* ``"int8_weight_only"`` (``Int8WeightOnlyConfig``): symmetric per-output-channel int8
  weights, ``scale = amax(|w|) / 127.5``, ``q = clamp(round(w / scale), -128, 127)``;
  activations stay in float. Runs as ATen's fused ``_weight_int8pack_mm``.
* ``"int4_weight_only"`` (``Int4WeightOnlyConfig``, tinygemm numerics): group-wise
  asymmetric 4-bit weights along K, ``scale = (max - min) / 15``,
  ``zero = min + 8 * scale``, ``q = clamp(round((w - min) / scale), 0, 15)``, dequantized
  as ``(q - 8) * scale + zero``. Runs as ATen's fused ``_weight_int4pack_mm_for_cpu`` on
  the weight packed two per byte by ``_convert_weight_to_int4pack_for_cpu``.
* ``"int8_dynamic"`` (``Int8DynamicActivationInt8WeightConfig``): the int8 weights above
  and activations quantized per row at run time, asymmetric int8 (``scale =
  (max(x, 0) - min(x, 0)) / 255``, ``zero = -128 - round(min(x, 0) / scale)``); the
  product accumulates in int32 (``torch._int_mm``) and is rescaled once.

On ember every op above is traced like any other and runs as an ATen extern inside the
lowered program (the activation quantization of ``int8_dynamic`` is lowered to native
kernels); the weight stays packed: no program ever holds a float copy of it.

The quantized module of a ``nn.Linear`` or of Hugging Face's ``Conv1D`` (weight
``[in, out]``) is a :class:`QuantizedLinear` whose packed weight, scales and zero points
are plain buffers, so ``state_dict()``/``torch.save``/``load_state_dict`` keep the
quantized form (load into a model quantized with the same scheme).

Tied weights: a Linear whose weight is the weight of an ``nn.Embedding`` (GPT-2's LM
head) is left in float with the tie intact unless ``include_embeddings=True``; then,
for the int8 schemes, the embedding becomes a :class:`QuantizedEmbedding` (int8, per-row
scales) and the head a :class:`QuantizedLinear` over the *same* int8 tensor and scales
(one shared packed weight). ``int4_weight_only`` with ``include_embeddings=True`` is
refused: ATen's int4 layout is tiled for the matmul and cannot be gathered by row.
"""

from __future__ import annotations

import torch
import torch.nn as nn

SCHEMES = ("int8_weight_only", "int4_weight_only", "int8_dynamic")
INT4_GROUP_SIZES = (32, 64, 128, 256)  # what _weight_int4pack_mm_for_cpu accepts
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_INT4_INNER_K_TILES = 8  # the CPU packing ignores it beyond its check; torchao passes 8

__all__ = [
    "quantize",
    "QuantizedLinear",
    "QuantizedEmbedding",
    "SCHEMES",
    "quantize_int8_per_channel",
    "quantize_int4_groupwise",
    "pack_int4",
    "int8_weight_only_linear",
    "int4_weight_only_linear",
    "int8_dynamic_linear",
    "quantize_activation_per_row",
    "dequantize_int8",
    "dequantize_int4",
]


# ---------------------------------------------------------------------------------------
# Numerics (pure functions, any device)


def _check_weight(w: torch.Tensor, what: str) -> None:
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"{what}: expected a tensor, got {type(w).__name__}")
    if w.dim() != 2:
        raise ValueError(
            f"{what}: expected a 2-d weight [out_features N, in_features K], "
            f"got shape {tuple(w.shape)}"
        )
    if w.dtype not in FLOAT_DTYPES + (torch.float64,):
        raise TypeError(f"{what}: expected a floating weight, got {w.dtype}")
    if w.numel() == 0:
        raise ValueError(f"{what}: the weight is empty (shape {tuple(w.shape)})")


def quantize_int8_per_channel(w: torch.Tensor, dtype: torch.dtype | None = None):
    """Symmetric per-row int8 of a weight ``[N, K]``: returns ``(q int8 [N, K],
    scales [N])`` with ``w ≈ q * scales[:, None]`` (torchao's symmetric mapping:
    ``scale = amax / 127.5``, floored at float32's eps). Computed in float32 (float64
    for a float64 weight); scales are returned in ``dtype`` (default: the weight's)."""
    _check_weight(w, "quantize_int8_per_channel")
    wf = w.double() if w.dtype == torch.float64 else w.float()
    amax = wf.abs().amax(dim=1)
    scale = (amax / 127.5).clamp(min=torch.finfo(torch.float32).eps)
    q = torch.round(wf / scale[:, None]).clamp(-128, 127).to(torch.int8)
    return q.contiguous(), scale.to(dtype or w.dtype).contiguous()


def quantize_int4_groupwise(w: torch.Tensor, group_size: int = 128, dtype=None):
    """Group-wise asymmetric 4-bit of a weight ``[N, K]`` along K (torchao's tinygemm
    numerics): returns ``(q int32 [N, K] in 0..15, scales [N, K/g], zeros [N, K/g])`` with
    ``w ≈ (q - 8) * scale + zero`` per group."""
    _check_weight(w, "quantize_int4_groupwise")
    n, k = w.shape
    _check_group(k, group_size, "quantize_int4_groupwise")
    wf = (w.double() if w.dtype == torch.float64 else w.float()).reshape(
        n, k // group_size, group_size
    )
    lo = wf.amin(dim=2)
    hi = wf.amax(dim=2)
    scale = ((hi - lo) / 15).clamp(min=1e-6)
    zero = lo + scale * 8
    q = torch.round((wf - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32)
    out = dtype or w.dtype
    return (q.reshape(n, k).contiguous(), scale.to(out).contiguous(), zero.to(out).contiguous())


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


INT4_N_MULTIPLE = 16  # _convert_weight_to_int4pack_for_cpu packs N in blocks of 16


def pack_int4(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor):
    """ATen's CPU int4 layout: ``(packed uint8 [N', K/2], scales_and_zeros [K/g, N', 2])``
    from ``quantize_int4_groupwise``'s result, N' = N rounded up to a multiple of 16 (the
    packing's block; the padding rows are zero with zero scales, and the linear drops
    their outputs). Packs on the CPU: the layout is the one this machine's
    ``_weight_int4pack_mm_for_cpu`` reads."""
    if q.dim() != 2 or q.dtype != torch.int32:
        raise TypeError(f"pack_int4: expected int32 values [N, K], got {q.dtype} {tuple(q.shape)}")
    n, k = q.shape
    if k % 2:
        raise ValueError(f"pack_int4: K must be even (two values per byte), got K={k}")
    if scales.shape != zeros.shape or scales.dim() != 2 or scales.shape[0] != n:
        raise ValueError(
            f"pack_int4: expected scales and zeros [N={n}, K/group], got "
            f"{tuple(scales.shape)} and {tuple(zeros.shape)}"
        )
    if scales.shape[1] == 0 or k % scales.shape[1]:
        raise ValueError(f"pack_int4: {scales.shape[1]} groups do not divide K={k}")
    n_pad = _round_up(n, INT4_N_MULTIPLE)
    qp = torch.full((n_pad, k), 8, dtype=torch.int32)  # 8 dequantizes to the zero point
    qp[:n] = q.cpu()
    sp = torch.zeros(n_pad, scales.shape[1], dtype=scales.dtype)
    zp = torch.zeros_like(sp)
    sp[:n], zp[:n] = scales.cpu(), zeros.cpu()
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(qp, _INT4_INNER_K_TILES)
    sz = torch.stack([sp.t(), zp.t()], dim=2).contiguous()
    return packed, sz


def dequantize_int8(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The float64 weight ``[N, K]`` of an int8 weight and its per-row scales."""
    return q.double() * scales.double()[:, None]


def dequantize_int4(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor):
    """The float64 weight ``[N, K]`` of ``quantize_int4_groupwise``'s result."""
    n, k = q.shape
    g = k // scales.shape[1]
    w = (q.double().reshape(n, -1, g) - 8) * scales.double()[..., None] + zeros.double()[..., None]
    return w.reshape(n, k)


def quantize_activation_per_row(x: torch.Tensor):
    """Per-row asymmetric int8 of ``x [M, K]`` (torchao's dynamic activation mapping):
    ``(q int8 [M, K], scale [M, 1] float32, zero [M, 1] float32)`` with
    ``x ≈ (q - zero) * scale``."""
    xf = x.float()
    lo = xf.amin(dim=1, keepdim=True).clamp(max=0)
    hi = xf.amax(dim=1, keepdim=True).clamp(min=0)
    scale = ((hi - lo) / 255).clamp(min=torch.finfo(torch.float32).eps)
    zero = (-128 - torch.round(lo / scale)).clamp(-128, 127)
    q = (torch.round(xf / scale) + zero).clamp(-128, 127).to(torch.int8)
    return q, scale, zero


# ---------------------------------------------------------------------------------------
# Checked linear functions (what QuantizedLinear.forward calls)


def _check_group(k: int, group_size, what: str) -> None:
    if not isinstance(group_size, int) or group_size not in INT4_GROUP_SIZES:
        raise ValueError(
            f"{what}: group_size must be one of {INT4_GROUP_SIZES} (what "
            f"ATen's int4 CPU kernel supports), got {group_size!r}"
        )
    if k % group_size:
        raise ValueError(
            f"{what}: group_size {group_size} does not divide "
            f"in_features K={k}; K must be a multiple of the group size"
        )


def _check_x(x: torch.Tensor, k: int, what: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what}: expected a tensor input, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{what}: the kernel takes float32, bfloat16 or float16 activations, got {x.dtype}"
        )
    if x.dim() < 1 or x.shape[-1] != k:
        raise ValueError(f"{what}: expected an input [..., K={k}], got shape {tuple(x.shape)}")


def _check_bias(bias, n: int, x: torch.Tensor, what: str) -> None:
    if bias is not None and tuple(bias.shape) != (n,):
        raise ValueError(f"{what}: expected a bias [N={n}], got {tuple(bias.shape)}")


def _check_scales(scales: torch.Tensor, shape: tuple, dtype, what: str) -> None:
    if not isinstance(scales, torch.Tensor):
        raise TypeError(f"{what}: expected a scale tensor, got {type(scales).__name__}")
    if scales.numel() == 0:
        raise ValueError(
            f"{what}: the scales are empty (shape {tuple(scales.shape)}); expected {shape}"
        )
    if tuple(scales.shape) != shape:
        raise ValueError(f"{what}: expected scales of shape {shape}, got {tuple(scales.shape)}")
    if scales.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{what}: expected float32/bfloat16/float16 scales, got {scales.dtype}")


def _check_int8_weight(w, layout: str, what: str):
    if w.dtype != torch.int8 or w.dim() != 2:
        raise TypeError(f"{what}: expected an int8 weight {layout}, got {w.dtype} {tuple(w.shape)}")


def _flatten(x: torch.Tensor, k: int):
    lead = x.shape[:-1]
    return x.reshape(-1, k), lead


def int8_weight_only_linear(x, w_int8, scales, bias=None):
    """``x @ (w_int8 * scales[:, None]).T + bias`` by ATen's ``_weight_int8pack_mm``:
    ``x [..., K]`` float, ``w_int8 [N, K]`` int8, ``scales [N]``."""
    what = "int8_weight_only_linear"
    _check_int8_weight(w_int8, "[N, K]", what)
    n, k = w_int8.shape
    _check_x(x, k, what)
    _check_scales(scales, (n,), x.dtype, what)
    _check_bias(bias, n, x, what)
    x2, lead = _flatten(x, k)
    y = torch.ops.aten._weight_int8pack_mm(x2, w_int8.contiguous(), scales.to(x.dtype))
    if bias is not None:
        y = y + bias
    return y.reshape(*lead, n)


def int4_weight_only_linear(x, packed, scales_and_zeros, group_size, bias=None, out_features=None):
    """The int4 product by ATen's ``_weight_int4pack_mm_for_cpu``: ``packed`` uint8
    ``[N', K/2]`` and ``scales_and_zeros [K/g, N', 2]`` from ``pack_int4``; the result
    keeps the first ``out_features`` columns (default N')."""
    what = "int4_weight_only_linear"
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8 or packed.dim() != 2:
        raise TypeError(
            f"{what}: expected a packed uint8 weight [N, K/2], got "
            f"{getattr(packed, 'dtype', type(packed).__name__)} "
            f"{tuple(getattr(packed, 'shape', ()))}"
        )
    n, k = packed.shape[0], packed.shape[1] * 2
    if n % INT4_N_MULTIPLE:
        raise ValueError(
            f"{what}: the packed weight has N={n} rows; ATen's layout needs "
            f"a multiple of {INT4_N_MULTIPLE} (pack_int4 pads it)"
        )
    out = n if out_features is None else out_features
    if not 0 < out <= n:
        raise ValueError(f"{what}: out_features={out} does not fit the packed weight's N={n} rows")
    _check_x(x, k, what)
    _check_group(k, group_size, what)
    if isinstance(scales_and_zeros, torch.Tensor) and scales_and_zeros.numel() == 0:
        raise ValueError(
            f"{what}: scales_and_zeros is empty (shape "
            f"{tuple(scales_and_zeros.shape)}); expected "
            f"{(k // group_size, n, 2)}"
        )
    _check_scales(scales_and_zeros, (k // group_size, n, 2), x.dtype, what)
    _check_bias(bias, out, x, what)
    x2, lead = _flatten(x, k)
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(
        x2, packed.contiguous(), group_size, scales_and_zeros.to(x.dtype)
    )
    if out != n:
        y = y[:, :out]
    if bias is not None:
        y = y + bias
    return y.reshape(*lead, out)


def int8_dynamic_linear(x, w_int8_t, scales, col_sums, bias=None):
    """Dynamic int8: ``x`` quantized per row (asymmetric int8), multiplied with the int8
    weight ``w_int8_t [K, N]`` (transposed once at quantization) in int32 by
    ``torch._int_mm``, then ``(acc - zero * col_sums) * x_scale * scales``. ``col_sums``
    ``[N]`` int32 are the weight's column sums over K."""
    what = "int8_dynamic_linear"
    _check_int8_weight(w_int8_t, "[K, N]", what)
    k, n = w_int8_t.shape
    _check_x(x, k, what)
    _check_scales(scales, (n,), x.dtype, what)
    if col_sums.dtype != torch.int32 or tuple(col_sums.shape) != (n,):
        raise ValueError(
            f"{what}: expected int32 col_sums [N={n}], got {col_sums.dtype} {tuple(col_sums.shape)}"
        )
    _check_bias(bias, n, x, what)
    x2, lead = _flatten(x, k)
    qx, xs, xz = quantize_activation_per_row(x2)
    acc = torch._int_mm(qx, w_int8_t)
    y = (acc.float() - xz * col_sums.float()) * (xs * scales.float())
    y = y.to(x.dtype)
    if bias is not None:
        y = y + bias
    return y.reshape(*lead, n)


# ---------------------------------------------------------------------------------------
# Modules


def _is_conv1d(m: nn.Module) -> bool:
    t = type(m)
    return t.__name__ == "Conv1D" and t.__module__.startswith("transformers")


class QuantizedLinear(nn.Module):
    """A Linear (or HF Conv1D) with quantized weights. Buffers by scheme:

    * ``int8_weight_only``: ``weight_int8`` int8 ``[N, K]``, ``scales [N]``;
    * ``int8_dynamic``: ``weight_int8_t`` int8 ``[K, N]``, ``scales [N]``,
      ``col_sums`` int32 ``[N]``;
    * ``int4_weight_only``: ``weight_int4pack`` uint8 ``[N', K/2]`` (ATen's CPU layout),
      ``scales_and_zeros [K/g, N', 2]`` (N' = N rounded up to 16, ATen's block).

    ``bias`` stays a float parameter."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        scheme: str,
        group_size: int = 128,
        bias: bool = True,
        dtype=torch.float32,
        device=None,
        compute_dtype=None,
    ):
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; expected one of {SCHEMES}")
        if dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"QuantizedLinear: activations must be float32, bfloat16 or float16, got {dtype}"
            )
        self.in_features, self.out_features = in_features, out_features
        self.scheme, self.group_size = scheme, group_size
        if compute_dtype is not None and compute_dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"QuantizedLinear: compute_dtype must be float32, bfloat16 or "
                f"float16, got {compute_dtype}"
            )
        self.dtype = dtype
        # Weight-only schemes: the activations' dtype in the fused kernel (scales are
        # stored in it). int8_dynamic computes in int8/int32 and ignores it.
        self.compute_dtype = compute_dtype or dtype
        cd = self.compute_dtype if scheme != "int8_dynamic" else dtype
        n, k = out_features, in_features
        kw = {"device": device}
        if scheme == "int8_weight_only":
            self.register_buffer("weight_int8", torch.zeros(n, k, dtype=torch.int8, **kw))
            self.register_buffer("scales", torch.ones(n, dtype=cd, **kw))
        elif scheme == "int8_dynamic":
            self.register_buffer("weight_int8_t", torch.zeros(k, n, dtype=torch.int8, **kw))
            self.register_buffer("scales", torch.ones(n, dtype=dtype, **kw))
            self.register_buffer("col_sums", torch.zeros(n, dtype=torch.int32, **kw))
        else:
            _check_group(k, group_size, "QuantizedLinear")
            n_pad = _round_up(n, INT4_N_MULTIPLE)
            self.register_buffer(
                "weight_int4pack", torch.zeros(n_pad, k // 2, dtype=torch.uint8, **kw)
            )
            self.register_buffer(
                "scales_and_zeros", torch.zeros(k // group_size, n_pad, 2, dtype=cd, **kw)
            )
        self.bias = (
            nn.Parameter(torch.zeros(n, dtype=dtype, **kw), requires_grad=False) if bias else None
        )

    @classmethod
    def from_float(cls, module: nn.Module, scheme: str, group_size: int = 128, compute_dtype=None):
        """The quantized form of ``module`` (an ``nn.Linear`` or HF ``Conv1D``), its
        buffers on the module's device."""
        w = module.weight.detach()
        if _is_conv1d(module):
            w = w.t()  # Conv1D stores [in, out]
        what = f"ember.quantize({scheme!r})"
        if w.dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"{what}: the fused kernels take float32, bfloat16 or float16 "
                f"weights, got a {w.dtype} weight of shape {tuple(w.shape)}"
            )
        n, k = w.shape
        if scheme == "int4_weight_only":
            _check_group(k, group_size, what)
        device = w.device
        wc = w.cpu().contiguous()
        b = module.bias
        q = cls(
            k,
            n,
            scheme,
            group_size,
            bias=b is not None,
            dtype=w.dtype,
            device="meta",
            compute_dtype=compute_dtype,
        )
        cd = q.compute_dtype
        if scheme == "int8_weight_only":
            qw, s = quantize_int8_per_channel(wc, cd)
            bufs = {"weight_int8": qw, "scales": s}
        elif scheme == "int8_dynamic":
            qw, s = quantize_int8_per_channel(wc)
            bufs = {
                "weight_int8_t": qw.t().contiguous(),
                "scales": s,
                "col_sums": qw.sum(dim=1, dtype=torch.int32),
            }
        else:
            qv, s, z = quantize_int4_groupwise(wc, group_size, cd)
            packed, sz = pack_int4(qv, s, z)
            bufs = {"weight_int4pack": packed, "scales_and_zeros": sz}
        for name, t in bufs.items():
            q._buffers[name] = t.to(device)
        q.bias = None if b is None else nn.Parameter(b.detach().clone(), requires_grad=False)
        return q

    def forward(self, x):
        if self.scheme == "int8_dynamic":
            return int8_dynamic_linear(x, self.weight_int8_t, self.scales, self.col_sums, self.bias)
        _check_x(x, self.in_features, f"QuantizedLinear({self.scheme})")
        cd = self.compute_dtype
        xc = x if x.dtype == cd else x.to(cd)
        if self.scheme == "int8_weight_only":
            y = int8_weight_only_linear(xc, self.weight_int8, self.scales)
        else:
            y = int4_weight_only_linear(
                xc,
                self.weight_int4pack,
                self.scales_and_zeros,
                self.group_size,
                None,
                self.out_features,
            )
        if y.dtype != x.dtype:
            y = y.to(x.dtype)
        return y if self.bias is None else y + self.bias

    def dequantized_weight(self) -> torch.Tensor:
        """The float64 weight ``[N, K]`` on the CPU (for references and tests)."""
        if self.scheme == "int8_weight_only":
            return dequantize_int8(self.weight_int8.cpu(), self.scales.cpu())
        if self.scheme == "int8_dynamic":
            return dequantize_int8(self.weight_int8_t.cpu().t(), self.scales.cpu())
        return _unpack_int4_reference(self)

    def get_extra_state(self):
        """Saved as ``_extra_state``: the scheme, the group size and, for int4, the CPU
        capability whose layout the packed weight has (ATen packs N in blocks of 64
        under AVX512 and 32 under AVX2/DEFAULT, interleaved differently)."""
        return {
            "scheme": self.scheme,
            "group_size": self.group_size if self.scheme == "int4_weight_only" else None,
            "int4_layout": _int4_layout() if self.scheme == "int4_weight_only" else None,
        }

    def set_extra_state(self, state):
        mine = self.get_extra_state()
        if not isinstance(state, dict) or any(state.get(k) != v for k, v in mine.items()):
            raise ValueError(
                f"QuantizedLinear: the state_dict holds a layer quantized as {state}, this "
                f"model's is {mine}; quantize the model the same way (an int4 weight packed "
                f"for another CPU capability must be quantized again from the float model)"
            )

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A shape mismatch of a packed buffer gets a message naming the scheme's layout.
        for name, t in self._buffers.items():
            src = state_dict.get(prefix + name)
            if src is not None and (src.shape != t.shape or src.dtype != t.dtype):
                raise ValueError(
                    f"QuantizedLinear({self.scheme}, in={self.in_features}, "
                    f"out={self.out_features}, group={self.group_size}): {prefix}{name} "
                    f"expects {t.dtype} {tuple(t.shape)}, the state_dict has "
                    f"{src.dtype} {tuple(src.shape)}"
                )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self):
        g = f", group_size={self.group_size}" if self.scheme == "int4_weight_only" else ""
        c = (
            f", compute_dtype={self.compute_dtype}"
            if self.compute_dtype != self.dtype and self.scheme != "int8_dynamic"
            else ""
        )
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"scheme={self.scheme}{g}{c}, bias={self.bias is not None}"
        )


def _int4_layout() -> str:
    """The CPU capability whose int4 layout ``_convert_weight_to_int4pack_for_cpu``
    writes in this process."""
    return torch.backends.cpu.get_cpu_capability()


def _unpack_int4_reference(m: QuantizedLinear) -> torch.Tensor:
    """The float64 weight of an int4 QuantizedLinear, read back through the kernel itself
    (the packed layout is ATen's and depends on the CPU's vector width): the product with
    the identity, in float32, whose sums have one term each, so the result is exact."""
    k, n = m.in_features, m.out_features
    eye = torch.eye(k, dtype=torch.float32)
    sz = m.scales_and_zeros.cpu().float()
    w_t = torch.ops.aten._weight_int4pack_mm_for_cpu(eye, m.weight_int4pack.cpu(), m.group_size, sz)
    return w_t.t()[:n].double().contiguous()


class QuantizedEmbedding(nn.Module):
    """An ``nn.Embedding`` with int8 rows and per-row scales (buffers ``weight_int8``
    ``[V, D]`` and ``scales [V]``): a lookup gathers the int8 rows and their scales and
    dequantizes only them."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        dtype=torch.float32,
        padding_idx=None,
        device=None,
    ):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        self.register_buffer(
            "weight_int8",
            torch.zeros(num_embeddings, embedding_dim, dtype=torch.int8, device=device),
        )
        self.register_buffer("scales", torch.ones(num_embeddings, dtype=dtype, device=device))

    @classmethod
    def from_float(cls, module: nn.Embedding):
        w = module.weight.detach()
        if w.dtype not in FLOAT_DTYPES:
            raise TypeError(f"ember.quantize: embeddings of {w.dtype} are not supported")
        q = cls(w.shape[0], w.shape[1], w.dtype, module.padding_idx, device="meta")
        qw, s = quantize_int8_per_channel(w.cpu())
        q._buffers["weight_int8"] = qw.to(w.device)
        q._buffers["scales"] = s.to(w.device)
        return q

    def forward(self, ids):
        rows = torch.nn.functional.embedding(ids, self.weight_int8)
        return rows.to(self.scales.dtype) * torch.nn.functional.embedding(ids, self.scales[:, None])

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}, int8 per-row"


# ---------------------------------------------------------------------------------------
# quantize()


def _tied_to_embedding(model: nn.Module):
    """{id(weight Parameter): embedding module name} of every nn.Embedding."""
    return {id(m.weight): name for name, m in model.named_modules() if isinstance(m, nn.Embedding)}


def quantize(
    model: nn.Module,
    scheme: str,
    group_size: int = 128,
    include_embeddings: bool = False,
    compute_dtype=None,
) -> nn.Module:
    """Quantize ``model`` in place (on ember or on the CPU) and return it.

    Every ``nn.Linear`` and Hugging Face ``Conv1D`` becomes a :class:`QuantizedLinear`
    of ``scheme`` (``"int8_weight_only"``, ``"int4_weight_only"`` with groups of
    ``group_size`` along K, or ``"int8_dynamic"``). A Linear whose weight is an
    embedding's (a tied LM head) stays in float with its tie unless
    ``include_embeddings``; with it (int8 schemes only) embeddings get int8 rows and a
    tied head shares the embedding's int8 tensor and scales. ``model.quantized_modules``
    lists what was quantized and ``model.kept_in_float`` what was not and why.

    ``compute_dtype`` (weight-only schemes): the activations' dtype inside the fused
    kernel, default the layer's. ATen's fused CPU kernels are fast for bfloat16/float16
    activations only (float32 takes a scalar reference loop, several times slower than
    the f32 GEMM: docs/performance.md), so ``compute_dtype=torch.bfloat16`` is the fast
    setting for a float32 model: activations round to bf16 on entry, scales are stored in
    bf16, the result converts back to float32."""
    if scheme not in SCHEMES:
        raise ValueError(f"ember.quantize: unknown scheme {scheme!r}; expected one of {SCHEMES}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"ember.quantize: expected an nn.Module, got {type(model).__name__}")
    if scheme == "int4_weight_only":
        if not isinstance(group_size, int) or group_size not in INT4_GROUP_SIZES:
            raise ValueError(
                f"ember.quantize: group_size must be one of "
                f"{INT4_GROUP_SIZES} for int4_weight_only, got {group_size!r}"
            )
        if include_embeddings:
            raise ValueError(
                "ember.quantize: include_embeddings=True is supported for the "
                "int8 schemes; ATen's int4 layout is tiled for the matmul and "
                "cannot be gathered by row (embeddings and tied heads stay "
                "float under int4_weight_only)"
            )
    tied = _tied_to_embedding(model)
    targets, kept = [], {}
    for name, m in model.named_modules():
        if isinstance(m, (QuantizedLinear, QuantizedEmbedding)):
            raise ValueError(f"ember.quantize: {name or 'the model'} is already quantized")
        if isinstance(m, nn.Linear) or _is_conv1d(m):
            if id(m.weight) in tied and not include_embeddings:
                kept[name] = f"weight tied to embedding {tied[id(m.weight)]!r}: kept in float"
                continue
            targets.append((name, m))
        elif isinstance(m, nn.Embedding):
            if include_embeddings:
                targets.append((name, m))
            else:
                kept[name] = "embedding (include_embeddings=False)"
    # Check every layer before changing any, so a bad layer leaves the model as it was.
    for name, m in targets:
        if not name:
            raise ValueError(
                "ember.quantize: pass a model that contains the Linear, not "
                "the Linear itself (it is replaced in its parent)"
            )
        w = m.weight
        if w.dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"ember.quantize: {name}: the fused kernels take float32, "
                f"bfloat16 or float16 weights, got {w.dtype}"
            )
        if scheme == "int4_weight_only":
            k = w.shape[0] if _is_conv1d(m) else w.shape[1]
            if k % group_size:
                raise ValueError(
                    f"ember.quantize: {name}: group_size {group_size} does not "
                    f"divide in_features K={k} (weight {tuple(w.shape)}); pick a "
                    f"group size in {INT4_GROUP_SIZES} that divides every K"
                )
    replaced = {}
    shared = {}  # id(embedding weight) -> QuantizedEmbedding
    for name, m in targets:
        if isinstance(m, nn.Embedding):
            q = QuantizedEmbedding.from_float(m)
            shared[id(m.weight)] = q
        replaced[name] = m
    new = {}
    for name, m in targets:
        if isinstance(m, nn.Embedding):
            new[name] = shared[id(m.weight)]
        elif id(m.weight) in shared:
            e = shared[id(m.weight)]
            q = QuantizedLinear(
                m.in_features,
                m.out_features,
                scheme,
                group_size,
                bias=m.bias is not None,
                dtype=m.weight.dtype,
                device="meta",
                compute_dtype=compute_dtype,
            )
            if scheme == "int8_weight_only":
                q._buffers["weight_int8"] = e.weight_int8  # one shared int8 tensor
                q._buffers["scales"] = e.scales
            else:  # int8_dynamic keeps [K, N]: a transposed copy of the same int8 values
                q._buffers["weight_int8_t"] = e.weight_int8.t().contiguous()
                q._buffers["scales"] = e.scales
                q._buffers["col_sums"] = e.weight_int8.sum(dim=1, dtype=torch.int32)
            q.bias = (
                None
                if m.bias is None
                else nn.Parameter(m.bias.detach().clone(), requires_grad=False)
            )
            new[name] = q
        else:
            new[name] = QuantizedLinear.from_float(m, scheme, group_size, compute_dtype)
    for name, q in new.items():
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, q)
    model.quantized_modules = sorted(new)
    model.kept_in_float = kept
    return model


class _CallableModule(type(__import__("sys"))):
    """``ember.quantize`` is this module and calling it calls :func:`quantize`, so both
    ``ember.quantize(model, ...)`` and ``ember.quantize.QuantizedLinear`` (and
    ``import ember.quantize as q``) work."""

    def __call__(self, *args, **kwargs):
        return quantize(*args, **kwargs)


__import__("sys").modules[__name__].__class__ = _CallableModule
