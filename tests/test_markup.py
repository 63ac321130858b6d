"""nmt.text.markup: HTML translated with its markup kept, checked with fake translators one can follow by hand."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.core.errors import InputError
from nmt.text.markup import Aligned, translate_html

SAMPLES = sorted((Path(__file__).resolve().parent / "data" / "html").glob("*.html"))


def identity(texts: list[str]) -> list[Aligned]:
    return [Aligned(t, [(i, i) for i in range(len(t.split()))]) for t in texts]


def upper(texts: list[str]) -> list[Aligned]:
    """Each word upper-cased, where it was."""
    return [Aligned(t.upper(), [(i, i) for i in range(len(t.split()))]) for t in texts]


def reverse(texts: list[str]) -> list[Aligned]:
    """The words upper-cased in the reverse order: an inline tag must follow its words to the other end."""
    out = []
    for t in texts:
        words = t.split()
        out.append(Aligned(" ".join(w.upper() for w in reversed(words)), [(i, len(words) - 1 - i) for i in range(len(words))]))
    return out


def unaligned(texts: list[str]) -> list[Aligned]:
    """Upper-cased without an alignment: every place comes from the proportional fallback."""
    return [Aligned(t.upper(), []) for t in texts]


def drop_second(texts: list[str]) -> list[Aligned]:
    """The second word left out (aligned to nothing), the others upper-cased."""
    out = []
    for t in texts:
        words = t.split()
        kept = [i for i in range(len(words)) if i != 1]
        out.append(Aligned(" ".join(words[i].upper() for i in kept), [(i, n) for n, i in enumerate(kept)]))
    return out


def empty(texts: list[str]) -> list[Aligned]:
    return [Aligned("", []) for _ in texts]


TRANSLATORS = [identity, upper, reverse, unaligned, drop_second, empty]


class Recorder:
    """A translator that records what it was given."""

    def __init__(self, translate=upper):
        self.calls: list[list[str]] = []
        self.translate = translate

    def __call__(self, texts: list[str]) -> list[Aligned]:
        self.calls.append(list(texts))
        return self.translate(texts)


class Reader(HTMLParser):
    """An independent reading of HTML: its tags (names and attributes, in order) and its text nodes."""

    def __init__(self, html: str):
        super().__init__()
        self.tags: list[tuple] = []
        self.texts: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(("start", tag, tuple(attrs)))

    def handle_endtag(self, tag):
        self.tags.append(("end", tag))

    def handle_data(self, data):
        self.texts.append(data)


def tags(html: str) -> list[tuple]:
    return Reader(html).tags


def names(html: str) -> list[tuple]:
    """The tags without their attributes, sorted: what a translator that reorders words keeps."""
    return sorted((t[0], t[1]) for t in tags(html))


def folded(html: str) -> list[tuple]:
    """The tags with each attribute value's whitespace collapsed and upper-cased (as `upper` translates some)."""
    return [t[:2] + (tuple((k, v and " ".join(v.split()).upper()) for k, v in t[2]),) if t[0] == "start" else t
            for t in tags(html)]


def text(html: str) -> str:
    """The text content: text nodes decoded and put together, whitespace collapsed."""
    return " ".join("".join(Reader(html).texts).split())


# --- Exact outputs ------------------------------------------------------------------------------------------------

