"""Tests of the sample-corpus generator (a development tool): it reproduces the shipped files, and
its German grammar. Run with `pytest tools` (not part of the default suite)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "nmt" / "sample_data"
GENERATOR = ROOT / "tools" / "make_sample_corpus.py"
FILES = [f"{split}.{lang}" for split in ("train", "valid", "test") for lang in ("en", "de")]


def _load_generator():
    spec = importlib.util.spec_from_file_location("make_sample_corpus", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while it loads
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def test_generator_reproduces_shipped_files(tmp_path):
    gen.main(["--out", str(tmp_path)])
    for name in FILES + ["README.md"]:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name


def test_other_seed_gives_other_corpus():
    a = gen.generate_corpus(seed=1, sizes=(("x", 50),))["x"]
    b = gen.generate_corpus(seed=2, sizes=(("x", 50),))["x"]
    assert a != b and a == gen.generate_corpus(seed=1, sizes=(("x", 50),))["x"]


# ---------------------------------------------------------------- German grammar


@pytest.mark.parametrize(
    "english, case, prep, german",
    [
        # dative after "mit": masculine / feminine / neuter, mixed declension
        ("a red ball", "dat", "mit", "mit einem roten Ball"),
        ("an old woman", "dat", "mit", "mit einer alten Frau"),
        ("a small child", "dat", "mit", "mit einem kleinen Kind"),
        # accusative masculine vs. neuter, nominative mixed declension
        ("a big dog", "acc", None, "einen großen Hund"),
        ("a white horse", "acc", None, "ein weißes Pferd"),
        ("a big black dog", "nom", None, "ein großer schwarzer Hund"),
        ("a young girl", "nom", None, "ein junges Mädchen"),
        ("an expensive car", "nom", None, "ein teures Auto"),
        # plural with numerals (strong declension) and dative plural -n
        ("two small dogs", "nom", None, "zwei kleine Hunde"),
        ("two small dogs", "dat", "mit", "mit zwei kleinen Hunden"),
        ("three tired children", "nom", None, "drei müde Kinder"),
        ("some tired children", "dat", "mit", "mit einigen müden Kindern"),
        # weak declension after the definite article
        ("the old man", "nom", None, "der alte Mann"),
        ("the old woman", "nom", None, "die alte Frau"),
        ("the old man", "dat", None, "dem alten Mann"),
        ("the old men", "dat", None, "den alten Männern"),
        ("the two old men", "acc", None, "die zwei alten Männer"),
        # weak masculine nouns
        ("the boy", "acc", None, "den Jungen"),
        ("a police officer", "dat", "mit", "mit einem Polizisten"),
        # contractions and irregular attributive stems
        ("the park", "dat", "in", "im Park"),
        ("the beach", "dat", "an", "am Strand"),
        ("the water", "acc", "in", "ins Wasser"),
        ("the dark forest", "dat", "in", "im dunklen Wald"),
        # modifiers
        ("a young man in a red shirt", "nom", None, "ein junger Mann in einem roten Hemd"),
        ("the woman with the blue hat", "dat", None, "der Frau mit dem blauen Hut"),
    ],
)
def test_noun_phrases(english, case, prep, german):
    assert gen.translate_np(english, case, prep) == german


@pytest.mark.parametrize(
    "parts, mode, english, german",
    [
        (dict(subject="a young man in a red shirt", verb="ride", obj="a bicycle",
              path="down the street"), "main",
         "A young man in a red shirt is riding a bicycle down the street.",
         "Ein junger Mann in einem roten Hemd fährt mit einem Fahrrad die Straße hinunter."),
        (dict(subject="the boy", verb="pick_up", obj="the ball"), "main",
         "The boy is picking up the ball.", "Der Junge hebt den Ball auf."),
        (dict(subject="the boy", verb="pick_up", obj="the ball"), "yn",
         "Is the boy picking up the ball?", "Hebt der Junge den Ball auf?"),
        (dict(subject="an old man", verb="read", obj="a newspaper", loc="in the park"),
         "front_loc",
         "In the park, an old man is reading a newspaper.",
         "Im Park liest ein alter Mann eine Zeitung."),
        (dict(subject="two girls", verb="help", obj="an old woman"), "main",
         "Two girls are helping an old woman.", "Zwei Mädchen helfen einer alten Frau."),
        (dict(subject="a dog", verb="run", path="towards a little girl"), "main",
         "A dog is running towards a little girl.", "Ein Hund läuft auf ein kleines Mädchen zu."),
        (dict(subject="the children", verb="play_s", bare="soccer", loc="on the beach"), "main",
         "The children are playing soccer on the beach.", "Die Kinder spielen am Strand Fußball."),
        (dict(subject="a cow", verb="eat", loc="in a field"), "main",
         "A cow is eating in a field.", "Eine Kuh frisst auf einem Feld."),
        (dict(subject="a horse", verb="jump", path="over a fence"), "main",
         "A horse is jumping over a fence.", "Ein Pferd springt über einen Zaun."),
        (dict(subject="the woman", verb="hold", obj="a red umbrella"), "what",
         "What is the woman holding?", "Was hält die Frau?"),
        (dict(subject="a man", verb="talk", obj="the police officer"), "who",
         "Who is talking to the police officer?", "Wer spricht mit dem Polizisten?"),
        (dict(subject="a bird", verb="sit", loc="in a tree"), "main",
         "A bird is sitting in a tree.", "Ein Vogel sitzt auf einem Baum."),
        (dict(subject="the children", verb="play", loc="in the park", time="today"), "front_time",
         "Today, the children are playing in the park.", "Heute spielen die Kinder im Park."),
    ],
)
def test_sentences(parts, mode, english, german):
    assert gen.render(gen.build_clause(**parts), mode) == (english, german)


@pytest.mark.parametrize(
    "parts, german",
    [
        (dict(subject="a boy", verb="pick_up", obj="a ball"), "ein Junge einen Ball aufhebt"),
        (dict(subject="a man", verb="walk_l", loc="in the park"), "ein Mann im Park spazieren geht"),
        (dict(subject="a bus", verb="drive_i", path="down the street"),
         "ein Bus die Straße hinunterfährt"),
        (dict(subject="two women", verb="listen", obj="a musician"),
         "zwei Frauen einem Musiker zuhören"),
    ],
)
def test_subordinate_clause_is_verb_final(parts, german):
    assert gen.build_clause(**parts).render("sub")[1] == german
