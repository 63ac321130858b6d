"""Binarized parallel data: a streaming `prepare` that writes it, `ParallelDataset` that reads it.

`prepare` reads a parallel corpus in chunks, encodes it with the tokenizer (youtokentome's joint BPE,
or SentencePiece: see nmt/tokenizer.py), filters the
training split, and appends token ids to a flat binary file and offsets/lengths to index side
files, so memory does not grow with the corpus beyond the dedup hashes (8 bytes per kept
training pair).  Layout of the output directory:

    meta.json       written last, atomically: its presence marks a finished store
    report.json     per-split filter counts (what `nmt prepare` prints)
    bpe.model       a copy of the tokenizer's model, which training embeds in checkpoints (a SentencePiece
                    model: spm.model, or source.spm, target.spm and pieces.json; meta.json names them)
    {split}.bin     token ids, uint16 (vocab <= 65535) or uint32, for each pair src then tgt
    {split}.idx     IDX_MAGIC, version, dtype code, count, then int64 src/tgt offsets and
                    int32 src/tgt lengths (in tokens), one entry per pair

Ids are subword ids without specials; `nmt.batching.collate` adds EOS/BOS.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import os
import shutil
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np

from nmt.config import INT_MAX, FilterConfig, check_range
from nmt.errors import ConfigError, DataError, InputError
from nmt.files import atomic_write, check_output_dir, folder_lock, read_lines, resolve_prefixed
from nmt.identity import DataIdentity
from nmt.progress import Progress, ProgressFn, ignore
from nmt.tokenizer import (
    FILE_NAMES,
    YOUTOKENTOME,
    Tokenizer,
    digest,
    from_file,
    identity_of,
    load_tokenizer,
    read_files,
    save_files,
)

FORMAT = "nmt-data"
FORMAT_VERSION = 1
IDX_MAGIC = b"NMTIDX\x00\x00"
_IDX_HEADER = struct.Struct("<8sIIQ")  # magic, version, dtype code, count: 24 bytes, 8-aligned
_DTYPES: dict[int, np.dtype[np.unsignedinteger]] = {1: np.dtype("<u2"), 2: np.dtype("<u4")}
_PARTIAL = ".partial"  # suffix of files still being written; never read
_OWN_FILES = ("meta.json", "report.json", *FILE_NAMES)
_STAGING = ".staging"  # a store being written, inside the store's folder (same file system: renames swap it in)


@dataclass
class SplitReport:
    """What happened to each pair of a split; read == kept + every drop count.

    `filtered` is False for valid/test, which keep every non-empty pair.
    """

    read: int = 0
    kept: int = 0
    empty: int = 0
    too_short: int = 0
    too_long: int = 0
    ratio: int = 0
    duplicate: int = 0
    filtered: bool = True


def _dtype_code(vocab_size: int) -> int:
    return 1 if vocab_size <= 65535 else 2


# ---------------------------------------------------------------------------- reading text


def _split_paths(prefix: str | Path, src: str, tgt: str) -> tuple[Path, Path]:
    """`prefix.src` and `prefix.tgt`, each plain or compressed (.gz, .bz2, .xz)."""
    prefix = str(prefix)
    return resolve_prefixed(f"{prefix}.{src}"), resolve_prefixed(f"{prefix}.{tgt}")


def _read_pairs(src_path: Path, tgt_path: Path) -> Iterator[tuple[str, str]]:
    """Yield line pairs; InputError with both line counts when one file ends first."""
    end = object()
    n = 0
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    for s, t in itertools.zip_longest(src_lines, tgt_lines, fillvalue=end):
        if s is end or t is end:
            rest = sum(1 for _ in (tgt_lines if s is end else src_lines))
            n_src, n_tgt = (n, n + 1 + rest) if s is end else (n + 1 + rest, n)
            raise InputError(
                f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; parallel files "
                "must have one line per sentence pair"
            )
        n += 1
        yield s, t  # type: ignore[misc]


def _chunks(pairs: Iterator[tuple[str, str]], size: int) -> Iterator[tuple[list[str], list[str]]]:
    """Lists of up to `size` source and target lines."""
    while True:
        src: list[str] = []  # rebound first: the previous chunk is freed before the next is read
        tgt: list[str] = []
        for s, t in itertools.islice(pairs, size):
            src.append(s)
            tgt.append(t)
        if not src:
            return
        yield src, tgt


def _pair_hashes(src: list[str], tgt: list[str], which: np.ndarray) -> np.ndarray:
    """64-bit hash of raw pairs `which` (K,), (K,) uint64; lines hold no newline, so the key is unambiguous."""
    b2 = hashlib.blake2b
    return np.array(
        [int.from_bytes(b2(f"{src[i]}\n{tgt[i]}".encode(), digest_size=8).digest(), "little") for i in which.tolist()],
        dtype=np.uint64,
    )


def _sorted_unique(h: np.ndarray) -> np.ndarray:
    """Sorted distinct values of `h`.  np.unique is hash-based in numpy 2 and ~100x slower on uint64."""
    h = np.sort(h)
    if len(h) > 1:
        h = h[np.concatenate(([True], h[1:] != h[:-1]))]
    return h


class _HashSet:
    """A set of uint64 as sorted, disjoint numpy runs: 8 bytes per entry (a Python set takes ~70).

    Runs merge when one is no longer than the next (as in a log-structured merge tree), so
    there are O(log n) runs and each hash is moved O(log n) times; a merge is a concatenation
    and a stable sort, which numpy does in linear time for two sorted runs.  Runs stop merging
    at `max_run` entries, so a merge never needs more than ~2 * max_run * 8 bytes of scratch
    however large the set grows (45M hashes: 360 MB held, plus at most ~260 MB for a moment).
    """

    max_run = 1 << 24  # entries (128 MB); a run this large is left alone

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []

    def __len__(self) -> int:
        return sum(len(r) for r in self.runs)

    @property
    def nbytes(self) -> int:
        return sum(r.nbytes for r in self.runs)

    def _contains_sorted(self, h: np.ndarray) -> np.ndarray:
        """(N,) bool for sorted `h`: sorted queries make searchsorted cache-friendly (~7x faster)."""
        found = np.zeros(len(h), dtype=bool)
        for run in self.runs:
            pos = np.searchsorted(run, h)
            np.minimum(pos, len(run) - 1, out=pos)
            found |= run[pos] == h
        return found

    def contains(self, h: np.ndarray) -> np.ndarray:
        """(N,) bool: which of `h` (any order) are in the set."""
        h = np.asarray(h, dtype=np.uint64)
        order = np.argsort(h)
        found = np.empty(len(h), dtype=bool)
        found[order] = self._contains_sorted(h[order])
        return found

    def add(self, h: np.ndarray) -> None:
        """Add hashes (any order, duplicates allowed)."""
        run = _sorted_unique(np.asarray(h, dtype=np.uint64))
        self._add_run(run[~self._contains_sorted(run)])  # keep runs disjoint: each hash stored once

    def _add_run(self, run: np.ndarray) -> None:
        """Add a sorted run of distinct hashes, none of them in the set yet."""
        if len(run) == 0:
            return
        while self.runs and len(self.runs[-1]) <= len(run) and len(self.runs[-1]) + len(run) <= self.max_run:
            merged = np.concatenate((self.runs.pop(), run))
            del run
            merged.sort(kind="stable")  # timsort: two sorted runs merge in linear time
            run = merged
        self.runs.append(run)


# ---------------------------------------------------------------------------- filtering


def _filter(
    src_len: np.ndarray, tgt_len: np.ndarray, hashes: Callable[[np.ndarray], np.ndarray] | None,
    seen: _HashSet | None, f: FilterConfig | None, report: SplitReport,
) -> np.ndarray:
    """(N,) bool keep-mask for one chunk; counts each dropped pair under its first failing filter.

    `hashes(indices)` gives the pair hashes of the chunk positions `indices`; only pairs that
    pass the length filters are hashed.
    """
    empty = (src_len == 0) | (tgt_len == 0)
    report.read += len(src_len)
    report.empty += int(empty.sum())
    if f is None:  # valid/test: keep every non-empty pair intact
        keep = ~empty
        report.kept += int(keep.sum())
        return keep
    shorter, longer = np.minimum(src_len, tgt_len), np.maximum(src_len, tgt_len)
    too_short = ~empty & (shorter < f.min_len)
    too_long = ~empty & ~too_short & (longer > f.max_len)
    ratio = ~empty & ~too_short & ~too_long & (longer > f.max_ratio * np.maximum(shorter, 1))
    keep = ~(empty | too_short | too_long | ratio)
    if f.dedup:
        assert hashes is not None and seen is not None
        cand = np.flatnonzero(keep)
        h = hashes(cand)
        order = np.argsort(h, kind="stable")  # equal hashes stay in chunk order: the first one wins
        h = h[order]
        dup = seen._contains_sorted(h)  # kept in an earlier chunk
        dup[1:] |= h[1:] == h[:-1]  # repeats inside this chunk
        seen._add_run(h[~dup])  # sorted, distinct and new
        keep[cand[order[dup]]] = False
        report.duplicate += int(dup.sum())
    report.too_short += int(too_short.sum())
    report.too_long += int(too_long.sum())
    report.ratio += int(ratio.sum())
    report.kept += int(keep.sum())
    return keep


def _explain_nothing_kept(name: str, r: SplitReport, f: FilterConfig) -> str:
    """One line naming the filter that dropped most pairs and the option that relaxes it."""
    causes = {
        "empty": (r.empty, "one side is blank; check that the files are aligned text"),
        "too_short": (r.too_short, f"shorter than --min-len {f.min_len} BPE tokens; lower --min-len"),
        "too_long": (r.too_long, f"longer than --max-len {f.max_len} BPE tokens; raise --max-len"),
        "ratio": (r.ratio, f"length ratio above --max-ratio {f.max_ratio}; raise --max-ratio"),
        "duplicate": (r.duplicate, "duplicates; pass --no-dedup"),
    }
    _, (count, fix) = max(causes.items(), key=lambda kv: kv[1][0])
    return f"{name}: no training pair survived the filters: {count} of {r.read} pairs {fix}"


# ---------------------------------------------------------------------------- writing


# Lines encoded per youtokentome call.  yttm returns Python lists of Python ints (~36 bytes per
# id); converting each batch to a numpy array at once keeps that transient near 30 MB.
_ENCODE_BATCH = 16_384
_COPY_BUFFER = 1 << 20  # bytes read at a time when joining the index side files


def _encode(tokenizer: Tokenizer, lines: list[str], side: str, threads: int,
            dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Subword ids of `side`'s `lines`: flat (T,) `dtype` and (N,) int32 lengths."""
    flats, lengths = [], []
    for a in range(0, len(lines), _ENCODE_BATCH):
        ids = tokenizer.encode(lines[a : a + _ENCODE_BATCH], side=side, threads=threads)
        n = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
        flats.append(np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(n.sum(dtype=np.int64))))
        lengths.append(n)
        del ids
    if not lengths:
        return np.zeros(0, dtype), np.zeros(0, np.int32)
    return np.concatenate(flats), np.concatenate(lengths)


