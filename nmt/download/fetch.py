"""Fetching one file over HTTP: one retry policy, resume with Range, stall detection, a size bound.

The file streams into `NAME.part`. One urllib3 `Retry` (exponential backoff, Retry-After) decides
every retry: requests' HTTPAdapter applies it to each request (refused connections, timeouts,
RETRY_STATUS answers), and `fetch_url` to each body cut short or stalled, which is then resumed
with an HTTP Range request from what `.part` holds. A download never grows past the file's known
size (or its limit when the size is unknown): a server that sends more is stopped, its bytes are
deleted, and the error says so. Verifying and renaming `.part` is the caller's (`nmt.download.store`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from nmt import __version__
from nmt.core.errors import DownloadError
from nmt.core.progress import ProgressFn, ignore
from nmt.download.events import Reporter, say
from nmt.download.spec import DEFAULT_LIMIT

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self needs Python 3.11; read by type checkers only

CHUNK = 1 << 18  # bytes read per network or disk chunk
CONNECT_TIMEOUT = 10.0  # seconds to open a connection (the read timeout is --timeout)
MIN_BYTES_PER_WINDOW = 1024  # a transfer that delivers less than this in --timeout seconds has stalled
# Statuses the policy retries (with connection errors and timeouts): transient by definition.
RETRY_STATUS = frozenset({408, 425, 429, *range(500, 600)})
# What a dropped or stalled connection raises while the body streams.
_STREAM_ERRORS = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)

OnRetry = Callable[[str, float, int], None]  # (cause, seconds to wait, attempt number)


class NotFound(DownloadError):
    """The file is not where it was looked for (HTTP 404 or 410, or missing from a mirror folder): another
    `--mirror` may have it."""


class Retryable(Exception):
    """The body stopped short (or the resume went wrong): resume from what `.part` holds."""


class Stalled(Retryable):
    """The server sent too little for too long (see StallWatch)."""


class _RetriesSpent(Exception):
    """urllib3 retried a request as often as allowed and it still failed."""


class BodyCutShort(urllib3.exceptions.ProtocolError):
    """A body that stopped short, as the retry policy counts it: a read error of an idempotent GET."""


def size_of(path: Path) -> int:
    """Size of `path` in bytes, 0 when it does not exist."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def short(err: BaseException | None) -> str:
    """A short one-line description of a network exception ("[Errno 111] Connection refused")."""
    text = " ".join(str(err).split())
    os_error = re.search(r"\[Errno -?\d+\] [^'\")(]*[^'\")( ]", text)
    if os_error:
        return os_error.group(0)
    # requests wraps urllib3's MaxRetryError, whose `reason` is the last failure
    first = err.args[0] if err is not None and err.args else None
    reason = first.reason if isinstance(first, urllib3.exceptions.MaxRetryError) else err
    if isinstance(reason, (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)):
        return "timed out"
    return f"{type(err).__name__}: {text}"[:160] if text else type(err).__name__


