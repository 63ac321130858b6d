"""The user's cache: what nmt computes once per machine and reuses (CTranslate2 conversions of checkpoints,
the timings that choose `--precision auto`). Everything in it can be deleted; nmt makes it again."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Callable, Optional

from nmt.core.errors import OutputError, os_error_message

try:
    import fcntl
except ImportError:  # Windows: no locks (concurrent first uses then both compute; the renames stay atomic)
    fcntl = None  # type: ignore[assignment]

ENV = "NMT_CACHE_DIR"


def cache_dir() -> Path:
    """$NMT_CACHE_DIR, else $XDG_CACHE_HOME/nmt, else ~/.cache/nmt (not created here)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "nmt"


def cache_folder(name: str) -> Path:
    """The cache's sub-folder `name`, created; an OutputError naming it and NMT_CACHE_DIR when it cannot be."""
    folder = cache_dir() / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{os_error_message(e, folder, 'cannot create the cache folder')}; set {ENV} to a "
                          "writable folder") from None
    return folder


@contextlib.contextmanager
def locked(path: Path, waiting: Optional[Callable[[Optional[int]], None]] = None) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` (created if missing), waiting for another process that holds it:
    the second of two processes that compute the same entry at once waits, then finds it made.

    The holder writes its pid into the file; `waiting(pid)` (None when unknown) is called at once when the lock
    is held by another process, before waiting for it, so that the wait can be said."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise OutputError(f"{os_error_message(e, path, 'cannot create the lock file')}; set {ENV} to a "
                          "writable folder") from None
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if waiting is not None:
                    waiting(holder(fd))
                fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel when the process ends, however it ends
            with contextlib.suppress(OSError):  # the pid is for the message of a process that waits: not vital
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def holder(fd: int, patience: float = 0.5) -> Optional[int]:
    """The pid written in the lock file `fd` by the process that holds it; it writes it just after taking the
    lock, so an empty file is read again for up to `patience` seconds. None when there is none."""
    deadline = time.monotonic() + patience
    while True:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return int(text)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)
