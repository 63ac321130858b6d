"""Inference precisions: dynamic int8 quantisation on the CPU (`Int8Linear`) and fp16/bf16 models on
CUDA (`prepare_model`)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable, Optional, cast

import torch
from torch import nn

from nmt.compute.device import resolve_precision
from nmt.core.errors import ConfigError

if TYPE_CHECKING:
    from nmt.model.transformer import Transformer


def prepare_model(model: Transformer, precision: str = "fp32", device: str | torch.device = "cpu",
                  int8_output: bool = True) -> Transformer:
    """Move a model (in eval mode) to `device` and make it ready for inference in `precision`.

    Always: each decoder layer's self-attention computes q|k|v in one product (`Transformer.fuse_qkv`).
    fp32: torch's own kernels.
    int8: dynamic quantisation of every nn.Linear (weights int8 per output channel, activations
    quantised on the fly), and, with `int8_output`, of the tied output projection too (through an
    int8 copy of the embedding table; the embedding lookups stay fp32).
    fp16 / bf16 (CUDA): the whole model in that precision; log-probabilities and scores stay fp32.
    The model is for inference only afterwards.
    """
    device = torch.device(device)
    precision = resolve_precision(precision, device)
    model = model.to(device).eval()
    model.fuse_qkv()
    if precision == "fp16":
        model = model.half()
    elif precision == "bf16":
        model = model.to(torch.bfloat16)
    elif precision == "int8":
        model = quantize_int8(model, output=int8_output)
    return model


def replace_linears(module: torch.nn.Module, make: Callable[[nn.Linear], nn.Module]) -> None:
    """Replace every nn.Linear below `module` (in place) by `make(linear)`."""
    replace_modules(module, torch.nn.Linear, make)


def replace_modules(module: torch.nn.Module, kind: type, make: Callable[[Any], nn.Module]) -> None:
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
        raise ConfigError("`int8`: this torch build has no x86 int8 kernels (onednn/fbgemm); translate without `int8`")
    small = next(e for e in ("x86", "fbgemm", "onednn") if e in have)
    return have[0], small


def quantize_int8(model: Transformer, output: bool = True) -> Transformer:
    """Dynamic int8 quantisation of the linear layers (and with `output` of the tied output projection),
    in place: each becomes an `Int8Linear` (per-channel int8 weights, activations quantised per call)."""
    wide, small = int8_engines()
    if output:
        model.use_output_projection()
        assert isinstance(model.output_proj, nn.Linear)  # use_output_projection made it one
        model.output_proj = Int8Linear.of(model.output_proj, wide, few_rows_engine=small)
    replace_linears(model, lambda linear: Int8Linear.of(linear, small))
    return model


# Below this many rows (32 sentences of 4 beams), fbgemm's int8 kernel computes the output projection
# faster than oneDNN's on an AVX2 CPU (2.5x on 4 rows); oneDNN is faster from here on.
FEW_ROWS = 128


class Int8Linear(torch.nn.Module):
    """A dynamically quantised linear layer (weights int8 per output channel, activations quantised per
    call), calling torch's operator (`torch.ops.quantized.linear_dynamic`) itself: torch's own module adds
    Python-level work on every call that costs as much as a small layer's arithmetic during decoding.

    `few_rows`: the weights packed for another backend's kernel, used for inputs of fewer than
    `FEW_ROWS` rows (the numbers differ a little between backends, as they do between batches).
    """

    def __init__(self, packed: Any, in_features: int, out_features: int, few_rows: Any = None):
        super().__init__()
        self.packed, self.in_features, self.out_features = packed, in_features, out_features
        self.few_rows, self.few_numel = few_rows, FEW_ROWS * in_features if few_rows is not None else 0

    @classmethod
    def of(cls, linear: nn.Linear, engine: str, few_rows_engine: Optional[str] = None) -> Int8Linear:
        """`linear` quantised for the quantised-kernel backend `engine` (and `few_rows_engine`, if another)."""
        few_rows = int8_pack(linear, few_rows_engine) if few_rows_engine not in (None, engine) else None
        return cls(int8_pack(linear, engine), linear.in_features, linear.out_features, few_rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = self.few_rows if x.numel() < self.few_numel else self.packed
        # reduce_range=True, as torch's module (quantisation version 4); torch.ops are Any to mypy
        out: torch.Tensor = LINEAR_DYNAMIC(x, packed, True)
        return out

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


LINEAR_DYNAMIC = torch.ops.quantized.linear_dynamic.default  # (x, packed weights, reduce_range) -> fp32


def int8_pack(linear: nn.Linear, engine: str) -> Any:
    """The packed int8 weights (per output channel) and bias of `linear` for the kernels of `engine`: the
    weights torch.ao's dynamic quantisation makes, packed by `quantized::linear_prepack`."""
    try:
        import torch.ao.nn.quantized.dynamic as nnqd
        from torch.ao.quantization import per_channel_dynamic_qconfig
    except ImportError:  # a torch without eager-mode quantisation
        raise ConfigError(f"`int8`: this torch ({torch.__version__}) has no dynamic quantisation; "
                          "translate without `int8`") from None
    before = torch.backends.quantized.engine
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        try:  # the packed weights keep the backend they were made with
            torch.backends.quantized.engine = engine
            # qconfig: an attribute torch.ao reads, which nn.Module's types do not declare
            cast(Any, linear).qconfig = per_channel_dynamic_qconfig
            from_float: Callable[[nn.Linear], Any] = nnqd.Linear.from_float  # unannotated in torch
            quantized = from_float(linear)
            return torch.ops.quantized.linear_prepack(quantized.weight(), quantized.bias())
        finally:
            torch.backends.quantized.engine = before
