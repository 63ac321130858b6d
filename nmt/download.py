"""Download parallel corpora and lay them out for training: the library behind `nmt download`.

Every dataset ends up the same way: `OUT/{train,valid,test}.{SRC,TGT}` named with real language
codes (`train.en`, `train.de`), plain UTF-8 text with one sentence a line, and `OUT/MANIFEST.json`
(sources, checksums, line counts). Raw downloads stay in `OUT/.cache/` so that a re-run fetches
nothing. Downloads stream into `NAME.part`, are retried by urllib3 (exponential backoff,
Retry-After), resume with HTTP Range, are verified against the registry's checksums and only
then renamed into place. Archives are extracted through tarfile's "data" filter; WMT's SGML test
sets are turned into text by sacreBLEU itself.

The library never prints and never exits: it reports through a `ProgressFn` and raises
`DownloadError` / `InputError`.

Adding a dataset is a few lines of data: build a `DatasetSpec` (see `_multi30k`, `_wmt14` and
`_europarl`) and add it to `registry()`. A dataset comes in language pairs: `wmt14` is en-de,
`wmt14-en-fr` is the same family's en-fr, chosen with `--pair` (`resolve`).
"""

from __future__ import annotations

import datetime
import functools
import gzip
import hashlib
import itertools
import json
import os
import re
import shutil
import tarfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Iterable, Iterator, Optional, Union
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from nmt import __version__
from nmt.config import check_range
from nmt.errors import DownloadError, InputError
from nmt.files import atomic_write, folder_lock, read_lines
from nmt.progress import Progress, ProgressFn, ignore

MANIFEST = "MANIFEST.json"
CACHE = ".cache"
CHUNK = 1 << 18  # bytes read per network or disk chunk
CONNECT_TIMEOUT = 10.0  # seconds to open a connection (the read timeout is --timeout)
REPORT_EVERY = 0.1  # seconds between two byte-progress events of one task
# Statuses urllib3 retries (with connection errors and timeouts): transient by definition.
RETRY_STATUS = frozenset({408, 425, 429, *range(500, 600)})
# What a dropped or stalled connection raises while the body streams.
_STREAM_ERRORS = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)

# --------------------------------------------------------------------------------------------
# Registry: what a dataset is made of. Frozen data, in the spirit of sacreBLEU's DATASETS.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteFile:
    """One file as published upstream. Checksums and size are None when not known.

    Its `name` (the last part of the URL) is also its name in the cache and in a `--mirror`.
    """

    url: str
    sha256: Optional[str] = None
    md5: Optional[str] = None
    size: Optional[int] = None

    @property
    def name(self) -> str:
        """File name: the last component of the URL path."""
        return PurePosixPath(urlsplit(self.url).path).name


