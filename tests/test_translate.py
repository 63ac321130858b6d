"""TorchEngine: one output per input line, order restored, batching-independent; streaming input; n-best format."""

from __future__ import annotations

import json
import os
import random
import threading

import pytest

from nmt.core.errors import ConfigError, InputError
from nmt.core.progress import Progress
from nmt.documents.streams import read_chunks, translate_file
from nmt.engines.base import Translation
from nmt.engines.search import SearchConfig
from nmt.engines.torch_engine import TorchEngine
from nmt.workflows.translation import format_nbest, translated_text


@pytest.fixture(scope="module")
def sources(tiny_corpus) -> list[str]:
    return (tiny_corpus / "test.en").read_text(encoding="utf-8").splitlines()[:40]


@pytest.fixture(scope="module")
def translator(tiny_checkpoint) -> TorchEngine:
    return TorchEngine(tiny_checkpoint, SearchConfig(beam=4))


@pytest.fixture(scope="module")
def reference(translator, sources) -> list[str]:
    """Each source translated on its own (batches of one line)."""
    out = [translator.translate_chunk([s])[0].text for s in sources]
    assert len(set(out)) > 5, "the tiny model should give varied translations, or the order tests prove nothing"
    return out


# -- one output per input --------------------------------------------------------------------------


def test_one_output_per_input(tiny_checkpoint, sources):
    events: list[Progress] = []
    translator = TorchEngine(tiny_checkpoint, SearchConfig(beam=2), progress=events.append)
    limit = translator.max_positions - 1
    long_line = " ".join(["The little dog runs on the green grass."] * 60)
    assert len(translator.tokenizer.encode([long_line])[0]) > limit
    lines = [sources[0], "", "   ", long_line, "\t", sources[1], ""]
    out = list(translator.translate([lines]))
    assert len(out) == len(lines)
    assert all(isinstance(t, Translation) and "\n" not in t.text for t in out)
    assert out[1].text == "" and out[6].text == ""
    assert out[2].text == "" and out[4].text == ""  # whitespace only: nothing to translate
    assert out[0].text and out[5].text and out[3].text  # the long line is translated, not dropped
    warnings = [e.message for e in events if e.message and "warning" in e.message]
    assert len(warnings) == 1
    assert "line 4" in warnings[0] and str(limit) in warnings[0]


def test_long_line_warning_counts_lines_across_chunks(tiny_checkpoint, sources):
    events: list[Progress] = []
    translator = TorchEngine(tiny_checkpoint, SearchConfig(beam=1), progress=events.append)
    long_line = " ".join(["A man is riding a bicycle down the street."] * 60)
    out = list(translator.translate([[sources[0], sources[1]], ["", long_line]]))
    assert len(out) == 4 and out[3].text
    assert [e.message for e in events if e.message and "line 4 " in e.message]


def test_empty_chunks_and_stream(translator):
    assert list(translator.translate([])) == []
    assert list(translator.translate([[], [""], []]))[0].text == ""
    assert translator.translate_chunk([]) == []


def test_order_restored(translator, sources, reference):
    order = list(range(len(sources)))
    random.Random(4).shuffle(order)
    shuffled = [sources[i] for i in order]
    out = [t.text for t in translator.translate([shuffled])]
    assert out == [reference[i] for i in order]


def test_translate_file(translator, sources, reference, tmp_path):
    path = tmp_path / "src.en"
    path.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    assert translate_file(translator, path) == reference
    assert translate_file(translator, None, sources) == reference


@pytest.mark.parametrize("max_tokens, max_sentences", [(4096, 1), (4096, 3), (4096, 64), (40, 128), (1, 128)])
def test_batching_does_not_change_results(tiny_checkpoint, sources, reference, max_tokens, max_sentences):
    translator = TorchEngine(tiny_checkpoint, SearchConfig(beam=4), max_tokens=max_tokens, max_sentences=max_sentences)
    batches = list(translator.batches(translator.encode(sources, 0)))
    assert sorted(i for b in batches for i in b) == list(range(len(sources)))  # every line in one batch
    assert all(len(b) <= max_sentences for b in batches)
    out = [t.text for t in translator.translate([sources])]
    assert out == reference


def test_chunking_does_not_change_results(translator, sources, reference):
    chunks = [sources[:1], sources[1:7], sources[7:8], sources[8:]]
    assert [t.text for t in translator.translate(chunks)] == reference


