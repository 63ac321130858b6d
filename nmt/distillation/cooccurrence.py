"""A lexical shortlist learnt from a prepared store's training split (`learn_shortlist`): for each source id the
K target ids likeliest to be needed in a sentence that holds it, and the F most frequent target ids.

The score is p(t|s) = c(s, t) / c(s), counted in sentences (c(s, t): pairs whose source holds s and whose
target holds t), among the targets that are not always allowed anyway: it is the chance that a sentence holding
s needs t, which is what the coverage of a shortlist counts, and no place of a row goes to a frequent token
that every batch may output already. Ties go to the smaller id, so the same data gives the same table.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from nmt.core.errors import ConfigError, ref
from nmt.core.vocab import SPECIALS
from nmt.data.dataset import ParallelDataset

NONE = -1  # a row's unused places (as nmt.model.shortlist reads them)
# The most a table may take (V x top int32), in the checkpoint and in memory: beyond, --top asks for more than a
# shortlist is for (a row of thousands of targets restricts nothing), and would be stored with every copy of the model.
MAX_TABLE_BYTES = 256 << 20
CHUNK_PAIRS = 4_000_000  # (source, target) id pairs counted at once: memory stays ~100 MB on any corpus


def frequent_targets(data: ParallelDataset, count: int) -> np.ndarray:
    """The specials, then the `count` most frequent target ids of `data` (by tokens; ties: the smaller id). (F,)"""
    vocab = int(data.meta["vocab_size"])
    inside = np.zeros(len(data.tokens) + 1, np.int64)  # +1 at each target's start, -1 after its end
    np.add.at(inside, data.tgt_offsets, 1)
    np.add.at(inside, data.tgt_offsets + data.tgt_lengths, -1)
    counts = np.bincount(np.asarray(data.tokens)[np.cumsum(inside)[:-1] > 0], minlength=vocab).astype(np.int64)
    counts[list(SPECIALS)] = -1  # listed first, whatever their counts
    order = np.lexsort((np.arange(vocab), -counts))
    found = [int(t) for t in order[:count] if counts[t] > 0]
    return np.array([*SPECIALS, *found], np.int32)


def sentence_pairs(data: ParallelDataset, allowed: np.ndarray, src_count: np.ndarray) -> Iterator[np.ndarray]:
    """Keys s * V + t of each pair's distinct (source id, target id) with t not `allowed` already, in chunks of
    about CHUNK_PAIRS; adds 1 to `src_count` (V,) for each source id of each pair (c(s), in the same pass)."""
    vocab = int(data.meta["vocab_size"])
    keys: list[np.ndarray] = []
    size = 0
    for i in range(len(data)):
        src, tgt = (np.unique(side.astype(np.int64)) for side in data[i])
        src_count[src] += 1
        src, tgt = src[src >= len(SPECIALS)], tgt[~allowed[tgt]]  # no rows for the specials (never sources)
        if src.size and tgt.size:
            keys.append((src[:, None] * vocab + tgt[None, :]).reshape(-1))
            size += keys[-1].size
        if size >= CHUNK_PAIRS:
            yield np.concatenate(keys)
            keys, size = [], 0
    if keys:
        yield np.concatenate(keys)


def learn_shortlist(data: ParallelDataset, top: int, frequent: int) -> tuple[np.ndarray, np.ndarray]:
    """The table (V, W) int32 of each source id's best `top` target ids by p(t|s) (NONE where it has fewer; W, at
    most `top`, is the most any source id has: a wider table would hold nothing more) and the always allowed ids
    (F,) int32 (the specials and the `frequent` most frequent targets) of `data`. ConfigError naming `top` where the
    table would take more than MAX_TABLE_BYTES."""
    if top < 1 or frequent < 0:
        raise ConfigError(f"{ref('top')} {top} / {ref('frequent')} {frequent}: give top >= 1 and frequent >= 0")
    vocab = int(data.meta["vocab_size"])
    always = frequent_targets(data, frequent)
    allowed = np.zeros(vocab, bool)
    allowed[always] = True
    keys, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
    src_count = np.zeros(vocab, np.int64)  # c(s): sentences holding s
    for chunk in sentence_pairs(data, allowed, src_count):  # merge each chunk's counts into the running ones
        keys, inverse = np.unique(np.concatenate([keys, chunk]), return_inverse=True)
        counts = np.bincount(inverse, np.concatenate([counts, np.ones(chunk.size, np.int64)])).astype(np.int64)
    src, tgt = keys // vocab, keys % vocab
    p = counts / np.maximum(src_count[src], 1)
    order = np.lexsort((tgt, -p, src))  # by source, then p(t|s) down, then the smaller target id
    src, tgt = src[order], tgt[order]
    place = np.arange(src.size) - np.searchsorted(src, src, side="left")  # each pair's place in its source's run
    width = min(top, int(place.max()) + 1 if place.size else 1)
    if vocab * width * 4 > MAX_TABLE_BYTES:
        raise ConfigError(f"{ref('top')} {top}: a table of {vocab:,} source ids x {width:,} targets would take "
                          f"{vocab * width * 4 / 2**20:,.0f} MiB (at most {MAX_TABLE_BYTES >> 20} MiB); a shortlist "
                          f"keeps the few likeliest targets of each source id: give {ref('top')} 50 or so")
    keep = place < width
    table = np.full((vocab, width), NONE, np.int32)
    table[src[keep], place[keep]] = tgt[keep]
    return table, always
