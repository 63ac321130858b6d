"""Glossary files (nmt/text/glossary.py): the lines a file may hold, the errors naming FILE:LINE, the bound on its
size, and where terms match in a text (case, whole words, the longest term, overlaps left to right)."""

from __future__ import annotations

import gzip

import pytest

from nmt.core.errors import InputError
from nmt.text import glossary as glossary_module
from nmt.text.glossary import Glossary, Term


@pytest.mark.parametrize("content, error", [
    ("dog\tHund\n", None),
    ("# a comment\n\n   \n  # indented comment\ndog\tHund\n", None),
    ("\ufeffdog\tHund\r\n", None),  # a byte-order mark and Windows line ends
    ("dog\tHund\nDog\tHund\n", None),  # the same term twice (case aside), the same target: one term
    ("dog Hund\n", ":1: no tab; write source term<TAB>target term (one tab), or # for a comment"),
    ("# fine\ndog\tHund\tKöter\n", ":2: 2 tabs"),
    ("\tHund\n", ":1: an empty source term"),
    ("dog\t \n", ":1: an empty target term"),
    ("dog\tHund\nDOG\tKöter\n", ":2: the source term 'DOG' is also on"),
    ("...\tPunkte\n", ":1: the source term '...' has no word"),
    (" ".join(["w"] * 17) + "\tx\n", ":1: the source term has 17 words; at most 16"),
])
def test_a_glossary_file_is_read_or_refused_naming_its_line(content, error, tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text(content, encoding="utf-8")
    if error is None:
        assert [(t.source, t.target) for t in Glossary.read(path).terms.values()] == [("dog", "Hund")]
    else:
        with pytest.raises(InputError) as e:
            Glossary.read(path)
        assert str(e.value).startswith(str(path)) and error in str(e.value), str(e.value)


def test_conflicting_lines_are_both_named(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("dog\tHund\ncat\tKatze\nDog\tKöter\n")
    with pytest.raises(InputError, match=f"^{path}:3: .* also on {path}:1 with another target"):
        Glossary.read(path)


def test_a_huge_or_binary_file_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(glossary_module, "MAX_BYTES", 1000)
    path = tmp_path / "terms.tsv.gz"
    path.write_bytes(gzip.compress(b"dog\tHund\n" * 1000))  # 111 bytes that inflate to 9,000
    with pytest.raises(InputError, match="glossary"):
        Glossary.read(path)
    (tmp_path / "bin.tsv").write_bytes(b"\xff\xfe\x00dog")
    with pytest.raises(InputError, match="UTF-8"):
        Glossary.read(tmp_path / "bin.tsv")


TERMS = Glossary([Term(s, t, f"g:{i}") for i, (s, t) in enumerate([
    ("dog", "Hund"), ("ice cream", "Speiseeis"), ("New York", "NY"), ("York City", "YC"), ("New York City", "NYC"),
    ("red shirt", "rotes Hemd"), ("shirt", "Hemd"), ("Straße", "street"), ("T-shirt", "Leibchen"), ("U.S.", "USA"),
    ("C++", "C++")])])


@pytest.mark.parametrize("text, found", [
    ("A dog.", [("dog", "A dog.".index("dog"))]),
    ("DOGS and a Dog", [("dog", 11)]),  # whole words, case aside
    ("Ice  cream!", [("ice cream", 0)]),  # white space of any length between the words
    ("ice, cream", []),  # not across punctuation
    ("nice cream", []),  # not inside a word
    ("in New York City now", [("New York City", 3)]),  # the longest
    ("New York, York City", [("New York", 0), ("York City", 10)]),
    ("a red shirt and a shirt", [("red shirt", 2), ("shirt", 18)]),
    ("die STRASSE", [("Straße", 4)]),  # Unicode case folding: ß is ss
    ("die Straße", [("Straße", 4)]),
    ("a T-shirt, not a T shirt", [("T-shirt", 2), ("shirt", 19)]),
    ("the u.s. and the US", [("U.S.", 4)]),  # what the term has between and after its words
    ("C++ or C", [("C++", 0)]),
])
def test_terms_are_found_as_the_rules_say(text, found):
    matches = TERMS.matches(text)
    assert [(m.term.source, m.start) for m in matches] == found
    assert all(m.end == len(text) or not text[m.end].isalnum() for m in matches)


@pytest.mark.parametrize("sources, translations, used", [
    (["A dog."], ["Ein Hund."], (1, 1)),
    (["A dog."], ["Hund!"], (1, 1)),  # as written, or capitalised
    (["A dog."], ["Ein hund."], (0, 1)),  # not in another case
    (["A dog."], ["Ein Hundefutter."], (0, 1)),  # whole words
    (["A dog and a dog."], ["Ein Hund und ein Köter."], (1, 2)),  # each time the source has the term
    (["A Dog.", "No term."], ["Ein Hund.", "Kein Hund."], (1, 1)),
    (["ice cream"], ["Speiseeis"], (1, 1)),
])
def test_a_translation_uses_a_term_where_its_target_appears(sources, translations, used):
    assert TERMS.used(sources, translations) == used


def test_a_term_with_regex_characters_is_literal():
    glossary = Glossary([Term("C++", "C++"), Term("a.b", "x|y")])
    assert glossary.used(["C++ and a.b"], ["C++ und x|y"]) == (2, 2)


def test_a_merged_glossary_takes_the_other_s_term_and_leaves_both_unchanged():
    """Glossary.merged (a server's --glossary under a request's own terms): where both have a source term (case aside)
    the other's target; the longest term still wins, whichever glossary it is in."""
    base = Glossary([Term("dog", "Hund"), Term("New York", "NY"), Term("cat", "Katze")])
    over = Glossary([Term("DOG", "Köter"), Term("New York City", "NYC"), Term("bird", "Vogel")])
    merged = base.merged(over)
    text = "A dog and a cat in New York City, a bird in New York."
    assert [(m.term.source, m.term.target) for m in merged.matches(text)] == [
        ("DOG", "Köter"), ("cat", "Katze"), ("New York City", "NYC"), ("bird", "Vogel"), ("New York", "NY")]
    assert len(merged) == 5 and (len(base), len(over)) == (3, 3)
    assert [m.term.target for m in base.matches(text)] == ["Hund", "Katze", "NY", "NY"]
    assert [m.term.target for m in over.matches(text)] == ["Köter", "NYC", "Vogel"]
    assert [m.term.target for m in over.merged(base).matches("dog")] == ["Hund"]