@pytest.mark.parametrize("beam", [1, 4])
def test_cached_and_uncached_decoding_agree(tiny_checkpoint, sources, beam, monkeypatch):
    translator = TorchEngine(tiny_checkpoint, SearchConfig(beam=beam, nbest=min(beam, 2)))
    cached = translator.translate_chunk(sources[:20])
    start = translator.model.start_decoding
    calls = []

    def uncached(src, use_cache=True):
        calls.append(use_cache)
        return start(src, use_cache=False)

    monkeypatch.setattr(translator.model, "start_decoding", uncached)
    plain = translator.translate_chunk(sources[:20])
    assert calls  # the patched path was really used
    assert [t.text for t in plain] == [t.text for t in cached]
    for a, b in zip(cached, plain):
        assert [h.tokens for _, h in a.hypotheses] == [h.tokens for _, h in b.hypotheses]
        for (_, ha), (_, hb) in zip(a.hypotheses, b.hypotheses):
            assert ha.log_prob == pytest.approx(hb.log_prob, abs=1e-4)


def test_bad_search_settings(tiny_checkpoint):
    for cfg in (SearchConfig(beam=0), SearchConfig(beam=2, nbest=3), SearchConfig(lenpen_type="x"),
                SearchConfig(max_len_a=-1.0)):
        with pytest.raises(ConfigError):
            TorchEngine(tiny_checkpoint, cfg)


# -- n-best ----------------------------------------------------------------------------------------


def test_format_nbest(tiny_checkpoint, sources):
    n = 3
    translator = TorchEngine(tiny_checkpoint, SearchConfig(beam=4, nbest=n))
    lines = sources[:6]
    for i, t in enumerate(translator.translate([lines])):
        rows = format_nbest(i, t)
        assert len(rows) == n
        fields = [r.split("\t") for r in rows]
        assert all(len(f) == 5 for f in fields)
        assert [int(f[0]) for f in fields] == [i] * n
        assert [int(f[1]) for f in fields] == list(range(n))
        scores = [float(f[2]) for f in fields]
        assert scores == sorted(scores, reverse=True)
        assert all(float(f[3]) <= 0.0 for f in fields)  # log-probabilities
        assert fields[0][4] == t.text
        assert [f[4] for f in fields] == [text for text, _ in t.hypotheses]


def test_format_nbest_empty_line():
    rows = format_nbest(7, Translation("", []))
    assert [r.split("\t")[:2] for r in rows] == [["7", "0"]]
    assert rows[0].endswith("\t")


def test_nbest_gives_n_lines_for_empty_input(tiny_checkpoint):
    """docs/translation.md: `--nbest N` prints N lines per input, so an empty input line must give N lines too."""
    n = 2
    translator = TorchEngine(tiny_checkpoint, SearchConfig(beam=2, nbest=n))
    out = [format_nbest(i, t) for i, t in enumerate(translator.translate([["A dog runs.", ""]]))]
    assert [len(rows) for rows in out] == [n, n]


# -- JSON lines ------------------------------------------------------------------------------------

TABBED = "A man walks.\tTwo dogs play.\n\nA dog runs.\n"  # a tab between two sentences comes back between them


@pytest.mark.parametrize("nbest, alignments", [(1, False), (1, True), (2, False), (2, True)])
def test_json_lines_cannot_be_misread(tiny_checkpoint, tmp_path, nbest, alignments):
    """--json: one JSON object per input line whatever the text holds (its tab kept), the text and score of
    --scores, the n-best of --nbest and the alignments of --alignments, each in its own field."""
    engine = TorchEngine(tiny_checkpoint, SearchConfig(beam=2, nbest=nbest))

    (tmp_path / "in.txt").write_text(TABBED)

    def run(**options) -> list[str]:
        with open(tmp_path / "in.txt", "rb") as stream:
            return "".join(translated_text(engine, stream, lambda event: None, alignments, **options)).splitlines()

    rows = [json.loads(line) for line in run(json_lines=True)]
    assert len(rows) == 3 and "\t" in rows[0]["text"] and rows[1]["text"] == ""
    if nbest == 1:
        plain = run(scores=True) if not alignments else None
        if plain is not None:  # TEXT<TAB>SCORE: read right to left, the only way it can be
            assert [(r["text"], r["score"]) for r in rows] == [(line.rsplit("\t", 1)[0], float(line.rsplit("\t", 1)[1]))
                                                               for line in plain]
        assert ("alignment" in rows[0]) == alignments and "nbest" not in rows[0]
    else:
        listed = [line.split("\t", 4) for line in run()]
        if not alignments:
            assert [h["text"] for r in rows for h in r["nbest"]] == [f[4] for f in listed]
            assert [h["score"] for r in rows for h in r["nbest"]] == [float(f[2]) for f in listed]
        assert all(len(r["nbest"]) == nbest for r in rows[::2]) and rows[0]["nbest"][0]["text"] == rows[0]["text"]
        assert all(("alignment" in h) == alignments for h in rows[0]["nbest"])


