"""Typed configuration, each option declared once: the model architecture, the training recipe, the
search, the inference device and number format, and the data filters.

Every field says, in its `option(...)` metadata, its help text, its command-line option (--field-name
unless named otherwise) and the values it accepts (a `Literal` type or a range). `nmt.cli.options` builds
the commands' options from these declarations, `read_config_file` and `to_toml` the configuration files,
and `check_fields` the range checks, so that help text, TOML keys, defaults and checks cannot drift
apart. What a user (or a preset, or a file) set is an `Overrides`: the given fields of one config
class, applied to a base (the defaults, a preset, a resumed run's stored config).

A preset is just a named pair of overrides. The final configs are stored in every checkpoint (as plain
data), so `translate`, `eval` and `average` rebuild a model with no flags.

This module is the option framework (`option`, `Overrides`, the checks, configs as data); the config
classes are in `nmt.config.sections` (the commands' own options in `nmt.config.command_options`), the
presets in `nmt.config.presets`, TOML files in `nmt.config.tomlfile`.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, Optional, TypeVar, Union

from nmt.core.errors import ConfigError, ref, render_refs

# The largest count or size an option takes: a sanity cap, so that no value overflows the int32/int64
# arithmetic of torch and numpy (or a seed their generators refuse) deep inside a run.
INT_MAX = 2**31 - 1
MAX_THREADS = 1024  # torch crashes (SIGSEGV) when asked for ~100k threads
# The widest beam search: its memory grows with beam x vocabulary per sentence.
MAX_BEAM = 1024
# Sanity caps of the search. |alpha| <= 10 keeps ((5 + len) / 6)^alpha and len^alpha finite for any length
# a model can emit; an output limit of 1000 tokens per source token is beyond any model's positions already.
MAX_LENPEN = 10.0
MAX_LEN_A = 1000.0
SHOWN = 60  # characters of a value that a message quotes (a file may hold a 5,000-digit number or a long string)


class Precision(str, enum.Enum):
    """Number formats, for training and translation alike; `nmt.compute.device.resolve_precision` turns the
    requested one (auto included) into the one a device runs."""

    AUTO = "auto"
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    INT8 = "int8"  # dynamic int8 quantisation: translation on the CPU only

    def __str__(self) -> str:
        return self.value


TRAINING_PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # int8 (dynamic quantisation) is for translation only


# -- declaring an option ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OptionSpec:
    """How a config field appears to the user: its option, help text, accepted values."""

    help: str
    flag: Optional[str] = None  # the option's name; None: --field-name
    aliases: tuple[str, ...] = ()  # other names the option answers to (e.g. a short -m)
    choices: Optional[tuple[str, ...]] = None  # accepted values, where the type does not say (a subset of an enum)
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    requires: Optional[str] = None  # a field without which (while it is off: OFF) this one does nothing
    cli: bool = True  # False: set by nmt itself (e.g. vocab_size, from the data), not on the command line
    excludes: Optional[str] = None  # a boolean field with which this one does nothing
    required: bool = False  # the command line must give it (the field's default only fills the dataclass)
    example: Optional[str] = None  # how messages suggest giving it ("`sample` N", a reference); None: the field
    panel: Optional[str] = None  # the --help panel (rich help only); None: its config class's
    eager: bool = False  # acted on while the command line is read, before the others (--version)


OFF = (False, None, "", 0, "none")  # the values of a field that switch it off (for `requires`)


def option(default: Any, help: str, *, flag: Optional[str] = None, aliases: Sequence[str] = (),
           choices: Optional[Sequence[str]] = None, low: Optional[float] = None, high: Optional[float] = None,
           low_open: bool = False, high_open: bool = False, requires: Optional[str] = None,
           cli: bool = True, excludes: Optional[str] = None, required: bool = False,
           example: Optional[str] = None, panel: Optional[str] = None, eager: bool = False) -> Any:
    """A config field declared once: its default, help text, option name, accepted values and range.
    A `required` option has no default on the command line; `default` then only completes the dataclass."""
    spec = OptionSpec(help, flag, tuple(aliases), tuple(choices) if choices else None, low, high, low_open,
                      high_open, requires, cli, excludes, required, example, panel, eager)
    return field(default=default, metadata={"option": spec})


def option_name(field_name: str) -> str:
    """The command-line option of a config field: max_len_a -> --max-len-a."""
    return "--" + field_name.replace("_", "-")


def spec_of(f: dataclasses.Field[Any]) -> OptionSpec:
    spec: Optional[OptionSpec] = f.metadata.get("option")
    if spec is None:
        raise TypeError(f"config field {f.name} is declared without option(...)")
    return spec


def flag_of(cls: type, name: str) -> str:
    """How a message names field `name` of config class `cls`: a reference (nmt.core.errors.ref) that the
    command line shows as the field's option and a Python caller reads as the field."""
    fields_of(cls)[name]  # a KeyError for a field the class does not have: a bug, not a message
    return ref(name)