def pair_offsets(src_len: np.ndarray, tgt_len: np.ndarray, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Where each pair's source and its target begin in the flat ids of a store (each pair's source, then
    its target, back to back), the first pair at `start`: (N,) int64 each, from (N,) lengths."""
    total = src_len.astype(np.int64) + tgt_len
    src_off = np.cumsum(total) - total + start
    return src_off, src_off + src_len


def interleave_pairs(src: np.ndarray, src_len: np.ndarray, tgt: np.ndarray, tgt_len: np.ndarray,
                     keep: np.ndarray) -> np.ndarray:
    """Flat ids of pairs `keep` (K,), each pair's source then its target, as stored in `.bin`.

    `src`/`tgt` are the flat ids of a chunk and `src_len`/`tgt_len` (N,) their lengths.
    One vectorised gather: no Python loop over pairs or tokens.
    """
    itype = np.int64 if len(src) + len(tgt) >= 1 << 31 else np.int32  # halve the index scratch
    src_start = np.cumsum(src_len, dtype=np.int64) - src_len
    tgt_start = np.cumsum(tgt_len, dtype=np.int64) - tgt_len + len(src)  # into concat(src, tgt)
    seg_start = np.empty(2 * len(keep), np.int64)  # kept pair k: segments 2k (src), 2k+1 (tgt)
    seg_len = np.empty(2 * len(keep), np.int64)
    seg_start[0::2], seg_start[1::2] = src_start[keep], tgt_start[keep]
    seg_len[0::2], seg_len[1::2] = src_len[keep], tgt_len[keep]
    total = int(seg_len.sum())
    out_start = np.cumsum(seg_len) - seg_len
    # Token j of segment s comes from seg_start[s] + (j - out_start[s]).
    index = np.repeat((seg_start - out_start).astype(itype), seg_len)
    index += np.arange(total, dtype=itype)
    return np.concatenate((src, tgt))[index]


class _IndexWriter:
    """Streams one split's index to disk: each chunk's offsets and lengths are appended to four
    `.partial` side files, so no per-pair array stays in memory; `finish` writes the header
    and joins them into `{split}.idx.partial`."""

    _PARTS = (("src_off", "<i8"), ("tgt_off", "<i8"), ("src_len", "<i4"), ("tgt_len", "<i4"))

    def __init__(self, out: Path, name: str, code: int) -> None:
        self.path = out / f"{name}.idx{_PARTIAL}"
        self.code = code
        self.pairs = self.src_tokens = self.tgt_tokens = 0
        self._parts = [(out / f"{name}.idx.{part}{_PARTIAL}", dt) for part, dt in self._PARTS]
        self._files: list = []
        try:
            for path, _ in self._parts:
                self._files.append(open(path, "wb"))
        except BaseException:
            self.close()
            raise

    def append(self, src_len: np.ndarray, tgt_len: np.ndarray) -> None:
        """Index the next pairs, (K,) lengths each; their ids follow the earlier pairs' in `.bin`."""
        src_off, tgt_off = pair_offsets(src_len, tgt_len, self.src_tokens + self.tgt_tokens)
        for f, a, (_, dt) in zip(self._files, (src_off, tgt_off, src_len, tgt_len), self._parts):
            f.write(np.ascontiguousarray(a, dtype=dt).tobytes())
        self.pairs += len(src_len)
        self.src_tokens += int(src_len.sum(dtype=np.int64))
        self.tgt_tokens += int(tgt_len.sum(dtype=np.int64))

    def finish(self) -> None:
        """Write `{split}.idx.partial`: header, then the four arrays; remove the side files."""
        self.close()
        with open(self.path, "wb") as f:
            f.write(_IDX_HEADER.pack(IDX_MAGIC, FORMAT_VERSION, self.code, self.pairs))
            for path, _ in self._parts:
                with open(path, "rb") as part:
                    shutil.copyfileobj(part, f, _COPY_BUFFER)
            f.flush()
            os.fsync(f.fileno())
        for path, _ in self._parts:
            path.unlink()

    def close(self) -> None:
        for f in self._files:
            f.close()