class RetryPolicy(Retry):
    """urllib3's Retry that also tells `on_retry` about every retry it grants."""

    def __init__(self, *args: Any, on_retry: OnRetry | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_retry = on_retry

    def new(self, **kwargs: Any) -> Self:
        # urllib3 copies the Retry through new() at every attempt: keep the callback
        return super().new(on_retry=self.on_retry, **kwargs)

    def increment(self, *args: Any, **kwargs: Any) -> Self:
        retry = super().increment(*args, **kwargs)  # raises MaxRetryError once spent
        last, response = retry.history[-1], kwargs.get("response")
        if isinstance(last.error, BodyCutShort):
            cause = str(last.error)
        else:
            cause = f"HTTP {last.status}" if last.status else short(last.error)
        wait = (retry.get_retry_after(response) if response else None) or retry.get_backoff_time()
        if self.on_retry is not None:
            self.on_retry(cause, wait, len(retry.history))
        return retry


def retry_policy(retries: int, backoff: float, on_retry: OnRetry) -> RetryPolicy:
    """`retries` retries: at once, then after `backoff * 2**(k-1)` seconds, or as long as a
    Retry-After header asks. Connection errors, timeouts, RETRY_STATUS and bodies cut short."""
    return RetryPolicy(
        total=retries, backoff_factor=backoff, status_forcelist=RETRY_STATUS,
        raise_on_status=False, on_retry=on_retry,  # the last answer tells what went wrong
    )


def _session(policy: RetryPolicy) -> requests.Session:
    """An HTTP session with our User-Agent whose requests follow `policy`."""
    session = requests.Session()
    session.headers["User-Agent"] = f"nmt/{__version__} (python-requests)"
    session.headers["Accept-Encoding"] = "identity"  # the bytes as stored: no transparent gunzip
    for scheme in ("http://", "https://"):
        session.mount(scheme, HTTPAdapter(max_retries=policy))
    return session


def _content_range(resp: requests.Response) -> tuple[int | None, int | None]:
    """(first byte, total size) from a Content-Range header; None for what is missing."""
    m = re.match(r"bytes\s+(\d+|\*)(?:-\d+)?/(\d+|\*)", resp.headers.get("Content-Range", ""))
    if not m:
        return None, None
    start = None if m.group(1) == "*" else int(m.group(1))
    total = None if m.group(2) == "*" else int(m.group(2))
    return start, total


def _open_response(session: requests.Session, url: str, offset: int, timeout: float) -> requests.Response:
    """GET `url` streamed, asking for bytes from `offset` on (the policy retries what is transient)."""
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        return session.get(url, headers=headers, stream=True, timeout=(min(CONNECT_TIMEOUT, timeout), timeout))
    except (requests.ConnectionError, requests.Timeout) as e:
        raise _RetriesSpent(short(e)) from None
    except requests.RequestException as e:  # invalid URL, too many redirects ...
        raise DownloadError(f"{url}: cannot download ({short(e)}); check the URL or `mirror`") from None


def _check_status(resp: requests.Response, url: str, part: Path, offset: int) -> tuple[int, int | None]:
    """Where the body goes: (byte offset to write at, total size or None); raise on errors.

    A 416 answer to a resume of a complete `.part` returns (offset, offset): nothing to read.
    """
    code = resp.status_code
    if code == 416 and offset:
        if _content_range(resp)[1] == offset:
            return offset, offset
        part.unlink(missing_ok=True)
        raise Retryable(f"server refused to resume at byte {offset}; restarting from zero")
    if code in RETRY_STATUS:  # urllib3 hands the last answer back once its retries are spent
        raise _RetriesSpent(f"HTTP {code} {resp.reason}")
    if code >= 400:
        raise (NotFound if code in (404, 410) else DownloadError)(
            f"{url}: HTTP {code} {resp.reason} for {part.name.removesuffix('.part')}; "
            "check the URL (or `mirror`): the file is not available there"
        )
    length = resp.raw.length_remaining  # urllib3's Content-Length: None when absent or malformed
    if code != 206:
        return 0, length  # 200: the whole file, whether or not a range was asked for
    start, total = _content_range(resp)
    if start != offset:
        part.unlink(missing_ok=True)
        raise Retryable(f"server resumed at byte {start}, not {offset}; restarting from zero")
    if total is None and length is not None:
        total = offset + length
    return offset, total


def too_big(
    where: str, name: str, bound: int, size: int | None, announced: int | None = None, local: bool = False,
) -> DownloadError:
    """The error for a source (a URL, or a `local` mirror file) that holds more than `bound` bytes of file
    `name` (`size`, when known, is its registered size)."""
    expected = f"{name} is {size:,} bytes" if size is not None else f"{name} may be at most {bound:,} bytes"
    if local:
        found = f"the mirror's copy is {announced:,}" if announced is not None else "the mirror's copy is longer"
        fix = "check `mirror`: it holds another file under that name"
    else:
        found = f"it announces {announced:,}" if announced is not None else "it sent more"
        fix = "check the URL or `mirror`: it serves another file"
    return DownloadError(f"{where}: too much data ({expected}, {found}); stopped and deleted the partial file; {fix}")


class StallWatch:
    """Notices a server that keeps the connection alive but sends (almost) nothing: each socket read
    returns within the read timeout, yet the file never arrives. At least MIN_BYTES_PER_WINDOW bytes
    must come in every `seconds`, else the attempt is a retryable failure (resumed from what arrived)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.window_start = time.monotonic()
        self.window_bytes = 0

    def check(self, received: int, done: int) -> None:
        self.window_bytes += received
        now = time.monotonic()
        if now - self.window_start < self.seconds:
            return
        if self.window_bytes < MIN_BYTES_PER_WINDOW:
            raise Stalled(f"stalled: {self.window_bytes} bytes in {now - self.window_start:.1f}s after {done} bytes")
        self.window_start, self.window_bytes = now, 0


def _read(resp: requests.Response, size: int) -> bytes:
    """Up to `size` bytes of the raw body (nothing decoded: Accept-Encoding is identity) as they arrive:
    read1 returns after one socket read, where read(n) would wait for n bytes and hide a slow drip
    from the stall watch."""
    raw = resp.raw
    if hasattr(raw, "read1"):
        return bytes(raw.read1(size, decode_content=False))
    return bytes(raw.read(size, decode_content=False))  # urllib3 < 2


def _stream_body(
    resp: requests.Response, url: str, part: Path, start: int, total: int | None, progress: ProgressFn,
    stall_seconds: float, size: int | None, bound: int,
) -> int:
    """Write the response body to `part` from byte `start`, at most `bound` bytes in all; a short or
    stalled body is a retryable failure, a long one a DownloadError (and `part` is deleted)."""
    name = part.name.removesuffix(".part")
    report = Reporter(progress, f"download {name}", total)
    done = start
    report(done, force=True)
    watch = StallWatch(stall_seconds)
    with open(part, "ab" if start else "wb") as f:
        try:
            while done <= bound and (chunk := _read(resp, min(CHUNK, bound + 1 - done))):
                f.write(chunk)
                done += len(chunk)
                report(done)
                watch.check(len(chunk), done)
        except _STREAM_ERRORS as e:
            raise Retryable(f"connection lost after {done} bytes ({short(e)})") from None
    if done > bound:  # one byte over is enough to know: the rest is not read
        part.unlink(missing_ok=True)
        raise too_big(url, name, bound, size)
    report(done, force=True)
    if total is not None and done != total:
        raise Retryable(f"connection closed after {done} of {total} bytes")
    return done - start


def _fetch_once(
    session: requests.Session, url: str, part: Path, timeout: float, progress: ProgressFn,
    size: int | None, bound: int,
) -> int:
    """One attempt: append what the server sends to `part`. Returns bytes received."""
    offset = size_of(part)
    if offset > bound:  # an earlier run's: no resume can make it right
        part.unlink()
        offset = 0
    if size is not None and offset == size and offset:
        return 0  # complete from an earlier run; verification follows
    name = part.name.removesuffix(".part")
    with _open_response(session, url, offset, timeout) as resp:
        start, total = _check_status(resp, url, part, offset)
        if total is not None and total > bound:
            part.unlink(missing_ok=True)
            raise too_big(url, name, bound, size, announced=total)
        if total is not None and start == total:
            return 0
        if offset and start == 0:
            say(progress, f"download {name}", f"{url}: server ignored the resume request; restarting from zero")
        elif offset:
            say(progress, f"download {name}", f"{url}: resuming at byte {offset}")
        return _stream_body(resp, url, part, start, total, progress, timeout, size, bound)


def _gave_up(url: str, part: Path, error: str, attempts: int) -> DownloadError:
    """The error once retrying is over; it says how to resume."""
    kept = size_of(part)
    again = f"resume ({kept:,} bytes kept in {part})" if kept else "try again"
    return DownloadError(
        f"{url}: download failed after {attempts} attempt(s) in a row ({error}); "
        f"check the network (or `mirror`) and re-run the same command to {again}"
    )


def fetch_url(
    url: str,
    part: Path,
    *,
    retries: int = 5,
    timeout: float = 30.0,
    backoff: float = 1.0,
    progress: ProgressFn = ignore,
    expected_size: int | None = None,
    limit: int = DEFAULT_LIMIT,
) -> int:
    """Download `url` into `part`, resuming from what `part` already holds; return bytes received.

    `retry_policy(retries, backoff)` retries each request, and resumes a body cut short up to
    `retries` times in a row without progress. Other 4xx fail at once. No more than
    `expected_size` bytes (`limit` when the size is unknown) are accepted. The caller verifies
    `part` and renames it.
    """
    part.parent.mkdir(parents=True, exist_ok=True)
    task = f"download {part.name.removesuffix('.part')}"
    bound = expected_size if expected_size is not None else limit

    def on_retry(cause: str, wait: float, attempt: int) -> None:
        say(progress, task, f"{url}: {cause}; retrying in {wait:.3g}s ({attempt}/{retries})")

    policy = retry_policy(retries, backoff, on_retry)
    bodies = policy  # counts the bodies cut short since the last one that brought bytes
    received, best = 0, size_of(part)
    # a session per file, so that the retries are reported with this file's URL
    with _session(policy) as session:
        while True:
            try:
                return received + _fetch_once(session, url, part, timeout, progress, expected_size, bound)
            except _RetriesSpent as e:
                raise _gave_up(url, part, str(e), retries + 1) from None
            except Retryable as e:
                size = size_of(part)
                received += max(0, size - best)
                if size > best and not isinstance(e, Stalled):
                    bodies = policy  # progress; the few bytes of a stalled (dripping) transfer are none
                best = max(best, size)
                try:
                    bodies = bodies.increment("GET", url, error=BodyCutShort(str(e)))
                except urllib3.exceptions.MaxRetryError:
                    raise _gave_up(url, part, str(e), len(bodies.history) + 1) from None
                bodies.sleep()
