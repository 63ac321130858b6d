"""The text a subword model learns from, for both learners (youtokentome in nmt/text/bpe.py, SentencePiece in
nmt/text/spm.py): every non-blank line of plain or .gz files, or a seeded uniform sample of them, and the
checks of the options the learners share (`nmt bpe --vocab-size`, `--sample`, `--seed`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from nmt.config import INT_MAX, check_range
from nmt.core.errors import InputError
from nmt.core.files import atomic_write, read_lines, resolve_text
from nmt.core.progress import Progress, ProgressFn

# Vocabulary sizes the learners handle sensibly: youtokentome's run time grows linearly with
# vocab_size even when the data runs out of merges (1e9 takes minutes).
MIN_VOCAB_SIZE = 5
MAX_VOCAB_SIZE = 1 << 24

_SAMPLE_BLOCK = 4096  # lines drawn for at once by reservoir_sample; part of its seeded stream


def check_train_args(vocab_size: int, sample: int | None, coverage: float, seed: int = 1) -> None:
    """InputError/ConfigError naming the option unless every value is in range."""
    if not MIN_VOCAB_SIZE <= vocab_size <= MAX_VOCAB_SIZE:
        raise InputError(
            f"`vocab_size` {vocab_size} is out of range; use {MIN_VOCAB_SIZE}..{MAX_VOCAB_SIZE} "
            "(37000 is the paper's joint English-German vocabulary)"
        )
    if sample is not None and not 1 <= sample <= INT_MAX:
        raise InputError(f"`sample` {sample} must be a positive number of lines (or omitted)")
    check_range("`seed`", seed, 0, INT_MAX)  # numpy's generators refuse negative seeds
    if not 0.0 < coverage <= 1.0:
        raise InputError(f"--coverage {coverage} must be in (0, 1]")


def input_lines(inputs: list[Path], progress: ProgressFn) -> Iterator[str]:
    """Every non-blank line of every input, in order, reporting lines read."""
    done = 0
    for path in inputs:
        for line in read_lines(path):
            done += 1
            if done % 100_000 == 0:
                progress(Progress(task="bpe read", done=done, unit="lines"))
            if line.strip():
                yield line
    progress(Progress(task="bpe read", done=done, total=done, unit="lines"))


def training_text(inputs: list[Path], sample: int | None, seed: int,
                  progress: ProgressFn) -> tuple[list[Path], Iterable[str]]:
    """The inputs found (`data/train.en` also finds `data/train.en.gz`) and their lines, read only when
    iterated: all of them, streamed, or a seeded sample of `sample` lines (held until the iteration ends)."""
    if not inputs:
        raise InputError("no training text given; pass files to `nmt bpe --train`")
    paths = [resolve_text(p) for p in inputs]
    lines = input_lines(paths, progress)
    return paths, (lines if sample is None else _sampled(lines, sample, seed))


def _sampled(lines: Iterator[str], n: int, seed: int) -> Iterator[str]:
    yield from reservoir_sample(lines, n, seed)


def reservoir_sample(lines: Iterable[str], n: int, seed: int) -> list[str]:
    """A uniform sample of `n` lines (all of them when fewer), the same for the same seed.

    Algorithm R with the random draws vectorised: line k (from 0) replaces slot j, drawn
    uniformly from 0..k, when j < n.  Lines are read in blocks of 4096, so it holds at most
    n + 4096 lines, and Python touches only the lines that enter the sample.
    """
    it = iter(lines)
    sample = list(itertools.islice(it, n))
    if len(sample) < n:
        return sample
    rng = np.random.default_rng(seed)
    k = n  # number of the next line
    while block := list(itertools.islice(it, _SAMPLE_BLOCK)):
        slots = rng.integers(0, np.arange(k + 1, k + 1 + len(block), dtype=np.int64))
        hits = np.flatnonzero(slots < n)
        for i, j in zip(hits.tolist(), slots[hits].tolist()):
            sample[j] = block[i]
        k += len(block)
        del block  # before the next block is read
    return sample


def save_trained(out: Path, data: bytes, got: int, wanted: int, kind: str, progress: ProgressFn) -> None:
    """Write a trained subword model to `out` (atomically), with a warning where the data allowed fewer
    pieces (`got`) than `vocab_size` asked (`wanted`): the smaller model is still usable."""
    if got < wanted:
        progress(Progress(task="bpe", message=f"the data allows only {got} {kind} tokens, fewer than `vocab_size` "
                                              f"{wanted}; pass a smaller `vocab_size` to silence this"))
    with atomic_write(out) as f:
        f.write(data)
