"""Texts as people write them, translated by a model trained on sentences: a line holding several sentences, a
request text of several lines, an HTML document. Each text is cut into sentences (`nmt.text.sentences`, the model's
source language) and, for HTML, into the text of its blocks (`nmt.text.markup`); every sentence of a batch of texts
goes to the engine at once; the translations are put back with each text's own spacing, line breaks and tags.

`Documents` wraps any engine (`nmt.engines.base.Engine`) and is used as one by `translate`, `eval` and the Python
API: `translate_chunk` and `translate` give one `TextTranslation` per text. Both go through `Work`: texts read and cut
into the sentences the engine sees (`plan`), the sentences translated, each piece's translation assembled, the
alignments its inline markup needs made, and the texts put back (`Work.finish`). The server runs the same steps, each
sentence and each alignment queued as work of its own, so that a document takes turns with other requests.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Optional

from nmt.config import TextConfig, check_field
from nmt.core.errors import ConfigError, ref
from nmt.core.progress import Progress
from nmt.documents.terms import Placed, place_terms, search_terms, searched_terms, targets_of
from nmt.engines.base import Engine, Translation, translate_chunks
from nmt.engines.search import Hypothesis
from nmt.text.glossary import Glossary
from nmt.text.markup import SPACE, Aligned, Parsed, parse_html
from nmt.text.sentences import ALNUM, Split, split_sentences

Format = Literal["text", "html"]
FORMATS: tuple[Format, ...] = ("text", "html")
LINE_BREAK = re.compile(r"(\r\n|\r|\n)")
HTML_SPACE = re.compile(f"[{SPACE}]+")  # HTML's whitespace (a no-break space is a word's)
HTML_WORD = re.compile(f"[^{SPACE}]+")
LONG_WORDS = 64  # words of an HTML sentence past which it is cut into pieces (`flowed`)
NOTHING = Hypothesis([], 0.0, 0.0)


@dataclass(frozen=True)
class Layout:
    """A text as sentences and what surrounds them: its lines (each a Split) and the line breaks between them; for
    an HTML text (`flowed`), one line and the whitespace inside each sentence that was not one space."""

    lines: list[Split]
    breaks: list[str]  # len(lines) - 1: "\n", "\r\n" or "\r", as the text has them
    # `flowed`: per sentence, its number of words n and each (k, run): whitespace after its k-th word that the
    # text wrote otherwise than " " (the model saw one space there)
    spacing: list[tuple[int, list[tuple[int, str]]]] = field(default_factory=list)

    @property
    def sentences(self) -> list[str]:
        return [s for line in self.lines for s in line.sentences]

    def join(self, translated: Sequence[str]) -> str:
        """The text with each sentence replaced by its translation (one per sentence, in order)."""
        if self.spacing:
            translated = [respace(t, n, runs) for t, (n, runs) in zip(translated, self.spacing)]
        out, at = [], 0
        for i, line in enumerate(self.lines):
            n = len(line.sentences)
            out.append(line.join(translated[at : at + n]))
            at += n
            if i < len(self.breaks):
                out.append(self.breaks[i])
        return "".join(out)


def respace(translation: str, n: int, runs: list[tuple[int, str]]) -> str:
    """`translation` with each run of whitespace that followed word k of the n of its source between the target
    words at the same share (the first run wins a place two would share; a one-word translation has no place)."""
    words = [m.span() for m in HTML_WORD.finditer(translation)]
    m, placed = len(words), dict[int, str]()
    for k, run in runs if m > 1 else []:
        placed.setdefault(min(m - 1, max(1, (2 * k * m + n) // (2 * n))), run)
    out, done = [], 0
    for j in sorted(placed):
        out += [translation[done : words[j - 1][1]], placed[j]]
        done = words[j][0]
    return "".join(out) + translation[done:]


def flowed(text: str, lang: str, split: bool) -> Layout:
    """An HTML text, whose whitespace is spacing, not lines: the model is given each sentence with every run of
    HTML whitespace (and any other space between its words) as one space (a newline in a paragraph does not cut its
    sentence); the runs between sentences come back as written, and those inside one between the target words at
    the same share (`respace`). A sentence
    of more than LONG_WORDS words (verse, a list or a page without a full stop) is cut into pieces (`lines_of_long`):
    as one sentence, a model would translate its first few hundred tokens only."""
    # the text with each run one space, and where each of its characters was in `text`
    flat: list[str] = []
    to_raw: list[int] = []
    done = 0
    for m in HTML_SPACE.finditer(text):
        flat.append(text[done : m.start()])
        to_raw += range(done, m.start())
        flat.append(" ")
        to_raw.append(m.start())
        done = m.end()
    flat.append(text[done:])
    to_raw += [*range(done, len(text)), len(text)]
    one = "".join(flat)
    cut = split_sentences(one, lang) if split else (
        Split([one.strip(" ")], [one[: len(one) - len(one.lstrip(" "))], one[len(one.rstrip(" ")):]])
        if one.strip() else Split([], [one]))
    spans, at = [], 0  # each sentence's place in `one`
    for gap, sentence in zip(cut.gaps, cut.sentences):
        at += len(gap)
        spans += lines_of_long(one, text, to_raw, at, at + len(sentence))
        at += len(sentence)
    if not spans:
        return Layout([Split([], [text])], [], [])
    gaps = [text[: to_raw[spans[0][0]]]]
    gaps += [text[to_raw[b] : to_raw[a]] for (_, b), (a, _) in zip(spans, spans[1:])]  # (a run's space: it whole)
    gaps.append(text[to_raw[spans[-1][1]] :])
    spacing = []
    for a, b in spans:
        runs = HTML_SPACE.findall(text, to_raw[a], to_raw[b])
        spacing.append((len(runs) + 1, [(k + 1, run) for k, run in enumerate(runs) if run != " "]))
    # the model reads each sentence's words as str.split() has them: a no-break space (or another one of Unicode's)
    # between two words is a space to it too, so that the words of its alignment are those the markup counts
    return Layout([Split([" ".join(one[a:b].split()) for a, b in spans], gaps)], [], spacing)


def lines_of_long(one: str, text: str, to_raw: list[int], a: int, b: int) -> list[tuple[int, int]]:
    """The sentence one[a:b] (`flowed`), or where it has more than LONG_WORDS words, pieces of at most LONG_WORDS:
    its lines as `text` wrote them, the short ones together (a list of one word a line is not a sentence a word),
    a longer line cut every LONG_WORDS words; a piece without a letter or digit joins the one before."""
    if one.count(" ", a, b) < LONG_WORDS:
        return [(a, b)]
    spaces = [p for p in range(a, b) if one[p] == " "]
    breaks = [i for i, p in enumerate(spaces) if LINE_BREAK.search(text, to_raw[p], to_raw[p + 1])]
    line_words = dict(zip(breaks, [y - x for x, y in zip(breaks, [*breaks[1:], len(spaces)])]))  # the next line's
    pieces: list[tuple[int, int]] = []
    start, words = a, 1
    for i, p in enumerate([*spaces, b]):  # each word's end: p is the space after it (or the end)
        if p == b or words == LONG_WORDS or (i in line_words and words + line_words[i] > LONG_WORDS):
            if pieces and not ALNUM.search(one, start, p):
                pieces[-1] = (pieces[-1][0], p)
            else:
                pieces.append((start, p))
            start, words = p + 1, 0
        words += 1
    if len(pieces) > 1 and not ALNUM.search(one, *pieces[0]):
        pieces[:2] = [(pieces[0][0], pieces[1][1])]
    return pieces


def layout(text: str, lang: str, split: bool) -> Layout:
    """`text` cut into lines and (with `split`) sentences. Without `split` a line is one sentence, given to the
    model as it is (a line of only spaces is none: it translates to an empty line, as it always has)."""
    parts = LINE_BREAK.split(text)
    lines = parts[0::2]
    if split:
        return Layout([split_sentences(line, lang) for line in lines], parts[1::2])
    return Layout([Split([line], ["", ""]) if line.strip() else Split([], [""]) for line in lines], parts[1::2])


@dataclass
class TextTranslation(Translation):
    """The translation of one text: `text` the best one, `hypotheses` the n best (the k-th joins each sentence's
    k-th hypothesis; its score and log-probability are their sums), `sentences` each sentence's own."""

    sentences: list[Translation] = field(default_factory=list)

    @property
    def score(self) -> float:
        """How sure the model is of the best translation: the mean log-probability of its tokens (each sentence's
        end included), from minus infinity to 0; exp(score) is the geometric mean of the token probabilities.
        0.0 for a text with nothing to translate."""
        best = [t.hypotheses[0][1] for t in self.sentences if t.hypotheses]
        tokens = sum(len(h.tokens) + 1 for h in best if h.tokens or h.log_prob)
        return sum(h.log_prob for h in best) / tokens if tokens else 0.0


