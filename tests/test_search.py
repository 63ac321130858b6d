"""Greedy and beam search against a hand-built model whose probabilities are a table, then the real model.

Vocabulary of the table model: PAD 0, UNK 1, BOS 2, EOS 3, "a" 4, "b" 5. Every expected hypothesis
and score below is worked out by hand in the comments; lenpen 0 means scores are plain log-probabilities.
"""

import math
from dataclasses import dataclass

import pytest
import torch

from nmt.config import ModelConfig
from nmt.core.vocab import BOS, EOS, PAD, UNK
from nmt.engines.search import (
    SearchConfig,
    argmax_by_chunks,
    beam_search,
    beam_step,
    greedy_search,
    length_penalty,
    max_lengths,
    restrict_tokens,
    search,
    select_alive,
    top_totals_by_chunks,
)
from nmt.model.transformer import Transformer

A, B_ = 4, 5  # the tokens "a" and "b"
V = 6
NEG_INF = float("-inf")
log = math.log




@dataclass
class TableState:
    sid: torch.Tensor  # (N,) the sentence id of each hypothesis
    prefix: torch.Tensor  # (N, t)

    def select(self, index):
        return TableState(self.sid[index], self.prefix[index])

    def expand(self, k):
        return self.select(torch.arange(self.sid.size(0)).repeat_interleave(k))


class TableModel:
    """P(next token | sentence, generated prefix) read from a table.

    The sentence id is the first source token. tables[sid][prefix] is {token: prob}, prefix being the
    generated tokens after BOS; tables[sid][None] is the default for prefixes not listed (used by
    dead beams and by the "loop" sentences).
    """

    def __init__(self, tables, max_steps=500):
        self.tables = tables
        self.steps = 0
        self.rows = []  # hypotheses fed at each step
        self.max_steps = max_steps  # a search that does not stop fails instead of hanging

    def start_decoding(self, src):
        return TableState(src[:, 0].clone(), src.new_zeros(src.size(0), 0))

    def step(self, tokens, state):
        prefix = state.prefix = torch.cat([state.prefix, tokens[:, None]], dim=1)
        self.steps += 1
        self.rows.append(tokens.size(0))
        if self.steps > self.max_steps:
            raise RuntimeError(f"search did not stop after {self.max_steps} steps")
        out = torch.full((tokens.size(0), V), NEG_INF)
        for n in range(tokens.size(0)):
            assert prefix[n, 0].item() == BOS
            table = self.tables[state.sid[n].item()]
            dist = table.get(tuple(prefix[n, 1:].tolist()), table.get(None, {EOS: 1.0}))
            assert sum(dist.values()) == pytest.approx(1.0)
            for token, p in dist.items():
                out[n, token] = log(p)
        return out


# sentence id (first source token) -> table
SIMPLE, LOSES, EARLY, LENPEN, LOOP, SPECIAL = 10, 11, 12, 13, 14, 15
TABLES = {
    SIMPLE: {
        (): {A: 0.6, B_: 0.3, EOS: 0.1},
        (A,): {B_: 0.7, EOS: 0.2, A: 0.1},
        (B_,): {A: 0.8, EOS: 0.2},
        (A, B_): {EOS: 0.9, A: 0.1},
        (B_, A): {EOS: 0.75, B_: 0.25},
    },
    LOSES: {  # greedy takes "a" (0.6) but "b" (0.4) then EOS (0.9) is better
        (): {A: 0.6, B_: 0.4},
        (A,): {EOS: 0.4, A: 0.35, B_: 0.25},
        (B_,): {EOS: 0.9, A: 0.1},
    },
    EARLY: {  # EOS is in the top 2 at the first step; the beams go on and find something better
        (): {A: 0.5, EOS: 0.3, B_: 0.2},
        (A,): {A: 0.8, EOS: 0.2},
        (B_,): {B_: 0.6, EOS: 0.4},
        (A, A): {EOS: 0.9, A: 0.1},
        (B_, B_): {EOS: 0.7, B_: 0.3},
    },
    LENPEN: {  # a short hypothesis with the better log-prob, a longer one that wins once normalised
        (): {A: 0.5, EOS: 0.4, B_: 0.1},
        (A,): {A: 0.9, EOS: 0.1},
        (B_,): {B_: 0.6, EOS: 0.4},
        (A, A): {EOS: 0.8, A: 0.2},
        (B_, B_): {EOS: 0.7, B_: 0.3},
    },
    LOOP: {None: {A: 0.5, B_: 0.3, UNK: 0.15, EOS: 0.05}},  # never wants EOS, not even in a beam of 3
    SPECIAL: {  # PAD and BOS are the most likely tokens, and must never come out
        (): {PAD: 0.4, BOS: 0.3, A: 0.2, EOS: 0.1},
        (A,): {PAD: 0.5, BOS: 0.3, EOS: 0.15, B_: 0.05},
        None: {PAD: 0.9, BOS: 0.1},
    },
}


def src_of(*sids, extra=0):
    """One source per sentence id: [sid, 7 * extra..., EOS] (|x| = 1 + extra), right-padded."""
    rows = [[sid] + [7] * extra + [EOS] for sid in sids]
    return torch.tensor(rows)


def run(fn, sids, **cfg):
    cfg = {"beam": 2, "lenpen": 0.0, "nbest": 10, **cfg}
    return fn(TableModel(TABLES), src_of(*sids), SearchConfig(**cfg), 1024)


def as_tuples(hyps):
    return [(h.tokens, h.log_prob) for h in hyps]


