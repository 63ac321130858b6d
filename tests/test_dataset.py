"""Binarized data: round trips, .gz, chunking, filters and their report, errors, interruption."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from nmt.core.errors import BusyError, ConfigError, DataError, InputError
from nmt.data.dataset import (
    FilterConfig,
    ParallelDataset,
    SplitReport,
    data_identity,
    load_meta,
    prepare,
    read_tokenizer,
)
from nmt.text.bpe import BpeTokenizer, train_bpe

EN = ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "house", "big", "small", "red", "green", "quick", "slow"]
DE = ["der", "die", "katze", "hund", "sass", "lief", "auf", "unter", "matte", "haus", "gross", "klein", "rot", "gruen", "schnell", "langsam"]


def corpus(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """`n` parallel sentences of 3..10 words (word-for-word, so BPE lengths stay close)."""
    rng = random.Random(seed)
    en, de = [], []
    for _ in range(n):
        idx = [rng.randrange(len(EN)) for _ in range(rng.randint(3, 10))]
        en.append(" ".join(EN[k] for k in idx))
        de.append(" ".join(DE[k] for k in idx))
    return en, de


def write(prefix: Path, lang: str, lines: list[str], gz: bool = False) -> None:
    text = "".join(line + "\n" for line in lines)
    if gz:
        with gzip.open(f"{prefix}.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        Path(f"{prefix}.{lang}").write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> Path:
    """A word-level-ish joint BPE model: every vocabulary word becomes one token."""
    d = tmp_path_factory.mktemp("bpe")
    en, de = corpus(400, seed=99)
    write(d / "text", "en", en)
    write(d / "text", "de", de)
    train_bpe([d / "text.en", d / "text.de"], d / "bpe.model", vocab_size=200, threads=1)
    return d / "bpe.model"


@pytest.fixture
def data(tmp_path) -> Path:
    """train (40 pairs), valid (7 pairs) prefixes in tmp_path/raw."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for name, n, seed in (("train", 40, 1), ("valid", 7, 2)):
        en, de = corpus(n, seed)
        write(raw / name, "en", en)
        write(raw / name, "de", de)
    return raw


def store_bytes(d: Path) -> dict[str, bytes]:
    """The store's files (and folders, as None), but the lock file, which holds its last user's pid."""
    return {p.name: p.read_bytes() if p.is_file() else None for p in sorted(d.iterdir()) if p.name != ".nmt.lock"}


def test_round_trip(bpe, data, tmp_path):
    out = tmp_path / "out"
    reports = prepare(bpe, out, "en", "de", data / "train", data / "valid",
                      filters=FilterConfig(min_len=1, max_ratio=100, dedup=False))
    tok = BpeTokenizer.from_file(bpe)
    for split in ("train", "valid"):
        en = (data / f"{split}.en").read_text().splitlines()
        de = (data / f"{split}.de").read_text().splitlines()
        ds = ParallelDataset(out, split)
        assert len(ds) == len(en) == reports[split].kept
        for i, (s, t) in enumerate(zip(tok.encode(en), tok.encode(de))):
            got_s, got_t = ds[i]
            assert got_s.tolist() == s and got_t.tolist() == t
        assert ds.src_lengths.tolist() == [len(s) for s in tok.encode(en)]
        assert ds.tgt_lengths.tolist() == [len(t) for t in tok.encode(de)]
        assert ds[-1][0].tolist() == tok.encode(en[-1:])[0]
        with pytest.raises(IndexError):
            ds[len(ds)]
    meta = load_meta(out)
    assert meta["format"] == "nmt-data" and meta["version"] == 1
    assert (meta["src"], meta["tgt"], meta["vocab_size"]) == ("en", "de", tok.vocab_size)
    assert meta["dtype"] == "uint16" and ParallelDataset(out, "train").tokens.dtype == np.uint16
    assert (out / "bpe.model").read_bytes() == bpe.read_bytes()
    assert json.loads((out / "report.json").read_text())["splits"]["train"] == asdict(reports["train"])
    assert sorted(p.name for p in out.iterdir()) == [
        ".nmt.lock", "bpe.model", "meta.json", "report.json", "train.bin", "train.idx", "valid.bin", "valid.idx"]