def _binarize(
    tokenizer: Tokenizer, name: str, src_path: Path, tgt_path: Path, out: Path,
    f: FilterConfig | None, threads: int, chunk_size: int, progress: ProgressFn,
) -> tuple[SplitReport, dict]:
    """Stream one split into `out/{name}.bin.partial` and `.idx.partial`; return its report and meta.

    Memory is bounded by the chunk (its text, its ids as numpy arrays) plus the dedup hashes
    (8 bytes per kept training pair); the index goes to disk as it is made.
    """
    code = _dtype_code(tokenizer.vocab_size)
    dtype = _DTYPES[code]
    report = SplitReport(filtered=f is not None)
    seen = _HashSet() if f is not None and f.dedup else None
    task = f"prepare {name}"
    index = _IndexWriter(out, name, code)
    try:
        with open(out / f"{name}.bin{_PARTIAL}", "wb") as bin_file:
            for src, tgt in _chunks(_read_pairs(src_path, tgt_path), chunk_size):
                src_ids, s_len = _encode(tokenizer, src, "source", threads, dtype)
                tgt_ids, t_len = _encode(tokenizer, tgt, "target", threads, dtype)
                hashes = None if seen is None else functools.partial(_pair_hashes, src, tgt)
                keep = np.flatnonzero(_filter(s_len, t_len, hashes, seen, f, report))
                del src, tgt, hashes  # the text is no longer needed; free it before reading on
                bin_file.write(interleave_pairs(src_ids, s_len, tgt_ids, t_len, keep).tobytes())
                index.append(s_len[keep], t_len[keep])
                del src_ids, tgt_ids
                progress(Progress(task=task, done=report.read, unit="pairs", info={"kept": report.kept}))
            bin_file.flush()
            os.fsync(bin_file.fileno())
        if report.read == 0:
            raise InputError(f"{src_path} and {tgt_path} are empty; give a non-empty {name} corpus")
        if report.kept == 0:
            if f is None:
                raise InputError(f"{src_path}, {tgt_path}: every {name} pair has a blank side")
            raise InputError(_explain_nothing_kept(name, report, f))
        index.finish()
    finally:
        index.close()
    progress(Progress(task=task, done=report.read, total=report.read, unit="pairs",
                      message=f"{name}: kept {report.kept} of {report.read} pairs"))
    meta = {
        "pairs": report.kept,
        "tokens": index.src_tokens + index.tgt_tokens,
        "src_tokens": index.src_tokens,
        "tgt_tokens": index.tgt_tokens,
        "sources": [str(src_path), str(tgt_path)],
        "report": asdict(report),
    }
    return report, meta


