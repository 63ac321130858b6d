"""Monolingual datasets (`nmt download multi30k-mono`): each language's lines, deduplicated, without held-out sentences.

No network: hand-made captions go through the local HTTP server of test_download, with the expected output of
each written out by hand; several `--mirror`s are tried in order. The real Multi30k task 2 files, where a copy
of them lies beside the repository, go through two local mirror folders (task 2's and task 1's), by the command.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import pytest
from test_cli import assert_user_error, nmt, ok
from test_download import FAST, SHARED_M30K, events, messages, serve, server  # noqa: F401  (server: the fixture)

from nmt import download as dl
from nmt.core.errors import BusyError, DownloadError, InputError
from nmt.core.files import folder_lock
from nmt.download import DatasetSpec, Source, Split, check_spec
from nmt.download.datasets import multi30k
from nmt.download.spec import Holdout, Mono, remote_file, swapped

SHARED_TASK2 = SHARED_M30K.parent / "multi30k-task2"
needs_copies = pytest.mark.skipif(not (SHARED_M30K.is_dir() and SHARED_TASK2.is_dir()),
                                  reason=f"{SHARED_M30K} or {SHARED_TASK2} not present")
DEAD = "http://127.0.0.1:9/upstream/"  # the specs' own URLs: every test gives a mirror

# Hand-made captions: two caption files a language (8 lines a side), two held-out splits and an extra one.
LINES = {
    "c1.en.gz": ["A dog runs.", "A man is sleeping.", "   ", "A dog runs."],
    "c2.en.gz": ["A cat sleeps.", "A dog runs.", "Ein Hund rennt.", "A man is sleeping."],
    "c1.de.gz": ["Ein Hund rennt.", "ein hund rennt.", "Ein Hund rennt. ", ""],
    "c2.de.gz": ["Eine Katze schläft.", "Ein Mann schläft.", "Eine Katze schläft.", "A dog runs."],
    "val.en.gz": ["A man is sleeping.", "Two girls play."],
    "val.de.gz": ["Ein Hund rennt.", "Zwei Mädchen spielen."],
    "test.en.gz": ["A boy jumps.", "A woman laughs."],
    "test.de.gz": ["Ein Mann schläft.", "Ein Junge springt."],
    "t17.en.gz": ["A cat sleeps."],
    "t17.de.gz": ["Eine Frau lacht."],
}
# What each file keeps, by hand: first occurrences in order; the blank lines, the held-out sentences of its own
# language (a German held-out sentence stays in English text, and the reverse) and the repeats are dropped;
# lines are compared exactly (a different case or a trailing space is another line).
KEPT = {
    "mono.en": ["A dog runs.", "A cat sleeps.", "Ein Hund rennt."],
    "mono.de": ["ein hund rennt.", "Ein Hund rennt. ", "Eine Katze schläft.", "A dog runs."],
}
COUNTS = {
    "mono.en": {"read": 8, "empty": 1, "held_out": 2, "duplicates": 2, "kept": 3},
    "mono.de": {"read": 8, "empty": 1, "held_out": 2, "duplicates": 1, "kept": 4},
}
# With the extra test set held out too: "A cat sleeps." goes; no German line is in t17.de.
KEPT_EXTRA = {**KEPT, "mono.en": ["A dog runs.", "Ein Hund rennt."]}
COUNTS_EXTRA = {**COUNTS, "mono.en": {"read": 8, "empty": 1, "held_out": 3, "duplicates": 2, "kept": 2}}


def gz(lines: list[str]) -> bytes:
    return gzip.compress("".join(line + "\n" for line in lines).encode("utf-8"), mtime=0)


def made_files() -> dict[str, bytes]:
    return {name: gz(lines) for name, lines in LINES.items()}


def mono_spec(files: dict[str, bytes] | None = None, read: int = 8, valid: int = 2) -> DatasetSpec:
    """A monolingual spec over LINES, verified by the checksums of `files` (none: unverified)."""
    sums = {n: (hashlib.sha256(d).hexdigest(), len(d)) for n, d in files.items()} if files else {}

    def side(*names: str) -> tuple[Source, ...]:
        return tuple(Source(remote_file(DEAD, name, sums, limit=10**6)) for name in names)

    held = (Split("valid", side("val.en.gz"), side("val.de.gz"), lines=valid),
            Split("test", side("test.en.gz"), side("test.de.gz"), lines=2),
            Split("test2017", side("t17.en.gz"), side("t17.de.gz"), lines=1, extra=True))
    mono = Split("mono", side("c1.en.gz", "c2.en.gz"), side("c1.de.gz", "c2.de.gz"), lines=read, mono=Mono(held))
    return DatasetSpec("mono-test", "en", "de", "captions", "test", splits=(mono,))


def text_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def manifest_of(out: Path) -> dict:
    return json.loads((out / "MANIFEST.json").read_text(encoding="utf-8"))


# --- the registry ----------------------------------------------------------------------------


def test_multi30k_mono_is_task_2_in_both_languages_held_out_by_task_1():
    spec = dl.resolve("multi30k-mono")
    assert (spec.name, spec.group, spec.src, spec.tgt, spec.monolingual) == ("multi30k-mono", "multi30k-mono", "en",
                                                                            "de", True)
    (split,) = spec.splits
    assert spec.outputs(split) == ("mono.en", "mono.de") and split.lines == 5 * 29000
    for lang, side in (("en", split.src), ("de", split.tgt)):
        assert [s.file.url for s in side] == [f"{multi30k.TASK2}train.{i}.{lang}.gz" for i in range(1, 6)]
        assert all(multi30k.TASK2_SUMS[s.file.name] == (s.file.sha256, s.file.size) for s in side)
    # the held-out sets are task 1's en-de splits, with their files and checksums: the same declarations
    task1 = {s.name: s for s in dl.resolve("multi30k").splits}
    assert split.mono is not None and split.mono.held == tuple(s for n, s in task1.items() if n != "train")
    standard = spec.selected(extra_tests=False)[0].mono
    assert standard is not None and [h.name for h in standard.held] == ["valid", "test"]
    assert {f.name for f in spec.files(spec.selected(False))} == {
        *multi30k.TASK2_SUMS, "val.en.gz", "val.de.gz", "test_2016_flickr.en.gz", "test_2016_flickr.de.gz"}
    assert len(spec.files(spec.selected(True))) == 10 + 10  # and the three extra test sets a language
    info = {i.name: i for i in dl.list_datasets()}["multi30k-mono"]
    assert info.langs == "en, de" and info.monolingual and info.download_bytes == sum(
        f.size for f in spec.files(spec.selected(False)))
    assert "Lines: mono 145,000 a language, before deduplication" in dl.describe(info)[4]


@needs_copies
def test_the_recorded_checksums_are_those_of_the_local_copy():
    found = {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_size) for p in SHARED_TASK2.glob("*.gz")}
    assert found == multi30k.TASK2_SUMS


def test_a_monolingual_split_is_checked_and_swapped_with_its_held_out_sides():
    spec = mono_spec()
    turned = swapped(spec, "turned").splits[0]
    assert turned.mono is not None and turned.mono.held[0].src == spec.splits[0].mono.held[0].tgt
    assert turned.src == spec.splits[0].tgt
    both = Split("train", spec.splits[0].src, spec.splits[0].tgt, holdout=Holdout(), mono=Mono())
    with pytest.raises(ValueError, match="monolingual or held out by position, not both"):
        check_spec(DatasetSpec("x", "en", "de", "x", "x", splits=(both,)))


# --- dedup and held-out sentences, over HTTP -------------------------------------------------


def test_each_language_is_deduplicated_without_held_out_sentences(server, tmp_path):  # noqa: F811
    files = made_files()
    base = serve(server, files)
    log, progress = events()
    result = dl.download(mono_spec(files), tmp_path, mirror=base, progress=progress, **FAST)
    assert {name: text_of(tmp_path / name) for name in KEPT} == KEPT
    assert result.counts == COUNTS and set(result.written) == {"mono.en", "mono.de"}
    assert sorted(result.fetched) == sorted(n for n in files if not n.startswith("t17"))  # no extra test set
    manifest = manifest_of(tmp_path)
    assert manifest["splits"]["mono"] == {
        "src": "mono.en", "tgt": "mono.de", "monolingual": True, "lines": {"mono.en": 3, "mono.de": 4},
        "expected_read": 8, "held_out": ["valid", "test"], "counts": COUNTS}
    record = manifest["files"]["mono.de"]
    data = (tmp_path / "mono.de").read_bytes()
    assert (record["sha256"], record["bytes"], record["lines"]) == (hashlib.sha256(data).hexdigest(), len(data), 4)
    assert record["held_out_from"] == [DEAD + "val.de.gz", DEAD + "test.de.gz"]
    assert record["counts"] == COUNTS["mono.de"] and record["from"] == [DEAD + "c1.de.gz", DEAD + "c2.de.gz"]
    assert f"wrote {tmp_path / 'mono.en'} (3 lines of 8 read; dropped 2 duplicates, 2 held-out, 1 empty)" in \
        messages(log)
    assert dl.verify_outputs(tmp_path) == (["mono.de", "mono.en"], [])


def test_extra_tests_hold_out_the_extra_test_sets_and_a_rerun_follows_the_choice(server, tmp_path):  # noqa: F811
    files = made_files()
    base = serve(server, files)
    spec = mono_spec(files)
    dl.download(spec, tmp_path, mirror=base, **FAST)
    before = server.count()
    again = dl.download(spec, tmp_path, mirror=base, **FAST)
    assert again.up_to_date and again.counts == COUNTS and server.count() == before  # counts from the manifest
    extra = dl.download(spec, tmp_path, mirror=base, extra_tests=True, **FAST)  # written without t17: rewritten
    assert sorted(extra.fetched) == ["t17.de.gz", "t17.en.gz"] and extra.counts == COUNTS_EXTRA
    assert {name: text_of(tmp_path / name) for name in KEPT} == KEPT_EXTRA
    assert manifest_of(tmp_path)["splits"]["mono"]["held_out"] == ["valid", "test", "test2017"]
    before = server.count()
    back = dl.download(spec, tmp_path, mirror=base, **FAST)  # and back, from the cache
    assert back.fetched == [] and back.counts == COUNTS and server.count() == before
    assert {name: text_of(tmp_path / name) for name in KEPT} == KEPT


def test_a_changed_output_is_reported_by_verify_and_rewritten(server, tmp_path):  # noqa: F811
    files = made_files()
    base = serve(server, files)
    dl.download(mono_spec(files), tmp_path, mirror=base, **FAST)
    (tmp_path / "mono.en").write_text("A dog runs.\n", encoding="utf-8")
    good, problems = dl.verify_outputs(tmp_path)
    size = len("".join(line + "\n" for line in KEPT["mono.en"]).encode("utf-8"))
    assert good == ["mono.de"] and problems == [f"{tmp_path / 'mono.en'}: 12 bytes, the manifest says {size}"]
    result = dl.download(mono_spec(files), tmp_path, mirror=base, **FAST)
    assert result.reused and not result.fetched and text_of(tmp_path / "mono.en") == KEPT["mono.en"]
    assert dl.verify_outputs(tmp_path)[1] == []


# --- what can go wrong: one line each, nothing half written ----------------------------------


@pytest.mark.parametrize("spec_args, words", [
    ({"read": 9}, "mono: the sources of mono.en have 8 lines, expected 9; the downloaded files are not the expected"),
    ({"valid": 3}, "held-out valid: val.en.gz has 2 lines, expected 3; the downloaded files are not the expected"),
])
def test_wrong_line_counts_write_nothing(server, tmp_path, spec_args, words):  # noqa: F811
    files = made_files()
    with pytest.raises(DownloadError, match=re.escape(words)) as e:
        dl.download(mono_spec(files, **spec_args), tmp_path, mirror=serve(server, files), **FAST)
    assert "\n" not in str(e.value) and not (tmp_path / "mono.en").exists() and not (tmp_path / "mono.de").exists()


def test_one_side_too_long_leaves_neither_file(server, tmp_path):  # noqa: F811
    files = {**made_files(), "c2.de.gz": gz([*LINES["c2.de.gz"], "Noch eine Zeile."])}
    with pytest.raises(DownloadError, match="the sources of mono.de have 9 lines, expected 8"):
        dl.download(mono_spec(files), tmp_path, mirror=serve(server, files), **FAST)
    assert not (tmp_path / "mono.en").exists() and not (tmp_path / "mono.de").exists()  # mono.en was complete


def test_a_damaged_file_is_one_line(server, tmp_path):  # noqa: F811
    files = made_files()
    damaged = {**files, "c1.de.gz": files["c1.de.gz"][:-9]}  # cut short: no longer the file the checksum names
    base = serve(server, damaged)
    with pytest.raises(DownloadError, match=re.escape(f"{base}c1.de.gz: checksum mismatch for c1.de.gz")):
        dl.download(mono_spec(files), tmp_path / "a", mirror=base, **FAST)
    with pytest.raises(DownloadError, match=r"c1\.de\.gz: cannot read .*is the file complete\? \(from "):
        dl.download(mono_spec(), tmp_path / "b", mirror=base, **FAST)  # no checksum: the reading finds it


def test_a_second_process_on_the_folder_is_refused(server, tmp_path):  # noqa: F811
    files = made_files()
    with folder_lock(tmp_path / "out"), pytest.raises(BusyError, match="another nmt process"):
        dl.download(mono_spec(files), tmp_path / "out", mirror=serve(server, files), **FAST)
    assert server.count() == 0


# --- several mirrors -------------------------------------------------------------------------


def test_several_mirrors_are_tried_in_order(server, tmp_path):  # noqa: F811
    files = made_files()
    captions = {n: d for n, d in files.items() if n.startswith("c")}
    first = serve(server, captions, "/task2/")
    second = serve(server, {n: d for n, d in files.items() if n not in captions}, "/task1/")
    result = dl.download(mono_spec(files), tmp_path, mirror=[first, second], **FAST)
    assert result.counts == COUNTS
    assert server.count("/task2/val.en.gz") == 1 and server.count("/task1/val.en.gz") == 1  # 404, then found
    assert server.count("/task1/c1.en.gz") == 0  # found in the first
    manifest = manifest_of(tmp_path)
    assert manifest["mirror"] == [first, second]
    assert manifest["sources"]["val.en.gz"]["fetched_from"] == second + "val.en.gz"


def test_a_folder_and_a_url_and_a_file_in_neither(server, tmp_path):  # noqa: F811
    files = made_files()
    folder = tmp_path / "task2"
    folder.mkdir()
    for name, data in files.items():
        if name.startswith("c"):
            (folder / name).write_bytes(data)
    url = serve(server, {n: d for n, d in files.items() if not n.startswith(("c", "test.de"))})
    with pytest.raises(DownloadError) as e:
        dl.download(mono_spec(files), tmp_path / "out", mirror=[str(folder), url], **FAST)
    assert str(e.value) == (f"test.de.gz: not found in any `mirror` (looked for {folder / 'test.de.gz'}, "
                            f"{url}test.de.gz); one of them must hold the file under its upstream name")
    server.files["/data/test.de.gz"] = files["test.de.gz"]
    result = dl.download(mono_spec(files), tmp_path / "out", mirror=[str(folder), url], **FAST)
    assert result.counts == COUNTS and server.count("/data/c1.en.gz") == 0


def test_a_damaged_file_in_the_first_mirror_is_an_error_not_a_skip(server, tmp_path):  # noqa: F811
    files = made_files()
    first = serve(server, {**files, "val.de.gz": gz(["Something else."])}, "/bad/")
    second = serve(server, files, "/good/")
    with pytest.raises(DownloadError, match=re.escape(f"{first}val.de.gz: checksum mismatch")):
        dl.download(mono_spec(files), tmp_path, mirror=[first, second], **FAST)
    assert server.count("/good/val.de.gz") == 0


@pytest.mark.parametrize("where", ["second is malformed", "second is the output"])
def test_every_mirror_is_checked_before_anything_is_written(server, tmp_path, where):  # noqa: F811
    files = made_files()
    second = "http://[::1" if where == "second is malformed" else str(tmp_path / "out" / ".cache")
    Path(second).mkdir(parents=True, exist_ok=True) if "output" in where else None
    with pytest.raises(InputError, match=re.escape(f"`mirror` {second!r}: ")):
        dl.download(mono_spec(files), tmp_path / "out", mirror=[serve(server, files), second], **FAST)
    assert server.count() == 0 and not (tmp_path / "out" / "MANIFEST.json").exists()


# --- the real files, by the command ----------------------------------------------------------


DISTINCT = {"en": 144546, "de": 141634}  # distinct lines of the five files of each language, as upstream has them


def expected(lang: str) -> tuple[list[str], dict[str, int]]:
    """mono.LANG and its counts, computed here from the raw files another way: distinct lines in order of first
    occurrence (a dict), less task 1's val and test sentences of the language."""
    def lines(path: Path) -> list[str]:
        return gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")[:-1]

    read = [line for i in range(1, 6) for line in lines(SHARED_TASK2 / f"train.{i}.{lang}.gz")]
    held = {line for stem in ("val", "test_2016_flickr") for line in lines(SHARED_M30K / f"{stem}.{lang}.gz")}
    kept = list(dict.fromkeys(line for line in read if line.strip() and line not in held))
    counts = {"read": len(read), "empty": sum(not line.strip() for line in read),
              "held_out": sum(line in held for line in read), "kept": len(kept)}
    counts["duplicates"] = counts["read"] - counts["empty"] - counts["held_out"] - counts["kept"]
    assert len(set(read)) == DISTINCT[lang] and len(set(read) - held) == len(kept)
    return kept, counts


