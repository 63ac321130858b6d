"""A glossary's terms placed in a translation through its word alignment (nmt/documents/terms.py), on hand-made
translations and alignments, and through `nmt translate --glossary` on the tiny model."""

from __future__ import annotations

import pytest
from test_cli_robustness import assert_cli_error, cli

from nmt.documents.terms import place_terms
from nmt.engines.base import Translation
from nmt.engines.search import Hypothesis
from nmt.text.glossary import Glossary, Term

GLOSSARY = Glossary([Term("man", "Herr"), Term("street", "Fahrbahn"), Term("red shirt", "roten Pulli"),
                     Term("dog", "Köter"), Term("big dog", "Riesenhund")])


@pytest.mark.parametrize("source, translation, pairs, expected, placed", [
    # one word to one word, the full stop kept
    ("The man sleeps.", "Der Mann schläft.", [(0, 0), (1, 1), (2, 2)], "Der Herr schläft.", 1),
    # a noun aligned with its article too: the last word, as many as the target has
    ("on the street.", "auf der Straße.", [(0, 0), (2, 1), (2, 2)], "auf der Fahrbahn.", 1),
    ("in a red shirt", "in einem roten Hemd", [(0, 0), (2, 1), (2, 2), (3, 3)], "in einem roten Pulli", 1),
    # at the start of the translation: capitalised
    ("Man!", "Mann!", [(0, 0)], "Herr!", 1),
    ("street", "„Straße“", [(0, 0)], "„Fahrbahn“", 1),  # quotes around it stay
    ("A man.", "Ein Mann.", [(0, 0)], "Ein Mann.", 0),  # `man` aligned to no word: not placed
    ("A man.", "Ein Mann.", [(1, 5)], "Ein Mann.", 0),  # (a pair out of range is no link)
    ("A big dog.", "Ein großer Hund.", [(1, 1), (2, 2)], "Ein Riesenhund.", 1),  # the longest term
    # two terms aligned to one word: the first placed, the second not
    ("man street", "Straßenmann", [(0, 0), (1, 0)], "Herr", 1),
])
def test_terms_replace_the_words_aligned_to_them(source, translation, pairs, expected, placed):
    hypothesis = Hypothesis([1, 2, 3], -1.0, -2.0)
    given = Translation(translation, [(translation, hypothesis), ("other", hypothesis)], source)
    out, counts = place_terms(given, GLOSSARY, lambda src, h: pairs)
    assert out.text == expected and out.hypotheses[0] == (expected, hypothesis) and out.hypotheses[1][0] == "other"
    assert (counts.found, counts.placed) == (len(GLOSSARY.matches(source)), placed)


def test_translate_with_a_glossary(tmp_path, tiny_checkpoint):
    """Every input line gives one output line; the counts go to stderr; a bad glossary and an option it cannot go
    with are one-line errors before the model loads."""
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("# en-de\ndog\tKöter\n")
    (tmp_path / "in.en").write_text("A dog runs.\n\nTwo dogs.\n")
    r = cli("translate", "-m", tiny_checkpoint, "--glossary", glossary, "--engine", "torch", "-i", tmp_path / "in.en")
    assert r.exit_code == 0, r.stderr
    assert len(r.stdout.splitlines()) == 3 and "glossary: 1 term(s) found" in r.stderr
    glossary.write_text("dog Köter\n")
    assert_cli_error(cli("translate", "-m", tiny_checkpoint, "--glossary", glossary, input="A dog.\n"),
                     f"{glossary}:1: no tab")
    glossary.write_text("dog\tKöter\n")
    assert_cli_error(cli("translate", "-m", tiny_checkpoint, "--glossary", glossary, "--alignments", input="x\n"),
                     "--glossary: not with --alignments")