EXACT = [
    # inline tags follow their words
    ("<p>Hello <b>big</b> world</p>", upper, "<p>HELLO <b>BIG</b> WORLD</p>"),
    ("<p>Hello <b>big</b> world</p>", reverse, "<p>WORLD <b>BIG</b> HELLO</p>"),
    ("<p>Hello <b>big</b> world</p>", unaligned, "<p>HELLO <b>BIG</b> WORLD</p>"),
    ("<p>Hello <b>big</b> world</p>", drop_second, "<p>HELLO <b>WORLD</b></p>"),
    ("<p>Hello <b>big</b> world</p>", empty, "<p><b></b></p>"),
    ('<p><a href="x">Click here</a> to continue.</p>', reverse, '<p>CONTINUE. TO <a href="x">HERE CLICK</a></p>'),
    ('<p>One <a href=#>two <b>three</b></a> four</p>', reverse, "<p>FOUR <a href=#><b>THREE</b> TWO</a> ONE</p>"),
    ("<ul>\n  <li>One <em>two</em></li>\n  <li>three</li>\n</ul>", reverse, "<ul>\n  <li><em>TWO</em> ONE</li>\n  <li>THREE</li>\n</ul>"),
    # leading and trailing whitespace stays outside; whitespace is given as written (a tag's edge moves off it)
    ("<p>\n  Hello <b> big </b>world \n</p>", upper, "<p>\n  HELLO  <b>BIG</b> WORLD \n</p>"),
    ("<p>One.\n  Two  <i>three</i>\tfour.</p>", upper, "<p>ONE.\n  TWO  <i>THREE</i>\tFOUR.</p>"),
    ("<p>One.\n  Two  <i>three</i>\tfour.</p>", reverse, "<p>FOUR. <i>THREE</i> TWO ONE.</p>"),
    ("<p><b>\n  x</b> y</p>", upper, "<p>\n  <b>X</b> Y</p>"),
    ('<img alt="a\n  b">', upper, '<img alt="A\n  B">'),
    ("<p>x</p><p><b> y</b></p>", upper, "<p>X</p><p> <b>Y</b></p>"),
    # markup inside a word stays there when the word keeps its length
    ("<p>H<sub>2</sub>O is water</p>", upper, "<p>H<sub>2</sub>O IS WATER</p>"),
    ("<p>H<sub>2</sub>O is water</p>", reverse, "<p>WATER IS H<sub>2</sub>O</p>"),
    ("<p><b>un</b>believable <i>x</i></p>", upper, "<p><b>UN</b>BELIEVABLE <i>X</i></p>"),
    ("<p>H<sub>2</sub>O is water</p>", unaligned, "<p><sub>H2O</sub> IS WATER</p>"),
    # entities: as the source spelt them, < > & escaped, nothing else
    ("<p>A&nbsp;B &amp; C &copy; &#169; é</p>", upper, "<p>A&nbsp;B &amp; C &copy; &copy; É</p>"),
    ("<p>a < b &gt; c</p>", upper, "<p>A &lt; B &gt; C</p>"),
    ("<p>5 &#8212; 6 &#x2014; 7</p>", identity, "<p>5 &#8212; 6 &#8212; 7</p>"),
    ("<p>tail &abc &amp more</p>", upper, "<p>TAIL &amp;ABC &amp; MORE</p>"),
    # objects: after the target word aligned to the source word before them
    ("<p>Hello <!-- c --> world</p>", upper, "<p>HELLO <!-- c --> WORLD</p>"),
    ("<p>Use <code>ls -l</code> here</p>", upper, "<p>USE <code>ls -l</code> HERE</p>"),
    ("<p>Use <code>ls -l</code> here</p>", reverse, "<p>HERE USE <code>ls -l</code> </p>"),
    ("<p>foo <img src=x> bar</p>", upper, "<p>FOO <img src=x> BAR</p>"),
    ("<p><img src=x> foo bar</p>", reverse, "<p><img src=x> BAR FOO</p>"),
    ("<p>Press <kbd>Ctrl</kbd>+<kbd>S</kbd> now</p>", upper, "<p>PRESS <kbd>Ctrl</kbd>+<kbd>S</kbd> NOW</p>"),
    ('<p>Buy <span translate="no">Brand X</span> today</p>', reverse, '<p>TODAY BUY <span translate="no">Brand X</span> </p>'),
    ("<p>foo<b> </b>bar</p>", upper, "<p>FOO<b> </b> BAR</p>"),
    # <br> and <hr> end a text
    ("<p>One line<br>Two lines<hr>Three</p>", reverse, "<p>LINE ONE<br>LINES TWO<hr>THREE</p>"),
    # untouched
    ('<p>Hi</p><script>var a = "<b>x</b>";</script>', upper, '<p>HI</p><script>var a = "<b>x</b>";</script>'),
    ("<pre>keep  this &amp; that</pre><p>go</p>", upper, "<pre>keep  this &amp; that</pre><p>GO</p>"),
    ("<textarea>my note</textarea>", upper, "<textarea>my note</textarea>"),
    ("<div class='a notranslate'>Keep <b>me</b></div> go", upper, "<div class='a notranslate'>Keep <b>me</b></div> GO"),
    ('<p translate="no">Keep <b>me</b></p><p>go</p>', upper, '<p translate="no">Keep <b>me</b></p><p>GO</p>'),
    # attributes
    ('<img src="a.png" alt="A cat">', reverse, '<img src="a.png" alt="CAT A">'),
    ("<input type=submit value=Send><input type=hidden value=keep>", upper, '<input type=submit value="SEND"><input type=hidden value=keep>'),
    ("<input placeholder='Your name' aria-label=\"Name\">", upper, "<input placeholder='YOUR NAME' aria-label=\"NAME\">"),
    ('<meta name="description" content="About us"><meta name="keywords" content="a, b">', upper, '<meta name="description" content="ABOUT US"><meta name="keywords" content="a, b">'),
    ('<a href="/x" title="Fish &amp; chips">Home</a>', upper, '<a href="/x" title="FISH &amp; CHIPS">HOME</a>'),
    ("<abbr title='it&#39;s'>x</abbr>", identity, "<abbr title='it&#39;s'>x</abbr>"),
    ('<img alt="  " src=x><img alt=x translate=no>', upper, '<img alt="  " src=x><img alt=x translate=no>'),
    # malformed markup: nothing lost
    ("<p><b>bold <i>both</b> italic</i></p>", upper, "<p><b>BOLD <i>BOTH</b> ITALIC</i></p>"),
    ("<p><b>bold <i>both</b> italic</i></p>", reverse, "<p>ITALIC <b>BOTH BOLD <i></b></i></p>"),
    ("<p><b>Hello world</p>", reverse, "<p><b>WORLD HELLO</p>"),
    ("<p>Hello</i> world</p>", upper, "<p>HELLO</i> WORLD</p>"),
    ("<a href=x title=Home>Home</a>", upper, '<a href=x title="HOME">HOME</a>'),
    ("<![foo bar]>hello<p>x", upper, "<![foo bar]>HELLO<p>X"),
    ("text </> more", reverse, "MORE TEXT </> "),
    ("<p>cut short <a href='x", upper, "<p>CUT SHORT <a href='x"),
    ('<span translate="no">a<span/>b</span> c', upper, '<span translate="no">a<span/>b</span> C'),
    ("<p>Run <code>ls</p><p>Next</p>", upper, "<p>RUN <code>ls</p><p>NEXT</p>"),
    ("<p>Hello\r\n<b>big</b>\r\nworld</p>\r\n", upper, "<p>HELLO\r\n<b>BIG</b>\r\nWORLD</p>\r\n"),
    ("<P CLASS=X>Shout <B>loud</B></P>", upper, "<P CLASS=X>SHOUT <B>LOUD</B></P>"),
    # whole documents
    ("<!DOCTYPE html><html><head><title>My page</title></head><body><p>Hi &amp; bye</p></body></html>", reverse,
     "<!DOCTYPE html><html><head><title>PAGE MY</title></head><body><p>BYE &amp; HI</p></body></html>"),
    ("", upper, ""),
    ("  \n ", upper, "  \n "),
]


