"""The files of a Hugging Face model folder, read within bounds: a file no larger than such a file ever is,
JSON that cannot exhaust the parser, and each value of a config of its type and range, checked before
anything of the size it names is allocated. Every failure is an InputError naming the file (and the key)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Optional

from nmt.config import INT_MAX
from nmt.core.errors import InputError, one_line

AGAIN = "download the folder again"


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of `path`; InputError naming it when it holds more than `limit` (never read whole then)."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})") from None
    if len(data) > limit:
        raise InputError(f"{path}: larger than {limit / 2**20:g} MiB, more than a model folder's {path.name} ever "
                         f"is; {AGAIN}")
    return data


def parse_json(path: Path, limit: int) -> dict[str, Any]:
    """The JSON object in `path`, a file of at most `limit` bytes."""
    try:
        data = json.loads(read_bounded(path, limit).decode("utf-8"))
    except (ValueError, RecursionError) as e:  # bad UTF-8 or JSON, a 5,000-digit number, nesting 100,000 deep
        digits = "integer string conversion" in str(e)
        why = f"a number of more than {sys.get_int_max_str_digits()} digits" if digits else one_line(e)
        raise InputError(f"{path}: not valid JSON ({why}); {AGAIN}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object; {AGAIN}")
    return data


def shown(value: object) -> str:
    """A value read from a file, for a message: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def int_value(config: dict[str, Any], key: str, path: Path, default: Optional[int] = None, low: int = 0,
              high: int = INT_MAX) -> int:
    """config's whole number `key` (or a list of one), from `low` to `high`."""
    value = config.get(key, default)
    if isinstance(value, list) and len(value) == 1:  # eos_token_id may be a list of one
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InputError(f"{path}: {key} is {shown(value)}, not a whole number from {low} to {high}; {AGAIN}")
    return value


def float_value(config: dict[str, Any], key: str, path: Path, default: float, low: float = -math.inf,
                high: float = math.inf) -> float:
    """config's finite number `key`, from `low` to `high`."""
    value = config.get(key, default)
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or not low <= value <= high):
        where = f" from {low:g} to {high:g}" if math.isfinite(low) or math.isfinite(high) else ""
        raise InputError(f"{path}: {key} is {shown(value)}, not a number{where}; {AGAIN}")
    return float(value)
