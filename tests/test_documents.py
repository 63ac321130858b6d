"""nmt.documents.texts: texts cut into lines and sentences for the engine and put back together, on a fake
engine whose translations and scores can be worked out by hand (each word upper-cased, each word's log-probability
-1)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from nmt.config import SearchConfig
from nmt.core.errors import ConfigError
from nmt.core.progress import Progress
from nmt.documents.texts import Documents, TextTranslation, flowed, layout, respace
from nmt.engines.base import Translation
from nmt.engines.search import Hypothesis

MULTI30K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"


class FakeEngine:
    """Upper-cases each word; a sentence's log-probability is minus its word count (EOS counts -1 too), its
    score the same; with nbest N, the k-th hypothesis adds k exclamation marks. Records every call."""

    name = "fake"

    def __init__(self, nbest: int = 1):
        self.search_cfg = SearchConfig(beam=max(4, nbest), nbest=nbest)
        self.calls: list[list[str]] = []
        self.progress = lambda event: None

    @property
    def languages(self) -> tuple[str, str]:
        return ("en", "de")

    def translate_chunk(self, lines: list[str], first_line: int = 0) -> list[Translation]:
        self.calls.append(list(lines))
        out = []
        for i, line in enumerate(lines):
            words = line.split()
            hyps = [(" ".join(w.upper() for w in words) + "!" * k,
                     Hypothesis(list(range(len(words))), -float(len(words) + 1 + k), -float(len(words) + 1 + k)))
                    for k in range(self.search_cfg.nbest)] if words else [("", Hypothesis([], 0.0, 0.0))]
            out.append(Translation(hyps[0][0], hyps, line))
            self.progress(Progress("translate", done=first_line + i + 1, unit="sentences"))
        return out

    def alignment(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> list[tuple[int, int]]:
        return [(i, i) for i in range(len(line.split()))]


@pytest.mark.parametrize("text, expected", [
    ("A man rides a bike.", "A MAN RIDES A BIKE."),
    ("A man. Two dogs play.", "A MAN. TWO DOGS PLAY."),
    ("  A man.   Two dogs!  ", "  A MAN.   TWO DOGS!  "),
    ("A man.\nTwo dogs.\r\n\r\nA cat.", "A MAN.\nTWO DOGS.\r\n\r\nA CAT."),
    ("", ""),
    ("   ", "   "),
    ("\n\n", "\n\n"),
])
def test_sentences_come_back_with_the_text_s_own_spacing_and_line_breaks(text, expected):
    assert Documents(FakeEngine()).translate_chunk([text])[0].text == expected


def test_every_sentence_of_a_chunk_goes_to_the_engine_in_one_call():
    engine = FakeEngine()
    Documents(engine).translate_chunk(["A man. Two dogs play.", "", "A cat sleeps."])
    assert engine.calls == [["A man.", "Two dogs play.", "A cat sleeps."]]


def test_without_split_each_line_goes_whole_as_before():
    engine = FakeEngine()
    done = Documents(engine, split=False).translate_chunk(["A man. Two dogs play.", "   ", ""])
    assert engine.calls == [["A man. Two dogs play."]]
    assert [t.text for t in done] == ["A MAN. TWO DOGS PLAY.", "", ""]


def test_a_one_sentence_line_gives_exactly_the_engine_s_translation():
    engine = FakeEngine(nbest=2)
    t = Documents(engine).translate_chunk(["A man rides a bike."])[0]
    assert isinstance(t, TextTranslation)
    assert t.hypotheses == [("A MAN RIDES A BIKE.", Hypothesis([0, 1, 2, 3, 4], -6.0, -6.0)),
                            ("A MAN RIDES A BIKE.!", Hypothesis([0, 1, 2, 3, 4], -7.0, -7.0))]


def test_n_best_of_a_text_joins_each_sentence_s_kth_hypothesis_and_adds_their_scores():
    t = Documents(FakeEngine(nbest=2)).translate_chunk(["A man. Two dogs play."])[0]
    assert [text for text, _ in t.hypotheses] == ["A MAN. TWO DOGS PLAY.", "A MAN.! TWO DOGS PLAY.!"]
    # sentence scores -3 and -4 (best), -4 and -5 (second)
    assert [(h.score, h.log_prob) for _, h in t.hypotheses] == [(-7.0, -7.0), (-9.0, -9.0)]


@pytest.mark.parametrize("text, score", [
    ("A man.", -1.0),  # log-prob -3 over 2 words + EOS
    ("A man. Two dogs play.", -1.0),  # (-3 - 4) / (3 + 4)
    ("", 0.0),
])
def test_the_score_is_the_mean_log_probability_per_token(text, score):
    assert Documents(FakeEngine()).translate_chunk([text])[0].score == pytest.approx(score)


def test_alignments_count_words_over_the_whole_text():
    documents = Documents(FakeEngine())
    t = documents.translate_chunk(["A man. Two dogs play."])[0]
    assert documents.alignment(t) == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]


def test_progress_counts_texts_not_sentences():
    engine, seen = FakeEngine(), []
    engine.progress = lambda event: seen.append(event.done)
    Documents(engine).translate_chunk(["A. B. C. D.", "E."], first_line=10)
    assert seen[-1] == 12 and max(seen) <= 12


def test_html_with_several_hypotheses_is_refused():
    with pytest.raises(ConfigError, match="nbest"):
        Documents(FakeEngine(nbest=2), format="html")


def test_an_unknown_format_is_refused():
    with pytest.raises(ConfigError, match="format"):
        Documents(FakeEngine(), format="pdf")  # type: ignore[arg-type]


def test_layout_without_split_keeps_a_line_whole():
    shape = layout("A man. Two dogs.\nA cat.", "en", split=False)
    assert shape.sentences == ["A man. Two dogs.", "A cat."]
    assert shape.join(["X", "Y"]) == "X\nY"


@pytest.mark.parametrize("html, sentences, expected", [
    # a newline between two sentences of a paragraph stays; one inside a sentence does not cut it
    ("<p>A man sits.\nTwo dogs play.</p>", ["A man sits.", "Two dogs play."], "<p>A MAN SITS.\nTWO DOGS PLAY.</p>"),
    ("<p>A man in a blue\n   shirt runs.</p>", ["A man in a blue shirt runs."], "<p>A MAN IN A BLUE\n   SHIRT RUNS.</p>"),
    ("<p>\n  A   man.\n\n\tA <b>big</b>  dog.\n</p>", ["A man.", "A big dog."],
     "<p>\n  A   MAN.\n\n\tA <b>BIG</b>  DOG.\n</p>"),
    ("<li>Two\r\nwords</li>", ["Two words"], "<li>TWO\r\nWORDS</li>"),
    ('<img alt="A  red\ncar.">', ["A red car."], '<img alt="A  RED\nCAR.">'),
    # a no-break space is no whitespace of HTML, yet it parts two words: the engine sees a space there (a tokenizer
    # that took "A\xa0B" for one word would number the words of its alignment otherwise than the markup)
    ("<p>A&nbsp;B  c.</p>", ["A B c."], "<p>A B  C.</p>"),
    ("<p>10\u202fkm <b>far</b>.</p>", ["10 km far."], "<p>10 KM <b>FAR</b>.</p>"),
])
def test_html_whitespace_comes_back_as_written_and_the_engine_sees_one_space(html, sentences, expected):
    engine = FakeEngine()
    assert Documents(engine, format="html").translate_chunk([html])[0].text == expected
    assert engine.calls == [sentences]


@pytest.mark.parametrize("translation, n, runs, expected", [
    ("a b c d", 4, [(2, "\n  ")], "a b\n  c d"),  # after word 2 of 4: after word 2 of 4
    ("a b", 4, [(2, "\n")], "a\nb"),  # 2 of 4 -> 1 of 2
    ("a b c d e f", 3, [(1, "\t")], "a b\tc d e f"),  # 1 of 3 -> 2 of 6
    ("a b c", 3, [(1, "\n"), (2, "  ")], "a\nb  c"),
    ("a b", 4, [(1, "\n"), (2, "  ")], "a\nb"),  # two runs for one place: the first
    ("a b", 4, [(3, "\n")], "a\nb"),  # 3 of 4 -> 2 of 2: inside, the last place
    ("word", 3, [(1, "\n")], "word"),  # one word: no place
    ("", 3, [(1, "\n")], ""),
    ("a  b", 2, [], "a  b"),  # nothing to place: the translation as it is
])
def test_respace_puts_runs_between_target_words_at_the_same_share(translation, n, runs, expected):
    assert respace(translation, n, runs) == expected


@pytest.mark.parametrize("lines, words, pieces", [
    (10, 8, [64, 16]),  # 80 words over 10 lines: lines together, at most 64 words a piece
    (8, 8, [64]),  # 64: one sentence
    (1, 100, [64, 36]),  # one line of 100 words without a stop: cut every 64 words
    (100, 1, [64, 36]),  # a word a line: not a sentence a word
    (3, 40, [40, 40, 40]),  # 120 words: no two lines fit together
    (3, 30, [60, 30]),  # two do
])
def test_a_long_sentence_of_a_page_is_cut_at_its_lines_or_every_64_words(lines, words, pieces):
    """As one sentence, the model would read its first few hundred tokens only (a 34,000-word line kept 17)."""
    line = " ".join(["word"] * (words - 1) + ["x"])
    html = "<p>" + "\n  ".join([line] * lines) + "</p>"
    engine = FakeEngine()
    done = Documents(engine, format="html").translate_chunk([html])[0].text
    assert [len(s.split()) for s in engine.calls[0]] == pieces
    assert done == html.replace("word", "WORD").replace("x", "X")  # every word, every line break kept


@pytest.mark.parametrize("text", ["", " ", "\n \n", "a", " a\n b. \t c d.\r\n", "Hund。Katze。 x", "a\x0cb",
                                  "\n".join(["- -"] + ["a b c d e f g h"] * 9 + ["...", "z"])])
@pytest.mark.parametrize("split", [True, False])
def test_a_flowed_layout_joined_with_its_own_sentences_is_the_text(text, split):
    shape = flowed(text, "en", split)
    assert shape.join(shape.sentences) == text
    assert not any("  " in s or any(c in s for c in "\t\n\r\x0c") for s in shape.sentences)


def paragraphs(lang: str, n: int = 200) -> list[list[str]]:
    """`n` paragraphs of 2 to 5 consecutive Multi30k test lines, each line ending in a period."""
    with gzip.open(MULTI30K / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    lines = [line if line[-1] in ".!?" else line + "." for line in lines if line]
    out, at = [], 0
    for i in range(n):
        size = 2 + i % 4
        out.append(lines[at : at + size])
        at += size
    return out


@pytest.mark.skipif(not MULTI30K.is_dir(), reason="no Multi30k folder beside the repository (../shared/data/multi30k)")
@pytest.mark.parametrize("lang, merged", [("en", 0), ("de", 3), ("fr", 0), ("cs", 2)])
def test_no_sentence_is_lost_on_200_multi_sentence_paragraphs(lang, merged):
    """The issue's goal: a paragraph of N sentences gives N translated sentences, on 200 paragraphs: every
    sentence reaches the engine (`merged` pairs of them, measured, in one piece: a caption that starts with a
    digit stays with the one before, see docs/segmenters.md) and every translation comes back."""
    engine = FakeEngine()
    documents = Documents(engine)
    documents.lang = lang  # the fake model's source language: each language's rules
    paras = paragraphs(lang)
    done = documents.translate_chunk([" ".join(p) for p in paras])
    sent = engine.calls[0]
    assert len(sent) == sum(len(p) for p in paras) - merged
    lost = sum(t.text != " ".join(" ".join(w.upper() for w in s.split()) for s in p) for t, p in zip(done, paras))
    assert lost == 0


@pytest.mark.parametrize("format, texts", [
    ("text", ["A dog runs. A man sits.", "", "Two women walk.\nA boy jumps."]),
    ("html", ['<html lang="en"><p>A dog <b>runs</b> fast. A man sits.</p><img alt="A red car."><p>Two women.</p>',
              "<p></p>", "<ul><li>A <i>boy</i> jumps.</li></ul>"]),
])
def test_the_server_s_steps_give_what_documents_give(tiny_checkpoint, format, texts):
    """The steps the server takes one by one (plan, the sentences, assemble, the alignments of the pieces with
    inline tags, finish) give each text what Documents.translate_chunk gives, lang on <html> included."""
    from nmt.documents.texts import align, plan
    from nmt.engines.torch_engine import TorchEngine

    engine = TorchEngine(tiny_checkpoint, SearchConfig(beam=2))
    work = plan(texts, "en", True, format, "de")
    pieces = work.assemble(engine.translate_chunk(work.sentences), 1)
    aligned = work.aligned(pieces)
    assert (len(aligned) == 2) == (format == "html")  # the blocks holding <b> and <i>, not the alt text
    done = work.finish(pieces, {i: align(engine, pieces[i]) for i in aligned})
    expected = Documents(engine, True, format).translate_chunk(texts)
    assert [t.text for t in done] == [t.text for t in expected]
    assert format == "text" or done[0].text.startswith('<html lang="de">')
