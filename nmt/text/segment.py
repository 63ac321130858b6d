"""Subword segmentation with sampling, in numpy: the engines behind `Tokenizer.encode(..., dropout, seed)`.

- `Merges`: BPE's merges, with BPE-dropout (Provilkov et al., 2020); youtokentome models (nmt/text/bpe.py) and
  SentencePiece BPE models (nmt/text/spm.py) give it their merge rules.
- `Unigram`: a unigram model's lattice of pieces, sampled as Kudo (2018) does (SentencePiece's
  `enable_sampling` with `nbest_size=-1`): forward filtering, backward sampling.

Both draw from a numpy generator that the caller seeds, so a seed gives the same segmentation in every process:
a resumed run and every rank see what an uninterrupted run would have. The libraries' own samplers cannot
promise that (youtokentome's cannot be seeded; SentencePiece's is salted per process).

Both work on words, and segment all the words of a batch of lines at once: a line's segmentation is its words'
one after the other, as with any model whose pieces never span a word boundary (a caller whose model has such
pieces passes each line as one word).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

# Words whose lattices a `Unigram` keeps (a few hundred bytes each): Multi30k has some 30,000, a corpus of WMT's
# size millions; past this many the cache starts again (it only saves time: samples do not depend on it).
CACHED_WORDS = 1 << 19


def index_words(lines: Sequence[str], word_or_end: re.Pattern[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The distinct words of `lines` and where they occur: (words, occ (W,), occ_line (W,)), each occurrence's
    word number and line, in reading order. `word_or_end` matches a word, or the newline that ends a line."""
    text = "\n".join(lines)
    if text.count("\n") != len(lines) - 1:  # a line holding a newline: whitespace inside it
        text = "\n".join(line.replace("\n", " ") for line in lines)
    index: defaultdict[str, int] = defaultdict()
    index.default_factory = index.__len__  # each new word gets the next number
    index["\n"]  # number 0: the end of a line
    found = np.fromiter(map(index.__getitem__, word_or_end.findall(text)), np.int64)
    is_end = found == 0
    return list(index)[1:], found[~is_end] - 1, np.cumsum(is_end)[~is_end]


def by_line(tokens: np.ndarray, per_occ: np.ndarray, occ_line: np.ndarray, n_lines: int) -> list[list[int]]:
    """`tokens` (T,), the ids of all word occurrences back to back (`per_occ` (W,) of them each), as one list
    per line."""
    per_line = np.bincount(occ_line, weights=per_occ, minlength=n_lines).astype(np.int64)
    ends = np.cumsum(per_line).tolist()
    flat = tokens.tolist()
    return [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]


def _expand(first: np.ndarray, counts: np.ndarray, occ: np.ndarray) -> np.ndarray:
    """Indices that copy, for each occurrence, its word's run `first[word]` .. + `counts[word]`."""
    n = counts[occ]
    return np.repeat(first[occ] - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))