def assemble(source: str, shape: Layout, done: list[Translation], nbest: int) -> TextTranslation:
    """One text's TextTranslation from its sentences' translations (in the order of `shape.sentences`)."""
    if not done:  # nothing but spaces and line breaks: they come back as they were
        kept = shape.join([])
        return TextTranslation(kept, [(kept, NOTHING)] * nbest, source, [])
    if len(done) == 1 and shape.sentences == [source]:  # a line that is one sentence: what the engine gave
        return TextTranslation(done[0].text, done[0].hypotheses, source, done)
    options = [t.hypotheses or [(t.text, NOTHING)] for t in done]
    hypotheses = []
    for k in range(max(len(o) for o in options)):
        picked = [o[min(k, len(o) - 1)] for o in options]  # a sentence with fewer hypotheses gives its last
        hypotheses.append((shape.join([text for text, _ in picked]),
                           Hypothesis([tok for _, h in picked for tok in h.tokens], sum(h.score for _, h in picked),
                                      sum(h.log_prob for _, h in picked))))
    return TextTranslation(hypotheses[0][0], hypotheses, source, done)


def check_format(format: str) -> None:
    """ConfigError unless `format` is one Documents reads."""
    if format not in FORMATS:
        raise ConfigError(f"{ref('format')} {format!r}: give one of {', '.join(FORMATS)}")


