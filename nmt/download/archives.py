"""Safe extraction of tar archives (gzipped or not): tarfile's "data" filter on every member."""

from __future__ import annotations

import gzip
import os
import tarfile
import zlib
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from nmt.core.errors import DownloadError


def member_name(name: str) -> str:
    """Normalise an archive member name ("./a//b" -> "a/b")."""
    return str(PurePosixPath(name))


def _unsafe(archive: Path, name: str, reason: str) -> DownloadError:
    """The error for an archive with an unsafe member."""
    return DownloadError(
        f"{archive}: unsafe archive member {name!r} ({reason}); refusing to extract it: the "
        "archive is corrupt or malicious, delete it and check the source or `mirror`"
    )


def _data_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """tarfile's "data" filter, except that an absolute name is refused, not made relative."""
    # No archive we expect holds absolute names: one that does is not the file we asked for.
    if member.name.startswith(("/", os.sep)):
        raise tarfile.AbsolutePathError(member)
    return tarfile.data_filter(member, dest)


def safe_extract(archive: Path, dest: Path, members: Iterable[str] | None = None) -> dict[str, Path]:
    """Extract `members` (all when None) of a tar archive into `dest`; return name -> path.

    Every member, wanted or not, goes through tarfile's "data" filter: a path leading out of
    `dest` or absolute, a link out of it, a device file makes the whole archive rejected with
    a DownloadError naming the member. One streaming pass.
    """
    if not hasattr(tarfile, "data_filter"):  # Python before 3.9.17 / 3.10.12 / 3.11.4
        raise DownloadError(
            f"{archive}: this Python's tarfile cannot filter what it extracts; upgrade Python "
            "to extract archives safely"
        )
    wanted = None if members is None else {member_name(m) for m in members}
    found: dict[str, Path] = {}

    def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        member = _data_filter(member, path)
        name = member_name(member.name)
        if wanted is not None and name not in wanted:
            return None  # checked, not extracted
        if member.isfile():
            found[name] = dest / name
        return member

    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r|*") as tar:
            tar.extractall(dest, filter=keep)
    except tarfile.FilterError as e:
        raise _unsafe(archive, e.tarinfo.name, str(e)) from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise DownloadError(
            f"{archive}: not a readable tar archive ({e}); delete it and re-run to fetch it again"
        ) from None
    missing = sorted((wanted or set()) - set(found))
    if missing:
        raise DownloadError(
            f"{archive}: member(s) {', '.join(missing)} not found; this is not the expected "
            "archive, delete it and re-run (or check `mirror`)"
        )
    return found
