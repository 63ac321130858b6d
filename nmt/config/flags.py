"""The one table from config fields to command-line options: library messages name the fields they are
about (`d_model`, written by nmt.core.errors.ref), and the command line shows them as the options that set
them (--d-model; --heads for n_heads; --no-dedup for the off side of --dedup/--no-dedup).

Every field of every config class below is in it; one field name means one option in every command (a test
holds the declarations to that), so that the table needs no command to read a message.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

from nmt.config import command_options, sections
from nmt.config.fields import fields_of, option_name, spec_of
from nmt.core.errors import render_refs

CLASSES: tuple[type, ...] = tuple(
    cls for module in (sections, command_options) for cls in vars(module).values()
    if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__)


@functools.cache
def flag_table() -> dict[tuple[str, bool], str]:
    """(field, off) -> the option that sets it: (d_model, False) -> --d-model; (dedup, True) -> --no-dedup."""
    table: dict[tuple[str, bool], str] = {}
    for cls in CLASSES:
        for name, f in fields_of(cls).items():
            spec = spec_of(f)
            if not spec.cli:
                continue
            pair = (spec.flag or option_name(name)).split("/")
            table[(name, False)] = pair[0]
            if len(pair) == 2:
                table[(name, True)] = pair[1]
    return table


def flag(name: str, off: bool = False) -> Optional[str]:
    """The option of field `name` (None: no command takes it)."""
    table = flag_table()
    return table.get((name, off)) or (table.get((name, False)) if off else None)


def as_flags(text: str) -> str:
    """A library message as the command line says it: each field it names, as its option."""
    return render_refs(text, flag)


def as_fields(text: str) -> str:
    """A library message as a Python caller or an HTTP client reads it: each field it names, bare (d_model)."""
    return render_refs(text, lambda name, off: name if (name, False) in flag_table() else None)
