"""Dynamic batching: one bounded queue of requests, and a worker thread that merges them into chunks.

The worker takes the oldest request, adds the queued requests that share its job (direction, search settings and
format: `backend.Job`; in arrival order) until --max-batch-sentences, until no request has come for --quiet-ms,
or at the latest until --max-wait-ms have passed since the oldest arrived or the model became free, whichever is
later (so that under load the clients just answered can send their next line into the coming batch instead of
one of their own, while a lone request waits only --quiet-ms; under load the batch also waits, within
--max-wait-ms, for as many requests as the last batch answered), and translates their lines as one chunk. The
engine sorts a chunk by length and cuts model batches of --max-batch-tokens, so every line gets exactly what
`nmt translate` gives it. With --max-wait-ms 0 (the CTranslate2 engine's default) the worker waits for nobody: a
batch goes as soon as the engine is free, with what has queued meanwhile. A chunk that fails is translated again
request by request, so that one bad request fails alone. The event loop only queues and awaits: it never runs
the model.

A request's items are sentences (its texts cut before they are queued: an HTML page is as many items as its
sentences) or, for HTML whose inline tags are placed through a word alignment, the texts to align (`backend.Job`);
"lines" below means items.

Fairness: a request gives a batch at most `slice_lines` of its texts (`SLICE_LINES` by default), its next slice;
one with more goes back to the end of the queue after each slice, so that requests take turns (round robin) and
a one-line request that comes while a large one is translated waits for about one batch of slices, not for the
whole large request (measured: benchmarks/serve_fairness.py). A request's slices are put together in order, and
it is answered once its last slice is done. A request withdrawn meanwhile (its client gone, its --timeout
passed) has no further slice translated: only the batch in progress finishes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from nmt.config import ServeConfig
from nmt.config.flags import as_flags
from nmt.core.errors import ref
from nmt.serve.backend import Job, TranslateFn
from nmt.serve.http_errors import Overloaded, TooLarge

SLICE_LINES = 16  # texts of one request per batch: chosen by measurement (docs/commands/serve.md, fairness)


@dataclass(eq=False)
class PendingRequest:
    """One request's texts (`lines`), waiting for the worker; `future` lives on the event loop. `taken`: how
    many of its texts the worker has taken so far (its slices), `done` their translations, in order."""

    lines: list[Any]  # the items of a job (`backend.Job`): sentences, or texts to align
    job: Job
    future: asyncio.Future[list[Any]]
    loop: asyncio.AbstractEventLoop
    arrived: float = field(default_factory=time.monotonic)
    withdrawn: bool = False  # set on the event loop: nobody waits for the outcome any more
    taken: int = 0
    done: list[Any] = field(default_factory=list)

    @property
    def left(self) -> int:
        """Texts not taken yet."""
        return len(self.lines) - self.taken

    def resolve(self, result: Any = None, error: Optional[BaseException] = None) -> None:
        """Hand the outcome to the event loop (thread-safe); a withdrawn or settled request is left alone
        (an exception nobody awaits would be logged by asyncio)."""
        def settle() -> None:
            if self.future.done() or self.withdrawn:
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)

        with contextlib.suppress(RuntimeError):  # the event loop is closed: the server has stopped, nobody waits
            self.loop.call_soon_threadsafe(settle)


@dataclass
class Piece:
    """The slice of one request in a batch: its texts from `start` on."""

    pending: PendingRequest
    start: int
    lines: list[Any]


class Batcher:
    """The queue and the worker thread that merges requests into batches (see the module doc)."""

    def __init__(self, translate: TranslateFn, cfg: ServeConfig,
                 on_batch: Callable[[int, float], None] = lambda n, s: None, slice_lines: int = SLICE_LINES):
        self.translate, self.cfg, self.on_batch = translate, cfg, on_batch
        if cfg.max_wait_ms is None:  # its default is the engine's: the caller knows the engine, not the batcher
            raise ValueError(f"Batcher needs {ref('max_wait_ms')} resolved: give it cfg.for_engine(engine.name)")
        if slice_lines < 1:
            raise ValueError(f"slice_lines {slice_lines}: give 1 or more")
        self.max_wait = cfg.max_wait_ms / 1000
        self.slice = min(slice_lines, cfg.max_batch_sentences)
        self.queue: collections.deque[PendingRequest] = collections.deque()
        self.queued_lines = 0  # texts waiting: those of the queued requests, and the untaken of those in a batch
        self.cond = threading.Condition()
        self.stopping = False
        self.free_since = 0.0  # time.monotonic() when the model last finished a batch
        self.answered = 0  # requests that batch answered: under load, their clients send their next lines now
        self.thread = threading.Thread(target=self._run, name="nmt-batcher", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def submit(self, lines: list[Any], job: Job) -> PendingRequest:
        """Queue `lines` (called on the event loop): TooLarge if they could never fit the queue, Overloaded
        when it cannot take them now."""
        if len(lines) > self.cfg.max_queue:
            raise TooLarge(as_flags(f"{len(lines)} sentences in one request; the queue holds at most "
                                    f"{self.cfg.max_queue} ({ref('max_queue')}): send less text per request"))
        loop = asyncio.get_running_loop()
        pending = PendingRequest(lines, job, loop.create_future(), loop)
        with self.cond:
            if self.stopping:
                raise Overloaded("the server is shutting down")
            if self.queued_lines + len(lines) > self.cfg.max_queue:
                raise Overloaded(as_flags(f"{self.queued_lines} sentences are waiting "
                                          f"({ref('max_queue')} {self.cfg.max_queue})"))
            self.queue.append(pending)
            self.queued_lines += len(lines)
            self.cond.notify()
        return pending

    def withdraw(self, pending: PendingRequest) -> bool:
        """Take a request back (timeout, client gone): out of the queue at once, its untaken lines no longer
        counted, none of them translated. False when the worker has taken some of its lines already (a slice
        being translated, or done)."""
        with self.cond:
            if pending.withdrawn:
                return False
            pending.withdrawn = True
            with contextlib.suppress(ValueError):  # not queued: its slice is being translated
                self.queue.remove(pending)
            self.queued_lines -= pending.left
            self.cond.notify()  # the batch being formed may have been waiting for this one
            return pending.taken == 0

    def close(self, timeout: Optional[float] = None) -> bool:
        """Translate what is queued, then stop the worker; False if it was still busy after `timeout` s."""
        with self.cond:
            self.stopping = True
            self.cond.notify()
        if self.thread.is_alive():
            self.thread.join(timeout)
        return not self.thread.is_alive()

    def next_batch(self) -> list[Piece]:
        """Wait for work; then the next slice of the oldest request and those of the queued requests of the same
        job, up to max_batch_sentences lines, taken when the batch is full, or when no request has come for
        quiet_ms, or at the latest max_wait_ms after the oldest arrived or the model became free, whichever is
        later; at once when the oldest is a request already begun (its client waits for it, not for others).
        While the model is busy, quiet_ms counts only once as many requests have arrived since the model
        became free as its last batch answered: those clients' next requests come spread over more than a
        few milliseconds on a loaded machine, and a batch cut before them splits the clients into cohorts
        that never meet again (half-full batches). [] once stopping with nothing queued."""
        with self.cond:
            while True:
                while not self.queue:
                    if self.stopping:
                        return []
                    self.cond.wait()
                start = max(self.queue[0].arrived, self.free_since)
                max_wait = self.max_wait
                limit = start + max_wait
                quiet = min(self.cfg.quiet_ms / 1000, max_wait)
                # the oldest came while the model worked, or just after: the clients just answered are coming back
                busy = self.queue[0].arrived < self.free_since + max_wait
                while self.queue:
                    batch = self._compatible()
                    lines = sum(len(piece.lines) for piece in batch)
                    returned = sum(1 for p in self.queue if p.arrived >= self.free_since)
                    if self.queue[0].taken:
                        wait = 0.0
                    elif busy and returned < self.answered:
                        wait = limit - time.monotonic()
                    else:
                        wait = min(limit, max(start, self.queue[-1].arrived) + quiet) - time.monotonic()
                    if lines >= self.cfg.max_batch_sentences or wait <= 0 or self.stopping:
                        return self._take(batch)
                    self.cond.wait(wait)
                # every request waiting was withdrawn meanwhile: wait for new ones

    def _next_slice(self, pending: PendingRequest) -> Piece:
        return Piece(pending, pending.taken, pending.lines[pending.taken : pending.taken + self.slice])

    def _compatible(self) -> list[Piece]:
        """The next slice of the oldest request, and those of the later ones of its job that still fit. Headed by
        a request not begun, a batch takes no slice of a request begun: the requests that came while a large
        one was translated go first, in a batch of their own size, not one of slices."""
        first = self.queue[0]
        batch = [self._next_slice(first)]
        lines = len(batch[0].lines)
        for pending in list(self.queue)[1:]:
            piece = self._next_slice(pending)
            if first.taken == 0 and pending.taken:
                continue
            if pending.job == first.job and lines + len(piece.lines) <= self.cfg.max_batch_sentences:
                batch.append(piece)
                lines += len(piece.lines)
        return batch

    def _take(self, batch: list[Piece]) -> list[Piece]:
        """Out of the queue with the batch's requests (those with texts left come back after it)."""
        for piece in batch:
            self.queue.remove(piece.pending)
            piece.pending.taken += len(piece.lines)
            self.queued_lines -= len(piece.lines)
        return batch

    def _run(self) -> None:
        while batch := self.next_batch():
            self._translate(batch)
            self._requeue(batch)

    def _requeue(self, batch: list[Piece]) -> None:
        """The batch's requests with texts left go back to the end of the queue, unless withdrawn or failed."""
        with self.cond:
            for piece in batch:
                pending = piece.pending
                if pending.left and not pending.withdrawn and len(pending.done) == pending.taken:
                    self.queue.append(pending)
            self.cond.notify()

    def _translate(self, batch: list[Piece]) -> None:
        lines = [line for piece in batch for line in piece.lines]
        start = time.monotonic()
        try:
            results = self.translate(lines, batch[0].pending.job)
        except Exception as e:
            self.free_since = time.monotonic()
            if len(batch) == 1:
                self._fail(batch[0].pending, e)
            else:  # which request is at fault is unknown: each goes again alone, so the others get their lines
                for piece in batch:
                    self._translate([piece])
            return
        self.free_since = time.monotonic()
        self.on_batch(len(lines), self.free_since - start)
        at, answered = 0, 0
        for piece in batch:
            pending = piece.pending
            pending.done.extend(results[at : at + len(piece.lines)])
            at += len(piece.lines)
            if len(pending.done) == len(pending.lines):
                pending.resolve(pending.done)
                answered += 1
        self.answered = answered

    def _fail(self, pending: PendingRequest, error: BaseException) -> None:
        """The request fails with `error`: answered so, its slices not yet taken dropped."""
        pending.resolve(error=error)
        with self.cond:
            if not pending.withdrawn:
                self.queued_lines -= pending.left
            pending.taken = len(pending.lines)  # (and len(done) < taken: never queued again)
