"""Lexically constrained beam search, for glossaries (`--glossary-method constrain`): dynamic beam allocation (Post &
Vilar 2018). Each hypothesis carries which of its sentence's constraints (target token sequences) it has produced
and how far it is into the one it is producing (`TermState`); the beam is shared among "banks" by the number of
constraint tokens produced (`allocate`), so that hypotheses which have begun a term are not pushed out by likelier
ones which have not. The model and its state are `nmt.engines.search`'s (`Decoder`), and so are the conventions:
scores, length limits, PAD and BOS never produced.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from nmt.config import SearchConfig
from nmt.core.vocab import BOS, EOS
from nmt.engines.search import Decoder, Hypothesis, StateT, beam_step, length_penalty, max_lengths, restrict_tokens

Constraint = tuple[int, ...]  # a term's target ids


@dataclass(frozen=True)
class TermState:
    """Where a hypothesis stands with its sentence's constraints: those met (indices), and the one under way
    (index, tokens of it produced) or None."""

    met: frozenset[int] = frozenset()
    doing: Optional[tuple[int, int]] = None
    ended: bool = False  # a term's last token was the last one: the next may not continue its word

    def produced(self, constraints: Sequence[Constraint]) -> int:
        """Constraint tokens produced: the hypothesis' bank."""
        return sum(len(constraints[c]) for c in self.met) + (self.doing[1] if self.doing else 0)

    def done(self, constraints: Sequence[Constraint]) -> bool:
        return self.doing is None and len(self.met) == len(constraints)

    def after(self, token: int, constraints: Sequence[Constraint]) -> list[TermState]:
        """The states after `token`: the term under way goes on where the token is its next one, and is dropped (its
        tokens no longer count) where not; a token that begins an unmet term begins it (one state per such term)."""
        if self.doing is not None:
            c, j = self.doing
            if constraints[c][j] == token:
                if j + 1 == len(constraints[c]):
                    return [TermState(self.met | {c}, ended=True)]
                return [TermState(self.met, (c, j + 1))]
        starts, seen = [], set()
        for c, tokens in enumerate(constraints):
            if c not in self.met and tokens[0] == token and tokens not in seen:  # a repeated term: its first copy
                seen.add(tokens)
                starts.append(TermState(self.met | {c}, ended=True) if len(tokens) == 1
                              else TermState(self.met, (c, 1)))
        return starts or [TermState(self.met)]

    def wanted(self, constraints: Sequence[Constraint]) -> set[int]:
        """The tokens that would take the hypothesis further: the next of the term under way, the first of each unmet
        one."""
        tokens = {constraints[c][0] for c in range(len(constraints)) if c not in self.met}
        if self.doing is not None:
            tokens.add(constraints[self.doing[0]][self.doing[1]])
        return tokens


