"""The download cache, `OUT/.cache/`: verified copies of the dataset's files, so a re-run fetches nothing.

A file is fetched (HTTP or mirror folder) into `NAME.part`, checked against the registry's size
and checksums, and only then renamed to `NAME`; a cached copy that no longer verifies is fetched
again. With several mirrors, the file comes from the first that has it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from nmt.core.errors import DownloadError
from nmt.core.progress import ProgressFn, ignore
from nmt.download.events import Reporter, say
from nmt.download.fetch import NotFound, fetch_url
from nmt.download.mirror import Mirror, copy_file, locations
from nmt.download.spec import RemoteFile

CACHE = ".cache"


@dataclass
class FetchOptions:
    """Settings shared by every fetch of one `download` call."""

    mirrors: tuple[Mirror, ...]  # looked in, in order; none: each file's upstream URL
    retries: int
    timeout: float
    backoff: float
    progress: ProgressFn


@dataclass
class Fetched:
    """A verified file in the cache, and how it got there."""

    file: RemoteFile
    path: Path
    where: str
    sha256: str
    fetched: bool
    received: int


def file_digests(path: Path, progress: ProgressFn = ignore) -> tuple[str, str]:
    """(sha256, md5) hex digests of a file, in one pass, reporting bytes hashed."""
    sha, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    report = Reporter(progress, f"verify {path.name.removesuffix('.part')}", path.stat().st_size)
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
            md5.update(chunk)
            done += len(chunk)
            report(done)
    report(done, force=True)
    return sha.hexdigest(), md5.hexdigest()


def verify(file: RemoteFile, path: Path, where: str, progress: ProgressFn = ignore) -> str:
    """Check `path` against the file's known size and checksums; return its sha256.

    Raises DownloadError naming `where` (URL or mirror path) and the file on a mismatch.
    """
    def mismatch(what: str) -> DownloadError:
        return DownloadError(
            f"{where}: checksum mismatch for {file.name} ({what}); the bad copy was deleted, "
            "re-run to fetch it again, or check `mirror` if it persists"
        )

    size = path.stat().st_size
    if file.size is not None and size != file.size:
        raise mismatch(f"{size} bytes, expected {file.size}")
    sha256, md5 = file_digests(path, progress)
    if file.sha256 is not None and sha256 != file.sha256.lower():
        raise mismatch(f"sha256 {sha256}, expected {file.sha256}")
    if file.md5 is not None and md5 != file.md5.lower():
        raise mismatch(f"md5 {md5}, expected {file.md5}")
    return sha256


def _reuse_cached(file: RemoteFile, path: Path, where: str, opts: FetchOptions) -> str | None:
    """sha256 of an already cached file, or None (file deleted) when it no longer verifies."""
    try:
        return verify(file, path, where, opts.progress)
    except DownloadError:
        path.unlink(missing_ok=True)
        say(opts.progress, f"verify {file.name}", f"{path}: cached copy is corrupt; fetching it again")
        return None


def _transfer(file: RemoteFile, source: str | Path, part: Path, opts: FetchOptions) -> int:
    """Bring `file` from `source` (a URL, or a mirror folder's copy) into `part`; return the bytes received."""
    if isinstance(source, Path):
        return copy_file(source, part, opts.progress, bound=file.bound, size=file.size)
    return fetch_url(
        source, part, retries=opts.retries, timeout=opts.timeout, backoff=opts.backoff,
        progress=opts.progress, expected_size=file.size, limit=file.bound,
    )


def _transfer_from_first(file: RemoteFile, sources: tuple[str | Path, ...], part: Path,
                         opts: FetchOptions) -> tuple[str, int]:
    """Bring `file` from the first of `sources` that has it; return (where it came from, bytes received).

    One source: its own error. Several: a source without the file is skipped, and when none has it
    the error names every place looked in."""
    if len(sources) == 1:
        return str(sources[0]), _transfer(file, sources[0], part, opts)
    for source in sources:
        try:
            return str(source), _transfer(file, source, part, opts)
        except NotFound:
            continue
    raise DownloadError(
        f"{file.name}: not found in any `mirror` (looked for {', '.join(map(str, sources))}); one of them "
        "must hold the file under its upstream name"
    )


def obtain(file: RemoteFile, cache: Path, opts: FetchOptions) -> Fetched:
    """Ensure a verified copy of `file` at `cache/NAME`: reuse it, or fetch, verify and rename."""
    final = cache / file.name
    sources = locations(file, opts.mirrors)
    if final.is_file():
        where = str(sources[0] if len(sources) == 1 else final)  # of several mirrors, which one is not known
        sha = _reuse_cached(file, final, where, opts)
        if sha is not None:
            say(opts.progress, f"download {file.name}", f"{file.name}: already in {cache}")
            return Fetched(file, final, where, sha, fetched=False, received=0)
    part = cache / (file.name + ".part")
    where, received = _transfer_from_first(file, sources, part, opts)
    try:
        sha = verify(file, part, where, opts.progress)
    except DownloadError:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, final)
    return Fetched(file, final, where, sha, fetched=True, received=received)