def check_search(format: Format, nbest: int) -> None:
    """ConfigError unless a search of `nbest` translations fits documents of `format`: an HTML document is translated
    once (the one place where this rule is checked: the commands, the Python API and the server ask here)."""
    if format == "html" and nbest > 1:
        raise ConfigError(f"{ref('format')} html gives one translation of each document; leave {ref('nbest')} out")


def check_glossary(format: Format) -> None:
    """ConfigError for a glossary with documents of `format` html (an HTML page's inline tags are placed through the
    model's own words, which the terms replace); the one place where this rule is checked: Documents and the server
    ask here."""
    if format == "html":
        raise ConfigError(f"{ref('glossary')} with {ref('format')} html: not yet; translate the page without it")


@dataclass
class Work:
    """Texts as the sentences an engine sees (`plan`), and how their translations are put back.

    `pieces` are the texts cut into sentences: each text itself ("text"), or the texts of each HTML document's
    blocks and translatable attributes ("html"); `counts` how many pieces each text has. Steps: translate
    `sentences` (one Translation each, in order), `assemble` them into one TextTranslation per piece, make the
    word alignment of each piece in `aligned` (those whose inline tags are placed through one), `finish`."""

    format: Format
    texts: list[str]
    pieces: list[tuple[str, Layout]]
    counts: list[int]
    documents: list[Parsed] = field(default_factory=list)  # format "html": each text read

    @functools.cached_property
    def sentences(self) -> list[str]:
        return [s for _, shape in self.pieces for s in shape.sentences]

    @property
    def characters(self) -> int:
        """Characters of text to translate (an HTML document's tags and untouched parts left out)."""
        return sum(len(text) for text, _ in self.pieces)

    def assemble(self, done: Sequence[Translation], nbest: int) -> list[TextTranslation]:
        """One TextTranslation per piece from the translations of `sentences`."""
        if len(done) != len(self.sentences):
            raise ValueError(f"{len(done)} translations for {len(self.sentences)} sentences")
        out, at = [], 0
        for text, shape in self.pieces:
            n = len(shape.sentences)
            out.append(assemble(text, shape, list(done[at : at + n]), nbest))
            at += n
        return out

    def aligned(self, pieces: Sequence[TextTranslation]) -> list[int]:
        """The pieces whose inline markup is placed through a word alignment: an HTML text holding inline tags, with
        a translation (an alignment is a pass of the model: most blocks need none)."""
        if self.format != "html":
            return []
        inline = [flag for document in self.documents for flag in document.inline]
        return [i for i, (flag, piece) in enumerate(zip(inline, pieces)) if flag and piece.text.strip()]

    def finish(self, pieces: Sequence[TextTranslation],
               alignments: Mapping[int, list[tuple[int, int]]]) -> list[TextTranslation]:
        """One TextTranslation per text, from its pieces' and (HTML) the `alignments` of the pieces `aligned` named."""
        if self.format == "text":
            return list(pieces)
        out, at = [], 0
        for document, n, parsed in zip(self.texts, self.counts, self.documents):
            mine = pieces[at : at + n]
            text = parsed.join([Aligned(t.text, alignments.get(at + i, [])) for i, t in enumerate(mine)])
            out.append(TextTranslation(text, [(text, NOTHING)], document, [s for t in mine for s in t.sentences]))
            at += n
        return out