def allocate(banks: dict[int, list[tuple[float, int]]], k: int) -> list[int]:
    """Dynamic beam allocation: `k` of the candidates (score, id) grouped by bank (constraint tokens produced), each of
    the `n` banks 0..n-1 offered k // n slots (the remainder to the highest), slots a bank cannot fill going to the
    others from the highest bank down; the ids chosen, best score first within each bank."""
    n = max(banks) + 1 if banks else 1
    ranked = {b: sorted(c, key=lambda x: -x[0]) for b, c in banks.items()}
    share = [k // n + (1 if b >= n - k % n else 0) for b in range(n)]
    taken = {b: min(share[b], len(ranked.get(b, []))) for b in range(n)}
    left = k - sum(taken.values())
    while left > 0:
        grew = False
        for b in range(n - 1, -1, -1):
            if left and taken[b] < len(ranked.get(b, [])):
                taken[b] += 1
                left -= 1
                grew = True
        if not grew:
            break
    return [i for b in range(n - 1, -1, -1) for _, i in ranked.get(b, [])[: taken[b]]]


@dataclass
class Beam:
    """One running hypothesis of constrained search."""

    tokens: list[int]  # generated ids, without BOS
    log_prob: float
    term: TermState


@torch.inference_mode()
def constrained_beam_search(model: Decoder[StateT], src: Tensor, cfg: SearchConfig, max_positions: int,
                            constraints: Sequence[Sequence[Constraint]],
                            joins: Optional[Tensor] = None) -> list[list[Hypothesis]]:
    """Beam search of src (B, S) whose hypotheses must contain each of their sentence's `constraints` (target id
    sequences; a sentence may have none), with dynamic beam allocation (Post & Vilar 2018): at each step the
    candidates are the 2K best continuations, each beam's best token and the tokens that take a beam into or through
    a constraint; K of them are kept, shared among banks by constraint tokens produced (`allocate`). EOS may end only
    a hypothesis that has met all its constraints, except at the length limit, where every beam ends; the finished
    hypotheses are ranked by constraints missed, then score. Early stopping: a sentence's search ends once K
    hypotheses have ended. `joins` (V,): the tokens that continue the word before them (no word-start mark, a letter
    or digit first), which may not follow a term: its last word must end where the term does. Up to `cfg.nbest`
    hypotheses per sentence, best first."""
    B, K = src.size(0), cfg.beam
    device = src.device
    state = model.start_decoding(src).expand(K)  # each sentence's K rows: row k runs its beam k
    limits = max_lengths(src, cfg.max_len_a, cfg.max_len_b, max_positions).tolist()
    beams: list[list[Beam]] = [[Beam([], 0.0, TermState())] for _ in range(B)]  # the running ones, at most K
    active = list(range(B))  # the sentence of each group of K rows of the state
    finished: list[list[tuple[int, Hypothesis]]] = [[] for _ in range(B)]  # (constraints missed, hypothesis)
    t = 0
    while active:
        tokens = torch.tensor([beams[s][k].tokens[-1] if k < len(beams[s]) and t else BOS
                               for s in active for k in range(K)], dtype=torch.long, device=device)  # (b * K,)
        at_limit = torch.tensor([limits[s] <= t for s in active], device=device)  # (b,)
        log_probs = restrict_tokens(model.step(tokens, state).view(len(active), K, -1), at_limit)  # (b, K, V)
        if joins is not None and t:
            ended = torch.tensor([[k < len(beams[s]) and beams[s][k].term.ended for k in range(K)] for s in active],
                                 device=device)  # (b, K)
            log_probs.masked_fill_(ended[:, :, None] & joins.to(device), float("-inf"))
        totals = torch.tensor([[b.log_prob for b in beams[s]] + [float("-inf")] * (K - len(beams[s]))
                               for s in active], device=device)  # (b, K)
        best_scores, best_beams, best_tokens = beam_step(totals, log_probs, 2 * K)  # (b, 2K)
        top1 = log_probs.argmax(-1).tolist()  # (b, K)
        wanted = [candidates(beams[s], constraints[s], best_scores[i].tolist(), best_beams[i].tolist(),
                             best_tokens[i].tolist(), top1[i]) for i, s in enumerate(active)]
        index = torch.tensor([(i, k, tok) for i, cands in enumerate(wanted) for k, tok in cands],
                             dtype=torch.long, device=device)  # (N, 3)
        lps = iter(log_probs[index[:, 0], index[:, 1], index[:, 2]].tolist())
        kept, rows = [], []  # the slots (indices into active) that go on; the state's rows they continue
        for i, s in enumerate(active):
            going, done = select(beams[s], constraints[s], wanted[i], lps, K, t, limits[s] <= t, cfg)
            finished[s] += done
            if going and len(finished[s]) < K and limits[s] > t:
                beams[s] = [beam for beam, _ in going]
                kept.append(i)
                rows += [i * K + k for _, k in going] + [i * K] * (K - len(going))  # (padding: dead rows)
        if not kept:
            break
        state = state.select(torch.tensor(rows, device=device))
        active = [active[i] for i in kept]
        t += 1
    return [[h for _, h in sorted(hyps, key=lambda x: (x[0], -x[1].score))[: cfg.nbest]] for hyps in finished]


Ended = list[tuple[int, Hypothesis]]  # hypotheses that ended: (constraints missed, hypothesis)


def select(beams: list[Beam], constraints: Sequence[Constraint], wanted: list[tuple[int, int]], lps: Iterator[float],
           k: int, t: int, at_end: bool, cfg: SearchConfig) -> tuple[list[tuple[Beam, int]], Ended]:
    """One sentence's step t: of its candidates `wanted` (beam, token; their log-probabilities next in `lps`), the
    hypotheses that end ((constraints missed, hypothesis)) and the k beams that go on ((beam, the beam it continues)),
    chosen by `allocate` as beam search chooses: an ending ends where it wins a slot, and k candidates that do not
    end go on. EOS ends only a hypothesis that has met its constraints, or any at the length limit (`at_end`)."""
    banks: dict[int, list[tuple[float, int]]] = {}
    options: list[tuple[Beam, int]] = []  # (a new beam, the beam it continues; -1: it ends)
    for b, tok in wanted:
        lp = next(lps)
        beam = beams[b]
        if lp == float("-inf") or (tok == EOS and not (at_end or beam.term.done(constraints))):
            continue
        total = beam.log_prob + lp
        for term in [beam.term] if tok == EOS else beam.term.after(tok, constraints):
            banks.setdefault(term.produced(constraints), []).append((total, len(options)))
            options.append((Beam(beam.tokens + [tok], total, term), -1 if tok == EOS else b))
    ended: Ended = []
    for c in allocate(banks, k):
        beam, source = options[c]
        if source < 0:
            score = beam.log_prob / length_penalty(t + 1, cfg.lenpen, cfg.lenpen_type)
            ended.append((len(constraints) - len(beam.term.met), Hypothesis(beam.tokens[:-1], score, beam.log_prob)))
    going = allocate({bank: [x for x in c if options[x[1]][1] >= 0] for bank, c in banks.items()}, k)
    return [options[c] for c in going], ended


def candidates(beams: list[Beam], constraints: Sequence[Constraint], scores: list[float], sources: list[int],
               tokens: list[int], top1: list[int]) -> list[tuple[int, int]]:
    """A sentence's candidates (beam, token), each once: its 2K best continuations (`scores`, `sources`, `tokens`:
    `beam_step`'s, -inf where there are fewer), and of each running beam its best token (`top1`), EOS, and the tokens
    that take it into or through a constraint."""
    found = dict.fromkeys((k, tok) for k, tok, score in zip(sources, tokens, scores) if score != float("-inf"))
    for k, beam in enumerate(beams):
        for tok in sorted({top1[k], EOS} | beam.term.wanted(constraints)):
            found.setdefault((k, tok))
    return list(found)