class Merges:
    """BPE's segmentation of words, with BPE-dropout, over all the words of a batch at once.

    Rules: the pair (`left[r]`, `right[r]`) merges into `merged[r]`; among the pairs of a word the one of lowest
    `rank[r]` merges first (the leftmost on ties), one per step, until no rule applies; a pair listed twice
    keeps its last row. Ids must be below `base`. BPE-dropout: at each step every applicable merge is skipped
    with probability p, the first one kept is made, and the word is finished when all are skipped (p=1 gives
    the starting symbols).
    """

    def __init__(self, left: np.ndarray, right: np.ndarray, merged: np.ndarray, rank: np.ndarray, base: int):
        self.base = base
        codes = left.astype(np.int64) * base + right
        order = np.lexsort((-np.arange(len(codes)), codes))  # by pair code for searchsorted; the last row first
        codes = codes[order]
        first = np.ones(len(codes), bool)
        first[1:] = codes[1:] != codes[:-1]
        self.codes = codes[first]
        self.rank = np.asarray(rank, np.int64)[order[first]]
        self.merged = np.asarray(merged, np.int64)[order[first]]

    def _rules(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """(N,) int32: for each pair (left, right), its row in `codes`, or -1 when no rule merges it."""
        if not len(self.codes):
            return np.full(len(left), -1, np.int32)
        code = left.astype(np.int64) * self.base + right
        j = np.searchsorted(self.codes, code)
        np.minimum(j, len(self.codes) - 1, out=j)
        return np.where(self.codes[j] == code, j, -1).astype(np.int32)

    def segment(self, words: list[list[int]], occ: np.ndarray, p: float,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Segment each occurrence `occ` (W,) of the distinct `words` (their starting ids): (T,) int64 ids of
        all occurrences back to back, in order, and (W,) how many each has. The draws follow the occurrences'
        order, so a seed gives the same result."""
        if not len(occ):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        word_len = np.fromiter(map(len, words), np.int64, len(words))
        word_start = np.cumsum(word_len) - word_len
        chars = np.fromiter((i for w in words for i in w), np.int64, int(word_len.sum()))
        rule = np.full(len(chars), -1, np.int32)  # the rule of each pair (-1: none, or the end of a word)
        rule[:-1] = self._rules(chars[:-1], chars[1:])
        rule[word_start + word_len - 1] = -1

        # Without dropout every occurrence of a word splits alike: segment each distinct word once.
        units = np.arange(len(words)) if p == 0 else occ
        gather = _expand(word_start, word_len, units)
        unit = np.repeat(np.arange(len(units), dtype=np.int32), word_len[units])
        tok, pair = chars[gather], rule[gather]
        out_tok, out_unit = self._merge(tok, pair, unit, len(units), p, rng)

        order = np.argsort(out_unit, kind="stable")  # each unit's tokens together, in order
        out_tok = out_tok[order]
        per_unit = np.bincount(out_unit, minlength=len(units)).astype(np.int64)
        if p == 0:  # from distinct words back to occurrences
            out_tok = out_tok[_expand(np.cumsum(per_unit) - per_unit, per_unit, occ)]
            per_unit = per_unit[occ]
        return out_tok, per_unit

    def _merge(self, tok: np.ndarray, pair: np.ndarray, unit: np.ndarray, n_units: int, p: float,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Merge every unit (word) to the end: one merge per unit and step. `tok`, `pair`, `unit` are (T,):
        the tokens of all units back to back, the rule row of each token and the next (-1: none), and the
        unit of each token. Returns the final tokens and their units, grouped by the step they finished in."""
        done_tok, done_unit = [], []
        while len(tok):
            size = len(tok)
            cand = np.flatnonzero(pair >= 0)
            if p > 0:
                cand = cand[rng.random(len(cand)) >= p]
            merging = np.zeros(n_units, bool)
            keep = np.ones(size, bool)
            chosen = cand[:0]
            if len(cand):
                cu = unit[cand]
                starts = np.flatnonzero(np.r_[True, cu[1:] != cu[:-1]])
                # Per unit, the candidate whose rule comes first, then the leftmost: one key, one reduceat.
                key = self.rank[pair[cand]] * size + cand
                chosen = np.minimum.reduceat(key, starts) % size
                tok[chosen] = self.merged[pair[chosen]]
                keep[chosen + 1] = False
                merging[cu[starts]] = True
            live = merging[unit]  # a unit that merged nothing this step is finished
            finished = ~live & keep
            done_tok.append(tok[finished])
            done_unit.append(unit[finished])
            live &= keep
            moved_to = np.cumsum(live) - 1
            tok, pair, unit = tok[live], pair[live], unit[live]
            if len(chosen):  # the pairs on either side of each merged token are new
                c = moved_to[chosen]
                after = np.minimum(c + 1, len(tok) - 1)
                right = c[(c + 1 < len(tok)) & (unit[after] == unit[c])]
                pair[c] = -1
                pair[right] = self._rules(tok[right], tok[right + 1])
                left = c[c > 0]
                left = left[unit[left - 1] == unit[left]] - 1
                pair[left] = self._rules(tok[left], tok[left + 1])
        return np.concatenate(done_tok), np.concatenate(done_unit)


class Unigram:
    """A unigram model's segmentations of words, sampled.

    `pieces`: each piece's text, id and score (a log probability). Every path through a word's lattice (the
    pieces that spell it, and `unknown(char)` with `unknown_score` where no one-character piece does) is a
    segmentation; a sample is one path drawn with probability proportional to exp(alpha * its total score),
    so alpha 1 is the model's distribution and a smaller alpha a flatter one.
    """

    def __init__(self, pieces: dict[str, tuple[int, float]], unknown_score: float, unknown_base: int):
        self.pieces, self.unknown_score, self.unknown_base = pieces, unknown_score, unknown_base
        self.longest = max(map(len, pieces), default=1)
        # Per word, for one alpha: its lattice's nodes by end position (ids, start positions, the probability of
        # each node given that the path reaches its end, cumulated per end): built once, sampled every epoch.
        # The alpha and its words are replaced as one tuple, so a thread sampling with another alpha never
        # puts its lattices among this one's.
        self._cache: tuple[float, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = (math.nan, {})

    def unknown(self, char: str) -> int:
        """The id that stands for an unknown character (above every piece's id)."""
        return self.unknown_base + ord(char)

    def _lattice(self, word: str, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ids, starts, cumulated conditional probabilities, node count per end position 1..len(word))."""
        ids: list[int] = []
        starts: list[int] = []
        scores: list[float] = []
        counts: list[int] = []
        forward = [0.0]  # log of the summed weight of all paths to each position
        for end in range(1, len(word) + 1):
            before = len(ids)
            for start in range(max(0, end - self.longest), end):
                found = self.pieces.get(word[start:end])
                if found is not None:
                    ids.append(found[0])
                    starts.append(start)
                    scores.append(alpha * found[1] + forward[start])
            if not any(s == end - 1 for s in starts[before:]):
                ids.append(self.unknown(word[end - 1]))
                starts.append(end - 1)
                scores.append(alpha * self.unknown_score + forward[end - 1])
            here = scores[before:]
            top = max(here)
            forward.append(top + math.log(sum(math.exp(x - top) for x in here)))
            counts.append(len(ids) - before)
        n = np.array(counts, np.int64)
        running = np.cumsum(np.exp(np.array(scores) - np.repeat(np.array(forward[1:]), n)))
        cum = running - np.repeat(np.r_[0.0, running][np.cumsum(n) - n], n)  # cumulated within each end position
        return np.array(ids, np.int64), np.array(starts, np.int64), cum, n

    def segment(self, words: list[str], occ: np.ndarray, alpha: float,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Sample a segmentation of each occurrence `occ` (W,) of the distinct `words`: (T,) int64 ids of all
        occurrences back to back, in order, and (W,) how many each has. Draws follow the occurrences' order."""
        cached_alpha, cache = self._cache
        if cached_alpha != alpha or len(cache) > CACHED_WORDS:
            cache = {}
            self._cache = (alpha, cache)
        for word in words:
            if word not in cache:
                cache[word] = self._lattice(word, alpha)
        if not len(occ):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        lattices = [cache[w] for w in words]
        # All words' nodes in one table: segment g = (word, end position) holds the nodes that end there, and
        # `key` = g + cumulated probability rises through the table, so one searchsorted draws for all.
        ids, starts, cum, counts = (np.concatenate(part) for part in zip(*lattices))
        length = np.fromiter((len(lat[3]) for lat in lattices), np.int64, len(words))
        seg_base = np.cumsum(length) - length  # the segment of (word, end position 1)
        seg_first = np.cumsum(counts) - counts
        key = np.repeat(np.arange(len(counts)), counts) + np.minimum(cum, 1.0)

        # Backward sampling: every occurrence starts at its word's end and draws the node that ends there.
        active = np.arange(len(occ))
        pos = length[occ]
        picked_occ, picked_id, picked_step = [], [], []
        step = 0
        while len(active):
            seg = seg_base[occ[active]] + pos - 1
            u = rng.random(len(active))
            node = np.searchsorted(key, seg + u, side="right")
            node = np.clip(node, seg_first[seg], seg_first[seg] + counts[seg] - 1)  # rounding at the top
            picked_occ.append(active)
            picked_id.append(ids[node])
            picked_step.append(np.full(len(active), step))
            pos = starts[node]
            more = pos > 0
            active, pos = active[more], pos[more]
            step += 1
        at, tok, steps = (np.concatenate(x) for x in (picked_occ, picked_id, picked_step))
        order = np.lexsort((-steps, at))  # per occurrence, from its first piece (drawn last) on
        return tok[order], np.bincount(at, minlength=len(occ)).astype(np.int64)
