"""The learning-rate schedule of the recipe: the paper's warm-up and inverse square root, and an
optional decay to 0 over the end of the run.
"""

from __future__ import annotations

import math


def learning_rate(update: int, d_model: int, factor: float, warmup: int) -> float:
    """lr = factor * d_model^-0.5 * min(update^-0.5, update * warmup^-1.5), for update >= 1."""
    update = max(update, 1)
    # int ** float is Any to mypy (typeshed cannot tell a float from a complex result); it is a float here.
    rate: float = factor * d_model ** -0.5 * min(update ** -0.5, update * warmup ** -1.5)
    return rate


def tail_factor(kind: str, progress: float, share: float) -> float:
    """What the learning rate is multiplied by at `progress` (0: start, 1: end) of a run whose last `share`
    is a decay to 0 (`kind` linear or cosine); 1 throughout for `none`, the paper's schedule."""
    start = 1.0 - share
    if kind == "none" or progress <= start:
        return 1.0
    x = min((progress - start) / share, 1.0)
    return 1.0 - x if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * x))