def test_gz_inputs_give_the_same_store(bpe, data, tmp_path):
    gz = tmp_path / "gz"
    gz.mkdir()
    for lang in ("en", "de"):
        write(gz / "train", lang, (data / f"train.{lang}").read_text().splitlines(), gz=True)
    prepare(bpe, tmp_path / "a", "en", "de", data / "train")
    prepare(bpe, tmp_path / "b", "en", "de", gz / "train")  # finds train.en.gz / train.de.gz
    a, b = store_bytes(tmp_path / "a"), store_bytes(tmp_path / "b")
    assert a["train.bin"] == b["train.bin"] and a["train.idx"] == b["train.idx"]
    assert a["report.json"] == b["report.json"]


@pytest.mark.parametrize("chunk_size", [1, 3, 6, 7])
def test_chunk_boundaries_do_not_matter(bpe, tmp_path, chunk_size):
    en, de = corpus(7, seed=5)
    en[5], de[5] = en[1], de[1]  # a duplicate across chunk boundaries
    write(tmp_path / "t", "en", en)
    write(tmp_path / "t", "de", de)
    prepare(bpe, tmp_path / "ref", "en", "de", tmp_path / "t", chunk_size=100)
    prepare(bpe, tmp_path / "chunked", "en", "de", tmp_path / "t", chunk_size=chunk_size)
    assert store_bytes(tmp_path / "chunked") == store_bytes(tmp_path / "ref")
    assert load_meta(tmp_path / "ref")["splits"]["train"]["report"]["duplicate"] == 1


def lengths_corpus() -> tuple[list[str], list[str]]:
    """Pairs whose BPE lengths are their word counts (every word is one token)."""
    w = lambda n, lang: " ".join((EN if lang == "en" else DE)[k % 8] for k in range(n))  # noqa: E731
    pairs = [
        (w(4, "en"), w(4, "de")),   # kept
        (w(5, "en"), w(6, "de")),   # kept
        ("", w(4, "de")),           # empty
        (w(4, "en"), "   "),        # empty (blank side)
        (w(2, "en"), w(4, "de")),   # too short (2 < 3)
        (w(12, "en"), w(11, "de")), # too long (> 10)
        (w(3, "en"), w(7, "de")),   # ratio 7/3 > 2
        (w(4, "en"), w(4, "de")),   # duplicate of the first
        (w(4, "en"), w(8, "de")),   # ratio exactly 2: kept
    ]
    return [p[0] for p in pairs], [p[1] for p in pairs]


@pytest.mark.parametrize(
    "filters, expect",
    [
        (FilterConfig(min_len=3, max_len=10, max_ratio=2.0, dedup=True),
         dict(read=9, kept=3, empty=2, too_short=1, too_long=1, ratio=1, duplicate=1)),
        (FilterConfig(min_len=3, max_len=10, max_ratio=2.0, dedup=False),
         dict(read=9, kept=4, empty=2, too_short=1, too_long=1, ratio=1, duplicate=0)),
        (FilterConfig(min_len=1, max_len=150, max_ratio=10.0, dedup=True),
         dict(read=9, kept=6, empty=2, too_short=0, too_long=0, ratio=0, duplicate=1)),
        (FilterConfig(min_len=5, max_len=12, max_ratio=1.5, dedup=True),
         dict(read=9, kept=2, empty=2, too_short=5, too_long=0, ratio=0, duplicate=0)),
    ],
)
def test_filter_report(bpe, tmp_path, filters, expect):
    tok = BpeTokenizer.from_file(bpe)
    en, de = lengths_corpus()
    assert [len(x) for x in tok.encode(en)] == [4, 5, 0, 4, 2, 12, 3, 4, 4]  # the premise
    write(tmp_path / "t", "en", en)
    write(tmp_path / "t", "de", de)
    report = prepare(bpe, tmp_path / "out", "en", "de", tmp_path / "t", filters=filters)["train"]
    assert asdict(report) == dict(expect, filtered=True)
    assert len(ParallelDataset(tmp_path / "out", "train")) == expect["kept"]
    meta = load_meta(tmp_path / "out")
    assert meta["filters"] == asdict(filters)
    assert meta["splits"]["train"]["report"] == asdict(report)