# -- read_chunks -----------------------------------------------------------------------------------


def lines_of(chunks) -> list[str]:
    return [line for chunk in chunks for line in chunk]


def test_read_chunks_streams_before_eof():
    r, w = os.pipe()
    reader = os.fdopen(r, "rb")
    chunks = read_chunks(reader)
    got: list[list[str]] = []
    arrived = threading.Event()

    def consume_one():
        got.append(next(chunks))
        arrived.set()

    try:
        os.write(w, b"first line\nsecond line\n")
        threading.Thread(target=consume_one, daemon=True).start()
        # The writer is still open: a chunk must come now, not at EOF.
        assert arrived.wait(10), "read_chunks waited for EOF instead of yielding the lines that had arrived"
        assert got == [["first line", "second line"]]

        arrived.clear()
        threading.Thread(target=consume_one, daemon=True).start()
        os.write(w, b"third ")
        assert not arrived.wait(0.2)  # half a line is not a line yet
        os.write(w, b"line\n")
        assert arrived.wait(10)
        assert got[-1] == ["third line"]

        os.write(w, b"last, no newline")
    finally:
        os.close(w)
    assert list(chunks) == [["last, no newline"]]
    reader.close()


def test_read_chunks_caps_chunks_at_max_lines(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(10)))
    with open(path, "rb") as f:
        chunks = list(read_chunks(f, max_lines=3))
    assert [len(c) for c in chunks] == [3, 3, 3, 1]
    assert lines_of(chunks) == [f"line {i}" for i in range(10)]


def test_read_chunks_large_input(tmp_path):
    """More than one os.read block (64 KiB): lines split across blocks are joined."""
    lines = [f"sentence number {i} " + "x" * (i % 97) for i in range(5000)]
    path = tmp_path / "big.txt"
    path.write_text("".join(s + "\n" for s in lines), encoding="utf-8")
    assert path.stat().st_size > 3 * (1 << 16)
    with open(path, "rb") as f:
        chunks = list(read_chunks(f, max_lines=512))
    assert lines_of(chunks) == lines
    assert all(1 <= len(c) <= 512 for c in chunks)


@pytest.mark.parametrize("data, expected", [
    (b"a\nb", ["a", "b"]),  # final line without newline
    (b"a\nb\n", ["a", "b"]),
    (b"\n\n\n", ["", "", ""]),  # empty lines are lines
    (b"", []),
    (b"x", ["x"]),
    (b"crlf\r\nline\r\n", ["crlf", "line"]),
    ("Grüße, Straße\n€\n".encode(), ["Grüße, Straße", "€"]),
])
def test_read_chunks_lines(tmp_path, data, expected):
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    with open(path, "rb") as f:
        assert lines_of(read_chunks(f)) == expected


def test_read_chunks_invalid_utf8(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"fine\nbad \xff\xfe bytes\nalso fine\n")
    events: list[Progress] = []
    with open(path, "rb") as f:
        out = lines_of(read_chunks(f, progress=events.append))
    assert len(out) == 3
    assert out[0] == "fine" and out[2] == "also fine"
    assert out[1].startswith("bad ") and out[1].endswith(" bytes") and "\ufffd" in out[1]
    warnings = [e.message for e in events if e.message]
    assert len(warnings) == 1 and "line 2" in warnings[0] and "UTF-8" in warnings[0]


def test_read_chunks_multibyte_character_split_across_writes():
    r, w = os.pipe()
    reader = os.fdopen(r, "rb")
    data = "Straße\n".encode()
    cut = data.index("ß".encode()) + 1  # in the middle of the two bytes of ß
    events: list[Progress] = []
    chunks = read_chunks(reader, progress=events.append)
    os.write(w, data[:cut])
    result: list[list[str]] = []
    t = threading.Thread(target=lambda: result.append(next(chunks)), daemon=True)
    t.start()
    os.write(w, data[cut:])
    t.join(10)
    os.close(w)
    assert result == [["Straße"]] and not events
    assert list(chunks) == []
    reader.close()


