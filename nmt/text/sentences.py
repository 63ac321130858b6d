"""A line of text as sentences and the text between them, so that a paragraph is translated sentence by
sentence and put back together (`split_sentences`, `Split.join`).

The rules are sentencex's (Wikimedia's segmenter: about 250 languages, through fallback chains to the 26
it has abbreviation lists for; chosen by measurement, docs/segmenters.md). Around them, nmt keeps rules of
its own and a shortcut, so that any string splits into pieces that put it back exactly:

- A boundary after ".", "!", "?", ";" or "…" (and closing quotes or brackets) needs whitespace after it
  ("Node.js", "E.S.E. Electronics" stay whole), and none follows a one-letter word and its period: an
  initial ("J. R. R. Tolkien", French "M. Dupont"; sentencex keeps initials whole in English only). After
  the full stops of scripts written without spaces ("。", "।", "？") a boundary needs no whitespace.
- Every sentence holds a letter or a digit: a piece without one ("...", ":)") joins the sentence before it
  (after it, at the start of the text), and a text without any is no sentence at all (`gaps == [text]`),
  which a translator passes through as it is.
- A line in which no sentence can end before its last word (no such punctuation followed by whitespace and
  more text, no full stop of another script) is one sentence without asking the segmenter: most lines that
  `nmt translate` reads. The two rules above make this a shortcut, not a rule of its own: the segmenter
  would have found one sentence there too.

The segmenter's pieces are mapped back to offsets in the text; where a piece cannot be found (a segmenter
that rewrote the text), the whole text is one sentence, so that no character is lost or doubled.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Callable

from nmt.core.errors import ConfigError

PACKAGE = "sentencex"

# Terminal punctuation of the scripts that put a space after a sentence; a boundary after one needs whitespace.
_SPACED_ENDS = ".!?;…‼‽⁇⁈⁉"
# Other punctuation (Unicode category Po) that ends no sentence, or that is common in spaced scripts.
_NOT_ENDS = "¡¿·§¶†‡•‰‱′″‴‵‶‷‸※‧⁂⁎⁑⁕⁖⁘⁙⁚⁛⁜⁝⁞"
# Closing quotes and brackets that may follow a terminal, each after a space at most (French "fini. »").
_CLOSERS = r"(?:\s?[^\w\s]){0,8}"
_SPACED = f"[{re.escape(_SPACED_ENDS)}]{_CLOSERS}"
# A spaced terminal with whitespace and more text after it: where a line may hold a second sentence.
_MAY_END = re.compile(f"{_SPACED}\\s+\\S")
_SPACED_END = re.compile(f"{_SPACED}\\Z")
_TRAIL = re.compile(r"\W*\Z")
# A one-letter word and a period: an initial ("J. R. R. Tolkien", French "M. Dupont"), not a sentence's end.
_INITIAL = re.compile(r"(?<!\w)[^\W\d_]\.\Z")
ALNUM = re.compile(r"[^\W_]")  # a letter or a digit: what str.isalnum() accepts (and what a sentence holds)
_TAIL = 20  # characters at the end of a sentence that hold its terminal and closers


@dataclass(frozen=True)
class Split:
    """A text as sentences and the text around them:
    text == gaps[0] + sentences[0] + gaps[1] + ... + sentences[-1] + gaps[-1]."""

    sentences: list[str]  # each non-empty, no leading/trailing whitespace, holding a letter or a digit
    gaps: list[str]  # len(gaps) == len(sentences) + 1; whitespace (or whatever the segmenter left between)

    def join(self, translated: Sequence[str]) -> str:
        """The translations (one per sentence) put back with the original gaps; ValueError on a count mismatch."""
        if len(translated) != len(self.sentences):
            raise ValueError(f"{len(translated)} translations for {len(self.sentences)} sentences")
        parts = [self.gaps[0]]
        for sentence, gap in zip(translated, self.gaps[1:]):
            parts += [sentence, gap]
        return "".join(parts)


def split_sentences(text: str, lang: str) -> Split:
    """`text` (one line: no newline handling needed, but it must not break on one) split into sentences with
    the rules of `lang` (ISO 639-1 code such as "en", "de"; an unknown or empty code uses a generic/English
    rule set, never an error)."""
    return _split(text, _segmenter(lang))


def splits(texts: Sequence[str], lang: str) -> list[Split]:
    """The same for many texts (cached segmenter per language)."""
    segment = _segmenter(lang)
    return [_split(text, segment) for text in texts]


def _language(lang: str) -> str:
    """The primary subtag of `lang` in lower case ("pt-BR" -> "pt"); "en" where that is no language code."""
    code = re.split(r"[-_@.]", lang.strip().lower(), maxsplit=1)[0]
    return code if re.fullmatch(r"[a-z]{2,3}", code) else "en"


@functools.lru_cache(maxsize=256)
def _segmenter(lang: str) -> Callable[[str], Iterable[str]]:
    """sentencex's segmenter for language code `lang`; ConfigError where sentencex is not installed."""
    try:
        import sentencex
    except ImportError:
        raise ConfigError(f"splitting text into sentences needs the {PACKAGE} package: pip install {PACKAGE}") from None
    return functools.partial(sentencex.segment, _language(lang))