def _remove_partials(out: Path) -> None:
    """Delete `.partial` files: split data that was being written when a run stopped."""
    for p in out.glob(f"*{_PARTIAL}"):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _remove_leftovers(out: Path) -> None:
    """Delete what crashed runs left in `out`: `.partial` files, a staging folder, atomic_write's
    `.{name}.XXXX.tmp` files. Called while holding the folder's lock, so no live process owns them."""
    _remove_partials(out)
    shutil.rmtree(out / _STAGING, ignore_errors=True)
    for p in out.glob(".*.tmp"):
        if any(p.name.startswith(f".{name}.") for name in _OWN_FILES):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


def _swap_in(staging: Path, out: Path) -> None:
    """Replace the store in `out` by the finished one in `staging`. meta.json goes first and comes back
    last, so a crash in between leaves a store that reads as unfinished, never a mix that reads as good."""
    with contextlib.suppress(FileNotFoundError):
        (out / "meta.json").unlink()
    for name in ("train", "valid", "test"):  # splits an earlier run wrote and this one may not
        for ext in ("bin", "idx"):
            with contextlib.suppress(FileNotFoundError):
                (out / f"{name}.{ext}").unlink()
    for name in FILE_NAMES:  # the files of another tokenizer
        with contextlib.suppress(FileNotFoundError):
            (out / name).unlink()
    for path in sorted(staging.iterdir(), key=lambda p: p.name == "meta.json"):
        os.replace(path, out / path.name)
    staging.rmdir()


