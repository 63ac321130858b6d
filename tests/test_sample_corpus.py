"""The sample corpus that ships in nmt/sample_data (what `nmt demo` trains on): data, whose properties
the demo and the tests rely on (its generator is in the project's history, see its README)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "nmt" / "sample_data"
SIZES = {"train": 12000, "valid": 500, "test": 500}
WORD = re.compile(r"[A-Za-zÄÖÜäöüß]+(?:-[A-Za-z]+)?")
FILES = [f"{split}.{lang}" for split in SIZES for lang in ("en", "de")]


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").split("\n")[:-1]


def _pairs(split: str) -> list[tuple[str, str]]:
    return list(zip(_lines(f"{split}.en"), _lines(f"{split}.de")))


# ---------------------------------------------------------------- shipped files


@pytest.mark.parametrize("split", SIZES)
def test_split_sizes_and_alignment(split):
    en, de = _lines(f"{split}.en"), _lines(f"{split}.de")
    assert len(en) == len(de) == SIZES[split]


@pytest.mark.parametrize("name", FILES)
def test_no_empty_or_untidy_lines(name):
    raw = (DATA / name).read_bytes()
    assert raw.endswith(b"\n") and b"\r" not in raw
    for i, line in enumerate(_lines(name), 1):
        assert line.strip(), f"{name}:{i} is empty"
        assert line == line.strip() and "  " not in line, f"{name}:{i} has stray spaces"
        assert line[0].isupper(), f"{name}:{i} does not start with a capital"
        assert line[-1] in ".?", f"{name}:{i} has no final punctuation"


def test_no_duplicates_or_overlap_between_splits():
    seen: dict[str, str] = {}
    for split in SIZES:
        pairs = _pairs(split)
        assert len(set(pairs)) == len(pairs), f"duplicate pair in {split}"
        for en, de in pairs:
            for sent in (en, de):
                assert sent not in seen, f"{sent!r} in both {seen[sent]} and {split}"
                seen[sent] = split
    train = set(_pairs("train"))
    assert not train & set(_pairs("test"))
    assert not train & set(_pairs("valid"))


def test_corpus_is_small_with_a_small_vocabulary():
    assert sum((DATA / n).stat().st_size for n in FILES) < 2 * 1024 * 1024
    words = set()
    for en, _ in _pairs("train"):
        found = WORD.findall(en)
        words.update(w.lower() for w in found)
        assert 4 <= len(found) <= 20  # the generator's sentence lengths
    assert 150 <= len(words) <= 320


def test_readme_present():
    text = (DATA / "README.md").read_text(encoding="utf-8")
    assert "make_sample_corpus.py" in text and "MIT" in text