def assert_hyps(hyps, expected, tol=1e-5):
    """expected: list of (tokens, log_prob[, score])."""
    assert [h.tokens for h in hyps] == [e[0] for e in expected]
    for h, e in zip(hyps, expected):
        assert h.log_prob == pytest.approx(e[1], abs=tol)
        assert h.score == pytest.approx(e[2] if len(e) > 2 else e[1], abs=tol)


# -- greedy ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "sid, tokens, log_prob",
    [
        (SIMPLE, [A, B_], log(0.6) + log(0.7) + log(0.9)),
        (LOSES, [A], log(0.6) + log(0.4)),  # greedy's mistake: a, EOS = 0.24 < b, EOS = 0.36
        (EARLY, [A, A], log(0.5) + log(0.8) + log(0.9)),
        (LENPEN, [A, A], log(0.5) + log(0.9) + log(0.8)),
        # PAD and BOS skipped, the rest renormalised (as CTranslate2's suppress_sequences): a 0.2 of 0.3, EOS 0.15 of 0.2
        (SPECIAL, [A], log(0.2 / 0.3) + log(0.15 / 0.2)),
    ],
)
def test_greedy_hand_computed(sid, tokens, log_prob):
    [hyps] = run(greedy_search, [sid], beam=1)
    assert_hyps(hyps, [(tokens, log_prob)])


def test_greedy_batch_of_hand_sentences_keeps_order():
    sids = [LOSES, SIMPLE, SPECIAL, EARLY]
    out = run(greedy_search, sids, beam=1)
    assert [h[0].tokens for h in out] == [[A], [A, B_], [A], [A, A]]


@pytest.mark.parametrize(
    "alpha, kind, length",
    [(1.0, "gnmt", 3), (0.6, "gnmt", 3), (1.0, "power", 3), (0.5, "power", 3)],
)
def test_greedy_score_is_normalised(alpha, kind, length):
    [[hyp]] = run(greedy_search, [SIMPLE], beam=1, lenpen=alpha, lenpen_type=kind)
    lp = log(0.6) + log(0.7) + log(0.9)
    penalty = ((5 + length) / 6) ** alpha if kind == "gnmt" else length ** alpha  # a, b, EOS: 3 tokens
    assert hyp.log_prob == pytest.approx(lp, abs=1e-5)
    assert hyp.score == pytest.approx(lp / penalty, abs=1e-5)


# -- beam ------------------------------------------------------------------------------------------

def test_beam2_simple():
    # t0: a .6, b .3 (EOS .1 third) -> alive a, b
    # t1: ab .42, ba .24, aEOS .12, aa/bEOS .06 -> alive ab, ba
    # t2: abEOS .378, baEOS .18, bab .06, aba .042 -> both EOS in the top 2: finished, done
    [hyps] = run(beam_search, [SIMPLE])
    assert_hyps(hyps, [([A, B_], log(0.6 * 0.7 * 0.9)), ([B_, A], log(0.3 * 0.8 * 0.75))])


def test_beam2_beats_greedy_first_choice():
    # t0: a .6, b .4; t1: bEOS .36, aEOS .24, aa .21, ab .15 -> two EOS in the top 2: done
    [hyps] = run(beam_search, [LOSES])
    assert_hyps(hyps, [([B_], log(0.4) + log(0.9)), ([A], log(0.6) + log(0.4))])
    [[greedy]] = run(greedy_search, [LOSES], beam=1)
    assert greedy.tokens == [A] and hyps[0].score > greedy.score


def test_beam2_eos_finalized_early_while_beams_continue():
    # t0: a .5, EOS .3, b .2 -> [] finished (.3); alive a .5, b .2
    # t1: aa .4, bb .12, aEOS .1, bEOS .08 -> no EOS in the top 2; alive aa, bb
    # t2: aaEOS .36, bbEOS .084, aaa .04, bbb .036 -> [a a] finished; the sentence now has K = 2
    #     hypotheses, so bbEOS (also in the top 2) is not added
    [hyps] = run(beam_search, [EARLY])
    assert_hyps(hyps, [([A, A], log(0.5 * 0.8 * 0.9)), ([], log(0.3))])


def test_beam3_hand_computed():
    # t0 (only 3 finite candidates: a, EOS, b) -> [] finished (.3); alive a .5, b .2, one dead beam
    # t1: aa .4, bb .12, aEOS .1 in the top 3 -> [a] finished (.1); alive aa, bb, (dead)
    # t2: aaEOS .36, bbEOS .084, aaa .04 -> [a a] finished, K = 3 reached, bbEOS left out
    [hyps] = run(beam_search, [EARLY], beam=3)
    assert_hyps(hyps, [([A, A], log(0.36)), ([], log(0.3)), ([A], log(0.5 * 0.2))])


def test_beam_batch_of_hand_sentences():
    out = run(beam_search, [EARLY, LOSES, SIMPLE, SPECIAL])
    assert [as_tuples(h) for h in out] == [
        as_tuples(run(beam_search, [sid])[0]) for sid in (EARLY, LOSES, SIMPLE, SPECIAL)
    ]
    assert [h[0].tokens for h in out] == [[A, A], [B_], [A, B_], [A]]


def test_beam_never_produces_pad_or_bos():
    # t0: a .2, EOS .1 of .3 (PAD .4 and BOS .3 are forbidden) -> [] finished (1/3), alive a (2/3)
    # t1: EOS .15, b .05 of .2 -> [a] finished (2/3 * 3/4 = 1/2): K reached; [a] is the better
    [hyps] = run(beam_search, [SPECIAL])
    assert_hyps(hyps, [([A], log(0.2 / 0.3) + log(0.15 / 0.2)), ([], log(0.1 / 0.3))])