@needs_copies
def test_the_real_captions_from_two_mirror_folders(tmp_path):
    out = tmp_path / "mono"
    r = ok(nmt("download", "multi30k-mono", "--out", out, "--mirror", SHARED_TASK2, "--mirror", SHARED_M30K))
    assert "multi30k-mono: downloaded 14 file(s)" in r.stderr
    rows = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()}
    assert rows.pop("file") == ["read", "empty", "held", "out", "duplicates", "kept"]
    manifest = manifest_of(out)
    for lang in ("en", "de"):
        kept, counts = expected(lang)
        assert text_of(out / f"mono.{lang}") == kept
        assert manifest["files"][f"mono.{lang}"]["counts"] == counts and counts["read"] == 145000
        keys = ("read", "empty", "held_out", "duplicates", "kept")
        assert rows[f"mono.{lang}"] == [f"{counts[k]:,}" for k in keys]
    # a few short generic captions of task 1's val and test sets occur in task 2, in each language
    assert {lang: manifest["files"][f"mono.{lang}"]["counts"]["held_out"] > 0 for lang in ("en", "de")} == \
        {"en": True, "de": True}
    assert all(s["verified"] for s in manifest["sources"].values()) and len(manifest["sources"]) == 14
    assert dl.verify_outputs(out) == (["mono.de", "mono.en"], [])
    (out / "mono.de").write_bytes((out / "mono.de").read_bytes().replace(b"Ein", b"EIN", 1))
    r = nmt("download", "multi30k-mono", "--out", out, "--verify")
    assert r.returncode == 1 and r.stdout == f"{out / 'mono.de'}: sha256 differs from the manifest's (changed " \
                                             "since it was written)\n"


