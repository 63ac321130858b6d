"""File helpers shared by every module: text that may be gzipped (read and written), atomic writes, and
the rule that an output is never an input."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import stat
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator, Optional, Sequence

from nmt.errors import BusyError, InputError, OutputError, os_error_message

try:
    import fcntl
except ImportError:  # Windows: folders are not locked
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".nmt.lock"


GZIP_MAGIC = b"\x1f\x8b"  # the first bytes of gzip data; no UTF-8 text starts with them (0x8b is a continuation byte)
BOM = "\ufeff"  # a byte-order mark that Windows editors put before the first line: not content
READ_BLOCK = 1 << 16


def resolve_text(path: str | Path) -> Path:
    """The file a path prefix's name stands for: `path` or `path.gz`, whichever exists (both is an
    error: which one holds the text is not for nmt to guess)."""
    path = Path(path)
    gz = path.with_name(path.name + ".gz")
    plain_exists, gz_exists = path.is_file(), gz.is_file()
    if plain_exists and gz_exists:
        raise InputError(f"{path} and {gz.name} both exist; remove or rename the one that is not the text to read")
    if plain_exists or gz_exists:
        return path if plain_exists else gz
    raise InputError(f"{path}: no such file (nor {gz.name}); check the path")


def check_input_file(path: str | Path, option: str = "") -> Path:
    """`path`, if it names a file that can be read (a plain file, a named pipe, a device such as
    /dev/stdin); an InputError now otherwise. `x` never stands for `x.gz`: the message points to it."""
    path = Path(path)
    named = f"{option} {path}" if option else str(path)
    if path.is_dir():
        raise InputError(f"{named}: is a folder, expected a text file")
    if not path.exists():
        gz = path.with_name(path.name + ".gz")
        hint = f"; {gz.name} exists: give that name (nmt reads gzip text as it is)" if gz.is_file() else "; check the path"
        raise InputError(f"{named}: no such file{hint}")
    return path


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a text file for reading bytes, gunzipping gzip data (known by its first bytes, not its name)."""
    return gunzipped(open_input(path))


class _Gunzip(gzip.GzipFile):
    """A GzipFile over a file it closes with itself (GzipFile leaves a given file object open)."""

    def __init__(self, raw: IO[bytes]):
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def gunzipped(raw: IO[bytes]) -> IO[bytes]:
    """`raw` (a buffered byte stream), decompressed when it starts with gzip's magic bytes. Looks at the
    first bytes without consuming them, so a pipe works as well as a file."""
    peek = getattr(raw, "peek", None)
    head = peek(len(GZIP_MAGIC))[: len(GZIP_MAGIC)] if peek else b""
    return _Gunzip(raw) if head == GZIP_MAGIC else raw


def open_input(path: str | Path, opener=open) -> IO[bytes]:
    """Open a user's input file for reading bytes (as is: no gunzipping); InputError naming it if that fails."""
    try:
        return opener(path, "rb")
    except FileNotFoundError:
        gz = Path(path).with_name(Path(path).name + ".gz")
        hint = f"{gz.name} exists: give that name" if gz.is_file() else "check the path"
        raise InputError(f"{path}: no such file; {hint}") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a text file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as e:
        raise InputError(os_error_message(e, path, "cannot open")) from None


def read_lines(path: str | Path) -> Iterator[str]:
    """Yield the lines of a text file (plain or gzip) without their newline (LF or CRLF) and without a
    byte-order mark; invalid UTF-8 or gzip becomes an InputError naming the line.

    Lines are decoded one at a time so that an error names the line it is on.
    """
    with open_binary(path) as f:
        yield from stream_lines(f, str(path))


def stream_lines(f: IO[bytes], name: str) -> Iterator[str]:
    """`read_lines` of an open byte stream (already gunzipped), named `name` in errors."""
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
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError; damaged data a zlib.error
        raise InputError(f"{name}: cannot read ({e or type(e).__name__}); is the file complete?") from None


def byte_blocks(fd: int, name: str) -> Iterator[bytes]:
    """The bytes of file descriptor `fd` as they arrive (os.read returns as soon as some are there, so
    a pipe that delivers a line at a time is read a line at a time), gunzipped when they begin with
    gzip's magic bytes (any number of gzip members, as gzip writes them). Errors name `name`."""

    def read() -> bytes:
        try:
            return os.read(fd, READ_BLOCK)
        except OSError as e:  # e.g. stdin redirected from a folder (EISDIR)
            raise InputError(os_error_message(e, name, "cannot read the input")) from None

    head = read()
    while 0 < len(head) < len(GZIP_MAGIC):  # a pipe may deliver one byte first
        more = read()
        if not more:
            break
        head += more
    if not head.startswith(GZIP_MAGIC):
        block = head
        while block:
            yield block
            block = read()
        return
    yield from _inflate(head, read, name)


