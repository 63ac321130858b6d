"""nmt: neural machine translation with the Transformer, from the command line (`nmt --help`) and from Python:

    import nmt
    translator = nmt.load("run/averaged.pt")
    translator.translate(["A man is riding a bike."])

`import nmt` is cheap: the names below load their modules (and torch) on first use (see docs/python-api.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it, imported when the name is first used
LAZY = {
    "load": "nmt.api",
    "Translator": "nmt.api",
    "Result": "nmt.api",
    "Candidate": "nmt.api",
    "SearchOptions": "nmt.api",
    "NmtWarning": "nmt.api",
    "NmtError": "nmt.core.errors",
    "ConfigError": "nmt.core.errors",
    "InputError": "nmt.core.errors",
    "CheckpointError": "nmt.core.errors",
}

__all__ = ["CheckpointError", "Candidate", "ConfigError", "InputError", "NmtError", "NmtWarning", "Result",
           "SearchOptions", "Translator", "__version__", "load"]  # LAZY's names and the version

if TYPE_CHECKING:
    from nmt.api import Candidate, NmtWarning, Result, SearchOptions, Translator, load
    from nmt.core.errors import CheckpointError, ConfigError, InputError, NmtError


def __getattr__(name: str) -> Any:
    if name not in LAZY:
        raise AttributeError(f"module 'nmt' has no attribute {name!r}")
    value = getattr(importlib.import_module(LAZY[name]), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *LAZY})