def test_eval_scores_term_accuracy(tmp_path):
    """eval --glossary --src: every system's term accuracy, worked out by hand; --glossary without --src is refused."""
    import json

    (tmp_path / "src.en").write_text("A dog.\nTwo dogs and a dog.\nNo term.\n")
    (tmp_path / "ref.de").write_text("Ein Köter.\nZwei Hunde und ein Köter.\nKein Begriff.\n")
    (tmp_path / "hyp.de").write_text("Ein Hund.\nZwei Hunde und ein Köter.\nKein Begriff.\n")
    (tmp_path / "g.tsv").write_text("dog\tKöter\n")
    r = cli("eval", "--ref", tmp_path / "ref.de", "--hyp", tmp_path / "hyp.de", "--src", tmp_path / "src.en",
            "--glossary", tmp_path / "g.tsv", "--json")
    assert r.exit_code == 0, r.stderr
    scores = {s["metric"]: s for s in json.loads(r.stdout)["scores"]}
    assert scores["term accuracy"]["score"] == 50.0  # "dog" twice in the sources, "Köter" once in the translations
    assert "terms:2" in scores["term accuracy"]["signature"]
    assert_cli_error(cli("eval", "--ref", tmp_path / "ref.de", "--hyp", tmp_path / "hyp.de", "--glossary",
                         tmp_path / "g.tsv"), "--glossary needs --src")


def test_glossary_methods(tmp_path, tiny_checkpoint):
    """auto and constrain put each term in (the tiny model knows no German: "Köter" comes only from the glossary);
    constrain gives the same lines on both engines (CTranslate2 hands the sentences with terms to torch); a line
    without terms is translated as without a glossary; constrain with sampling is a one-line error, auto with sampling
    places."""
    pytest.importorskip("ctranslate2")
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("dog\tKöter\nruns\trennt schnell\n")
    lines = tmp_path / "in.en"
    lines.write_text("A dog runs.\nNo term here.\nTwo dogs, a dog.\n")
    outputs = {}
    for engine in ("torch", "ctranslate2"):
        for method in ("auto", "place", "constrain"):
            r = cli("translate", "-m", tiny_checkpoint, "--glossary", glossary, "--beam", "3", "--engine", engine,
                    "--glossary-method", method, "-i", lines)
            assert r.exit_code == 0, r.stderr
            outputs[engine, method] = out = r.stdout.splitlines()
            assert len(out) == 3
            if method != "place":  # (placing may miss: the tiny model's attention is no alignment)
                assert "Köter" in out[0] and "rennt schnell" in out[0] and "Köter" in out[2], (engine, method, out)
                assert "glossary: 3 term(s) found, 3 in the translations" in r.stderr, r.stderr  # "dogs" is no term
    assert outputs["torch", "constrain"] == outputs["ctranslate2", "constrain"]
    plain = cli("translate", "-m", tiny_checkpoint, "--beam", "3", "--engine", "torch", "-i", lines)
    assert all(out[1] == plain.stdout.splitlines()[1] for out in outputs.values())
    assert_cli_error(cli("translate", "-m", tiny_checkpoint, "--glossary", glossary, "--engine", "torch",
                         "--glossary-method", "constrain", "--sampling", "-i", lines),
                     "--glossary-method constrain with --sampling")
    r = cli("translate", "-m", tiny_checkpoint, "--glossary", glossary, "--sampling", "--engine", "torch", "-i", lines)
    assert r.exit_code == 0 and "searched again" not in r.stderr, r.stderr
    # eval translates as translate does: every term of --src in --model's translations
    (tmp_path / "ref.de").write_text("Ein Köter rennt schnell.\nKein Begriff.\nZwei Hunde, ein Köter.\n")
    r = cli("eval", "-m", tiny_checkpoint, "--src", lines, "--ref", tmp_path / "ref.de", "--glossary", glossary,
            "--beam", "3", "--json")
    assert r.exit_code == 0, r.stderr
    assert '"score": 100.0' in r.stdout.split('"term accuracy"')[1].split("}")[0]