def count_lines(path: str | Path) -> int:
    """Lines of a text file (plain or gzip), as read_lines counts them, reading it block by block."""
    count, last = 0, b"\n"
    with open_input(path) as f:
        for block in byte_blocks(f.fileno(), str(path)):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _inflate(head: bytes, read: Callable[[], bytes], name: str) -> Iterator[bytes]:
    """The decompressed bytes of gzip data that begins with `head` and goes on with `read()`, in blocks
    of at most READ_BLOCK bytes (a small input may inflate hugely). Members follow one another as in
    `cat a.gz b.gz`; zero bytes that pad the end are skipped, as gzip does."""
    inflate, fed = zlib.decompressobj(wbits=31), False  # 31: gzip framing
    pending = head
    while True:
        if not pending:
            pending = read()
            if not pending:
                break
        if not fed:
            pending = pending.lstrip(b"\0")  # padding after a member
            if not pending:
                continue
        out, fed = _decompress(inflate, pending, name), True
        while out:
            yield out
            if len(out) < READ_BLOCK or inflate.eof or inflate.unconsumed_tail:
                break
            out = _decompress(inflate, b"", name)  # what the bound held back
        pending = inflate.unconsumed_tail
        if inflate.eof:  # one member done
            pending = inflate.unused_data + pending
            inflate, fed = zlib.decompressobj(wbits=31), False
    if fed:
        raise InputError(f"{name}: the gzip data ends early (the file is truncated); is the file complete?")


def _decompress(inflate, data: bytes, name: str) -> bytes:
    try:
        return inflate.decompress(data, READ_BLOCK)
    except zlib.error as e:
        raise InputError(f"{name}: not valid gzip data ({e}); is the file complete?") from None


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
        link = "" if _real(out.path) == _real(path) else " (the same file, through a link)"
        raise OutputError(f"{out.option} {out.path} is also {what} {option} {path}{link}: nmt would overwrite what it "
                          f"reads; choose another {out.option}")
    if out.folder and _owned_by(out, path, option):
        raise OutputError(f"{out.option} {out.path} holds {what} {option} {path}, which writing the folder would "
                          f"replace; choose another {out.option} (or move {path.name} out of it)")


def _owned_by(out: Output, path: Path, option: str) -> bool:
    """Whether `path` lies inside the folder `out` and is one of the paths the command writes there."""
    folder, inner = _real(out.path), _real(path)
    if folder == inner or folder not in inner.parents:
        return False
    return out.owns is None or out.owns(inner.relative_to(folder).as_posix(), option)


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether `a` and `b` are one file or folder: the same inode (links included), or, where one does not
    exist yet, the same resolved path. Devices and pipes (/dev/null in and out) are not files to lose."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return _real(Path(a)) == _real(Path(b))
    if not (stat.S_ISREG(sa.st_mode) or stat.S_ISDIR(sa.st_mode)):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _check_streams(outputs: Sequence[Output], inputs: Sequence[tuple[str, Path]], reads_stdin: bool) -> None:
    """stdout or stderr redirected to an input (`> INPUT` has emptied it before nmt started; `>> INPUT`
    would grow what is being read), or stdin read from an output."""
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        for option, path in inputs:
            if _fd_is(fd, path):
                raise OutputError(f"{stream} is redirected to the input {option} {path} (`> FILE` empties it before "
                                  f"nmt starts); send {stream} to another file")
    if reads_stdin:
        for out in outputs:
            if _fd_is(0, out.path):
                raise OutputError(f"stdin is read from {out.option} {out.path}, an output of the command; "
                                  f"choose another {out.option}")


def _fd_is(fd: int, path: Path) -> bool:
    """Whether file descriptor `fd` is open on the regular file `path`."""
    try:
        mine, theirs = os.fstat(fd), os.stat(path)
    except OSError:  # closed, or no such file
        return False
    return stat.S_ISREG(mine.st_mode) and (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


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
    Text (mode "w") to a name ending in .gz is gzip-compressed, as nmt reads it back.
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
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise OutputError(os_error_message(e, path, "cannot write")) from e
    try:
        with os.fdopen(fd, "wb" if _gzipped(name, mode) else mode, **_text_options(mode, name)) as raw:
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


def _gzipped(name: str, mode: str) -> bool:
    """Whether text written under `name` is compressed: text files named *.gz are gzip, as they are read."""
    return "b" not in mode and name.endswith(".gz")


def _text_options(mode: str, name: str = "") -> dict:
    """open()'s keyword arguments for `mode`: text is UTF-8 whatever the locale."""
    return {} if "b" in mode or _gzipped(name, mode) else {"encoding": "utf-8"}


@contextlib.contextmanager
def _encoded(raw: IO, name: str, mode: str) -> Iterator[IO]:
    """`raw` itself, or (text to a .gz name) a UTF-8 text stream that gzips into it; closing it writes
    gzip's trailer and leaves `raw` open."""
    if not _gzipped(name, mode):
        yield raw
        return
    # No file name or time in the header: the same text always gives the same bytes.
    packed = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)  # as `gzip -n` writes it
    with io.TextIOWrapper(packed, encoding="utf-8") as text:  # closes `packed`, not `raw`
        yield text


def _write_in_place(path: Path, mode: str) -> Iterator[IO]:
    """atomic_write's body for a path that is not a regular file; an OSError becomes an OutputError."""
    try:
        with open(path, "wb" if _gzipped(path.name, mode) else mode, **_text_options(mode, path.name)) as raw:
            with _encoded(raw, path.name, mode) as f:
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
