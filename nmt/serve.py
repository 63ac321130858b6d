"""`nmt serve`: a checkpoint as an HTTP translation service, with dynamic batching.

Requests wait in one bounded queue. A worker thread takes the oldest, adds the queued requests that
share its search settings (in arrival order) until --max-batch-sentences, until no request has come for
--quiet-ms, or at the latest until --max-wait-ms have passed since the oldest arrived or the model became
free, whichever is later (so that under load the clients just answered can send their next line into the
coming batch instead of one of their own, while a lone request waits only --quiet-ms), and translates
their lines as one chunk: `Translator.translate_chunk`
sorts them by length and cuts model batches of --max-batch-tokens, so every line gets exactly what
`nmt translate` gives it. The event loop only validates, queues and awaits: it never runs the model.

The web stack (FastAPI on uvicorn, prometheus_client) is the optional extra `nmt-toolkit[serve]`.
"""


import asyncio
import collections
import dataclasses
import hashlib
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

import torch

from nmt.config import INT_MAX, MAX_BEAM, check_range
from nmt.errors import ConfigError, NmtError
from nmt.search import SearchConfig
from nmt.translate import Translation, Translator

EXTRA_HINT = 'pip install "nmt-toolkit[serve]"'


@dataclass
class ServeConfig:
    """Batching, limits and timeouts of the server."""

    max_batch_sentences: int = 128  # lines merged into one chunk (and per model batch)
    max_batch_tokens: int = 4096  # source tokens per model batch (padded)
    max_wait_ms: float = 50.0  # how long the oldest request waits at most for others to join its batch
    quiet_ms: float = 5.0  # ... but the batch goes as soon as no request has come for this long
    max_queue: int = 4096  # lines waiting at most; beyond, 503 with Retry-After
    max_lines: int = 256  # lines per request
    max_chars: int = 5000  # characters per line
    timeout: float = 60.0  # seconds a request may wait for its translations (504 after)

    def validate(self) -> "ServeConfig":
        for name in ("max_batch_sentences", "max_batch_tokens", "max_queue", "max_lines", "max_chars"):
            check_range("--" + name.replace("_", "-"), getattr(self, name), 1, INT_MAX)
        check_range("--max-wait-ms", self.max_wait_ms, 0.0, 60_000.0)
        check_range("--quiet-ms", self.quiet_ms, 0.0, 60_000.0)
        check_range("--timeout", self.timeout, 0.0, low_open=True)
        return self


class Overloaded(NmtError):
    """The queue is full: the client should retry later."""


class Cancelled(NmtError):
    """The request was withdrawn (timeout, client gone) before it was translated."""


# -- dynamic batching ------------------------------------------------------------------------------


@dataclass(eq=False)
class Job:
    """One request's lines, waiting for the worker; `future` lives on the event loop."""

    lines: list[str]
    search: SearchConfig
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    arrived: float = field(default_factory=time.monotonic)
    cancelled: bool = False

    def resolve(self, result: Any = None, error: Optional[BaseException] = None) -> None:
        """Hand the outcome to the event loop (thread-safe); a future already done is left alone."""
        def settle() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)

        self.loop.call_soon_threadsafe(settle)


TranslateFn = Callable[[list[str], SearchConfig], list[Translation]]


