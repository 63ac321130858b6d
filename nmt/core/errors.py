"""Errors the library raises; the CLI turns each into one line on stderr and its `exit_code`.

Messages name the file or setting at fault and say how to fix it. A setting is named by its config field in
backticks, as `ref` writes it (`d_model`; `-dedup` for the off side of a --x/--no-x pair): a Python caller
reads the field it sets, and the command line shows the option that sets it (`nmt.config.flags.as_flags`,
the one table from fields to options).
"""

import errno
import re
from typing import Callable, Optional


class NmtError(Exception):
    """Base class of every error meant for the user (not a bug)."""

    @property
    def exit_code(self) -> int:
        """The process's exit status when this error ends a command."""
        return 1


# A reference to a config field in a message: `name`, or `-name` for the off side of a --x/--no-x pair.
REF = re.compile(r"`(-?)([a-z][a-z0-9_]*)`")


def ref(field: str, off: bool = False) -> str:
    """How a message names the setting of config field `field` (`off`: its --no-x side)."""
    return f"`{'-' if off else ''}{field}`"


def render_refs(text: str, name: Callable[[str, bool], Optional[str]]) -> str:
    """`text` with each reference to a field replaced by `name(field, off)`; kept as it is where that is None
    (a word in backticks that names no field)."""

    def replace(m: "re.Match[str]") -> str:
        shown = name(m.group(2), m.group(1) == "-")
        return m.group(0) if shown is None else shown

    return REF.sub(replace, text)


class InputError(NmtError):
    """A user-supplied file or value is missing, unreadable or malformed."""


class ConfigError(NmtError):
    """Options that contradict each other or an existing run."""


class CheckpointError(NmtError):
    """A checkpoint is missing, corrupt, foreign or incompatible."""


class DataError(NmtError):
    """A binarized dataset is missing, incomplete or corrupt."""


class DownloadError(NmtError):
    """A download failed: HTTP error, checksum mismatch, unsafe archive."""


class TrainingInterrupted(NmtError):
    """Training stopped by Ctrl-C (SIGINT) or SIGTERM; a checkpoint was written, rerun to resume.

    `exit_code` follows the shell's convention: 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM).
    """

    def __init__(self, message: str, signum: int = 2):  # 2: SIGINT
        super().__init__(message)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)


class TrainingDiverged(NmtError):
    """The loss stayed NaN/inf for `max_bad_updates` updates in a row."""


class BusyError(NmtError):
    """Another process holds the lock of a run, data or download folder."""


class OutputError(NmtError):
    """An output cannot be written: a folder where a file is expected (or the reverse), no permission,
    a read-only or full disk, a closed stdout."""


class StderrIsInput(OutputError):
    """stderr is redirected onto a file the command reads: the error cannot be said there without changing that
    file (the CLI says it on stdout where that is another file, else only by its exit code)."""


# What to do about the OSErrors a user can cause (or fix), by errno.
_OS_ERROR_FIXES = {
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "a part of the path is a file, not a folder; check the path",
    errno.EISDIR: "it is a folder; give a file name",
    errno.EEXIST: "a file is in the way; choose another path",
    errno.EACCES: "check the permissions of the file and its folders, or choose another location",
    errno.EPERM: "check the permissions of the file and its folders, or choose another location",
    errno.EROFS: "the file system is read-only; choose another location",
    errno.ENOSPC: "free disk space or choose another location",
    getattr(errno, "EDQUOT", errno.ENOSPC): "free disk space (you are over quota) or choose another location",
    errno.EFBIG: "the file is too large for this file system; choose another location",
    errno.ENAMETOOLONG: "use a shorter path",
    errno.EIO: "the disk reported an input/output error; check it, or choose another location",
}


def os_error_message(e: OSError, path: object = None, action: str = "") -> str:
    """One line for an OSError: the file (`path`, else the one the error names), what failed, why, and the fix.

    e.g. `run/bpe.model: cannot write (No space left on device); free disk space or choose another location`
    """
    if path is None and e.filename is not None:
        path = e.filename if e.filename2 is None else f"{e.filename} -> {e.filename2}"
    reason = e.strerror or str(e) or type(e).__name__
    what = f"{action} ({reason})" if action else reason
    fix = _OS_ERROR_FIXES.get(e.errno) if e.errno is not None else None
    return (f"{path}: " if path is not None else "") + what + (f"; {fix}" if fix else "")


def one_line(e: Exception, limit: int = 0) -> str:
    """An exception's message on one line (another library's may span several), cut at `limit` characters
    (0: whole), or its type's name where it has none."""
    text = " ".join(str(e).split())
    return (text[:limit] if limit else text) or type(e).__name__
