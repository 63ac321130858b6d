"""Device and precision choice for training and translation."""

import json

import pytest
import torch

from nmt.compute import device
from nmt.compute.device import precision_warning, resolve_precision
from nmt.config import Precision
from nmt.core.errors import ConfigError


def test_precision_choice(monkeypatch):
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(device, "native_cpu_bf16", lambda: False)
    assert resolve_precision("auto", cpu, training=True) == "fp32"
    assert resolve_precision("bf16", cpu, training=True) == "bf16"
    with pytest.raises(ConfigError, match="`precision` fp16 needs a CUDA GPU"):
        resolve_precision("fp16", cpu, training=True)
    # (native, emulated) bf16: A100/H100 (True, True); V100/T4 (False, True); older (False, False)
    for native, emulated, auto in [(True, True, "bf16"), (False, True, "fp16"), (False, False, "fp16")]:
        monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                            lambda including_emulation=True, n=native, e=emulated: e if including_emulation else n)
        assert resolve_precision("auto", gpu, training=True) == auto
        if emulated:
            assert resolve_precision("bf16", gpu, training=True) == "bf16"  # asked for explicitly: allowed, if slow
    with pytest.raises(ConfigError, match="no bfloat16 support"):
        resolve_precision("bf16", gpu, training=True)


SMALL = device.Timing("small shape", lambda precision: None)
WIDE = device.Timing("wide shape", lambda precision: None)


@pytest.fixture
def timings(monkeypatch, tmp_path):
    """time_alternately mocked: returns the (fp32, bf16) seconds in `timings.seconds`, records what it timed;
    the cache in a folder of the test."""
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    calls = []

    class Timings:
        seconds = (1.0, 0.5)

    def fake(run, budget=device.TIMING_BUDGET):
        calls.append(run)
        return {Precision.FP32: Timings.seconds[0], Precision.BF16: Timings.seconds[1]}

    monkeypatch.setattr(device, "time_alternately", fake)
    Timings.calls = calls
    return Timings


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("native, fp32, bf16, expected", [
    (False, 1.0, 0.1, "fp32"),  # emulated bf16: never chosen (and never timed)
    (True, 1.0, 0.95, "fp32"),  # faster, but within the margin: fp32 keeps its precision
    (True, 1.0, 1.3, "fp32"),  # slower (casts, and the loss that fp32 fuses)
    (True, 1.0, 0.85, "bf16"),
    (True, 2.0, 0.5, "bf16"),
])
def test_auto_picks_the_faster_format_on_the_cpu(timings, monkeypatch, training, native, fp32, bf16, expected):
    monkeypatch.setattr(device, "native_cpu_bf16", lambda: native)
    timings.seconds = (fp32, bf16)
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu, training=training, timing=SMALL) == expected
    assert timings.calls == ([SMALL.run] if native else [])
    assert resolve_precision("fp32", cpu, training=training, timing=SMALL) == "fp32"  # explicit choices stand
    assert resolve_precision("bf16", cpu, training=training, timing=SMALL) == "bf16"


def test_auto_timings_are_kept_per_machine_and_shape(timings, monkeypatch, tmp_path):
    """Timed once per shape and kind of run; read back afterwards, even by another process (the file); a
    damaged file is timed again; with nothing to time: fp32."""
    monkeypatch.setattr(device, "native_cpu_bf16", lambda: True)
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu, timing=SMALL) == "bf16"
    timings.seconds = (1.0, 2.0)  # what a new timing would say
    assert resolve_precision("auto", cpu, timing=SMALL) == "bf16"  # the cached one
    assert resolve_precision("auto", cpu, timing=WIDE) == "fp32"  # another shape: timed
    assert resolve_precision("auto", cpu, training=True, timing=SMALL) == "fp32"  # training: timed apart
    assert timings.calls == [SMALL.run, WIDE.run, SMALL.run]
    cached = json.loads((tmp_path / "precision" / device.TIMINGS_FILE).read_text())
    assert len(cached) == 3 and all(device.cpu_name() in key and torch.__version__ in key for key in cached)
    assert any(key.endswith("translation wide shape") for key in cached)
    (tmp_path / "precision" / device.TIMINGS_FILE).write_text("{not json")
    assert resolve_precision("auto", cpu, timing=SMALL) == "fp32" and len(timings.calls) == 4
    assert resolve_precision("auto", cpu) == "fp32" and len(timings.calls) == 4


