"""Where a command computes and in which number format: device selection and precision, for
training and translation alike."""

from __future__ import annotations

import contextlib
import json
import math
import platform
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from nmt.config import TRAINING_PRECISIONS, Precision
from nmt.core.errors import ConfigError, NmtError, OutputError
from nmt.core.files import atomic_write
from nmt.core.usercache import cache_folder, locked


def select_device(gpus: int) -> torch.device:
    """The device of a one-process command (translate, eval)."""
    if gpus < 0:
        raise ConfigError(f"`gpus` must not be negative, got {gpus}; use `gpus` 0 for the CPU")
    if gpus == 0:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"`gpus` {gpus}: no CUDA device is available; use `gpus` 0 to run on the CPU")
    if gpus > 1:
        raise ConfigError(f"`gpus` {gpus}: this command runs on one GPU; use `gpus` 1")
    return torch.device("cuda")


def native_bf16() -> bool:
    """Whether the GPU computes in bfloat16 natively (Ampere and newer).

    torch's `is_bf16_supported()` also says yes for GPUs that only emulate bf16 (V100, T4), where
    it is much slower than fp16, so `auto` asks about native support.
    """
    try:
        native: bool = torch.cuda.is_bf16_supported(including_emulation=False)  # Any to mypy
        return native
    except TypeError:  # torch < 2.3 has no `including_emulation` and reports native support only
        supported: bool = torch.cuda.is_bf16_supported()
        return supported


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


@dataclass(frozen=True)
class Timing:
    """What `--precision auto` times on the CPU (`nmt.compute.timing` makes these from the model itself): `shape`
    names it in the cache; `run(precision)` runs one pass in that precision (the first call of each may set
    up, untimed)."""

    shape: str
    run: Callable[[Precision], None]


def resolve_precision(requested: Precision | str, device: torch.device, *, training: bool = False,
                      timing: Optional[Timing] = None) -> Precision:
    """The number format a command runs in on `device`, from the one requested (auto included): the one
    place that decides it, for training (`training`) and translation alike.

    auto: on CUDA bf16 where the GPU has it natively, else fp16; on the CPU bf16 where the CPU has it
    natively and, timed on this machine (`timing`: the model's own layers, see `fastest_cpu_precision`),
    it is faster than fp32; fp32 otherwise (and without a `timing`). fp16 needs CUDA; int8 (dynamic
    quantisation) is for translation on the CPU.
    """
    try:
        requested = Precision(requested)
    except ValueError:
        allowed = TRAINING_PRECISIONS if training else tuple(p.value for p in Precision)
        raise ConfigError(f"`precision` {requested!r}: use one of {', '.join(allowed)}") from None
    cuda = device.type == "cuda"
    if requested is Precision.AUTO:
        if cuda:
            return Precision.BF16 if native_bf16() else Precision.FP16
        if timing is None or not native_cpu_bf16():
            return Precision.FP32
        return fastest_cpu_precision(timing, training)
    if training and requested is Precision.INT8:
        raise ConfigError("`precision` int8 (dynamic quantisation) is for translation; for training use one of "
                          + ", ".join(TRAINING_PRECISIONS))
    if requested is Precision.FP16 and not cuda:
        if training:
            raise ConfigError("`precision` fp16 needs a CUDA GPU (loss scaling is a GPU technique); "
                              "use `precision` fp32 or bf16 on the CPU")
        raise ConfigError("`precision` fp16 needs a GPU (`gpus` 1); on the CPU use `int8`, bf16 or fp32")
    if requested is Precision.INT8 and cuda:
        raise ConfigError("`int8` (dynamic int8 quantisation) runs on the CPU only; on a GPU use `precision` fp16 "
                          "or bf16")
    if requested is Precision.BF16 and cuda and not torch.cuda.is_bf16_supported():
        raise ConfigError("`precision` bf16: this GPU has no bfloat16 support; use `precision` fp16"
                          + (" or auto" if training else ""))
    return requested


