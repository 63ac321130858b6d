"""Constrained beam search (nmt/engines/constrained.py) against test_search's hand-built table model, whose
probabilities make each expected hypothesis a hand computation, then the real model."""

import pytest
import torch
from test_search import (
    B_,
    EARLY,
    LENPEN,
    LOSES,
    RMAXPOS,
    SIMPLE,
    TABLES,
    A,
    TableModel,
    V,
    assert_hyps,
    log,
    real_model,  # noqa: F401 (a fixture)
    real_sources,
    src_of,
    teacher_forced_log_prob,
)

from nmt.config import SearchConfig
from nmt.engines.constrained import TermState, allocate, constrained_beam_search
from nmt.engines.search import beam_search


def test_constrained_search_hand_computed():
    """SIMPLE must produce "a a": the only such hypothesis is a (0.6), a (0.1), then EOS (the table's default, 1.0).
    Beam 2, by hand: step 1 keeps "a" (bank 1: a term begun) and "b" (bank 0); step 2 "a a" (bank 2), "b a" (bank 1);
    step 3 "a a" ends, "b a" (whose term needs another a, which the table never gives) goes on as "b a b", whose only
    continuation is an EOS it may not take: nothing else ends."""
    [hyps] = constrained_beam_search(TableModel(TABLES), src_of(SIMPLE), SearchConfig(beam=2, lenpen=0.0), 1024,
                                     [[(A, A)]])
    assert_hyps(hyps, [([A, A], log(0.6) + log(0.1) + log(1.0))])


def test_constrained_search_a_term_ends_its_word():
    """SIMPLE must produce "a", and no "b" may follow it (`joins`: b continues a word): "a b" (0.378) is out, so "a"
    (0.6 * 0.2 = 0.12) and "b a" (0.3 * 0.8 * 0.75 = 0.18) remain, best first. Without `joins`, "a b" wins."""
    joins = torch.zeros(V, dtype=torch.bool)
    joins[B_] = True
    cfg = SearchConfig(beam=2, lenpen=0.0, nbest=2)
    [hyps] = constrained_beam_search(TableModel(TABLES), src_of(SIMPLE), cfg, 1024, [[(A,)]], joins)
    assert_hyps(hyps, [([B_, A], log(0.3) + log(0.8) + log(0.75)), ([A], log(0.6) + log(0.2))])
    [free] = constrained_beam_search(TableModel(TABLES), src_of(SIMPLE), cfg, 1024, [[(A,)]])
    assert free[0].tokens == [A, B_]


def test_constrained_search_without_constraints_is_beam_search():
    """Sentences with no term get what beam search gives them (the table's sentences and the real model's)."""
    for sid in (SIMPLE, LOSES, EARLY, LENPEN):
        cfg = SearchConfig(beam=2, lenpen=0.0)
        [[best]] = [h[:1] for h in constrained_beam_search(TableModel(TABLES), src_of(sid), cfg, 1024, [[]])]
        [[expected]] = [h[:1] for h in beam_search(TableModel(TABLES), src_of(sid), cfg, 1024)]
        assert (best.tokens, best.log_prob) == (expected.tokens, pytest.approx(expected.log_prob))


@pytest.mark.parametrize("met, doing, token, expected", [
    # constraints: 0 = (7, 8), 1 = (9,), 2 = (7, 5)
    ((), None, 4, [((), None, False)]),  # no term begun
    ((), None, 9, [((1,), None, True)]),  # a one-token term: met at once, its word ends here
    ((), None, 7, [((), (0, 1), False), ((), (2, 1), False)]),  # two terms begin with 7: one state each
    ((), (0, 1), 8, [((0,), None, True)]),  # the term under way ends
    ((), (0, 1), 4, [((), None, False)]),  # ... or is dropped
    ((), (0, 1), 9, [((1,), None, True)]),  # dropped, and another begins (and ends) with the token
    ((0,), None, 7, [((0,), (2, 1), False)]),  # a term met is not begun again
    ((0, 1, 2), None, 7, [((0, 1, 2), None, False)]),
])
def test_term_state_after_a_token(met, doing, token, expected):
    constraints = [(7, 8), (9,), (7, 5)]
    after = TermState(frozenset(met), doing).after(token, constraints)
    assert [(tuple(sorted(s.met)), s.doing, s.ended) for s in after] == expected


@pytest.mark.parametrize("banks, k, expected", [
    ({0: [(-1.0, 0), (-2.0, 1), (-3.0, 2)]}, 2, [0, 1]),  # one bank: the best k
    ({0: [(-1.0, 0), (-2.0, 1)], 1: [(-5.0, 2), (-6.0, 3)]}, 2, [2, 0]),  # one slot each, the highest bank first
    ({0: [(-1.0, 0), (-2.0, 1)], 1: [(-5.0, 2), (-6.0, 3)]}, 3, [2, 3, 0]),  # the remainder to the highest bank
    ({0: [(-1.0, 0), (-2.0, 1), (-3.0, 2)], 2: [(-5.0, 3)]}, 3, [3, 0, 1]),  # bank 1's empty slot goes to bank 0
    ({2: [(-5.0, 0)]}, 4, [0]),  # fewer candidates than slots
    ({}, 4, []),
])
def test_allocate_shares_the_beam_among_banks(banks, k, expected):
    assert allocate(banks, k) == expected


@pytest.mark.parametrize("beam", [2, 4])
def test_constrained_search_real_model(real_model, beam):  # noqa: F811
    """Every hypothesis holds its sentence's terms (as contiguous tokens) where its length allows, its scores are what
    the model says of its tokens, and a batch gives what each sentence gives alone."""
    src, rows = real_sources()
    constraints = [[(7, 8)], [(9,), (10, 11)], [], [(12,)], [(13, 14, 15)]]
    cfg = SearchConfig(beam=beam, lenpen=0.6, max_len_a=1.0, max_len_b=6, nbest=beam)
    batched = constrained_beam_search(real_model, src, cfg, RMAXPOS, constraints)
    for row, terms, hyps in zip(rows, constraints, batched):
        [alone] = constrained_beam_search(real_model, torch.tensor([row]), cfg, RMAXPOS, [terms])
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert hyps
        for term in terms:
            held = any(hyps[0].tokens[i : i + len(term)] == list(term) for i in range(len(hyps[0].tokens)))
            assert held, (terms, hyps[0].tokens)
        for h in hyps:
            assert h.log_prob == pytest.approx(teacher_forced_log_prob(real_model, row, h.tokens), abs=1e-4)
