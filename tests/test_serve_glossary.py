"""Glossaries in `nmt serve`: a request's `glossary` field checked (nmt/serve/service.py's request_glossary, a table),
the start-up --glossary [SRC-TGT=]FILE refused in one line before any model loads, then the terms placed in the
translations: over fake engines in this process (each word aligned to the word at its place, so that where a term
goes is known), and on the tiny model, where the server must give what `nmt translate --glossary` gives."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("python_multipart")
pytest.importorskip("fastapi_offline")
import requests  # noqa: E402
from test_cli import nmt, ok  # noqa: E402
from test_cli_robustness import assert_cli_error, cli  # noqa: E402
from test_serve import (  # noqa: E402, F401  (reversed_checkpoint, sources: fixtures)
    FakeEngine,
    FakeModel,
    Server,
    in_process,
    post,
    reversed_checkpoint,
    sources,
)

from nmt.serve import RequestError, ServeConfig, TooLarge  # noqa: E402
from nmt.serve.schemas import MAX_REQUEST_TERM_BYTES, MAX_REQUEST_TERMS, request_glossary  # noqa: E402
from nmt.text.glossary import Glossary, Term  # noqa: E402

# -- a request's glossary, checked ---------------------------------------------------------------------------

OBJECT = 'give a JSON object of terms, {"source term": "target term", ...}'


@pytest.mark.parametrize("value, terms", [
    (None, None),
    ({"dog": "Köter"}, [("dog", "Köter")]),
    ('{"dog": "Köter"}', [("dog", "Köter")]),  # a form's field: the object as JSON
    ({" red  shirt ": " roter Pulli "}, [("red  shirt", "roter Pulli")]),  # trimmed, as a file's terms
    ({"Dog": "Hund", "DOG": "Hund"}, [("Dog", "Hund")]),  # one term twice, case aside, one target: one term
    ({}, None),  # as good as none: a page may take it
    ("{}", None),
    ({f"w{i}": "x" for i in range(MAX_REQUEST_TERMS)}, MAX_REQUEST_TERMS),
    ({"w": "x" * (MAX_REQUEST_TERM_BYTES - 1)}, 1),  # the bytes of both sides: exactly the bound
])
def test_a_request_glossary_is_read(value, terms):
    glossary = request_glossary(value, 422)
    if terms is None:
        assert glossary is None
    elif isinstance(terms, int):
        assert glossary is not None and len(glossary) == terms
    else:
        assert glossary is not None and [(t.source, t.target) for t in glossary.terms.values()] == terms


@pytest.mark.parametrize("value, status, words", [
    (["dog", "Köter"], 422, f"glossary: a JSON array; {OBJECT}"),
    ("dog=Köter", 422, f"glossary: not JSON; {OBJECT}"),
    ('"dog"', 422, "glossary: a JSON string"),
    ("[" * 100_000, 422, "glossary: not JSON"),  # nested too deep for the parser: one line, not a crash
    (5, 422, "glossary: a JSON number"),
    ({"dog": 5}, 422, "the target of 'dog' is a JSON number; give \"source term\": \"target term\", both strings"),
    ({"dog": None}, 422, "the target of 'dog' is a JSON null"),
    ({"dog": ["Köter"]}, 422, "the target of 'dog' is a JSON array"),
    ({"dog": ""}, 422, "an empty target term ('dog': '')"),
    ({" ": "Köter"}, 422, "an empty source term"),
    ({"...": "Punkte"}, 422, "the source term '...' has no words; give 1 to 16"),
    ({" ".join("w" * 17): "x"}, 422, "has 17 words; give 1 to 16"),
    ({"Dog": "Hund", "dOG": "Köter"}, 422, "the source terms 'Dog' and 'dOG' are one term (case aside) with two targets"),
    ({"STRASSE": "road", "straße": "street"}, 422, "are one term (case aside)"),  # Unicode case folding
    ({"dog": "Kö\nter"}, 422, "the target term 'Kö\\nter' holds a control character or line break"),
    ({"dog\tcat": "x"}, 422, "holds a control character"),
    ({"dog": "a\u2028b"}, 422, "line break"),
    ({"dog": "\ud800"}, 422, "holds a lone surrogate ('\\ud800')"),
    ({"x" * 100 + " y": ""}, 422, "('" + "x" * 40 + "...': '')"),  # a client's term is quoted short
    ({f"w{i}": "x" for i in range(MAX_REQUEST_TERMS + 1)}, 413, "glossary: 1,001 terms; at most 1,000 per request"),
    ({"w": "x" * MAX_REQUEST_TERM_BYTES}, 413, "glossary: 65,537 bytes of terms (UTF-8); at most 65,536"),
    ({"w": "ü" * (MAX_REQUEST_TERM_BYTES // 2)}, 413, "bytes of terms (UTF-8)"),  # bytes, not characters
    ({"dog": 5}, 400, "the target of 'dog'"),  # LibreTranslate's status
])
def test_a_bad_request_glossary_is_one_line_naming_it(value, status, words):
    with pytest.raises(RequestError) as e:
        request_glossary(value, status)
    assert e.value.status == status and isinstance(e.value, TooLarge) == (status == 413)
    assert e.value.message.startswith("glossary") and words in e.value.message and "\n" not in e.value.message


# -- the start-up glossaries ---------------------------------------------------------------------------------


@pytest.fixture()
def files(tmp_path) -> dict[str, Path]:
    out = {"good": tmp_path / "terms.tsv", "other": tmp_path / "other.tsv", "bad": tmp_path / "bad.tsv"}
    out["good"].write_text("# en-de\ndog\tKöter\n", encoding="utf-8")
    out["other"].write_text("man\tHerr\n", encoding="utf-8")
    out["bad"].write_text("dog\tKöter\ncat Katze\n", encoding="utf-8")
    return out


@pytest.mark.parametrize("given, words", [
    (["{bad}"], "{bad}:2: no tab; write source term<TAB>target term"),
    (["en-de={bad}"], "{bad}:2: no tab"),
    (["en-de={absent}"], "--glossary {absent}: cannot read"),
    (["en-fr={good}"], "--glossary en-fr={good}: this server does not translate en -> fr; it translates en -> de"),
    (["{good}", "en-de={other}"], "--glossary en-de={other}: en -> de has a glossary already ({good}); give one file "
                                  "per direction"),
    (["EN-DE={good}", "en-de={good}"], "en -> de has a glossary already"),
    (["en-de="], "--glossary en-de=: no file; write --glossary SRC-TGT=FILE"),
])
def test_a_bad_startup_glossary_is_one_line_before_the_model_loads(given, words, files, tiny_checkpoint, tmp_path,
                                                                    monkeypatch):
    """In this process: an engine opened would be a bug (the check comes before any model loads)."""
    import nmt.engines.choice

    monkeypatch.setattr(nmt.engines.choice, "open_engine", lambda *a, **k: pytest.fail("a model was loaded"))
    names = {**{k: str(v) for k, v in files.items()}, "absent": str(tmp_path / "absent.tsv")}
    options = [o for value in given for o in ("--glossary", value.format(**names))]
    assert_cli_error(cli("serve", "-m", tiny_checkpoint, "--port", "0", *options), words.format(**names))


def test_a_bare_file_needs_the_one_direction_and_an_ensemble_takes_none(
        files, tiny_checkpoint, tiny_run, reversed_checkpoint):  # noqa: F811
    good = files["good"]
    assert_cli_error(cli("serve", "-m", tiny_checkpoint, "-m", reversed_checkpoint, "--port", "0", "--glossary", good),
                     f"--glossary {good}: this server translates en -> de, de -> en; name the file's direction: "
                     f"--glossary SRC-TGT={good}")
    assert_cli_error(cli("serve", "-m", tiny_checkpoint, "-m", tiny_run / "checkpoint_00000020.pt", "--port", "0",
                         "--glossary", f"en-de={good}"),
                     f"--glossary en-de={good}: en -> de is served by an ensemble", "one model's attention")
    assert_cli_error(cli("serve", "-m", tiny_checkpoint, "--port", "0", "--glossary", f"en-de={good}", "--access-log",
                         good), "--access-log", "--glossary")  # never appended to


# -- terms placed, over fake engines ---------------------------------------------------------------------------

EN_DE, DE_EN = ("en", "de"), ("de", "en")
STARTUP = Glossary([Term("dog", "Hund"), Term("cat", "Katze")])


@pytest.fixture(scope="module")
def two():
    """A server of en -> de (its --glossary: dog Hund, cat Katze) and de -> en (none), each engine upper-casing its
    lines, the first two words of each aligned to the first two of its translation (FakeEngine)."""
    engines = [FakeEngine(FakeModel(), EN_DE), FakeEngine(FakeModel(), DE_EN)]
    with in_process(ServeConfig(quiet_ms=0, max_wait_ms=0), None, engines=engines,
                    glossaries={EN_DE: STARTUP}) as (url, _):
        yield url


def v1(url: str, text, glossary=None, direction=EN_DE, **fields) -> requests.Response:
    body = {"text": text, "source": direction[0], "target": direction[1], **fields}
    if glossary is not None:
        body["glossary"] = glossary
    return post(url, "/v1/translate", body)


@pytest.mark.parametrize("text, glossary, direction, translation, terms", [
    ("a dog .", None, EN_DE, "A Hund .", {"found": 1, "placed": 1}),  # the direction's glossary
    ("a dog .", {"DOG": "Köter"}, EN_DE, "A Köter .", {"found": 1, "placed": 1}),  # the request's wins
    ("cat dog", {"dog": "Köter"}, EN_DE, "Katze Köter", {"found": 2, "placed": 2}),  # ... over the other terms
    ("a man", {"a man": "Herr"}, EN_DE, "Herr", {"found": 1, "placed": 1}),  # a term of its own, capitalised first
    ("the big dog", {"big": "groß"}, EN_DE, "THE groß DOG", {"found": 2, "placed": 1}),  # "dog" aligned to nothing
    ("a bird .", None, EN_DE, "A BIRD .", {"found": 0, "placed": 0}),  # a glossary applied, no term in the text
    ("a dog .", None, DE_EN, "A DOG .", None),  # another direction: no glossary there
    ("ein Hund .", {"Hund": "hound"}, DE_EN, "EIN hound .", {"found": 1, "placed": 1}),
])
def test_terms_are_placed_in_each_sentence(two, text, glossary, direction, translation, terms):
    r = v1(two, text, glossary, direction)
    assert r.status_code == 200, r.text
    assert r.json()["translations"] == [translation] and r.json()["terms"] == terms


def test_every_sentence_of_every_text_gets_its_terms(two):
    r = v1(two, ["a dog . a cat !\nthe end", "", "dog"], {"end": "Schluss"}, scores=True)
    assert [t["text"] for t in r.json()["translations"]] == ["A Hund . A Katze !\nTHE Schluss", "", "Hund"]
    assert r.json()["terms"] == {"found": 4, "placed": 4}
    r = v1(two, "a dog", {"dog": "Köter"}, nbest=2)  # n-best: the best gets the terms
    assert r.json()["translations"][0][0]["text"] == "A Köter" and r.json()["terms"] == {"found": 1, "placed": 1}


def test_html_a_text_in_the_target_language_and_an_ensemble(two):
    """A request's glossary with format html is refused as translate refuses it; a page is translated without the
    direction's glossary; a text already in the target language comes back as it was."""
    r = v1(two, "<p>a dog .</p>", {"dog": "Köter"}, format="html")
    assert (r.status_code, r.json()) == (422, {"error": "glossary with format html: not yet; translate the page "
                                                        "without it"})
    r = post(two, "/translate", {"q": "<p>a dog .</p>", "source": "en", "target": "de", "format": "html",
                                 "glossary": {"dog": "Köter"}})
    assert (r.status_code, r.json()["error"]) == (400, "glossary with format html: not yet; translate the page "
                                                       "without it")
    r = v1(two, "<p>a dog .</p>", format="html")
    assert r.json()["translations"] == ["<p>A DOG .</p>"] and r.json()["terms"] is None
    assert v1(two, "<p>a dog .</p>", {}, format="html").json()["translations"] == ["<p>A DOG .</p>"]
    r = v1(two, "a dog", {"dog": "Köter"}, ("en", "en"))
    assert r.json()["translations"] == ["a dog"] and r.json()["untranslated"] and r.json()["terms"] is None
    engines = [FakeEngine(FakeModel(), EN_DE)]
    with in_process(ServeConfig(quiet_ms=0, max_wait_ms=0), None, engines=engines, ensembles=frozenset({EN_DE})) \
            as (url, _):
        r = v1(url, "a dog", {"dog": "Köter"})
        assert r.status_code == 422 and r.json()["error"].startswith("glossary: en -> de is served by an ensemble")
        assert v1(url, "a dog").json()["translations"] == ["A DOG"]


