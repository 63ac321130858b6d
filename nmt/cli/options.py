"""Command-line options built from the config declarations (as fairseq's `gen_parser_from_dataclass`
and Hugging Face's `HfArgumentParser` do): each field of a config class in `nmt.config`, with its
`option(...)` metadata, becomes one typer option, and a command receives the options its user gave as
one typed `Overrides` per config class.

    @options.command(app, "translate", search=SearchConfig, inference=InferenceConfig)
    def translate_command(model: ..., search: Overrides[SearchConfig], inference: Overrides[InferenceConfig]):

An option counts as given when it came from the command line (click's parameter source), so that a
command can tell what the user set from what the defaults, a preset, a file or a model supply.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import typing
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Callable, Literal, Tuple  # noqa: UP035 (typer reads typing.Tuple)

import typer

from nmt.config import Overrides, field_types, fields_of, option_name, spec_of

CONTEXT = "_nmt_context"  # the parameter through which typer hands the generated command its click context

# The help panel of each config class's options (typer groups them under these titles in --help).
PANELS = {"ModelConfig": "Model", "TrainConfig": "Training", "SearchConfig": "Search",
          "InferenceConfig": "Inference", "FilterConfig": "Filters", "ServeConfig": "Server",
          "TextConfig": "Text"}


def option_type(cls: type, name: str) -> Any:
    """The type typer parses field `name` of `cls` as: the field's own, or a Literal of its declared
    choices (a subset of an enum, say)."""
    spec = spec_of(fields_of(cls)[name])
    if spec.choices:
        return Literal[spec.choices]
    kind = field_types(cls)[name]
    if typing.get_origin(kind) is tuple:
        return Tuple[typing.get_args(kind)]  # noqa: UP006 (typer reads typing.Tuple, not the builtin)
    return kind


def parameters(cls: type, callbacks: Mapping[str, Callable[..., Any]]) -> list[inspect.Parameter]:
    """A keyword-only typer parameter for each command-line field of `cls`, with the field's default (and
    its callback in `callbacks`, by field name: what an eager option such as --version does)."""
    params = []
    for name, f in fields_of(cls).items():
        spec = spec_of(f)
        if not spec.cli:
            continue
        names = [spec.flag or option_name(name), *spec.aliases]
        info = typer.Option(*names, help=spec.help, show_default=f.default != "",
                            rich_help_panel=spec.panel or PANELS.get(cls.__name__), is_eager=spec.eager,
                            callback=callbacks.get(name))
        annotation: Any = Annotated[option_type(cls, name), info]  # built at run time: a value, not an alias
        default = f.default.value if isinstance(f.default, enum.Enum) and spec.choices else f.default
        if spec.required:  # no default: typer asks for it
            default = inspect.Parameter.empty
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    return params


def given_on_command_line(ctx: typer.Context, name: str) -> bool:
    """Whether the user gave option `name` (rather than click filling in its default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def collect(ctx: typer.Context, cls: type, values: Mapping[str, Any]) -> Overrides[Any]:
    """The options of `cls` among `values` that the user gave, as Overrides (choices become enum members)."""
    given = {}
    for name in fields_of(cls):
        if name not in values or not given_on_command_line(ctx, name):
            continue
        value = values[name]
        kind = field_types(cls)[name]
        if isinstance(kind, type) and issubclass(kind, enum.Enum) and not isinstance(value, kind):
            value = kind(value)
        given[name] = value
    return Overrides(cls, given)


def with_config_options(groups: Mapping[str, type], callbacks: Mapping[str, Callable[..., Any]] = MappingProxyType({})
                        ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command function whose parameters named in `groups` take `Overrides` of those config
    classes: the returned function offers every command-line field of each class as an option instead,
    and calls the command with the given ones gathered per class. `callbacks`: typer callbacks of fields
    (by name), for the eager ones."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name not in groups]
        generated = [p for cls in groups.values() for p in parameters(cls, callbacks)]
        names = [p.name for p in own + generated]
        clash = sorted({n for n in names if names.count(n) > 1})
        if clash:
            raise TypeError(f"{fn.__name__}: options {clash} are declared twice (a command option and a config "
                            "field, or two config classes)")
        fields = {group: list(fields_of(cls)) for group, cls in groups.items()}

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            ctx = kwargs.pop(CONTEXT)
            for group, cls in groups.items():
                kwargs[group] = collect(ctx, cls, {name: kwargs.pop(name) for name in fields[group] if name in kwargs})
            return fn(**kwargs)

        # Own parameters first, then the generated (keyword-only) ones, and the click context (which typer
        # passes to a parameter of type typer.Context), which tells given options from defaults.
        context = inspect.Parameter(CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
        ordered = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + generated + [context]
        command.__signature__ = signature.replace(parameters=ordered)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in ordered}  # resolved: typer reads these too
        del command.__wrapped__  # typer must see the new signature, not fn's
        return command

    return decorate


def config_fields(*classes: type) -> dict[str, tuple[type, dataclasses.Field[Any]]]:
    """Option name -> (config class, field) of every command-line field of `classes` (for tests and docs)."""
    out = {}
    for cls in classes:
        for name, f in fields_of(cls).items():
            spec = spec_of(f)
            if spec.cli:
                for flag in [spec.flag or option_name(name), *spec.aliases]:
                    for part in flag.split("/"):
                        out[part] = (cls, f)
    return out

