"""nmt distill: the teacher checks and the interpolation choice (tables worked by hand), chunks, resumption and
identity with a scripted teacher, then real teachers (the tiny model, an ensemble, an imported Marian model) and
the command line (a SIGKILL mid-run, one-line errors)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from test_cli import ENV, nmt, ok
from test_cli_robustness import assert_cli_error, cli

from nmt.config import InferenceConfig, Overrides, SearchConfig
from nmt.config.command_options import DistillOptions
from nmt.config.flags import as_flags
from nmt.core.errors import ConfigError, InputError
from nmt.distillation.distill import distill, teacher_inference, teacher_search
from nmt.distillation.interpolation import closest
from nmt.distillation.teacher_checks import TeacherChecks, failure, longest_run
from nmt.engines.base import Translation
from nmt.engines.ct2_export import file_sha256
from nmt.engines.search import Hypothesis
from nmt.scoring import sentence_score

# -- the checks ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("words, run", [
    ("", 0),
    ("a", 1),
    ("a b c", 1),
    ("a a", 2),
    ("a b a b a b", 3),  # a bigram three times
    ("x a b c a b c y", 2),  # a trigram twice, not at the start
    ("a b c d a b c d a b c d a b c d", 4),
    ("a b c d e a b c d e", 1),  # five words repeated: past MAX_NGRAM
    ("the the dog the the the", 3),
])
def test_longest_run(words, run):
    assert longest_run(words.split()) == run


@pytest.mark.parametrize("source, translation, checks, reason", [
    ("a dog runs", "ein Hund rennt", TeacherChecks(), None),
    ("a dog runs", "", TeacherChecks(), "empty"),
    ("a dog runs", "   ", TeacherChecks(), "empty"),
    ("", "ein Hund", TeacherChecks(), "empty"),
    ("A dog runs", "a  DOG runs", TeacherChecks(), "copy"),  # case and spaces aside
    ("A dog runs", "a dog runs", TeacherChecks(keep_copies=True), None),
    # (longer + 1) / (shorter + 1): 1 word against 6 is 7/2 = 3.5 > 3; against 5, 6/2 = 3: kept
    ("dog", "ein Hund rennt über die Wiese", TeacherChecks(), "length"),
    ("dog", "ein Hund rennt über die", TeacherChecks(), None),
    ("a dog runs over the big green field", "Hund", TeacherChecks(), "length"),
    ("dog", "ein Hund rennt über die Wiese", TeacherChecks(max_ratio=0), None),
    ("a very tall man", "ein sehr sehr sehr großer Mann", TeacherChecks(), None),  # 3 in a row: the limit
    ("a very tall man", "ein sehr sehr sehr sehr Mann", TeacherChecks(), "repeats"),
    ("a very tall man", "ein sehr sehr sehr sehr Mann", TeacherChecks(max_repeats=0), None),
    ("a man and a man", "ein Mann und ein Mann und ein Mann und ein Mann und ein Mann", TeacherChecks(max_ratio=0),
     "repeats"),  # a trigram four times
])
def test_failure(source, translation, checks, reason):
    assert failure(source, translation, checks) == reason


# -- interpolation --------------------------------------------------------------------------------------

NBEST = ["a dog is running", "the dog runs fast", "the cat runs fast"]


@pytest.mark.parametrize("hypotheses, reference, metric, index", [
    (NBEST, "the cat runs fast", "chrf", 2),
    (NBEST, "the cat runs fast", "bleu", 2),
    (NBEST, "the dog runs fast", "bleu", 1),
    (NBEST, "a dog is running", "chrf", 0),
    (NBEST, "", "chrf", 0),  # nothing to choose by: the teacher's best
    (["same", "same"], "same", "bleu", 0),  # a tie goes to the better-ranked
    (["only one"], "something else", "chrf", 0),
])
def test_closest(hypotheses, reference, metric, index):
    assert closest(hypotheses, reference, metric) == index


def test_sentence_scores_are_sacrebleus():
    import sacrebleu

    assert sentence_score("the cat sat", "the cat sat", "bleu") == pytest.approx(100.0)
    assert sentence_score("the cat", "the cat sat", "chrf") == pytest.approx(
        sacrebleu.sentence_chrf("the cat", ["the cat sat"]).score)


# -- options ---------------------------------------------------------------------------------------------


def options(tmp_path: Path, **changes) -> DistillOptions:
    base = DistillOptions(model=[tmp_path / "teacher.pt"], train=str(tmp_path / "train"), src="en", tgt="de",
                          out=tmp_path / "out", chunk_lines=3)
    return replace(base, **changes)


@pytest.mark.parametrize("given, interpolate, nbest", [
    ({}, "none", None),
    ({}, "chrf", 4),  # the whole default beam
    ({"beam": 6}, "chrf", 6),
    ({"beam": 6, "nbest": 3}, "bleu", 3),
])
def test_teacher_search(given, interpolate, nbest, tmp_path):
    search = teacher_search(Overrides(SearchConfig, given), options(tmp_path, interpolate=interpolate))
    assert search.get("nbest") == nbest


@pytest.mark.parametrize("given, interpolate, words", [
    ({"beam": 1}, "chrf", "--beam 2 or more"),
    ({"nbest": 2, "beam": 4}, "none", "--interpolate chrf"),
])
def test_teacher_search_refusals(given, interpolate, words, tmp_path):
    with pytest.raises(ConfigError) as e:
        teacher_search(Overrides(SearchConfig, given), options(tmp_path, interpolate=interpolate))
    assert words in as_flags(str(e.value))


@pytest.mark.parametrize("given, precision", [
    ({}, "int8"),  # the fastest format where nothing is asked
    ({"precision": "fp32"}, "fp32"),
    ({"int8": False}, "fp32"),
    ({"gpus": 1}, "fp32"),
])
def test_teacher_inference(given, precision):
    assert str(teacher_inference(Overrides(InferenceConfig, given)).apply().requested_precision) == precision


# -- chunks, resumption and identity with a scripted teacher ---------------------------------------------


class Scripted:
    """A teacher whose n-best of line i is `nbest[i]` (else 'T<line>'); counts the lines it translates and can
    fail at a given chunk (a crash mid-run)."""

    name = "scripted"
    compute_type = "exact"

    def __init__(self, nbest: dict[str, list[str]] | None = None, fail_at: int | None = None, search=None):
        self.nbest, self.fail_at, self.calls = nbest or {}, fail_at, []
        self.search_cfg = search or SearchConfig()
        self.progress = None

    def with_direction(self, src, tgt, where="the model"):
        return self

    def translate_chunk(self, lines, first_line=0):
        self.calls.append(first_line)
        if self.fail_at is not None and len(self.calls) > self.fail_at:
            raise KeyboardInterrupt  # as a Ctrl-C (or a kill) mid-run
        out = []
        for line in lines:
            texts = self.nbest.get(line, [line.replace("S", "T")] if line else [""])
            out.append(Translation(texts[0], [(t, Hypothesis([], -1.0, -1.0)) for t in texts], line))
        return out


def corpus(tmp_path: Path, sources: list[str], refs: list[str] | None = None) -> None:
    (tmp_path / "teacher.pt").write_bytes(b"teacher one")
    (tmp_path / "train.en").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    if refs is not None:
        (tmp_path / "train.de").write_text("".join(r + "\n" for r in refs), encoding="utf-8")


def run(tmp_path: Path, teacher: Scripted, **changes) -> dict:
    return distill(options(tmp_path, **changes), Overrides(SearchConfig), Overrides(InferenceConfig),
                   open_teacher=lambda *a, **k: teacher)


def test_the_corpus_keeps_the_good_pairs_and_reports_the_rest(tmp_path):
    sources = ["S1 a b", "S2 c d", "", "S4 e f", "S5 g h", "S6 i j", "S7 k l"]
    nbest = {"S2 c d": ["S2 c d"], "S4 e f": ["T4 x x x x x"], "S5 g h": ["T5 " + " ".join(f"w{i}" for i in range(13))]}
    corpus(tmp_path, sources)
    report = run(tmp_path, Scripted(nbest))
    out = tmp_path / "out"
    assert (out / "train.en").read_text().splitlines() == ["S1 a b", "S6 i j", "S7 k l"]
    assert (out / "train.de").read_text().splitlines() == ["T1 a b", "T6 i j", "T7 k l"]
    assert report["lines"] == 7 and report["kept"] == 3
    assert report["dropped"] == {"language": 0, "empty": 1, "copy": 1, "length": 1, "repeats": 1}
    assert [line.split("\t")[:2] for line in (out / "dropped.tsv").read_text().splitlines()] == [
        ["2", "copy"], ["3", "empty"], ["4", "repeats"], ["5", "length"]]
    assert json.loads((out / "report.json").read_text()) == report
    assert sorted(p.name for p in (out / "chunks").iterdir()) == ["000000.txt", "000001.txt", "000002.txt"]
    again = Scripted()
    report = run(tmp_path, again, keep_copies=True, max_ratio=0)  # other checks: the same chunks, checked again
    assert again.calls == [] and report["kept"] == 5 and report["dropped"] == {"language": 0, "empty": 1, "copy": 0,
                                                                                 "length": 0, "repeats": 1}


def test_interpolation_keeps_the_hypothesis_closest_to_the_reference(tmp_path):
    sources = ["S1", "S2", "S3"]
    refs = ["the cat runs fast", "a dog is running", ""]
    nbest = {s: list(NBEST) for s in sources}
    corpus(tmp_path, sources, refs)
    report = run(tmp_path, Scripted(nbest), interpolate="chrf", max_ratio=0)
    assert (tmp_path / "out" / "train.de").read_text().splitlines() == [NBEST[2], NBEST[0], NBEST[0]]
    assert report["interpolation"] == {"metric": "chrf", "not_teacher_best": 1}


def test_a_run_killed_mid_way_goes_on_from_the_first_missing_chunk(tmp_path):
    sources = [f"S{i} w" for i in range(10)]
    corpus(tmp_path, sources)
    first = Scripted(fail_at=2)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, first)
    assert first.calls == [0, 3, 6]
    assert not (tmp_path / "out" / "train.de").exists()  # nothing half done is offered as the corpus
    again = Scripted()
    report = run(tmp_path, again)
    assert again.calls == [6, 9]
    assert report["translated_now"] == 4
    assert (tmp_path / "out" / "train.de").read_text().splitlines() == [s.replace("S", "T") for s in sources]
    done = Scripted()
    run(tmp_path, done)
    assert done.calls == []  # a finished run only assembles again


@pytest.mark.parametrize("change, words", [
    ({"teacher": b"teacher two"}, "another teacher"),
    ({"search": SearchConfig(beam=5)}, "other search options"),
    ({"chunk_lines": 4}, "another --chunk-lines"),
    ({"source": ["S9 z"] * 5}, "another source file"),
])
def test_chunks_of_another_teacher_or_setting_are_never_mixed_in(change, words, tmp_path):
    corpus(tmp_path, [f"S{i} w" for i in range(5)])
    first = Scripted(fail_at=1)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, first)
    if "teacher" in change:
        (tmp_path / "teacher.pt").write_bytes(change["teacher"])
    if "source" in change:
        corpus(tmp_path, change["source"])
    with pytest.raises(ConfigError) as e:
        run(tmp_path, Scripted(search=change.get("search")), chunk_lines=change.get("chunk_lines", 3))
    assert words in as_flags(str(e.value)) and "delete" in str(e.value)


def test_an_edited_chunk_is_an_error_naming_it(tmp_path):
    corpus(tmp_path, [f"S{i} w" for i in range(5)])
    run(tmp_path, Scripted())
    chunk = tmp_path / "out" / "chunks" / "000001.txt"
    chunk.write_text("0\tonly one line\n", encoding="utf-8")
    with pytest.raises(InputError, match="000001.txt: 1 lines where 2"):
        run(tmp_path, Scripted())


def test_references_of_another_length_are_refused_before_translating(tmp_path):
    """A reference one line short is an error before the first chunk is translated (not after all but the last)."""
    for sources, refs, words in ((["S1", "S2", "S3"], ["R1", "R2"], "has 3 lines but"),
                                 (["S1", "S2"], ["R1", "R2", "R3"], "has 2 lines but")):
        corpus(tmp_path, sources, refs)
        teacher = Scripted({"S1": NBEST})
        with pytest.raises(InputError, match=words):
            run(tmp_path, teacher, interpolate="bleu", chunk_lines=1)
        assert teacher.calls == []


# -- real teachers ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample(tmp_path_factory, tiny_corpus) -> Path:
    """train.en/train.de: 40 lines of the tiny corpus."""
    root = tmp_path_factory.mktemp("distill_sample")
    for lang in ("en", "de"):
        lines = (tiny_corpus / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:40]
        (root / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def real(sample: Path, out: Path, models: list[Path], **changes) -> dict:
    o = DistillOptions(model=models, train=str(sample / "train"), src="en", tgt="de", out=out, chunk_lines=16,
                       **changes)
    return distill(o, Overrides(SearchConfig, {"beam": 2}), Overrides(InferenceConfig))


def test_the_tiny_model_distils_through_the_int8_engine_as_translate_would(sample, tiny_checkpoint, tmp_path):
    from nmt.engines.choice import open_engine

    report = real(sample, tmp_path / "out", [tiny_checkpoint], max_ratio=0, max_repeats=0, keep_copies=True)
    assert report["engine"] == "ctranslate2 (int8)" and report["lines"] == 40
    engine = open_engine([tiny_checkpoint], Overrides(SearchConfig, {"beam": 2}),
                         InferenceConfig(engine="ctranslate2", int8=True))
    lines = (sample / "train.en").read_text(encoding="utf-8").splitlines()
    expected = [t.text for t in engine.translate_chunk(lines[:16])] + [
        t.text for t in engine.translate_chunk(lines[16:32], 16)] + [t.text for t in engine.translate_chunk(lines[32:], 32)]
    kept = [e for e in expected if e.strip()]
    assert (tmp_path / "out" / "train.de").read_text(encoding="utf-8").splitlines() == kept
    assert report["kept"] == len(kept)


def test_an_ensemble_distils_on_torch(sample, tiny_run, tmp_path):
    models = [tiny_run / "checkpoint_00000020.pt", tiny_run / "checkpoint_00000030.pt"]
    report = real(sample, tmp_path / "out", models, interpolate="chrf")
    assert report["engine"] == "torch (int8)" and report["lines"] == 40
    assert report["kept"] + sum(report["dropped"].values()) == 40
    assert "interpolation" in report


def test_an_imported_marian_model_is_a_teacher(sample, tmp_path):
    from test_import_marian import build_folder, make_tokenizer_files

    from nmt.importers.marian import import_marian
    from nmt.model import checkpoint

    folder = build_folder(tmp_path / "opus-mt-en-de", make_tokenizer_files(),
                          config=dict(activation_function="gelu", scale_embedding=False, init_std=0.2))
    teacher = tmp_path / "marian.pt"
    checkpoint.save(teacher, import_marian(folder).checkpoint)
    report = real(sample, tmp_path / "out", [teacher])
    # a random model loops and runs to its length limit: the checks must catch what it writes
    assert report["lines"] == 40 and report["kept"] + sum(report["dropped"].values()) == 40
    assert report["dropped"]["repeats"] + report["dropped"]["length"] > 0


# -- the command line ------------------------------------------------------------------------------------


def test_kill_9_then_rerun_gives_the_corpus_of_an_uninterrupted_run(sample, tiny_checkpoint, tmp_path):
    args = ["distill", "-m", tiny_checkpoint, "--train", sample / "train", "--src", "en", "--tgt", "de",
            "--chunk-lines", "4", "--engine", "torch", "--precision", "fp32"]
    ok(nmt(*args, "--out", tmp_path / "clean"))
    out = tmp_path / "killed"
    child = subprocess.Popen([sys.executable, "-m", "nmt", *map(str, args), "--out", str(out)], env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (out / "chunks" / "000002.txt").exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    chunks = len(list((out / "chunks").glob("*.txt")))
    assert chunks >= 3
    r = ok(nmt(*args, "--out", out))
    assert json.loads(r.stdout)["translated_now"] == 40 - 4 * chunks
    for name in ("train.en", "train.de", "dropped.tsv"):
        assert (out / name).read_bytes() == (tmp_path / "clean" / name).read_bytes()
    assert not [p for p in out.rglob(".*.tmp")]


@pytest.mark.parametrize("extra, words", [
    (["--train", "nowhere/train"], "no such file"),
    (["--interpolate", "chrf", "--beam", "1"], "--beam 2 or more"),
    (["--nbest", "2"], "--interpolate chrf"),
    (["--chunk-lines", "0"], "--chunk-lines"),
    (["--max-ratio", "nan"], "--max-ratio"),
])
def test_careless_options_are_one_line_errors(extra, words, sample, tiny_checkpoint, tmp_path):
    args = ["distill", "-m", tiny_checkpoint, "--train", sample / "train", "--src", "en", "--tgt", "de",
            "--out", tmp_path / "out"]
    assert_cli_error(cli(*args, *extra), words)  # in this process: no interpreter started per case


def test_the_corpus_folder_cannot_be_the_input(sample, tiny_checkpoint, tmp_path):
    assert_cli_error(cli("distill", "-m", tiny_checkpoint, "--train", sample / "train", "--src", "en", "--tgt", "de",
                         "--out", sample), "--out")
    assert sorted(p.name for p in sample.iterdir()) == ["train.de", "train.en"]


def test_a_second_process_on_the_folder_is_refused(sample, tiny_checkpoint, tmp_path):
    from nmt.core.files import folder_lock

    with folder_lock(tmp_path / "out"):
        r = nmt("distill", "-m", tiny_checkpoint, "--train", sample / "train", "--src", "en", "--tgt", "de",
                "--out", tmp_path / "out")
    assert r.returncode == 1 and "Traceback" not in r.stderr and r.stdout == ""
    assert r.stderr.splitlines()[-1].startswith("error: another nmt process")  # after the engine's log lines


# -- student presets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, layers, d_ff", [("multi30k-student", (6, 2), 512), ("student", (6, 2), 1024)])
def test_a_student_preset_is_deep_shallow_and_searches_greedily(name, layers, d_ff, tiny_data, tmp_path):
    from nmt.config import from_preset
    from nmt.engines.choice import open_engine
    from nmt.model import checkpoint
    from nmt.training.launch import train

    model, _ = from_preset(name)
    assert (model.encoder_layers, model.decoder_layers, model.d_ff) == (*layers, d_ff)
    if name == "student":
        return  # the base-size student: its shape is enough here
    train(tiny_data, tmp_path / "run", preset=name, train_overrides=dict(max_updates=2, save_interval=2, max_time=0,
                                                                         valid_interval=1000, valid_bleu_sentences=0))
    ckpt = tmp_path / "run" / "checkpoint_00000002.pt"
    assert checkpoint.load(ckpt).search.values == {"beam": 1}
    assert open_engine([ckpt], inference=InferenceConfig(engine="torch")).search_cfg.beam == 1
    assert open_engine([ckpt], Overrides(SearchConfig, {"beam": 3}), InferenceConfig(engine="torch")).search_cfg.beam == 3


# -- glossaries --------------------------------------------------------------------------------------------------


class Aligning(Scripted):
    """A scripted teacher whose alignment links each source word to the target word at its place."""

    def alignment(self, line, hypothesis, line_index=0):
        return [(i, i) for i in range(len(line.split()))]


def test_a_glossary_s_terms_are_placed_and_a_resume_with_another_glossary_is_refused(tmp_path):
    corpus(tmp_path, ["S1 a dog", "S2 no term", "S3 dog dog", "S4 Dog"])
    terms = tmp_path / "terms.tsv"
    terms.write_text("dog\tKöter\n", encoding="utf-8")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, Aligning(fail_at=1), glossary=terms)  # the first chunk (3 lines) written
    state = json.loads((tmp_path / "out" / "distill.json").read_text())
    assert state["glossary"] == file_sha256(terms)
    other = tmp_path / "other.tsv"
    other.write_text("dog\tHund\n", encoding="utf-8")
    for given in (None, other):
        with pytest.raises(ConfigError) as e:
            run(tmp_path, Aligning(), glossary=given)
        assert "another --glossary" in as_flags(str(e.value))
    terms.write_text("dog\tHund\n", encoding="utf-8")  # the same file, other terms
    with pytest.raises(ConfigError, match="another --glossary"):
        run(tmp_path, Aligning(), glossary=terms)
    terms.write_text("dog\tKöter\n", encoding="utf-8")
    teacher = Aligning()
    report = run(tmp_path, teacher, glossary=terms)
    assert teacher.calls == [3]  # resumed at the second chunk
    assert (tmp_path / "out" / "train.de").read_text(encoding="utf-8").splitlines() == [
        "T1 a Köter", "T2 no term", "T3 Köter Köter", "T4 Köter"]  # ("Dog": case aside)
    assert report["glossary"] == {"file": str(terms), "terms": 1, "found_now": 1, "placed_now": 1}


def test_a_glossary_with_interpolation_an_ensemble_or_a_bad_line_is_refused_before_the_teacher_loads(tmp_path):
    from nmt.distillation.distill import teacher_glossary

    terms = tmp_path / "terms.tsv"
    terms.write_text("dog\tKöter\ncat Katze\n", encoding="utf-8")
    with pytest.raises(InputError, match=f"^{terms}:2: no tab"):
        teacher_glossary(options(tmp_path, glossary=terms))
    with pytest.raises(ConfigError) as e:
        teacher_glossary(options(tmp_path, glossary=terms, interpolate="chrf"))
    assert as_flags(str(e.value)).startswith("--glossary with --interpolate chrf: the terms are placed in the teacher's "
                                             "best translation")
    with pytest.raises(ConfigError) as e:
        teacher_glossary(options(tmp_path, glossary=terms, model=[tmp_path / "a.pt", tmp_path / "b.pt"]))
    assert "an ensemble (2 checkpoints)" in str(e.value)
    assert teacher_glossary(options(tmp_path)) is None


@pytest.mark.parametrize("extra, words", [
    (["--glossary", "{bad}"], "{bad}:1: no tab"),
    (["--glossary", "{good}", "--interpolate", "chrf"], "--glossary with --interpolate chrf"),
    (["--glossary", "{absent}"], "--glossary {absent}: cannot read"),
])
def test_careless_glossaries_are_one_line_errors(extra, words, sample, tiny_checkpoint, tmp_path):
    names = {"bad": tmp_path / "bad.tsv", "good": tmp_path / "good.tsv", "absent": tmp_path / "absent.tsv"}
    names["bad"].write_text("dog Köter\n", encoding="utf-8")
    names["good"].write_text("dog\tKöter\n", encoding="utf-8")
    args = ["distill", "-m", tiny_checkpoint, "--train", sample / "train", "--src", "en", "--tgt", "de",
            "--out", tmp_path / "out"]
    assert_cli_error(cli(*args, *(e.format(**names) for e in extra)), words.format(**names))


def test_the_tiny_teacher_places_a_glossary_s_terms(sample, tiny_checkpoint, tmp_path):
    """Through the int8 engine's alignment, chunk by chunk: the terms found are counted, those placed are in the
    corpus."""
    terms = tmp_path / "terms.tsv"
    targets = {"a": "XA", "man": "XMAN", "woman": "XWOMAN", "the": "XTHE", "in": "XIN", "is": "XIS", "two": "XTWO"}
    terms.write_text("".join(f"{s}\t{t}\n" for s, t in targets.items()), encoding="utf-8")
    report = real(sample, tmp_path / "out", [tiny_checkpoint], max_ratio=0, max_repeats=0, keep_copies=True,
                  glossary=terms)
    counts = report["glossary"]
    assert counts["terms"] == len(targets) and counts["found_now"] > 20 and 0 < counts["placed_now"] <= counts["found_now"]
    corpus_text = (tmp_path / "out" / "train.de").read_text(encoding="utf-8")
    placed = sum(corpus_text.count(t) + corpus_text.count(t.capitalize()) for t in targets.values())
    assert placed >= counts["placed_now"]
