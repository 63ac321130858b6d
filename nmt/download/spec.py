"""What a dataset is made of: frozen data, in the spirit of sacreBLEU's DATASETS.

A `DatasetSpec` names a language pair and its `Split`s; each side of a split is a tuple of
`Source`s, each a `RemoteFile` (or one member of it, when it is an archive) in a `Format`.
A `Mono` split is monolingual: each side is a text of its own, deduplicated and without the
sentences of some held-out splits. The datasets themselves are declared in `nmt.download.datasets`;
this module has no data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from urllib.parse import urlsplit

GB = 1000**3
# The most a file of unknown size may weigh when its dataset declares no `limit`: a server (or
# --mirror) that sends more is sending something else, and is stopped before it fills the disk.
DEFAULT_LIMIT = 8 * GB
FORMATS = ("text", "sgm", "tsv")


@dataclass(frozen=True)
class RemoteFile:
    """One file as published upstream. Checksums and size are None when not known.

    `limit` bounds a file of unknown `size` (DEFAULT_LIMIT when None). Its `name` (the last part
    of the URL) is also its name in the cache and in a `--mirror`.
    """

    url: str
    sha256: str | None = None
    md5: str | None = None
    size: int | None = None
    limit: int | None = None

    @property
    def name(self) -> str:
        """File name: the last component of the URL path."""
        return PurePosixPath(urlsplit(self.url).path).name

    @property
    def bound(self) -> int:
        """The most bytes a download of this file may bring: its size when known, else its limit."""
        if self.size is not None:
            return self.size
        return self.limit if self.limit is not None else DEFAULT_LIMIT


@dataclass(frozen=True)
class Source:
    """Where one side of a split comes from: a downloaded file, or a `member` of a tar archive.

    `fmt` is "text" (one sentence a line; gunzipped when the name ends in .gz), "sgm" (WMT's
    fake SGML: the text of its <seg> lines) or "tsv" (tab-separated: the field `column`, from 0).
    """

    file: RemoteFile
    member: str | None = None
    fmt: str = "text"
    column: int | None = None

    def describe(self) -> str:
        """URL, plus `#member` for an archive member (for messages and the manifest)."""
        return self.file.url + (f"#{self.member}" if self.member else "")


@dataclass(frozen=True)
class Holdout:
    """Held-out pairs of a corpus that has no valid or test set of its own, chosen by position.

    Pair number n (1-based: the line number in the concatenated sources) goes to `test` when
    n % every == 0, to `valid` when n % every == every // 2, and to `train` otherwise. A pair
    with a blank side always goes to `train` (where `nmt prepare` drops it), so valid and test
    hold no empty lines. `train` leaves out every pair equal to a valid or test pair (Europarl
    repeats its formulae, "The debate is closed."), so no test pair is seen in training.
    Deterministic: the same upstream files give the same three splits.
    """

    every: int = 1000

    def part(self, n: int, src: str, tgt: str) -> str:
        """Which split pair number `n` (1-based) with sides `src` and `tgt` belongs to."""
        rest = n % self.every
        if rest not in (0, self.every // 2) or not src.strip() or not tgt.strip():
            return "train"
        return "test" if rest == 0 else "valid"


@dataclass(frozen=True)
class Split:
    """One output split: `OUT/NAME.SRC` and `OUT/NAME.TGT`, each the concatenation of its sources.

    `lines`, when known, is checked; `extra` splits are only fetched with `extra_tests=True`.
    With a `holdout`, the split keeps only its part of the sources' pairs (see `Holdout`): the
    train, valid and test splits then share their sources. With `mono`, the split is monolingual
    (see `Mono`), and `lines` is the number of lines each side reads.
    """

    name: str
    src: tuple[Source, ...]
    tgt: tuple[Source, ...]
    lines: int | None = None
    extra: bool = False
    holdout: Holdout | None = None
    mono: Mono | None = None

    @property
    def inputs(self) -> tuple[Source, ...]:
        """Every source the split reads: its two sides, and those of the splits a `mono` split holds out."""
        held = self.mono.held if self.mono is not None else ()
        return self.src + self.tgt + tuple(s for split in held for s in split.src + split.tgt)


@dataclass(frozen=True)
class Mono:
    """What makes a split monolingual: each side is written on its own (the two need not be parallel).

    A side keeps the first occurrence of each line, in order, and drops, counting each: empty (or
    blank) lines, lines equal to a line of the same side of a `held` split (the validation and test
    sets, so that none is trained on) and repeats of a line kept before. A held split that is
    `extra` is held out only with `extra_tests=True` (its files are fetched then). The held splits
    are read, not written.
    """

    held: tuple[Split, ...] = ()


@dataclass(frozen=True)
class DatasetSpec:
    """A downloadable dataset: language pair, splits and where each comes from."""

    name: str
    src: str
    tgt: str
    description: str
    licence: str
    splits: tuple[Split, ...]
    homepage: str = ""
    approx_size: str = ""  # shown by --list when not every file size is known
    family: str = ""  # what `nmt download FAMILY --pair SRC-TGT` names; "" means `name`

    @property
    def pair(self) -> str:
        """The language pair, source first: "en-fr"."""
        return f"{self.src}-{self.tgt}"

    @property
    def group(self) -> str:
        """The family: the dataset name that `--pair` completes."""
        return self.family or self.name

    @property
    def monolingual(self) -> bool:
        """Whether the dataset is monolingual text in its two languages (its splits are `Mono`)."""
        return any(s.mono is not None for s in self.splits)

    def selected(self, extra_tests: bool = False) -> tuple[Split, ...]:
        """The splits a download produces: the standard ones, plus the extra test sets if asked (as
        splits, or as the held-out splits of a `Mono` split)."""
        def chosen(split: Split) -> Split:
            if split.mono is None or extra_tests:
                return split
            return replace(split, mono=Mono(tuple(h for h in split.mono.held if not h.extra)))

        return tuple(chosen(s) for s in self.splits if extra_tests or not s.extra)

    def files(self, splits: Iterable[Split]) -> list[RemoteFile]:
        """The distinct files the given splits need, in order of first use."""
        seen: dict[str, RemoteFile] = {}
        for split in splits:
            for source in split.inputs:
                seen.setdefault(source.file.name, source.file)
        return list(seen.values())

    def outputs(self, split: Split) -> tuple[str, str]:
        """The names of a split's two output files: ("train.en", "train.de")."""
        return f"{split.name}.{self.src}", f"{split.name}.{self.tgt}"


