"""nmt.text.segment against hand-made models whose segmentations can be worked out by hand: BPE merges (with
dropout) and a unigram lattice (with sampling), and the bookkeeping from lines to words and back."""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pytest

from nmt.text.segment import Merges, Unigram, by_line, index_words

WORDS = re.compile(r"[^ \n]+|\n")


def test_words_are_indexed_once_and_put_back_by_line():
    words, occ, occ_line = index_words(["a b a", "", "b c", "a\nd"], WORDS)
    assert words == ["a", "b", "c", "d"]
    assert occ.tolist() == [0, 1, 0, 1, 2, 0, 3] and occ_line.tolist() == [0, 0, 0, 2, 2, 3, 3]
    tokens = np.array([10, 11, 10, 11, 12, 10, 13])
    assert by_line(tokens, np.ones(7, np.int64), occ_line, 4) == [[10, 11, 10], [], [11, 12], [10, 13]]


# Symbols a 0, b 1, c 2; rule 0 merges b+c into 3 ("bc"), rule 1 a+b into 4 ("ab"), rule 2 a+3 into 5 ("abc").
RULES = np.array([[1, 2, 3], [0, 1, 4], [0, 3, 5]])


@pytest.mark.parametrize("word, expect", [
    ([0, 1, 2], [5]),  # b+c first (rule 0), then a+bc
    ([0, 1], [4]),
    ([0, 1, 0, 1], [4, 4]),  # two merges of one rule, the leftmost first
    ([2, 0, 1, 2], [2, 5]),
    ([1, 1], [1, 1]),  # no rule
    ([9, 0, 1], [9, 4]),  # an id no rule knows (an unknown character)
])
def test_merges_take_the_first_rule_first(word, expect):
    merges = Merges(RULES[:, 0], RULES[:, 1], RULES[:, 2], np.arange(3), base=10)
    tokens, per_occ = merges.segment([word], np.array([0]), 0.0, np.random.default_rng(0))
    assert tokens.tolist() == expect and per_occ.tolist() == [len(expect)]


def test_merge_dropout_skips_merges_with_its_probability():
    """"abc" at p: the first step has two candidates, b+c (rule 0) and a+b (rule 1), each kept with 1-p. b+c
    kept: then a+bc, kept with 1-p, else "a bc"; b+c dropped and a+b kept: "ab c" (no rule follows); both
    dropped: "a b c"."""
    merges = Merges(RULES[:, 0], RULES[:, 1], RULES[:, 2], np.arange(3), base=10)
    p, n = 0.3, 20000
    tokens, per_occ = merges.segment([[0, 1, 2]], np.zeros(n, np.int64), p, np.random.default_rng(1))
    found = Counter(tuple(x) for x in np.split(tokens, np.cumsum(per_occ)[:-1]))
    expect = {(5,): (1 - p) ** 2, (0, 3): (1 - p) * p, (4, 2): p * (1 - p), (0, 1, 2): p * p}
    assert set(found) == set(expect)
    assert all(abs(found[k] / n - q) < 0.01 for k, q in expect.items())
    tokens, _ = merges.segment([[0, 1, 2]], np.zeros(5, np.int64), 0.999999, np.random.default_rng(1))
    assert tokens.tolist() == [0, 1, 2] * 5


# Pieces a, b, ab with log probabilities; "c" is no piece (unknown: 100 + ord("c")).
PIECES = {"a": (0, math.log(0.3)), "b": (1, math.log(0.2)), "ab": (2, math.log(0.5))}


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.1])
def test_unigram_samples_paths_by_their_probability_to_the_alpha(alpha):
    """"ab" is a+b (0.3 * 0.2 = 0.06) or ab (0.5): P(ab) = 0.5^alpha / (0.5^alpha + 0.06^alpha)."""
    unigram = Unigram(PIECES, unknown_score=-10.0, unknown_base=100)
    n = 20000
    tokens, per_occ = unigram.segment(["ab"], np.zeros(n, np.int64), alpha, np.random.default_rng(2))
    found = Counter(tuple(x) for x in np.split(tokens, np.cumsum(per_occ)[:-1]))
    assert set(found) == {(0, 1), (2,)}
    assert abs(found[(2,)] / n - 0.5 ** alpha / (0.5 ** alpha + 0.06 ** alpha)) < 0.01


def test_unigram_spells_unknown_characters_and_keeps_occurrences_in_order():
    unigram = Unigram(PIECES, unknown_score=-10.0, unknown_base=100)
    words, occ, occ_line = index_words(["cab c", "", "a"], WORDS)
    tokens, per_occ = unigram.segment(words, occ, 1.0, np.random.default_rng(3))
    lines = by_line(tokens, per_occ, occ_line, 3)
    assert lines[1:] == [[], [0]] and lines[0][-1] == 100 + ord("c") and lines[0][0] == 100 + ord("c")
    assert lines[0][1:-1] in ([2], [0, 1])
