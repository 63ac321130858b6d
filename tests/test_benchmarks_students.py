"""benchmarks/students.py: how --system NAME=CHECKPOINT[:FIELD=VALUE,...] is read, and the `nmt serve` flags its
search becomes (no model is loaded here)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from conftest import benchmark_script


@pytest.fixture(scope="module")
def students():
    """The script, imported as a module."""
    with benchmark_script("students") as module:
        yield module


def test_a_system_is_a_name_a_checkpoint_and_typed_search_options(students):
    system = students.parse_system("teacher=runs/t/averaged.pt:beam=6,lenpen=1.2,max-len-a=2,early_stopping=no")
    assert system.name == "teacher"
    assert system.path == Path("runs/t/averaged.pt")
    assert system.search == {"beam": 6, "lenpen": 1.2, "max_len_a": 2.0, "early_stopping": False}
    assert type(system.search["beam"]) is int and type(system.search["max_len_a"]) is float
    assert system.given == "beam=6,lenpen=1.2,max_len_a=2.0,early_stopping=False"


def test_without_search_options_the_checkpoint_keeps_its_search_and_a_colon_stays_in_the_path(students):
    assert students.parse_system("s=student.pt").search == {}
    assert students.parse_system("s=C:/models/student.pt").path == Path("C:/models/student.pt")
    system = students.parse_system("s=C:/models/student.pt:beam=1")
    assert (system.path, system.search) == (Path("C:/models/student.pt"), {"beam": 1})


@pytest.mark.parametrize(("text", "said"), [
    ("student.pt", "give NAME=CHECKPOINT"),
    ("=student.pt", "give NAME=CHECKPOINT"),
    ("s=m.pt:bean=4", "did you mean 'beam'"),
    ("s=m.pt:beam=0", "beam must be at least 1, got 0"),
    ("s=m.pt:beam=2.5", "beam=2.5: should be a whole number"),
    ("s=m.pt:lenpen=high", "lenpen=high: should be a number"),
    ("s=m.pt:lenpen_type=linear", "use one of gnmt, power"),
    ("s=m.pt:early_stopping=maybe", "should be true or false"),
    ("s=m.pt:beam=4,beam=5", "beam given twice"),
    ("s=m.pt:beam=4,lenpen=", "give FIELD=VALUE"),
    ("s=m.pt:topk=5", "topk only applies with sampling"),
])
def test_a_bad_system_is_one_line_naming_what_to_fix(students, text, said):
    with pytest.raises(argparse.ArgumentTypeError) as e:
        students.parse_system(text)
    assert said in str(e.value)
    assert "\n" not in str(e.value) and "`" not in str(e.value)


def test_the_search_becomes_the_flags_of_nmt_serve(students):
    search = students.parse_system("s=m.pt:beam=6,lenpen_type=power,early_stopping=false").search
    assert students.serve_flags(search) == ["--beam", "6", "--lenpen-type", "power", "--no-early-stopping"]
    sampled = students.parse_system("s=m.pt:sampling=on,topk=5").search
    assert students.serve_flags(sampled) == ["--sampling", "--topk", "5"]
    assert students.serve_flags({}) == []


def test_a_repeated_name_or_a_missing_checkpoint_is_refused(students, tmp_path):
    ckpt = tmp_path / "m.pt"
    ckpt.write_bytes(b"")
    system = students.System("a", ckpt)
    assert students.check_systems([system, students.System("b", ckpt)]) is None
    assert "given twice" in students.check_systems([system, system])
    assert "no checkpoint file" in students.check_systems([students.System("c", tmp_path / "none.pt")])
