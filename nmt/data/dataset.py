"""Binarized parallel data, a store: `prepare` writes it, `ParallelDataset` reads one split of it.

`prepare` binarizes each split of a parallel corpus with the tokenizer (youtokentome's joint BPE, or
SentencePiece: see nmt/text/tokenizer.py) through `nmt.data.binarize`, which streams it in chunks and
filters the training split, so memory does not grow with the corpus beyond the dedup hashes (8 bytes
per kept training pair).  Layout of the output directory:

    meta.json       written last, atomically: its presence marks a finished store
    report.json     per-split filter counts (what `nmt prepare` prints)
    bpe.model       a copy of the tokenizer's model, which training embeds in checkpoints (a SentencePiece
                    model: spm.model, or source.spm, target.spm and pieces.json; meta.json names them)
    {split}.bin     token ids, uint16 (vocab <= 65535) or uint32, for each pair src then tgt
    {split}.idx     IDX_MAGIC, version, dtype code, count, then int64 src/tgt offsets and
                    int32 src/tgt lengths (in tokens), one entry per pair

Ids are subword ids without specials; `nmt.data.batches.collate` adds EOS/BOS.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from nmt.config import INT_MAX, FilterConfig, check_range
from nmt.core.errors import ConfigError, DataError, InputError, OutputError, os_error_message
from nmt.core.files import atomic_write, check_output_dir, folder_lock, resolve_prefixed
from nmt.core.identity import LANGUAGE, DataIdentity, legacy_identity
from nmt.core.outputs import claim_folder
from nmt.core.progress import ProgressFn, ignore
from nmt.data.binarize import (
    DTYPES,
    FORMAT_VERSION,
    IDX_HEADER,
    IDX_MAGIC,
    PARTIAL,
    Part,
    SplitReport,
    binarize_split,
    dtype_code,
)
from nmt.text.tokenizer import (
    FILE_NAMES,
    Tokenizer,
    digest,
    from_file,
    identity_of,
    load_tokenizer,
    model_noun,
    read_files,
    save_files,
)

FORMAT = "nmt-data"
_OWN_FILES = ("meta.json", "report.json", *FILE_NAMES)
_STAGING = ".staging"  # a store being written, inside the store's folder (same file system: renames swap it in)


def _split_paths(prefix: str | Path, src: str, tgt: str) -> tuple[Path, Path]:
    """`prefix.src` and `prefix.tgt`, each plain or compressed (.gz, .bz2, .xz)."""
    prefix = str(prefix)
    return resolve_prefixed(f"{prefix}.{src}"), resolve_prefixed(f"{prefix}.{tgt}")


def _remove_partials(out: Path) -> None:
    """Delete `.partial` files: split data that was being written when a run stopped."""
    for p in out.glob(f"*{PARTIAL}"):
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


@dataclass(frozen=True)
class Languages:
    """The languages of a store: its pairs in order, the id of each target's tag (none for one target), and the
    synthetic tag put first in the sources of its synthetic pairs (None: none, or untagged)."""

    pairs: tuple[tuple[str, str], ...]
    tags: dict[str, int]
    synthetic: Optional[int] = None

    @property
    def multilingual(self) -> bool:
        return len(self.pairs) > 1

    def tagged(self, vocab_size: int, synthetic: bool = False) -> Languages:
        """These languages with their targets' tags, when there are several: the ids after a tokenizer's
        `vocab_size`, in the order of the targets; then, with `synthetic`, the synthetic tag."""
        targets = list(dict.fromkeys(t for _, t in self.pairs))
        tags = {t: vocab_size + i for i, t in enumerate(targets)} if len(targets) > 1 else {}
        return Languages(self.pairs, tags, vocab_size + len(tags) if synthetic else None)

    @property
    def extra_ids(self) -> int:
        """The ids after the tokenizer's: the target tags and the synthetic tag."""
        return len(self.tags) + (self.synthetic is not None)

    def sides(self) -> tuple[str, str]:
        """meta.json's src and tgt: each side's codes joined with "+" (en, de+fr+cs)."""
        return tuple("+".join(dict.fromkeys(p[i] for p in self.pairs)) for i in (0, 1))  # type: ignore[return-value]