def parallel_files(
    split: str,
    base: str,
    src_name: str,
    tgt_name: str,
    lines: int | None = None,
    sums: dict[str, tuple[str | None, int | None]] | None = None,
    extra: bool = False,
    limit: int | None = None,
) -> Split:
    """A split made of one text file a side, both under the base URL `base`.

    `sums` maps a file name to its known (sha256, size); files missing from it are unverified
    and bounded by `limit`.
    """
    def side(name: str) -> tuple[Source, ...]:
        return (Source(remote_file(base, name, sums, limit)),)

    return Split(split, side(src_name), side(tgt_name), lines=lines, extra=extra)


def remote_file(
    base: str, name: str, sums: dict[str, tuple[str | None, int | None]] | None = None, limit: int | None = None,
) -> RemoteFile:
    """The file `name` under the base URL `base`, with its (sha256, size) from `sums` when known."""
    sha256, size = (sums or {}).get(name, (None, None))
    return RemoteFile(base.rstrip("/") + "/" + name, sha256=sha256, size=size, limit=limit)


def _turned(split: Split) -> Split:
    """`split` with its source and target sides exchanged (those of the splits it holds out too)."""
    mono = Mono(tuple(map(_turned, split.mono.held))) if split.mono is not None else None
    return replace(split, src=split.tgt, tgt=split.src, mono=mono)


def swapped(spec: DatasetSpec, name: str) -> DatasetSpec:
    """The same files the other way round (each split's source and target sides exchanged)."""
    splits = tuple(map(_turned, spec.splits))
    return DatasetSpec(
        name=name, src=spec.tgt, tgt=spec.src, description=spec.description,
        licence=spec.licence, splits=splits, homepage=spec.homepage,
        approx_size=spec.approx_size, family=spec.group,
    )


def check_spec(spec: DatasetSpec) -> None:
    """Raise ValueError when a spec is inconsistent (a bug in the registry, not a user error)."""
    if spec.src == spec.tgt:
        raise ValueError(f"{spec.name}: source and target language are both {spec.src!r}")
    names = [s.name for s in spec.splits]
    if len(set(names)) != len(names):
        raise ValueError(f"{spec.name}: duplicate split names in {names}")
    files: dict[str, RemoteFile] = {}
    for split in spec.splits:
        where = f"{spec.name}/{split.name}"
        if not split.src or not split.tgt:
            raise ValueError(f"{where}: needs at least one source a side")
        if split.holdout is not None and split.name not in ("train", "valid", "test"):
            raise ValueError(f"{where}: a held-out split is train, valid or test")
        if split.mono is not None:
            _check_mono(where, split.mono, split.holdout)
        for source in split.inputs:
            if source.fmt not in FORMATS:
                raise ValueError(f"{where}: unknown format {source.fmt!r}")
            if (source.fmt == "tsv") != (source.column is not None):
                raise ValueError(f"{where}: a column is given for a tsv source, and only for one")
            other = files.setdefault(source.file.name, source.file)
            if other != source.file:
                raise ValueError(f"{spec.name}: two different files are named {source.file.name!r}")


def _check_mono(where: str, mono: Mono, holdout: Holdout | None) -> None:
    """The rules of a `Mono` split (see `check_spec`)."""
    if holdout is not None:
        raise ValueError(f"{where}: a split is monolingual or held out by position, not both")
    for held in mono.held:
        if held.mono is not None or held.holdout is not None:
            raise ValueError(f"{where}: the held-out split {held.name} is made of plain sources")
        if not held.src or not held.tgt:
            raise ValueError(f"{where}: the held-out split {held.name} needs at least one source a side")
