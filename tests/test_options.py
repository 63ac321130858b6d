"""nmt.cli.options: each config field declared once gives its command-line option, its --help text, its
default and its TOML key; what the user gave reaches the command as typed Overrides."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Optional

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from nmt.cli.main import app
from nmt.cli.options import with_config_options
from nmt.config import (
    FilterConfig,
    InferenceConfig,
    ModelConfig,
    Overrides,
    Precision,
    SearchConfig,
    ServeConfig,
    TrainConfig,
    choices_of,
    fields_of,
    option,
    read_config_file,
    spec_of,
    to_dict,
    to_toml,
)
from nmt.config.command_options import (
    AverageOptions,
    BpeOptions,
    DemoOptions,
    DownloadOptions,
    EvalOptions,
    ExportOptions,
    ImportMarianOptions,
    ListenOptions,
    PrepareOptions,
    ProgramOptions,
    TrainRunOptions,
    TranslateOptions,
)
from nmt.config.flags import flag
from nmt.core.errors import ConfigError

# Which commands offer which config classes' options (every option of every command is declared).
COMMANDS = {
    "bpe": (BpeOptions,),
    "train": (TrainRunOptions, ModelConfig, TrainConfig),
    "prepare": (PrepareOptions, FilterConfig),
    "average": (AverageOptions,),
    "translate": (TranslateOptions, SearchConfig, InferenceConfig),
    "eval": (EvalOptions, SearchConfig, InferenceConfig),
    "demo": (DemoOptions,),
    "download": (DownloadOptions,),
    "serve": (ListenOptions, SearchConfig, InferenceConfig, ServeConfig),
    "export": (ExportOptions,),
}


def click_params(command: str) -> dict:
    return {p.name: p for p in typer.main.get_command(app).commands[command].params}


def plain(value):
    return value.value if isinstance(value, enum.Enum) else value


@pytest.mark.parametrize("command, classes", COMMANDS.items())
def test_options_help_and_defaults_come_from_the_declarations(command, classes):
    params = click_params(command)
    for cls in classes:
        for name, f in fields_of(cls).items():
            spec = spec_of(f)
            if not spec.cli:
                assert name not in params
                continue
            param = params[name]
            assert flag(name) in param.opts, (command, name)
            assert param.help == spec.help
            assert plain(param.default) == plain(f.default)
            allowed = choices_of(cls, name)
            if allowed:  # the parser offers exactly the declared choices
                ctx = typer.main.get_command(app).make_context(command, ["--help"], resilient_parsing=True)
                assert f"<{'|'.join(allowed)}>" in param.get_help_record(ctx)[0]


@pytest.mark.parametrize("cls", [ModelConfig, TrainConfig])
def test_toml_keys_defaults_and_help_come_from_the_declarations(cls, tmp_path):
    defaults = cls()
    text = to_toml(ModelConfig(), TrainConfig())
    for f in dataclasses.fields(cls):
        assert f"# {spec_of(f).help}\n{f.name} = " in text  # the key is the field, its comment the help
    path = tmp_path / "c.toml"
    path.write_text(text)
    file = read_config_file(path)
    given = file.model if cls is ModelConfig else file.train
    assert to_dict(given.apply()) == to_dict(defaults)  # every key reads back as the default


def test_every_field_is_declared_with_an_option():
    for cls in (ModelConfig, TrainConfig, SearchConfig, InferenceConfig, FilterConfig):
        for f in dataclasses.fields(cls):
            assert spec_of(f).help.endswith(".") or spec_of(f).help.endswith(")"), (cls.__name__, f.name)


@dataclasses.dataclass
class Toy:
    width: int = option(4, "Width.", low=1, high=10)
    kind: Precision = option(Precision.FP32, "Kind.", choices=("fp32", "bf16"))
    loud: bool = option(False, "Loud.", flag="--loud/--quiet")
    extra: float = option(0.5, "Only when loud.", requires="loud")
    note: Optional[str] = option(None, "A note.")

    def validate(self) -> Toy:
        from nmt.config import check_fields

        check_fields(self)
        return self


toy_app = typer.Typer()
seen: list = []


@toy_app.command()
@with_config_options({"toy": Toy})
def run(name: str, toy: Overrides[Toy], times: int = 1) -> None:
    seen.append((name, times, toy))


@pytest.mark.parametrize("args, given", [
    ([], {}),
    (["--width", "4"], {"width": 4}),  # given, even when equal to the default
    (["--kind", "bf16", "--loud", "--extra", "0.7"], {"kind": Precision.BF16, "loud": True, "extra": 0.7}),
    (["--quiet"], {"loud": False}),
    (["--note", "hi", "--times", "3"], {"note": "hi"}),
])
def test_given_options_reach_the_command_as_overrides(args, given):
    seen.clear()
    result = CliRunner().invoke(toy_app, ["x", *args])
    assert result.exit_code == 0, result.output
    name, times, toy = seen[0]
    assert name == "x" and isinstance(toy, Overrides) and toy.cls is Toy and dict(toy.values) == given
    assert times == (3 if "--times" in args else 1)


def test_declared_choices_narrow_an_enum():
    result = CliRunner().invoke(toy_app, ["x", "--kind", "int8"])
    assert result.exit_code != 0 and "int8" in result.output


@pytest.mark.parametrize("values, error", [
    ({"width": 11}, "`width` must be at most 10, got 11"),
    ({"extra": 0.7}, "`extra` only applies with `loud`; add `loud` or drop `extra`"),
    ({"width": "4"}, "`width` '4': should be a whole number"),
])
def test_overrides_are_checked_against_the_declarations(values, error):
    with pytest.raises(ConfigError, match=f"^{error}$"):
        Overrides(Toy, values).apply()


def test_an_option_equal_to_its_default_needs_nothing():
    assert Overrides(Toy, {"extra": 0.5}).apply().extra == 0.5  # the default does nothing either way


def test_a_field_and_an_option_of_the_same_name_clash():
    def twice(width: int, toy: Overrides[Toy]) -> None:
        pass

    with pytest.raises(TypeError, match="declared twice"):
        with_config_options({"toy": Toy})(twice)


def test_misspelt_fields_get_a_suggestion(tmp_path: Path):
    with pytest.raises(ConfigError, match="did you mean 'd_model'"):
        Overrides(ModelConfig, {"dmodel": 3})
    config = tmp_path / "c.toml"
    config.write_text("[train]\nwarmpu = 3\n")
    with pytest.raises(ConfigError, match="did you mean 'warmup'"):
        read_config_file(config)


@pytest.mark.parametrize("form", ["plain", "bom", "gzip", "xz"])  # bom: a byte order mark (Windows editors)
def test_a_config_file_reads_the_same_plain_with_a_byte_order_mark_or_compressed(form, tmp_path: Path):
    import gzip
    import lzma

    text = "[model]\nd_model = 96\n[train]\nwarmup = 3\n".encode("utf-8-sig" if form == "bom" else "utf-8")
    write = {"gzip": gzip.compress, "xz": lzma.compress}.get(form, lambda b: b)
    config = tmp_path / "c.toml"
    config.write_bytes(write(text))
    file = read_config_file(config)
    assert file.model.apply().d_model == 96 and file.train.apply().warmup == 3


def test_a_damaged_compressed_config_file_is_one_line(tmp_path: Path):
    import gzip

    config = tmp_path / "c.toml.gz"
    config.write_bytes(gzip.compress(b"[model]\nd_model = 96\n")[:-12])
    with pytest.raises(ConfigError, match="c.toml.gz") as e:
        read_config_file(config)
    assert "\n" not in str(e.value)


def test_the_program_and_import_marian_options_come_from_the_declarations():
    group = typer.main.get_command(app)
    for params, cls in ((group.params, ProgramOptions), (group.commands["import"].commands["marian"].params,
                                                         ImportMarianOptions)):
        by_name = {p.name: p for p in params}
        for name, f in fields_of(cls).items():
            assert flag(name) in by_name[name].opts and by_name[name].help == spec_of(f).help


def test_no_command_writes_its_options_by_hand():
    """Every option is a declared field (nmt.config): the only typer.Option is the one nmt.cli.options builds."""
    root = Path(__file__).resolve().parent.parent / "nmt" / "cli"
    found = {str(p.relative_to(root)): p.read_text().count("typer.Option(") for p in root.rglob("*.py")}
    assert {name: n for name, n in found.items() if n} == {"options.py": 1}


@dataclasses.dataclass
class Job:
    files: list[Path] = option(None, "Files.", required=True)
    sample: Optional[int] = option(None, "Sample.", example="`sample` N")
    seed: Optional[int] = option(None, "Seed.", requires="sample")

    def validate(self) -> Job:
        from nmt.config import check_fields

        check_fields(self)
        return self


def test_a_repeated_path_option_is_checked_and_a_suggestion_shows_its_value():
    assert Overrides(Job, {"files": [Path("a")]}).apply().files == [Path("a")]
    with pytest.raises(ConfigError, match="^`files` .*should be a list of a path$"):
        Overrides(Job, {"files": ["a"]}).apply()
    with pytest.raises(ConfigError, match="^`seed` only applies with `sample`; add `sample` N or drop `seed`$"):
        Overrides(Job, {"files": [], "seed": 3}).apply()


def test_a_required_option_has_no_default_on_the_command_line():
    params = click_params("bpe")
    assert params["train"].required and params["out"].required and not params["vocab_size"].required