@pytest.mark.parametrize("fn, beam", [(greedy_search, 1), (beam_search, 1), (beam_search, 2), (beam_search, 4)])
def test_pad_and_bos_never_produced_on_loop(fn, beam):
    tables = {LOOP: {None: {PAD: 0.5, BOS: 0.3, A: 0.1, B_: 0.06, EOS: 0.04}}}
    [hyps] = fn(TableModel(tables), src_of(LOOP, extra=2), SearchConfig(beam=beam, max_len_a=1, max_len_b=3, nbest=4),
                1024)
    assert hyps
    for h in hyps:
        assert PAD not in h.tokens and BOS not in h.tokens and EOS not in h.tokens
        assert len(h.tokens) <= 6


# -- length penalty --------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "length, alpha, kind, expected",
    [
        (1, 0.6, "gnmt", 1.0),  # (5 + 1) / 6 = 1
        (7, 1.0, "gnmt", 2.0),  # 12 / 6
        (7, 0.5, "gnmt", math.sqrt(2.0)),
        (13, 2.0, "gnmt", 9.0),  # (18 / 6)^2
        (10, 0.6, "gnmt", 2.5 ** 0.6),
        (10, 0.0, "gnmt", 1.0),
        (4, 1.0, "power", 4.0),
        (9, 0.5, "power", 3.0),
        (2, 3.0, "power", 8.0),
        (10, 0.0, "power", 1.0),
    ],
)
def test_length_penalty_values(length, alpha, kind, expected):
    assert length_penalty(length, alpha, kind) == pytest.approx(expected, rel=1e-9)
    t = length_penalty(torch.tensor([float(length)]), alpha, kind)
    assert t.item() == pytest.approx(expected, rel=1e-6)


def test_length_penalty_unknown_kind():
    with pytest.raises(ValueError, match="wu"):
        length_penalty(3, 0.6, "wu")


# LENPEN sentence, beam 2: t0: a .5, EOS .4, b .1 -> [] finished (.4, length 1); alive a, b
# t1: aa .45, bb .06, aEOS .05, bEOS .04 -> alive aa, bb
# t2: aaEOS .36, aaa .09, bbEOS .042 -> [a a] finished (.36, length 3): done
SHORT, LONG = log(0.4), log(0.5 * 0.9 * 0.8)


@pytest.mark.parametrize(
    "alpha, kind, short_score, long_score",
    [
        (0.0, "gnmt", SHORT, LONG),  # -0.916 > -1.022: the short one wins
        (0.2, "gnmt", SHORT, LONG / (8 / 6) ** 0.2),  # -0.916 > -0.965: still short
        (0.6, "gnmt", SHORT, LONG / (8 / 6) ** 0.6),  # -0.916 < -0.860: long
        (1.0, "gnmt", SHORT, LONG / (8 / 6)),  # -0.766: long
        (1.0, "power", SHORT, LONG / 3),  # -0.341: long
        (0.1, "power", SHORT, LONG / 3 ** 0.1),  # -0.9154 vs -0.9163: long, barely
        (0.05, "power", SHORT, LONG / 3 ** 0.05),  # -0.966: short
    ],
)
def test_length_penalty_changes_the_winner(alpha, kind, short_score, long_score):
    [hyps] = run(beam_search, [LENPEN], lenpen=alpha, lenpen_type=kind)
    expected = [([], SHORT, short_score), ([A, A], LONG, long_score)]
    expected.sort(key=lambda e: -e[2])
    assert_hyps(hyps, expected)


# -- beam_step, select_alive, restrict_tokens as functions -------------------------------------------

def test_beam_step_hand_computed():
    scores = torch.tensor([[-1.0, -2.0], [0.0, NEG_INF]])
    log_probs = torch.tensor([
        [[-0.1, -2.0, -0.5], [-0.2, -0.3, -4.0]],  # totals: b0 -1.1 -3.0 -1.5; b1 -2.2 -2.3 -6.0
        [[-1.0, -0.5, -3.0], [-0.1, -0.1, -0.1]],  # totals: b0 -1.0 -0.5 -3.0; b1 all -inf
    ])
    cand_scores, beams, tokens = beam_step(scores, log_probs)
    assert cand_scores.shape == beams.shape == tokens.shape == (2, 4)
    torch.testing.assert_close(cand_scores[0], torch.tensor([-1.1, -1.5, -2.2, -2.3]), atol=1e-6, rtol=0)
    assert beams[0].tolist() == [0, 0, 1, 1]
    assert tokens[0].tolist() == [0, 2, 0, 1]
    torch.testing.assert_close(cand_scores[1, :3], torch.tensor([-0.5, -1.0, -3.0]), atol=1e-6, rtol=0)
    assert beams[1, :3].tolist() == [0, 0, 0] and tokens[1, :3].tolist() == [1, 0, 2]
    assert cand_scores[1, 3].item() == NEG_INF and beams[1, 3].item() == 1


@pytest.mark.parametrize("K, Vs, n", [(1, 5, 2), (3, 1, 3), (2, 2, 4), (1, 1, 1)])
def test_beam_step_candidate_count(K, Vs, n):
    cand_scores, beams, tokens = beam_step(torch.zeros(1, K), torch.randn(1, K, Vs))
    assert cand_scores.shape == (1, n)
    assert (beams < K).all() and (tokens < Vs).all()
    assert (cand_scores[:, :-1] >= cand_scores[:, 1:]).all()


