"""HTML as tokens, each kept as written (`tokens`): the standard library's tolerant `html.parser` finds them, and what
it skips or gives up on (`</>`, `<a b="c`, some declarations such as `<![x]>`) is kept as a token of its own, so that
the tokens' texts put together are the document, byte for byte. `nmt.text.markup` reads them."""

from __future__ import annotations

import re
from bisect import bisect_right
from html.parser import HTMLParser
from itertools import accumulate
from typing import Optional

Attrs = list[tuple[str, Optional[str]]]
Token = tuple[str, str, Attrs, str]  # kind, tag name, attributes, the text as written
MARKUP = re.compile(r"<[A-Za-z/!?]")
ATTRIBUTE = re.compile(r"""([^\s/>"'=][^\s/>=]*)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s>]+))?""")


def set_attribute(raw: str, names: tuple[str, ...], value: str) -> str:
    """The start tag `raw` with the value of each attribute of `names` that it has (lower-case) set to `value`."""
    def replace(m: re.Match[str]) -> str:
        return f'{m.group(1)}="{value}"' if m.group(1).lower() in names and m.group(2) is not None else m.group()
    return raw[0] + ATTRIBUTE.sub(replace, raw[1:]) if value.isascii() and value.replace("-", "").isalnum() else raw


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

    def parse_marked_section(self, i: int, report: bool = True) -> int:
        """A marked section (`<![CDATA[...]]>`), or one the parser does not know (`<![x]>`), which it gives up on:
        kept as written up to its `>` and read on from there, rather than the parse ending (then restarted on the
        rest of the document after each one: quadratic in a document of many)."""
        where = self.lineno, self.offset  # the parser moves them on before it gives up (`_scan_name`)
        try:
            return int(super().parse_marked_section(i, report))
        except AssertionError:
            self.lineno, self.offset = where
            end = self.rawdata.find(">", i)  # (the whole document is fed at once: none means none at all)
            end = len(self.rawdata) - 1 if end < 0 else end
            self.unknown_decl(self.rawdata[i + 3 : end])
            return end + 1


def tokens(html: str) -> list[Token]:
    """Every token of `html` with its text as written: the texts put together are `html`. Linear in the document:
    each part of it is read once (a parse the parser gives up on goes on after the markup it failed at)."""
    line_starts = [0] + [m.end() for m in re.finditer("\n", html)]
    found: list[tuple[str, str, Attrs, int, int]] = []
    base = 0
    while base < len(html):
        parser, failed = _Parser(), False
        parser.found = []
        try:
            parser.feed(html[base:] if base else html)
            parser.close()
        except Exception:  # it gives up on other malformed markup: that is kept as written, the rest read on
            failed = True
        first = bisect_right(line_starts, base) - 1  # the line of `base`: the parser's line 1
        offsets = [(base if ln == 1 else line_starts[first + ln - 1]) + col
                   for ln, col in [f[3] for f in parser.found] + [parser.getpos()]]
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
    return with_skipped_markup(pieces)


def with_skipped_markup(pieces: list[Token]) -> list[Token]:
    """`pieces` with the text the parser cut at a `<` joined again, and the markup it skipped (`</>`) or gave up on
    (`<a b="c`) inside a text kept as an "other" token from there on. A text is joined once, at its end (joining
    it piece by piece would copy it again for each piece)."""
    tokens: list[Token] = []
    run: list[str] = []  # the pieces of the text being read

    def end_run() -> None:
        if text := "".join(run):
            tokens.append(("text", "", [], text))
        run.clear()

    for kind, tag, attrs, raw in pieces:
        if not raw:
            continue
        if kind != "text":
            end_run()
            tokens.append((kind, tag, attrs, raw))
            continue
        last = run[-1][-1:] if run else ""  # markup may begin with the run's last character: `<` then `a`
        markup = MARKUP.search(last + raw)
        if markup is None:
            run.append(raw)
            continue
        cut = markup.start() - len(last)
        if cut < 0:
            run[-1], rest = run[-1][:-1], last + raw
        else:
            run.append(raw[:cut])
            rest = raw[cut:]
        end_run()
        tokens.append(("other", "", [], rest))
    end_run()
    return tokens
