"""File helpers shared by every module: text that may be compressed (read and written: nmt.core.compression),
atomic writes, and the rule that an output is never an input."""

from __future__ import annotations

import contextlib
import io
import lzma
import os
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Callable, Optional

from nmt.core.compression import BLOCK, CODECS, Codec, blocks, codec_of_name, compressing, decompressed, undecided
from nmt.core.errors import BusyError, InputError, OutputError, os_error_message, ref

try:
    import fcntl
except ImportError:  # Windows: folders are not locked
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".nmt.lock"


BOM = "\ufeff"  # a byte-order mark that Windows editors put before the first line: not content
READ_BLOCK = BLOCK


def resolve_text(path: str | Path) -> Path:
    """`path` where it exists (a file, a pipe or a device), else `path` with the suffix of a compression
    (.gz, .bz2, .xz) where exactly one such file exists. (The command line names files exactly:
    `check_input_file`; prefixes: `resolve_prefixed`.)"""
    path = Path(path)
    if path.exists() and not path.is_dir():
        return path
    return resolve_prefixed(path)


def resolve_prefixed(path: str | Path) -> Path:
    """The file that a path prefix and a language suffix (PREFIX.en) stand for: `path`, or `path` with a
    compression's suffix (.gz, .bz2, .xz), whichever exists (several is an error: which one holds the
    text is not for nmt to guess)."""
    path = Path(path)
    candidates = [path] + [path.with_name(path.name + c.suffix) for c in CODECS]
    found = [c for c in candidates if c.is_file()]
    if len(found) > 1:
        raise InputError(f"{' and '.join(str(f) for f in found)} both exist; remove or rename the one that is not "
                         "the text to read")
    if found:
        return found[0]
    raise InputError(f"{path}: no such file (nor {path.name}.gz, .bz2 or .xz); check the path")


def compressed_sibling(path: Path) -> Optional[Path]:
    """`path` with a compression's suffix, where that file exists (for the hint of a missing file)."""
    return next((s for s in (path.with_name(path.name + c.suffix) for c in CODECS) if s.is_file()), None)


def check_input_file(path: str | Path, option: str = "") -> Path:
    """`path`, if it names a file that can be read (a plain file, a named pipe, a device such as
    /dev/stdin); an InputError now otherwise. `x` never stands for `x.gz`: the message points to it."""
    path = Path(path)
    named = f"{option} {path}" if option else str(path)
    if path.is_dir():
        raise InputError(f"{named}: is a folder, expected a text file")
    if not path.exists():
        sibling = compressed_sibling(path)
        hint = (f"; {sibling.name} exists: give that name (nmt reads compressed text as it is)" if sibling
                else "; check the path")
        raise InputError(f"{named}: no such file{hint}")
    return path


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a text file for reading bytes, decompressed where it is gzip, bzip2 or xz (known by its first
    bytes, not its name)."""
    return decompressed(open_input(path), str(path))


def open_input(path: str | Path, opener: Callable[[str | Path, str], IO[bytes]] = open) -> IO[bytes]:
    """Open a user's input file for reading bytes (as is: no decompression); InputError naming it if that fails."""
    try:
        return opener(path, "rb")
    except FileNotFoundError:
        sibling = compressed_sibling(Path(path))
        hint = f"{sibling.name} exists: give that name" if sibling else "check the path"
        raise InputError(f"{path}: no such file; {hint}") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a text file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as e:
        raise InputError(os_error_message(e, path, "cannot open")) from None


def read_lines(path: str | Path) -> Iterator[str]:
    """Yield the lines of a text file (plain or compressed) without their newline (LF or CRLF) and without
    a byte-order mark; invalid UTF-8 or damaged compressed data becomes an InputError naming the line.

    Lines are decoded one at a time so that an error names the line it is on.
    """
    with open_binary(path) as f:
        yield from stream_lines(f, str(path))