def test_top_totals_by_chunks_hand_computed():
    # V = 5 in chunks of 2: [0, 1], [2, 3] and the shorter [4].
    scores = torch.tensor([[-1.0, -2.0]])
    log_probs = torch.tensor([[[-0.5, -3.0, -0.2, -4.0, -0.1],  # totals -1.5 -4.0 -1.2 -5.0 -1.1
                               [-0.3, -0.4, -5.0, -0.6, -2.5]]])  # totals -2.3 -2.4 -7.0 -2.6 -4.5
    # Chunk maxima + score: beam 0: -1.5, -1.2, -1.1; beam 1: -2.3, -2.6, -4.5. The best 4 chunks are
    # beam 0's three and beam 1's first; their tokens' best 4 totals are the best 4 of all ten.
    cand_scores, flat = top_totals_by_chunks(scores, log_probs, 4, chunk=2)
    torch.testing.assert_close(cand_scores, torch.tensor([[-1.1, -1.2, -1.5, -2.3]]), atol=1e-6, rtol=0)
    assert flat.tolist() == [[4, 2, 0, 5]]  # beam * V + token


@pytest.mark.parametrize("B, K, V, n, chunk", [(3, 4, 1000, 8, 64), (2, 4, 1024, 8, 64), (5, 1, 700, 8, 16),
                                               (2, 3, 97, 6, 4), (4, 2, 50, 5, 3)])
def test_beam_step_two_passes_equal_one_top_k(B, K, V, n, chunk):
    g = torch.Generator().manual_seed(B * V + n)
    log_probs = torch.randn(B, K, V, generator=g).log_softmax(-1)
    scores = -torch.rand(B, K, generator=g) * 3
    scores[0, 1:] = NEG_INF  # dead beams (as at the first step, or when too few candidates were alive)
    log_probs[-1, :, :] = NEG_INF  # a sentence at its limit: EOS only
    log_probs[-1, :, EOS] = torch.tensor([-0.5] * K)
    assert 4 * n * chunk <= K * V  # beam_step takes the two passes
    one = (scores[:, :, None] + log_probs).view(B, K * V).topk(min(n, K * V), dim=1)
    two = top_totals_by_chunks(scores, log_probs, n, chunk)
    assert torch.equal(two[0], one.values)  # the same sums, not just close
    finite = torch.isfinite(one.values)  # the order of equal (-inf, or ties) candidates is arbitrary
    assert torch.equal(two[1][finite], one.indices[finite])
    assert (two[1] >= 0).all() and (two[1] < K * V).all()
    cand_scores, beams, tokens = beam_step(scores, log_probs, n, chunk=chunk)
    assert torch.equal(cand_scores, one.values) and torch.equal((beams * V + tokens)[finite], one.indices[finite])


@pytest.mark.parametrize("V, chunk", [(17, 4), (16, 4), (300, 64), (10, 4)])
def test_argmax_by_chunks(V, chunk):
    g = torch.Generator().manual_seed(V)
    x = torch.randn(6, V, generator=g)
    x[1, [3, 4]] = 9.0  # a tie across two chunks: the first one wins, as with argmax
    x[2, [5, 6]] = 9.0  # a tie within a chunk
    x[3, V - 1] = 9.0  # in the last (maybe shorter) chunk
    x[4] = NEG_INF  # nothing possible: position 0, as argmax
    assert argmax_by_chunks(x, chunk).tolist() == x.argmax(-1).tolist()
    assert argmax_by_chunks(x, chunk)[1:5].tolist() == [3, 5, V - 1, 0]


def test_select_alive_skips_eos():
    cand_scores = torch.tensor([[-0.1, -0.2, -0.3, -0.4], [-0.1, -0.2, -0.3, -0.4]])
    cand_beams = torch.tensor([[0, 1, 0, 1], [1, 0, 1, 0]])
    cand_tokens = torch.tensor([[EOS, A, EOS, B_], [EOS, EOS, EOS, A]])
    scores, beams, tokens = select_alive(cand_scores, cand_beams, cand_tokens, 2)
    assert tokens[0].tolist() == [A, B_] and beams[0].tolist() == [1, 1]
    torch.testing.assert_close(scores[0], torch.tensor([-0.2, -0.4]))
    # only one non-EOS candidate: it stays alive, and the other slot is dead (-inf)
    alive = torch.isfinite(scores[1])
    assert alive.sum() == 1
    assert tokens[1][alive].tolist() == [A] and beams[1][alive].tolist() == [0]
    assert scores[1][alive].tolist() == pytest.approx([-0.4])


def test_restrict_tokens():
    lp = torch.log(torch.tensor([[[0.3, 0.1, 0.2, 0.15, 0.25, 0.0]], [[0.3, 0.1, 0.2, 0.15, 0.25, 0.0]]]))
    out = restrict_tokens(lp.clone(), torch.tensor([False, True]))
    assert out[0, 0, PAD].item() == NEG_INF and out[0, 0, BOS].item() == NEG_INF
    # PAD .3 and BOS .2 out: the rest renormalised over .5 (as CTranslate2's suppress_sequences)
    assert out[0, 0, A].item() == pytest.approx(log(0.5)) and out[0, 0, UNK].item() == pytest.approx(log(0.2))
    assert torch.isinf(out[1, 0, [0, 1, 2, 4, 5]]).all()
    assert out[1, 0, EOS].item() == pytest.approx(log(0.3))  # forced, with its renormalised log-probability


