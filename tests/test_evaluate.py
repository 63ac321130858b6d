"""sacreBLEU scoring: the table of metrics and its errors."""

import pytest

from nmt.core.errors import InputError
from nmt.scoring import bleu, paired_bootstrap, score


def by_name(scores):
    return {s.metric: s for s in scores}


def test_identical_is_100():
    refs = ["Ein Mann fährt Fahrrad .", "Zwei Hunde spielen im Schnee ."]
    scores = by_name(score(refs, refs))
    for name in ("BLEU 13a cased", "BLEU 13a uncased", "BLEU intl cased", "BLEU intl uncased", "chrF"):
        assert scores[name].score == pytest.approx(100.0)


def test_case_only_difference():
    refs = ["Ein Mann fährt mit einem roten Fahrrad die Straße hinunter ."]
    hyps = ["ein mann fährt mit einem roten fahrrad die straße hinunter ."]
    scores = by_name(score(hyps, refs))
    assert scores["BLEU 13a uncased"].score == pytest.approx(100.0)
    assert scores["BLEU 13a cased"].score < 60.0


@pytest.mark.parametrize("name, fragment", [
    ("BLEU 13a cased", "tok:13a"), ("BLEU 13a uncased", "case:lc"), ("BLEU intl cased", "tok:intl"), ("chrF", "nc:6"),
])
def test_signatures(name, fragment):
    scores = by_name(score(["a b c d"], ["a b c d"]))
    assert fragment in scores[name].signature
    assert "version:" in scores[name].signature


@pytest.mark.parametrize("hyp, ref, expected", [
    # BP = 1 (7 > 6 tokens); precisions 6/7, 5/6, 4/5, 3/4: BLEU = 100 * (3/7)^(1/4)
    ("the cat sat on the mat today", "the cat sat on the mat", 100 * (3 / 7) ** 0.25),
    # BP = exp(1 - 6/4); all precisions 1
    ("the cat sat on", "the cat sat on the mat", 100 * 2.718281828459045 ** (1 - 6 / 4)),
])
def test_bleu_hand_computed(hyp, ref, expected):
    assert by_name(score([hyp], [ref]))["BLEU 13a cased"].score == pytest.approx(expected, abs=0.01)


def test_mismatched_lines_is_an_error():
    with pytest.raises(InputError, match="2 lines but refs.txt has 3"):
        score(["a", "b"], ["a", "b", "c"], "hyp.txt", "refs.txt")


def test_empty_is_an_error():
    with pytest.raises(InputError, match="empty"):
        score([], [], "h", "r")


def test_ter_is_in_the_table():
    # TER = edits / reference words: one substitution in four words = 25
    assert by_name(score(["a b c x"], ["a b c d"]))["TER"].score == pytest.approx(25.0)


def test_several_references():
    refs_a = ["Ein Mann fährt Fahrrad .", "Zwei Hunde spielen ."]
    refs_b = ["Ein Mann radelt .", "Zwei Hunde toben ."]
    hyps = ["Ein Mann radelt .", "Zwei Hunde spielen ."]  # each line matches one of the references
    one = by_name(score(hyps, refs_a))
    two = by_name(score(hyps, [refs_a, refs_b], "h", ["a", "b"]))
    assert two["BLEU 13a cased"].score == pytest.approx(100.0) and one["BLEU 13a cased"].score < 100.0
    assert "nrefs:2" in two["BLEU 13a cased"].signature and two["TER"].score == pytest.approx(0.0)
    with pytest.raises(InputError, match="b has 1"):
        score(hyps, [refs_a, refs_b[:1]], "h", ["a", "b"])


def test_paired_bootstrap():
    refs = [f"the {w} sat on the mat today" for w in ["cat", "dog", "bird", "cow", "fox", "hen", "pig", "rat", "ant", "bee"]]
    worse = [r.replace("sat", "sits").replace("today", "now") for r in refs]
    results, signatures = paired_bootstrap([("base", worse), ("better", refs)], refs, n_samples=200)
    table = {(r.system, r.metric): r for r in results}
    assert {m for _, m in table} == {"BLEU 13a cased", "chrF", "TER"} and "bs:200" in signatures["BLEU 13a cased"]
    assert all(table[("base", m)].p_value is None for m in ("BLEU 13a cased", "chrF", "TER"))
    assert table[("better", "BLEU 13a cased")].score == 100.0 and table[("better", "BLEU 13a cased")].p_value < 0.05
    assert table[("better", "TER")].score == 0.0 and table[("base", "TER")].score > 0.0
    again, _ = paired_bootstrap([("base", worse), ("better", refs)], refs, n_samples=200)
    assert again == results  # sacreBLEU's fixed seed
    with pytest.raises(InputError, match="two or more"):
        paired_bootstrap([("base", worse)], refs)


def test_bleu_alone_is_the_first_figure_of_the_table():
    hyps, refs = ["ein Mann fährt mit dem Rad nach Hause"], ["ein Mann fährt mit einem Rad nach Hause"]
    assert bleu(hyps, refs) == score(hyps, refs)[0].score