def test_auto_times_without_a_writable_cache(timings, monkeypatch, tmp_path):
    monkeypatch.setattr(device, "native_cpu_bf16", lambda: True)
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "file"))  # a file where the cache folder would be
    assert resolve_precision("auto", torch.device("cpu"), timing=SMALL) == "bf16"
    assert resolve_precision("auto", torch.device("cpu"), timing=SMALL) == "bf16" and len(timings.calls) == 2


def test_time_alternately_warms_up_then_takes_turns():
    ran = []
    seconds = device.time_alternately(ran.append, budget=0.0)
    assert ran == ["fp32", "bf16", "fp32", "bf16"]  # one untimed pass each, then one timed round
    assert set(seconds) == {Precision.FP32, Precision.BF16} and all(0 <= s < 1 for s in seconds.values())


def test_native_cpu_bf16_asks_torch(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert device.native_cpu_bf16()
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert not device.native_cpu_bf16()


@pytest.mark.parametrize("native, precision, warns", [
    (False, "bf16", True), (True, "bf16", False), (False, "fp32", False), (False, "int8", False),
])
def test_emulated_bf16_on_the_cpu_is_warned_about(monkeypatch, native, precision, warns):
    monkeypatch.setattr(device, "native_cpu_bf16", lambda: native)
    assert bool(precision_warning(precision, torch.device("cpu"))) == warns


@pytest.mark.parametrize("requested, expected", [("fp32", "fp32"), ("auto", "fp32"), ("int8", "int8"), ("bf16", "bf16")])
def test_translation_precision_on_the_cpu(requested, expected):
    assert resolve_precision(requested, torch.device("cpu")) == expected


@pytest.mark.parametrize("requested, message", [
    ("fp16", "needs a GPU"), ("fp8", "`precision` 'fp8': use one of auto, fp32, bf16, fp16, int8"),
])
def test_translation_precision_errors_on_the_cpu(requested, message):
    with pytest.raises(ConfigError, match=message):
        resolve_precision(requested, torch.device("cpu"))


@pytest.mark.parametrize("requested", ["int8", "fp8"])
def test_training_refuses_inference_only_and_unknown_precisions(requested):
    with pytest.raises(ConfigError, match="use one of auto, fp32, bf16, fp16$"):
        resolve_precision(requested, torch.device("cpu"), training=True)


def test_translation_runs_in_bf16_on_the_cpu(tiny_checkpoint):
    from nmt.engines.torch_engine import TorchEngine

    lines = ["A man is riding a bicycle.", "", "Two dogs play in the snow."]
    fp32 = TorchEngine(tiny_checkpoint, precision="fp32")
    bf16 = TorchEngine(tiny_checkpoint, precision="bf16")
    assert bf16.precision == "bf16" and next(bf16.model.parameters()).dtype == torch.bfloat16
    out32, out16 = [t.text for t in fp32.translate_chunk(lines)], [t.text for t in bf16.translate_chunk(lines)]
    assert len(out16) == len(lines) and out16[1] == ""
    assert all(out16[i] for i in (0, 2))  # real translations, whether or not they equal fp32's
    assert len(out32) == len(lines)


def test_device_errors_name_the_fields_and_the_command_line_shows_the_options(monkeypatch):
    """A Python caller reads the field it sets (`gpus`); the CLI renders the message as the options were."""
    from nmt.compute.device import select_device
    from nmt.config.flags import as_fields, as_flags

    with pytest.raises(ConfigError) as e:
        select_device(-1)
    assert str(e.value) == "`gpus` must not be negative, got -1; use `gpus` 0 for the CPU"
    assert as_flags(str(e.value)) == "--gpus must not be negative, got -1; use --gpus 0 for the CPU"
    assert as_fields(str(e.value)) == "gpus must not be negative, got -1; use gpus 0 for the CPU"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError) as e:
        select_device(1)
    assert as_flags(str(e.value)) == "--gpus 1: no CUDA device is available; use --gpus 0 to run on the CPU"
    with pytest.raises(ConfigError) as e:
        resolve_precision("fp16", torch.device("cpu"))
    assert as_flags(str(e.value)) == "--precision fp16 needs a GPU (--gpus 1); on the CPU use --int8, bf16 or fp32"
    monkeypatch.setattr(device, "native_cpu_bf16", lambda: False)
    warning = precision_warning("bf16", torch.device("cpu"))
    assert "`precision` bf16 is emulated" in warning and "--precision bf16 is emulated" in as_flags(warning)