def plan(texts: Sequence[str], lang: str, split: bool = True, format: Format = "text",
         target: Optional[str] = None) -> Work:
    """`texts` read (HTML: lang on <html> to become `target`) and cut into lines and (with `split`) the sentences of
    `lang` (see `Work`)."""
    check_format(format)
    if format == "text":
        return Work(format, list(texts), [(t, layout(t, lang, split)) for t in texts], [1] * len(texts))
    documents = [parse_html(t, target) for t in texts]
    pieces = [(block, flowed(block, lang, split)) for d in documents for block in d.texts]
    return Work(format, list(texts), pieces, [len(d.texts) for d in documents], documents)


def align(engine: Engine, translation: TextTranslation, rank: int = 0, line_index: int = 0) -> list[tuple[int, int]]:
    """Word alignment of a text and its `rank`-th translation: (source word, target word) pairs, words counted over
    the whole text (its sentences' words, in order), from each sentence's alignment by `engine`."""
    pairs: list[tuple[int, int]] = []
    src_at = tgt_at = 0
    for t in translation.sentences:
        if not t.hypotheses:
            continue
        text, hypothesis = t.hypotheses[min(rank, len(t.hypotheses) - 1)]
        pairs += [(s + src_at, w + tgt_at) for s, w in engine.alignment(t.source, hypothesis, line_index)]
        src_at += len(t.source.split())
        tgt_at += len(text.split())
    return pairs


