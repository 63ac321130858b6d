"""HTML as tokens: the same tokens as the straightforward reading (restart after each parse error, join text piece
by piece), on any tag soup, in time linear in the document; and every shape of benchmarks/document_scaling.py
(markup and sentence splitting) read in linear time."""

from __future__ import annotations

import gc
import re
from itertools import accumulate

import pytest
from conftest import benchmark_script
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.text.html_tokens import MARKUP, Token, _Parser, tokens


def reference(html: str) -> list[Token]:
    """The tokens as nmt read them before reading became linear: the parser restarted on the rest of the document
    after each error, the text joined again piece by piece."""
    found = []
    base = 0
    while base < len(html):
        parser, rest, failed = _Parser(), html[base:], False
        parser.found = []
        parser.parse_marked_section = super(_Parser, parser).parse_marked_section  # the parser's own: it gives up
        try:
            parser.feed(rest)
            parser.close()
        except Exception:
            failed = True
        lines = [0] + [m.end() for m in re.finditer("\n", rest)]
        offsets = [base + lines[ln - 1] + col for ln, col in [f[3] for f in parser.found] + [parser.getpos()]]
        found += [(kind, tag, attrs, at, size) for (kind, tag, attrs, _, size), at in zip(parser.found, offsets)]
        if not failed:
            break
        found.append(("other", "", [], offsets[-1], -1))
        base = html.find(">", offsets[-1]) + 1 or len(html)
    starts = list(accumulate([f[3] for f in found] + [len(html)], max))
    pieces = [("text", "", [], html[:starts[0]])]
    for (kind, tag, attrs, _, size), start, end in zip(found, starts, starts[1:]):
        raw = html[start:end]
        cut = size if 0 <= size < len(raw) else len(raw)
        pieces += [(kind, tag, attrs, raw[:cut]), ("text", "", [], raw[cut:])]
    out: list[Token] = []
    for kind, tag, attrs, raw in pieces:
        joined = kind == "text" and out and out[-1][0] == "text"
        start, raw = (len(out[-1][3]) - 1, out.pop()[3] + raw) if joined else (0, raw)
        markup = MARKUP.search(raw, max(start, 0)) if kind == "text" else None
        cut = markup.start() if markup else len(raw)
        out += [t for t in [(kind, tag, attrs, raw[:cut]), ("other", "", [], raw[cut:])] if t[3]]
    return out


PIECES = st.sampled_from(["<p>", "</p>", "<b>", "</b>", "<a href='x'>", "</a>", "<br/>", "<![x]>", "<![CDATA[a<b]]>",
                          "<!-- c -->", "<!x>", "</>", "<", ">", "a < b", "<a b=\"c", "&amp;", "Ein Mann.", " ", "\n",
                          "<script>if (a<b) x();</script>", "<?pi?>", "<![if x]>y<![endif]>", "<![ x", "é"])


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=25).map("".join))
def test_the_tokens_are_those_of_the_straightforward_reading(html):
    found = tokens(html)
    assert "".join(t[3] for t in found) == html
    if "<![" not in html:  # where the parser gave up, its position was off by the declaration's "<![": see below
        assert merged(found) == merged(reference(html))


def merged(found: list[Token]) -> list[Token]:
    """Consecutive markup kept as written, as one (one object or two side by side come out the same)."""
    out: list[Token] = []
    for t in found:
        if out and t[0] == out[-1][0] == "other":
            out[-1] = ("other", "", [], out[-1][3] + t[3])
        else:
            out.append(t)
    return out


@pytest.mark.parametrize("html, kept", [
    ("a<![x]>b", ["a", "<![x]>", "b"]),
    ("</p><![ x", ["</p>", "<![ x"]),  # the straightforward reading gave "</p><![" and " x"
    ("<![ x<p>y", ["<![ x<p>", "y"]),  # as a browser reads it: a bogus comment up to its ">"
    ("<p>a<![x]>\n<![y]>b</p>", ["<p>", "a", "<![x]>", "\n", "<![y]>", "b", "</p>"]),
    ("<![x", ["<![x"]),  # no end: the rest is the declaration's
    ("a<![CDATA[x<y]]>b", ["a", "<![CDATA[x<y]]>", "b"]),
])
def test_a_marked_section_the_parser_does_not_know_is_kept_as_written(html, kept):
    assert [t[3] for t in tokens(html)] == kept


# -- linear time --------------------------------------------------------------------------------------------

with benchmark_script("document_scaling") as scaling:
    SHAPES, seconds = scaling.SHAPES, scaling.seconds

SMALL = 4 * 1024  # bytes; the large input is 16 times as many


def per_byte(kind: str, text: str) -> float:
    """Seconds per byte of reading `text`, the fastest of three runs, Python's garbage collector off: its passes
    over every live object make the time of allocation-heavy work grow with the heap (a linear reading of 64 KB
    measured up to 4x the time per byte of 4 KB with it on, 0.8-1.6x with it off), which is no work of ours."""
    gc.collect()
    gc.disable()
    try:
        return min(seconds(kind, text, 1) for _ in range(3)) / len(text)
    finally:
        gc.enable()


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SHAPES))
def test_work_grows_linearly_with_the_input(shape):
    """16 times the input takes at most 4 times as long per byte (linear: 1; quadratic: 16), so that a busy machine
    does not fail it and quadratic work does."""
    kind, make = SHAPES[shape]
    small, large = make(SMALL), make(16 * SMALL)
    assert per_byte(kind, large) < 4 * max(per_byte(kind, small), 2e-8), shape  # 20 ns/byte: below timing noise


def test_the_time_test_catches_quadratic_work():
    """The test above fails on quadratic work: joining text pieces one by one, as the reading once did."""
    def read(html: str) -> None:  # each piece joined to all the text before it, as the reading once did
        text = ""
        for piece in html.split("<"):
            text = "".join((text, "<", piece))  # a new string each time (`+=` may grow one in place)
            text.count(">")  # and a pass over all of it

    with benchmark_script("document_scaling") as module:
        module.translate_html = lambda html, translate: read(html)  # the benchmark's own timing, over `read`
        small, large = "a < b " * (SMALL // 6), "a < b " * (16 * SMALL // 6)
        assert module.seconds("html", large, 3) / len(large) > 4 * module.seconds("html", small, 3) / len(small)