# -- maximum length --------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "rows, a, b, max_positions, expected",
    [
        ([[5, 6, 7, EOS]], 1.5, 10, 1024, [14]),  # |x| = 3: int(4.5) + 10
        ([[5, EOS, PAD, PAD]], 1.5, 10, 1024, [11]),  # PAD and EOS not counted: int(1.5) + 10
        ([[EOS]], 1.5, 10, 1024, [10]),  # empty sentence
        ([[5, 6, 7, 8, 9, EOS]], 1.2, 0, 1024, [6]),
        ([[5, 6, 7, EOS], [5, EOS, PAD, PAD]], 2.0, 3, 1024, [9, 5]),
        ([[5, 6, 7, EOS]], 2.0, 3, 8, [7]),  # capped so BOS + output fits 8 positions
        ([[5, 6, 7, EOS]], 0.0, 0, 1024, [1]),  # at least one token
        ([[5] * 10 + [EOS]], 0.5, 1, 1024, [6]),
    ],
)
def test_max_lengths_values(rows, a, b, max_positions, expected):
    assert max_lengths(torch.tensor(rows), a, b, max_positions).tolist() == expected


@pytest.mark.parametrize("fn, beam", [(greedy_search, 1), (beam_search, 2), (beam_search, 3)])
@pytest.mark.parametrize(
    "extra, a, b, max_positions, limit",
    [(3, 1.5, 2, 1024, 8), (2, 0.5, 1, 1024, 2), (0, 1.0, 4, 1024, 5), (5, 2.0, 3, 10, 9)],
)
def test_stops_at_max_length_with_eos_forced(fn, beam, extra, a, b, max_positions, limit):
    # LOOP: a .5 > b .3 > UNK .15 > EOS .05 at every step, so the best is a^limit + forced EOS; with
    # K <= 3 EOS never reaches the top K before the limit (a^(t+1) .5^(t+1), then ties at .5^t * .3).
    # |x| = 1 + extra (the sentence id counts as a token).
    cfg = SearchConfig(beam=beam, lenpen=0.0, max_len_a=a, max_len_b=b, nbest=beam)
    [hyps] = fn(TableModel(TABLES), src_of(LOOP, extra=extra), cfg, max_positions)
    assert hyps[0].tokens == [A] * limit
    assert hyps[0].log_prob == pytest.approx(limit * log(0.5) + log(0.05), abs=1e-4)
    if beam > 1:  # the runner-up has one b in place of an a (which one is a tie)
        assert len(hyps) == beam
        assert all(len(h.tokens) == limit for h in hyps)
        for h in hyps[1:]:
            assert h.log_prob == pytest.approx((limit - 1) * log(0.5) + log(0.3) + log(0.05), abs=1e-4)


@pytest.mark.parametrize("fn, beam", [(greedy_search, 1), (beam_search, 2)])
def test_stops_at_max_length_even_if_eos_is_impossible(fn, beam):
    # The model gives EOS probability 0 (log-prob -inf), so forcing EOS at the limit leaves every
    # token at -inf. The search must still stop at the limit (|x| = 1: limit 1 + 2 = 3).
    model = TableModel({LOOP: {None: {A: 1.0}}}, max_steps=20)
    cfg = SearchConfig(beam=beam, lenpen=0.0, max_len_a=1.0, max_len_b=2, nbest=1)
    [hyps] = fn(model, src_of(LOOP), cfg, 1024)
    assert model.steps <= 4  # BOS + 3 tokens
    for h in hyps:
        assert len(h.tokens) <= 3 and PAD not in h.tokens


@pytest.mark.parametrize("fn, beam", [(greedy_search, 1), (beam_search, 2)])
def test_max_length_per_sentence_in_a_batch(fn, beam):
    src = torch.tensor([[LOOP, 7, 7, 7, 7, EOS], [LOOP, EOS, PAD, PAD, PAD, PAD], [SIMPLE, EOS, PAD, PAD, PAD, PAD]])
    cfg = SearchConfig(beam=beam, lenpen=0.0, max_len_a=1.0, max_len_b=2, nbest=1)
    out = fn(TableModel(TABLES), src, cfg, 1024)
    assert [h[0].tokens for h in out] == [[A] * 7, [A] * 3, [A, B_]]


@pytest.mark.parametrize("fn, beam", [(greedy_search, 1), (beam_search, 2), (beam_search, 3)])
def test_finished_sentences_leave_the_batch(fn, beam):
    # SIMPLE ends at step 2 (t = 0, 1, 2); LOOP with |x| = 4 runs to its limit 1 * 4 + 2 = 6 (t = 0..6).
    model = TableModel(TABLES)
    src = torch.tensor([[SIMPLE, EOS, PAD, PAD, PAD], [LOOP, 7, 7, 7, EOS]])
    out = fn(model, src, SearchConfig(beam=beam, lenpen=0.0, max_len_a=1.0, max_len_b=2), 1024)
    assert [h[0].tokens for h in out] == [[A, B_], [A] * 6]
    # The first step runs once per sentence (all beams start identical); then 2 sentences x beam
    # rows until SIMPLE ends after t = 2, then LOOP's beam alone.
    assert model.rows == [2] + [2 * beam] * 2 + [beam] * 4


def test_beam_stops_when_no_beam_is_alive():
    # Only EOS is possible: one hypothesis [] at t0, every other beam is dead, nothing left to expand.
    model = TableModel({LOOP: {None: {EOS: 1.0}}})
    [hyps] = beam_search(model, src_of(LOOP), SearchConfig(beam=3, lenpen=0.0, nbest=3), 1024)
    assert_hyps(hyps, [([], 0.0)])
    assert model.steps == 1