def languages_of(src: Optional[str], tgt: Optional[str], pairs: Sequence[str | tuple[str, str]]) -> Languages:
    """--src/--tgt, or the --pair values (SRC-TGT), checked (without tags: `Languages.tagged` adds them)."""
    if pairs and (src is not None or tgt is not None):
        raise ConfigError("give the languages either as `src` and `tgt` or as `pair` SRC-TGT (repeated), not both")
    if not pairs:
        if src is None or tgt is None:
            raise ConfigError("name the languages: `src` en `tgt` de, or `pair` en-de (repeat `pair` for a "
                              "multilingual model)")
        if src == tgt:
            raise ConfigError(f"`src` and `tgt` are both {src!r}; give two different language suffixes")
        return Languages(((src, tgt),), {})
    found: list[tuple[str, str]] = []
    for given in pairs:
        pair = tuple(given.split("-", 1)) if isinstance(given, str) else tuple(given)
        if len(pair) != 2 or not all(LANGUAGE.fullmatch(code) for code in pair) or pair[0] == pair[1]:
            raise ConfigError(f"`pair` {given!r:.40} is not SRC-TGT with two lower-case language codes (en-de); "
                              "the codes are the files' suffixes")
        if pair in found:
            raise ConfigError(f"`pair` {'-'.join(pair)} is given twice")
        found.append((pair[0], pair[1]))
    return Languages(tuple(found), {})


def _parts(prefix: str | Path, langs: Languages) -> list[Part]:
    """The files of one split, a Part per pair (each plain or compressed)."""
    return [Part(*_split_paths(prefix, s, t), f"{s}-{t}" if langs.multilingual else "", langs.tags.get(t))
            for s, t in langs.pairs]


def check_synthetic(given: Languages, synthetic: Sequence[str | Path], upsample: int) -> None:
    """ConfigError for synthetic corpora of a multilingual store, or an upsampling with nothing to upsample among."""
    check_range("`upsample`", upsample, 1, 1000)
    if synthetic and given.multilingual:
        raise ConfigError("`synthetic` corpora go with one language pair (`src` and `tgt`), not several `pair`s")
    if upsample > 1 and not synthetic:
        raise ConfigError(f"`upsample` {upsample} repeats `train` among synthetic corpora; add `synthetic` PREFIX or "
                          "drop `upsample`")


def _train_parts(train: str | Path, synthetic: Sequence[str | Path], langs: Languages, upsample: int) -> list[Part]:
    """The training split's files: the real corpus `upsample` times (each copy filtered alike: the duplicate filter
    runs within a copy), then each synthetic corpus, its sources tagged where `langs` has a synthetic tag."""
    real = _parts(train, langs)
    if not synthetic:
        return real
    (src, tgt), = langs.pairs  # one pair: `prepare` refuses synthetic corpora of a multilingual store
    copies = [replace(part, corpus=f"{train} (copy {k + 1} of {upsample})" if upsample > 1 else str(train))
              for k in range(upsample) for part in real]
    return copies + [Part(*_split_paths(prefix, src, tgt), tag=langs.synthetic, corpus=f"{prefix} (synthetic)")
                     for prefix in synthetic]


