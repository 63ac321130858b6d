"""CPU inference kernels and precisions: oneDNN pre-packed fp32 linear layers, dynamic int8
quantisation with direct kernel calls, and fp16/bf16 models on CUDA (`prepare_model`)."""

from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import nn

from nmt.device import resolve_precision
from nmt.errors import ConfigError


def prepare_model(model, precision: str = "fp32", device: str | torch.device = "cpu", int8_output: bool = True,
                  pack: bool = True):
    """Move a model (in eval mode) to `device` and make it ready for inference in `precision`.

    Always: each decoder layer's self-attention gets one q|k|v projection for decoding steps
    (`fuse_self_attention`).
    fp32 on the CPU: with `pack` and oneDNN, the tied output projection gets oneDNN pre-packed weights
    (`PackedLinear`, same function, faster matrix products), and so do the other linear layers on
    CPUs with AVX-512 (`pack_every_layer`).
    int8: dynamic quantisation of every nn.Linear (weights int8 per output channel, activations
    quantised on the fly), and, with `int8_output`, of the tied output projection too (through an
    int8 copy of the embedding table; the embedding lookups stay fp32).
    fp16 / bf16 (CUDA): the whole model in that precision; log-probabilities and scores stay fp32.
    The model is for inference only afterwards.
    """
    device = torch.device(device)
    precision = resolve_precision(precision, device)
    model = model.to(device).eval()
    fuse_self_attention(model)
    if precision == "fp16":
        model = model.half()
    elif precision == "bf16":
        model = model.to(torch.bfloat16)
    elif precision == "int8":
        model = quantize_int8(model, output=int8_output)
    elif device.type == "cpu" and pack and onednn_available():
        model.use_output_projection()
        if pack_every_layer():
            replace_linears(model, PackedLinear.from_linear)
        else:
            model.output_proj = PackedLinear.from_linear(model.output_proj)
    return model


def fuse_self_attention(model) -> None:
    """Give each decoder layer's self-attention `qkv_proj`, one nn.Linear computing q|k|v (D -> 3D),
    which decoding steps use (`nmt.model.layer_step`): one matrix product in place of three, and with
    int8 one quantisation of the input (the weights are quantised per output channel, so the numbers
    are those of the three layers). A copy of the weights, made for inference: it does not follow
    further training of q_proj, k_proj and v_proj."""
    for layer in model.decoder:
        attn = layer.self_attn
        projections = (attn.q_proj, attn.k_proj, attn.v_proj)
        fused = nn.Linear(attn.q_proj.in_features, 3 * attn.q_proj.out_features,
                          device=attn.q_proj.weight.device, dtype=attn.q_proj.weight.dtype)
        with torch.no_grad():
            fused.weight.copy_(torch.cat([p.weight for p in projections]))
            fused.bias.copy_(torch.cat([p.bias for p in projections]))
        attn.qkv_proj = fused.requires_grad_(False)


def pack_every_layer() -> bool:
    """Whether oneDNN pre-packing pays for the d_model-sized linear layers too, not just the output
    projection: measured yes on an AVX-512 CPU, no on an AVX2 one, where each pre-packed call costs
    about 30 us more than torch's default path, which a decoding step's few rows do not earn back
    (docs/benchmarks-translate.md)."""
    return torch.backends.cpu.get_cpu_capability().startswith("AVX512")


def onednn_available() -> bool:
    """Whether this torch can run `PackedLinear` (oneDNN pre-packed fp32 linear layers)."""
    try:
        return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