# -- nbest -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("nbest, expected_tokens", [(1, [[A, A]]), (2, [[A, A], []]), (3, [[A, A], [], [A]]),
                                                    (5, [[A, A], [], [A]])])
def test_nbest_hand(nbest, expected_tokens):
    [hyps] = run(beam_search, [EARLY], beam=3, nbest=nbest)
    assert [h.tokens for h in hyps] == expected_tokens


def test_search_dispatch():
    model = TableModel(TABLES)
    greedy = search(model, src_of(LOSES), SearchConfig(beam=1, nbest=1, lenpen=0.0), 1024)
    beam = search(model, src_of(LOSES), SearchConfig(beam=2, nbest=1, lenpen=0.0), 1024)
    assert greedy[0][0].tokens == [A] and beam[0][0].tokens == [B_]
    beam1_nbest = search(model, src_of(LOSES), SearchConfig(beam=1, nbest=2, lenpen=0.0), 1024)
    assert [h.tokens for h in beam1_nbest[0]] == [[A]]  # beam 1 keeps one hypothesis


# -- the real Transformer --------------------------------------------------------------------------

RV, RMAXPOS = 24, 64


@pytest.fixture(scope="module")
def real_model():
    torch.manual_seed(3)
    cfg = ModelConfig(vocab_size=RV, d_model=32, n_heads=4, encoder_layers=2, decoder_layers=2, d_ff=64,
                      dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, max_positions=RMAXPOS)
    model = Transformer(cfg.validate()).eval()
    with torch.no_grad():  # make EOS likelier, so hypotheses end at different steps
        model.embed.weight[EOS] *= 6.0
    return model


def real_sources():
    g = torch.Generator().manual_seed(5)
    lengths = [4, 9, 1, 6, 2]
    rows = [torch.randint(4, RV, (n,), generator=g).tolist() + [EOS] for n in lengths]
    width = max(map(len, rows))
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows]), rows


def teacher_forced_log_prob(model, src_row, tokens):
    """What the model says of `tokens` as the search reads it: PAD and BOS out, the rest renormalised."""
    src = torch.tensor([src_row])
    tgt = torch.tensor([[BOS] + tokens])
    with torch.no_grad():
        lp = model(src, tgt).log_softmax(-1)[0]  # (T, V)
        lp[:, [PAD, BOS]] = float("-inf")
        lp = lp - lp.logsumexp(-1, keepdim=True)
    return sum(lp[i, t].item() for i, t in enumerate(tokens + [EOS]))


@pytest.mark.parametrize("beam", [1, 3, 4])
@pytest.mark.parametrize("lenpen", [0.0, 0.6])
def test_batched_equals_one_at_a_time(real_model, beam, lenpen):
    src, rows = real_sources()
    cfg = SearchConfig(beam=beam, lenpen=lenpen, max_len_a=1.0, max_len_b=4, nbest=beam)
    batched = beam_search(real_model, src, cfg, RMAXPOS)
    for row, hyps in zip(rows, batched):
        [alone] = beam_search(real_model, torch.tensor([row]), cfg, RMAXPOS)
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        for h, g in zip(hyps, alone):
            assert h.score == pytest.approx(g.score, abs=1e-4)
            assert h.log_prob == pytest.approx(g.log_prob, abs=1e-4)
        for h in hyps:  # scores are what the model says about these tokens
            lp = teacher_forced_log_prob(real_model, row, h.tokens)
            assert h.log_prob == pytest.approx(lp, abs=1e-4)
            assert h.score == pytest.approx(lp / length_penalty(len(h.tokens) + 1, lenpen), abs=1e-4)
            assert PAD not in h.tokens and BOS not in h.tokens and EOS not in h.tokens
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert 1 <= len(hyps) <= beam
    # the EOS boost makes the test meaningful: some hypotheses end before their limit, some do not
    lengths = {len(h.tokens) for hyps in batched for h in hyps}
    assert len(lengths) > 2


def test_greedy_batched_equals_one_at_a_time(real_model):
    src, rows = real_sources()
    cfg = SearchConfig(beam=1, lenpen=0.6, max_len_a=1.0, max_len_b=4)
    batched = greedy_search(real_model, src, cfg, RMAXPOS)
    assert len({len(h[0].tokens) for h in batched}) > 1
    for row, [hyp] in zip(rows, batched):
        [[alone]] = greedy_search(real_model, torch.tensor([row]), cfg, RMAXPOS)
        assert hyp.tokens == alone.tokens
        assert hyp.score == pytest.approx(alone.score, abs=1e-4)
        lp = teacher_forced_log_prob(real_model, row, hyp.tokens)
        assert hyp.log_prob == pytest.approx(lp, abs=1e-4)
        # greedy: each token is the arg-max (PAD and BOS excluded) of the teacher-forced distribution
        with torch.no_grad():
            dist = real_model(torch.tensor([row]), torch.tensor([[BOS] + hyp.tokens])).log_softmax(-1)[0]
        dist[:, [PAD, BOS]] = NEG_INF
        limit = max_lengths(torch.tensor([row]), 1.0, 4, RMAXPOS).item()
        expected = dist.argmax(-1).tolist()
        if len(hyp.tokens) == limit:
            expected[-1] = EOS  # forced
        assert hyp.tokens + [EOS] == expected


