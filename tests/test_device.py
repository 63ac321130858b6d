"""Device and precision choice for training and translation."""

import pytest
import torch

from nmt import device
from nmt.device import precision_warning, resolve_precision
from nmt.errors import ConfigError


def test_precision_choice(monkeypatch):
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(device, "native_cpu_bf16", lambda: False)
    assert resolve_precision("auto", cpu, training=True) == "fp32"
    assert resolve_precision("bf16", cpu, training=True) == "bf16"
    with pytest.raises(ConfigError, match="--precision fp16 needs a CUDA GPU"):
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


@pytest.mark.parametrize("native, d_model, expected", [
    (False, 128, "fp32"), (False, 1024, "fp32"),  # emulated bf16: never chosen
    (True, 128, "fp32"), (True, 511, "fp32"),  # native, but too narrow to pay for the casts
    (True, 512, "bf16"), (True, 1024, "bf16"),
])
def test_auto_picks_bf16_on_the_cpu_only_where_native_and_wide(monkeypatch, native, d_model, expected):
    monkeypatch.setattr(device, "native_cpu_bf16", lambda: native)
    assert resolve_precision("auto", torch.device("cpu"), training=True, d_model=d_model) == expected
    assert resolve_precision("fp32", torch.device("cpu"), training=True, d_model=d_model) == "fp32"  # explicit choices stand
    assert resolve_precision("bf16", torch.device("cpu"), training=True, d_model=d_model) == "bf16"


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
    ("fp16", "needs a GPU"), ("fp8", "--precision 'fp8': use one of auto, fp32, bf16, fp16, int8"),
])
def test_translation_precision_errors_on_the_cpu(requested, message):
    with pytest.raises(ConfigError, match=message):
        resolve_precision(requested, torch.device("cpu"))


@pytest.mark.parametrize("requested", ["int8", "fp8"])
def test_training_refuses_inference_only_and_unknown_precisions(requested):
    with pytest.raises(ConfigError, match="use one of auto, fp32, bf16, fp16$"):
        resolve_precision(requested, torch.device("cpu"), training=True)


def test_translation_runs_in_bf16_on_the_cpu(tiny_checkpoint):
    from nmt.translate import Translator

    lines = ["A man is riding a bicycle.", "", "Two dogs play in the snow."]
    fp32 = Translator(tiny_checkpoint, precision="fp32")
    bf16 = Translator(tiny_checkpoint, precision="bf16")
    assert bf16.precision == "bf16" and next(bf16.model.parameters()).dtype == torch.bfloat16
    out32, out16 = [t.text for t in fp32.translate_chunk(lines)], [t.text for t in bf16.translate_chunk(lines)]
    assert len(out16) == len(lines) and out16[1] == ""
    assert all(out16[i] for i in (0, 2))  # real translations, whether or not they equal fp32's
    assert len(out32) == len(lines)
