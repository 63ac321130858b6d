"""Where a command computes and in which number format: device selection and precision, for
training and translation alike."""

from __future__ import annotations

import contextlib

import torch

from nmt.config import TRAINING_PRECISIONS, Precision
from nmt.errors import ConfigError


def select_device(gpus: int) -> torch.device:
    """The device of a one-process command (translate, eval)."""
    if gpus < 0:
        raise ConfigError(f"--gpus must not be negative, got {gpus}; use --gpus 0 for the CPU")
    if gpus == 0:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"--gpus {gpus}: no CUDA device is available; use --gpus 0 to run on the CPU")
    if gpus > 1:
        raise ConfigError(f"--gpus {gpus}: this command runs on one GPU; use --gpus 1")
    return torch.device("cuda")


def native_bf16() -> bool:
    """Whether the GPU computes in bfloat16 natively (Ampere and newer).

    torch's `is_bf16_supported()` also says yes for GPUs that only emulate bf16 (V100, T4), where
    it is much slower than fp16, so `auto` asks about native support.
    """
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:  # torch < 2.3 has no `including_emulation` and reports native support only
        return torch.cuda.is_bf16_supported()


# bf16 pays on the CPU only where the matrix products dominate an update: on a Zen 4 EPYC (AVX512_BF16) a
# 1024 x 1024 bf16 product ran at 2.6x the fp32 rate, yet the multi30k preset (d_model 128) trained
# 8% slower in bf16 than in fp32, its time going to casts and small elementwise work (issue 15).
CPU_BF16_MIN_D_MODEL = 512


def native_cpu_bf16() -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX512_BF16 or AMX), as torch's kernels detect it.

    Elsewhere bf16 arithmetic is emulated: a 2048^3 bf16 matmul ran at 0.3 GFLOP/s on an AVX2 EPYC
    whose fp32 rate is 87 GFLOP/s (docs/benchmarks.md).
    """
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(torch.cpu, name, None)
        try:
            if check is not None and check():
                return True
        except RuntimeError:
            pass
    return False


def resolve_precision(requested: Precision | str, device: torch.device, *, training: bool = False,
                      d_model: int = 0) -> Precision:
    """The number format a command runs in on `device`, from the one requested (auto included): the one
    place that decides it, for training (`training`) and translation alike.

    auto: on CUDA bf16 where the GPU has it natively, else fp16; on the CPU, for training, bf16 only for a
    native-bf16 CPU and a model at least CPU_BF16_MIN_D_MODEL wide (`d_model`), else fp32; for
    translation fp32. fp16 needs CUDA; int8 (dynamic quantisation) is for translation on the CPU.
    """
    try:
        requested = Precision(requested)
    except ValueError:
        allowed = TRAINING_PRECISIONS if training else tuple(p.value for p in Precision)
        raise ConfigError(f"--precision {requested!r}: use one of {', '.join(allowed)}") from None
    cuda = device.type == "cuda"
    if requested is Precision.AUTO:
        if cuda:
            return Precision.BF16 if native_bf16() else Precision.FP16
        wide = native_cpu_bf16() and d_model >= CPU_BF16_MIN_D_MODEL
        return Precision.BF16 if training and wide else Precision.FP32
    if training and requested is Precision.INT8:
        raise ConfigError("--precision int8 (dynamic quantisation) is for translation; for training use one of "
                          + ", ".join(TRAINING_PRECISIONS))
    if requested is Precision.FP16 and not cuda:
        if training:
            raise ConfigError("--precision fp16 needs a CUDA GPU (loss scaling is a GPU technique); "
                              "use --precision fp32 or bf16 on the CPU")
        raise ConfigError("--precision fp16 needs a GPU (--gpus 1); on the CPU use --int8, bf16 or fp32")
    if requested is Precision.INT8 and cuda:
        raise ConfigError("--int8 (dynamic int8 quantisation) runs on the CPU only; on a GPU use --precision fp16 or bf16")
    if requested is Precision.BF16 and cuda and not torch.cuda.is_bf16_supported():
        raise ConfigError("--precision bf16: this GPU has no bfloat16 support; use --precision fp16"
                          + (" or auto" if training else ""))
    return requested


def precision_warning(precision: Precision | str, device: torch.device) -> str:
    """A warning for a precision that runs much slower here than fp32 (bf16 on a CPU without it), or ''."""
    if precision == Precision.BF16 and device.type == "cpu" and not native_cpu_bf16():
        return ("warning: this CPU has no native bfloat16 (AVX512_BF16 or AMX); --precision bf16 is emulated "
                "and far slower than fp32 here")
    return ""


def autocast(precision: Precision | str, device: torch.device) -> contextlib.AbstractContextManager:
    """Mixed precision for `precision` (fp32: none); weights stay fp32."""
    if precision == Precision.FP32:
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == Precision.BF16 else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_scaler(enabled: bool, device_type: str):
    """A gradient scaler (active for fp16 only: bf16 and fp32 have fp32's exponent range)."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device_type, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)  # torch < 2.3