def test_an_empty_startup_glossary_applies_and_finds_nothing():
    """A file of comments only: a glossary of no term (falsy, yet a glossary), under a request's own."""
    with in_process(ServeConfig(quiet_ms=0, max_wait_ms=0), None, engines=[FakeEngine(FakeModel(), EN_DE)],
                    glossaries={EN_DE: Glossary([])}) as (url, _):
        r = v1(url, "a dog")
        assert r.status_code == 200 and r.json()["terms"] == {"found": 0, "placed": 0}, r.text
        assert v1(url, "a dog", {"dog": "Köter"}).json()["translations"] == ["A Köter"]


@pytest.mark.parametrize("glossary, status, words", [
    ("dog", 422, "glossary: not JSON"),
    ({"dog": 1}, 422, "the target of 'dog' is a JSON number"),
    ({"": "x"}, 422, "an empty source term"),
    ({f"w{i}": "x" for i in range(1001)}, 413, "glossary: 1,001 terms; at most 1,000"),
    ({"w": "x" * 70_000}, 413, "bytes of terms (UTF-8); at most 65,536"),
    ({"Dog": "a", "DOG": "b"}, 422, "one term (case aside) with two targets"),
])
def test_hostile_glossaries_are_4xx_on_both_apis(two, glossary, status, words):
    """The same words on /v1/translate (422) and LibreTranslate's /translate (400), as JSON and as a form field."""
    r = v1(two, "a dog", glossary)
    assert r.status_code == status and words in r.json()["error"], r.text
    libre = {"q": "a dog", "source": "en", "target": "de"}
    r = post(two, "/translate", {**libre, "glossary": glossary})
    assert r.status_code == (400 if status == 422 else status) and words in r.json()["error"], r.text
    field = glossary if isinstance(glossary, str) else json.dumps(glossary)
    r = requests.post(two + "/translate", data={**libre, "glossary": field}, timeout=30)
    assert r.status_code == (400 if status == 422 else status) and words in r.json()["error"], r.text