def _write_store(staging: Path, tokenizer: Tokenizer, langs: Languages, parts: dict[str, list[Part]],
                 filters: FilterConfig, threads: int, chunk_size: int, progress: ProgressFn) -> dict[str, SplitReport]:
    """Binarize every split into `staging`, then the tokenizer's files, report.json and meta.json."""
    reports: dict[str, SplitReport] = {}
    split_meta: dict[str, dict[str, Any]] = {}
    vocab_size = tokenizer.vocab_size + langs.extra_ids
    for name, split_parts in parts.items():
        f = filters if name == "train" else None
        reports[name], split_meta[name] = binarize_split(
            tokenizer, name, split_parts, staging, f, threads, chunk_size, progress, vocab_size)
        for ext in ("bin", "idx"):
            os.replace(staging / f"{name}.{ext}{PARTIAL}", staging / f"{name}.{ext}")
    record = save_files(tokenizer.to_data(), staging)
    report = {"filters": asdict(filters), "splits": {n: asdict(r) for n, r in reports.items()}}
    with atomic_write(staging / "report.json", "w") as fh:
        json.dump(report, fh, indent=2)
        fh.write("\n")
    src, tgt = langs.sides()
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "src": src,
        "tgt": tgt,
        **({"pairs": [list(p) for p in langs.pairs], "tags": langs.tags} if langs.multilingual else {}),
        **({"synthetic_tag": langs.synthetic} if langs.synthetic is not None else {}),
        "vocab_size": vocab_size,
        "dtype": DTYPES[dtype_code(vocab_size)].name,
        "tokenizer": record,  # kind, files, sha256
        # youtokentome: the key an nmt before SentencePiece reads (it still can read such a store)
        **legacy_identity(record["kind"], record["sha256"]),
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
    src: Optional[str],
    tgt: Optional[str],
    train: str | Path,
    valid: str | Path | None = None,
    test: str | Path | None = None,
    filters: FilterConfig = FilterConfig(),
    threads: int = -1,
    chunk_size: int = 100_000,
    progress: ProgressFn = ignore,
    pairs: Sequence[str | tuple[str, str]] = (),
    synthetic: Sequence[str | Path] = (),
    tag_synthetic: bool = True,
    upsample: int = 1,
) -> dict[str, SplitReport]:
    """Binarize `{prefix}.{src}` / `{prefix}.{tgt}` for each given split into `out/`, encoded with `bpe_model`:
    a model file from `nmt bpe` (youtokentome or SentencePiece) or a loaded `Tokenizer`.

    `pairs` (instead of `src` and `tgt`): several language pairs ("en-de" or ("en", "de")), each split holding
    every pair's files in turn; with several target languages each source begins with its target's tag (ids
    after the tokenizer's: meta.json's "tags").

    `synthetic`: prefixes of synthetic corpora (back- or forward-translations, `nmt distill`'s OUT/train) trained
    on beside `train`, the real corpus, which goes in `upsample` times; with `tag_synthetic` each synthetic source
    begins with the synthetic tag (an id after the tokenizer's and the target tags: meta.json's "synthetic_tag";
    Caswell et al. 2019). One language pair only.

    Filters apply to train only; valid/test keep every non-empty pair. The new store is written in a
    staging folder inside `out/` and replaces an earlier store only once it is complete, so a bad input
    or a crash leaves the earlier store as it was. The folder is locked against a second `nmt prepare`.
    """
    filters.validate()
    check_range("`chunk_size`", chunk_size, 1, INT_MAX)
    out = Path(out)
    check_output_dir(out, "`out`")
    # a store, one being written, or only a subword model (the one to prepare with, say): never a user's folder
    claim_folder(out, "`out`", ("meta.json", _STAGING, *FILE_NAMES), "nmt prepare")
    given = languages_of(src, tgt, pairs)  # the languages' errors before the tokenizer loads
    check_synthetic(given, synthetic, upsample)
    tokenizer = from_file(bpe_model) if isinstance(bpe_model, (str, Path)) else bpe_model
    langs = given.tagged(tokenizer.vocab_size, synthetic=bool(synthetic) and tag_synthetic)
    splits = {k: v for k, v in (("train", train), ("valid", valid), ("test", test)) if v is not None}
    parts = {name: _parts(prefix, langs) for name, prefix in splits.items()}  # fail early
    parts["train"] = _train_parts(train, synthetic, langs, upsample)

    with folder_lock(out):
        _remove_leftovers(out)
        return _staged(out, lambda staging: _write_store(staging, tokenizer, langs, parts, filters, threads,
                                                          chunk_size, progress))


