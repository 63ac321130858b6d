"""Where a file comes from: its upstream URL, or `--mirror` (a base URL, or a local folder).

A mirror holds each dataset file under its upstream name (the last part of its URL). `Mirror`
checks the option once, before anything is read or written, so that a malformed value is a
one-line error naming --mirror, not a traceback or a download from the wrong place. Several
mirrors are looked in, in order, for each file (`locations`): a dataset whose files upstream
keeps in several folders is served by a copy of each folder.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import requests

from nmt.core.errors import DownloadError, InputError
from nmt.core.progress import ProgressFn, ignore
from nmt.download.events import Reporter
from nmt.download.fetch import CHUNK, NotFound, too_big
from nmt.download.spec import RemoteFile


def _bad(mirror: str, why: str) -> InputError:
    return InputError(
        f"`mirror` {mirror!r}: {why}; give a folder holding the dataset's files under their upstream "
        "names, or an http(s) base URL such as https://example.org/data"
    )


def _check_url(mirror: str) -> str:
    """The base URL `mirror`, checked as requests would check it; InputError naming --mirror."""
    try:
        parts = urlsplit(mirror)
        parts.port  # noqa: B018  (reading it validates it: a port out of range or not a number raises)
    except ValueError as e:
        raise _bad(mirror, f"not a valid URL ({e})") from None
    if not parts.hostname:
        raise _bad(mirror, "the URL names no host")
    try:
        requests.Request("GET", mirror.rstrip("/") + "/x").prepare()
    except requests.RequestException as e:
        raise _bad(mirror, f"not a valid URL ({e})") from None
    return mirror.rstrip("/")


def _check_dir(mirror: str) -> Path:
    """The local folder `mirror` names (a path, or a file:// URL); InputError naming --mirror."""
    if not mirror.strip():
        raise _bad(mirror, "empty")
    path = Path(mirror)
    if mirror.lower().startswith("file:"):
        try:
            parts = urlsplit(mirror)
        except ValueError as e:
            raise _bad(mirror, f"not a valid URL ({e})") from None
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise _bad(mirror, "a file:// URL names a folder of this machine: file:///PATH")
        path = Path(parts.path)
    try:
        if path.is_dir():
            return path
    except (OSError, ValueError) as e:  # a NUL byte, a name too long ...
        raise _bad(mirror, f"cannot read it ({e})") from None
    raise _bad(mirror, "not a folder, nor an http(s) URL")


def is_url(location: str) -> bool:
    """True for an http(s) URL, well formed or not (file:// is a local folder)."""
    return re.match(r"https?:", location, re.IGNORECASE) is not None


@dataclass(frozen=True)
class Mirror:
    """A checked --mirror: a base URL (`url`) or a local folder (`folder`)."""

    text: str
    url: str | None = None
    folder: Path | None = None

    @classmethod
    def parse(cls, mirror: str) -> Mirror:
        """Check --mirror; InputError naming it when it is neither a valid http(s) URL nor a folder."""
        if is_url(mirror):
            return cls(mirror, url=_check_url(mirror))
        return cls(mirror, folder=_check_dir(mirror))


def parse_mirrors(mirror: str | Sequence[str] | None) -> tuple[Mirror, ...]:
    """Check every --mirror value (one, several in order of preference, or none) as `Mirror.parse` does."""
    if mirror is None:
        return ()
    return tuple(Mirror.parse(m) for m in ([mirror] if isinstance(mirror, str) else mirror))


def locations(file: RemoteFile, mirrors: tuple[Mirror, ...]) -> tuple[str | Path, ...]:
    """Where to look for `file`, in order: its URL without a mirror, else each mirror's copy."""
    return tuple(locate(file, m) for m in mirrors) if mirrors else (file.url,)


def locate(file: RemoteFile, mirror: Mirror | None) -> str | Path:
    """Where to get `file`: its URL, the mirror base URL + its name, or mirror folder / its name."""
    if mirror is None:
        return file.url
    if mirror.url is not None:
        return mirror.url + "/" + file.name
    assert mirror.folder is not None
    return mirror.folder / file.name


def copy_file(src: Path, part: Path, progress: ProgressFn = ignore, bound: int | None = None,
              size: int | None = None) -> int:
    """Copy a mirror file from disk into `part` (from scratch), reporting bytes; return its size.

    At most `bound` bytes: a longer file (or a device that never ends) is a DownloadError."""
    name = part.name.removesuffix(".part")
    try:
        total = src.stat().st_size
        if bound is not None and total > bound:
            raise too_big(str(src), name, bound, size, announced=total, local=True)
        report = Reporter(progress, f"copy {src.name}", total)
        done = 0
        part.parent.mkdir(parents=True, exist_ok=True)
        with open(src, "rb") as fin, open(part, "wb") as fout:
            while chunk := fin.read(CHUNK if bound is None else min(CHUNK, bound + 1 - done)):
                fout.write(chunk)
                done += len(chunk)
                report(done)
                if bound is not None and done > bound:
                    break
        if bound is not None and done > bound:
            part.unlink(missing_ok=True)
            raise too_big(str(src), name, bound, size, local=True)
        report(done, force=True)
        return done
    except FileNotFoundError:
        raise NotFound(
            f"{src}: not found in the `mirror` directory; it must hold the dataset's files "
            "under their upstream names"
        ) from None
    except (IsADirectoryError, PermissionError) as e:
        raise DownloadError(f"{src}: cannot read the mirror file ({e.strerror})") from None
