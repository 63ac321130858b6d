"""Translating HTML while keeping its markup: `translate_html`.

`html.parser` (tolerant) cuts the document into tokens kept as written; the text of each block and translatable
attribute goes to one call of `translate`; the rest is written back as it was; lang on <html> becomes the target's.
- Blocks: a non-inline element (p, div, li, td, h1, title, option, button, unknown ones), <br> or <hr> ends a text.
- Inline elements (`INLINE`: a, b, em, span, sub, label, font, ...) stay in the text; their tags go round the target
  words aligned to their source words (without alignment: the same share of the translation), a child inside its
  parent, a range that would cross another grown to hold it. Markup inside a word (H<sub>2</sub>O) keeps its place
  where the aligned target word copies the source word (case aside); else it goes round whole target words.
- Untouched, content and all: `UNTOUCHED` (script, style, code, pre, textarea: what a form sends, ...), and elements
  with translate="no" or the class "notranslate" (translate="yes" inside included).
- Objects, kept as written after the target word aligned to the source word before them: untouched inline elements,
  void ones (img, input, wbr), comments, and tags that pair with none in their block (malformed markup).
- Translated attributes: `TRANSLATED`, the value of `BUTTONS` inputs, the content of `DESCRIPTIONS` metas.
- Texts given: entities decoded, whitespace as written (`nmt.documents` gives the model one space and puts the runs
  back), a block's leading and trailing whitespace kept outside (an object's whitespace: one space); a text without
  a word is not given. Written back: `<`, `>`, `&` escaped, and characters the source block (or attribute value)
  wrote as an entity (&nbsp; &copy;) as that entity; nothing else.
"""

from __future__ import annotations

import functools
import html as htmllib
import re
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional, Union

from nmt.core.errors import InputError
from nmt.text.html_tokens import ATTRIBUTE, Attrs, Token, set_attribute, tokens


@dataclass(frozen=True)
class Aligned:
    """One translated text and its word alignment."""

    text: str  # the translation, plain text (markup.py escapes it)
    # (source word, target word) pairs, 0-based; words are str.split() of the source text given and of `text`;
    # or a function that gives them, called only for a text whose inline markup needs them (an alignment costs a
    # pass of the model, and most blocks have no inline tags)
    alignment: Union[list[tuple[int, int]], Callable[[], list[tuple[int, int]]]] = field(default_factory=list)


Translate = Callable[[list[str]], list[Aligned]]

INLINE = frozenset(["a", "abbr", "acronym", "b", "bdi", "bdo", "big", "blink", "cite", "data", "del", "dfn", "em",
                    "font", "i", "ins", "label", "mark", "nobr", "q", "rb", "rp", "rt", "rtc", "ruby", "s", "small",
                    "span", "strike", "strong", "sub", "sup", "time", "tt", "u"])
UNTOUCHED = frozenset(["script", "style", "code", "pre", "kbd", "samp", "var", "textarea", "svg", "math", "iframe",
                       "object", "canvas", "xmp", "plaintext", "noembed", "noframes"])
VOID = frozenset(["area", "base", "br", "col", "embed", "hr", "img", "input", "keygen", "link", "meta", "param",
                  "source", "track", "wbr"])
# What stands inside a block's text as one object (the rest of VOID and UNTOUCHED ends a block).
OBJECTS = (VOID - {"br", "hr"}) | (UNTOUCHED - {"pre", "xmp", "plaintext", "noembed", "noframes"})
TRANSLATED = frozenset(["alt", "title", "placeholder", "aria-label"])
BUTTONS = frozenset(["button", "submit", "reset"])
DESCRIPTIONS = frozenset(["description", "og:title", "og:description", "twitter:title", "twitter:description"])
INF = float("inf")
MAX_DEPTH = 100  # inline elements nested deeper are objects, elements left open deeper are forgotten

SPACE = " \t\n\r\f"  # HTML's whitespace
RUNS = re.compile(r"[ \t\n\r\f]+|[^ \t\n\r\f]+")
WORD = re.compile(r"\S+")  # a word of str.split()
ENTITY = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")


