"""Device and precision choice for training and translation."""

import pytest
import torch

from nmt.device import inference_precision, training_precision
from nmt.errors import ConfigError


def test_precision_choice(monkeypatch):
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert training_precision("auto", cpu) == "fp32"
    assert training_precision("bf16", cpu) == "bf16"
    with pytest.raises(ConfigError, match="--precision fp16 needs a CUDA GPU"):
        training_precision("fp16", cpu)
    # (native, emulated) bf16: A100/H100 (True, True); V100/T4 (False, True); older (False, False)
    for native, emulated, auto in [(True, True, "bf16"), (False, True, "fp16"), (False, False, "fp16")]:
        monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                            lambda including_emulation=True, n=native, e=emulated: e if including_emulation else n)
        assert training_precision("auto", gpu) == auto
        if emulated:
            assert training_precision("bf16", gpu) == "bf16"  # asked for explicitly: allowed, if slow
    with pytest.raises(ConfigError, match="no bfloat16 support"):
        training_precision("bf16", gpu)


@pytest.mark.parametrize("requested, expected", [("fp32", "fp32"), ("auto", "fp32"), ("int8", "int8")])
def test_inference_precision_on_the_cpu(requested, expected):
    assert inference_precision(requested, torch.device("cpu")) == expected


@pytest.mark.parametrize("requested, message", [
    ("fp16", "needs a GPU"), ("bf16", "needs a GPU"), ("fp8", "--precision 'fp8': use one of auto, fp32, bf16, fp16, int8"),
])
def test_inference_precision_errors_on_the_cpu(requested, message):
    with pytest.raises(ConfigError, match=message):
        inference_precision(requested, torch.device("cpu"))


@pytest.mark.parametrize("requested", ["int8", "fp8"])
def test_training_refuses_inference_only_and_unknown_precisions(requested):
    with pytest.raises(ConfigError, match="use one of auto, fp32, bf16, fp16$"):
        training_precision(requested, torch.device("cpu"))
