"""config.check_range: every numeric option finite and in range (a table worked out by hand); the errors
name the field (`max_time`), which the command line shows as its option (--max-time)."""

from __future__ import annotations

import math

import pytest

from nmt.config import INT_MAX, InferenceConfig, ModelConfig, Precision, TrainConfig, check_range, preset
from nmt.core.errors import ConfigError
from nmt.workflows.threads import set_threads


@pytest.mark.parametrize("value, low, high, low_open, high_open, error", [
    (1, 1, 10, False, False, None),
    (10, 1, 10, False, False, None),
    (0, 1, 10, False, False, "`x` must be at least 1, got 0"),
    (11, 1, 10, False, False, "`x` must be at most 10, got 11"),
    (0.0, 0.0, None, True, False, "`x` must be above 0.0, got 0.0"),
    (1.0, 0.0, 1.0, False, True, "`x` must be below 1.0, got 1.0"),
    (0.999, 0.0, 1.0, False, True, None),
    (math.nan, None, None, False, False, "`x` must be a finite number, got nan"),  # fails no comparison
    (math.inf, 0.0, None, False, False, "`x` must be a finite number, got inf"),
    (-math.inf, None, 0.0, False, False, "`x` must be a finite number, got -inf"),
    (10**30, 1, INT_MAX, False, False, f"`x` must be at most {INT_MAX}, got {10**30}"),  # would overflow int64
])
def test_check_range(value, low, high, low_open, high_open, error):
    if error is None:
        check_range("`x`", value, low, high, low_open=low_open, high_open=high_open)
    else:
        with pytest.raises(ConfigError, match=f"^{error.replace('+', '[+]')}$"):
            check_range("`x`", value, low, high, low_open=low_open, high_open=high_open)


@pytest.mark.parametrize("field, value, option", [
    ("max_time", -1.0, "`max_time`"),
    ("lr_factor", math.nan, "`lr_factor`"),
    ("clip_norm", math.inf, "`clip_norm`"),
    ("adam_betas", (0.9, 1.0), "`adam_betas`"),
    ("seed", -1, "`seed`"),
    ("valid_beam", 100_000, "`valid_beam`"),
])
def test_train_config_refuses(field, value, option):
    with pytest.raises(ConfigError, match=f"^{option} ") as e:
        TrainConfig(**{field: value}).validate()
    assert "--" not in str(e.value)


@pytest.mark.parametrize("field, value, option", [
    ("dropout", math.nan, "`dropout`"),
    ("d_model", 0, "`d_model`"),
    ("max_positions", 2**40, "`max_positions`"),
])
def test_model_config_refuses(field, value, option):
    with pytest.raises(ConfigError, match=f"^{option} ") as e:
        ModelConfig(**{field: value}).validate()
    assert "--" not in str(e.value)


@pytest.mark.parametrize("check, words", [
    (lambda: InferenceConfig(int8=True, precision=Precision.BF16).validate(), ["`int8` contradicts `precision` bf16"]),
    (lambda: InferenceConfig(engine="torch", inter_threads=2).validate(),
     ["`inter_threads` 2: ", "use `engine` ctranslate2, or leave `inter_threads` out"]),
    (lambda: preset("huge"), ["`preset` 'huge' is unknown"]),
    (lambda: set_threads(-1), ["`threads` must be at least 0, got -1"]),
])
def test_library_errors_name_the_fields(check, words):
    """What the library says names config fields (`int8`); only the command line shows them as options (--int8)."""
    with pytest.raises(ConfigError) as e:
        check()
    assert all(w in str(e.value) for w in words) and "--" not in str(e.value), str(e.value)