class PackedLinear(torch.nn.Module):
    """`nn.Linear` for CPU inference with its weight pre-packed in oneDNN's blocked layout.

    The same function (fp32, results equal to rounding); faster because oneDNN's matrix product with a
    pre-packed weight runs about twice as fast as torch's default BLAS path on the CPUs we measured
    (docs/benchmarks-translate.md). No autograd, no state dict entries: build it from a trained layer.
    """

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None):
        super().__init__()
        self.in_features, self.out_features = weight.size(1), weight.size(0)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().float().contiguous())
        self.bias = None if bias is None else bias.detach().float().contiguous()

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> "PackedLinear":
        return cls(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def replace_linears(module: torch.nn.Module, make) -> None:
    """Replace every nn.Linear below `module` (in place) by `make(linear)`."""
    replace_modules(module, torch.nn.Linear, make)


def replace_modules(module: torch.nn.Module, kind: type, make) -> None:
    """Replace every module of exactly type `kind` below `module` (in place) by `make(it)`."""
    for name, child in module.named_children():
        if type(child) is kind:
            setattr(module, name, make(child))
        else:
            replace_modules(child, kind, make)


def int8_engines() -> tuple[str, str]:
    """The quantised-kernel backends for --int8: (output projection, other linear layers).

    Measured on an AVX-512 VNNI CPU and an AVX2 one (docs/benchmarks-translate.md): oneDNN is fastest
    for the wide output projection (d_model x vocabulary) on many rows, fbgemm ("x86") for the
    d_model-sized layers at the batch sizes of decoding, and on AVX2 for the output projection on fewer
    than `FEW_ROWS` rows too (`Int8Linear` keeps both packings). Either falls back to the other when
    this torch lacks it.
    """
    engines = torch.backends.quantized.supported_engines
    have = [e for e in ("onednn", "x86", "fbgemm") if e in engines]
    if not have:
        raise ConfigError("--int8: this torch build has no x86 int8 kernels (onednn/fbgemm); translate without --int8")
    small = next(e for e in ("x86", "fbgemm", "onednn") if e in have)
    return have[0], small


def quantize_int8(model, output: bool = True):
    """Dynamic int8 quantisation of the linear layers (and with `output` of the tied output projection),
    in place: each becomes an `Int8Linear` (per-channel int8 weights, activations quantised per call)."""
    wide, small = int8_engines()
    if output:
        model.use_output_projection()
        model.output_proj = Int8Linear.of(model.output_proj, wide, few_rows_engine=small)
    replace_linears(model, lambda linear: Int8Linear.of(linear, small))
    return model


# Below this many rows (32 sentences of 4 beams), fbgemm's int8 kernel computes the output projection
# faster than oneDNN's on an AVX2 CPU (2.5x on 4 rows); oneDNN is faster from here on.
FEW_ROWS = 128


class Int8Linear(torch.nn.Module):
    """A dynamically quantised linear layer (weights int8 per output channel, activations quantised per
    call), calling the kernel directly: torch's own module goes through Python-level checks on every
    call that cost as much as a small layer's arithmetic during decoding.

    `few_rows`: the weights packed for another backend's kernel, used for inputs of fewer than
    `FEW_ROWS` rows (the numbers differ a little between backends, as they do between batches).
    """

    def __init__(self, packed, in_features: int, out_features: int, few_rows=None):
        super().__init__()
        self.packed, self.in_features, self.out_features = packed, in_features, out_features
        self.few_rows, self.few_numel = few_rows, FEW_ROWS * in_features if few_rows is not None else 0
        overload = torch.ops.quantized.linear_dynamic.default
        self.op = getattr(overload, "_op", overload)  # the C++ callable, past the Python-level checks

    @classmethod
    def of(cls, linear: nn.Linear, engine: str, few_rows_engine: Optional[str] = None) -> "Int8Linear":
        """`linear` quantised for the quantised-kernel backend `engine` (and `few_rows_engine`, if another)."""
        few_rows = int8_pack(linear, few_rows_engine) if few_rows_engine not in (None, engine) else None
        return cls(int8_pack(linear, engine), linear.in_features, linear.out_features, few_rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() < self.few_numel:
            return self.op(x, self.few_rows, True)
        return self.op(x, self.packed, True)  # reduce_range=True, as torch's module (quantisation version 4)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def int8_pack(linear: nn.Linear, engine: str):
    """The packed int8 weights (per output channel) and bias of `linear` for the kernels of `engine`, as
    torch.ao's dynamic quantisation makes them."""
    try:
        import torch.ao.nn.quantized.dynamic as nnqd
        from torch.ao.quantization import per_channel_dynamic_qconfig
    except ImportError:  # a torch without eager-mode quantisation
        raise ConfigError(f"--int8: this torch ({torch.__version__}) has no dynamic quantisation; "
                          "translate without --int8") from None
    before = torch.backends.quantized.engine
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        try:  # the packed weights keep the backend they were made with
            torch.backends.quantized.engine = engine
            linear.qconfig = per_channel_dynamic_qconfig
            return nnqd.Linear.from_float(linear)._packed_params._packed_params
        finally:
            torch.backends.quantized.engine = before
