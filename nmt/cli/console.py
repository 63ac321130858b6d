"""Rendering on stderr: rich progress bars on a terminal, plain log lines otherwise (logs, CI, pipes).

Messages are text: paths, config values and translations in them are printed as they are, never read as rich
markup (`[model]`, `run/avg[best].pt`) or emoji codes (`:smile:`). Our own styles are rich styles (Text).
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Iterator
from typing import Any, Optional

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as RichProgress
from rich.table import Column
from rich.text import Text

from nmt.config.flags import as_flags  # library messages name fields; the user typed options
from nmt.core.progress import Progress, ProgressFn

# markup and emoji off: a str printed on err is its text (say() passes a Text as well, whatever console err is)
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False, emoji=False)


def say(message: str) -> None:
    """Print `message` on stderr as it is (a message of the library or of a command), unwrapped: a long
    path stays whole for a copy and paste."""
    err.print(Text(message), soft_wrap=True)


def format_info(info: dict[str, Any]) -> str:
    parts = []
    for k, v in info.items():
        if isinstance(v, float):
            if k == "lr":
                v = f"{v:.3g}"
            else:
                v = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3f}" if k != "elapsed" else f"{v:.0f}s"
        parts.append(f"{k} {v}")
    return " | ".join(parts)


def progress_wanted() -> bool:
    """Whether progress is drawn: on a terminal only, so that pipelines and logs stay clean."""
    return err.is_terminal


class RateColumn(ProgressColumn):
    """Items per second, e.g. `12.3 sentences/s`."""

    def __init__(self, unit: str):
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.1f} {self.unit}/s" if speed is not None else f"? {self.unit}/s")


def eta(done: float, total: Optional[float], rate: Optional[float], time_left: Optional[float] = None) -> str:
    """The time left as H:MM:SS: at `rate` to `total`, or `time_left` (a time budget) if that ends first;
    '?' when it cannot be told yet."""
    seconds = max(total - done, 0) / rate if total and rate and rate > 0 else None
    if time_left is not None:
        seconds = time_left if seconds is None else min(seconds, time_left)
    return "?" if seconds is None else str(datetime.timedelta(seconds=round(seconds)))


class EtaColumn(ProgressColumn):
    """rich's time left (from the task's rate), bounded by the time budget the task last reported."""

    def render(self, task: Task) -> Text:
        time_left, reported = task.fields.get("time_left"), task.fields.get("reported")
        if time_left is not None and reported is not None:
            time_left = max(time_left - (time.monotonic() - reported), 0.0)
        if task.finished:
            return Text("0:00:00", style="progress.remaining")
        if task.time_remaining is None and time_left is None:
            return Text("-:--:--", style="progress.remaining")
        rate = task.speed if task.time_remaining is not None else None
        return Text(eta(task.completed, task.total, rate, time_left), style="progress.remaining")


@contextlib.contextmanager
def progress_display(bytes_unit: bool = False) -> Iterator[ProgressFn]:
    """A ProgressFn that draws each task as a rich bar (on a terminal) or logs it (elsewhere).

    A task's count and time left come first and its figures (`info`) last, cut at the console's width:
    at 80 columns a training line still starts `train 120/2,700 0:35:12 loss 5.123 | ...`.
    """
    if not err.is_terminal:
        yield plain_logger()
        return
    # markup=False: descriptions and figures are text (a file's name, a config value), styled by rich styles
    columns: list[Any] = [TextColumn("{task.description}", style="bold", markup=False,
                                     table_column=Column(no_wrap=True))]
    if bytes_unit:
        columns += [BarColumn(bar_width=20), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn()]
    else:
        columns += [MofNCompleteColumn(), EtaColumn(), BarColumn(bar_width=10)]
    columns += [TextColumn("{task.fields[info]}", markup=False,
                           table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1))]
    # redirect_stdout=False: results written to stdout while a bar is drawn must stay on stdout
    with RichProgress(*columns, console=err, transient=False, expand=True, redirect_stdout=False,
                      redirect_stderr=False) as bar:
        tasks: dict[str, TaskID] = {}

        def report(event: Progress) -> None:
            if event.message is not None:
                say(as_flags(event.message))  # bar.console is err: the bar is redrawn below it
                return
            if event.task not in tasks:
                tasks[event.task] = bar.add_task(event.task, total=event.total, info="")
            bar.update(tasks[event.task], completed=event.done, total=event.total, info=format_info(event.info),
                       time_left=event.time_left, reported=time.monotonic())

        yield report


def plain_logger(min_interval: float = 2.0) -> ProgressFn:
    """Log lines for non-terminals: messages always, progress at most every `min_interval` seconds per task,
    as `train 120/2,700 updates | ETA 0:35:12 | loss 5.123 | ...` (the time left at the rate seen so far)."""
    last: dict[str, float] = {}
    first: dict[str, tuple[float, float]] = {}  # per task: (time, count) of its first report

    def report(event: Progress) -> None:
        if event.message is not None:
            say(as_flags(event.message))
            return
        now = time.monotonic()
        start = first.setdefault(event.task, (now, event.done))
        finished = event.total is not None and event.done >= event.total
        if now - last.get(event.task, 0.0) < min_interval and not finished:
            return
        last[event.task] = now
        total = f"/{event.total:,.0f}" if event.total else ""
        rate = (event.done - start[1]) / (now - start[0]) if now > start[0] else None
        left = f" | ETA {eta(event.done, event.total, rate, event.time_left)}" if event.total and not finished else ""
        info = format_info(event.info)
        say(f"{event.task} {event.done:,.0f}{total} {event.unit}{left}" + (f" | {info}" if info else ""))

    return report


def message_logger() -> ProgressFn:
    """Messages (warnings, notes) on stderr; progress reports dropped (a server's log, a pipeline)."""

    def report(event: Progress) -> None:
        if event.message is not None:
            say(as_flags(event.message))

    return report


@contextlib.contextmanager
def translation_progress(total: Optional[int], unit: str = "sentences") -> Iterator[ProgressFn]:
    """Progress of translating `total` sentences: on a terminal a bar with sentences/s and the time left;
    elsewhere (or with no total: a stream) messages only, so that pipelines and logs stay clean."""
    if not (total and progress_wanted()):
        yield message_logger()
        return
    columns = [TextColumn("translate", style="bold", markup=False), BarColumn(bar_width=20), MofNCompleteColumn(),
               RateColumn(unit), TimeRemainingColumn()]
    with RichProgress(*columns, console=err, transient=False, redirect_stdout=False, redirect_stderr=False) as bar:
        task = bar.add_task("translate", total=total)

        def report(event: Progress) -> None:
            if event.message is not None:
                say(as_flags(event.message))  # bar.console is err: the bar is redrawn below it
            elif event.unit == unit:
                bar.update(task, completed=event.done)

        yield report