def _staged(out: Path, write: Callable[[Path], dict[str, SplitReport]]) -> dict[str, SplitReport]:
    """`write` into a staging folder inside `out`, swapped in once complete; removed after an error. A write that
    names no file (numpy's on a full disk) is said naming `out`."""
    staging = out / _STAGING
    staging.mkdir()
    try:
        reports = write(staging)
        _swap_in(staging, out)
        return reports
    except OSError as e:
        if e.filename is not None:  # (a file named: its own message)
            raise
        raise OutputError(f"`out` {os_error_message(e, out, 'cannot write')}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # after an error; after success it is gone already


# ---------------------------------------------------------------------------- reading


def _corrupt(directory: Path, why: str) -> DataError:
    return DataError(f"{directory}: dataset is incomplete or corrupt ({why}); run `nmt prepare` again")


def load_meta(directory: Path) -> dict[str, Any]:
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


def _tokenizer_record(directory: Path, meta: dict[str, Any]) -> Optional[dict[str, Any]]:
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
        what = model_noun(data["kind"])
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
    record_of: dict[str, Any] = {"src": meta["src"], "tgt": meta["tgt"], "vocab_size": meta["vocab_size"], **tokenizer}
    record_of.update({key: meta[key] for key in ("pairs", "tags", "synthetic_tag") if key in meta})
    return DataIdentity.from_dict(record_of, str(Path(data_dir) / "meta.json"))


class ParallelDataset:
    """One split of a prepared store, memory-mapped: pairs of BPE id arrays without specials."""

    def __init__(self, directory: Path, split: str) -> None:
        """Open `directory/{split}.*`; DataError when missing, incomplete or corrupt."""
        self.directory = Path(directory)
        self.split = split
        self.meta: dict[str, Any] = load_meta(self.directory)
        info = self.meta["splits"].get(split)
        if info is None:
            have = ", ".join(self.meta["splits"]) or "none"
            raise DataError(
                f"{self.directory}: no {split!r} split (has {have}); pass `{split}` to `nmt prepare`"
            )
        if not (isinstance(info, dict) and isinstance(info.get("pairs"), int)
                and isinstance(info.get("tokens"), int)):
            raise _corrupt(self.directory, f"meta.json lacks the {split} pair and token counts")
        n, code = self._read_header(info)
        try:
            idx = np.memmap(self.directory / f"{split}.idx", mode="r", offset=IDX_HEADER.size,
                            dtype=np.uint8, shape=(n * 24,))
            tokens = np.memmap(self.directory / f"{split}.bin", mode="r", dtype=DTYPES[code],
                               shape=(info["tokens"],)) if info["tokens"] else np.zeros(0, DTYPES[code])
        except (OSError, ValueError) as e:
            raise _corrupt(self.directory, f"{split}.bin/.idx: {e}") from None
        self.src_offsets: np.ndarray = idx[: 8 * n].view("<i8")
        self.tgt_offsets: np.ndarray = idx[8 * n : 16 * n].view("<i8")
        self.src_lengths: np.ndarray = idx[16 * n : 20 * n].view("<i4")  # (N,) tokens, no specials
        self.tgt_lengths: np.ndarray = idx[20 * n : 24 * n].view("<i4")
        self.tokens: np.ndarray = tokens  # flat ids, uint16 or uint32
        self._check_consistent(info)
        self.parts: list[tuple[str, int]] = self._read_parts(info)

    def _read_parts(self, info: dict[str, Any]) -> list[tuple[str, int]]:
        """(SRC-TGT, pairs) of each language pair, in the order of the files ([] for a store of one pair)."""
        parts = info.get("parts", [])
        if not (isinstance(parts, list) and all(isinstance(p, dict) and isinstance(p.get("pair"), str)
                                                and isinstance(p.get("pairs"), int) and p["pairs"] >= 0
                                                for p in parts)
                and (not parts or sum(p["pairs"] for p in parts) == len(self))):
            raise _corrupt(self.directory, f"meta.json's parts of {self.split} do not add up to its pairs")
        return [(p["pair"], p["pairs"]) for p in parts]

    def _read_header(self, info: dict[str, Any]) -> tuple[int, int]:
        """Validate the idx header and both file sizes against meta.json; return (count, dtype code)."""
        idx_path = self.directory / f"{self.split}.idx"
        bin_path = self.directory / f"{self.split}.bin"
        try:
            with open(idx_path, "rb") as f:
                head = f.read(IDX_HEADER.size)
            idx_size, bin_size = idx_path.stat().st_size, bin_path.stat().st_size
        except OSError as e:
            raise _corrupt(self.directory, f"{e.filename}: {e.strerror}") from None
        if len(head) < IDX_HEADER.size:
            raise _corrupt(self.directory, f"{idx_path.name} is truncated")
        magic, version, code, n = IDX_HEADER.unpack(head)
        expect_code = dtype_code(int(self.meta["vocab_size"]))
        if magic != IDX_MAGIC or version != FORMAT_VERSION or code != expect_code:
            raise _corrupt(self.directory, f"{idx_path.name} has a bad header")
        if n != info["pairs"]:
            raise _corrupt(self.directory, f"{idx_path.name} holds {n} pairs, meta.json says {info['pairs']}")
        expect = IDX_HEADER.size + 24 * n  # 2 int64 offsets + 2 int32 lengths per pair
        if idx_size != expect:
            raise _corrupt(self.directory, f"{idx_path.name} has {idx_size} bytes, expected {expect}")
        expect = info["tokens"] * DTYPES[code].itemsize
        if bin_size != expect:
            raise _corrupt(self.directory, f"{bin_path.name} has {bin_size} bytes, expected {expect}")
        return n, code

    def _check_consistent(self, info: dict[str, Any]) -> None:
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