class Documents:
    """An engine that translates texts rather than sentences (see the module's docstring).

    `split`: cut lines into sentences (TextConfig.split); `format`: "text", or "html" (each text a fragment or
    a whole document whose tags are kept, see `nmt.text.markup`); `glossary`: terms the translations use, by
    `glossary_method` (TextConfig.glossary_method; see `with_terms`)."""

    def __init__(self, engine: Engine, split: bool = True, format: Format = "text",
                 glossary: Optional[Glossary] = None, glossary_method: str = "auto"):
        check_field(TextConfig, "split", split)  # "no" is no bool: never taken for True
        check_field(TextConfig, "glossary_method", glossary_method)
        check_format(format)
        check_search(format, engine.search_cfg.nbest)
        self.engine, self.split, self.format = engine, split, format
        if glossary is not None:
            check_glossary(format)
        self.glossary, self.terms = glossary, Placed()  # the terms found and placed so far
        # (auto with sampling: placed only; the constrained search is a beam search)
        self.method = "place" if glossary_method == "auto" and engine.search_cfg.sampling else glossary_method
        self.name = engine.name
        self.search_cfg = engine.search_cfg
        self.lang = engine.languages[0]

    @property
    def languages(self) -> tuple[str, str]:
        return self.engine.languages

    def translate_chunk(self, texts: list[str], first_line: int = 0) -> list[TextTranslation]:
        """One TextTranslation per text, in order; every sentence of `texts` is searched in one call of the
        engine (its batches)."""
        work = plan(texts, self.lang, self.split, self.format, self.languages[1])
        if self.glossary is not None:
            done = self.with_terms(work.sentences, first_line, len(texts), self.glossary)
        else:
            done = self.sentences_of(work.sentences, first_line, len(texts)) if work.sentences else []
        pieces = work.assemble(done, self.search_cfg.nbest)
        alignments = {i: align(self.engine, pieces[i], 0, first_line) for i in work.aligned(pieces)}
        return work.finish(pieces, alignments)

    def with_terms(self, sentences: list[str], first_line: int, texts: int, glossary: Glossary) -> list[Translation]:
        """The translations of `sentences` (see `sentences_of`) with the glossary's terms, by the method asked
        (TextConfig.glossary_method): placed through the alignment; searched for (the engine's constrained search);
        or placed, and searched for in the sentences where some could not be (auto). Counted in `terms`."""
        targets = targets_of(sentences, glossary, first_line)
        search = self.method == "constrain" and bool(targets)
        engine = self.engine.with_constraints(targets) if search else self.engine
        done = [self.terms_of(t, glossary, first_line, search)
                for t in (self.sentences_of(sentences, first_line, texts, engine) if sentences else [])]
        redo = [i for i, (_, counts) in enumerate(done) if counts.unplaced] if self.method == "auto" else []
        if redo:  # searched again, made to hold their terms; the progress told is the first pass's
            quiet = copy.copy(self.engine)
            quiet.progress = lambda event: self.engine.progress(event) if event.message else None
            for i, result in zip(redo, search_terms(quiet, [(sentences[i], glossary) for i in redo], first_line)):
                done[i] = result
            self.terms.searched += len(redo)
        for _, counts in done:
            self.terms.found += counts.found
            self.terms.placed += counts.placed
        return [t for t, _ in done]

    def terms_of(self, translation: Translation, glossary: Glossary, line_index: int,
                 searched: bool) -> tuple[Translation, Placed]:
        """A sentence's translation with its glossary terms placed, or (`searched`: by a constrained search) those
        it lacks placed (`nmt.documents.terms`), and its counts."""
        def aligner(source: str, hypothesis: Hypothesis) -> list[tuple[int, int]]:
            return self.engine.alignment(source, hypothesis, line_index)

        return (searched_terms if searched else place_terms)(translation, glossary, aligner)

    def sentences_of(self, sentences: list[str], first_line: int, texts: int,
                     engine: Optional[Engine] = None) -> list[Translation]:
        """The engine's translations of `sentences`, the sentences of `texts` texts from text number `first_line`
        on: its progress (sentences done) is told as texts done, in proportion, so that a bar over the input's
        lines ends at its total."""
        engine = self.engine if engine is None else engine
        report = engine.progress

        def as_texts(event: Progress) -> None:
            if not event.message and len(sentences) != texts:
                sentences_done = event.done - first_line
                event = dataclasses.replace(event, done=first_line + sentences_done * texts // len(sentences))
            report(event)

        engine.progress = as_texts
        try:
            return engine.translate_chunk(sentences, first_line)
        finally:
            engine.progress = report

    def translate(self, chunks: Iterable[list[str]]) -> Iterator[TextTranslation]:
        """One TextTranslation per text of a stream of chunks, in order, as each chunk is translated."""
        return translate_chunks(self.translate_chunk, chunks)

    def alignment(self, translation: TextTranslation, rank: int = 0,
                  line_index: int = 0) -> list[tuple[int, int]]:
        """Word alignment of a text and its `rank`-th translation (see `align`)."""
        return align(self.engine, translation, rank, line_index)
