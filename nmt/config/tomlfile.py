"""Configuration files: a run's `config.toml` written with every field and its help, and `--config` files
read back, checked field by field.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from nmt.config.fields import Overrides, check_field, coerce, did_you_mean, fields_of, named_as_fields, plain, spec_of
from nmt.config.sections import ModelConfig, TrainConfig
from nmt.core.compression import read_small_text
from nmt.core.errors import ConfigError, InputError, ref

# -- configuration files ---------------------------------------------------------------------------

SECTIONS: dict[str, type] = {"model": ModelConfig, "train": TrainConfig}
CONFIG_LIMIT = 1 << 20  # bytes a --config file may hold once decompressed (a run's config.toml holds ~6 KB)


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
                              "config.toml", limit=CONFIG_LIMIT)
    except InputError as e:
        raise ConfigError(str(e)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    except ValueError:  # (after its subclass TOMLDecodeError) a whole number over Python's int-string limit
        raise ConfigError(f"{path}: {too_long_number(text, tomllib.loads)}") from None
    except RecursionError:  # arrays or inline tables nested thousands deep
        raise ConfigError(f"{path}: not valid TOML (arrays or tables nested too deep); write [model] and [train] "
                          "tables of plain values") from None
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


def too_long_number(text: str, loads: Callable[[str], Any]) -> str:
    """Where in `text` the whole number is that `loads` (tomllib's) could not read for its length: the parser
    says neither line nor key. The first lines of `text` fail that way from that number's line on (a number
    never spans lines, and a parser reads in order), so that line is found by halving."""

    def fails(lines: int) -> bool:
        try:
            loads("".join(rows[:lines]))
        except ValueError as e:
            return type(e) is ValueError  # not a TOMLDecodeError (a subclass): lines cut off mid-array
        except RecursionError:
            return False
        return False

    rows = text.splitlines(keepends=True)
    low, high = 1, len(rows)  # fails(high); the first line that fails is in [low, high]
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if fails(middle) else (middle + 1, high)
    key = next((m.group(1) for row in reversed(rows[:high]) if (m := re.match(r"\s*([^\s=#\[][^=]*?)\s*=", row))),
               None)
    section = next((m.group(1) for row in reversed(rows[:high]) if (m := re.match(r"\s*\[+\s*([^\]]+?)\s*\]", row))),
                   None)
    where = " ".join(w for w in (f"[{section}]" if section else "", key or "") if w) or "a value"
    digits = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
    return (f"{where} (line {high}) is a number of more than {digits:,} digits, too long to read; write a number "
            "in the field's range (nmt train --help lists them)")


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
