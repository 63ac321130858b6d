"""One split of a store, streamed from parallel text into its binary files: `binarize_split`.

The text is read in chunks, encoded with the tokenizer, filtered (training only: lengths, ratio,
duplicates) and appended to `{split}.bin` (token ids) and `{split}.idx` (offsets and lengths): memory
does not grow with the corpus beyond the dedup hashes (`nmt.data.dedup`). The store around the splits
(meta.json, the staging folder) is `nmt.data.dataset`'s.
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import struct
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, Callable

import numpy as np

from nmt.config import FilterConfig
from nmt.core.errors import InputError
from nmt.core.files import read_lines
from nmt.core.progress import Progress, ProgressFn
from nmt.data.dedup import HashSet, pair_hashes
from nmt.text.tokenizer import Tokenizer

FORMAT_VERSION = 1
IDX_MAGIC = b"NMTIDX\x00\x00"
IDX_HEADER = struct.Struct("<8sIIQ")  # magic, version, dtype code, count: 24 bytes, 8-aligned
DTYPES: dict[int, np.dtype[np.unsignedinteger]] = {1: np.dtype("<u2"), 2: np.dtype("<u4")}
PARTIAL = ".partial"  # suffix of files still being written; never read


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


def dtype_code(vocab_size: int) -> int:
    """The index header's code of the id type: 1 (uint16) when every id fits, else 2 (uint32)."""
    return 1 if vocab_size <= 65535 else 2


# ---------------------------------------------------------------------------- reading text


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
        n += 1  # noqa: SIM113 (the pairs read so far, for the message when one file ends first)
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


# ---------------------------------------------------------------------------- filtering


def _filter(
    src_len: np.ndarray, tgt_len: np.ndarray, hashes: Callable[[np.ndarray], np.ndarray] | None,
    seen: HashSet | None, f: FilterConfig | None, report: SplitReport,
) -> np.ndarray:
    """(N,) bool keep-mask for one chunk; counts each dropped pair under its first failing filter.

    `hashes(indices)` gives the pair hashes of the chunk positions `indices`; only pairs that
    pass the length filters are hashed.
    """
    empty = (src_len == 0) | (tgt_len == 0)
    report.read += len(src_len)
    report.empty += int(empty.sum())
    if f is None:  # valid/test: keep every non-empty pair intact
        keep: np.ndarray = ~empty  # numpy's operators are Any to mypy
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
        dup = seen.contains_sorted(h)  # kept in an earlier chunk
        dup[1:] |= h[1:] == h[:-1]  # repeats inside this chunk
        seen.add_run(h[~dup])  # sorted, distinct and new
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
        "too_short": (r.too_short, f"shorter than `min_len` {f.min_len} BPE tokens; lower `min_len`"),
        "too_long": (r.too_long, f"longer than `max_len` {f.max_len} BPE tokens; raise `max_len`"),
        "ratio": (r.ratio, f"length ratio above `max_ratio` {f.max_ratio}; raise `max_ratio`"),
        "duplicate": (r.duplicate, "duplicates; pass `-dedup`"),
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
        self.path = out / f"{name}.idx{PARTIAL}"
        self.code = code
        self.pairs = self.src_tokens = self.tgt_tokens = 0
        self._parts = [(out / f"{name}.idx.{part}{PARTIAL}", dt) for part, dt in self._PARTS]
        self._files: list[IO[bytes]] = []
        try:
            for path, _ in self._parts:
                self._files.append(open(path, "wb"))  # noqa: SIM115 (closed by self.close, also on failure)
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
            f.write(IDX_HEADER.pack(IDX_MAGIC, FORMAT_VERSION, self.code, self.pairs))
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


@dataclass(frozen=True)
class Part:
    """One corpus of a split, for one language pair: its files, and the tag put first in each source (a
    target-language tag, or the synthetic tag; None: no tag)."""

    src_path: Path
    tgt_path: Path
    pair: str = ""  # SRC-TGT; "" for a store of one pair
    tag: int | None = None
    corpus: str = ""  # which corpus of a split of several (a real one, a synthetic one); "" for a split of one