def test_valid_keeps_every_nonempty_pair(bpe, tmp_path, data):
    en, de = lengths_corpus()
    write(tmp_path / "v", "en", en)
    write(tmp_path / "v", "de", de)
    report = prepare(bpe, tmp_path / "out", "en", "de", data / "train", valid=tmp_path / "v",
                     test=tmp_path / "v")
    for split in ("valid", "test"):
        assert asdict(report[split]) == dict(read=9, kept=7, empty=2, too_short=0, too_long=0,
                                             ratio=0, duplicate=0, filtered=False)
        assert len(ParallelDataset(tmp_path / "out", split)) == 7


def test_mismatched_line_counts(bpe, tmp_path):
    en, de = corpus(8)
    write(tmp_path / "t", "en", en)
    write(tmp_path / "t", "de", de[:5])
    with pytest.raises(InputError, match=r"t\.en has 8 lines but .*t\.de has 5"):
        prepare(bpe, tmp_path / "out", "en", "de", tmp_path / "t")
    write(tmp_path / "u", "en", en[:3])
    write(tmp_path / "u", "de", de)
    with pytest.raises(InputError, match=r"u\.en has 3 lines but .*u\.de has 8"):
        prepare(bpe, tmp_path / "out", "en", "de", tmp_path / "u")
    assert not (tmp_path / "out" / "meta.json").exists()


def test_invalid_utf8(bpe, tmp_path):
    write(tmp_path / "t", "en", corpus(5)[0])
    Path(tmp_path / "t.de").write_bytes(b"gut\nschlecht \xff\n" + b"x\n" * 3)
    with pytest.raises(InputError, match="UTF-8"):
        prepare(bpe, tmp_path / "out", "en", "de", tmp_path / "t")


@pytest.mark.parametrize("text", ["", "\n\n\n"])
def test_empty_corpus(bpe, tmp_path, text):
    for lang in ("en", "de"):
        Path(tmp_path / f"t.{lang}").write_text(text)
    with pytest.raises(InputError, match="empty|blank"):
        prepare(bpe, tmp_path / "out", "en", "de", tmp_path / "t")


@pytest.mark.parametrize(
    "filters, option",
    [(FilterConfig(min_len=50), "`min_len`"), (FilterConfig(max_len=2, min_len=1), "`max_len`")],
)
def test_nothing_survives_filtering(bpe, data, tmp_path, filters, option):
    with pytest.raises(InputError, match=f"no training pair survived.*{option}"):
        prepare(bpe, tmp_path / "out", "en", "de", data / "train", filters=filters)


def test_the_filter_that_dropped_everything_is_named_by_its_field():
    """The library names the field (`-dedup`: its off side); the command line shows the option (--no-dedup)."""
    from nmt.config.flags import as_flags
    from nmt.data.binarize import SplitReport, _explain_nothing_kept

    line = _explain_nothing_kept("train", SplitReport(read=5, duplicate=4, too_long=1), FilterConfig())
    assert line == "train: no training pair survived the filters: 4 of 5 pairs duplicates; pass `-dedup`"
    assert as_flags(line).endswith("4 of 5 pairs duplicates; pass --no-dedup")
    line = _explain_nothing_kept("train", SplitReport(read=5, too_short=5), FilterConfig(min_len=3))
    assert as_flags(line).endswith("5 of 5 pairs shorter than --min-len 3 BPE tokens; lower --min-len")


def test_bad_options(bpe, data, tmp_path):
    with pytest.raises(ConfigError):
        prepare(bpe, tmp_path / "out", "en", "en", data / "train")
    with pytest.raises(ConfigError, match="`max_len`"):
        prepare(bpe, tmp_path / "out", "en", "de", data / "train", filters=FilterConfig(min_len=9, max_len=5))
    with pytest.raises(InputError, match="no such file"):
        prepare(bpe, tmp_path / "out", "en", "de", data / "nothing")
    with pytest.raises(InputError, match="BPE model"):
        prepare(tmp_path / "none.model", tmp_path / "out", "en", "de", data / "train")


