"""Where a command computes and in which number format: device selection and precision, for
training and translation alike."""

from __future__ import annotations

import contextlib

import torch

from nmt.config import PRECISIONS, TRAINING_PRECISIONS
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


def check_name(precision: str, allowed: tuple[str, ...] = PRECISIONS) -> None:
    if precision not in allowed:
        raise ConfigError(f"--precision {precision!r}: use one of {', '.join(allowed)}")


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


def training_precision(requested: str, device: torch.device, d_model: int = 0) -> str:
    """fp32, bf16 or fp16 for training with `requested` (auto, fp32, bf16, fp16) on `device`.

    auto: on CUDA bf16 where the GPU has it natively, else fp16; on the CPU bf16 only for a native-bf16
    CPU and a model at least CPU_BF16_MIN_D_MODEL wide (`d_model`), else fp32.
    """
    check_name(requested, TRAINING_PRECISIONS)
    if device.type != "cuda":
        if requested == "fp16":
            raise ConfigError("--precision fp16 needs a CUDA GPU (loss scaling is a GPU technique); "
                              "use --precision fp32 or bf16 on the CPU")
        if requested == "auto":
            return "bf16" if native_cpu_bf16() and d_model >= CPU_BF16_MIN_D_MODEL else "fp32"
        return requested
    if requested == "auto":
        return "bf16" if native_bf16() else "fp16"
    if requested == "bf16" and not torch.cuda.is_bf16_supported():
        raise ConfigError("--precision bf16: this GPU has no bfloat16 support; use --precision fp16 or auto")
    return requested


def precision_warning(precision: str, device: torch.device) -> str:
    """A warning for a precision that runs much slower here than fp32 (bf16 on a CPU without it), or ''."""
    if precision == "bf16" and device.type == "cpu" and not native_cpu_bf16():
        return ("warning: this CPU has no native bfloat16 (AVX512_BF16 or AMX); --precision bf16 is emulated "
                "and far slower than fp32 here")
    return ""


def inference_precision(requested: str, device: torch.device) -> str:
    """fp32, fp16, bf16 or int8 for translation: fp16/bf16 on CUDA, bf16 or int8 (dynamic quantisation) on the CPU."""
    check_name(requested)
    if requested == "auto":
        return ("bf16" if native_bf16() else "fp16") if device.type == "cuda" else "fp32"
    if requested == "fp16" and device.type != "cuda":
        raise ConfigError("--precision fp16 needs a GPU (--gpus 1); on the CPU use --int8, bf16 or fp32")
    if requested == "int8" and device.type != "cpu":
        raise ConfigError("--int8 (dynamic int8 quantisation) runs on the CPU only; on a GPU use --precision fp16 or bf16")
    if requested == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError("--precision bf16: this GPU does not support bfloat16; use --precision fp16")
    return requested


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Mixed precision for `precision` (fp32: none); weights stay fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_scaler(enabled: bool, device_type: str):
    """A gradient scaler (active for fp16 only: bf16 and fp32 have fp32's exponent range)."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device_type, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)  # torch < 2.3