@needs_copies
def test_one_mirror_folder_lacking_the_held_out_files_names_the_first_missing(tmp_path):
    with pytest.raises(DownloadError) as e:
        dl.download("multi30k-mono", tmp_path, mirror=str(SHARED_TASK2))
    assert str(e.value) == (f"{SHARED_TASK2 / 'val.en.gz'}: not found in the `mirror` directory; it must hold the "
                            "dataset's files under their upstream names")


def test_wrong_values_are_one_line_before_anything_is_written(tmp_path):
    (tmp_path / "file").write_text("x\n")
    with pytest.raises(InputError, match="`out` .*: exists and is not a directory"):
        dl.download("multi30k-mono", tmp_path / "file", mirror=str(tmp_path))
    with pytest.raises(InputError, match="multi30k-mono has no de-en data; choose one of: en-de"):
        dl.download("multi30k-mono", tmp_path / "o", pair="de-en")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_command_line_errors_are_one_line(tmp_path):
    (tmp_path / "file").write_text("x\n")
    assert_user_error(nmt("download", "multi30k-mono", "--out", tmp_path / "o", "--mirror", tmp_path,
                          "--mirror", "https://example.org:99999/"), "--mirror 'https://example.org:99999/'",
                      "not a valid URL")
    assert_user_error(nmt("download", "multi30k-mono", "--out", tmp_path / "file" / "o", "--mirror", tmp_path),
                      str(tmp_path / "file"))