def test_interrupted_prepare_restarts_cleanly(bpe, data, tmp_path):
    out = tmp_path / "out"
    prepare(bpe, out, "en", "de", data / "train", data / "valid")  # an earlier, finished store
    calls = []

    def crash(p):
        calls.append(p)
        if len(calls) == 3:
            raise KeyboardInterrupt

    before = store_bytes(out)
    with pytest.raises(KeyboardInterrupt):
        prepare(bpe, out, "en", "de", data / "train", data / "valid", chunk_size=10, progress=crash)
    assert store_bytes(out) == before  # the earlier store is kept whole, and still opens
    assert not list(out.glob("*.partial")) and not (out / ".staging").exists()
    assert len(ParallelDataset(out, "train")) > 0
    (out / ".staging").mkdir()  # as a killed process would leave
    (out / ".staging" / "train.bin.partial").write_bytes(b"stale")
    (out / ".meta.json.abcd.tmp").write_bytes(b"stale")
    reports = prepare(bpe, out, "en", "de", data / "train", data / "valid", chunk_size=10)
    assert len(ParallelDataset(out, "train")) == reports["train"].kept > 0
    assert len(ParallelDataset(out, "valid")) == 7
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [".nmt.lock"]


def test_a_failing_prepare_keeps_the_earlier_store(bpe, data, tmp_path):
    """The input error (here: files of different lengths, found at the end of the train split) comes
    after the old store would have been deleted by a prepare that wrote in place."""
    out = tmp_path / "out"
    prepare(bpe, out, "en", "de", data / "train", data / "valid")
    before = store_bytes(out)
    bad = tmp_path / "bad"
    write(bad, "en", (data / "train.en").read_text().splitlines())
    write(bad, "de", (data / "train.de").read_text().splitlines()[:-1])
    with pytest.raises(InputError, match="lines but"):
        prepare(bpe, out, "en", "de", bad, data / "valid")
    assert store_bytes(out) == before
    assert len(ParallelDataset(out, "train")) > 0


def test_a_second_prepare_on_the_folder_is_refused(bpe, data, tmp_path):
    from nmt.core.files import folder_lock

    out = tmp_path / "out"
    # folder_lock as another process's would be held: flock locks belong to open files
    with folder_lock(out), pytest.raises(BusyError, match=rf"another nmt process \(pid {os.getpid()}\) is using {out}"):
        prepare(bpe, out, "en", "de", data / "train", data / "valid")


def corrupt_cases(out: Path) -> dict:
    idx = out / "train.idx"
    return {
        "magic": lambda: idx.write_bytes(b"XXXXXXXX" + idx.read_bytes()[8:]),
        "truncated idx": lambda: idx.write_bytes(idx.read_bytes()[:-5]),
        "short header": lambda: idx.write_bytes(idx.read_bytes()[:10]),
        "lengths": lambda: idx.write_bytes(idx.read_bytes()[:-4] + (10**6).to_bytes(4, "little")),
        "truncated bin": lambda: (out / "train.bin").write_bytes((out / "train.bin").read_bytes()[:-2]),
        "missing bin": lambda: (out / "train.bin").unlink(),
        "meta json": lambda: (out / "meta.json").write_text("{not json"),
        "meta version": lambda: (out / "meta.json").write_text(
            (out / "meta.json").read_text().replace('"version": 1', '"version": 99')),
        # These two opened fine before and failed mid-training with an IndexError (or read garbage):
        "id beyond vocab": lambda: patch_bytes(out / "train.bin", 2, (60000).to_bytes(2, "little")),
        "offset past end": lambda: patch_bytes(idx, 24 + 8, (10**9).to_bytes(8, "little")),  # src offset of pair 1
    }