@pytest.mark.parametrize("lenpen", [0.0, 1.0])
def test_beam1_equals_greedy(real_model, lenpen):
    src, _ = real_sources()
    cfg = SearchConfig(beam=1, lenpen=lenpen, max_len_a=1.0, max_len_b=4, nbest=1)
    greedy = greedy_search(real_model, src, cfg, RMAXPOS)
    beam = beam_search(real_model, src, cfg, RMAXPOS)
    for g, b in zip(greedy, beam):
        assert g[0].tokens == b[0].tokens
        assert g[0].score == pytest.approx(b[0].score, abs=1e-4)
        assert g[0].log_prob == pytest.approx(b[0].log_prob, abs=1e-4)


@pytest.mark.parametrize("nbest", [1, 2, 4])
def test_nbest_real_model(real_model, nbest):
    src, _ = real_sources()
    cfg = SearchConfig(beam=4, lenpen=0.6, max_len_a=1.0, max_len_b=4, nbest=nbest)
    out = beam_search(real_model, src, cfg, RMAXPOS)
    full = beam_search(real_model, src, SearchConfig(beam=4, lenpen=0.6, max_len_a=1.0, max_len_b=4, nbest=4), RMAXPOS)
    for hyps, all_hyps in zip(out, full):
        assert 1 <= len(hyps) <= nbest
        assert [h.tokens for h in hyps] == [h.tokens for h in all_hyps[:nbest]]
        scores = [h.score for h in all_hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in all_hyps}) == len(all_hyps)  # distinct hypotheses


class CopiedSource:
    """The real model with a state whose `expand` copies each hypothesis' source rows instead of sharing
    one row per sentence: the plain layout that the shared one must match."""

    def __init__(self, model):
        self.model = model

    def start_decoding(self, src):
        return CopiedState(self.model.start_decoding(src))

    def step(self, tokens, state):
        return self.model.step(tokens, state.inner)


@dataclass(frozen=True)
class CopiedState:
    inner: object

    def select(self, index):
        return CopiedState(self.inner.select(index))

    def expand(self, k):
        rows = torch.arange(self.inner.prefix.size(0)).repeat_interleave(k)
        copied = self.inner.select(rows)
        assert copied.source.group == 1 and copied.source.mask.size(0) == rows.numel()  # really copied
        return CopiedState(copied)


@pytest.mark.parametrize("beam, nbest", [(2, 2), (4, 1), (4, 4)])
def test_shared_source_equals_copied_source(real_model, beam, nbest):
    """Sharing the source between a sentence's beams (and the deferred cache reordering) gives the
    hypotheses and log-probabilities of copying it per hypothesis."""
    src, _ = real_sources()
    cfg = SearchConfig(beam=beam, lenpen=0.6, max_len_a=1.0, max_len_b=6, nbest=nbest)
    shared = beam_search(real_model, src, cfg, RMAXPOS)
    copied = beam_search(CopiedSource(real_model), src, cfg, RMAXPOS)
    for a, b in zip(shared, copied):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.log_prob for h in a] == pytest.approx([h.log_prob for h in b], abs=1e-4)


# -- the table of decoding options -----------------------------------------------------------------


def test_every_search_option_has_one_row_of_the_decoding_table():
    """A field added to SearchConfig needs its row in nmt.engines.decoding (what each engine and the server
    do with it): the engines and the server read the options from there."""
    import dataclasses

    from nmt.engines.decoding import OPTIONS

    rows = [o.field for o in OPTIONS]
    assert sorted(rows) == sorted(f.name for f in dataclasses.fields(SearchConfig))
    assert len(rows) == len(set(rows))


def test_the_torch_functions_of_each_row_read_its_field():
    """Each row names the functions of nmt.engines.search that read its field (`cfg.<field>`)."""
    import ast
    import inspect

    import nmt.engines.search as search_module
    from nmt.engines.decoding import OPTIONS

    tree = ast.parse(inspect.getsource(search_module))
    reads = {f.name: {n.attr for n in ast.walk(f) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, ast.Name) and n.value.id == "cfg"}
             for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
    for option in OPTIONS:
        assert option.torch, option.field
        for function in option.torch:
            assert option.field in reads[function], (option.field, function)


@pytest.mark.parametrize("cfg, options", [
    (SearchConfig(beam=5), {"beam_size": 5, "num_hypotheses": 5}),
    (SearchConfig(beam=5, nbest=2), {"beam_size": 5, "num_hypotheses": 5}),
    (SearchConfig(beam=1, sampling=True, nbest=3, topk=7, topp=0.5, temperature=0.8),
     {"beam_size": 1, "num_hypotheses": 3, "sampling_topk": 7, "sampling_topp": 0.5, "sampling_temperature": 0.8}),
])
def test_the_table_gives_ctranslate2_its_keywords(cfg, options):
    """The rows' translate_batch keywords (the sampling ones for sampling only: CTranslate2 reads them in
    beam search too)."""
    from nmt.engines.decoding import OPTIONS

    given: dict = {}
    for option in OPTIONS:
        given.update(option.ct2_options(cfg))
    assert given == options


# -- without early stopping: transformers' rule ----------------------------------------------------

GOES_ON, AT_LIMIT = 16, 17
STOPPING = {
    GOES_ON: {  # two hypotheses end by t = 1, yet the running "a a" (0.54), ended now, would beat the worse of them
        (): {A: 0.6, EOS: 0.25, B_: 0.15},
        (A,): {A: 0.9, EOS: 0.1},
        (B_,): {EOS: 1.0},
        (A, A): {EOS: 0.9, A: 0.1},
    },
    AT_LIMIT: {None: {A: 0.6, B_: 0.3, EOS: 0.1}},  # never ends before its limit in a beam of 2
}


