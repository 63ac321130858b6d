"""Glossaries: terms a translation must use (`Glossary.read`), and where they occur in a text (`Glossary.matches`).

A glossary file is UTF-8 text (plain or compressed), one `source term<TAB>target term` a line, for one direction;
blank lines and lines whose first non-blank character is `#` are comments. Rules, stated once here:

- A source term matches case-insensitively (Unicode case folding), as whole words: the text's words in the same
  order, with what the term has between and around them (`ice cream` matches `Ice  cream`, not `ice, cream` nor
  `nice cream`; `U.S.` matches `u.s.`, `C++` not `C`); runs of white space count as one space.
- The longest term wins; overlapping terms are resolved left to right: at each word, the longest term that starts
  there is taken, and matching goes on after it (`New York` and `York City` in `New York City`: `New York`).
- The same source term twice (as matched: case aside) is one term where the targets agree, and an error naming both
  lines where they differ.
- Its target is written as the glossary has it; where it begins the translation, its first letter is capitalised.
- A translation uses a term (`Glossary.used`: term accuracy) where the term's target appears in it as whole words,
  as written or with its first letter capitalised, once for each time the source has the term.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nmt.core.compression import read_small_text
from nmt.core.errors import InputError

WORD = re.compile(r"\w+(?:['’-]\w+)*")  # a word: letters and digits, with inner apostrophes and hyphens
MAX_BYTES = 16 << 20  # a glossary file, once decompressed
MAX_WORDS = 16  # in one source term: matching looks this far ahead at each word of a text


@dataclass(frozen=True)
class Term:
    """One line of a glossary: its source and target terms as written, and where it is (for errors)."""

    source: str
    target: str
    where: str = ""  # FILE:LINE


@dataclass(frozen=True)
class Match:
    """A term found in a text: the characters start..end (half open) of the text that it covers."""

    start: int
    end: int
    term: Term


def words_of(text: str) -> tuple[str, ...]:
    """The words of `text`, case-folded: what a source term is looked up by."""
    return tuple(m.group().casefold() for m in WORD.finditer(text))


def folded(text: str) -> str:
    """`text` case-folded, its runs of white space one space: what a term's whole surface is compared by."""
    return " ".join(text.split()).casefold()


class Glossary:
    """Terms by their source words (see the module's rules)."""

    def __init__(self, terms: Sequence[Term]):
        self.terms: dict[str, Term] = {}  # by folded source
        # by their words: each with how many characters it has before its first word and after its last
        self.by_words: dict[tuple[str, ...], list[tuple[Term, int, int]]] = {}
        for term in terms:
            key = words_of(term.source)
            if not key:
                raise InputError(f"{term.where}: the source term {term.source!r} has no word; give a word or more")
            if len(key) > MAX_WORDS:
                raise InputError(f"{term.where}: the source term has {len(key)} words; at most {MAX_WORDS}")
            known = self.terms.setdefault(folded(term.source), term)
            if known is term:
                words = [m.span() for m in WORD.finditer(term.source)]
                self.by_words.setdefault(key, []).append((term, words[0][0], len(term.source) - words[-1][1]))
            if known.target != term.target:
                raise InputError(f"{term.where}: the source term {term.source!r} is also on {known.where} with "
                                 f"another target ({known.target!r}, here {term.target!r}); keep one of them")
        self.longest = max(map(len, self.by_words), default=0)

    def __len__(self) -> int:
        return len(self.terms)

    def merged(self, other: Glossary) -> Glossary:
        """A glossary of this one's terms and `other`'s, `other`'s winning where both have a source term (as matched:
        case aside); neither is changed. Made from their tables, not read again: a large glossary under a few terms
        costs a copy of its dictionaries."""
        out = object.__new__(Glossary)
        out.terms = {**self.terms, **other.terms}
        out.by_words = dict(self.by_words)
        for key, entries in other.by_words.items():
            over = {folded(term.source) for term, _, _ in entries}
            out.by_words[key] = [*entries, *(e for e in self.by_words.get(key, []) if folded(e[0].source) not in over)]
        out.longest = max(self.longest, other.longest)
        return out

    @classmethod
    def read(cls, path: Path, label: str = "glossary") -> Glossary:
        """The glossary of the file at `path`; InputError naming FILE:LINE for a line that is no term."""
        text = read_small_text(path, f"{label} {path}", "source term<TAB>target term lines", MAX_BYTES)
        terms = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            where = f"{path}:{n}"
            parts = line.split("\t")
            if len(parts) != 2:
                tabs = "no tab" if len(parts) == 1 else f"{len(parts) - 1} tabs"
                raise InputError(f"{where}: {tabs}; write source term<TAB>target term (one tab), or # for a comment")
            source, target = parts[0].strip(), parts[1].strip()
            if not source or not target:
                raise InputError(f"{where}: an empty {'source' if not source else 'target'} term; write source "
                                 "term<TAB>target term")
            terms.append(Term(source, target, where))
        return cls(terms)

    def used(self, sources: Sequence[str], translations: Sequence[str]) -> tuple[int, int]:
        """(terms used, terms found): of the terms found in each source, how many the line's translation uses (see
        the module's rules: a target found n times covers n of its terms in that line)."""
        used = found = 0
        for source, translation in zip(sources, translations):
            wanted: dict[str, int] = {}
            for match in self.matches(source):
                wanted[match.term.target] = wanted.get(match.term.target, 0) + 1
            for target, n in wanted.items():
                written = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, {target, target[:1].upper() + target[1:]}))
                                     + r")(?!\w)")
                found += n
                used += min(n, len(written.findall(translation)))
        return used, found

    def matches(self, text: str) -> list[Match]:
        """The terms of `text`, left to right, none overlapping (the longest at each word; see the module's rules)."""
        spans = [(m.start(), m.end(), m.group().casefold()) for m in WORD.finditer(text)]
        found, i = [], 0
        while i < len(spans):
            for n in range(min(self.longest, len(spans) - i), 0, -1):
                match = self.match_at(text, spans[i][0], spans[i + n - 1][1],
                                      self.by_words.get(tuple(word for _, _, word in spans[i : i + n]), []))
                if match is not None:
                    found.append(match)
                    i += n
                    break
            else:
                i += 1
        return found

    @staticmethod
    def match_at(text: str, start: int, end: int, terms: list[tuple[Term, int, int]]) -> Match | None:
        """The term of `terms` (their words are those of text[start:end]) whose whole surface, with what it has
        before its first word (`lead` characters) and after its last (`trail`), is the text's there (None: none)."""
        for term, lead, trail in terms:
            a, b = start - lead, end + trail
            if a >= 0 and folded(text[a:b]) == folded(term.source) and not (a and text[a - 1].isalnum() and lead) \
                    and not (b < len(text) and text[b].isalnum() and trail):
                return Match(a, b, term)
        return None
