"""Sequence-level interpolation (Kim & Rush 2016): of a teacher's n-best translations of a line, the one
closest to the line's reference, by sentence chrF or sentence BLEU (`nmt.scoring.sentence_score`)."""

from __future__ import annotations

from nmt.scoring import sentence_score


def closest(hypotheses: list[str], reference: str, metric: str) -> int:
    """Index of the hypothesis with the highest sentence score against `reference`; on a tie the earliest (the
    teacher's better-ranked one). 0 for an empty reference or a single hypothesis (nothing to choose by)."""
    if len(hypotheses) <= 1 or not reference.strip():
        return 0
    scores = [sentence_score(h, reference, metric) for h in hypotheses]
    return max(range(len(scores)), key=lambda i: (scores[i], -i))
