"""Configuration files: a run's `config.toml` written with every field and its help, and `--config` files
read back, checked field by field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from nmt.config.fields import Overrides, check_field, coerce, did_you_mean, fields_of, named_as_fields, plain, spec_of
from nmt.config.sections import ModelConfig, TrainConfig
from nmt.core.compression import read_small_text
from nmt.core.errors import ConfigError, InputError, ref

# -- configuration files ---------------------------------------------------------------------------

SECTIONS: dict[str, type] = {"model": ModelConfig, "train": TrainConfig}


@dataclass(frozen=True)
class ConfigFile:
    """What a `--config` TOML file sets: a preset and some model and training fields."""

    preset: Optional[str]
    model: Overrides[ModelConfig]
    train: Overrides[TrainConfig]

    EMPTY: ClassVar[ConfigFile]


ConfigFile.EMPTY = ConfigFile(None, Overrides(ModelConfig), Overrides(TrainConfig))


def to_toml(model: ModelConfig, train: TrainConfig, preset: Optional[str] = None) -> str:
    """A run's configuration as TOML: `[model]` and `[train]` with every field and its help as a comment
    (what `--config` reads)."""
    lines = ["# nmt run configuration: `nmt train --config FILE` reads it; command-line options override it", ""]
    if preset:
        lines += [f"preset = {toml_value(preset)}", ""]
    for section, config in (("model", model), ("train", train)):
        lines.append(f"[{section}]")
        for f in dataclasses.fields(config):
            lines += [f"# {spec_of(f).help}", f"{f.name} = {toml_value(plain(getattr(config, f.name)))}"]
        lines.append("")
    return "\n".join(lines)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)  # round-trips exactly; inf/nan are rejected by validate() before they get here
    return str(value)


def read_config_file(path: Any) -> ConfigFile:
    """The preset and fields a TOML file (written by `to_toml` or by hand) sets; unknown sections or
    fields (with a "did you mean") and values of the wrong type are a ConfigError naming the file."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    try:
        text = read_small_text(path, f"{ref('config')} {path}", f"{ref('config')} takes a TOML file such as a run's "
                              "config.toml")
    except InputError as e:
        raise ConfigError(str(e)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    chosen = data.pop("preset", None)
    if chosen is not None and not isinstance(chosen, str):
        raise ConfigError(f"{path}: preset must be a string such as \"base\"")
    for section in data:
        if section not in SECTIONS:
            raise ConfigError(f"{path}: unknown section [{section}]{did_you_mean(section, SECTIONS)}; "
                              "use [model] and [train]")
    found = {}
    for section, cls in SECTIONS.items():
        values = data.get(section, {})
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: {section} must be a table, [{section}]")
        found[section] = {name: checked_value(path, section, cls, name, value) for name, value in values.items()}
    return ConfigFile(chosen, Overrides(ModelConfig, found["model"]), Overrides(TrainConfig, found["train"]))


def checked_value(path: Any, section: str, cls: type, name: str, value: Any) -> Any:
    """`value` of key `name` in `[section]` as the field's type, in its range; a ConfigError naming the
    file and the key otherwise."""
    known = fields_of(cls)
    if name not in known:
        raise ConfigError(f"{path}: [{section}] has no field {name!r}{did_you_mean(name, known)} "
                          f"(the fields are {', '.join(known)})")
    try:
        value = coerce(cls, name, value)
        check_field(cls, name, value)
    except ConfigError as e:
        raise ConfigError(f"{path}: [{section}] {named_as_fields(str(e), cls)}; the default is "
                          f"{toml_value(plain(known[name].default))}") from None
    return value