def test_libretranslate_takes_a_glossary_as_json_or_a_form_field(two):
    libre = {"q": ["a dog .", "a cat"], "source": "en", "target": "de"}
    expected = {"translatedText": ["A Köter .", "A Katze"], "terms": {"found": 2, "placed": 2}}
    assert post(two, "/translate", {**libre, "glossary": {"dog": "Köter"}}).json() == expected
    assert post(two, "/translate", {**libre, "glossary": '{"dog": "Köter"}'}).json() == expected
    form = {"q": "a dog .", "source": "en", "target": "de", "glossary": '{"dog": "Köter"}'}
    answer = {"translatedText": "A Köter .", "terms": {"found": 1, "placed": 1}}
    assert requests.post(two + "/translate", data=form, timeout=30).json() == answer  # urlencoded
    assert requests.post(two + "/translate", files={k: (None, v) for k, v in form.items()},
                         timeout=30).json() == answer  # multipart
    r = post(two, "/translate", {"q": "a dog .", "source": "en", "target": "de"})
    assert r.json() == {"translatedText": "A Hund .", "terms": {"found": 1, "placed": 1}}  # the direction's


@pytest.mark.parametrize("name, glossary, status, expected", [
    ("notes.txt", '{"dog": "Köter"}', 200, "A Köter .\nA Katze !\n"),  # the request's terms, over the direction's
    ("notes.txt", None, 200, "A Hund .\nA Katze !\n"),  # the direction's
    ("notes.txt", "{}", 200, "A Hund .\nA Katze !\n"),
    ("notes.txt", '{"dog": 1}', 400, "the target of 'dog' is a JSON number"),
    ("notes.txt", "dog", 400, "glossary: not JSON"),
    ("page.html", '{"dog": "Köter"}', 400, "glossary with format html: not yet"),
])
def test_translate_file_takes_a_glossary_field(two, name, glossary, status, expected):
    form = {"source": "en", "target": "de", **({"glossary": glossary} if glossary is not None else {})}
    r = requests.post(two + "/translate_file", data=form, files={"file": (name, b"a dog .\na cat !\n")}, timeout=30)
    assert r.status_code == status, r.text
    if status != 200:
        assert expected in r.json()["error"]
        return
    assert requests.get(r.json()["translatedFileUrl"], timeout=30).content.decode() == expected


