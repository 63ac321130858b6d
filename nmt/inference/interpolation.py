"""Sequence-level interpolation (Kim & Rush 2016): of a teacher's n-best translations of a line, the one
closest to the line's reference, by sentence chrF or sentence BLEU (sacreBLEU's)."""

from __future__ import annotations

from functools import cache
from typing import Any

METRICS = ("chrf", "bleu")


@cache
def _metric(name: str) -> Any:
    from sacrebleu.metrics.bleu import BLEU  # sacrebleu loads its tokenizers: only when asked
    from sacrebleu.metrics.chrf import CHRF

    if name == "chrf":
        return CHRF()
    if name == "bleu":
        return BLEU(effective_order=True)  # sentence BLEU: n-gram orders a short line lacks are left out
    raise ValueError(f"unknown metric {name!r}; one of {', '.join(METRICS)}")


def sentence_score(hypothesis: str, reference: str, metric: str) -> float:
    """sacreBLEU's sentence chrF or BLEU of one hypothesis against one reference (0 to 100)."""
    return float(_metric(metric).sentence_score(hypothesis, [reference]).score)


def closest(hypotheses: list[str], reference: str, metric: str) -> int:
    """Index of the hypothesis with the highest sentence score against `reference`; on a tie the earliest (the
    teacher's better-ranked one). 0 for an empty reference or a single hypothesis (nothing to choose by)."""
    if len(hypotheses) <= 1 or not reference.strip():
        return 0
    scores = [sentence_score(h, reference, metric) for h in hypotheses]
    return max(range(len(scores)), key=lambda i: (scores[i], -i))