def _write_store(staging: Path, tokenizer: Tokenizer, src: str, tgt: str, paths: dict[str, tuple[Path, Path]],
                 filters: FilterConfig, threads: int, chunk_size: int, progress: ProgressFn) -> dict[str, SplitReport]:
    """Binarize every split into `staging`, then the tokenizer's files, report.json and meta.json."""
    reports: dict[str, SplitReport] = {}
    split_meta: dict[str, dict] = {}
    for name, (src_path, tgt_path) in paths.items():
        f = filters if name == "train" else None
        reports[name], split_meta[name] = _binarize(
            tokenizer, name, src_path, tgt_path, staging, f, threads, chunk_size, progress
        )
        for ext in ("bin", "idx"):
            os.replace(staging / f"{name}.{ext}{_PARTIAL}", staging / f"{name}.{ext}")
    record = save_files(tokenizer.to_data(), staging)
    report = {"filters": asdict(filters), "splits": {n: asdict(r) for n, r in reports.items()}}
    with atomic_write(staging / "report.json", "w") as fh:
        json.dump(report, fh, indent=2)
        fh.write("\n")
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "src": src,
        "tgt": tgt,
        "vocab_size": tokenizer.vocab_size,
        "dtype": _DTYPES[_dtype_code(tokenizer.vocab_size)].name,
        "tokenizer": record,  # kind, files, sha256
        # youtokentome: the key an nmt before SentencePiece reads (it still can read such a store)
        **({"bpe_sha256": record["sha256"]} if record["kind"] == YOUTOKENTOME else {}),
        "filters": asdict(filters),
        "splits": split_meta,
    }
    with atomic_write(staging / "meta.json", "w") as fh:
        json.dump(meta, fh, indent=2)
        fh.write("\n")
    return reports