def translate_html(html: str, translate: Translate, lang: Optional[str] = None) -> str:
    """`html` (a fragment or a whole document) with the text of each block translated, every tag kept (lang on <html>
    set to `lang`): `translate` is called once with every text to translate, giving one `Aligned` per text, in order."""
    return (parsed := parse_html(html, lang)).join(list(translate(parsed.texts)) if parsed.texts else [])


@dataclass
class Parsed:
    """An HTML document read once (`parse_html`): the texts to translate (its blocks' and translatable attributes',
    without tags, scripts, styles or anything else kept as written: also what a language detector should read),
    whether each holds inline markup (placed through a word alignment: only those need one), and `join`."""

    texts: list[str]
    inline: list[bool]
    parts: list[Part]

    def join(self, results: list[Aligned]) -> str:
        """The document with each text replaced by its translation (one `Aligned` per text, in order)."""
        if len(results) != len(self.texts) or not all(isinstance(r, Aligned) for r in results):
            raise InputError(f"{len(results)} results for {len(self.texts)} texts: one Aligned per text, in order")
        return _join(self.parts, results)


def parse_html(html: str, lang: Optional[str] = None) -> Parsed:  # lang: what lang on <html> becomes
    if not isinstance(html, str):
        raise TypeError(f"translate_html takes the HTML as a str, not {type(html).__name__}")
    (document := _Document(lang)).walk(tokens(html))
    return Parsed(document.texts, document.inline, document.out)


@dataclass
class _Atom:  # an object: kept as written, placed in the translation as a whole
    parts: list[Part]
    blank: bool = False  # it holds whitespace: the words on either side stay apart
    parent: int = -1  # the index of the inline element it is in (a block's `elems`); -1: none
    at: int = 0  # its place in the block's text
    before: bool = False  # whitespace before it
    after: bool = False  # and after


@dataclass
class _Elem:  # an inline element: its tags as written, its children, and (in a block) its parent and source text
    name: str
    parts: list[Part]  # the start tag
    close: str = ""
    children: list[Node] = field(default_factory=list)
    parent: int = -1
    start: int = 0
    end: int = 0


Node = Union[str, _Atom, _Elem]  # a text as written


def _bears(node: Node) -> bool:
    """Whether a node holds a word (an element that `_atomize` left always does)."""
    return isinstance(node, _Elem) or (isinstance(node, str) and bool(htmllib.unescape(node).strip()))


def _atomize(nodes: list[Node]) -> list[Node]:
    """`nodes` with each element that holds no word as one object."""
    for i, node in enumerate(nodes):
        if isinstance(node, _Elem):
            node.children = _atomize(node.children)
            if not any(map(_bears, node.children)):
                blank = any(isinstance(c, str) or (isinstance(c, _Atom) and c.blank) for c in node.children)
                nodes[i] = _Atom(_flat([node]), blank)
    return nodes


def _flat(nodes: list[Node], text: bool = True) -> list[Part]:
    """The nodes as written (`text` False: their tags and objects only)."""
    parts: list[Part] = []
    for node in nodes:
        if isinstance(node, _Elem):
            parts += [*node.parts, *_flat(node.children, text), node.close]
        elif isinstance(node, _Atom):
            parts += node.parts
        elif text:
            parts.append(node)
    return parts


def _block(nodes: list[Node], texts: list[str], inline: list[bool]) -> list[Part]:
    """A block as parts: its text to translate (into `texts`; into `inline`: if it holds inline tags), the rest."""
    nodes = _atomize(nodes)
    bearing = [i for i, node in enumerate(nodes) if _bears(node)]
    if not bearing:
        return _flat(nodes)
    head, core, tail = _flat(nodes[:bearing[0]]), nodes[bearing[0]:bearing[-1] + 1], _flat(nodes[bearing[-1] + 1:])
    if isinstance(core[0], str):  # the whitespace before and after the text stays outside it
        head.append(core[0][:len(core[0]) - len(core[0].lstrip(SPACE))])
        core[0] = core[0].lstrip(SPACE)
    if isinstance(core[-1], str):
        tail.insert(0, core[-1][len(core[-1].rstrip(SPACE)):])
        core[-1] = core[-1].rstrip(SPACE)
    block = _Block(core, len(texts))
    texts.append(block.text.lstrip(SPACE))
    inline.append(bool(block.elems or block.objects))
    return [*head, block, *tail]


