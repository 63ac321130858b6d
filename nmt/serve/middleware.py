"""The gate every HTTP request passes, between uvicorn and the application: its body is bounded before it is
buffered, a failure the application lets escape is still a JSON answer and one log line (never a
traceback), and its outcome is recorded (the Prometheus `Metrics` served at /metrics, the access log, the
counts of the shutdown summary).

A pure ASGI layer: Starlette's BaseHTTPMiddleware would stand between the endpoint and the client's
disconnect message, and Starlette's own body limit answers in plain text and keeps reading the body.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.exceptions import HTTPException

from nmt.config.flags import as_flags
from nmt.core.errors import ref
from nmt.serve.http_errors import ClientGone, RequestError, TooLarge, error_response
from nmt.serve.service import LINES_KEY

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

RECORD_KEY = "nmt.record"  # the ASGI scope entry of the request's RequestRecord


@dataclass(eq=False)
class RequestRecord:
    """One HTTP request as the gate saw it."""

    method: str
    path: str
    client: str
    started: float = field(default_factory=time.time)  # wall clock, for the access log
    clock: float = field(default_factory=time.monotonic)
    status: int = 0  # of the answer started; 0: none
    answered: bool = False  # the whole answer was handed to the server
    gone: bool = False  # the client left before its answer (or was cut off at the end of the drain)
    lines: int = 0
    seconds: float = 0.0

    @property
    def outcome(self) -> str:
        """served (2xx/3xx), failed (an error answer) or dropped (no answer reached the client)."""
        if self.gone or not self.answered or self.status == ClientGone.status:
            return "dropped"
        return "served" if self.status < 400 else "failed"


def access_line(r: RequestRecord) -> str:
    """time client method path status lines seconds (status 499: the client left before its answer)."""
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(r.started)) + f".{int(r.started % 1 * 1000):03d}"
    when += time.strftime("%z", time.localtime(r.started))
    status = ClientGone.status if r.outcome == "dropped" else r.status
    return f"{when} {r.client} {r.method} {r.path} {status} {r.lines} {r.seconds:.3f}"


class Gate:
    """Pure ASGI middleware around the application (see the module doc).

    `body_limit`: bytes a request body may hold (413 beyond, from Content-Length before anything is read,
    else as soon as the streamed bytes pass it; the connection is then closed, the rest never read).
    `body_timeout`: seconds a client may take to send its whole body, from the request's start (408 after: a bound
    on the gap between two pieces alone lets a client that sends a byte a second hold its connection for ever).
    `on_done(record)` is called once per request; `on_error(line)` gets one line per failure the application let
    escape. `wrap`: an ASGI
    layer between the recording and the rest (CORS), so that what it answers itself (a preflight) is recorded
    and its headers reach every answer, the gate's own refusals included."""

    def __init__(self, app: ASGIApp, body_limit: int, body_timeout: float,
                 on_done: Callable[[RequestRecord], None] = lambda r: None,
                 on_error: Callable[[str], None] = lambda line: None,
                 wrap: Callable[[ASGIApp], ASGIApp] = lambda app: app):
        self.app, self.body_limit, self.body_timeout = app, body_limit, body_timeout
        self.on_done, self.on_error = on_done, on_error
        self.wrapped = wrap(self._gated)
        self.in_flight: set[RequestRecord] = set()
        self.counts = {"served": 0, "failed": 0, "dropped": 0}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan
            return await self.app(scope, receive, send)
        client = scope.get("client") or ("-", 0)
        record = RequestRecord(scope["method"], (scope.get("raw_path") or scope["path"].encode()).decode("latin-1"),
                               f"{client[0]}:{client[1]}")
        scope[RECORD_KEY] = record
        self.in_flight.add(record)

        async def recorded_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                record.answered = True
            await send(message)

        try:
            await self.wrapped(scope, receive, recorded_send)
        finally:
            self.in_flight.discard(record)
            record.lines = scope.get(LINES_KEY, 0)
            record.seconds = time.monotonic() - record.clock
            self.counts[record.outcome] += 1
            self.on_done(record)

    def cut(self, scope: Scope) -> None:
        """The request of `scope` is cut off (its connection aborted at the end of the drain): dropped, even if
        it was counted as answered (its answer still sat in our buffer, unread by the client)."""
        record = scope.get(RECORD_KEY)
        if record is None or record.gone:
            return
        if record not in self.in_flight:  # counted already
            self.counts[record.outcome] -= 1
            self.counts["dropped"] += 1
        record.gone = True

    async def _gated(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._handle(scope, receive, send, scope[RECORD_KEY])

    async def _handle(self, scope: Scope, receive: Receive, send: Send, record: RequestRecord) -> None:
        received = 0
        deadline = record.clock + self.body_timeout  # the whole body by then, however it trickles in
        length, chunked = body_headers(scope)
        body_done = not (length or chunked)
        if length is not None and length > self.body_limit:
            return await self._refuse(scope, receive, send, record, TooLarge(self._too_large(length)))

        async def bounded_receive() -> Message:
            nonlocal received, body_done
            if body_done:
                message = await receive()
            else:
                try:
                    message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0.0))
                except asyncio.TimeoutError:
                    raise BodyProblem(408, as_flags(f"the body did not arrive within {self.body_timeout:g}s "
                                                      f"({ref('timeout')})")) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.body_limit:
                    raise BodyProblem(413, self._too_large(received, streamed=True))
                body_done = not message.get("more_body", False)
            elif message["type"] == "http.disconnect" and not record.answered:
                record.gone = True
            return message

        async def recorded_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                if record.status in (408, 413) or not body_done:
                    # the rest of the body is never read: close the connection rather than drain it
                    message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                record.answered = True
            await send(message)

        try:
            await self.app(scope, bounded_receive, recorded_send)
        except Exception as e:  # already answered in JSON by the application's handler (if it could)
            if record.gone or is_disconnect(e):
                record.gone = True
            elif not isinstance(e, RequestError):
                first = str(e).splitlines()[0] if str(e) else ""
                self.on_error(f"{record.method} {record.path}: {type(e).__name__}" + (f": {first}" if first else ""))
            if record.status == 0 and not record.gone:
                await self._refuse(scope, receive, send, record, e if isinstance(e, RequestError) else
                                   RequestError(f"internal error: {type(e).__name__}"))

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, record: RequestRecord,
                      e: RequestError) -> None:
        """Answer `e` in JSON from here, closing the connection (the body, if any, stays unread)."""
        response = error_response(e.status, e.message, {**e.headers, "Connection": "close"})
        record.status = e.status

        async def recorded_send(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                record.answered = True
            await send(message)

        await response(scope, receive, recorded_send)

    def _too_large(self, size: int, streamed: bool = False) -> str:
        what = f"more than {self.body_limit:,} bytes arrived" if streamed else f"the body has {size:,} bytes"
        return as_flags(f"{what}; at most {self.body_limit:,} ({ref('max_body_bytes')}, by default room for "
                        f"{ref('max_lines')} lines of {ref('max_chars')} characters)")


class BodyProblem(HTTPException):
    """A body too large or too slow, raised from inside `receive`: an HTTPException, since FastAPI lets those
    through while it reads a body (and the application's handler answers them in JSON)."""


def body_headers(scope: Scope) -> tuple[Optional[int], bool]:
    """(Content-Length or None, whether the body is chunked)."""
    length, chunked = None, False
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            with contextlib.suppress(ValueError):
                length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
    return length, chunked


def is_disconnect(e: BaseException) -> bool:
    """Starlette's ClientDisconnect (raised when the client leaves while its body is read)."""
    return type(e).__name__ == "ClientDisconnect" or isinstance(e, ClientGone)


# -- the server's Prometheus metrics (served at /metrics) -------------------------------------------

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """Requests by endpoint and status, their latency, the batches and the queue, in one registry."""

    def __init__(self, paths: Collection[str], translating: Collection[str] = ()):
        self.paths = frozenset(paths)  # a series per known path, not one per path a scanner tries
        self.translating = frozenset(translating)  # the routes whose latency is measured (`service.translating`)
        self.registry = CollectorRegistry()
        self.requests = Counter("nmt_requests", "HTTP requests by endpoint and status", ["endpoint", "status"],
                                registry=self.registry)
        self.latency = Histogram("nmt_request_seconds", "Request latency", ["endpoint"], registry=self.registry,
                                 buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.batch_lines = Histogram("nmt_batch_sentences", "Lines per translated batch", registry=self.registry,
                                     buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
        self.sentences = Counter("nmt_translated_sentences", "Lines translated", registry=self.registry)
        self.busy = Counter("nmt_model_seconds", "Seconds the model spent translating", registry=self.registry)
        self.queued = Gauge("nmt_queue_sentences", "Lines waiting", registry=self.registry)

    def watch_queue(self, lines: Callable[[], float]) -> None:
        self.queued.set_function(lines)

    def on_batch(self, lines: int, seconds: float) -> None:
        """Called by the worker thread after each batch."""
        self.batch_lines.observe(lines)
        self.sentences.inc(lines)
        self.busy.inc(seconds)

    def on_request(self, path: str, status: int, seconds: float) -> None:
        if path in self.translating:
            self.latency.labels(path).observe(seconds)
        if path in self.paths:
            self.requests.labels(path, str(status)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