def test_merged_glossaries_leave_the_direction_s_unchanged(two):
    assert v1(two, "a dog", {"dog": "Köter"}).json()["translations"] == ["A Köter"]
    assert v1(two, "a dog").json()["translations"] == ["A Hund"]
    assert [(t.source, t.target) for t in STARTUP.terms.values()] == [("dog", "Hund"), ("cat", "Katze")]


# -- the tiny model ----------------------------------------------------------------------------------------------

# common words of the sample corpus, each a term: every target word is aligned to some source word, so terms are placed
TERMS = {"a": "XA", "man": "XMAN", "woman": "XWOMAN", "dog": "XDOG", "the": "XTHE", "in": "XIN", "is": "XIS",
         "two": "XTWO", "of": "XOF", "on": "XON"}


def test_the_tiny_model_serves_what_translate_gives_with_the_glossary(tiny_checkpoint, sources, tmp_path):  # noqa: F811
    """--glossary en-de=FILE: each answer is `nmt translate --glossary`'s line (the torch engine on both), the
    counts are its counts; a request's terms change the translation; the log names the glossary."""
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("".join(f"{s}\t{t}\n" for s, t in TERMS.items()), encoding="utf-8")
    lines = sources[:12]
    offline = ok(nmt("translate", "-m", tiny_checkpoint, "--threads", "1", "--engine", "torch", "--glossary", glossary,
                     "--glossary-method", "place", input="".join(s + "\n" for s in lines)))
    counts = re.search(r"glossary: (\d+) term\(s\) found, (\d+) in the translations", offline.stderr)
    assert counts, offline.stderr
    found, placed = int(counts.group(1)), int(counts.group(2))
    assert placed > 0 and "X" in offline.stdout
    plain = ok(nmt("translate", "-m", tiny_checkpoint, "--threads", "1", "--engine", "torch",
                   input="".join(s + "\n" for s in lines))).stdout.splitlines()
    srv = Server(tiny_checkpoint, "--engine", "torch", "--glossary", f"en-de={glossary}", "--glossary-method", "place")
    try:
        r = srv.post("/v1/translate", {"text": lines})
        assert r.status_code == 200, r.text
        assert r.json()["translations"] == offline.stdout.splitlines()
        assert r.json()["terms"] == {"found": found, "placed": placed}
        r = srv.post("/translate", {"q": lines[0], "source": "en", "target": "de", "glossary": {"a": "EIN-TERM"}})
        assert r.status_code == 200 and "EIN-TERM" in r.json()["translatedText"], r.text  # the request's "a" wins
        own = srv.post("/v1/translate", {"text": lines, "glossary": {s: s.upper() + "!" for s in TERMS}}).json()
        assert own["translations"] != plain and own["terms"]["placed"] > 0
        assert any(t.upper() + "!" in line for line in own["translations"] for t in TERMS)
    finally:
        code, stderr = srv.stop()
    assert code == 0 and f"glossary en -> de: {len(TERMS)} term(s) from {glossary}" in stderr, stderr