# -- timing fp32 against bf16 on the CPU ------------------------------------------------------------
# Whether bf16 pays on a CPU depends on the CPU and on the model, and the speed of a matrix product says
# little: on a Zen 4 EPYC (AVX512_BF16) a 1024 x 1024 bf16 product ran at 2.6x the fp32 rate, yet the
# multi30k preset (d_model 128) trained 8% slower in bf16 than in fp32, its time going to casts and small
# elementwise work (issue 15); on a CPU with AMX that model's products ran 2-5x faster in bf16 and it still
# trained 1.6x slower (the loss over the vocabulary, fused in fp32, is not under autocast), while the
# `small` preset trained faster. So auto times the model itself (`nmt.compute.timing`), once per machine and
# shape, and keeps the result in the user's cache.

BF16_MARGIN = 0.9  # bf16 rounds: it is chosen only when at least 10% faster than fp32
TIMING_BUDGET = 0.1  # seconds per format, beyond one warm-up pass and one timed one
TIMINGS_FILE = "timings.json"


def fastest_cpu_precision(timing: Timing, training: bool) -> Precision:
    """fp32 or bf16, whichever runs `timing` faster on this CPU (bf16 only when at least 1/BF16_MARGIN
    times faster): timed once per machine (CPU model, torch version, threads) and shape, then read from
    the user's cache (a cache that cannot be written is only not used)."""
    key = timing_key(timing.shape, training)
    try:
        folder = cache_folder("precision")
    except OutputError:
        return choose(time_alternately(timing.run))
    with locked(folder / ".lock"):  # several processes at once (ranks of one run): one times, the others read
        path = folder / TIMINGS_FILE
        try:
            known = json.loads(path.read_text(encoding="utf-8"))
            assert isinstance(known, dict)
        except (OSError, ValueError, AssertionError):  # missing, or damaged: timed again
            known = {}
        entry = known.get(key)
        if not (isinstance(entry, dict) and all(isinstance(entry.get(p), float) for p in ("fp32", "bf16"))):
            entry = {p.value: seconds for p, seconds in time_alternately(timing.run).items()}
            known[key] = entry
            # a full disk: the timing holds for this run anyway
            with contextlib.suppress(NmtError), atomic_write(path, "w") as f:
                f.write(json.dumps(known, indent=1, sort_keys=True) + "\n")
    return choose({Precision.FP32: entry["fp32"], Precision.BF16: entry["bf16"]})


def choose(seconds: dict[Precision, float]) -> Precision:
    return Precision.BF16 if seconds[Precision.BF16] < BF16_MARGIN * seconds[Precision.FP32] else Precision.FP32


def timing_key(shape: str, training: bool) -> str:
    """What a timing depends on: the machine, torch, the threads and the model's shape."""
    return (f"{cpu_name()} | {torch.backends.cpu.get_cpu_capability()} | torch {torch.__version__} | "
            f"{torch.get_num_threads()} threads | {'training' if training else 'translation'} {shape}")


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), or what the platform says."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def time_alternately(run: Callable[[Precision], None], budget: float = TIMING_BUDGET) -> dict[Precision, float]:
    """Seconds of one `run` in fp32 and in bf16: the best of the passes, taken in turns (so that other work on
    the machine weighs on both alike) after one untimed pass of each, for about `budget` seconds each."""
    formats = (Precision.FP32, Precision.BF16)
    best = {p: math.inf for p in formats}
    for precision in formats:
        run(precision)  # set-up and warm-up: kernels chosen, buffers allocated
    start = time.perf_counter()
    rounds = 0
    while rounds < 1 or time.perf_counter() - start < 2 * budget:
        for precision in formats:
            t0 = time.perf_counter()
            run(precision)
            best[precision] = min(best[precision], time.perf_counter() - t0)
        rounds += 1
    return best


def precision_warning(precision: Precision | str, device: torch.device) -> str:
    """A warning for a precision that runs much slower here than fp32 (bf16 on a CPU without it), or ''."""
    if precision == Precision.BF16 and device.type == "cpu" and not native_cpu_bf16():
        return ("warning: this CPU has no native bfloat16 (AVX512_BF16 or AMX); `precision` bf16 is emulated "
                "and far slower than fp32 here")
    return ""


def autocast(precision: Precision | str, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """Mixed precision for `precision` (fp32: none); weights stay fp32."""
    if precision == Precision.FP32:
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == Precision.BF16 else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_scaler(enabled: bool, device_type: str) -> Any:
    """A gradient scaler (active for fp16 only: bf16 and fp32 have fp32's exponent range)."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device_type, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)  # torch < 2.3