def stopping_run(sid, early_stopping, **cfg):
    model = TableModel(STOPPING)
    cfg = {"beam": 2, "lenpen": 1.0, "lenpen_type": "power", "nbest": 2, "early_stopping": early_stopping, **cfg}
    [hyps] = beam_search(model, src_of(sid), SearchConfig(**cfg), 1024)
    return hyps, model.steps


def test_early_stopping_ends_once_beam_hypotheses_have_ended():
    # t0: top 2 of a .6, EOS .25, b .15: [] ends (log .25); a and b run.
    # t1: a a .54, b EOS .15, a EOS .06: [b] ends (log .15, score / 2): 2 ended, the search is over.
    hyps, steps = stopping_run(GOES_ON, True)
    assert_hyps(hyps, [([B_], log(0.15), log(0.15) / 2), ([], log(0.25), log(0.25))])
    assert steps == 2


def test_without_early_stopping_a_running_beam_that_could_win_goes_on():
    # After t1 the worst kept score is [] (log .25 = -1.386); the running a a, ended now at length 2, would
    # score log .54 / 2 = -0.308 > -1.386: go on. t2: a a EOS (.486) ends, score log .486 / 3 = -0.241; kept
    # [a a] -0.241 and [b] -0.949; the running a a a (.054) would score log .054 / 3 = -0.973 <= -0.949: over.
    hyps, steps = stopping_run(GOES_ON, False)
    assert_hyps(hyps, [([A, A], log(0.486), log(0.486) / 3), ([B_], log(0.15), log(0.15) / 2)])
    assert steps == 3


@pytest.mark.parametrize("early_stopping, eos", [(True, log(0.1)), (False, 0.0)])
def test_the_eos_forced_at_the_limit_scores_0_without_early_stopping(early_stopping, eos):
    # Limit 1: t0 a .6 and b .3 run (EOS .1 is third); t1 forces EOS, with log .1 (nmt's rule) or 0 (transformers').
    hyps, steps = stopping_run(AT_LIMIT, early_stopping, max_len_a=0.0, max_len_b=1)
    assert_hyps(hyps, [([A], log(0.6) + eos, (log(0.6) + eos) / 2), ([B_], log(0.3) + eos, (log(0.3) + eos) / 2)])
    assert steps == 2


def test_restrict_tokens_free_eos():
    log_probs = torch.log(torch.tensor([[[0.1, 0.1, 0.1, 0.2, 0.3, 0.2]]]))
    out = restrict_tokens(log_probs.clone(), torch.tensor([True]), free_eos=True)
    assert out[0, 0].tolist() == [NEG_INF, NEG_INF, NEG_INF, 0.0, NEG_INF, NEG_INF]


def test_keep_best_hand_computed():
    # K 2, t 1 (length 2), len^1: only the top K candidates count; EOS -2.0 -> -1.0 joins the kept -1.0;
    # "a" does not end; EOS -4.0 is third, out of the top K.
    from nmt.engines.search import keep_best

    kept = torch.tensor([[-1.0, NEG_INF]])
    cfg = SearchConfig(beam=2, lenpen=1.0, lenpen_type="power", early_stopping=False)
    out = keep_best(kept, torch.tensor([[-2.0, -3.0, -4.0, -5.0]]), torch.tensor([[EOS, A, EOS, A]]), 1, cfg)
    assert out.tolist() == [[-1.0, -1.0]]


@pytest.mark.parametrize("early_stopping, expected", [(True, [True, True, False, True]),
                                                      (False, [False, True, False, True])])
def test_beam_done_hand_computed(early_stopping, expected):
    # t 1 (length 2), len^1: the best running beams' bounds -0.5, -1.5, -0.5, and a dead sentence (-inf).
    # Sentence 0: -0.5 > -0.6 goes on without early stopping; 1: -1.5 <= -1.4 is over; 2: one ended only.
    from nmt.engines.search import beam_done

    scores = torch.tensor([[-1.0, -2.0], [-3.0, -4.0], [-1.0, -2.0], [NEG_INF, NEG_INF]])
    n_finished = torch.tensor([2, 2, 1, 0])
    worst = torch.tensor([-0.6, -1.4, NEG_INF, NEG_INF])
    cfg = SearchConfig(beam=2, lenpen=1.0, lenpen_type="power", early_stopping=early_stopping)
    done = beam_done(scores, n_finished, torch.tensor([False] * 4), worst, 1, cfg)
    assert done.tolist() == expected


def test_best_hypotheses_by_score_without_early_stopping():
    from nmt.engines.search import Hypothesis, best_hypotheses

    hyps = [Hypothesis([A], -1.0, -1.0), Hypothesis([A, A, A], -0.5, -2.0), Hypothesis([B_], -0.9, -0.9)]
    assert [h.tokens for h in best_hypotheses(hyps, 2, 2)] == [[B_], [A]]  # the 2 likeliest, by score
    assert [h.tokens for h in best_hypotheses(hyps, 2, 2, likeliest=False)] == [[A, A, A], [B_]]


@pytest.mark.parametrize("beam", [2, 3])
def test_without_early_stopping_batched_equals_one_at_a_time(beam):
    sids = [SIMPLE, LOSES, EARLY, LENPEN, LOOP]
    cfg = SearchConfig(beam=beam, lenpen=1.0, lenpen_type="power", nbest=beam, max_len_a=0.0, max_len_b=6,
                       early_stopping=False)
    together = beam_search(TableModel(TABLES), src_of(*sids), cfg, 1024)
    alone = [beam_search(TableModel(TABLES), src_of(sid), cfg, 1024)[0] for sid in sids]
    assert [as_tuples(h) for h in together] == [as_tuples(h) for h in alone]
