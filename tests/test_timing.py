"""What --precision auto times: the model itself, as training and translation run it, in fp32 and bf16."""

import pytest

from nmt.compute.device import time_alternately
from nmt.compute.timing import shape_of, training_timing, translation_timing
from nmt.config import ModelConfig, Precision

TINY = ModelConfig(vocab_size=300, d_model=32, n_heads=4, encoder_layers=1, decoder_layers=1, d_ff=64, max_positions=64)


@pytest.mark.parametrize("make", [training_timing, translation_timing])
def test_timings_run_the_model_in_both_formats(make):
    timing = make(TINY)
    assert timing.shape == shape_of(TINY) == "1+1 layers d32 h4 ff64 v300 pre"
    seconds = time_alternately(timing.run, budget=0.0)
    assert set(seconds) == {Precision.FP32, Precision.BF16} and all(0 < s < 10 for s in seconds.values())


def test_a_timing_builds_its_model_once_and_only_when_run(monkeypatch):
    built = []
    import nmt.compute.timing as timing_module

    real = timing_module.Transformer
    monkeypatch.setattr(timing_module, "Transformer", lambda cfg: built.append(cfg) or real(cfg))
    timing = training_timing(TINY)
    assert built == []  # a timing found in the cache costs no model
    timing.run(Precision.FP32)
    timing.run(Precision.BF16)
    assert len(built) == 1
