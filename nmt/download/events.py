"""Progress events of the download tasks: byte counts, throttled, and one-off log lines."""

from __future__ import annotations

import time

from nmt.core.progress import Progress, ProgressFn

REPORT_EVERY = 0.1  # seconds between two byte-progress events of one task


class Reporter:
    """Send byte-progress events for one task, at most every REPORT_EVERY seconds."""

    def __init__(self, progress: ProgressFn, task: str, total: float | None):
        self.progress, self.task, self.total = progress, task, total
        self.last, self.done_sent = 0.0, -1.0

    def __call__(self, done: float, force: bool = False) -> None:
        now = time.monotonic()
        if done == self.done_sent and self.last:
            return  # nothing new: the final event is not sent twice
        if force or now - self.last >= REPORT_EVERY or done == self.total:
            self.last, self.done_sent = now, done
            self.progress(Progress(self.task, done=done, total=self.total, unit="B"))


def say(progress: ProgressFn, task: str, message: str) -> None:
    """Send a one-off log line."""
    progress(Progress(task=task, message=message))
