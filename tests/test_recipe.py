"""recipes/multi30k.sh end to end on the real Multi30k files, with a model shrunk to seconds of training."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_M30K = ROOT.parent / "shared/data/multi30k"


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_M30K.is_dir(), reason="needs ../shared/data/multi30k (the upstream files)")
def test_multi30k_recipe_runs_both_directions_and_resumes(tmp_path):
    env = {**os.environ, "NMT": str(Path(sys.executable).parent / "nmt"), "MIRROR": str(SHARED_M30K),
           "OMP_NUM_THREADS": "1", "BEAM": "1", "AVERAGE": "2",
           "TRAIN_ARGS": "--max-updates 4 --save-interval 2 --d-model 16 --heads 2 --layers 1 --d-ff 32 "
                         "--valid-bleu-sentences 0 --max-time 0"}
    out = tmp_path / "m30k"
    r = subprocess.run(["bash", str(ROOT / "recipes/multi30k.sh"), str(out)], env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["direction"] for row in rows] == ["en-de", "de-en"]
    for row in rows:
        metrics = [s["metric"] for s in row["scores"]["scores"]]
        assert metrics[:2] == ["BLEU 13a cased", "BLEU 13a uncased"]
        src, tgt = row["direction"].split("-")
        hyp = out / row["direction"] / f"test.hyp.{tgt}"
        assert len(hyp.read_text(encoding="utf-8").splitlines()) == 1000
        run = out / row["direction"] / "run"
        assert sorted(p.name for p in run.glob("checkpoint_0*.pt")) == ["checkpoint_00000002.pt", "checkpoint_00000004.pt"]
    # A second run finds every step done: same scores, no new training.
    again = subprocess.run(["bash", str(ROOT / "recipes/multi30k.sh"), str(out)], env=env, capture_output=True,
                           text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout == r.stdout


def test_multi30k_recipe_shows_the_failing_steps_error(tmp_path):
    """A failing step's log goes to a file; its error must still reach the terminal, with a non-zero exit."""
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    env = {**os.environ, "NMT": str(Path(sys.executable).parent / "nmt"), "MIRROR": str(empty)}
    r = subprocess.run(["bash", str(ROOT / "recipes/multi30k.sh"), str(tmp_path / "out")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    assert r.stdout == ""
    assert "failed (exit 1)" in r.stderr and "nmt download multi30k" in r.stderr
    assert "error: " in r.stderr and "not found in the --mirror directory" in r.stderr
    assert not (tmp_path / "out" / "bpe.model").exists()  # nothing after the failed step ran


@pytest.mark.long
@pytest.mark.skipif(not SHARED_M30K.is_dir(), reason="needs ../shared/data/multi30k (the upstream files)")
def test_student_recipe_distils_both_teachers_and_resumes(tmp_path):
    """recipes/multi30k-student.sh on the teachers of a shrunken recipes/multi30k.sh run: both directions
    distilled (the whole training corpus), a student trained, scored with CTranslate2 int8 and exported; a
    rerun does nothing new."""
    tiny = "--d-model 16 --heads 2 --layers 1 --d-ff 32 --valid-bleu-sentences 0 --max-time 0"
    env = {**os.environ, "NMT": str(Path(sys.executable).parent / "nmt"), "MIRROR": str(SHARED_M30K),
           "OMP_NUM_THREADS": "1", "BEAM": "2", "AVERAGE": "2",
           "TRAIN_ARGS": f"--max-updates 4 --save-interval 2 {tiny}"}
    out = tmp_path / "m30k"
    teachers = subprocess.run(["bash", str(ROOT / "recipes/multi30k.sh"), str(out)], env=env, capture_output=True,
                              text=True, timeout=900)
    assert teachers.returncode == 0, teachers.stderr[-3000:]
    # A teacher of 4 updates loops to its length limit: short outputs, kept whatever they are, so that the chain
    # runs through (the checks and filters have tests of their own).
    env.update(DISTILL_ARGS="--max-len-a 0 --max-len-b 6 --max-ratio 0 --max-repeats 0 --keep-copies",
               PREPARE_ARGS="--max-ratio 1000 --min-len 1")
    student = ["bash", str(ROOT / "recipes/multi30k-student.sh"), str(out)]
    r = subprocess.run(student, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["direction"] for row in rows] == ["en-de", "de-en"]
    for row in rows:
        assert row["distilled"]["lines"] == 29000
        assert row["distilled"]["kept"] + sum(row["distilled"]["dropped"].values()) == 29000
        assert row["distilled"]["engine"] == "ctranslate2 (int8)"
        st = out / row["direction"] / "student"
        assert (st / "ct2-int8" / "model.bin").is_file()
        assert len((st / f"test.hyp.{row['direction'][-2:]}").read_text(encoding="utf-8").splitlines()) == 1000
        assert [s["metric"] for s in row["scores"]["scores"]][:1] == ["BLEU 13a cased"]
    again = subprocess.run(student, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [json.loads(line)["scores"] for line in again.stdout.splitlines()] == [row["scores"] for row in rows]


def test_student_recipe_wants_its_teachers_first(tmp_path):
    r = subprocess.run(["bash", str(ROOT / "recipes/multi30k-student.sh"), str(tmp_path / "none")],
                       env={**os.environ, "NMT": str(Path(sys.executable).parent / "nmt")}, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert "no teacher at" in r.stderr and "recipes/multi30k.sh" in r.stderr


SHARED_TASK2 = ROOT.parent / "shared/data/multi30k-task2"


@pytest.mark.long
@pytest.mark.skipif(not SHARED_TASK2.is_dir(), reason="needs ../shared/data/multi30k-task2 (the upstream files)")
def test_mono_recipe_runs_every_step_and_resumes(tmp_path):
    """recipes/multi30k-mono.sh with shrunken models and 60 captions a language: the parallel-only teachers,
    back-translation, the teachers on real + tagged synthetic pairs (two seeds), forward translation, the student
    scored with CTranslate2 int8 and exported; each step's wall time recorded; a rerun does nothing new."""
    tiny = "--d-model 16 --heads 2 --layers 1 --d-ff 32 --valid-bleu-sentences 0 --max-time 0"
    env = {**os.environ, "NMT": str(Path(sys.executable).parent / "nmt"), "MIRROR": str(SHARED_M30K),
           "MONO_MIRROR": str(SHARED_TASK2), "MONO_LINES": "60", "OMP_NUM_THREADS": "1", "BEAM": "2",
           "AVERAGE": "2", "LID": "0", "TRAIN_ARGS": f"--max-updates 4 --save-interval 2 {tiny}",
           "STUDENT_TRAIN_ARGS": f"--max-updates 4 --save-interval 2 {tiny}",
           # a 4-update teacher loops to its length limit: short outputs, kept whatever they are
           "DISTILL_ARGS": "--max-len-a 0 --max-len-b 6 --max-ratio 0 --max-repeats 0 --keep-copies",
           "PREPARE_ARGS": "--max-ratio 1000 --min-len 1"}
    out = tmp_path / "m30k"
    recipe = ["bash", str(ROOT / "recipes/multi30k-mono.sh"), str(out)]
    r = subprocess.run(recipe, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["direction"] for row in rows] == ["en-de", "de-en"]
    assert re.search(r"en-de distils from \S+averaged", r.stderr), r.stderr[-3000:]  # chosen on validation
    for row in rows:
        src, tgt = row["direction"].split("-")
        dir = out / row["direction"] / "mono"
        for system in ("parallel", "synthetic", "ensemble", "student"):
            assert [s["metric"] for s in row[system]["scores"]][:1] == ["BLEU 13a cased"], system
        bt = json.loads((dir / "bt" / "report.json").read_text())
        assert (bt["src"], bt["tgt"], bt["lines"]) == (tgt, src, 60)  # the other language's captions
        meta = json.loads((dir / "data" / "meta.json").read_text())
        assert "synthetic_tag" in meta and [c["corpus"].endswith("(synthetic)")
                                            for c in meta["splits"]["train"]["corpora"]] == [False, True]
        assert json.loads((dir / "ft-mono" / "report.json").read_text())["lines"] == 60
        assert (dir / "student" / "ct2-int8" / "model.bin").is_file()
        steps = [line.split("\t")[0] for line in (dir / "steps.tsv").read_text().splitlines()]
        assert steps == ["back-translate", "prepare", "teacher", "teacher-seed-2", "forward-real", "forward-mono",
                         "student-prepare", "student"]
    again = subprocess.run(recipe, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout == r.stdout
    assert [line.split("\t")[0] for line in (out / "en-de" / "mono" / "steps.tsv").read_text().splitlines()] == steps
