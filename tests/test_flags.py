"""nmt.config.flags: the one table from config fields to command-line options. Library messages name fields
(`d_model`); the command line shows them as the options that set them (--d-model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import assert_user_error, nmt

from nmt.config import (
    FilterConfig,
    InferenceConfig,
    ModelConfig,
    Overrides,
    SearchConfig,
    ServeConfig,
    TrainConfig,
    fields_of,
    option_name,
    spec_of,
)
from nmt.config.command_options import EvalOptions, TrainRunOptions
from nmt.config.flags import CLASSES, as_fields, as_flags, flag_table
from nmt.core.errors import ConfigError


def test_every_field_means_the_option_its_class_declares():
    """One field name is one option in every class (and so in every command): the table needs no command."""
    table = flag_table()
    for cls in CLASSES:
        for name, f in fields_of(cls).items():
            spec = spec_of(f)
            if not spec.cli:
                continue
            pair = (spec.flag or option_name(name)).split("/")
            assert table[(name, False)] == pair[0], (cls.__name__, name)
            assert table.get((name, True)) == (pair[1] if len(pair) == 2 else None), (cls.__name__, name)


def test_the_table_holds_only_declared_fields():
    declared = {name for cls in CLASSES for name, f in fields_of(cls).items() if spec_of(f).cli}
    assert {name for name, _ in flag_table()} == declared
    assert {ModelConfig, TrainConfig, SearchConfig, InferenceConfig, FilterConfig, ServeConfig,
            TrainRunOptions, EvalOptions} <= set(CLASSES)


@pytest.mark.parametrize("text, flags, fields", [
    ("`d_model` 7", "--d-model 7", "d_model 7"),
    ("`n_heads`", "--heads", "n_heads"),
    ("`-dedup`", "--no-dedup", "dedup"),
    ("`dedup`", "--dedup", "dedup"),
    ("`bpe_model` x.model and `as_json`", "--bpe x.model and --json", "bpe_model x.model and as_json"),
    ("`nmt prepare`", "`nmt prepare`", "`nmt prepare`"),  # a command line, not a field
    ("`weights_only`", "`weights_only`", "`weights_only`"),  # no field of nmt's
    ("no reference at all", "no reference at all", "no reference at all"),
])
def test_references_render_as_flags_or_fields(text, flags, fields):
    assert as_flags(text) == flags
    assert as_fields(text) == fields


def test_a_library_error_names_the_fields():
    with pytest.raises(ConfigError) as e:
        Overrides(ModelConfig, {"d_model": 10, "n_heads": 3}).apply()
    message = str(e.value)
    assert "`d_model` 10" in message and "`n_heads` 3" in message and "--" not in message
    assert as_flags(message) == "--d-model 10 is not divisible by --heads 3; pick values that divide"


def test_the_command_line_shows_the_same_error_with_its_options(tiny_data, tmp_path):
    r = nmt("train", "--data", tiny_data, "--out", tmp_path / "run", "--preset", "tiny", "--d-model", 10,
            "--heads", 3, "--threads", 1)
    line = assert_user_error(r, "--d-model 10 is not divisible by --heads 3")
    assert "`" not in line


def test_no_module_names_options_through_a_context_variable():
    root = Path(__file__).resolve().parent.parent / "nmt"
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for word in ("names_as_fields", "_FIELD_NAMES"):  # the context variable that once switched them
            assert word not in text, (path.relative_to(root.parent), word)