def stream_lines(f: IO[bytes], name: str) -> Iterator[str]:
    """`read_lines` of an open byte stream (already decompressed), named `name` in errors."""
    lineno = 0
    try:
        for lineno, raw in enumerate(f, 1):
            line = raw.decode("utf-8").rstrip("\n").rstrip("\r")
            yield line[1:] if lineno == 1 and line.startswith(BOM) else line
    except UnicodeDecodeError as e:
        raise InputError(
            f"{name}: line {lineno} is not valid UTF-8 ({e.reason} at byte {e.start + 1} of the line); "
            "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as e:  # gzip.BadGzipFile is an OSError
        raise InputError(f"{name}: cannot read ({e or type(e).__name__}); is the file complete?") from None


def byte_blocks(fd: int, name: str) -> Iterator[bytes]:
    """The bytes of file descriptor `fd` as they arrive (os.read returns as soon as some are there, so
    a pipe that delivers a line at a time is read a line at a time), decompressed when they begin with
    a compression's signature (`nmt.core.compression.blocks`). Errors name `name`."""

    def read() -> bytes:
        try:
            return os.read(fd, READ_BLOCK)
        except OSError as e:  # e.g. stdin redirected from a folder (EISDIR)
            raise InputError(os_error_message(e, name, "cannot read the input")) from None

    head = read()
    while head and undecided(head):  # the first bytes of a compressed pipe may come one by one
        more = read()
        if not more:
            break
        head += more
    yield from blocks(head, read, name)


def count_lines(path: str | Path) -> int:
    """Lines of a text file (plain or compressed), as read_lines counts them, reading it block by block."""
    count, last = 0, b"\n"
    with open_input(path) as f:
        for block in byte_blocks(f.fileno(), str(path)):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether `a` and `b` are one file or folder: the same inode (links included), or, where one does not
    exist yet, the same resolved path. Devices and pipes (/dev/null in and out) are not files to lose."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return real_path(Path(a)) == real_path(Path(b))
    if not (stat.S_ISREG(sa.st_mode) or stat.S_ISDIR(sa.st_mode)):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def real_path(path: Path) -> Path:
    return Path(os.path.realpath(path))


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


def check_output_file(path: str | Path, option: str, text: bool = False) -> None:
    """Fail now, before the expensive work, if the file `path` could not be written later: it is a
    folder, its folder cannot be created or written to, or (`text`) its name asks for a compression nmt
    does not write. (A full disk still shows only when writing.)"""
    path = Path(path)
    if text:
        codec_of_name(path.name, option)
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
def atomic_write(path: str | Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """Write to a temporary file beside `path` and rename it over `path` only on success.

    A crash or exception leaves any earlier `path` untouched and no partial file under its name.
    An OSError (a folder in the way, no permission, a full or read-only disk) becomes an OutputError
    naming `path`: the body only writes to the file, so its OSErrors are write errors too.
    Text (mode "w") to a name ending in .gz, .bz2 or .xz is compressed so, as nmt reads it back.
    """
    path = Path(path)
    if path.is_dir():  # else the final rename fails with the temporary file's name in the message
        raise OutputError(f"{path}: is a folder; give a file name (e.g. {path / 'NAME'})")
    if path.exists() and not path.is_file():
        # A device or a FIFO (/dev/null, /dev/stdout, a named pipe): written in place, since renaming a
        # file over it would replace the device itself (as root, /dev/full would become a plain file).
        yield from _write_in_place(path, mode)
        return
    name = path.name
    if path.is_symlink():  # replace the file the link names, not the link (/dev/stdout under `> FILE`)
        path = Path(os.path.realpath(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=owned_prefix(path.name), suffix=".tmp")
    except OSError as e:
        raise OutputError(os_error_message(e, path, "cannot write")) from e
    try:
        with os.fdopen(fd, "wb" if _compression(name, mode) else mode, **_text_options(mode, name)) as raw:
            with _encoded(raw, name, mode) as f:
                yield f
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise OutputError(os_error_message(e, path, "cannot write")) from e
        raise


def _compression(name: str, mode: str) -> Optional[Codec]:
    """How text (mode "w") written under `name` is compressed: by its suffix (.gz, .bz2, .xz), as it is read."""
    return None if "b" in mode else codec_of_name(name)


def _text_options(mode: str, name: str = "") -> dict[str, Any]:
    """open()'s keyword arguments for `mode`: text is UTF-8 whatever the locale."""
    return {} if "b" in mode or _compression(name, mode) else {"encoding": "utf-8"}


@contextlib.contextmanager
def _encoded(raw: IO[Any], name: str, mode: str) -> Iterator[IO[Any]]:
    """`raw` itself, or (text to a compressed name) a UTF-8 text stream that compresses into it; closing it
    writes the compression's trailer and leaves `raw` open."""
    codec = _compression(name, mode)
    if codec is None:
        yield raw
        return
    with compressing(raw, codec) as packed, io.TextIOWrapper(packed, encoding="utf-8") as text:
        yield text


def _write_in_place(path: Path, mode: str) -> Iterator[IO[Any]]:
    """atomic_write's body for a path that is not a regular file; an OSError becomes an OutputError."""
    try:
        with open(path, "wb" if _compression(path.name, mode) else mode, **_text_options(mode, path.name)) as raw, \
                _encoded(raw, path.name, mode) as f:
            yield f
    except OSError as e:
        raise OutputError(os_error_message(e, path, "cannot write")) from e


@contextlib.contextmanager
def folder_lock(folder: str | Path, option: str = ref("out")) -> Iterator[Path]:
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
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as e:  # a full disk (its pid is what a second process's message names)
            raise OutputError(f"{option} {os_error_message(e, folder / LOCK_NAME, 'cannot write')}") from e
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


def owned_prefix(name: str) -> str:
    """The prefix of a temporary file or staging folder for `name` made by this process: `.NAME.PID.` (mkstemp
    and mkdtemp add random letters), so that a later run can tell one whose writer died
    (`remove_dead_leftovers`)."""
    return f".{name}.{os.getpid()}."


def pid_alive(pid: int) -> bool:
    """Whether process `pid` may be running: False only when the system says there is no such process."""
    if os.name == "nt" or pid <= 0:  # Windows' os.kill would terminate it; 0 and negatives name groups
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # PermissionError: it exists, another user's; a number no pid can be
        return True
    return True


def remove_dead_leftovers(folder: str | Path, name: str, suffix: str = "") -> list[Path]:
    """Delete the temporary files and staging folders for `name` in `folder` (`.NAME.PID.RANDOM` + `suffix`, made
    with `owned_prefix`) whose writer is no longer running (killed, or the machine restarted); a live process's
    are kept. Returns what was removed."""
    pattern = re.compile(re.escape(f".{name}.") + r"(\d+)\.[a-z0-9_]+" + re.escape(suffix) + r"\Z")
    removed = []
    with contextlib.suppress(OSError):  # a folder that cannot be listed holds nothing to clean
        for path in Path(folder).iterdir():
            match = pattern.match(path.name)
            if match is None or pid_alive(int(match.group(1))):
                continue
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
                removed.append(path)
    return removed


def is_checkpoint_file(path: str | Path) -> bool:
    """Whether `path` looks like a torch checkpoint (a zip archive) rather than a BPE model (text).

    Here rather than in nmt.model.checkpoint so that asking does not import torch (about 230 MB)."""
    return Path(path).is_file() and zipfile.is_zipfile(path)