@pytest.mark.parametrize("html, translate, expected", EXACT)
def test_exact_output(html, translate, expected):
    assert translate_html(html, translate) == expected


def test_crossing_ranges_nest():
    """`a` covers words 0-1 and `b` word 2; a translator that sends 'b' into the middle of `a`'s words makes the
    ranges cross: `a` grows to hold `b`."""
    def cross(texts):
        return [Aligned("W0 W2 W1", [(0, 0), (1, 2), (2, 1)]) for _ in texts]
    assert translate_html("<p><a>w0 w1</a> <b>w2</b></p>", cross) == "<p><a>W0 <b>W2</b> W1</a></p>"


def test_a_child_stays_inside_its_parent():
    """`a` (words 0-1) went to X alone; `i` (word 1, unaligned) would go to Q by its share: it stays in `a`."""
    def away(texts):
        return [Aligned("Z Q X", [(0, 2), (2, 0)]) for _ in texts]
    assert translate_html("<p><a>x <i>y</i></a> z</p>", away) == "<p>Z Q <a><i>X</i></a></p>"


def test_alignment_outside_the_words_is_ignored():
    def wild(texts):
        return [Aligned("A B", [(0, 0), (1, 1), (5, 0), (-1, 1), (0, 9)]) for _ in texts]
    assert translate_html("<p><b>a</b> b</p>", wild) == "<p><b>A</b> B</p>"


# --- What goes to translate ---------------------------------------------------------------------------------------

