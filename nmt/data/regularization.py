"""Subword regularisation during training: every epoch the training split gets a fresh, sampled
segmentation of its text (BPE-dropout, Provilkov et al. 2020, for BPE models; SentencePiece's sampling,
Kudo 2018, for unigram models), the same for the same seed and epoch in any process, so that a resumed run
sees what it would have seen and every rank samples alike. Validation and test are never regularised.

A prepared store holds ids, not text: the text is the store's ids decoded once by the run's tokenizer (the
text `prepare` encoded, as the tokenizer normalises it). The sampled ids go into an in-memory copy of the
store's layout (`Segmentation`), which batching reads as it reads the memory-mapped store; the next
epoch's segmentation is sampled in a worker thread while the current epoch trains.
"""

from __future__ import annotations

import concurrent.futures
import itertools
from dataclasses import dataclass
from typing import Optional

import numpy as np

from nmt.data.binarize import interleave_pairs, pair_offsets
from nmt.data.dataset import ParallelDataset
from nmt.text.tokenizer import Tokenizer

CHUNK = 2048  # pairs sampled per call (each with its own seed, so the result does not depend on threads)


def check_sampling(tokenizer: Tokenizer, dropout: float) -> None:
    """Raise the tokenizer's error now, at the start, if it cannot sample (say a SentencePiece word model)."""
    if dropout > 0:
        for side in ("source", "target"):
            tokenizer.encode(["a"], side, dropout=dropout)


@dataclass
class Segmentation:
    """One epoch's training split, in `ParallelDataset`'s layout: flat ids, per-pair offsets and lengths."""

    tokens: np.ndarray  # (total,) ids, each pair's source then target
    src_offsets: np.ndarray  # (N,) int64
    tgt_offsets: np.ndarray
    src_lengths: np.ndarray  # (N,) int32, tokens without specials
    tgt_lengths: np.ndarray
    fallbacks: int = 0  # pairs whose sampled segmentation was too long for the model: kept as stored

    def __len__(self) -> int:
        return len(self.src_lengths)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        s, t = self.src_offsets[i], self.tgt_offsets[i]
        return self.tokens[s : s + self.src_lengths[i]], self.tokens[t : t + self.tgt_lengths[i]]


class Resegmenter:
    """Samples the training split's segmentation of each epoch (`dropout` > 0) from the store `data`.

    `max_len`: the longest side the model takes; a pair whose sample is longer keeps its stored ids.
    `seed`: the run's seed; an epoch's sample depends on (seed, epoch) only.
    """

    def __init__(self, data: ParallelDataset, tokenizer: Tokenizer, dropout: float, seed: int, max_len: int):
        check_sampling(tokenizer, dropout)
        self.data, self.tokenizer, self.dropout, self.seed, self.max_len = data, tokenizer, dropout, seed, max_len
        self._texts: Optional[tuple[list[str], list[str]]] = None
        self._tags: list[list[int]] = []  # each source's target-language tag ([] or [id]): kept, never resampled
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nmt-resegment")
        self._ahead: dict[int, concurrent.futures.Future[Segmentation]] = {}

    def texts(self) -> tuple[list[str], list[str]]:
        """The split's source and target text, decoded from the store once."""
        if self._texts is None:
            n = len(self.data)
            pairs = [self.data[i] for i in range(n)]
            size = self.tokenizer.vocab_size  # a store's tags take the ids after the tokenizer's
            self._tags = [[int(s[0])] if len(s) and s[0] >= size else [] for s, _ in pairs]
            self._texts = (self.tokenizer.decode([s[len(tag):].tolist() for (s, _), tag in zip(pairs, self._tags)],
                                                 side="source"),
                           self.tokenizer.decode([t.tolist() for _, t in pairs], side="target"))
        return self._texts

    def epoch(self, epoch: int) -> Segmentation:
        """The segmentation of `epoch` (sampled now, or taken from the worker that sampled it ahead), and the
        next epoch's started in the background."""
        future = self._ahead.pop(epoch, None)
        for other in [e for e in self._ahead if e != epoch + 1]:  # a resume or a restart moved: not wanted now
            stale = self._ahead.pop(other)
            if not stale.cancel():
                concurrent.futures.wait([stale])  # running: let it end rather than sample beside it
        found = future.result() if future is not None else self.sample(epoch)
        if epoch + 1 not in self._ahead:
            self._ahead[epoch + 1] = self._pool.submit(self.sample, epoch + 1)
        return found

    def close(self) -> None:
        for future in self._ahead.values():
            future.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def sample(self, epoch: int) -> Segmentation:
        src_text, tgt_text = self.texts()
        n = len(src_text)
        src: list[list[int]] = []
        tgt: list[list[int]] = []
        for start in range(0, n, CHUNK):
            end = min(start + CHUNK, n)
            seed = (self.seed, epoch, start)
            src += self.tokenizer.encode(src_text[start:end], "source", dropout=self.dropout, seed=(*seed, 0))
            tgt += self.tokenizer.encode(tgt_text[start:end], "target", dropout=self.dropout, seed=(*seed, 1))
        fallbacks = 0
        for i, tag in enumerate(self._tags):
            if tag and src[i]:
                src[i] = tag + src[i]
        for i in range(n):
            if len(src[i]) > self.max_len or len(tgt[i]) > self.max_len or not src[i] or not tgt[i]:
                stored = self.data[i]
                src[i], tgt[i] = stored[0].tolist(), stored[1].tolist()
                fallbacks += 1
        return pack(src, tgt, fallbacks)


def pack(src: list[list[int]], tgt: list[list[int]], fallbacks: int = 0) -> Segmentation:
    """Pairs of id lists in the store's layout (`nmt.data.dataset`): one flat array, each pair's source then its
    target, with offsets."""
    src_len, src_flat = _flat(src)
    tgt_len, tgt_flat = _flat(tgt)
    tokens = interleave_pairs(src_flat, src_len, tgt_flat, tgt_len, np.arange(len(src)))
    return Segmentation(tokens, *pair_offsets(src_len, tgt_len), src_len, tgt_len, fallbacks)


def _flat(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(N,) int32 lengths and the (T,) int32 ids of `ids`, one list after the other."""
    lengths = np.fromiter(map(len, ids), np.int32, len(ids))
    return lengths, np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(lengths.sum(dtype=np.int64)))