def prepare(
    bpe_model: str | Path | Tokenizer,
    out: Path,
    src: str,
    tgt: str,
    train: str | Path,
    valid: str | Path | None = None,
    test: str | Path | None = None,
    filters: FilterConfig = FilterConfig(),
    threads: int = -1,
    chunk_size: int = 100_000,
    progress: ProgressFn = ignore,
) -> dict[str, SplitReport]:
    """Binarize `{prefix}.{src}` / `{prefix}.{tgt}` for each given split into `out/`, encoded with `bpe_model`:
    a model file from `nmt bpe` (youtokentome or SentencePiece) or a loaded `Tokenizer`.

    Filters apply to train only; valid/test keep every non-empty pair. The new store is written in a
    staging folder inside `out/` and replaces an earlier store only once it is complete, so a bad input
    or a crash leaves the earlier store as it was. The folder is locked against a second `nmt prepare`.
    """
    filters.validate()
    if src == tgt:
        raise ConfigError(f"--src and --tgt are both {src!r}; give two different language suffixes")
    check_range("--chunk-size", chunk_size, 1, INT_MAX)
    out = Path(out)
    check_output_dir(out, "--out")
    tokenizer = from_file(bpe_model) if isinstance(bpe_model, (str, Path)) else bpe_model
    splits = {k: v for k, v in (("train", train), ("valid", valid), ("test", test)) if v is not None}
    paths = {name: _split_paths(prefix, src, tgt) for name, prefix in splits.items()}  # fail early

    with folder_lock(out):
        _remove_leftovers(out)
        staging = out / _STAGING
        staging.mkdir()
        try:
            reports = _write_store(staging, tokenizer, src, tgt, paths, filters, threads, chunk_size, progress)
            _swap_in(staging, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # after an error; after success it is gone already
    return reports


# ---------------------------------------------------------------------------- reading


def _corrupt(directory: Path, why: str) -> DataError:
    return DataError(f"{directory}: dataset is incomplete or corrupt ({why}); run `nmt prepare` again")


def load_meta(directory: Path) -> dict:
    """The store's meta.json; DataError when missing (unfinished), foreign or of another version."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"{directory}: no such dataset directory; create it with `nmt prepare`")
    try:
        meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _corrupt(directory, "no meta.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _corrupt(directory, f"unreadable meta.json: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _corrupt(directory, "meta.json is not an nmt dataset description")
    if meta.get("version") != FORMAT_VERSION:
        raise _corrupt(directory, f"format version {meta.get('version')}, this nmt reads {FORMAT_VERSION}")
    if not isinstance(meta.get("splits"), dict) or "vocab_size" not in meta:
        raise _corrupt(directory, "meta.json lacks splits or vocab_size")
    for key, kind in (("src", str), ("tgt", str), ("vocab_size", int), ("bpe_sha256", str)):
        if key == "bpe_sha256" and key not in meta:  # SentencePiece stores record their tokenizer otherwise
            continue
        value = meta.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            what = "string" if kind is str else "whole number"
            raise _corrupt(directory, f"meta.json's {key} is {value!r}, not a {what}")
    if not 0 < meta["vocab_size"] <= INT_MAX:
        raise _corrupt(directory, f"meta.json's vocab_size {meta['vocab_size']} is out of range")
    return meta


def _tokenizer_record(directory: Path, meta: dict) -> Optional[dict]:
    """meta.json's record of the tokenizer (kind, files, sha256); None for a store of an nmt before
    SentencePiece, whose youtokentome model is bpe.model and its digest "bpe_sha256"."""
    record = meta.get("tokenizer")
    if record is None:
        if not isinstance(meta.get("bpe_sha256"), str):
            raise _corrupt(directory, "meta.json names no tokenizer")
        return None
    if not (isinstance(record, dict) and isinstance(record.get("kind"), str) and isinstance(record.get("sha256"), str)
            and isinstance(record.get("files"), dict)):
        raise _corrupt(directory, "meta.json's tokenizer record is malformed")
    return record


def read_tokenizer(data_dir: Path) -> Tokenizer:
    """The store's tokenizer, checked against the sha256 that meta.json recorded: a swapped model would
    train on ids that mean other words, and fail only at the first validation."""
    data_dir = Path(data_dir)
    meta = load_meta(data_dir)
    record = _tokenizer_record(data_dir, meta)
    try:
        data = read_files(data_dir, record)
    except OSError as e:
        raise _corrupt(data_dir, f"{Path(e.filename or '').name}: {e.strerror or e}") from None
    except InputError as e:
        raise _corrupt(data_dir, str(e)) from None
    files = ", ".join(str(data_dir / name) for name in (record or {"files": {"source": "bpe.model"}})["files"].values())
    if digest(data) != (record["sha256"] if record else meta["bpe_sha256"]):
        what = "BPE model" if data["kind"] == YOUTOKENTOME else "tokenizer model"
        raise DataError(f"{files}: not the {what} the data was encoded with (its sha256 differs from meta.json's); "
                        "put the original back, or run `nmt prepare` again with this one")
    try:
        return load_tokenizer(data, files)
    except InputError as e:
        raise DataError(f"{e}; run `nmt prepare` again") from None


def longest_pair(data_dir: Path, split: str = "train") -> int:
    """The most BPE tokens of a side of any pair of `split` (0 for an empty split)."""
    data = ParallelDataset(data_dir, split)
    if not len(data):
        return 0
    return int(max(data.src_lengths.max(), data.tgt_lengths.max()))


def data_identity(data_dir: Path) -> DataIdentity:
    """What a checkpoint remembers of its data, to refuse resuming on other data."""
    meta = load_meta(data_dir)
    record = _tokenizer_record(Path(data_dir), meta)
    tokenizer = identity_of(record["kind"], record["sha256"]) if record else {"bpe_sha256": meta["bpe_sha256"]}
    return DataIdentity.from_dict({"src": meta["src"], "tgt": meta["tgt"], "vocab_size": meta["vocab_size"],
                                   **tokenizer}, str(Path(data_dir) / "meta.json"))


class ParallelDataset:
    """One split of a prepared store, memory-mapped: pairs of BPE id arrays without specials."""

    def __init__(self, directory: Path, split: str) -> None:
        """Open `directory/{split}.*`; DataError when missing, incomplete or corrupt."""
        self.directory = Path(directory)
        self.split = split
        self.meta: dict = load_meta(self.directory)
        info = self.meta["splits"].get(split)
        if info is None:
            have = ", ".join(self.meta["splits"]) or "none"
            raise DataError(
                f"{self.directory}: no {split!r} split (has {have}); pass --{split} to `nmt prepare`"
            )
        if not (isinstance(info, dict) and isinstance(info.get("pairs"), int)
                and isinstance(info.get("tokens"), int)):
            raise _corrupt(self.directory, f"meta.json lacks the {split} pair and token counts")
        n, code = self._read_header(info)
        try:
            idx = np.memmap(self.directory / f"{split}.idx", mode="r", offset=_IDX_HEADER.size,
                            dtype=np.uint8, shape=(n * 24,))
            tokens = np.memmap(self.directory / f"{split}.bin", mode="r", dtype=_DTYPES[code],
                               shape=(info["tokens"],)) if info["tokens"] else np.zeros(0, _DTYPES[code])
        except (OSError, ValueError) as e:
            raise _corrupt(self.directory, f"{split}.bin/.idx: {e}") from None
        self.src_offsets: np.ndarray = idx[: 8 * n].view("<i8")
        self.tgt_offsets: np.ndarray = idx[8 * n : 16 * n].view("<i8")
        self.src_lengths: np.ndarray = idx[16 * n : 20 * n].view("<i4")  # (N,) tokens, no specials
        self.tgt_lengths: np.ndarray = idx[20 * n : 24 * n].view("<i4")
        self.tokens: np.ndarray = tokens  # flat ids, uint16 or uint32
        self._check_consistent(info)

    def _read_header(self, info: dict) -> tuple[int, int]:
        """Validate the idx header and both file sizes against meta.json; return (count, dtype code)."""
        idx_path = self.directory / f"{self.split}.idx"
        bin_path = self.directory / f"{self.split}.bin"
        try:
            with open(idx_path, "rb") as f:
                head = f.read(_IDX_HEADER.size)
            idx_size, bin_size = idx_path.stat().st_size, bin_path.stat().st_size
        except OSError as e:
            raise _corrupt(self.directory, f"{e.filename}: {e.strerror}") from None
        if len(head) < _IDX_HEADER.size:
            raise _corrupt(self.directory, f"{idx_path.name} is truncated")
        magic, version, code, n = _IDX_HEADER.unpack(head)
        expect_code = _dtype_code(int(self.meta["vocab_size"]))
        if magic != IDX_MAGIC or version != FORMAT_VERSION or code != expect_code:
            raise _corrupt(self.directory, f"{idx_path.name} has a bad header")
        if n != info["pairs"]:
            raise _corrupt(self.directory, f"{idx_path.name} holds {n} pairs, meta.json says {info['pairs']}")
        expect = _IDX_HEADER.size + 24 * n  # 2 int64 offsets + 2 int32 lengths per pair
        if idx_size != expect:
            raise _corrupt(self.directory, f"{idx_path.name} has {idx_size} bytes, expected {expect}")
        expect = info["tokens"] * _DTYPES[code].itemsize
        if bin_size != expect:
            raise _corrupt(self.directory, f"{bin_path.name} has {bin_size} bytes, expected {expect}")
        return n, code

    def _check_consistent(self, info: dict) -> None:
        """Whole-index and token checks (vectorised passes), so a damaged store fails here, naming the file,
        not with an IndexError mid-training: pairs lie back to back, source then target, and every id is
        below the vocabulary size."""
        src_len, tgt_len = self.src_lengths.astype(np.int64), self.tgt_lengths.astype(np.int64)
        if (src_len < 0).any() or (tgt_len < 0).any() or int(src_len.sum() + tgt_len.sum()) != info["tokens"]:
            raise _corrupt(self.directory, f"{self.split}.idx lengths do not add up to the tokens of {self.split}.bin")
        ends = np.cumsum(src_len + tgt_len)
        if not (np.array_equal(self.src_offsets, ends - src_len - tgt_len)
                and np.array_equal(self.tgt_offsets, ends - tgt_len)):
            raise _corrupt(self.directory, f"{self.split}.idx offsets do not match the lengths (or point past "
                                           f"the end of {self.split}.bin)")
        vocab = int(self.meta["vocab_size"])
        if len(self.tokens) and int(self.tokens.max()) >= vocab:
            raise _corrupt(self.directory, f"{self.split}.bin holds token id {int(self.tokens.max())}, beyond the "
                                           f"vocabulary of {vocab}")

    def __len__(self) -> int:
        return len(self.src_lengths)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(src ids (S,), tgt ids (T,)) of pair `i`: read-only views of the memory map."""
        n = len(self.src_lengths)
        if not -n <= i < n:
            raise IndexError(f"pair {i} out of range for {n} pairs")
        i %= n
        so, to = int(self.src_offsets[i]), int(self.tgt_offsets[i])
        return (self.tokens[so : so + int(self.src_lengths[i])],
                self.tokens[to : to + int(self.tgt_lengths[i])])