class _Target:
    """A block's translation, and where each place of the source text went in it."""

    def __init__(self, source: str, result: Aligned):
        self.source, self.src = source, [m.span() for m in WORD.finditer(source)]
        self.starts, self.ends = [s for s, _ in self.src], [e for _, e in self.src]
        self.text = result.text
        self.tgt = [m.span() for m in WORD.finditer(self.text)]
        self.alignment = result.alignment

    @functools.cached_property
    def links(self) -> list[list[int]]:
        """The target words each source word is aligned to."""
        links: list[list[int]] = [[] for _ in self.src]
        pairs = self.alignment() if callable(self.alignment) else self.alignment
        for s, t in pairs:
            if 0 <= s < len(self.src) and 0 <= t < len(self.tgt):
                links[s].append(t)
        return links

    def words(self, first: int, last: int) -> tuple[int, int]:
        """The target words that source words first..last went to: the aligned ones, else the same share."""
        aligned = [t for s in range(first, last + 1) for t in self.links[s]]
        if aligned:
            return min(aligned), max(aligned)
        n, m = len(self.src), len(self.tgt)
        start = min(m - 1, (2 * first * m + n) // (2 * n))
        return start, max(start, min(m - 1, (2 * (last + 1) * m + n) // (2 * n) - 1))

    def inside(self, at: int, word: int, target: Optional[int] = None) -> Optional[int]:
        """Where `at`, inside source word `word`, is in the aligned target word that copies it (`target` if given)."""
        if not (0 <= word < len(self.src) and self.starts[word] < at < self.ends[word]):
            return None
        written = self.source[self.starts[word]:self.ends[word]].casefold()  # H2O; not dem, as long as H2O
        mirror = next((t for t in self.links[word] if self.text[slice(*self.tgt[t])].casefold() == written), None)
        if mirror is None or target not in (None, mirror):
            return None
        return self.tgt[mirror][0] + at - self.starts[word]

    def interval(self, start: int, end: int) -> tuple[int, int]:
        """Where the source text start..end went (half open), at least its words."""
        first = min(bisect_right(self.ends, start), len(self.src) - 1)
        last = max(first, min(bisect_left(self.starts, end) - 1, len(self.src) - 1))
        t_first, t_last = self.words(first, last)
        a, b = self.inside(start, first, t_first), self.inside(end, last, t_last)
        # an end inside a word that the translation does not copy: every word whole, the tags at their edges
        cut = (a is None and self.starts[first] < start) or (b is None and end < self.ends[last])
        a, b = (self.tgt[t_first][0] if a is None else a), (self.tgt[t_last][1] if b is None else b)
        return (a, b) if a < b and not cut else (self.tgt[t_first][0], self.tgt[t_last][1])

    def place(self, at: int, parent: Optional[tuple[int, int]]) -> int:
        """Where an object at `at` goes: after the target word aligned to the source word before it, in `parent`."""
        word = bisect_left(self.starts, at) - 1
        x = self.inside(at, word)
        if x is None and word >= 0:
            n, m = len(self.src), len(self.tgt)
            slot = max(self.links[word]) + 1 if self.links[word] else min(m, ((word + 1) * m + n // 2) // n)
            x = self.tgt[slot - 1][1] if slot else 0
            if parent is not None and slot < m and self.tgt[slot][0] == parent[0]:
                x = parent[0]  # at the start of its parent: after the parent's start tag
        return (x or 0) if parent is None else min(max(x or 0, parent[0]), parent[1])

    def intervals(self, elems: list[_Elem]) -> list[tuple[int, int]]:
        """Each inline element's place in the translation: inside its parent's, and crossing none (one that would is
        grown to hold what it crosses)."""
        out: list[tuple[int, int]] = []
        placed = _Placed()
        for elem in elems:
            a, b = self.interval(elem.start, elem.end)
            if elem.parent >= 0:
                pa, pb = out[elem.parent]
                a, b = (max(a, pa), min(b, pb)) if a < pb and pa < b else (pa, pb)
            while crossing := placed.crossing(a, b):
                a, b = min(a, *(xa for xa, _ in crossing)), max(b, *(xb for _, xb in crossing))
            out.append((a, b))
            placed.add(a, b)
        return out


class _Placed:
    """The intervals placed so far, by start and by end, so that those an interval crosses are found among the ones
    that begin or end inside it (bisect), not by a pass over all: elements placed in document order (parents first)
    cost about log n each, where a pass over every earlier one made a block of n inline elements cost n^2."""

    def __init__(self) -> None:
        self.by_start: list[tuple[int, int]] = []  # (start, end), sorted
        self.by_end: list[tuple[int, int]] = []  # (end, start), sorted

    def add(self, a: int, b: int) -> None:
        insort(self.by_start, (a, b))
        insort(self.by_end, (b, a))

    def crossing(self, a: int, b: int) -> list[tuple[int, int]]:
        """The placed (start, end) that cross [a, b]: starting inside it and ending after it, or starting before it
        and ending inside it."""
        found = []
        for i in range(bisect_right(self.by_start, (a, INF)), len(self.by_start)):
            xa, xb = self.by_start[i]
            if xa >= b:
                break
            if xb > b:
                found.append((xa, xb))
        for i in range(bisect_right(self.by_end, (a, INF)), len(self.by_end)):
            xb, xa = self.by_end[i]
            if xb >= b:
                break
            if xa < a:
                found.append((xa, xb))
        return found


class _Block:
    """A text to translate (a block's, or an attribute value's between `quote`s) with its inline markup: its plain
    text (entities decoded, whitespace as written), its entities, and where its elements and objects stand in it."""

    def __init__(self, nodes: list[Node], index: int, quote: str = ""):
        self.nodes, self.index, self.quote = nodes, index, quote
        self.chunks: list[str] = []
        self.size = 0
        # whitespace since the last word; as written, since the last word or object (a gap), and before all
        self.pending, self.run, self.lead = False, "", ""
        self.entities: dict[str, str] = {}
        self.elems: list[_Elem] = []
        self.objects: list[_Atom] = []
        self.add(nodes, -1)
        self.text = "".join(self.chunks)

    def add(self, nodes: list[Node], parent: int) -> None:
        for node in nodes:
            if isinstance(node, str):
                self.add_text(node)
            elif isinstance(node, _Atom):
                node.parent, node.at, node.before, self.run = parent, self.size, bool(self.run), ""
                self.objects.append(node)
                self.pending = self.pending or node.blank
            else:
                node.parent, node.start = parent, self.size
                self.elems.append(node)
                self.add(node.children, len(self.elems) - 1)
                node.end = self.size

    def add_text(self, raw: str) -> None:
        for m in ENTITY.finditer(raw):
            char = htmllib.unescape(m.group())
            if len(char) == 1 and char not in SPACE:
                self.entities.setdefault(char, m.group())
        for m in RUNS.finditer(htmllib.unescape(raw)):
            run = m.group()
            if self.objects and self.objects[-1].at == self.size and run[0].isspace():  # (&nbsp; too)
                self.objects[-1].after = True
            if run[0] in SPACE:
                if not (self.size or self.objects):  # whitespace before all (inside an element)
                    self.lead += run
                self.pending, self.run = True, self.run + run
                continue
            # (whitespace before the first word: at the start of an element; an object's since the last word: " ")
            gap = (self.run or " ") if self.pending else ""
            self.chunks += [gap, run]
            self.size += len(gap) + len(run)
            self.pending, self.run = False, ""

    def render(self, results: list[Aligned]) -> str:
        target = _Target(self.text, results[self.index])
        quotes = {self.quote: "&quot;" if self.quote == '"' else "&#39;"} if self.quote else {}
        codes, text = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", **quotes, **self.entities}), target.text
        if not target.tgt:
            return self.quote + _join(_flat(self.nodes, text=False), results) + self.quote
        intervals = target.intervals(self.elems)
        opens: dict[int, list[int]] = {}
        closes: dict[int, list[int]] = {}
        objects: dict[int, list[_Atom]] = {}
        for i, (a, b) in enumerate(intervals):
            opens.setdefault(a, []).append(i)
            closes.setdefault(b, []).append(i)
        for obj in self.objects:
            objects.setdefault(target.place(obj.at, intervals[obj.parent] if obj.parent >= 0 else None), []).append(obj)
        gaps = {end: start for (_, end), (start, _) in zip(target.tgt, target.tgt[1:])}
        out, done = [self.quote, self.lead], 0
        for x in sorted({*opens, *closes, *objects}):
            out.append(text[done:x].translate(codes))
            done = x
            closing = sorted(closes.get(x, []), key=lambda i: (intervals[i][0], i), reverse=True)
            opening = sorted(opens.get(x, []), key=lambda i: (-intervals[i][1], i))
            here = objects.get(x, [])
            gap = [text[x:gaps[x]].translate(codes)] if x in gaps else []  # the words' whitespace, where it was
            owned = {i: self.between([o for o in here if o.parent == i], gap, results) for i in closing + opening}
            out += [part for i in closing for part in (owned[i], self.elems[i].close)]
            rest = [o for o in here if o.parent not in owned]
            out += [self.between(rest, gap, results), gap.pop() if rest and gap else ""]
            done = gaps[x] if x in gaps and not gap else done
            out += [part for i in opening for part in (_join(self.elems[i].parts, results), owned[i])]
        return "".join(out) + text[done:].translate(codes) + self.run + self.quote

    @staticmethod
    def between(objects: list[_Atom], gap: list[str], results: list[Aligned]) -> str:
        """Objects with whitespace where they had some around them: the words' `gap` (taken) first, then spaces."""
        out = ""
        for obj in objects:
            out += ((gap.pop() if gap else " ") if obj.before else "") + _join(obj.parts, results)
        return out + ((gap.pop() if gap else " ") if objects and objects[-1].after else "")


Part = Union[str, _Block]


def _join(parts: list[Part], results: list[Aligned]) -> str:
    return "".join(p if isinstance(p, str) else p.render(results) for p in parts)


class _Document:
    """Walks the tokens: untouched parts and block boundaries as written, each block's text as a `_Block`."""

    def __init__(self, lang: Optional[str] = None) -> None:
        self.lang = lang  # the translation's language: what lang on <html> is set to
        self.out: list[Part] = []
        self.texts: list[str] = []
        self.inline: list[bool] = []  # for each text: whether it holds inline markup
        self.root: list[Node] = []  # the block being read
        self.open: list[_Elem] = []  # its inline elements still open
        self.stack: list[str] = []  # the document's elements open, as far as a tolerant reading tells
        self.held: Optional[_Elem] = None  # an untouched element, kept as written up to its end tag
        self.depth = 0  # of elements of its name in it

    def walk(self, tokens: list[Token]) -> None:
        for kind, tag, attrs, raw in tokens:
            if self.held is not None and self.hold(self.held, kind, tag, raw):
                continue
            if kind in ("text", "other"):
                self.add(raw if kind == "text" else _Atom([raw]))
            elif kind == "end":
                self.end(tag, raw)
            else:
                self.start(tag, attrs, raw)
        self.release()
        self.flush()

    def add(self, node: Node) -> None:
        (self.open[-1].children if self.open else self.root).append(node)

    def hold(self, held: _Elem, kind: str, tag: str, raw: str) -> bool:
        """Whether the untouched element takes this token (an end tag of one open around it ends it too)."""
        if kind == "end" and tag != held.name and tag in self.stack:
            self.release()
            return False
        held.parts.append(raw)
        if tag == held.name and kind in ("start", "end") and not raw.endswith("/>"):
            self.depth += 1 if kind == "start" else -1
            if not self.depth:
                self.release()
        return True

    def release(self) -> None:
        held, self.held = self.held, None
        if held is not None and (held.name in OBJECTS or held.name in INLINE):
            self.add(_Atom(held.parts))
        elif held is not None:
            self.boundary(held.parts)

    def start(self, tag: str, attrs: Attrs, raw: str) -> None:
        values = dict(reversed(attrs))  # of two attributes with one name, the first counts
        kept = (tag in UNTOUCHED or (values.get("translate") or "").strip().lower() == "no"
                or "notranslate" in (values.get("class") or "").split())
        raw = set_attribute(raw, ("lang", "xml:lang"), self.lang) if tag == "html" and self.lang else raw
        parts: list[Part] = [raw] if kept else self.tag(raw, tag, values)
        opens = tag not in VOID and not raw.endswith("/>")  # <br/> or <b/>: it holds nothing
        if opens and kept:
            self.held, self.depth = _Elem(tag, parts), 1
        elif tag not in OBJECTS and tag not in INLINE:
            self.boundary(parts)
            if opens:
                self.stack.append(tag)
        elif not opens or tag not in INLINE or len(self.open) >= MAX_DEPTH:
            self.add(_Atom(parts))
        else:
            self.add(elem := _Elem(tag, parts))
            self.open.append(elem)
            self.stack.append(tag)
        del self.stack[:-MAX_DEPTH]  # (sloppy HTML leaves many <p> and <li> open)

    def end(self, tag: str, raw: str) -> None:
        if tag in self.stack:
            del self.stack[len(self.stack) - 1 - self.stack[::-1].index(tag):]
        if tag in INLINE and any(elem.name == tag for elem in self.open):
            while self.open[-1].name != tag:
                self.unclose()
            self.open.pop().close = raw
        else:
            self.add(_Atom([raw])) if tag in INLINE or tag in OBJECTS else self.boundary([raw])

    def unclose(self) -> None:
        """The innermost open inline element, left open in its block, becomes an object: its start tag."""
        elem = self.open.pop()
        siblings = self.open[-1].children if self.open else self.root
        siblings[-1:] = [_Atom(elem.parts), *elem.children]  # it was its parent's last child

    def tag(self, raw: str, tag: str, values: dict[str, Optional[str]]) -> list[Part]:
        """A start tag as parts: the values of its translated attributes to translate, the rest as written."""
        names = set(TRANSLATED & values.keys())
        if tag == "input" and (values.get("type") or "").strip().lower() in BUTTONS:
            names.add("value")
        if tag == "meta" and (values.get("name") or values.get("property") or "").strip().lower() in DESCRIPTIONS:
            names.add("content")
        parts: list[Part] = []
        done = 0  # where the raw tag is cut up to
        for m in ATTRIBUTE.finditer(raw, 1):  # (the tag's name has no value)
            key, value = m.group(1).lower(), m.group(2)
            if key not in names or value is None:
                continue
            quote = value[0] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else ""
            inner = value[1:-1] if quote else value
            if (text := htmllib.unescape(inner)) != values.get(key) or not text.split():
                continue  # the parser read it otherwise (or it is a second one), or it has no word: kept
            block = _Block([inner], len(self.texts), quote or '"')
            self.texts.append(block.text.lstrip(SPACE))
            self.inline.append(False)
            parts += [raw[done:m.start(2)], block]
            done = m.end(2)
        return [*parts, raw[done:]]

    def flush(self) -> None:
        while self.open:
            self.unclose()
        if self.root:
            # in place: a copy per block would make the pass quadratic
            self.out += _block(self.root, self.texts, self.inline)
            self.root = []

    def boundary(self, parts: list[Part]) -> None:
        self.flush()
        self.out += parts