@pytest.mark.parametrize("method", ["auto", "constrain"])
def test_the_server_searches_for_terms_as_translate_does(tiny_checkpoint, sources, tmp_path, method):  # noqa: F811
    """auto (terms placed, and the sentences where some could not be searched again) and constrain (every sentence
    with a term searched for them): each answer is `nmt translate --glossary`'s line, and every term is in it (the
    tiny model knows no German: "Köter" comes only from the search)."""
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("dog\tKöter\nman\tHerr\n", encoding="utf-8")
    lines = ["A dog runs.", "No term here.", "A man and a dog."]
    offline = ok(nmt("translate", "-m", tiny_checkpoint, "--threads", "1", "--engine", "torch", "--beam", "3",
                     "--glossary", glossary, "--glossary-method", method, input="".join(s + "\n" for s in lines)))
    assert "glossary: 3 term(s) found, 3 in the translations" in offline.stderr, offline.stderr
    srv = Server(tiny_checkpoint, "--engine", "torch", "--beam", "3", "--glossary", f"en-de={glossary}",
                 "--glossary-method", method)
    try:
        r = srv.post("/v1/translate", {"text": lines})
        assert r.status_code == 200, r.text
        assert r.json()["translations"] == offline.stdout.splitlines()
        assert r.json()["terms"] == {"found": 3, "placed": 3}
    finally:
        code, stderr = srv.stop()
    assert code == 0, stderr
