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


DIGITS = "9" * 5000  # over Python's int-string limit (4,300 digits)


@pytest.mark.parametrize("toml, key, words", [
    (f"[train]\nmax_updates = {DIGITS}\n", "[train] max_updates (line 2)", "more than 4,300 digits"),
    (f"[model]\n# a comment\nd_model = -{DIGITS}\n", "[model] d_model (line 3)", "more than 4,300 digits"),
    (f"[train]\nlr_factor = {DIGITS}\n", "[train] lr_factor (line 2)", "more than 4,300 digits"),
    (f"[train]\nadam_betas = [\n  0.9,\n  {DIGITS},\n]\n", "[train] adam_betas (line 4)", "more than 4,300 digits"),
    (f"preset = {DIGITS}\n[train]\n", "preset (line 1)", "more than 4,300 digits"),
    (f"[train]\nlr_factor = {DIGITS}.0\n", "[train] lr_factor", "must be a finite number, got inf"),
    (f"[train]\nlr_factor = 1e{DIGITS}\n", "[train] lr_factor", "must be a finite number, got inf"),
    # in Python's limit, or hexadecimal (no limit to read it), but beyond any field's range, or a float's
    (f"[model]\nencoder_layers = {DIGITS[:4000]}\n", "[model] encoder_layers", "got a 4,000-digit number"),
    (f"[train]\nmax_updates = 0x{'f' * 5000}\n", "[train] max_updates", "got a 6,021-digit number"),
    (f"[train]\nseed = -{DIGITS[:4000]}\n", "[train] seed", "got a negative 4,000-digit number"),
    (f"[train]\nlr_factor = {DIGITS[:4000]}\n", "[train] lr_factor", "got a 4,000-digit number"),
    (f"[train]\nadam_betas = [0.9, 0x{'f' * 5000}]\n", "[train] adam_betas", "got a 6,021-digit number"),
    (f"[train]\nprecision = {DIGITS[:4000]}\n", "[train] precision", "a 4,000-digit number: should be one of"),
    (f"[train]\nprecision = [0x{'f' * 5000}]\n", "[train] precision", "a list holding a number too long to show"),
    (f"[model]\nencoder_layers = \"{DIGITS}\"\n", "[model] encoder_layers", "9999...: should be a whole number"),
    ("[train]\nprecision = [1]\n", "[train] precision", "[1]: should be one of"),  # a list is not hashable
    ("[train]\nadam_betas = " + "[" * 100_000 + "]" * 100_000 + "\n", "nested too deep", "not valid TOML"),
], ids=["int", "negative int", "int for a float", "in a multi-line list", "preset", "float", "exponent",
        "4,000 digits", "hexadecimal", "negative 4,000 digits", "4,000 digits for a float", "hexadecimal in a list",
        "choice", "list for a choice", "string", "list", "nested"])
def test_a_config_with_a_huge_number_is_one_short_line_naming_the_key(toml, key, words, tmp_path):
    """Python refuses to read (tomllib) or write (a message) a whole number of over 4,300 digits: that was a
    ValueError's traceback, and a number within the limit was quoted whole, a line of thousands of digits."""
    from nmt.config.tomlfile import read_config_file

    (tmp_path / "c.toml").write_text(toml)
    with pytest.raises(ConfigError) as e:
        read_config_file(tmp_path / "c.toml")
    message = str(e.value)
    assert message.startswith(f"{tmp_path / 'c.toml'}: ") and key in message and words in message, message
    assert "\n" not in message and len(message) < 300, message


@pytest.mark.parametrize("value, text", [
    (10**54 - 1, "9" * 54), (10**55, "a 56-digit number"), (10**55 - 1, "a 55-digit number"),
    (-(10**4999), "a negative 5,000-digit number"), (10**5000 - 1, "a 5,000-digit number"),
    ("x" * 100, "x" * 57 + "..."), (1.5, "1.5"),
], ids=["54 digits", "56 digits", "55 digits", "negative 5,000 digits", "5,000 digits", "long text", "float"])
def test_a_message_shows_a_value_in_a_few_characters(value, text):
    from nmt.config.fields import shown

    assert shown(value) == text


@pytest.mark.parametrize("form", ["gzip", "bzip2", "xz"])
def test_a_config_bomb_is_refused_at_1_mib(form, tmp_path):
    """2 KB that inflate to 2 MiB: a --config holds at most 1 MiB once decompressed."""
    import bz2
    import gzip
    import lzma

    from nmt.config.tomlfile import read_config_file

    compress = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}[form]
    (tmp_path / "c.toml").write_bytes(compress(b"#" * (2 << 20)))
    with pytest.raises(ConfigError, match="holds more than 1 MiB once decompressed"):
        read_config_file(tmp_path / "c.toml")
