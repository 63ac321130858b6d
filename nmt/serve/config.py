"""The server's settings: batching, limits, timeouts, keys and logs (the options of `nmt serve`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from nmt.config import INT_MAX, check_range
from nmt.errors import ConfigError, InputError
from nmt.files import check_output_file

# The widest common encoding of one character in a body: JSON's \uXXXX escape (what `json.dumps` writes for
# every non-ASCII character by default), as wide as a percent-encoded 2-byte UTF-8 character in a form.
BYTES_PER_CHAR = 6
BODY_OVERHEAD = 64 * 1024  # field names, quotes, commas, a multipart boundary per field


@dataclass
class ServeConfig:
    """Batching, limits, timeouts, keys and logs of the server."""

    max_batch_sentences: int = 128  # lines merged into one chunk (and per model batch)
    max_batch_tokens: int = 4096  # source tokens per model batch (padded)
    max_wait_ms: float = 50.0  # how long the oldest request waits at most for others to join its batch
    quiet_ms: float = 5.0  # ... but the batch goes as soon as no request has come for this long
    max_queue: int = 4096  # lines waiting at most; beyond, 503 with Retry-After (413 for a request that never fits)
    max_lines: int = 256  # lines per request
    max_chars: int = 5000  # characters per line
    timeout: float = 60.0  # seconds a request may take to send its body, and to wait for its translations
    max_body_bytes: int = 0  # bytes of a request body at most (413 beyond); 0: derived from max_lines x max_chars
    drain_timeout: float = 10.0  # seconds SIGTERM waits for the requests in flight before cutting their connections
    api_keys: Optional[Path] = None  # file of accepted keys, one per line; None: no key is asked for
    access_log: Optional[Path] = None  # one line per request appended to this file ("-": stderr); None: no log

    def validate(self) -> "ServeConfig":
        """ConfigError (or InputError/OutputError for the key and log files) naming the option at fault."""
        for name in ("max_batch_sentences", "max_batch_tokens", "max_queue", "max_lines", "max_chars"):
            check_range("--" + name.replace("_", "-"), getattr(self, name), 1, INT_MAX)
        check_range("--max-wait-ms", self.max_wait_ms, 0.0, 60_000.0)
        check_range("--quiet-ms", self.quiet_ms, 0.0, 60_000.0)
        check_range("--timeout", self.timeout, 0.0, low_open=True)
        check_range("--max-body-bytes", self.max_body_bytes, 0, 2**62)
        check_range("--drain-timeout", self.drain_timeout, 0.0, 3600.0)
        if self.api_keys is not None:
            read_api_keys(self.api_keys)
        if self.access_log is not None and str(self.access_log) != "-":
            check_output_file(self.access_log, "--access-log")
        return self

    @property
    def body_limit(self) -> int:
        """Bytes a request body may hold: --max-body-bytes, or room for --max-lines lines of --max-chars
        characters each in the widest common encoding."""
        return self.max_body_bytes or self.max_lines * self.max_chars * BYTES_PER_CHAR + BODY_OVERHEAD


def read_api_keys(path: Path) -> frozenset[str]:
    """The keys of an --api-keys file: one per line; blank lines and lines starting with # are skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"--api-keys {path}: is not UTF-8 text; write one key per line") from None
    except OSError as e:
        raise InputError(f"--api-keys {path}: cannot read ({e.strerror or e}); check the path") from None
    keys = frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    if not keys:
        raise ConfigError(f"--api-keys {path}: holds no key; write one key per line (or leave --api-keys out)")
    return keys
