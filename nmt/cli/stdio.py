"""The commands' standard streams: results on stdout (written as they come, a closed or full one named),
text from stdin (a closed one named)."""

from __future__ import annotations

import sys
from typing import IO

from nmt.core.errors import InputError, OutputError, os_error_message


def stdin_bytes() -> IO[bytes]:
    """stdin as a byte stream; InputError when the shell closed it (`<&-`)."""
    if sys.stdin is None:
        raise InputError("stdin is closed; pipe text in (... | nmt COMMAND) or name a file")
    return sys.stdin.buffer


def require_stdout() -> None:
    """OutputError when the shell closed stdout (`>&-`): the results would vanish."""
    if sys.stdout is None:
        raise OutputError("stdout is closed; the results have nowhere to go: send them to a file (> FILE) or a pipe")


def write_stdout(text: str) -> None:
    """Write results to stdout now (a pipeline reads them as they come); a failed write (a full disk
    under `> FILE`) names stdout. A closed pipe stays a BrokenPipeError: ErrorBoundary exits 141."""
    require_stdout()
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OutputError(os_error_message(e, "stdout", "cannot write the results")) from None