class Batcher:
    """The queue and the worker thread that merges requests into batches (see the module doc)."""

    def __init__(self, translate: TranslateFn, cfg: ServeConfig, on_batch: Callable[[int, float], None] = lambda n, s: None):
        self.translate, self.cfg, self.on_batch = translate, cfg, on_batch
        self.queue: collections.deque[Job] = collections.deque()
        self.queued_lines = 0
        self.cond = threading.Condition()
        self.stopping = False
        self.free_since = 0.0  # time.monotonic() when the model last finished a batch
        self.thread = threading.Thread(target=self._run, name="nmt-batcher", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def submit(self, lines: list[str], search: SearchConfig) -> Job:
        """Queue `lines` (called on the event loop); Overloaded when the queue cannot take them."""
        loop = asyncio.get_running_loop()
        job = Job(lines, search, loop.create_future(), loop)
        with self.cond:
            if self.stopping:
                raise Overloaded("the server is shutting down")
            if self.queued_lines + len(lines) > self.cfg.max_queue:
                raise Overloaded(f"{self.queued_lines} lines are waiting (--max-queue {self.cfg.max_queue})")
            self.queue.append(job)
            self.queued_lines += len(lines)
            self.cond.notify()
        return job

    def cancel(self, job: Job) -> None:
        """Withdraw a job: skipped if the worker has not taken it yet."""
        with self.cond:
            job.cancelled = True

    def close(self) -> None:
        """Translate what is queued, then stop the worker."""
        with self.cond:
            self.stopping = True
            self.cond.notify()
        if self.thread.is_alive():
            self.thread.join()

    def next_batch(self) -> list[Job]:
        """Wait for work; then the oldest job and the queued jobs of the same search settings, up to
        max_batch_sentences lines, taken when the batch is full, or when no request has come for quiet_ms,
        or at the latest max_wait_ms after the oldest arrived or the model became free, whichever is later."""
        with self.cond:
            while not self.queue:
                if self.stopping:
                    return []
                self.cond.wait()
            start = max(self.queue[0].arrived, self.free_since)
            limit, quiet = start + self.cfg.max_wait_ms / 1000, min(self.cfg.quiet_ms, self.cfg.max_wait_ms) / 1000
            while True:
                batch = self._compatible()
                lines = sum(len(j.lines) for j in batch)
                wait = min(limit, max(start, self.queue[-1].arrived) + quiet) - time.monotonic()
                if lines >= self.cfg.max_batch_sentences or wait <= 0 or self.stopping:
                    break
                self.cond.wait(wait)
            for job in batch:
                self.queue.remove(job)
                self.queued_lines -= len(job.lines)
            return [j for j in batch if not j.cancelled]

    def _compatible(self) -> list[Job]:
        """The oldest job, and the later ones with its search settings that still fit the batch."""
        first = self.queue[0]
        batch, lines = [first], len(first.lines)
        for job in list(self.queue)[1:]:
            if job.search == first.search and lines + len(job.lines) <= self.cfg.max_batch_sentences:
                batch.append(job)
                lines += len(job.lines)
        return batch

    def _run(self) -> None:
        while True:
            batch = self.next_batch()
            if not batch:
                with self.cond:
                    if self.stopping and not self.queue:
                        return
                continue
            self._translate(batch)

    def _translate(self, batch: list[Job]) -> None:
        lines = [line for job in batch for line in job.lines]
        start = time.monotonic()
        try:
            results = self.translate(lines, batch[0].search)
        except Exception as e:  # a bug or a device error: every request of the batch learns of it
            for job in batch:
                job.resolve(error=e)
            return
        finally:
            self.free_since = time.monotonic()
        self.on_batch(len(lines), time.monotonic() - start)
        at = 0
        for job in batch:
            job.resolve(results[at : at + len(job.lines)])
            at += len(job.lines)


def translator_function(translator: Translator) -> TranslateFn:
    """translate_chunk with per-request search settings (the model and tokenizer are shared).

    Call it where the thread count is set (after --threads): the worker thread that runs the function is
    given that count, since OpenMP starts a new thread with its default (every core) whatever
    torch.set_num_threads said in the main thread, and --threads 1 would run on two cores."""
    threads = torch.get_num_threads()
    pinned = threading.local()
    variants: dict[tuple, Translator] = {}

    def translate(lines: list[str], search: SearchConfig) -> list[Translation]:
        if not getattr(pinned, "threads", False):
            torch.set_num_threads(threads)
            pinned.threads = True
        key = dataclasses.astuple(search)
        if key not in variants:
            variants[key] = translator.with_search(search)
        return variants[key].translate_chunk(lines)

    return translate


# -- the HTTP application ------------------------------------------------------------------------------


def require_web_stack() -> None:
    """ConfigError naming the extra unless FastAPI, uvicorn and prometheus_client are installed."""
    missing = []
    for module in ("fastapi", "uvicorn", "prometheus_client"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ConfigError(f"nmt serve needs {', '.join(missing)}: {EXTRA_HINT}")


@dataclass
class ModelInfo:
    """What /v1/translate and /health tell about the model."""

    name: str
    src: str
    tgt: str
    sha256: str
    search: dict


def model_info(paths: list, translator: Translator) -> ModelInfo:
    """The model's identity: file name(s), direction, sha256 of the checkpoint file(s), search defaults."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
    search = {k: v for k, v in dataclasses.asdict(translator.search_cfg).items()
              if k in ("beam", "lenpen", "lenpen_type", "max_len_a", "max_len_b", "nbest")}
    return ModelInfo(" + ".join(Path(p).name for p in paths), translator.data["src"], translator.data["tgt"],
                     digest.hexdigest(), search)


def create_app(translator: Translator, info: ModelInfo, cfg: ServeConfig, translate: Optional[TranslateFn] = None,
               on_ready: Callable[[], None] = lambda: None):
    """The FastAPI application (see docs/commands/serve.md for the API)."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
    from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr
    from starlette.exceptions import HTTPException as StarletteHTTPException

    cfg.validate()
    registry = CollectorRegistry()
    requests_total = Counter("nmt_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=registry)
    latency = Histogram("nmt_request_seconds", "Request latency", ["endpoint"], registry=registry,
                        buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
    batch_lines = Histogram("nmt_batch_sentences", "Lines per translated batch", registry=registry,
                            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
    sentences = Counter("nmt_translated_sentences", "Lines translated", registry=registry)
    busy = Counter("nmt_model_seconds", "Seconds the model spent translating", registry=registry)
    queued = Gauge("nmt_queue_sentences", "Lines waiting", registry=registry)

    def on_batch(n: int, seconds: float) -> None:
        batch_lines.observe(n)
        sentences.inc(n)
        busy.inc(seconds)

    batcher = Batcher(translate or translator_function(translator), cfg, on_batch)
    queued.set_function(lambda: batcher.queued_lines)
    state = {"ready": False}

    async def lifespan(app):
        batcher.start()
        await asyncio.get_running_loop().run_in_executor(None, translator.translate_chunk, ["warm up"])
        state["ready"] = True
        on_ready()
        yield
        state["ready"] = False
        await asyncio.get_running_loop().run_in_executor(None, batcher.close)  # drain, then stop

    app = FastAPI(title="nmt", description=f"Translation {info.src} -> {info.tgt} with {info.name}",
                  lifespan=lifespan)

    class TranslateRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        text: Union[StrictStr, list[StrictStr]]
        beam: Optional[StrictInt] = None
        nbest: Optional[StrictInt] = None

    class LibreRequest(BaseModel):
        model_config = ConfigDict(extra="ignore")  # api_key, format, alternatives: accepted, not used
        q: Union[StrictStr, list[StrictStr]]
        source: StrictStr = "auto"
        target: StrictStr

    def error(status: int, message: str, headers: Optional[dict] = None) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    class HTTPProblem(Exception):
        def __init__(self, status: int, message: str, headers: Optional[dict] = None):
            self.status, self.message, self.headers = status, message, headers

    @app.exception_handler(HTTPProblem)
    async def problem(request: Request, e: HTTPProblem) -> JSONResponse:
        return error(e.status, e.message, e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        message = "the body is not valid JSON (in UTF-8)" if e.status_code == 400 else str(e.detail)
        return error(e.status_code, message, getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        if any(err.get("type") == "json_invalid" for err in errors):
            return error(400, "the body is not valid JSON (in UTF-8)")
        where = "; ".join(f"{'.'.join(str(p) for p in err.get('loc', ())[1:]) or 'body'}: {err.get('msg')}"
                          for err in errors[:5])
        return error(422, f"invalid request: {where}")

    def observe(endpoint: str, status: int, seconds: float) -> None:
        if endpoint in ("/v1/translate", "/translate"):
            latency.labels(endpoint).observe(seconds)
        if endpoint in KNOWN_PATHS:  # not one series per path a scanner tries
            requests_total.labels(endpoint, str(status)).inc()

    app.add_middleware(Metered, observe=observe)

    def checked_lines(text: Union[str, list[str]]) -> list[str]:
        lines = [text] if isinstance(text, str) else list(text)
        if not lines:
            raise HTTPProblem(400, "no text to translate: give a string or a non-empty list of strings")
        if len(lines) > cfg.max_lines:
            raise HTTPProblem(413, f"{len(lines)} lines in one request; at most {cfg.max_lines} (--max-lines)")
        for i, line in enumerate(lines):
            if len(line) > cfg.max_chars:
                raise HTTPProblem(413, f"line {i} has {len(line)} characters; at most {cfg.max_chars} (--max-chars)")
        # One line in, one line out: a newline inside a string would not survive `nmt translate` either.
        return [line.replace("\r", " ").replace("\n", " ") for line in lines]

    def search_of(beam: Optional[int], nbest: Optional[int]) -> SearchConfig:
        base = translator.search_cfg
        try:
            for name, value in (("beam", beam), ("nbest", nbest)):
                if value is not None:
                    check_range(name, value, 1, MAX_BEAM)
            search = dataclasses.replace(base, beam=base.beam if beam is None else beam,
                                         nbest=base.nbest if nbest is None else nbest)
            if search.nbest > search.beam:
                search = dataclasses.replace(search, beam=search.nbest)  # n-best needs a beam that wide
            return search.validate()
        except ConfigError as e:
            raise HTTPProblem(422, str(e).replace("--", "")) from None

    async def translations(request: Request, lines: list[str], search: SearchConfig) -> list[Translation]:
        try:
            job = batcher.submit(lines, search)
        except Overloaded as e:
            raise HTTPProblem(503, f"overloaded: {e}; retry later", {"Retry-After": "1"}) from None
        deadline = time.monotonic() + cfg.timeout
        while True:
            try:
                return await asyncio.wait_for(asyncio.shield(job.future), 0.1)
            except asyncio.TimeoutError:
                pass
            if await request.is_disconnected():  # nobody waits for the answer: leave the work undone
                batcher.cancel(job)
                raise HTTPProblem(499, "client closed the request")
            if time.monotonic() > deadline:
                batcher.cancel(job)
                raise HTTPProblem(504, f"not translated within {cfg.timeout:g}s (--timeout); retry later")

    def model_json() -> dict:
        return dataclasses.asdict(info)

    @app.post("/v1/translate")
    async def translate_v1(body: TranslateRequest, request: Request) -> dict:
        """Translate a string or a list of strings; optional per-request `beam` and `nbest`."""
        lines = checked_lines(body.text)
        search = search_of(body.beam, body.nbest)
        done = await translations(request, lines, search)
        if search.nbest > 1:
            out: list = [[{"text": text, "score": round(h.score, 4)} for text, h in t.hypotheses] for t in done]
        else:
            out = [t.text for t in done]
        return {"translations": out, "model": model_json()}

    @app.post("/translate")
    async def translate_libre(body: LibreRequest, request: Request) -> dict:
        """LibreTranslate-compatible: `q`, `source`, `target` -> `translatedText`."""
        if body.source not in ("auto", info.src) or body.target != info.tgt:
            raise HTTPProblem(400, f"this server translates {info.src} to {info.tgt}, not {body.source} to {body.target}")
        done = await translations(request, checked_lines(body.q), search_of(None, 1))
        texts = [t.text for t in done]
        return {"translatedText": texts[0] if isinstance(body.q, str) else texts}

    @app.get("/languages")
    async def languages() -> list:
        """LibreTranslate's language list: the model's one direction."""
        return [{"code": info.src, "name": info.src, "targets": [info.tgt]}]

    @app.get("/health")
    async def health() -> Response:
        if not state["ready"]:
            return error(503, "starting: the model is loading")
        return JSONResponse({"status": "ready", "model": model_json(), "queued_lines": batcher.queued_lines})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.state.batcher = batcher
    return app


KNOWN_PATHS = ("/v1/translate", "/translate", "/languages", "/health", "/metrics")


class Metered:
    """Pure ASGI middleware that reports each HTTP request's path, status and duration. (Starlette's
    BaseHTTPMiddleware would stand between the endpoint and the client's disconnect message.)"""

    def __init__(self, app, observe: Callable[[str, int, float], None]):
        self.app, self.observe = app, observe

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.monotonic(), [500]

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.observe(scope["path"], status[0], time.monotonic() - start)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: one the system picks), taken before the model loads so that a busy
    port or an unknown host is a one-line error at once rather than after the start-up."""
    where = f"--host {host} --port {port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise ConfigError(f"{where}: cannot resolve the host ({e}); give an address such as 127.0.0.1") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait for TIME_WAIT
        sock.bind(address)
        sock.listen(2048)  # connections wait in the backlog from now on, even before the server accepts them
    except OSError as e:
        sock.close()
        raise ConfigError(f"{where}: cannot listen there ({e.strerror or e}); choose another --port, "
                          "or stop the process that uses it") from None
    return sock


def address(sock: socket.socket) -> str:
    """http://HOST:PORT of a bound socket, with the port the system picked for port 0."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(translator: Translator, info: ModelInfo, cfg: ServeConfig, sock: socket.socket,
          log: Callable[[str], None] = lambda s: None) -> None:
    """Run the server on `sock` (from `listen`) until SIGINT/SIGTERM: it then stops accepting, answers what is
    in flight, and returns."""
    import uvicorn

    def ready() -> None:
        log(f"ready: {info.name} ({info.src} -> {info.tgt}) on {address(sock)} (API docs: /docs)")

    app = create_app(translator, info, cfg, on_ready=ready)
    config = uvicorn.Config(app, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=max(cfg.timeout, 1.0))
    # uvicorn turns SIGINT/SIGTERM into a graceful shutdown, then raises the signal again for the handler
    # that was there before it: a no-op one here, so that a graceful stop exits 0, not 128 + signal.
    previous = {sig: signal.signal(sig, lambda signum, frame: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    log("stopped: every request in flight was answered")