def patch_bytes(path: Path, at: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[at : at + len(data)] = data
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("case", ["magic", "truncated idx", "short header", "lengths", "truncated bin",
                                  "missing bin", "meta json", "meta version", "id beyond vocab", "offset past end"])
def test_corrupt_store(bpe, data, tmp_path, case):
    out = tmp_path / "out"
    prepare(bpe, out, "en", "de", data / "train")
    ParallelDataset(out, "train")
    corrupt_cases(out)[case]()
    with pytest.raises(DataError, match="nmt prepare"):
        ParallelDataset(out, "train")


def test_missing_store_or_split(bpe, data, tmp_path):
    with pytest.raises(DataError, match="nmt prepare"):
        ParallelDataset(tmp_path / "nothing", "train")
    prepare(bpe, tmp_path / "out", "en", "de", data / "train")
    with pytest.raises(DataError, match="pass `valid` to `nmt prepare`"):
        ParallelDataset(tmp_path / "out", "valid")


def test_split_report_fields():
    assert list(asdict(SplitReport())) == ["read", "kept", "empty", "too_short", "too_long",
                                           "ratio", "duplicate", "filtered"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hash_set_matches_a_python_set(seed):
    from nmt.data.dedup import HashSet

    rng = np.random.default_rng(seed)
    hs, ref = HashSet(), set()
    for size in rng.integers(0, 50, 40):
        h = rng.integers(0, 200, size).astype(np.uint64)  # many repeats across and within adds
        assert hs.contains(h).tolist() == [int(x) in ref for x in h]
        hs.add(h)
        ref.update(int(x) for x in h)
    assert sum(len(r) for r in hs.runs) == len(ref) and len(hs.runs) <= 8


def test_dtype_follows_vocab_size():
    from nmt.data.binarize import DTYPES, dtype_code

    assert DTYPES[dtype_code(37000)] == np.uint16
    assert DTYPES[dtype_code(65535)] == np.uint16
    assert DTYPES[dtype_code(65536)] == np.uint32


# ---------------------------------------------------------------------------- the tokenizer of a store


@pytest.fixture(scope="module")
def spm(tmp_path_factory) -> Path:
    """A SentencePiece model of the same text as `bpe`."""
    from nmt.text.spm import train_sentencepiece

    d = tmp_path_factory.mktemp("spm")
    en, de = corpus(400, seed=99)
    write(d / "text", "en", en)
    write(d / "text", "de", de)
    train_sentencepiece([d / "text.en", d / "text.de"], d / "spm.model", vocab_size=60, threads=1)
    return d / "spm.model"


def test_sentencepiece_store(spm, data, tmp_path):
    from nmt.text.spm import SentencePieceTokenizer

    out = tmp_path / "out"
    prepare(spm, out, "en", "de", data / "train", data / "valid", filters=FilterConfig(min_len=1, max_ratio=100))
    tok = SentencePieceTokenizer.from_file(spm)
    en = (data / "valid.en").read_text().splitlines()
    de = (data / "valid.de").read_text().splitlines()
    ds = ParallelDataset(out, "valid")
    assert [ds[i][0].tolist() for i in range(len(ds))] == tok.encode(en, side="source")
    assert [ds[i][1].tolist() for i in range(len(ds))] == tok.encode(de, side="target")
    meta = load_meta(out)
    sha = hashlib.sha256(spm.read_bytes()).hexdigest()
    assert meta["tokenizer"] == {"kind": "sentencepiece", "files": {"source": "spm.model"}, "sha256": sha}
    assert "bpe_sha256" not in meta and meta["vocab_size"] == tok.vocab_size
    assert (out / "spm.model").read_bytes() == spm.read_bytes() and not (out / "bpe.model").exists()
    assert data_identity(out).to_dict() == {"src": "en", "tgt": "de", "vocab_size": tok.vocab_size,
                                  "tokenizer": "sentencepiece", "tokenizer_sha256": sha}
    assert read_tokenizer(out).to_data() == tok.to_data()


def test_youtokentome_store_keeps_its_identity(bpe, data, tmp_path):
    """Stores and checkpoints of youtokentome runs are recognised by "bpe_sha256", as before SentencePiece came."""
    prepare(bpe, tmp_path / "out", "en", "de", data / "train")
    meta = load_meta(tmp_path / "out")
    sha = hashlib.sha256(bpe.read_bytes()).hexdigest()
    assert meta["bpe_sha256"] == sha and meta["tokenizer"]["kind"] == "youtokentome"
    identity = data_identity(tmp_path / "out")
    assert identity.to_dict() == {"src": "en", "tgt": "de", "vocab_size": meta["vocab_size"], "bpe_sha256": sha}
    # A store written before SentencePiece (no tokenizer record) reads the same.
    del meta["tokenizer"]
    (tmp_path / "out" / "meta.json").write_text(json.dumps(meta))
    assert data_identity(tmp_path / "out") == identity
    assert read_tokenizer(tmp_path / "out").to_data() == BpeTokenizer.from_file(bpe).to_data()


def test_a_new_store_drops_the_files_of_the_old_tokenizer(bpe, spm, data, tmp_path):
    prepare(bpe, tmp_path / "out", "en", "de", data / "train")
    prepare(spm, tmp_path / "out", "en", "de", data / "train")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        ".nmt.lock", "meta.json", "report.json", "spm.model", "train.bin", "train.idx"]
    prepare(bpe, tmp_path / "out", "en", "de", data / "train")
    assert not (tmp_path / "out" / "spm.model").exists() and read_tokenizer(tmp_path / "out").kind == "youtokentome"


@pytest.mark.parametrize("damage", ["swapped", "missing", "record"])
def test_a_damaged_tokenizer_is_refused(spm, data, tmp_path, damage):
    out = tmp_path / "out"
    prepare(spm, out, "en", "de", data / "train")
    if damage == "swapped":
        (out / "spm.model").write_bytes((out / "spm.model").read_bytes() + b"\x00")
        match = "spm.model: not the tokenizer model the data was encoded with .*sha256.*nmt prepare"
    elif damage == "missing":
        (out / "spm.model").unlink()
        match = "incomplete or corrupt .*spm.model"
    else:
        meta = load_meta(out)
        meta["tokenizer"] = {"kind": "sentencepiece"}
        (out / "meta.json").write_text(json.dumps(meta))
        match = "tokenizer record is malformed"
    with pytest.raises(DataError, match=match):
        read_tokenizer(out)


# ---------------------------------------------------------------------------- streaming at scale


def test_encode_batches_do_not_matter(bpe, tmp_path, monkeypatch):
    en, de = corpus(23, seed=11)
    write(tmp_path / "t", "en", en)
    write(tmp_path / "t", "de", de)
    prepare(bpe, tmp_path / "ref", "en", "de", tmp_path / "t")
    monkeypatch.setattr("nmt.data.binarize._ENCODE_BATCH", 4)  # 23 lines: 5 yttm calls, the last one short
    monkeypatch.setattr("nmt.data.binarize._COPY_BUFFER", 16)  # the index side files joined in tiny pieces
    prepare(bpe, tmp_path / "small", "en", "de", tmp_path / "t", chunk_size=10)
    assert store_bytes(tmp_path / "small") == store_bytes(tmp_path / "ref")


def test_interleave_matches_a_python_loop():
    from nmt.data.binarize import interleave_pairs

    rng = np.random.default_rng(0)
    src_len = rng.integers(0, 6, 50).astype(np.int32)
    tgt_len = rng.integers(0, 6, 50).astype(np.int32)
    src = rng.integers(4, 60000, int(src_len.sum())).astype(np.uint16)
    tgt = rng.integers(4, 60000, int(tgt_len.sum())).astype(np.uint16)
    s_at, t_at = np.cumsum(src_len) - src_len, np.cumsum(tgt_len) - tgt_len
    keep = np.flatnonzero(rng.random(50) < 0.7)
    expect = [x for k in keep for x in [*src[s_at[k] : s_at[k] + src_len[k]], *tgt[t_at[k] : t_at[k] + tgt_len[k]]]]
    got = interleave_pairs(src, src_len, tgt, tgt_len, keep)
    assert got.dtype == np.uint16 and got.tolist() == [int(x) for x in expect]
    assert interleave_pairs(src, src_len, tgt, tgt_len, keep[:0]).tolist() == []


def test_dedup_keeps_the_first_copy_within_and_across_chunks(bpe, tmp_path):
    en, de = corpus(12, seed=3)
    en[4], de[4] = en[2], de[2]  # same chunk as its first copy (chunks of 5)
    en[9], de[9] = en[2], de[2]  # a later chunk
    en[7], de[7] = en[6], de[6] + " "  # a different pair (target differs): kept
    write(tmp_path / "t", "en", en)
    write(tmp_path / "t", "de", de)
    out = tmp_path / "out"
    report = prepare(bpe, out, "en", "de", tmp_path / "t", chunk_size=5,
                     filters=FilterConfig(min_len=1, max_ratio=100))["train"]
    assert (report.read, report.kept, report.duplicate) == (12, 10, 2)
    tok, ds = BpeTokenizer.from_file(bpe), ParallelDataset(out, "train")
    survivors = [i for i in range(12) if i not in (4, 9)]  # in corpus order: the first copy is kept
    assert [ds[k][0].tolist() for k in range(len(ds))] == tok.encode([en[i] for i in survivors])


def test_index_arrays_are_compact_numpy_views(bpe, data, tmp_path):
    out = tmp_path / "out"
    prepare(bpe, out, "en", "de", data / "train")
    ds = ParallelDataset(out, "train")
    for name, dtype in (("src_offsets", "<i8"), ("tgt_offsets", "<i8"), ("src_lengths", "<i4"),
                        ("tgt_lengths", "<i4"), ("tokens", "<u2")):
        a = getattr(ds, name)
        assert isinstance(a, np.ndarray) and a.dtype == np.dtype(dtype), name
        # A view of the memory-mapped file, not a copy (let alone a list of Python ints).
        assert isinstance(a, np.memmap) and not a.flags.owndata and type(a.base).__name__ in ("memmap", "mmap"), name
    # The index takes 24 bytes per pair on disk, and that is all it takes in memory: views.
    assert (out / "train.idx").stat().st_size == 24 + 24 * len(ds)


def test_index_writer_keeps_nothing_per_pair_in_memory(tmp_path):
    from nmt.data.binarize import IDX_HEADER, _IndexWriter

    rng = np.random.default_rng(1)
    src_len = rng.integers(0, 50, 1000).astype(np.int32)
    tgt_len = rng.integers(0, 50, 1000).astype(np.int32)
    w = _IndexWriter(tmp_path, "train", 1)
    for a in range(0, 1000, 300):  # not a multiple of the chunk size
        w.append(src_len[a : a + 300], tgt_len[a : a + 300])
        for k, v in vars(w).items():  # counters, paths and the four open side files; no arrays
            assert not isinstance(v, np.ndarray) and (not isinstance(v, list) or len(v) == 4), k
    w.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.idx.partial"]  # side files removed
    raw = (tmp_path / "train.idx.partial").read_bytes()
    assert IDX_HEADER.unpack(raw[:24])[1:] == (1, 1, 1000)
    body = np.frombuffer(raw[24:], np.uint8)
    total = src_len.astype(np.int64) + tgt_len
    src_off = np.cumsum(total) - total
    assert body[:8000].view("<i8").tolist() == src_off.tolist()
    assert body[8000:16000].view("<i8").tolist() == (src_off + src_len).tolist()
    assert body[16000:20000].view("<i4").tolist() == src_len.tolist()
    assert body[20000:].view("<i4").tolist() == tgt_len.tolist()
    assert (w.src_tokens, w.tgt_tokens) == (int(src_len.sum()), int(tgt_len.sum()))


@pytest.mark.parametrize("dedup, bytes_per_pair", [(False, 4.0), (True, 20.0)])
def test_prepare_memory_does_not_grow_with_the_corpus(bpe, tmp_path, monkeypatch, dedup, bytes_per_pair):
    """Peak Python+numpy memory grows by ~1 byte per pair (chunks differ a little), or ~17 with
    dedup (8 held + 8 while hash runs merge), not by the ~30 of an index kept in memory."""
    import gc
    import tracemalloc

    monkeypatch.setattr("nmt.data.binarize._COPY_BUFFER", 4096)
    filters = FilterConfig(min_len=1, max_ratio=100, dedup=dedup)
    peaks = {}
    for n in (2000, 16000):
        en, de = corpus(n, seed=n)
        write(tmp_path / f"c{n}", "en", en)
        write(tmp_path / f"c{n}", "de", de)
        gc.collect()
        tracemalloc.start()
        try:
            prepare(bpe, tmp_path / f"out{n}", "en", "de", tmp_path / f"c{n}", chunk_size=1000, filters=filters)
            peaks[n] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    growth = (peaks[16000] - peaks[2000]) / 14000
    assert growth < bytes_per_pair, f"{growth:.1f} bytes per pair"


def test_hash_set_memory_and_runs_scale():
    from nmt.data.dedup import HashSet

    rng = np.random.default_rng(5)
    hs, n = HashSet(), 0
    for _ in range(100):
        h = rng.integers(0, 2**64, 10_000, dtype=np.uint64)
        hs.add(h)
        n += 10_000
        assert len(hs.runs) <= np.log2(n / 10_000) + 1  # O(log n) runs to search
    assert len(hs) == n and hs.nbytes == 8 * n  # 8 bytes per hash
    assert all(bool((np.diff(r.astype(np.float64)) > 0).all()) for r in hs.runs)  # sorted, distinct
    assert hs.contains(h).all() and not hs.contains(rng.integers(0, 2**64, 1000, dtype=np.uint64)).any()


@pytest.mark.parametrize("seed", [0, 1])
def test_hash_set_with_capped_runs_matches_a_python_set(seed, monkeypatch):
    from nmt.data.dedup import HashSet

    monkeypatch.setattr(HashSet, "max_run", 64)
    rng = np.random.default_rng(seed)
    hs, ref = HashSet(), set()
    for size in rng.integers(0, 40, 60):
        h = rng.integers(0, 1000, size).astype(np.uint64)
        assert hs.contains(h).tolist() == [int(x) in ref for x in h]
        hs.add(h)
        ref.update(int(x) for x in h)
    assert len(hs) == len(ref) and max(len(r) for r in hs.runs) <= 64


@pytest.mark.parametrize("watch", ["train.bin.partial", "valid.bin.partial"])
def test_prepare_killed_mid_way_reruns_to_the_clean_result(bpe, tmp_path, watch):
    """SIGKILL `nmt prepare` while it writes train (or valid: train's files are then complete
    but not yet renamed); the store must not open, and a rerun must equal a clean run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    en, de = corpus(40_000, seed=7)
    write(tmp_path / "t", "en", en)
    write(tmp_path / "t", "de", de)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "nmt", "prepare", "--bpe", str(bpe), "--train", str(tmp_path / "t"),
           "--valid", str(tmp_path / "t"), "--src", "en", "--tgt", "de", "--out", str(out),
           "--chunk-size", "500", "--threads", "1"]
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root)
    try:
        deadline = time.monotonic() + 120
        staging = out / ".staging"
        while not ((staging / watch).exists() and (staging / watch).stat().st_size > 0):
            assert proc.poll() is None, "prepare ended before it could be killed; use a larger corpus"
            assert time.monotonic() < deadline
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "meta.json").exists()  # killed before it finished
    assert (staging / watch).exists() and (staging / "train.idx.src_off.partial").exists() != (watch == "valid.bin.partial")
    with pytest.raises(DataError, match="incomplete or corrupt"):
        ParallelDataset(out, "train")

    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=root)
    assert rerun.returncode == 0, rerun.stderr
    clean = tmp_path / "clean"
    reports = prepare(bpe, clean, "en", "de", tmp_path / "t", tmp_path / "t", chunk_size=500, threads=1)
    assert store_bytes(out) == store_bytes(clean)
    assert json.loads(rerun.stdout) == {name: asdict(r) for name, r in reports.items()}
    assert len(ParallelDataset(out, "train")) == reports["train"].kept


def test_a_full_disk_names_the_store_and_leaves_an_earlier_one(bpe, data, tmp_path, monkeypatch):
    """A write that names no file (numpy's, a full disk) is said naming `out`; the store written before is kept."""
    import errno

    import nmt.data.dataset as dataset
    from nmt.core.errors import OutputError

    out = tmp_path / "out"
    prepare(bpe, out, "en", "de", data / "train", filters=FilterConfig(min_len=1, max_ratio=100, dedup=False))
    before = load_meta(out)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dataset, "_write_store", full)
    with pytest.raises(OutputError) as e:
        prepare(bpe, out, "en", "de", data / "train")
    assert str(e.value) == (f"`out` {out}: cannot write (No space left on device); free disk space or choose "
                            "another location")
    assert load_meta(out) == before and not (out / dataset._STAGING).exists()
