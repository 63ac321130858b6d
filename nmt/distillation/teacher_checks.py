"""What a teacher gets wrong at scale, told from a source line and its machine translation alone: nothing
translated, the source copied, a runaway length, a loop of repeated words. `nmt distill` drops such pairs
from a distilled corpus and counts each reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# Why a pair is dropped, in the order the checks run (a pair counts under its first reason): `language`, a source
# line the language detector does not take for the source language (`nmt distill --lid`), is told before these.
REASONS = ("language", "empty", "copy", "length", "repeats")
MAX_NGRAM = 4  # the longest n-gram (in words) whose back-to-back repetition counts as a loop


@dataclass(frozen=True)
class TeacherChecks:
    """The checks' settings (`nmt distill --max-ratio/--max-repeats/--keep-copies`); 0 turns a check off."""

    max_ratio: float = 3.0  # (longer side + 1) / (shorter side + 1), in words
    max_repeats: int = 3  # times one n-gram may come in a row
    keep_copies: bool = False


def failure(source: str, translation: str, checks: TeacherChecks = TeacherChecks()) -> Optional[str]:
    """Why the pair (source, translation) is not worth keeping: one of REASONS, or None to keep it."""
    src, hyp = source.split(), translation.split()
    if not src or not hyp:
        return "empty"
    if not checks.keep_copies and [w.casefold() for w in src] == [w.casefold() for w in hyp]:
        return "copy"
    if checks.max_ratio and (max(len(src), len(hyp)) + 1) / (min(len(src), len(hyp)) + 1) > checks.max_ratio:
        return "length"
    if checks.max_repeats and longest_run(hyp) > checks.max_repeats:
        return "repeats"
    return None


def longest_run(words: list[str], max_n: int = MAX_NGRAM) -> int:
    """The most times one n-gram of 1 to `max_n` words comes back to back in `words` ("a b a b a b": 3);
    0 for no words."""
    best = 1 if words else 0
    for n in range(1, max_n + 1):
        for phase in range(n):  # blocks of n words starting at phase, phase + n, ...: every alignment once
            run = 1
            for i in range(phase + n, len(words) - n + 1, n):
                run = run + 1 if words[i:i + n] == words[i - n:i] else 1
                best = max(best, run)
    return best