@dataclass(frozen=True)
class Source:
    """Where one side of a split comes from: a downloaded file, or a `member` of a tar archive.

    `fmt` is "text" (one sentence a line; gunzipped when the name ends in .gz) or "sgm" (WMT's
    fake SGML, turned into text by sacreBLEU: a source and a reference member of one archive).
    """

    file: RemoteFile
    member: Optional[str] = None
    fmt: str = "text"

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
    train, valid and test splits then share their sources.
    """

    name: str
    src: tuple[Source, ...]
    tgt: tuple[Source, ...]
    lines: Optional[int] = None
    extra: bool = False
    holdout: Optional[Holdout] = None


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

    def selected(self, extra_tests: bool = False) -> tuple[Split, ...]:
        """The splits a download produces: the standard ones, plus the extra test sets if asked."""
        return tuple(s for s in self.splits if extra_tests or not s.extra)

    def files(self, splits: Iterable[Split]) -> list[RemoteFile]:
        """The distinct files the given splits need, in order of first use."""
        seen: dict[str, RemoteFile] = {}
        for split in splits:
            for source in split.src + split.tgt:
                seen.setdefault(source.file.name, source.file)
        return list(seen.values())


def parallel_files(
    split: str,
    base: str,
    src_name: str,
    tgt_name: str,
    lines: Optional[int] = None,
    sums: Optional[dict[str, tuple[Optional[str], Optional[int]]]] = None,
    extra: bool = False,
) -> Split:
    """A split made of one text file a side, both under the base URL `base`.

    `sums` maps a file name to its known (sha256, size); files missing from it are unverified.
    """
    sums = sums or {}

    def side(name: str) -> tuple[Source, ...]:
        sha256, size = sums.get(name, (None, None))
        return (Source(RemoteFile(base.rstrip("/") + "/" + name, sha256=sha256, size=size)),)

    return Split(split, side(src_name), side(tgt_name), lines=lines, extra=extra)


def check_spec(spec: DatasetSpec) -> None:
    """Raise ValueError when a spec is inconsistent (a bug in the registry, not a user error)."""
    if spec.src == spec.tgt:
        raise ValueError(f"{spec.name}: source and target language are both {spec.src!r}")
    names = [s.name for s in spec.splits]
    if len(set(names)) != len(names):
        raise ValueError(f"{spec.name}: duplicate split names in {names}")
    files: dict[str, RemoteFile] = {}
    for split in spec.splits:
        if not split.src or not split.tgt:
            raise ValueError(f"{spec.name}/{split.name}: needs at least one source a side")
        if split.holdout is not None and (
            split.name not in ("train", "valid", "test")
            or any(s.fmt != "text" for s in split.src + split.tgt)
        ):
            raise ValueError(f"{spec.name}/{split.name}: a held-out split is train, valid or test of text")
        for source in split.src + split.tgt:
            if source.fmt not in ("text", "sgm"):
                raise ValueError(f"{spec.name}/{split.name}: unknown format {source.fmt!r}")
            other = files.setdefault(source.file.name, source.file)
            if other != source.file:
                raise ValueError(f"{spec.name}: two different files are named {source.file.name!r}")
        # sacreBLEU converts an SGML test set as a whole: a source and a reference of one archive
        sides = split.src + split.tgt
        if any(s.fmt == "sgm" for s in sides) and not (
            len(sides) == 2 and sides[0].file == sides[1].file
            and all(s.fmt == "sgm" and s.member for s in sides)
        ):
            raise ValueError(f"{spec.name}/{split.name}: an sgm split needs one member a side")


# Multi30k, task 1 (Flickr30K captions), raw gzipped files of the public repository.
_M30K_RAW = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/"
# sha256 and size of the upstream files, computed from a copy of the repository's files. The
# 2017/2018 extra test sets have no recorded checksum: their sha256 goes to the manifest.
_M30K_SUMS: dict[str, tuple[Optional[str], Optional[int]]] = {
    "train.en.gz": ("d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f", 568929),
    "train.de.gz": ("726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6", 637044),
    "val.en.gz": ("14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28", 21650),
    "val.de.gz": ("f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a", 24681),
    "test_2016_flickr.en.gz": (
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
        21077,
    ),
    "test_2016_flickr.de.gz": (
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
        22890,
    ),
}


def _swapped(spec: DatasetSpec, name: str) -> DatasetSpec:
    """The same files the other way round (each split's source and target sides exchanged)."""
    splits = tuple(
        Split(s.name, s.tgt, s.src, s.lines, s.extra, s.holdout) for s in spec.splits
    )
    return DatasetSpec(
        name=name, src=spec.tgt, tgt=spec.src, description=spec.description,
        licence=spec.licence, splits=splits, homepage=spec.homepage,
        approx_size=spec.approx_size, family=spec.group,
    )


def _multi30k() -> DatasetSpec:
    """Multi30k en-de: 29,000 / 1,014 / 1,000 caption pairs (test = test_2016_flickr)."""

    def pair(split: str, stem: str, lines: int, extra: bool = False) -> Split:
        return parallel_files(
            split, _M30K_RAW, f"{stem}.en.gz", f"{stem}.de.gz", lines, _M30K_SUMS, extra
        )

    return DatasetSpec(
        name="multi30k",
        src="en",
        tgt="de",
        description="Multi30k task 1: image captions, 29k training pairs (small, for quick runs)",
        licence="research use; no licence file upstream (Flickr30K terms apply), "
        "see https://github.com/multi30k/dataset",
        homepage="https://github.com/multi30k/dataset",
        splits=(
            pair("train", "train", 29000),
            pair("valid", "val", 1014),
            pair("test", "test_2016_flickr", 1000),
            pair("test2017", "test_2017_flickr", 1000, extra=True),
            pair("test2017mscoco", "test_2017_mscoco", 461, extra=True),
            pair("test2018", "test_2018_flickr", 1071, extra=True),
        ),
    )


# WMT14 training archives (official statmt.org URLs, as in sacreBLEU's and tensor2tensor's
# lists and fairseq's prepare-wmt14en2fr.sh). No published checksum is recorded here: the
# computed sha256 goes to the manifest instead. Europarl v7, Common Crawl and News Commentary
# v9 hold both the de-en and the fr-en corpora.
_EUROPARL = RemoteFile("https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz")
_COMMONCRAWL = RemoteFile("https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz")
_NEWSCOMM9 = RemoteFile("https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz")
_UN = RemoteFile("https://www.statmt.org/wmt13/training-parallel-un.tgz")
_GIGA = RemoteFile("https://www.statmt.org/wmt10/training-giga-fren.tar")  # plain tar of .gz files

# The training members of each WMT14 pair, in order of concatenation; {lang} is a language code.
_WMT14_TRAIN: dict[str, tuple[tuple[RemoteFile, str], ...]] = {
    "de": (
        (_EUROPARL, "training/europarl-v7.de-en.{lang}"),
        (_COMMONCRAWL, "commoncrawl.de-en.{lang}"),
        (_NEWSCOMM9, "training/news-commentary-v9.de-en.{lang}"),
    ),
    "fr": (
        (_EUROPARL, "training/europarl-v7.fr-en.{lang}"),
        (_COMMONCRAWL, "commoncrawl.fr-en.{lang}"),
        (_UN, "un/undoc.2000.fr-en.{lang}"),
        (_NEWSCOMM9, "training/news-commentary-v9.fr-en.{lang}"),
        (_GIGA, "giga-fren.release2.fixed.{lang}.gz"),
    ),
}
_WMT14_ABOUT = {
    "de": ("English-German", "about 4.5M training pairs", "about 1.6 GB of archives"),
    "fr": (
        "English-French",
        "about 36M training pairs (the paper's count; the 10^9 French-English corpus and UN "
        "are most of them)",
        "several GB of archives",
    ),
}
_LANGUAGE = {"en": "English", "de": "German", "fr": "French"}


def _sacrebleu_split(split: str, test_set: str, pair: str, lines: Optional[int]) -> Split:
    """A split taken from sacreBLEU's test-set registry: its URL, md5 and SGML member names."""
    from sacrebleu.dataset import DATASETS  # imported lazily: only when the registry is built

    ds = DATASETS[test_set]
    file = RemoteFile(ds.data[0], md5=ds.md5[0] if ds.md5 else None)
    src_member, ref_member = ds.langpairs[pair][:2]
    src, ref = (Source(file, member, "sgm") for member in (src_member, ref_member))
    return Split(split, (src,), (ref,), lines)


def _wmt14(src: str = "en", tgt: str = "de") -> DatasetSpec:
    """WMT14 news task, English with German or French, either way round.

    en-de: Europarl v7 + Common Crawl + News Commentary v9. en-fr: Europarl v7 + Common Crawl +
    UN + News Commentary v9 + the 10^9 corpus. Valid newstest2013, test newstest2014, both with
    sacreBLEU's members for the direction (so test.TGT is what `sacrebleu -l SRC-TGT` scores).
    """
    other = src if tgt == "en" else tgt
    sides = {
        lang: tuple(Source(file, member.format(lang=lang)) for file, member in _WMT14_TRAIN[other])
        for lang in (src, tgt)
    }
    pair_name, train_size, size = _WMT14_ABOUT[other]
    direction = f"{_LANGUAGE[src]}-{_LANGUAGE[tgt]}" if src != "en" else pair_name
    return DatasetSpec(
        name="wmt14" if (src, tgt) == ("en", "de") else f"wmt14-{src}-{tgt}",
        family="wmt14",
        src=src,
        tgt=tgt,
        description=f"WMT14 {direction} news task: {train_size}; valid newstest2013, test "
        "newstest2014 (all 3,003 lines: sacreBLEU's wmt14/full)",
        licence="research use under the WMT14 terms of each corpus, "
        "see https://www.statmt.org/wmt14/translation-task.html",
        homepage="https://www.statmt.org/wmt14/translation-task.html",
        approx_size=size,
        splits=(
            Split("train", sides[src], sides[tgt]),
            _sacrebleu_split("valid", "wmt13", f"{src}-{tgt}", 3000),
            _sacrebleu_split("test", "wmt14/full", f"{src}-{tgt}", 3003),
        ),
    )


EUROPARL_HOLDOUT = Holdout(every=1000)


def _europarl(src: str = "en", tgt: str = "fr") -> DatasetSpec:
    """Europarl v7 alone (the WMT14 archive's fr-en corpus), with a held-out valid and test set."""
    sides = {lang: (Source(_EUROPARL, f"training/europarl-v7.fr-en.{lang}"),) for lang in ("en", "fr")}
    return DatasetSpec(
        name=f"europarl-{src}-{tgt}",
        family="europarl",
        src=src,
        tgt=tgt,
        description="Europarl v7 English-French (European Parliament proceedings, about 2M "
        "pairs): pairs 500, 1500, 2500, ... are valid, pairs 1000, 2000, ... are test (about "
        "2,000 each), the rest is train, less any pair equal to a valid or test pair",
        licence="no copyright restrictions stated upstream (European Parliament proceedings), "
        "see https://www.statmt.org/europarl/",
        homepage="https://www.statmt.org/europarl/",
        approx_size="about 0.6 GB, one archive",
        splits=tuple(
            Split(name, sides[src], sides[tgt], holdout=EUROPARL_HOLDOUT)
            for name in ("train", "valid", "test")
        ),
    )


@functools.cache
def registry() -> dict[str, DatasetSpec]:
    """Every known dataset by name (built on first use; sacreBLEU is imported only then).

    The first dataset of a family is the one `nmt download FAMILY` gets without `--pair`."""
    en_de = _multi30k()
    specs = [
        en_de, _swapped(en_de, "multi30k-de-en"),
        _wmt14("en", "de"), _wmt14("de", "en"), _wmt14("en", "fr"), _wmt14("fr", "en"),
        _europarl("en", "fr"), _europarl("fr", "en"),
    ]
    for spec in specs:
        check_spec(spec)
    return {spec.name: spec for spec in specs}


def families() -> dict[str, dict[str, DatasetSpec]]:
    """Family -> language pair -> dataset, in registry order (the first pair is the default)."""
    out: dict[str, dict[str, DatasetSpec]] = {}
    for spec in registry().values():
        out.setdefault(spec.group, {})[spec.pair] = spec
    return out


_PAIR_SYNTAX = re.compile(r"[a-z]{2,3}-[a-z]{2,3}")


def _family_pair(family: str, pairs: dict[str, DatasetSpec], pair: Optional[str]) -> DatasetSpec:
    """The dataset of `family` for `pair` (None: the family's first pair)."""
    if pair is None:
        return next(iter(pairs.values()))
    wanted = pair.strip().lower()
    if not _PAIR_SYNTAX.fullmatch(wanted):
        raise InputError(
            f"--pair {pair!r}: not a language pair; write SOURCE-TARGET, for {family} one of: "
            f"{', '.join(pairs)}"
        )
    if wanted not in pairs:
        raise InputError(f"--pair {pair}: {family} has no {wanted} data; choose one of: {', '.join(pairs)}")
    return pairs[wanted]


def resolve(name: Union[str, DatasetSpec], pair: Optional[str] = None) -> DatasetSpec:
    """The dataset that NAME and `--pair` designate; InputError naming the choices otherwise.

    NAME is a family (`wmt14`, with `pair` or its default pair), a full name (`wmt14-en-fr`;
    `wmt14-en-de` is `wmt14`), or a DatasetSpec. A `pair` that contradicts a full name is an error.
    """
    if isinstance(name, DatasetSpec):
        check_spec(name)
        spec = name
    else:
        groups = families()
        if name in groups:
            return _family_pair(name, groups[name], pair)
        full = {f"{s.group}-{s.pair}": s for s in registry().values()}
        found = registry().get(name) or full.get(name)
        if found is None:
            raise InputError(
                f"unknown dataset {name!r}; choose one of: {', '.join(sorted(groups))} "
                f"(with --pair), or {', '.join(n for n in registry() if n not in groups)} "
                "(see nmt download --list)"
            )
        spec = found
    if pair is not None and pair.strip().lower() != spec.pair:
        raise InputError(
            f"--pair {pair}: dataset {spec.name} is {spec.pair}; drop --pair, or name the family: "
            f"nmt download {spec.group} --pair {pair}"
        )
    return spec


# --------------------------------------------------------------------------------------------
# Public results
# --------------------------------------------------------------------------------------------


@dataclass
class DatasetInfo:
    """What `nmt download --list` shows about one dataset."""

    name: str
    langs: str  # "en-de"
    description: str
    splits: dict[str, Optional[int]]  # standard split -> expected lines (None: not fixed)
    extra_splits: dict[str, Optional[int]]  # fetched with --extra-tests
    download_bytes: Optional[int]  # total of the standard files, None when a size is unknown
    size: str  # human-readable download size ("1.3 MB", "about 1.6 GB of archives", "unknown")
    licence: str
    sources: tuple[str, ...]  # URLs of every file, extra test sets included
    homepage: str


@dataclass
class DownloadResult:
    """What `download` did; `up_to_date` means everything was present and nothing happened."""

    dataset: str
    out: Path
    manifest: Path
    up_to_date: bool
    fetched: list[str] = field(default_factory=list)  # files transferred this run (HTTP or mirror)
    reused: list[str] = field(default_factory=list)  # files already in OUT/.cache
    written: dict[str, int] = field(default_factory=dict)  # output file -> lines, written this run
    skipped: list[str] = field(default_factory=list)  # splits already complete, left untouched
    unverified: list[str] = field(default_factory=list)  # no known checksum: sha256 recorded only
    bytes_fetched: int = 0  # bytes transferred this run (resumed bytes not counted twice)


def human_bytes(n: float) -> str:
    """1296271 -> '1.3 MB'."""
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def dataset_info(spec: DatasetSpec) -> DatasetInfo:
    """Summarise a spec for listing."""
    standard = spec.files(spec.selected(False))
    sizes = [f.size for f in standard]
    total = None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)
    size = human_bytes(total) if total is not None else (spec.approx_size or "unknown")
    return DatasetInfo(
        name=spec.name,
        langs=f"{spec.src}-{spec.tgt}",
        description=spec.description,
        splits={s.name: s.lines for s in spec.splits if not s.extra},
        extra_splits={s.name: s.lines for s in spec.splits if s.extra},
        download_bytes=total,
        size=size,
        licence=spec.licence,
        sources=tuple(f.url for f in spec.files(spec.splits)),
        homepage=spec.homepage,
    )