@functools.cache
def _other_ends() -> frozenset[str]:
    """The full stops of scripts written without spaces ("。", "।", "？"): any punctuation of Unicode category
    Po outside ASCII and the lists above, taken wide on purpose (a line with one costs a call of the segmenter)."""
    return frozenset(
        chr(c) for c in range(0x80, 0x20000)
        if unicodedata.category(chr(c)) == "Po" and chr(c) not in _SPACED_ENDS + _NOT_ENDS
    )


def _split(text: str, segment: Callable[[str], Iterable[str]]) -> Split:
    """`text` as sentences: the segmenter's pieces, mapped to offsets, then held to the rules above."""
    if ALNUM.search(text) is None:
        return Split([], [text])
    if _MAY_END.search(text) is None and (text.isascii() or _other_ends().isdisjoint(text)):
        start, end = _stripped(text, 0, len(text))
        return Split([text[start:end]], [text[:start], text[end:]])
    return _segmented(text, segment)


# Characters the segmenter is given at a time: sentencex's time grows with the square of a text's sentences (a line
# of 40,000 "Hund。" took 15 s, 10,000 1.2 s), so a longer text is segmented a window at a time: the pieces of each
# window but its last, which may go on past it, are kept, and the next window starts at that last piece.
WINDOW = 2000


def _pieces(text: str, segment: Callable[[str], Iterable[str]]) -> list[str]:
    """The segmenter's pieces of `text`, a window at a time; the same as of the text whole except where a sentence
    is longer than half a window (the window is then cut after its last full stop, else its last space)."""
    out: list[str] = []
    start = 0
    while len(text) - start > WINDOW:
        window = text[start : start + WINDOW]
        pieces = list(segment(window))
        kept = len(window) - len(pieces[-1]) if pieces and "".join(pieces) == window else 0
        if kept >= WINDOW // 2:
            out += pieces[:-1]
        else:  # a sentence of half a window or more (or pieces that are not the window's text): cut it
            kept = _cut(window)
            out.append(window[:kept])
        start += kept
    return out + list(segment(text[start:]))


def sentencex_pieces(text: str, lang: str) -> list[str]:
    """The segmenter's own pieces of `text`, whole (to compare with those taken a window at a time)."""
    return list(_segmenter(lang)(text))


def _cut(window: str) -> int:
    """Where to cut a window that the segmenter leaves whole: after the last full stop of its second half (one of
    scripts without spaces, or one followed by a space), else after its last space there, else at its end."""
    ends, half = _other_ends(), len(window) // 2
    for i in range(len(window) - 2, half, -1):
        if window[i] in ends or (window[i] in _SPACED_ENDS and window[i + 1].isspace()):
            return i + 1
    return next((i + 1 for i in range(len(window) - 2, half, -1) if window[i].isspace()), len(window))


def _segmented(text: str, segment: Callable[[str], Iterable[str]]) -> Split:
    """`_split` of a text with a letter or a digit, by the segmenter (no fast path)."""
    spans = _spans(text, _pieces(text, segment))
    spans = _merged(text, [_stripped(text, a, b) for a, b in spans if a < b and not text[a:b].isspace()])
    spans = spans or [_stripped(text, 0, len(text))]  # the segmenter's pieces lost the text's letters
    sentences = [text[a:b] for a, b in spans]
    ends = [0] + [b for _, b in spans]
    starts = [a for a, _ in spans] + [len(text)]
    return Split(sentences, [text[e:s] for e, s in zip(ends, starts)])


def _spans(text: str, pieces: list[str]) -> list[tuple[int, int]]:
    """Where each piece lies in `text`, in order: by their lengths where they put it back exactly, else each
    found after the one before (whitespace around it may differ); [] where a piece is not found."""
    spans, at = [], 0
    if "".join(pieces) == text:
        for piece in pieces:
            spans.append((at, at + len(piece)))
            at += len(piece)
        return spans
    for piece in pieces:
        core = piece.strip()
        if not core:
            continue
        found = text.find(core, at)
        if found < 0:
            return []
        spans.append((found, found + len(core)))
        at = found + len(core)
    return spans


def _stripped(text: str, a: int, b: int) -> tuple[int, int]:
    """The span [a, b) of `text` less the whitespace at its ends (it holds a non-space character)."""
    piece = text[a:b]
    return a + len(piece) - len(piece.lstrip()), b - len(piece) + len(piece.rstrip())


def _merged(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans, a span without letters or digits joined to its neighbour and a boundary that the rules do
    not allow removed; none where no span holds a letter or a digit."""
    out: list[tuple[int, int]] = []
    pending = -1  # start of the letterless spans before the first sentence
    for a, b in spans:
        wordy = ALNUM.search(text, a, b) is not None
        if not out:
            if wordy:
                out.append((pending if pending >= 0 else a, b))
            elif pending < 0:
                pending = a
            continue
        start, end = out[-1]
        tail = text[max(start, end - _TAIL) : end]
        trail = _TRAIL.search(tail)
        spaced = text[end:a][:1].isspace() and _SPACED_END.search(tail) is not None and _INITIAL.search(tail) is None
        allowed = spaced or trail is not None and not _other_ends().isdisjoint(trail.group())
        if wordy and allowed:
            out.append((a, b))
        else:
            out[-1] = (start, b)
    return out
