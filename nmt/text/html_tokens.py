"""HTML as tokens, each kept as written (`tokens`): the standard library's tolerant `html.parser` finds them, and what
it skips or gives up on (`</>`, `<a b="c`, some declarations such as `<![x]>`) is kept as a token of its own, so that
the tokens' texts put together are the document, byte for byte. `nmt.text.markup` reads them."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from itertools import accumulate
from typing import Optional

Attrs = list[tuple[str, Optional[str]]]
Token = tuple[str, str, Attrs, str]  # kind, tag name, attributes, the text as written
MARKUP = re.compile(r"<[A-Za-z/!?]")


class _Parser(HTMLParser):
    """The tokens of a document, each with where it starts (line, column) and the length of its own text."""

    found: list[tuple[str, str, Attrs, tuple[int, int], int]]  # kind, tag, attributes, (line, column), length

    def handle_starttag(self, tag: str, attrs: Attrs) -> None:
        self.found.append(("start", tag, attrs, self.getpos(), len(self.get_starttag_text() or "")))

    def handle_endtag(self, tag: str) -> None:
        self.found.append(("end", tag, [], self.getpos(), -1))

    def handle_data(self, data: str) -> None:
        self.found.append(("text", "", [], self.getpos(), -1))  # read from the source, entities as spelt there

    handle_comment = handle_pi = unknown_decl = handle_data  # text that `tokens` finds is markup
    handle_startendtag = handle_starttag  # <br/>: its tag ends with "/>"


def tokens(html: str) -> list[Token]:
    """Every token of `html` with its text as written: the texts put together are `html`."""
    found: list[tuple[str, str, Attrs, int, int]] = []
    base = 0
    while base < len(html):
        parser, rest, failed = _Parser(), html[base:], False
        parser.found = []
        try:
            parser.feed(rest)
            parser.close()
        except Exception:  # it gives up on some declarations (<![x]>): that one is kept as written, the rest read on
            failed = True
        lines = [0] + [m.end() for m in re.finditer("\n", rest)]
        offsets = [base + lines[ln - 1] + col for ln, col in [f[3] for f in parser.found] + [parser.getpos()]]
        found += [(kind, tag, attrs, at, size) for (kind, tag, attrs, _, size), at in zip(parser.found, offsets)]
        if not failed:
            break
        found.append(("other", "", [], offsets[-1], -1))
        base = html.find(">", offsets[-1]) + 1 or len(html)
    starts = list(accumulate([f[3] for f in found] + [len(html)], max))
    pieces: list[Token] = [("text", "", [], html[:starts[0]])]
    for (kind, tag, attrs, _, size), start, end in zip(found, starts, starts[1:]):
        raw = html[start:end]
        cut = size if 0 <= size < len(raw) else len(raw)
        pieces += [(kind, tag, attrs, raw[:cut]), ("text", "", [], raw[cut:])]
    tokens: list[Token] = []
    for kind, tag, attrs, raw in pieces:  # markup the parser skipped (`</>`) or gave up on (`<a b="c`): kept
        joined = kind == "text" and tokens and tokens[-1][0] == "text"  # text the parser cut at a `<`
        start, raw = (len(tokens[-1][3]) - 1, tokens.pop()[3] + raw) if joined else (0, raw)
        markup = MARKUP.search(raw, max(start, 0)) if kind == "text" else None
        cut = markup.start() if markup else len(raw)
        tokens += [t for t in [(kind, tag, attrs, raw[:cut]), ("other", "", [], raw[cut:])] if t[3]]
    return tokens
