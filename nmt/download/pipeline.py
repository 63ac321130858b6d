"""`download()`: check the options and the output folder, fetch what is missing, write the splits.

The folder is checked before anything is written to it: it must be empty of the files this
download would write, or hold nmt's MANIFEST.json for the same dataset (a re-run, which leaves
complete splits alone, or a resume). The manifest is written before the first output file and
again after each split, so that it always says which files nmt wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmt.config import check_range
from nmt.core.errors import InputError
from nmt.core.files import folder_lock
from nmt.core.progress import ProgressFn, ignore
from nmt.download.listing import human_bytes
from nmt.download.manifest import (
    MANIFEST,
    is_nmt_manifest,
    make_manifest,
    read_manifest,
    split_present,
    write_manifest,
)
from nmt.download.mirror import Mirror, parse_mirrors
from nmt.download.registry import resolve
from nmt.download.spec import DatasetSpec, Split
from nmt.download.splits import Record, build
from nmt.download.store import CACHE, Fetched, FetchOptions, obtain


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
    # a monolingual dataset's files (written now or before): their counts of lines read, empty, held_out,
    # duplicates, kept (see nmt.download.splits.MonoCounts)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)


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
    lines = [f"{result.dataset}: {got}; wrote {len(result.written)} file(s) in {result.out}; "
             f"manifest {result.manifest}"]
    if result.unverified:
        lines.append(
            f"no published checksum for {', '.join(result.unverified)}: their sha256 is "
            "recorded in the manifest"
        )
    return "\n".join(lines)


def _check_mirror_is_no_output(mirror: Mirror, out: Path) -> None:
    """A mirror folder is read: it may not be --out, nor inside it, where the download writes."""
    if mirror.folder is None:
        return
    folder, target = mirror.folder.resolve(), out.resolve()
    if folder == target or target in folder.parents:
        where = "is the `out` folder" if folder == target else f"is inside `out` {out}"
        raise InputError(
            f"`mirror` {mirror.text!r}: {where}, which the download writes to; give another `out` "
            "(the mirror's files are only read)"
        )


def check_out(out: Path, spec: DatasetSpec, splits: tuple[Split, ...], mirrors: tuple[Mirror, ...]) -> None:
    """InputError, before anything is written, unless `out` may receive this download (see the module doc)."""
    if out.exists() and not out.is_dir():
        raise InputError(f"`out` {out}: exists and is not a directory; choose a folder")
    for mirror in mirrors:
        _check_mirror_is_no_output(mirror, out)
    if not out.is_dir():
        return
    manifest = read_manifest(out)
    if (out / MANIFEST).exists() and not is_nmt_manifest(manifest):
        raise InputError(
            f"`out` {out}: {out / MANIFEST} is not a manifest of nmt download; choose another `out`, or move "
            "that file away"
        )
    if manifest is not None:
        if manifest.get("dataset") != spec.name:
            raise InputError(
                f"`out` {out}: already holds dataset {manifest.get('dataset')!r} "
                f"(see {out / MANIFEST}); choose another folder"
            )
        return  # nmt's own folder: a re-run or a resume
    theirs = [out / name for split in splits for name in spec.outputs(split)
              if (out / name).exists() or (out / name).is_symlink()]
    if theirs:
        more = f" (and {len(theirs) - 1} more)" if len(theirs) > 1 else ""
        raise InputError(
            f"`out` {out}: {theirs[0]}{more} exists and no {MANIFEST} says nmt wrote it; the download would "
            "replace it: choose another `out`, or move the file(s) away"
        )


def download(
    name: str | DatasetSpec,
    out: Path,
    mirror: str | Sequence[str] | None = None,
    pair: str | None = None,
    extra_tests: bool = False,
    progress: ProgressFn = ignore,
    retries: int = 5,
    timeout: float = 30.0,
    backoff: float = 1.0,
) -> DownloadResult:
    """Download dataset `name` (a registry name, or a DatasetSpec) into `out`.

    Writes `OUT/{train,valid,test}.{SRC,TGT}` and `OUT/MANIFEST.json`; raw downloads stay in
    `OUT/.cache/`. `pair` ("en-fr") picks the language pair of a family such as `wmt14` (see
    `resolve`). `mirror` replaces each file's base location: a base URL, or a local folder
    holding the files under their upstream names (copied from disk, no HTTP); several are looked
    in, in order, for each file. Splits already complete (per MANIFEST.json) are left alone; with
    everything present nothing is fetched and the result has `up_to_date=True`.
    """
    spec = resolve(name, pair)
    out = Path(out)
    check_range("`timeout`", timeout, 0.0, low_open=True)
    mirrors = parse_mirrors(mirror)
    splits = spec.selected(extra_tests)
    check_out(out, spec, splits, mirrors)
    opts = FetchOptions(mirrors, retries, timeout, backoff, progress)
    with folder_lock(out):  # two downloads into one folder would write the same .part files
        return _download(spec, out, splits, _as_recorded(mirror), opts)


def _as_recorded(mirror: str | Sequence[str] | None) -> str | list[str] | None:
    """--mirror as the manifest records it: one value as it is, several as a list."""
    if mirror is None or isinstance(mirror, str):
        return mirror
    values = list(mirror)
    if len(values) > 1:
        return values
    return values[0] if values else None


def _download(
    spec: DatasetSpec, out: Path, splits: tuple[Split, ...], mirror: str | list[str] | None, opts: FetchOptions,
) -> DownloadResult:
    old = read_manifest(out)
    todo = tuple(s for s in splits if not split_present(spec, s, out, old))
    result = DownloadResult(spec.name, out, out / MANIFEST, up_to_date=not todo)
    result.skipped = [s.name for s in splits if s not in todo]
    if not todo:
        result.counts = _counts(spec, splits, old["files"] if old else {})
        return result
    local = {f.name: obtain(f, out / CACHE, opts) for f in spec.files(todo)}
    done: list[Split] = []
    records: dict[str, Record] = {}

    def record(split: Split, written: dict[str, Record]) -> None:
        done.append(split)
        records.update(written)
        write_manifest(out, make_manifest(spec, old, mirror, tuple(done), local, records))

    if old is None:  # the folder is nmt's from its first output file on
        write_manifest(out, make_manifest(spec, old, mirror, (), local, {}))
    build(spec, todo, out, local, opts.progress, record)
    _fill_result(result, local, records)
    result.counts = _counts(spec, splits, {**(old or {}).get("files", {}), **records})
    return result


def _counts(spec: DatasetSpec, splits: tuple[Split, ...], files: dict[str, Any]) -> dict[str, dict[str, int]]:
    """The counts of the monolingual splits' files, from their manifest records."""
    return {name: dict(files.get(name, {}).get("counts", {})) for split in splits if split.mono is not None
            for name in spec.outputs(split)}


def _fill_result(result: DownloadResult, local: dict[str, Fetched], records: dict[str, Record]) -> None:
    """Record in `result` what was fetched, reused and written."""
    for item in local.values():
        (result.fetched if item.fetched else result.reused).append(item.file.name)
        result.bytes_fetched += item.received
        if item.file.sha256 is None and item.file.md5 is None:
            result.unverified.append(item.file.name)
    result.written = {name: rec["lines"] for name, rec in records.items()}
