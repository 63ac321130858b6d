"""Progress events: the library reports, the CLI draws (with rich) or ignores them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional


@dataclass
class Progress:
    """One progress report of a long task.

    `task` names it ("prepare train", "download train.en.gz"); `done`/`total` count `unit`s
    (total None when unknown); `info` carries figures worth showing (loss, lr, ...).
    `message`, when set, is a one-off line for the log rather than a progress update. `time_left` bounds
    the time left that the displays tell from the rate: a run stopped by its time budget ends by then.
    """

    task: str
    done: float = 0
    total: Optional[float] = None
    unit: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    message: Optional[str] = None
    time_left: Optional[float] = None  # seconds left by a time budget (train --max-time), when it has one


ProgressFn = Callable[[Progress], None]


def ignore(_: Progress) -> None:
    """Default progress callback: report nothing."""