# -- fuzzing: whatever the bytes, one line out per line in --------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nmt.core.compression import HEAD, SIGNATURES, matches  # noqa: E402

# Lines built from what breaks line-oriented code: Unicode line and paragraph separators (str.splitlines
# splits on them, a file does not), CR, NUL, BOMs, every whitespace, invalid UTF-8, long runs.
LINE_BREAKERS = ["\r", "\x00", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\ufeff",
                 "\u00a0", "\u3000", "\u200b", "\t", " "]
hostile_text = st.lists(st.one_of(st.sampled_from(LINE_BREAKERS), st.text(max_size=12),
                                  st.sampled_from(["a man .", "ein Hund", "word " * 200])), max_size=12).map("".join)
hostile_line = st.one_of(hostile_text.map(lambda t: t.encode("utf-8")),
                         st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")))


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(lines=st.lists(hostile_line, max_size=8), final_newline=st.booleans(), nbest=st.sampled_from([1, 2]))
@example(lines=[b"7z\xbc\xaf'\x1c"], final_newline=False, nbest=1)  # 7z's signature: refused, not translated
@example(lines=[b"\x1f\x8bgarbage", b"more"], final_newline=True, nbest=2)  # gzip's, then no gzip data
def test_fuzz_one_output_line_per_input_line(tiny_checkpoint, tmp_path_factory, lines, final_newline, nbest):
    """The CLI's path (read_chunks -> TorchEngine.translate -> one '\\n'-ended row per hypothesis) on
    arbitrary bytes: as many rows as input lines (times --nbest), none with a line break inside."""
    translator = fuzz_translator(tiny_checkpoint, nbest)
    raw = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    path = tmp_path_factory.mktemp("fuzz") / "in.txt"
    path.write_bytes(raw)
    expected = raw.count(b"\n") + (1 if raw and not raw.endswith(b"\n") else 0)
    if any(matches(raw[:HEAD], sig) for sig in SIGNATURES):  # compressed data (hypothesis knows the magic bytes)
        with open(path, "rb") as stream, pytest.raises(InputError, match="ends early|not valid|compressed data"):
            list(translator.translate(read_chunks(stream, max_lines=3)))  # garbage in a compression's frame
        return
    with open(path, "rb") as stream:
        out = list(translator.translate(read_chunks(stream, max_lines=3)))
    assert len(out) == expected
    rows = [row for i, t in enumerate(out) for row in (format_nbest(i, t) if nbest > 1 else [t.text])]
    assert len(rows) == expected * nbest
    assert not any("\n" in row or "\r" in row for row in rows)


_FUZZ_TRANSLATORS: dict[int, TorchEngine] = {}


def fuzz_translator(checkpoint, nbest: int) -> TorchEngine:
    """One translator per --nbest for all examples (hypothesis runs the test body many times)."""
    if nbest not in _FUZZ_TRANSLATORS:
        _FUZZ_TRANSLATORS[nbest] = TorchEngine(checkpoint, SearchConfig(beam=2, nbest=nbest, max_len_a=0.3, max_len_b=4),
                                              max_tokens=64)
    return _FUZZ_TRANSLATORS[nbest]


@pytest.mark.parametrize("page, untouched", [
    (b"<pre>a\r\nb</pre>\r\n<p>x</p>\r\n", b"<pre>a\r\nb</pre>\r\n<p>"),  # CRLF kept, in <pre> and between blocks
    (b"\xef\xbb\xbf<pre>a\rb</pre>\n", b"<pre>a\rb</pre>\n"),  # a byte-order mark dropped, a lone CR kept
    (b"<pre>a\nb</pre>", b"<pre>a\nb</pre>\n"),  # a document without a line end at its end gets one
])
def test_an_html_document_comes_back_with_its_own_line_ends(tiny_checkpoint, tmp_path, page, untouched):
    engine = TorchEngine(tiny_checkpoint, SearchConfig(beam=1))
    (tmp_path / "page.html").write_bytes(page)
    with open(tmp_path / "page.html", "rb") as stream:
        out = "".join(translated_text(engine, stream, lambda event: None, format="html")).encode()
    assert out.startswith(untouched) and out.endswith(b"\r\n" if page.endswith(b"\r\n") else b"\n")
    assert out.count(b"\r\n") == page.count(b"\r\n")