def test_one_call_with_every_text_in_document_order():
    recorder = Recorder()
    html = ('<html><head><title>The title</title><meta name=description content="The  description"></head>'
            '<body><p>A <b>bold</b>\n word</p><img alt="An image"><p> </p><p>&nbsp;</p><p>&lt;x&gt; &amp; y</p></body></html>')
    translate_html(html, recorder)
    assert recorder.calls == [["The title", "The  description", "A bold\n word", "An image", "<x> & y"]]


def test_nothing_to_translate_calls_nothing():
    recorder = Recorder()
    assert translate_html("<p> </p><br><script>x</script><!-- c -->", recorder) == "<p> </p><br><script>x</script><!-- c -->"
    assert recorder.calls == []


@pytest.mark.parametrize("html", [b"<p>x</p>", None, ["<p>x</p>"]])
def test_not_a_string_is_a_type_error(html):
    with pytest.raises(TypeError, match="str"):
        translate_html(html, upper)


@pytest.mark.parametrize("results", [[], [Aligned("A"), Aligned("B")], ["A"]])
def test_a_translator_that_breaks_its_contract_is_one_error(results):
    with pytest.raises(InputError, match="one Aligned per text"):
        translate_html("<p>a</p>", lambda texts: results)


# --- Real-world samples -------------------------------------------------------------------------------------------

def test_the_samples_are_there():
    assert len(SAMPLES) >= 5


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_identity_keeps_tags_and_text(path):
    html = path.read_text(encoding="utf-8")
    out = translate_html(html, identity)
    assert tags(out) == tags(html)
    assert text(out) == text(html)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_upper_keeps_every_tag_in_order(path):
    html = path.read_text(encoding="utf-8")
    out = translate_html(html, upper)
    assert folded(out) == folded(html)
    assert text(out) != text(html)


@pytest.mark.parametrize("translate", [reverse, unaligned, drop_second, empty])
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_tag_is_kept_whatever_the_translation(path, translate):
    html = path.read_text(encoding="utf-8")
    assert names(translate_html(html, translate)) == names(html)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_text_node_is_translated_or_kept(path):
    html = path.read_text(encoding="utf-8")
    recorder = Recorder()
    out = translate_html(html, recorder)
    given = [" ".join(t.split()) for t in recorder.calls[0]]
    kept = Reader(out).texts
    for node in Reader(html).texts:
        words = " ".join(node.split())
        assert not words or any(words in g for g in given) or node in kept, node


def test_the_samples_translate_as_expected():
    """What each kind of content became in the document sample, translated by `upper`."""
    html = (SAMPLES[0].parent / "document.html").read_text(encoding="utf-8")
    out = translate_html(html, upper)
    for kept in ['var greeting = "Hello <b>world</b>";', "/* <p>not text</p> */", "Write your note here",
                 "<code>brew --tea green</code>", "<var>t</var>", '<?php echo "processing instruction"; ?>',
                 '<meta name="viewport" content="width=device-width, initial-scale=1">', 'value="abc123"',
                 "  Water:  80 &deg;C", '<option value="sencha">']:
        assert kept in out, kept
    for translated in ['content="EVERYTHING ABOUT GREEN TEA &amp; HOW TO BREW IT"', 'content="THE TEA PAGE"',
                       "<title>GREEN TEA &mdash; A SHORT GUIDE</title>", 'placeholder="SEARCH THE SHOP"',
                       'aria-label="SEARCH"', 'placeholder="NAME@EXAMPLE.COM"', 'value="SUBSCRIBE NOW"', 'title="CLOSE THE FORM">CLOSE</button>',
                       "MATCHA POWDER", "<p>&copy; 2024 TEA LTD. ALL RIGHTS RESERVED.</p>",
                       'HOW TO <a href="#brew">BREW</a> GREEN TEA.']:
        assert translated in out, translated


# --- Tag soups ----------------------------------------------------------------------------------------------------

NAMES = ["p", "div", "b", "i", "a", "span", "code", "li", "td", "script", "style", "title", "em", "pre", "sub", "textarea"]
PIECES = st.one_of(
    st.sampled_from(NAMES).map(lambda n: f"<{n}>"),
    st.sampled_from(NAMES).map(lambda n: f"</{n}>"),
    st.sampled_from(["<br>", "<img src=x alt='a b'>", "<hr/>", '<a href="u" title="t x">', '<span translate="no">',
                     "<b class=notranslate>", "<!-- c -->", "<![CDATA[x]]>", "<?pi?>", "<!DOCTYPE html>", "<b/>",
                     "<input type=submit value=Go>", "</>"]),
    st.sampled_from(["hello", "big", "world", "x", "a < b", "&amp;", "&nbsp;", "&copy", "&#169;", "&bogus;", "&#x;",
                     " ", "  \n", "é", "H2O", "&", "ß", "word."]),
)