def list_datasets() -> list[DatasetInfo]:
    """Every dataset `download` knows, for `nmt download --list`."""
    return [dataset_info(spec) for spec in registry().values()]


def _splits_text(splits: dict[str, Optional[int]]) -> str:
    """{"train": 29000, "valid": None} -> "train 29,000, valid ?"."""
    parts = [f"{name} {n:,}" if n is not None else f"{name} ?" for name, n in splits.items()]
    return ", ".join(parts)


def describe(info: DatasetInfo) -> tuple[str, str, str, str, str]:
    """One `--list` table row: (name, languages, size, licence, description with its splits)."""
    text = f"{info.description}. Lines: {_splits_text(info.splits)}"
    if info.extra_splits:
        text += f"; with --extra-tests also {_splits_text(info.extra_splits)}"
    return info.name, info.langs, info.size, info.licence, text


def summary(result: DownloadResult) -> str:
    """What a download did, in a line or two for the user (no rich markup)."""
    if result.up_to_date:
        return f"{result.dataset}: everything present in {result.out}, nothing downloaded"
    if result.fetched:
        got = f"downloaded {len(result.fetched)} file(s), {human_bytes(result.bytes_fetched)}"
    else:
        got = "nothing downloaded"
    if result.reused:
        got += f" ({len(result.reused)} already in {result.out / CACHE})"
    lines = [
        f"{result.dataset}: {got}; wrote {len(result.written)} file(s) in {result.out}; "
        f"manifest {result.manifest}"
    ]
    if result.unverified:
        lines.append(
            f"no published checksum for {', '.join(result.unverified)}: their sha256 is "
            "recorded in the manifest"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Fetching: HTTP with retry (urllib3) and Range resume, local mirror copies, verification
# --------------------------------------------------------------------------------------------

OnRetry = Callable[[str, float, int], None]  # (cause, seconds to wait, attempt number)


class _Retryable(Exception):
    """The body stopped short (or the resume went wrong): resume from what `.part` holds."""


class _Stalled(_Retryable):
    """The server sent too little for too long (see _StallWatch)."""


class _RetriesSpent(Exception):
    """urllib3 retried a request as often as allowed and it still failed."""


class _Reporter:
    """Send byte-progress events for one task, at most every REPORT_EVERY seconds."""

    def __init__(self, progress: ProgressFn, task: str, total: Optional[float]):
        self.progress, self.task, self.total = progress, task, total
        self.last, self.done_sent = 0.0, -1.0

    def __call__(self, done: float, force: bool = False) -> None:
        now = time.monotonic()
        if done == self.done_sent and self.last:
            return  # nothing new: the final event is not sent twice
        if force or now - self.last >= REPORT_EVERY or done == self.total:
            self.last, self.done_sent = now, done
            self.progress(Progress(self.task, done=done, total=self.total, unit="B"))


def _say(progress: ProgressFn, task: str, message: str) -> None:
    """Send a one-off log line."""
    progress(Progress(task=task, message=message))


def _size(path: Path) -> int:
    """Size of `path` in bytes, 0 when it does not exist."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _short(err: Optional[BaseException]) -> str:
    """A short one-line description of a network exception ("[Errno 111] Connection refused")."""
    text = " ".join(str(err).split())
    os_error = re.search(r"\[Errno -?\d+\] [^'\")(]*[^'\")( ]", text)
    if os_error:
        return os_error.group(0)
    # requests wraps urllib3's MaxRetryError, whose `reason` is the last failure
    first = err.args[0] if err is not None and err.args else None
    reason = first.reason if isinstance(first, urllib3.exceptions.MaxRetryError) else err
    if isinstance(reason, (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)):
        return "timed out"
    return f"{type(err).__name__}: {text}"[:160] if text else type(err).__name__


class _Retry(Retry):
    """urllib3's Retry (backoff, Retry-After) that also tells `on_retry` about every retry."""

    def __init__(self, *args: Any, on_retry: Optional[OnRetry] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_retry = on_retry

    def new(self, **kwargs: Any) -> _Retry:
        # urllib3 copies the Retry through new() at every attempt: keep the callback
        return super().new(on_retry=self.on_retry, **kwargs)

    def increment(self, *args: Any, **kwargs: Any) -> _Retry:
        retry = super().increment(*args, **kwargs)  # raises MaxRetryError once spent
        last, response = retry.history[-1], kwargs.get("response")
        cause = f"HTTP {last.status}" if last.status else _short(last.error)
        wait = (retry.get_retry_after(response) if response else None) or retry.get_backoff_time()
        if self.on_retry is not None:
            self.on_retry(cause, wait, len(retry.history))
        return retry


def _session(retries: int, backoff: float, on_retry: OnRetry) -> requests.Session:
    """An HTTP session with our User-Agent whose requests urllib3 retries `retries` times.

    Connection errors, timeouts and RETRY_STATUS are retried, at once and then after
    `backoff * 2**(k-1)` seconds, or as long as a Retry-After header asks.
    """
    retry = _Retry(
        total=retries, backoff_factor=backoff, status_forcelist=RETRY_STATUS,
        raise_on_status=False, on_retry=on_retry,  # the last answer tells what went wrong
    )
    session = requests.Session()
    session.headers["User-Agent"] = f"nmt/{__version__} (python-requests)"
    session.headers["Accept-Encoding"] = "identity"  # the bytes as stored: no transparent gunzip
    for scheme in ("http://", "https://"):
        session.mount(scheme, HTTPAdapter(max_retries=retry))
    return session


def _content_range(resp: requests.Response) -> tuple[Optional[int], Optional[int]]:
    """(first byte, total size) from a Content-Range header; None for what is missing."""
    m = re.match(r"bytes\s+(\d+|\*)(?:-\d+)?/(\d+|\*)", resp.headers.get("Content-Range", ""))
    if not m:
        return None, None
    start = None if m.group(1) == "*" else int(m.group(1))
    total = None if m.group(2) == "*" else int(m.group(2))
    return start, total


def _open_response(
    session: requests.Session, url: str, offset: int, timeout: float
) -> requests.Response:
    """GET `url` streamed, asking for bytes from `offset` on (urllib3 retries what is transient)."""
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        return session.get(url, headers=headers, stream=True, timeout=(min(CONNECT_TIMEOUT, timeout), timeout))
    except (requests.ConnectionError, requests.Timeout) as e:
        raise _RetriesSpent(_short(e)) from None
    except requests.RequestException as e:  # invalid URL, too many redirects ...
        raise DownloadError(
            f"{url}: cannot download ({_short(e)}); check the URL or --mirror"
        ) from None


def _check_status(
    resp: requests.Response, url: str, part: Path, offset: int
) -> tuple[int, Optional[int]]:
    """Where the body goes: (byte offset to write at, total size or None); raise on errors.

    A 416 answer to a resume of a complete `.part` returns (offset, offset): nothing to read.
    """
    code = resp.status_code
    if code == 416 and offset:
        if _content_range(resp)[1] == offset:
            return offset, offset
        part.unlink(missing_ok=True)
        raise _Retryable(f"server refused to resume at byte {offset}; restarting from zero")
    if code in RETRY_STATUS:  # urllib3 hands the last answer back once its retries are spent
        raise _RetriesSpent(f"HTTP {code} {resp.reason}")
    if code >= 400:
        raise DownloadError(
            f"{url}: HTTP {code} {resp.reason} for {part.name.removesuffix('.part')}; "
            "check the URL (or --mirror): the file is not available there"
        )
    length = resp.raw.length_remaining  # urllib3's Content-Length: None when absent or malformed
    if code != 206:
        return 0, length  # 200: the whole file, whether or not a range was asked for
    start, total = _content_range(resp)
    if start != offset:
        part.unlink(missing_ok=True)
        raise _Retryable(f"server resumed at byte {start}, not {offset}; restarting from zero")
    if total is None and length is not None:
        total = offset + length
    return offset, total


def _fetch_once(
    session: requests.Session,
    url: str,
    part: Path,
    timeout: float,
    progress: ProgressFn,
    expected_size: Optional[int],
) -> int:
    """One attempt: append what the server sends to `part`. Returns bytes received."""
    offset = _size(part)
    if expected_size is not None and offset > expected_size:
        part.unlink()
        offset = 0
    if expected_size is not None and offset == expected_size and offset:
        return 0  # complete from an earlier run; verification follows
    task = f"download {part.name.removesuffix('.part')}"
    with _open_response(session, url, offset, timeout) as resp:
        start, total = _check_status(resp, url, part, offset)
        if total is not None and start == total:
            return 0
        if offset and start == 0:
            _say(progress, task, f"{url}: server ignored the resume request; restarting from zero")
        elif offset:
            _say(progress, task, f"{url}: resuming at byte {offset}")
        return _stream_body(resp, part, start, total, progress, stall_seconds=timeout)


MIN_BYTES_PER_WINDOW = 1024  # a transfer that delivers less than this in --timeout seconds has stalled


class _StallWatch:
    """Notices a server that keeps the connection alive but sends (almost) nothing: each socket read
    returns within the read timeout, yet the file never arrives. At least MIN_BYTES_PER_WINDOW bytes must
    come in every `seconds`, else the attempt is a retryable failure (resumed from what arrived)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.window_start = time.monotonic()
        self.window_bytes = 0

    def check(self, received: int, done: int) -> None:
        self.window_bytes += received
        now = time.monotonic()
        if now - self.window_start < self.seconds:
            return
        if self.window_bytes < MIN_BYTES_PER_WINDOW:
            raise _Stalled(f"stalled: {self.window_bytes} bytes in {now - self.window_start:.1f}s "
                             f"after {done} bytes")
        self.window_start, self.window_bytes = now, 0


def _chunks(resp: requests.Response) -> Iterator[bytes]:
    """The raw body (nothing decoded: Accept-Encoding is identity) as it arrives: read1 returns after one
    socket read, where read(n) would wait for n bytes and hide a slow drip from the stall watch."""
    raw = resp.raw
    if not hasattr(raw, "read1"):  # urllib3 < 2
        yield from raw.stream(CHUNK, decode_content=False)
        return
    while chunk := raw.read1(CHUNK, decode_content=False):
        yield chunk


def _stream_body(
    resp: requests.Response, part: Path, start: int, total: Optional[int], progress: ProgressFn,
    stall_seconds: float = 30.0,
) -> int:
    """Write the response body to `part` from byte `start`; a short or stalled body is a retryable failure."""
    report = _Reporter(progress, f"download {part.name.removesuffix('.part')}", total)
    done = start
    report(done, force=True)
    watch = _StallWatch(stall_seconds)
    with open(part, "ab" if start else "wb") as f:
        try:
            for chunk in _chunks(resp):
                f.write(chunk)
                done += len(chunk)
                report(done)
                watch.check(len(chunk), done)
        except _STREAM_ERRORS as e:
            raise _Retryable(f"connection lost after {done} bytes ({_short(e)})") from None
    report(done, force=True)
    if total is not None and done != total:
        raise _Retryable(f"connection closed after {done} of {total} bytes")
    return done - start


def _gave_up(url: str, part: Path, error: str, attempts: int) -> DownloadError:
    """The error once retrying is over; it says how to resume."""
    kept = _size(part)
    again = f"resume ({kept:,} bytes kept in {part})" if kept else "try again"
    return DownloadError(
        f"{url}: download failed after {attempts} attempt(s) in a row ({error}); "
        f"check the network (or --mirror) and re-run the same command to {again}"
    )


def fetch_url(
    url: str,
    part: Path,
    *,
    retries: int = 5,
    timeout: float = 30.0,
    backoff: float = 1.0,
    progress: ProgressFn = ignore,
    expected_size: Optional[int] = None,
) -> int:
    """Download `url` into `part`, resuming from what `part` already holds; return bytes received.

    urllib3 retries each request `retries` times (see `_session`). A body cut short is resumed
    with Range, up to `retries` times in a row without progress, waiting `backoff * 2**(k-1)`
    seconds. Other 4xx fail at once. The caller verifies `part` and renames it.
    """
    part.parent.mkdir(parents=True, exist_ok=True)
    task = f"download {part.name.removesuffix('.part')}"

    def on_retry(cause: str, wait: float, attempt: int) -> None:
        _say(progress, task, f"{url}: {cause}; retrying in {wait:.3g}s ({attempt}/{retries})")

    received, failures, best = 0, 0, _size(part)
    # a session per file, so that urllib3's retries are reported with this file's URL
    with _session(retries, backoff, on_retry) as session:
        while True:
            try:
                return received + _fetch_once(session, url, part, timeout, progress, expected_size)
            except _RetriesSpent as e:
                raise _gave_up(url, part, str(e), retries + 1) from None
            except _Retryable as e:
                size = _size(part)
                received += max(0, size - best)
                # progress resets the count, but not the few bytes of a stalled (dripping) transfer
                failures = 1 if size > best and not isinstance(e, _Stalled) else failures + 1
                best = max(best, size)
                if failures > retries:
                    raise _gave_up(url, part, str(e), failures) from None
                on_retry(str(e), backoff * 2 ** (failures - 1), failures)
                time.sleep(backoff * 2 ** (failures - 1))


def copy_file(src: Path, part: Path, progress: ProgressFn = ignore) -> int:
    """Copy a mirror file from disk into `part` (from scratch), reporting bytes; return its size."""
    try:
        total = src.stat().st_size
        report = _Reporter(progress, f"copy {src.name}", total)
        done = 0
        part.parent.mkdir(parents=True, exist_ok=True)
        with open(src, "rb") as fin, open(part, "wb") as fout:
            while chunk := fin.read(CHUNK):
                fout.write(chunk)
                done += len(chunk)
                report(done)
        report(done, force=True)
        return done
    except FileNotFoundError:
        raise DownloadError(
            f"{src}: not found in the --mirror directory; it must hold the dataset's files "
            "under their upstream names"
        ) from None
    except (IsADirectoryError, PermissionError) as e:
        raise DownloadError(f"{src}: cannot read the mirror file ({e.strerror})") from None


def file_digests(path: Path, progress: ProgressFn = ignore) -> tuple[str, str]:
    """(sha256, md5) hex digests of a file, in one pass, reporting bytes hashed."""
    sha, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    report = _Reporter(progress, f"verify {path.name.removesuffix('.part')}", path.stat().st_size)
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
            md5.update(chunk)
            done += len(chunk)
            report(done)
    report(done, force=True)
    return sha.hexdigest(), md5.hexdigest()


def verify(file: RemoteFile, path: Path, where: str, progress: ProgressFn = ignore) -> str:
    """Check `path` against the file's known size and checksums; return its sha256.

    Raises DownloadError naming `where` (URL or mirror path) and the file on a mismatch.
    """
    def mismatch(what: str) -> DownloadError:
        return DownloadError(
            f"{where}: checksum mismatch for {file.name} ({what}); the bad copy was deleted, "
            "re-run to fetch it again, or check --mirror if it persists"
        )

    size = path.stat().st_size
    if file.size is not None and size != file.size:
        raise mismatch(f"{size} bytes, expected {file.size}")
    sha256, md5 = file_digests(path, progress)
    if file.sha256 is not None and sha256 != file.sha256.lower():
        raise mismatch(f"sha256 {sha256}, expected {file.sha256}")
    if file.md5 is not None and md5 != file.md5.lower():
        raise mismatch(f"md5 {md5}, expected {file.md5}")
    return sha256


def is_url(location: str) -> bool:
    """True for http(s) URLs, False for a local directory (file:// counts as local)."""
    return urlsplit(location).scheme.lower() in ("http", "https")


def _mirror_dir(mirror: str) -> Path:
    """The local directory a non-URL mirror names; InputError when it is not a directory."""
    path = Path(urlsplit(mirror).path) if mirror.startswith("file://") else Path(mirror)
    if not path.is_dir():
        raise InputError(
            f"--mirror {mirror}: not a directory, nor an http(s) URL; give a folder holding "
            "the dataset's files or a base URL"
        )
    return path


def locate(file: RemoteFile, mirror: Optional[str]) -> Union[str, Path]:
    """Where to get `file`: its URL, the mirror base URL + its name, or mirror dir / its name."""
    if mirror is None:
        return file.url
    if is_url(mirror):
        return mirror.rstrip("/") + "/" + file.name
    return _mirror_dir(mirror) / file.name


@dataclass
class _Options:
    """Settings shared by every fetch of one `download` call."""

    mirror: Optional[str]
    retries: int
    timeout: float
    backoff: float
    progress: ProgressFn


@dataclass
class _Fetched:
    """A verified file in the cache, and how it got there."""

    file: RemoteFile
    path: Path
    where: str
    sha256: str
    fetched: bool
    received: int


def _reuse_cached(file: RemoteFile, path: Path, where: str, opts: _Options) -> Optional[str]:
    """sha256 of an already cached file, or None (file deleted) when it no longer verifies."""
    try:
        return verify(file, path, where, opts.progress)
    except DownloadError:
        path.unlink(missing_ok=True)
        message = f"{path}: cached copy is corrupt; fetching it again"
        _say(opts.progress, f"verify {file.name}", message)
        return None


def obtain(file: RemoteFile, cache: Path, opts: _Options) -> _Fetched:
    """Ensure a verified copy of `file` at `cache/NAME`: reuse it, or fetch, verify and rename."""
    final = cache / file.name
    source = locate(file, opts.mirror)
    where = str(source)
    if final.is_file():
        sha = _reuse_cached(file, final, where, opts)
        if sha is not None:
            _say(opts.progress, f"download {file.name}", f"{file.name}: already in {cache}")
            return _Fetched(file, final, where, sha, fetched=False, received=0)
    part = cache / (file.name + ".part")
    if isinstance(source, Path):
        received = copy_file(source, part, opts.progress)
    else:
        received = fetch_url(
            source, part, retries=opts.retries, timeout=opts.timeout, backoff=opts.backoff,
            progress=opts.progress, expected_size=file.size,
        )
    try:
        sha = verify(file, part, where, opts.progress)
    except DownloadError:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, final)
    return _Fetched(file, final, where, sha, fetched=True, received=received)


# --------------------------------------------------------------------------------------------
# Safe extraction
# --------------------------------------------------------------------------------------------


def _member_name(name: str) -> str:
    """Normalise an archive member name ("./a//b" -> "a/b")."""
    return str(PurePosixPath(name))


def _unsafe(archive: Path, name: str, reason: str) -> DownloadError:
    """The error for an archive with an unsafe member."""
    return DownloadError(
        f"{archive}: unsafe archive member {name!r} ({reason}); refusing to extract it: the "
        "archive is corrupt or malicious, delete it and check the source or --mirror"
    )


def _data_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """tarfile's "data" filter, except that an absolute name is refused, not made relative."""
    # No archive we expect holds absolute names: one that does is not the file we asked for.
    if member.name.startswith(("/", os.sep)):
        raise tarfile.AbsolutePathError(member)
    return tarfile.data_filter(member, dest)


def safe_extract(
    archive: Path, dest: Path, members: Optional[Iterable[str]] = None
) -> dict[str, Path]:
    """Extract `members` (all when None) of a tar archive into `dest`; return name -> path.

    Every member, wanted or not, goes through tarfile's "data" filter: a path leading out of
    `dest` or absolute, a link out of it, a device file makes the whole archive rejected with
    a DownloadError naming the member. One streaming pass.
    """
    if not hasattr(tarfile, "data_filter"):  # Python before 3.9.17 / 3.10.12 / 3.11.4
        raise DownloadError(
            f"{archive}: this Python's tarfile cannot filter what it extracts; upgrade Python "
            "to extract archives safely"
        )
    wanted = None if members is None else {_member_name(m) for m in members}
    found: dict[str, Path] = {}

    def keep(member: tarfile.TarInfo, path: str) -> Optional[tarfile.TarInfo]:
        member = _data_filter(member, path)
        name = _member_name(member.name)
        if wanted is not None and name not in wanted:
            return None  # checked, not extracted
        if member.isfile():
            found[name] = dest / name
        return member

    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r|*") as tar:
            tar.extractall(dest, filter=keep)
    except tarfile.FilterError as e:
        raise _unsafe(archive, e.tarinfo.name, str(e)) from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise DownloadError(
            f"{archive}: not a readable tar archive ({e}); delete it and re-run to fetch it again"
        ) from None
    missing = sorted((wanted or set()) - set(found))
    if missing:
        raise DownloadError(
            f"{archive}: member(s) {', '.join(missing)} not found; this is not the expected "
            "archive, delete it and re-run (or check --mirror)"
        )
    return found


# --------------------------------------------------------------------------------------------
# Building the output files
# --------------------------------------------------------------------------------------------


def _sgml_to_text(split: Split, pair: str, work: Path) -> dict[Source, Path]:
    """sacreBLEU's plain text of an SGML split whose archive is extracted in `work/ARCHIVE/`."""
    from sacrebleu.dataset.fake_sgml import FakeSGMLDataset  # lazily, as in the registry

    src, ref = split.src[0], split.tgt[0]
    test_set = FakeSGMLDataset(split.name, data=[], langpairs={pair: [src.member, ref.member]})
    # sacreBLEU puts its folders under $SACREBLEU (read once, at import) and would download
    # `data` there; ours is already fetched, verified and safely extracted under OUT.
    raw, text = work / src.file.name, work / "sacrebleu"
    test_set._rawdir, test_set._outdir = str(raw.resolve()), str(text.resolve())
    text.mkdir(parents=True, exist_ok=True)
    try:
        src_text = test_set.get_source_file(pair)
        (ref_text,) = test_set.get_reference_files(pair)
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise DownloadError(
            f"{src.describe()}: sacreBLEU cannot read the SGML test set ({e}); delete "
            f"{work.parent} and re-run"
        ) from None
    return {src: Path(src_text), ref: Path(ref_text)}


def _source_paths(
    spec: DatasetSpec, splits: tuple[Split, ...], local: dict[str, _Fetched], work: Path
) -> dict[Source, Path]:
    """The text file of every source: its download, its member (extracted in `work/ARCHIVE/`)
    or sacreBLEU's text of its SGML member."""
    sources = [source for split in splits for source in split.src + split.tgt]
    wanted: dict[str, set[str]] = {}
    for source in sources:
        if source.member is not None:
            wanted.setdefault(source.file.name, set()).add(source.member)
    found = {name: safe_extract(local[name].path, work / name, m) for name, m in wanted.items()}
    paths = {
        s: found[s.file.name][_member_name(s.member)] if s.member else local[s.file.name].path
        for s in sources
    }
    for split in splits:
        if split.src[0].fmt == "sgm":
            paths.update(_sgml_to_text(split, f"{spec.src}-{spec.tgt}", work))
    return paths


def _write_side(
    sources: tuple[Source, ...], paths: dict[Source, Path], out: IO[bytes], progress: ProgressFn,
    task: str,
) -> tuple[int, str, int]:
    """Concatenate the sources' lines into `out`, reporting bytes; return (lines, sha256, bytes)."""
    side = _Side(out)
    report = _Reporter(progress, task, None)
    for text in _side_lines(sources, paths):
        side.write(text)
        if side.lines % 10_000 == 0:
            report(side.size)
    report.total = side.size
    report(side.size, force=True)
    return side.result()


def _check_lines(
    split: Split, names: tuple[str, str], counts: tuple[int, int], cache: Path
) -> None:
    """Both sides must have as many lines, and as many as the registry expects."""
    if counts[0] != counts[1]:
        raise DownloadError(
            f"{split.name}: {names[0]} has {counts[0]} lines but {names[1]} has {counts[1]}; the "
            f"sources are not parallel, delete {cache} and re-run"
        )
    if split.lines is not None and counts[0] != split.lines:
        raise DownloadError(
            f"{split.name}: {names[0]} and {names[1]} have {counts[0]} lines, expected "
            f"{split.lines}; the downloaded files are not the expected ones, delete {cache} "
            "and re-run"
        )


def _side_lines(sources: tuple[Source, ...], paths: dict[Source, Path]) -> Iterator[str]:
    """The lines of one side: its sources' lines, one after the other."""
    for source in sources:
        try:
            yield from read_lines(paths[source])
        except InputError as e:
            raise DownloadError(f"{e} (from {source.describe()})") from None


class _Side:
    """One output file being written: its lines, bytes and sha256 so far."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out, self.sha, self.lines, self.size = out, hashlib.sha256(), 0, 0

    def write(self, text: str) -> None:
        data = (text + "\n").encode("utf-8")
        self.out.write(data)
        self.sha.update(data)
        self.lines += 1
        self.size += len(data)

    def result(self) -> tuple[int, str, int]:
        return self.lines, self.sha.hexdigest(), self.size


def _write_held_out(
    split: Split, names: tuple[str, str], paths: dict[Source, Path], files: tuple[IO[bytes], IO[bytes]],
    progress: ProgressFn, cache: Path,
) -> list[tuple[int, str, int]]:
    """Write this split's part of the sources' pairs (see `Holdout`), both sides in step."""
    holdout = split.holdout
    assert holdout is not None

    def numbered() -> Iterator[tuple[int, str, str]]:
        missing = object()
        pairs = itertools.zip_longest(_side_lines(split.src, paths), _side_lines(split.tgt, paths), fillvalue=missing)
        for n, (src, tgt) in enumerate(pairs, 1):
            if src is missing or tgt is missing:
                shorter = names[0] if src is missing else names[1]
                raise DownloadError(
                    f"{split.name}: the sources of {shorter} end at line {n - 1}, the other side's go on; "
                    f"the sources are not parallel, delete {cache} and re-run"
                )
            yield n, src, tgt  # type: ignore[misc]

    held: set[tuple[str, str]] = set()  # train: the valid and test pairs (2 in `every`), a first pass
    if split.name == "train":
        held = {(src, tgt) for n, src, tgt in numbered() if holdout.part(n, src, tgt) != "train"}
    sides = (_Side(files[0]), _Side(files[1]))
    report = _Reporter(progress, f"write {names[0]}", None)
    for n, src, tgt in numbered():
        if holdout.part(n, src, tgt) == split.name and (src, tgt) not in held:
            sides[0].write(src)
            sides[1].write(tgt)
        if n % 10_000 == 0:
            report(sides[0].size)
    report.total = sides[0].size
    report(sides[0].size, force=True)
    return [side.result() for side in sides]


def _write_split(
    spec: DatasetSpec,
    split: Split,
    out: Path,
    paths: dict[Source, Path],
    progress: ProgressFn,
) -> dict[str, dict]:
    """Write OUT/SPLIT.SRC and OUT/SPLIT.TGT atomically (both or neither); return their records."""
    names = (f"{split.name}.{spec.src}", f"{split.name}.{spec.tgt}")
    sides = (split.src, split.tgt)
    records: dict[str, dict] = {}
    with atomic_write(out / names[0]) as fs, atomic_write(out / names[1]) as ft:
        if split.holdout is not None:
            results = _write_held_out(split, names, paths, (fs, ft), progress, out / CACHE)
        else:
            results = [
                _write_side(sources, paths, f, progress, f"write {name}")
                for name, sources, f in zip(names, sides, (fs, ft))
            ]
        _check_lines(split, names, (results[0][0], results[1][0]), out / CACHE)
    for name, sources, (lines, sha, size) in zip(names, sides, results):
        origin = [s.describe() for s in sources]
        records[name] = {"lines": lines, "bytes": size, "sha256": sha, "from": origin}
        _say(progress, f"write {name}", f"wrote {out / name} ({lines:,} lines)")
    return records


def _build(
    spec: DatasetSpec,
    splits: tuple[Split, ...],
    out: Path,
    local: dict[str, _Fetched],
    progress: ProgressFn,
) -> dict[str, dict]:
    """Extract what is needed into a scratch folder, write every split, remove the scratch."""
    work = out / CACHE / "extract"
    shutil.rmtree(work, ignore_errors=True)
    try:
        paths = _source_paths(spec, splits, local, work)
        records: dict[str, dict] = {}
        for split in splits:
            records.update(_write_split(spec, split, out, paths, progress))
        return records
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Manifest and the download entry point
# --------------------------------------------------------------------------------------------


def read_manifest(out: Path) -> Optional[dict]:
    """OUT/MANIFEST.json as a dict, or None when absent or unreadable."""
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _split_present(spec: DatasetSpec, split: Split, out: Path, manifest: Optional[dict]) -> bool:
    """True when the manifest records the split and both files are there with the recorded size."""
    if not manifest:
        return False
    files = manifest.get("files", {})
    for name in (f"{split.name}.{spec.src}", f"{split.name}.{spec.tgt}"):
        record = files.get(name)
        if not isinstance(record, dict) or not (out / name).is_file():
            return False
        if _size(out / name) != record.get("bytes") or _file_sha256(out / name) != record.get("sha256"):
            return False  # changed in place since it was written: write the split again
    return split.name in manifest.get("splits", {})


def _file_sha256(path: Path) -> str:
    return file_digests(path)[0]


def verify_outputs(out: Path) -> tuple[list[str], list[str]]:
    """Check every file MANIFEST.json lists in `out` against its recorded size and sha256.

    Returns (names that match, one line per problem). DownloadError when there is no manifest."""
    manifest = read_manifest(out)
    if manifest is None:
        raise DownloadError(f"{out / MANIFEST}: missing or unreadable; download the dataset into {out} first")
    good, problems = [], []
    for name, record in sorted(manifest.get("files", {}).items()):
        path = out / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif _size(path) != record.get("bytes"):
            problems.append(f"{path}: {_size(path):,} bytes, the manifest says {record.get('bytes'):,}")
        elif _file_sha256(path) != record.get("sha256"):
            problems.append(f"{path}: sha256 differs from the manifest's (changed since it was written)")
        else:
            good.append(name)
    return good, problems


def _prepare_out(out: Path, spec: DatasetSpec) -> Optional[dict]:
    """Create OUT; return its manifest, refusing a folder that holds another dataset."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory; choose a folder")
    out.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(out)
    if manifest is not None and manifest.get("dataset") != spec.name:
        raise InputError(
            f"--out {out}: already holds dataset {manifest.get('dataset')!r} "
            f"(see {out / MANIFEST}); choose another folder"
        )
    return manifest


def _source_records(sources: dict[str, dict], fetched: dict[str, _Fetched]) -> dict[str, dict]:
    """Manifest records of the downloaded files, updating those of earlier runs."""
    for item in fetched.values():
        earlier = sources.get(item.file.name, {})
        where = item.where if item.fetched else earlier.get("fetched_from", item.where)
        sources[item.file.name] = {
            "url": item.file.url,
            "fetched_from": where,
            "bytes": _size(item.path),
            "sha256": item.sha256,
            "expected_sha256": item.file.sha256,
            "expected_md5": item.file.md5,
            "verified": item.file.sha256 is not None or item.file.md5 is not None,
        }
    return sources


def _manifest(
    spec: DatasetSpec,
    old: Optional[dict],
    mirror: Optional[str],
    splits: tuple[Split, ...],
    fetched: dict[str, _Fetched],
    records: dict[str, dict],
) -> dict:
    """The new manifest: the old one's entries, updated with what this run produced."""
    sources = _source_records(dict(old.get("sources", {})) if old else {}, fetched)
    files = dict(old.get("files", {})) if old else {}
    files.update(records)
    split_info = dict(old.get("splits", {})) if old else {}
    for split in splits:
        src, tgt = f"{split.name}.{spec.src}", f"{split.name}.{spec.tgt}"
        lines = files[src]["lines"]
        split_info[split.name] = {
            "src": src, "tgt": tgt, "lines": lines, "expected_lines": split.lines
        }
        if split.holdout is not None:
            split_info[split.name]["held_out_every"] = split.holdout.every
    return {
        "dataset": spec.name,
        "family": spec.group,
        "src": spec.src,
        "tgt": spec.tgt,
        "description": spec.description,
        "licence": spec.licence,
        "nmt_version": __version__,
        "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mirror": mirror,
        "splits": split_info,
        "files": files,
        "sources": sources,
    }


def download(
    name: Union[str, DatasetSpec],
    out: Path,
    mirror: Optional[str] = None,
    pair: Optional[str] = None,
    extra_tests: bool = False,
    progress: ProgressFn = ignore,
    retries: int = 5,
    timeout: float = 30.0,
    backoff: float = 1.0,
) -> DownloadResult:
    """Download dataset `name` (a registry name, or a DatasetSpec) into `out`; see the module doc.

    `pair` ("en-fr") picks the language pair of a family such as `wmt14` (see `resolve`).

    `mirror` replaces each file's base location: a base URL, or a local directory holding the
    files under their upstream names (copied from disk, no HTTP). Splits already complete
    (per MANIFEST.json) are left alone; with everything present nothing is fetched and the
    result has `up_to_date=True`.
    """
    spec = resolve(name, pair)
    out = Path(out)
    check_range("--timeout", timeout, 0.0, low_open=True)
    if mirror is not None and not is_url(mirror):
        _mirror_dir(mirror)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory; choose a folder")
    with folder_lock(out):  # two downloads into one folder would write the same .part files
        return _download(spec, out, mirror, extra_tests, _Options(mirror, retries, timeout, backoff, progress))


def _download(spec: DatasetSpec, out: Path, mirror: Optional[str], extra_tests: bool, opts: _Options) -> DownloadResult:
    progress = opts.progress
    old = _prepare_out(out, spec)
    splits = spec.selected(extra_tests)
    todo = tuple(s for s in splits if not _split_present(spec, s, out, old))
    result = DownloadResult(spec.name, out, out / MANIFEST, up_to_date=not todo)
    result.skipped = [s.name for s in splits if s not in todo]
    if not todo:
        return result
    local = {f.name: obtain(f, out / CACHE, opts) for f in spec.files(todo)}
    records = _build(spec, todo, out, local, progress)
    with atomic_write(out / MANIFEST, "w") as f:
        manifest = _manifest(spec, old, mirror, todo, local, records)
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
    _fill_result(result, local, records)
    return result


def _fill_result(
    result: DownloadResult, local: dict[str, _Fetched], records: dict[str, dict]
) -> None:
    """Record in `result` what was fetched, reused and written."""
    for item in local.values():
        (result.fetched if item.fetched else result.reused).append(item.file.name)
        result.bytes_fetched += item.received
        if item.file.sha256 is None and item.file.md5 is None:
            result.unverified.append(item.file.name)
    result.written = {name: rec["lines"] for name, rec in records.items()}
