"""File helpers shared by every module: text that may be gzipped, and atomic writes."""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import IO, Iterator

from nmt.errors import BusyError, InputError, OutputError, os_error_message

try:
    import fcntl
except ImportError:  # Windows: folders are not locked
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".nmt.lock"


def resolve_text(path: str | Path) -> Path:
    """Return `path`, or `path.gz` when only the gzipped file exists."""
    path = Path(path)
    if path.is_file():
        return path
    gz = path.with_name(path.name + ".gz")
    if gz.is_file():
        return gz
    raise InputError(f"{path}: no such file (also looked for {gz.name}); check the path")


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a file for reading bytes, transparently gunzipping `*.gz`."""
    path = Path(path)
    return open_input(path, gzip.open if path.suffix == ".gz" else open)


def open_input(path: str | Path, opener=open) -> IO[bytes]:
    """Open a user's input file for reading bytes (as is: no gunzipping); InputError naming it if that fails."""
    try:
        return opener(path, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; check the path") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a text file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as e:
        raise InputError(os_error_message(e, path, "cannot open")) from None


def read_lines(path: str | Path) -> Iterator[str]:
    """Yield lines without their newline; invalid UTF-8 or gzip becomes an InputError naming the line.

    Lines are decoded one at a time so that an error names the line it is on.
    """
    lineno = 0
    try:
        with open_binary(path) as f:
            for lineno, raw in enumerate(f, 1):
                yield raw.decode("utf-8").rstrip("\n").rstrip("\r")
    except UnicodeDecodeError as e:
        raise InputError(
            f"{path}: line {lineno} is not valid UTF-8 ({e.reason} at byte {e.start + 1} of the line); "
            "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise InputError(f"{path}: cannot read ({e}); is the file complete?") from None


def current_umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def _writable_ancestor(path: Path, option: str) -> None:
    """OutputError unless the nearest existing ancestor of `path` is a folder this process may write to:
    the folders still missing below it can then be created."""
    ancestor = path.absolute()
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputError(f"{option} {path}: {ancestor} is a file, not a folder; choose another path")
    if not os.access(ancestor, os.W_OK | os.X_OK):  # also false on a read-only file system, even for root
        why = "is on a read-only file system" if _read_only(ancestor) else "is not writable"
        raise OutputError(f"{option} {path}: the folder {ancestor} {why}; choose another location")


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows)
        return False


def check_output_file(path: str | Path, option: str) -> None:
    """Fail now, before the expensive work, if the file `path` could not be written later: it is a
    folder, or its folder cannot be created or written to. (A full disk still shows only when writing.)"""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a folder; give a file name (e.g. {path / 'NAME'})")
    _writable_ancestor(path.parent, option)


def check_output_dir(path: str | Path, option: str) -> None:
    """Fail now, before the expensive work, if the folder `path` could not be created or written to."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path}: exists and is not a folder; choose another {option}")
    _writable_ancestor(path, option)


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """Write to a temporary file beside `path` and rename it over `path` only on success.

    A crash or exception leaves any earlier `path` untouched and no partial file under its name.
    An OSError (a folder in the way, no permission, a full or read-only disk) becomes an OutputError
    naming `path`: the body only writes to the file, so its OSErrors are write errors too.
    """
    path = Path(path)
    if path.is_dir():  # else the final rename fails with the temporary file's name in the message
        raise OutputError(f"{path}: is a folder; give a file name (e.g. {path / 'NAME'})")
    if path.exists() and not path.is_file():
        # A device or a FIFO (/dev/null, /dev/stdout, a named pipe): written in place, since renaming a
        # file over it would replace the device itself (as root, /dev/full would become a plain file).
        yield from _write_in_place(path, mode)
        return
    if path.is_symlink():  # replace the file the link names, not the link (/dev/stdout under `> FILE`)
        path = Path(os.path.realpath(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise OutputError(os_error_message(e, path, "cannot write")) from e
    try:
        with os.fdopen(fd, mode, **_text_options(mode)) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise OutputError(os_error_message(e, path, "cannot write")) from e
        raise


def _text_options(mode: str) -> dict:
    """open()'s keyword arguments for `mode`: text is UTF-8 whatever the locale."""
    return {} if "b" in mode else {"encoding": "utf-8"}


def _write_in_place(path: Path, mode: str) -> Iterator[IO]:
    """atomic_write's body for a path that is not a regular file; an OSError becomes an OutputError."""
    try:
        with open(path, mode, **_text_options(mode)) as f:
            yield f
    except OSError as e:
        raise OutputError(os_error_message(e, path, "cannot write")) from e


@contextlib.contextmanager
def folder_lock(folder: str | Path, option: str = "--out") -> Iterator[Path]:
    """Hold an exclusive lock on `folder` (created if missing) while the body runs.

    The lock is `fcntl.flock` on FOLDER/.nmt.lock, which holds the owner's pid for the error message.
    The kernel releases it when the process ends, however it ends (kill -9 included), so a stale lock
    file never blocks a rerun. A second process gets a BusyError at once instead of waiting.
    """
    folder = Path(folder)
    check_output_dir(folder, option)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise OutputError(os_error_message(e, folder, "cannot create the folder's lock file")) from e
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                raise BusyError(f"another nmt process (pid {owner}) is using {folder}; wait for it to finish, "
                                f"stop it, or choose another {option}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield folder
    finally:
        os.close(fd)  # releases the lock; the file stays, harmless, for the next run to reuse


def remove_stale_temporaries(folder: str | Path, patterns: tuple[str, ...] = (".*.tmp",)) -> list[Path]:
    """Delete the temporary files a killed run left in `folder` (call it while holding the folder's lock,
    so that no live process owns them). Returns what was removed."""
    removed = []
    for pattern in patterns:
        for path in Path(folder).glob(pattern):
            with contextlib.suppress(OSError):
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
                removed.append(path)
    return removed


def is_checkpoint_file(path: str | Path) -> bool:
    """Whether `path` looks like a torch checkpoint (a zip archive) rather than a BPE model (text).

    Here rather than in nmt.checkpoint so that asking does not import torch (about 230 MB)."""
    return Path(path).is_file() and zipfile.is_zipfile(path)