@settings(derandomize=True, max_examples=400, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join), st.integers(0, 300))
def test_tag_soup(soup, cut):
    """Random markup cut anywhere: no translator raises or loses a tag, and translated by `identity` the tags come
    back in order with their attributes, and the text content as it was (whitespace collapsed)."""
    html = soup[:cut]
    for translate in TRANSLATORS:
        assert names(translate_html(html, translate)) == names(html)
    out = translate_html(html, identity)
    assert tags(out) == tags(html)
    assert text(out) == text(html)


def test_many_elements_left_open():
    html = "<div>" + "<p>a <b>b</b> <li>c <i>d</i>\n" * 600
    out = translate_html(html, upper)
    assert folded(out) == folded(html) and text(out) == text(html).upper()


def test_deep_nesting_is_no_recursion_error():
    html = "<p>" + "<b>x " * 3000 + "y" + "</b>" * 3000 + "</p>"
    out = translate_html(html, identity)
    assert tags(out) == tags(html) and text(out) == text(html)


def test_entities_decode_into_the_text_given():
    recorder = Recorder(identity)
    translate_html("<p>caf&eacute; &lt;b&gt; &#233;t&#xE9; x&nbsp;y</p>", recorder)
    assert recorder.calls == [["café <b> été x\xa0y"]]



@pytest.mark.parametrize("html, lang, expected", [
    ('<html lang="en"><p>Hi</p></html>', "de", '<html lang="de"><p>HI</p></html>'),
    ("<HTML LANG='en-GB' class=x><p>Hi", "de", '<HTML LANG="de" class=x><p>HI'),
    ('<html xml:lang="en" lang=en>Hi', "pt-BR", '<html xml:lang="pt-BR" lang="pt-BR">HI'),
    ("<html><p>Hi</p></html>", "de", "<html><p>HI</p></html>"),  # no lang: none added
    ('<html lang="en"><p lang="en">Hi</p></html>', "de", '<html lang="de"><p lang="en">HI</p></html>'),  # <html>'s only
    ('<html lang="en">Hi', None, '<html lang="en">HI'),  # no target given: as written
    ('<html lang="en">Hi', 'de" onload="x', '<html lang="en">HI'),  # no language code: as written
    ('<html lang>Hi', "de", "<html lang>HI"),  # (no value: kept)
])
def test_lang_on_html_becomes_the_target(html, lang, expected):
    assert translate_html(html, upper, lang) == expected


SUB = "<p>H<sub>2</sub>O is in the river.</p>"


@pytest.mark.parametrize("translation, alignment, expected", [
    # the word H2O went to two words, one as long as it: the tag wraps both, whole (was <sub>Vört de</sub>m)
    ("Vört dem Fluss.", [(0, 0), (0, 1), (4, 2)], "<p><sub>Vört dem</sub> Fluss.</p>"),
    ("Vört dem Fluss.", [(0, 1), (4, 2)], "<p>Vört <sub>dem</sub> Fluss.</p>"),  # (was Vört d<sub>e</sub>m)
    ("Wasser ist im Fluss.", [(0, 0), (1, 1)], "<p><sub>Wasser</sub> ist im Fluss.</p>"),
    ("Zwei Herren sind im Fluss.", [(0, 0), (0, 1)], "<p><sub>Zwei Herren</sub> sind im Fluss.</p>"),
    ("Das H2O ist im Fluss.", [(0, 1)], "<p>Das H<sub>2</sub>O ist im Fluss.</p>"),  # copied: the tag keeps its place
    ("Das H2O ist im Fluss.", [(0, 0), (0, 1)], "<p><sub>Das H2O</sub> ist im Fluss.</p>"),  # (was D<sub>as H2</sub>O)
    ("Das H2O ist im Fluss.", [], "<p><sub>Das</sub> H2O ist im Fluss.</p>"),  # no alignment: the word's share
])
def test_a_tag_inside_a_word_keeps_every_word_whole(translation, alignment, expected):
    """A tag inside a source word is placed inside the target word only where the translation copies that word
    (H2O, a name; case aside); otherwise it goes round whole target words."""
    assert translate_html(SUB, lambda texts: [Aligned(translation, alignment)]) == expected