def with_tag(ids: np.ndarray, lengths: np.ndarray, tag: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Flat ids (T,) of sequences of `lengths` (N,), each with `tag` put first (unchanged for None)."""
    if tag is None:
        return ids, lengths
    starts = np.cumsum(lengths, dtype=np.int64) - lengths
    return np.insert(ids, starts, tag), lengths + 1


def binarize_split(
    tokenizer: Tokenizer, name: str, parts: list[Part], out: Path,
    f: FilterConfig | None, threads: int, chunk_size: int, progress: ProgressFn, vocab_size: int | None = None,
) -> tuple[SplitReport, dict[str, Any]]:
    """Stream one split, the pairs of each of `parts` in turn, into `out/{name}.bin.partial` and `.idx.partial`;
    return its report and meta. `vocab_size`: the store's (the tokenizer's and the tags'; default the tokenizer's).

    Memory is bounded by the chunk (its text, its ids as numpy arrays) plus the dedup hashes
    (8 bytes per kept training pair); the index goes to disk as it is made. The filters see the pairs without
    their tags.
    """
    code = dtype_code(vocab_size or tokenizer.vocab_size)
    report = SplitReport(filtered=f is not None)
    index = _IndexWriter(out, name, code)
    counts: list[dict[str, Any]] = []
    try:
        with open(out / f"{name}.bin{PARTIAL}", "wb") as bin_file:
            for part in parts:
                seen = HashSet() if f is not None and f.dedup else None  # duplicates within a language pair
                own = _binarize_part(tokenizer, name, part, bin_file, index, f, seen, threads, chunk_size, progress)
                counts.append({"pair": part.pair, "pairs": own.kept, "report": asdict(own)})
                for key, value in asdict(own).items():
                    if key != "filtered":
                        setattr(report, key, getattr(report, key) + value)
            bin_file.flush()
            os.fsync(bin_file.fileno())
        index.finish()
    finally:
        index.close()
    progress(Progress(task=f"prepare {name}", done=report.read, total=report.read, unit="pairs",
                      message=f"{name}: kept {report.kept} of {report.read} pairs"))
    meta = {
        "pairs": report.kept,
        "tokens": index.src_tokens + index.tgt_tokens,
        "src_tokens": index.src_tokens,
        "tgt_tokens": index.tgt_tokens,
        "sources": [str(path) for part in parts for path in (part.src_path, part.tgt_path)],
        "report": asdict(report),
    }
    if any(part.pair for part in parts):
        meta["parts"] = counts  # in the order of the pairs in the files
    if any(part.corpus for part in parts):  # several corpora of one pair: what each gave
        meta["corpora"] = [{"corpus": part.corpus, "pairs": c["pairs"], "report": c["report"]}
                           for part, c in zip(parts, counts)]
    return report, meta


def _binarize_part(tokenizer: Tokenizer, name: str, part: Part, bin_file: IO[bytes], index: _IndexWriter,
                   f: FilterConfig | None, seen: HashSet | None, threads: int, chunk_size: int,
                   progress: ProgressFn) -> SplitReport:
    """Append the kept pairs of one part's files to the split's files; its own report."""
    dtype = DTYPES[index.code]
    report = SplitReport(filtered=f is not None)
    task = f"prepare {name}" + (f" {part.pair}" if part.pair else "")
    for src, tgt in _chunks(_read_pairs(part.src_path, part.tgt_path), chunk_size):
        src_ids, s_len = _encode(tokenizer, src, "source", threads, dtype)
        tgt_ids, t_len = _encode(tokenizer, tgt, "target", threads, dtype)
        hashes = None if seen is None else functools.partial(pair_hashes, src, tgt)
        keep = np.flatnonzero(_filter(s_len, t_len, hashes, seen, f, report))
        del src, tgt, hashes  # the text is no longer needed; free it before reading on
        src_ids, s_len = with_tag(src_ids, s_len, part.tag)
        bin_file.write(interleave_pairs(src_ids, s_len, tgt_ids, t_len, keep).tobytes())
        index.append(s_len[keep], t_len[keep])
        del src_ids, tgt_ids
        progress(Progress(task=task, done=report.read, unit="pairs", info={"kept": report.kept}))
    if report.read == 0:
        raise InputError(f"{part.src_path} and {part.tgt_path} are empty; give a non-empty {name} corpus")
    if report.kept == 0:
        if f is None:
            raise InputError(f"{part.src_path}, {part.tgt_path}: every {name} pair has a blank side")
        raise InputError(_explain_nothing_kept(name, report, f))
    return report
