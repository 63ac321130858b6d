"""A run's log files in its output folder: log.jsonl (one JSON record per line) and, when tensorboard is
installed, TensorBoard event files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LOG_NAME = "log.jsonl"
CONFIG_NAME = "config.toml"
TENSORBOARD_DIR = "tensorboard"


class RunLog:
    """Figures as they happen: always OUT/log.jsonl; TensorBoard event files when tensorboard is installed."""

    def __init__(self, out_dir: Path):
        self.path = out_dir / LOG_NAME
        self.board = open_tensorboard(out_dir / TENSORBOARD_DIR)

    def write(self, record: dict[str, Any], section: str) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if self.board is None:
            return
        for key, value in record.items():
            if key != "update" and isinstance(value, (int, float)) and not isinstance(value, bool):
                # valid_bleu -> valid/bleu; tok/s -> train/tok_per_s (a slash would nest the chart)
                name = key.removeprefix(f"{section}_").replace("/", "_per_")
                self.board.add_scalar(f"{section}/{name}", value, record["update"])
        self.board.flush()

    def close(self) -> None:
        if self.board is not None:
            self.board.close()


def open_tensorboard(log_dir: Path) -> Any:
    """A SummaryWriter, or None when tensorboard is not installed (TensorBoard output is optional)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # ImportError, or a broken tensorboard/protobuf install: skip, as promised
        return None
    return SummaryWriter(log_dir=str(log_dir))
