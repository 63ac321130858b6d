"""A glossary's terms in a translation (`--glossary-method`).

place (`place_terms`, any engine): the model translates each sentence as it would, and the target words aligned to a
matched source term (`nmt.text.glossary`) are replaced by the glossary's target term (the alignment is the engine's
own: the last layer's cross-attention, on torch and CTranslate2 alike).

A term whose source words are aligned to no target word cannot be placed: the translation keeps the model's words
and the term is counted as unplaced (`Placed.unplaced`). The replaced span runs from the first to the last target
word aligned to the term, at most as many words as the term has (its source's or target's: the last ones);
punctuation around it (quotes, a full stop) stays. The hypothesis's tokens and scores are the model's: they describe
its own output, not the glossary's words.

constrain (`searched_terms`): the search itself must write each term's target (`Engine.with_constraints`,
`nmt.engines.constrained`); here a term that begins the translation gets its capital, and a term the search could
not write (a character outside the vocabulary, the length limit) is placed. auto places, and searches again where
some term could not be placed (`nmt.documents.texts.Documents.with_terms`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from nmt.engines.base import Engine, Translation
from nmt.engines.search import Hypothesis
from nmt.text.glossary import Glossary, Match

SPLIT_WORD = re.compile(r"\S+")  # the words of an alignment: str.split()'s
EDGES = re.compile(r"(\W*)(.*?)(\W*)", re.S)  # a span's punctuation before its letters, its letters, after them

Aligner = Callable[[str, Hypothesis], list[tuple[int, int]]]  # (source, hypothesis) -> (source word, target word)


@dataclass
class Placed:
    """What a glossary did to one sentence (or several): its terms found, placed (in the translation), and not placed
    (aligned to no target word, or to words another term of the sentence took, and not written by a search)."""

    found: int = 0
    placed: int = 0
    searched: int = 0  # sentences searched again with their terms (--glossary-method auto)

    @property
    def unplaced(self) -> int:
        return self.found - self.placed


def place_terms(translation: Translation, glossary: Glossary, aligner: Aligner) -> tuple[Translation, Placed]:
    """`translation` (of one sentence) with the target words aligned to each term of its source replaced by the
    term's target; the best hypothesis only (an n-best list is left as the model gave it)."""
    matches = glossary.matches(translation.source)
    if not matches or not translation.hypotheses:
        return translation, Placed(len(matches))
    text, hypothesis = translation.hypotheses[0]
    targets = [m.span() for m in SPLIT_WORD.finditer(text)]
    links: dict[int, list[int]] = {}
    for s, t in aligner(translation.source, hypothesis):
        if 0 <= t < len(targets):
            links.setdefault(s, []).append(t)
    sources = [m.span() for m in SPLIT_WORD.finditer(translation.source)]
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) in `text`, not overlapping
    taken: set[int] = set()
    for match in matches:
        span = target_span(match, sources, links)
        if span is None or taken.intersection(range(span[0], span[1] + 1)):
            continue
        taken.update(range(span[0], span[1] + 1))
        start, end = targets[span[0]][0], targets[span[1]][1]
        lead, core, _ = EDGES.fullmatch(text, start, end).groups()  # type: ignore[union-attr]
        start = start + len(lead) if core else targets[span[0]][1]  # (all punctuation: the term goes after it)
        end = start + len(core)
        edits.append((start, end, cased(match.term.target, at_start=not text[:start].strip())))
    for start, end, target in sorted(edits, reverse=True):
        text = text[:start] + target + text[end:]
    if not edits:
        return translation, Placed(len(matches))
    placed = replace(translation, text=text, hypotheses=[(text, hypothesis), *translation.hypotheses[1:]])
    return placed, Placed(len(matches), len(edits))


def target_span(match: Match, sources: list[tuple[int, int]], links: dict[int, list[int]]) -> tuple[int, int] | None:
    """The first and last target word aligned to the source words the match covers (None: none is aligned); of a span
    longer than the term (its source or its target, whichever has more words), its last words, as many: attention
    aligns a noun's article with it too (`street` with `die Straße`), and in the languages nmt translates articles and
    prepositions come first."""
    covered = [i for i, (a, b) in enumerate(sources) if a < match.end and match.start < b]
    aligned = [t for i in covered for t in links.get(i, [])]
    if not aligned:
        return None
    first, last = min(aligned), max(aligned)
    words = max(len(match.term.target.split()), len(match.term.source.split()))
    return max(first, last - words + 1), last


def cased(term: str, at_start: bool) -> str:
    """The glossary's target as written, its first letter capitalised where it begins the translation."""
    return term[:1].upper() + term[1:] if at_start else term


def searched_terms(translation: Translation, glossary: Glossary, aligner: Aligner) -> tuple[Translation, Placed]:
    """`translation` (of one sentence, by a search constrained to its terms' targets) with the first letter of a term
    that begins it capitalised, the terms it lacks (a character outside the vocabulary, the length limit reached)
    placed as `place_terms` does, and its terms counted: found in the source, and used (`Glossary.used`)."""
    matches = glossary.matches(translation.source)
    if not matches or not translation.hypotheses:
        return translation, Placed(len(matches))
    text, hypothesis = translation.hypotheses[0]
    for match in matches:
        if text.startswith(match.term.target) and not text[len(match.term.target):][:1].isalnum():
            text = cased(match.term.target, at_start=True) + text[len(match.term.target):]
            break
    searched = replace(translation, text=text, hypotheses=[(text, hypothesis), *translation.hypotheses[1:]])
    missing = [m.term for m in matches if not glossary.used([m.term.source], [text])[0]]
    if missing:
        searched, _ = place_terms(searched, Glossary(missing), aligner)
    used, found = glossary.used([translation.source], [searched.text])
    return searched, Placed(found, used)


def targets_of(sentences: list[str], glossary: Glossary, first: int = 0) -> dict[int, list[str]]:
    """The target terms each sentence must hold, by its number (`first` on, as an engine numbers a chunk's lines);
    the sentences without a term left out: what `Engine.with_constraints` takes."""
    found = {first + i: [m.term.target for m in glossary.matches(s)] for i, s in enumerate(sentences)}
    return {n: line for n, line in found.items() if line}


def search_terms(engine: Engine, items: list[tuple[str, Glossary]], first: int = 0) -> list[tuple[Translation, Placed]]:
    """Sentences, each with its glossary (`items`), translated in one call of `engine`'s search constrained to their
    terms (numbered from `first`), each with the terms the search could not write placed, and its counts
    (`searched_terms`)."""
    targets = {n: line for i, (sentence, glossary) in enumerate(items)
               for n, line in targets_of([sentence], glossary, first + i).items()}
    done = engine.with_constraints(targets).translate_chunk([sentence for sentence, _ in items], first)
    return [searched_terms(t, glossary, lambda source, hypothesis: engine.alignment(source, hypothesis, first))
            for t, (_, glossary) in zip(done, items)]
