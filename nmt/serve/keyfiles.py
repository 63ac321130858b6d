"""The server's files: its API keys and its access log (its options are `nmt.config.ServeConfig`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from nmt.config import ServeConfig
from nmt.core.compression import SMALL_TEXT_LIMIT, codec_of_name, read_small_text
from nmt.core.errors import ConfigError, ref
from nmt.core.files import check_output_file


def check_files(cfg: ServeConfig) -> Optional[frozenset[str]]:
    """The keys of the --api-keys file (None without one), read once: the server is given these, since a
    pipe (`--api-keys <(...)`) can be read only once. InputError/OutputError naming the option unless that
    file holds keys and the --access-log file can be written (before the server starts, not at its first
    request)."""
    keys = read_api_keys(cfg.api_keys) if cfg.api_keys is not None else None
    if cfg.access_log is not None and str(cfg.access_log) != "-":
        if codec_of_name(str(cfg.access_log), ref("access_log")) is not None:  # (other suffixes: its own error)
            raise ConfigError(f"{ref('access_log')} {cfg.access_log}: the log is appended to line by line, as plain "
                              "text; name it without the compression suffix (compress it when it is rotated)")
        check_output_file(cfg.access_log, ref("access_log"))
    return keys


def read_api_keys(path: Path) -> frozenset[str]:
    """The keys of an --api-keys file: one per line; blank lines and lines starting with # are skipped. Read
    bounded, as every small text file is (`/dev/zero` is an error naming the file, not all the memory)."""
    text = read_small_text(path, f"{ref('api_keys')} {path}", "write one key per line", limit=SMALL_TEXT_LIMIT)
    keys = frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    if not keys:
        raise ConfigError(f"{ref('api_keys')} {path}: holds no key; write one key per line (or leave {ref('api_keys')} "
                          "out)")
    return keys
