"""Outputs are never inputs, nor a user's files: the one rule every command is held to before it does any work
(`check_outputs`: no output is one of its inputs, by path or inode, nor a folder holding them, nor a stream redirected
to them), and the claims of the folders and files a command writes (`claim_folder`, `claim_file`): a destination
that exists must be the command's own (a folder it made, a file of the kind it writes), never a user's folder of
other files or a user's file of another kind."""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from nmt.core.errors import ConfigError, OutputError, StderrIsInput
from nmt.core.files import LOCK_NAME, real_path, same_file

# -- outputs are never inputs ----------------------------------------------------------------------


@dataclass(frozen=True)
class Output:
    """A path a command writes: a file, or a folder. Of a folder, `owns(relative path, input option)`
    tells which of the paths in it the command writes over or deletes (for an input given by that
    option); None: all of them (the folder is replaced whole)."""

    option: str
    path: Path
    folder: bool = False
    owns: Optional[Callable[[str, str], bool]] = None
    appends: bool = False  # appended to (a log), never replaced: stderr may be sent there too


def check_outputs(outputs: Sequence[Output], inputs: Sequence[tuple[str, Path]], reads_stdin: bool = False) -> None:
    """The one rule, checked before any work: no output of a command is one of its inputs (the same
    file by path or by inode, through symbolic and hard links alike), no output folder holds an input
    that the command would write over or delete, no two outputs are one path, and stdout, stderr (and
    stdin, where the command reads it) are not redirected to a file that is an input (an output).
    `inputs` are (option, path) pairs. An OutputError names both options otherwise."""
    for i, out in enumerate(outputs):
        for option, path in inputs:
            _check_apart(out, option, path, "the input")
        for other in outputs[:i]:
            _check_apart(out, other.option, other.path, "the output")
            if other.folder and _owned_by(other, out.path, out.option):
                raise OutputError(f"{out.option} {out.path} lies in the {other.option} folder {other.path}, which "
                                  f"the command writes too; choose another {out.option}")
    _check_streams(outputs, inputs, reads_stdin)


def _check_apart(out: Output, option: str, path: Path, what: str) -> None:
    if same_file(out.path, path):
        link = "" if real_path(out.path) == real_path(path) else " (the same file, through a link)"
        raise OutputError(f"{out.option} {out.path} is also {what} {option} {path}{link}: nmt would overwrite what it "
                          f"reads; choose another {out.option}")
    if out.folder and _owned_by(out, path, option):
        raise OutputError(f"{out.option} {out.path} holds {what} {option} {path}, which writing the folder would "
                          f"replace; choose another {out.option} (or move {path.name} out of it)")


def _owned_by(out: Output, path: Path, option: str) -> bool:
    """Whether `path` lies inside the folder `out` and is one of the paths the command writes there."""
    folder, inner = real_path(out.path), real_path(path)
    if folder == inner or folder not in inner.parents:
        return False
    return out.owns is None or out.owns(inner.relative_to(folder).as_posix(), option)


def _check_streams(outputs: Sequence[Output], inputs: Sequence[tuple[str, Path]], reads_stdin: bool) -> None:
    """stdout or stderr redirected to an input (`> INPUT` has emptied it before nmt started; `>> INPUT`
    would grow what is being read), or stdin read from an output."""
    # (stderr onto an input, checked first: the CLI says the error elsewhere, or the line would go into that file)
    for fd, stream, error in ((2, "stderr", StderrIsInput), (1, "stdout", OutputError)):
        for option, path in inputs:
            if _fd_is(fd, path):
                raise error(f"{stream} is redirected to the input {option} {path} (`> FILE` empties it before "
                            f"nmt starts); send {stream} to another file")
        for out in outputs:  # `-o out.de 2>> out.de`: what is said there is gone when the output replaces the file
            if not out.appends and _fd_is(fd, out.path):
                raise error(f"{stream} is redirected to the output {out.option} {out.path}, which nmt writes; send "
                            f"{stream} to another file")
    if reads_stdin:
        for out in outputs:
            if _fd_is(0, out.path):
                raise OutputError(f"stdin is read from {out.option} {out.path}, an output of the command; "
                                  f"choose another {out.option}")
        for fd, stream, error in ((2, "stderr", StderrIsInput), (1, "stdout", OutputError)):
            if _fd_is(0, fd):  # `< FILE > FILE` (emptied), `< FILE >> FILE` (read back, without end)
                raise error(f"{stream} is redirected to the file that stdin reads ({_fd_name(0)}): nmt would "
                            f"overwrite what it reads, or read its own output back; send {stream} to another file")


def _fd_name(fd: int) -> str:
    """The path of file descriptor `fd` where the system tells it (Linux), else "fd N"."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd {fd}"


def _fd_is(fd: int, path: Path | int) -> bool:
    """Whether file descriptor `fd` is open on the regular file `path` (a path, or another file descriptor)."""
    try:
        mine, theirs = os.fstat(fd), os.stat(path)  # (os.stat of a descriptor is its fstat)
    except OSError:  # closed, or no such file
        return False
    return stat.S_ISREG(mine.st_mode) and (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


def check_distinct(option: str, paths: list[Path]) -> None:
    """ConfigError when a file is given twice (an ensemble of a model with itself, an average of a
    checkpoint with itself: the same result as once, at twice the cost, and most likely a slip)."""
    for i, path in enumerate(paths):
        for earlier in paths[:i]:
            if same_file(path, earlier):
                raise ConfigError(f"{option} {path} is given twice (also as {earlier}); give each file once")


def claim_folder(path: str | Path, option: str, own: Sequence[str], made_by: str) -> None:
    """OutputError unless the folder `path`, where a command is to write, is missing, empty, or the command's own: it
    holds one of the names in `own` (glob patterns of what the command writes there, whose presence says it made
    the folder). A user's folder of other files is never written into (a file of theirs could be replaced), however
    few names the command writes."""
    folder = Path(path)
    if not folder.is_dir():
        return
    names = [p.name for p in folder.iterdir() if p.name != LOCK_NAME]
    if names and not any(fnmatch.fnmatch(name, pattern) for name in names for pattern in own):
        shown = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
        raise OutputError(f"{option} {folder}: holds files ({shown}) and is not a folder {made_by} made (none of "
                          f"{', '.join(own)} in it); choose a new or empty folder")


def claim_file(path: str | Path, option: str, is_own: Callable[[Path], bool], kind: str) -> None:
    """OutputError unless the file `path`, which a command is to write, is missing or of the `kind` it writes
    (`is_own`): a user's text, data or other file is never replaced by a checkpoint or a model."""
    file = Path(path)
    if file.is_file() and not is_own(file):
        raise OutputError(f"{option} {file}: exists and is not {kind}, which writing it would replace; choose another "
                          f"{option} (or delete the file first)")
