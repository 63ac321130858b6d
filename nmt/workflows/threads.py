"""The CPU threads torch computes with in this process (each command that runs a model sets them first)."""

from __future__ import annotations

import torch

from nmt.config import MAX_THREADS, check_range
from nmt.core.errors import ref


def set_threads(threads: int) -> None:
    """Use `threads` CPU threads in torch's kernels (0: leave torch's default)."""
    check_range(ref("threads"), threads, 0, MAX_THREADS)
    if threads > 0:
        torch.set_num_threads(threads)
