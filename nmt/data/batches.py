"""Token-based batches: group pairs of similar length so padding is small, then collate.

A pair costs len+1 tokens on each side (src gets EOS; tgt_in gets BOS, tgt_out EOS).
A batch of B pairs padded to the longest side costs B * max(padded src, padded tgt) and
stays within `max_tokens` (the paper's ~25000 source + 25000 target tokens per batch).
Batch composition and order vary per epoch but are fixed by (seed, epoch), so every
rank of a distributed run computes the same batches without talking to the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from nmt.core.errors import InputError
from nmt.core.vocab import BOS, EOS, PAD

if TYPE_CHECKING:
    from nmt.data.dataset import ParallelDataset


@dataclass
class Batch:
    """Padded tensors of one batch; B pairs, S/T padded lengths including EOS/BOS."""

    src: torch.Tensor  # (B, S) long: ids + [EOS], right-padded with PAD
    tgt_in: torch.Tensor  # (B, T) long: [BOS] + ids, decoder input
    tgt_out: torch.Tensor  # (B, T) long: ids + [EOS], prediction targets
    src_tokens: int  # non-pad tokens in src
    tgt_tokens: int  # non-pad tokens in tgt_out (what the loss is averaged over)
    indices: np.ndarray  # (B,) dataset indices of the pairs

    def to(self, device: torch.device | str) -> Batch:
        """The same batch with its tensors on `device`."""
        return Batch(
            src=self.src.to(device),
            tgt_in=self.tgt_in.to(device),
            tgt_out=self.tgt_out.to(device),
            src_tokens=self.src_tokens,
            tgt_tokens=self.tgt_tokens,
            indices=self.indices,
        )


def _cut(cost: np.ndarray, max_tokens: int, max_sentences: int) -> list[tuple[int, int]]:
    """Greedy [start, end) runs of `cost` (N,) with (end-start) * max(cost[start:end]) <= max_tokens.

    Loops once per batch, not per pair: the running maximum only grows, so a batch
    starting at i has at most max_tokens // cost[i] pairs and one vectorised look at
    that window finds where it must end.
    """
    runs = []
    n, i = len(cost), 0
    while i < n:
        window = min(n - i, max_sentences, max(1, max_tokens // int(cost[i])))
        padded = np.maximum.accumulate(cost[i : i + window]) * np.arange(1, window + 1)
        size = max(1, int(np.searchsorted(padded, max_tokens, side="right")))  # over-long pair: alone
        runs.append((i, i + size))
        i += size
    return runs


def make_batches(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    max_tokens: int,
    max_sentences: int | None = None,
    shuffle: bool = True,
    seed: int = 1,
    epoch: int = 0,
) -> list[np.ndarray]:
    """Index arrays (int64) of batches covering every pair exactly once.

    Lengths are (N,) BPE tokens without specials.  Pairs are sorted by (tgt, src) length with
    a random tie-break and cut greedily under the token budget; with `shuffle` the batch order
    is then shuffled too.  The same (seed, epoch) always gives the same batches.
    """
    if max_tokens < 1:
        raise InputError(f"`max_tokens` {max_tokens} must be positive")
    if max_sentences is not None and max_sentences < 1:
        raise InputError(f"--max-sentences {max_sentences} must be positive (or omitted)")
    src_cost = np.asarray(src_lengths, dtype=np.int64) + 1  # + EOS
    tgt_cost = np.asarray(tgt_lengths, dtype=np.int64) + 1  # + BOS / EOS
    assert src_cost.shape == tgt_cost.shape and src_cost.ndim == 1, "length arrays differ"
    n = len(src_cost)
    if n == 0:
        return []
    rng = np.random.default_rng((seed, epoch))
    # Sort by (tgt, src) length; a stable sort of a random permutation breaks ties at random,
    # so buckets of equal-length pairs differ between epochs (and it is 2x faster than lexsort).
    key = tgt_cost * (int(src_cost.max()) + 1) + src_cost
    if key.max() < 1 << 16:
        key = key.astype(np.uint16)  # numpy's stable sort is a radix sort for 16-bit keys
    perm = rng.permutation(n) if shuffle else np.arange(n)
    order = perm[np.argsort(key[perm], kind="stable")]
    cost = np.maximum(src_cost, tgt_cost)[order]
    runs = _cut(cost, max_tokens, max_sentences or n)
    batches = [order[a:b] for a, b in runs]
    if shuffle:
        batches = [batches[k] for k in rng.permutation(len(batches))]
    return batches


def sample_parts(counts: Sequence[int], temperature: float, seed: int = 1, epoch: int = 0) -> np.ndarray:
    """Indices (int64) of one epoch's pairs of a store of several parts (language pairs, `counts` pairs each, one
    after the other): as many pairs as the store holds, part i's share in proportion to n_i^(1/T) (Arivazhagan
    et al. 2019). A part drawn more often than it has pairs repeats every pair as often as it can and draws the
    rest without replacement; a part drawn less often draws without replacement. Fixed by (seed, epoch).
    """
    n = np.asarray(counts, dtype=np.float64)
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    weights = np.where(n > 0, (n / total) ** (1.0 / temperature), 0.0)
    wanted = np.floor(weights / weights.sum() * total).astype(np.int64)
    wanted[np.argsort(-(weights / weights.sum() * total - wanted), kind="stable")[: total - int(wanted.sum())]] += 1
    rng = np.random.default_rng((seed, epoch, 7))
    starts = np.cumsum(n, dtype=np.int64) - n.astype(np.int64)
    drawn = []
    for start, size, want in zip(starts.tolist(), n.astype(np.int64).tolist(), wanted.tolist()):
        if size == 0:
            continue
        whole, rest = divmod(want, size)
        drawn += [np.arange(start, start + size, dtype=np.int64)] * whole
        drawn.append(start + rng.choice(size, rest, replace=False).astype(np.int64))
    return np.concatenate(drawn)


def shard(batches: list[np.ndarray], rank: int, world_size: int) -> list[np.ndarray]:
    """This rank's share: batches rank, rank+W, rank+2W, ... after evening out the count.

    Every rank must take the same number of steps, so when len(batches) is not a multiple
    of world_size the largest batches are split in two (keeping each half in place) until
    it is: shares stay disjoint and still cover every pair once.  Only when there are
    too few pairs to split (fewer pairs than ranks) are the first batches repeated.
    """
    if not 0 <= rank < world_size:
        raise InputError(f"rank {rank} is outside world size {world_size}")
    if not batches:
        return []
    batches = list(batches)
    need = -len(batches) % world_size
    while need:
        sizes = np.array([len(b) for b in batches])
        # Stable sort: equal sizes split in order, so every rank picks the same batches.
        largest = np.argsort(-sizes, kind="stable")[:need]
        split = {int(k): np.array_split(batches[k], 2) for k in largest if sizes[k] > 1}
        if not split:
            break
        batches = [part for k, b in enumerate(batches) for part in split.get(k, [b])]
        need = -len(batches) % world_size
    # Degenerate tiny data (fewer pairs than ranks): repeat batches to even out.
    batches += [batches[k % len(batches)] for k in range(need)]
    return batches[rank::world_size]


def group_updates(batches: list[np.ndarray], tgt_lengths: np.ndarray, update_tokens: int) -> list[list[int]]:
    """Consecutive batches grouped so that each group (one update) holds >= update_tokens target tokens.

    Target tokens count EOS; the last group of an epoch may hold fewer.
    """
    groups: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for i, batch in enumerate(batches):
        current.append(i)
        tokens += int(tgt_lengths[batch].sum()) + len(batch)
        if tokens >= update_tokens:
            groups.append(current)
            current, tokens = [], 0
    if current:
        groups.append(current)
    return groups


def collate(dataset: ParallelDataset, indices: np.ndarray, pad: int = PAD) -> Batch:
    """Read pairs `indices` (B,) and build padded src (B, S), tgt_in and tgt_out (B, T) tensors.

    A `ParallelDataset` is read with one vectorised gather per side from its memory-mapped
    flat ids (no Python loop over pairs); any other object that returns `(src, tgt)` id
    arrays from `dataset[i]` works too, pair by pair.
    """
    indices = np.asarray(indices, dtype=np.int64)
    if all(hasattr(dataset, a) for a in ("tokens", "src_offsets", "tgt_offsets", "src_lengths", "tgt_lengths")):
        src_len = np.asarray(dataset.src_lengths[indices], dtype=np.int64)
        tgt_len = np.asarray(dataset.tgt_lengths[indices], dtype=np.int64)
        src_ids = _gather(dataset.tokens, dataset.src_offsets[indices], src_len)
        tgt_ids = _gather(dataset.tokens, dataset.tgt_offsets[indices], tgt_len)
    else:
        pairs = [dataset[int(i)] for i in indices]
        src_len = np.array([len(s) for s, _ in pairs], dtype=np.int64)
        tgt_len = np.array([len(t) for _, t in pairs], dtype=np.int64)
        src_ids = _concat([s for s, _ in pairs])
        tgt_ids = _concat([t for _, t in pairs])
    src = _pad(src_ids, src_len, bos=False, eos=True, pad=pad)
    tgt_out = _pad(tgt_ids, tgt_len, bos=False, eos=True, pad=pad)
    tgt_in = _pad(tgt_ids, tgt_len, bos=True, eos=False, pad=pad)
    return Batch(
        src=torch.from_numpy(src),
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        src_tokens=int(src_len.sum()) + len(indices),
        tgt_tokens=int(tgt_len.sum()) + len(indices),
        indices=indices,
    )


def _concat(seqs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(seqs).astype(np.int64) if seqs else np.zeros(0, np.int64)


def _gather(tokens: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Flat int64 ids of the B runs `tokens[offsets[b] : offsets[b] + lengths[b]]`, back to back."""
    total = int(lengths.sum())
    starts = np.asarray(offsets, dtype=np.int64) - (np.cumsum(lengths) - lengths)
    index = np.repeat(starts, lengths)
    index += np.arange(total, dtype=np.int64)
    return np.asarray(tokens[index], dtype=np.int64)  # one fancy-index read of the memory map


def _pad(flat: np.ndarray, lengths: np.ndarray, eos: bool, bos: bool, pad: int) -> np.ndarray:
    """(B, L+1) int64: each sequence of `flat` (split by `lengths` (B,)) with BOS before or
    EOS after, right-padded with `pad`."""
    out = np.full((len(lengths), int(lengths.max(initial=0)) + 1), pad, dtype=np.int64)
    start = 1 if bos else 0
    # Row-major boolean assignment fills each row's slots in order from the flat ids.
    out[:, start : start + out.shape[1] - 1][np.arange(out.shape[1] - 1) < lengths[:, None]] = flat
    if bos:
        out[:, 0] = BOS
    if eos:
        out[np.arange(len(lengths)), lengths] = EOS
    return out
