"""The server's Prometheus metrics (served at /metrics)."""

from __future__ import annotations

from typing import Callable, Collection

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = CONTENT_TYPE_LATEST
TRANSLATING = ("/v1/translate", "/translate")  # the endpoints whose latency is measured


class Metrics:
    """Requests by endpoint and status, their latency, the batches and the queue, in one registry."""

    def __init__(self, paths: Collection[str]):
        self.paths = frozenset(paths)  # a series per known path, not one per path a scanner tries
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
        if path in TRANSLATING:
            self.latency.labels(path).observe(seconds)
        if path in self.paths:
            self.requests.labels(path, str(status)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