def given_flag(cls: type, name: str, value: Any) -> str:
    """`flag_of`, naming the side the user gave of a --x/--no-x pair (--no-x for False)."""
    pair = (spec_of(fields_of(cls)[name]).flag or "").split("/")
    return ref(name, off=value is False and len(pair) == 2)


def named_as_fields(text: str, *classes: type) -> str:
    """`text` with the references to fields of `classes` written as the fields themselves (d_model), for the
    messages about values read from a file (a checkpoint, a --config file), not given as options."""
    known = {name for cls in classes for name in fields_of(cls)}
    return render_refs(text, lambda name, off: name if name in known else None)


def fields_of(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


@functools.cache  # resolving is slow, and every option of every command asks (nmt --help)
def field_types(cls: type) -> dict[str, Any]:
    """Each field's type, resolved (the annotations are strings under `from __future__ import annotations`)."""
    return typing.get_type_hints(cls)


def choices_of(cls: type, name: str) -> Optional[tuple[str, ...]]:
    """The values field `name` accepts, where they are a fixed set: its declared choices, or its
    `Literal`/enum type's values."""
    spec = spec_of(fields_of(cls)[name])
    if spec.choices:
        return spec.choices
    kind = field_types(cls)[name]
    if typing.get_origin(kind) is Literal:
        return tuple(typing.get_args(kind))
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return tuple(str(m.value) for m in kind)
    return None


def check_range(option: str, value: float, low: Optional[float] = None, high: Optional[float] = None, *,
                low_open: bool = False, high_open: bool = False) -> None:
    """ConfigError naming `option` (a field's reference as `flag_of` writes it: "`threads`") unless `value`
    is a finite number between `low` and `high` (each included unless open). NaN fails every comparison, so
    it is caught first rather than slipping past one."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{option} must be a finite number, got {value}")
    if low is not None and (value <= low if low_open else value < low):
        raise ConfigError(f"{option} must be {'above' if low_open else 'at least'} {low}, got {shown(value)}")
    if high is not None and (value >= high if high_open else value > high):
        raise ConfigError(f"{option} must be {'below' if high_open else 'at most'} {high}, got {shown(value)}")


def shown(value: Any, quoted: bool = False) -> str:
    """`value` as a message quotes it (its repr if `quoted`), at most SHOWN characters: a whole number longer
    than that as its count of digits (Python refuses to write one of over 4,300), other text cut short."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * SHOWN:  # > 54 digits
        magnitude = abs(value)
        digits = int(magnitude.bit_length() * math.log10(2))  # 10**(digits-1) < magnitude < 10**(digits+1)
        digits += magnitude >= 10**digits
        return f"a {'negative ' if value < 0 else ''}{digits:,}-digit number"
    try:
        text = repr(value) if quoted else str(value)
    except ValueError:  # a list holding such a number
        return f"a {type(value).__name__} holding a number too long to show"
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def check_fields(config: Any) -> None:
    """Check every field of `config` against its declaration: its type, its choices, its range."""
    for name in fields_of(type(config)):
        check_field(type(config), name, getattr(config, name))


def check_field(cls: type, name: str, value: Any) -> None:
    """ConfigError naming the field (a reference: `flag_of`) unless `value` has field `name`'s type, is one
    of its choices and lies in its range."""
    spec, flag = spec_of(fields_of(cls)[name]), flag_of(cls, name)
    check_type(flag, value, field_types(cls)[name])
    if value is None:  # an Optional field left out (its type allows None)
        return
    allowed = choices_of(cls, name)
    if allowed is not None and str(value.value if isinstance(value, enum.Enum) else value) not in allowed:
        raise ConfigError(f"{flag} {shown(value)}: use one of {', '.join(allowed)}")
    if spec.low is not None or spec.high is not None:
        for v in value if isinstance(value, tuple) else (value,):
            check_range(flag, v, spec.low, spec.high, low_open=spec.low_open, high_open=spec.high_open)


def check_type(flag: str, value: Any, kind: Any) -> None:
    """ConfigError unless `value` is of type `kind` (an int is fine for a float; a bool is not a number).
    Configs come from checkpoints and files too, where a string can stand where a number belongs."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Union:  # Optional[X]
        if value is None and type(None) in args:
            return
        kind = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        ok = isinstance(value, str)
    elif isinstance(kind, type) and issubclass(kind, enum.Enum):
        ok = isinstance(value, kind) or any(value == m.value for m in kind)  # (a list is not hashable)
    elif origin is list:  # a repeated option (List[Path])
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, args[0]) for v in value)
    elif origin is tuple:
        ok = isinstance(value, tuple) and len(value) == len(args) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ConfigError(f"{flag} {shown(value, quoted=True)}: should be {type_name(kind)}")


def type_name(kind: Any) -> str:
    if typing.get_origin(kind) is tuple:
        return f"{len(typing.get_args(kind))} numbers"
    if typing.get_origin(kind) is list:
        return f"a list of {type_name(typing.get_args(kind)[0])}"
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(typing.get_args(kind))
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return "one of " + ", ".join(m.value for m in kind)
    return {int: "a whole number", float: "a number", bool: "true or false", str: "a string",
            Path: "a path"}.get(kind, str(kind))


def coerce(cls: type, name: str, value: Any) -> Any:
    """`value` as read from a file or a checkpoint, in the type of field `name`: a list for a tuple,
    an int for a float, a string for an enum. Anything else is left for `check_fields` to judge."""
    kind = field_types(cls)[name]
    if typing.get_origin(kind) is Union:
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if isinstance(kind, type) and issubclass(kind, enum.Enum) and isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            raise ConfigError(f"{flag_of(cls, name)} {shown(value, quoted=True)}: use one of "
                              f"{', '.join(choices_of(cls, name) or ())}") from None
    if typing.get_origin(kind) is tuple and isinstance(value, list):
        return tuple(as_float(cls, name, v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return as_float(cls, name, value)
    return value


def as_float(cls: type, name: str, value: int) -> float:
    """A whole number given for float field `name`; ConfigError for one beyond a float's range (~1.8e308)."""
    try:
        return float(value)
    except OverflowError:
        raise ConfigError(f"{flag_of(cls, name)} must be a finite number, got {shown(value)}") from None


if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")  # a config class: a dataclass


@dataclass(frozen=True)
class Overrides(Generic[C]):
    """The fields of config class `cls` that someone set (the command line, a file, a preset), applied
    to a base config with `apply`; the fields not given keep the base's values."""

    cls: type[C]
    values: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = fields_of(self.cls)
        for name in self.values:
            if name not in known:
                raise ConfigError(f"{self.cls.__name__} has no field {name!r}{did_you_mean(name, known)}")
        object.__setattr__(self, "values", {k: coerce(self.cls, k, v) for k, v in self.values.items()
                                            if v is not None})

    def __or__(self, other: Overrides[C]) -> Overrides[C]:
        """These overrides, then `other`'s on top."""
        return Overrides(self.cls, {**self.values, **other.values})

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def without(self, *names: str) -> Overrides[C]:
        return Overrides(self.cls, {k: v for k, v in self.values.items() if k not in names})

    def only(self, *names: str) -> Overrides[C]:
        return Overrides(self.cls, {k: v for k, v in self.values.items() if k in names})

    def apply(self, base: Optional[C] = None) -> C:
        """`base` (default: the class's defaults) with these fields set, validated. An option set to
        another value than its default without the option it `requires` (or with one it `excludes`) is an
        error: it would silently do nothing."""
        config = dataclasses.replace(base, **self.values) if base is not None else self.cls(**self.values)
        for name, value in self.values.items():
            f = fields_of(self.cls)[name]
            spec = spec_of(f)
            if value == f.default:
                continue
            given = given_flag(self.cls, name, value)
            valued = given + ("" if isinstance(value, bool) else f" {plain(value)}")  # --lenpen-type power
            needed, excluded = spec.requires, spec.excludes
            if needed and getattr(config, needed) in OFF:
                flag = flag_of(self.cls, needed)
                if needed in self.values:  # given, as a value that turns it off (0, an empty string)
                    raise ConfigError(f"{valued} does nothing with {flag} {getattr(config, needed)}; drop {given} "
                                      f"or change {flag}")
                suggested = spec_of(fields_of(self.cls)[needed]).example or flag
                raise ConfigError(f"{given} only applies with {flag}; add {suggested} or drop {given}")
            if excluded and getattr(config, excluded):
                raise ConfigError(f"{valued} does nothing with {flag_of(self.cls, excluded)}; drop one of them")
        validated: C = config.validate()  # type: ignore[attr-defined]  # every config class has validate()
        return validated


def overrides(cls: type[C], values: Union[Overrides[C], Mapping[str, Any], None] = None) -> Overrides[C]:
    """`values` as Overrides of `cls` (library callers may pass a plain mapping; None values are not given)."""
    if isinstance(values, Overrides):
        if values.cls is not cls:
            raise TypeError(f"overrides of {values.cls.__name__} given where {cls.__name__} is expected")
        return values
    return Overrides(cls, dict(values or {}))


def did_you_mean(name: str, known: Sequence[str] | Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


# -- configs as data -------------------------------------------------------------------------------


def to_dict(config: Any) -> dict[str, Any]:
    """A config as plain Python data (safe for `torch.load(weights_only=True)` and TOML)."""
    return {name: plain(getattr(config, name)) for name in fields_of(type(config))}


def plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def from_dict(cls: type[C], data: Mapping[str, Any], where: str = "") -> C:
    """Rebuild a config from `to_dict` output (a checkpoint's, say), checked field by field: unknown
    keys (a newer nmt) and values of the wrong type (a damaged file) are a ConfigError naming `where`
    and the field."""
    prefix = f"{where}: " if where else ""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix}{cls.__name__} is a {type(data).__name__}, not a table of fields; "
                          "the file is damaged")
    known = fields_of(cls)
    unknown = [k for k in data if k not in known]
    if unknown:
        raise ConfigError(f"{prefix}unknown {cls.__name__} fields {sorted(unknown)}: was this written by a newer nmt?")
    try:
        config = cls(**{k: coerce(cls, k, v) for k, v in data.items()})
        validated: C = config.validate()  # type: ignore[attr-defined]  # every config class has validate()
        return validated
    except ConfigError as e:
        raise ConfigError(f"{prefix}{cls.__name__}: {named_as_fields(str(e), cls)}") from None


def threads_option(default: int, help: str) -> Any:
    """--threads: the CPU threads a command computes with (0: its library's default, all cores), one range for all.
    Where a command runs torch they are torch's (per process); bpe and prepare run the tokenizer's alone.
    translate, eval and serve: the engine's (InferenceConfig.threads)."""
    return option(default, help, low=0, high=MAX_THREADS)
