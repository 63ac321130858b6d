"""The text subword learners read: a seeded, uniform reservoir sample that holds only the sample."""

from __future__ import annotations

import numpy as np

from nmt.text.corpus import _SAMPLE_BLOCK, reservoir_sample


def test_reservoir_sample_is_seeded():
    lines = [str(i) for i in range(1000)]
    a, b, c = (reservoir_sample(iter(lines), 50, s) for s in (1, 1, 2))
    assert a == b and a != c
    assert len(a) == 50 and len(set(a)) == 50 and set(a) <= set(lines)
    assert reservoir_sample(iter(lines[:10]), 50, 1) == lines[:10]  # fewer lines: all of them


class Counted(str):
    """A line that counts how many of its kind are alive."""

    alive = peak = 0

    def __new__(cls, value):
        obj = super().__new__(cls, value)
        Counted.alive += 1
        Counted.peak = max(Counted.peak, Counted.alive)
        return obj

    def __del__(self):
        Counted.alive -= 1


def test_reservoir_sample_holds_only_the_sample():

    Counted.alive = Counted.peak = 0
    sample = reservoir_sample((Counted(str(i)) for i in range(100_000)), 300, 4)
    assert len(sample) == 300 and len(set(sample)) == 300
    assert Counted.peak <= 300 + _SAMPLE_BLOCK + 2  # the sample plus one block being read
    del sample


def test_reservoir_sample_is_uniform():
    # Each of N lines is kept with probability n/N: early and late lines alike.
    counts = np.zeros(200)
    for seed in range(400):
        counts[[int(x) for x in reservoir_sample((str(i) for i in range(200)), 20, seed)]] += 1
    assert counts.sum() == 400 * 20
    assert abs(counts[:100].mean() - 40) < 3 and abs(counts[100:].mean() - 40) < 3  # 40 = 400 * 20/200
    assert counts.min() > 15 and counts.max() < 70  # about 40 +- 6 each
    # Across blocks too: sample 5 of 20000 lines (5 blocks of reading).
    picks = [int(x) for seed in range(300) for x in reservoir_sample((str(i) for i in range(20000)), 5, seed)]
    assert 0.45 < np.mean(np.array(picks) < 10000) < 0.55
