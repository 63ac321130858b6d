"""Writing the output files: `OUT/SPLIT.SRC` and `OUT/SPLIT.TGT`, plain UTF-8, one sentence a line.

Each side is the concatenation of its sources (text files, archive members, SGML or TSV, read by
`nmt.download.formats`), or, for a held-out split, its part of the sources' pairs, or, for a
monolingual split, its sources' distinct lines less those of the held-out splits (`MonoCounts`
says how many of each kind). Both files of a split are written atomically, together, and their
line counts checked.
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from nmt.core.errors import DownloadError, InputError
from nmt.core.files import atomic_write
from nmt.core.progress import ProgressFn
from nmt.download.archives import member_name, safe_extract
from nmt.download.events import Reporter, say
from nmt.download.formats import source_lines
from nmt.download.spec import DatasetSpec, Source, Split
from nmt.download.store import CACHE, Fetched

Record = dict[str, Any]  # a file's manifest record: lines, bytes, sha256, from
OnWritten = Callable[[Split, dict[str, Record]], None]


def source_paths(splits: tuple[Split, ...], local: dict[str, Fetched], work: Path) -> dict[Source, Path]:
    """The local file of every source: its download, or its member extracted in `work/ARCHIVE/`."""
    sources = [source for split in splits for source in split.inputs]
    wanted: dict[str, set[str]] = {}
    for source in sources:
        if source.member is not None:
            wanted.setdefault(source.file.name, set()).add(source.member)
    found = {name: safe_extract(local[name].path, work / name, m) for name, m in wanted.items()}
    return {
        s: found[s.file.name][member_name(s.member)] if s.member else local[s.file.name].path
        for s in sources
    }


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


def _side_lines(sources: tuple[Source, ...], paths: dict[Source, Path]) -> Iterator[str]:
    """The lines of one side: its sources' lines, one after the other."""
    for source in sources:
        try:
            yield from source_lines(source, paths[source])
        except InputError as e:
            raise DownloadError(f"{e} (from {source.describe()})") from None


def _write_side(
    sources: tuple[Source, ...], paths: dict[Source, Path], out: IO[bytes], progress: ProgressFn, task: str,
) -> tuple[int, str, int]:
    """Concatenate the sources' lines into `out`, reporting bytes; return (lines, sha256, bytes)."""
    side = _Side(out)
    report = Reporter(progress, task, None)
    for text in _side_lines(sources, paths):
        side.write(text)
        if side.lines % 10_000 == 0:
            report(side.size)
    report.total = side.size
    report(side.size, force=True)
    return side.result()


def _check_lines(split: Split, names: tuple[str, str], counts: tuple[int, int], cache: Path) -> None:
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


def _write_held_out(
    split: Split, names: tuple[str, str], paths: dict[Source, Path], files: tuple[IO[bytes], IO[bytes]],
    progress: ProgressFn, cache: Path,
) -> list[tuple[int, str, int]]:
    """Write this split's part of the sources' pairs (see `Holdout`), both sides in step."""
    holdout = split.holdout
    assert holdout is not None

    def numbered() -> Iterator[tuple[int, str, str]]:
        pairs = itertools.zip_longest(_side_lines(split.src, paths), _side_lines(split.tgt, paths))
        for n, (src, tgt) in enumerate(pairs, 1):
            if src is None or tgt is None:
                shorter = names[0] if src is None else names[1]
                raise DownloadError(
                    f"{split.name}: the sources of {shorter} end at line {n - 1}, the other side's go on; "
                    f"the sources are not parallel, delete {cache} and re-run"
                )
            yield n, src, tgt

    held: set[tuple[str, str]] = set()  # train: the valid and test pairs (2 in `every`), a first pass
    if split.name == "train":
        held = {(src, tgt) for n, src, tgt in numbered() if holdout.part(n, src, tgt) != "train"}
    sides = (_Side(files[0]), _Side(files[1]))
    report = Reporter(progress, f"write {names[0]}", None)
    for n, src, tgt in numbered():
        if holdout.part(n, src, tgt) == split.name and (src, tgt) not in held:
            sides[0].write(src)
            sides[1].write(tgt)
        if n % 10_000 == 0:
            report(sides[0].size)
    report.total = sides[0].size
    report(sides[0].size, force=True)
    return [side.result() for side in sides]


@dataclass
class MonoCounts:
    """The lines of one side of a monolingual split: `read` = `empty` + `held_out` + `duplicates` + `kept`."""

    read: int = 0
    empty: int = 0  # empty or blank lines
    held_out: int = 0  # equal to a line of a held-out split (each occurrence counted here, not as a duplicate)
    duplicates: int = 0  # repeats of a line kept before
    kept: int = 0


def _held_lines(held: tuple[Split, ...], side: int, paths: dict[Source, Path], cache: Path) -> set[str]:
    """The lines of one side (0: source, 1: target) of the held-out splits, whose line counts are checked."""
    lines: set[str] = set()
    for split in held:
        sources = (split.src, split.tgt)[side]
        n = 0
        for n, text in enumerate(_side_lines(sources, paths), 1):  # noqa: B007 (n: the count)
            lines.add(text)
        if split.lines is not None and n != split.lines:
            raise DownloadError(
                f"held-out {split.name}: {', '.join(s.file.name for s in sources)} has {n} lines, expected "
                f"{split.lines}; the downloaded files are not the expected ones, delete {cache} and re-run"
            )
    return lines


def _write_mono_side(
    sources: tuple[Source, ...], held: set[str], paths: dict[Source, Path], out: IO[bytes], progress: ProgressFn,
    task: str,
) -> tuple[tuple[int, str, int], MonoCounts]:
    """Write the first occurrence of each line of the sources that is neither blank nor held out."""
    side, counts, seen = _Side(out), MonoCounts(), set()
    report = Reporter(progress, task, None)
    for text in _side_lines(sources, paths):
        counts.read += 1
        if not text.strip():
            counts.empty += 1
        elif text in held:
            counts.held_out += 1
        elif text in seen:
            counts.duplicates += 1
        else:
            seen.add(text)
            side.write(text)
        if counts.read % 10_000 == 0:
            report(side.size)
    counts.kept = side.lines
    report.total = side.size
    report(side.size, force=True)
    return side.result(), counts


def _write_mono(
    split: Split, names: tuple[str, str], paths: dict[Source, Path], files: tuple[IO[bytes], IO[bytes]],
    progress: ProgressFn, cache: Path,
) -> tuple[list[tuple[int, str, int]], list[Record]]:
    """Write each side of a monolingual split on its own (see `Mono`); return the results and the records'
    extra fields: the held-out sources and the counts."""
    assert split.mono is not None
    results, extras = [], []
    for side, (name, sources, f) in enumerate(zip(names, (split.src, split.tgt), files)):
        held = _held_lines(split.mono.held, side, paths, cache)
        result, counts = _write_mono_side(sources, held, paths, f, progress, f"write {name}")
        if split.lines is not None and counts.read != split.lines:
            raise DownloadError(
                f"{split.name}: the sources of {name} have {counts.read} lines, expected {split.lines}; the "
                f"downloaded files are not the expected ones, delete {cache} and re-run"
            )
        results.append(result)
        held_from = [s.describe() for h in split.mono.held for s in (h.src, h.tgt)[side]]
        extras.append({"held_out_from": held_from, "counts": asdict(counts)})
    return results, extras


def write_split(
    spec: DatasetSpec, split: Split, out: Path, paths: dict[Source, Path], progress: ProgressFn,
) -> dict[str, Record]:
    """Write OUT/SPLIT.SRC and OUT/SPLIT.TGT atomically (both or neither); return their records."""
    names = spec.outputs(split)
    sides = (split.src, split.tgt)
    records: dict[str, Record] = {}
    extras: list[Record] = [{}, {}]
    with atomic_write(out / names[0]) as fs, atomic_write(out / names[1]) as ft:
        if split.mono is not None:
            results, extras = _write_mono(split, names, paths, (fs, ft), progress, out / CACHE)
        elif split.holdout is not None:
            results = _write_held_out(split, names, paths, (fs, ft), progress, out / CACHE)
        else:
            results = [
                _write_side(sources, paths, f, progress, f"write {name}")
                for name, sources, f in zip(names, sides, (fs, ft))
            ]
        if split.mono is None:
            _check_lines(split, names, (results[0][0], results[1][0]), out / CACHE)
    for name, sources, (lines, sha, size), extra in zip(names, sides, results, extras):
        origin = [s.describe() for s in sources]
        records[name] = {"lines": lines, "bytes": size, "sha256": sha, "from": origin, **extra}
        say(progress, f"write {name}", f"wrote {out / name} ({lines:,} lines{_dropped(extra)})")
    return records


def _dropped(extra: Record) -> str:
    """The end of a monolingual file's message (" of N read; dropped ..."), "" for another file's."""
    if "counts" not in extra:
        return ""
    c = extra["counts"]
    return (f" of {c['read']:,} read; dropped {c['duplicates']:,} duplicates, {c['held_out']:,} held-out, "
            f"{c['empty']:,} empty")


def build(
    spec: DatasetSpec, splits: tuple[Split, ...], out: Path, local: dict[str, Fetched], progress: ProgressFn,
    on_written: OnWritten,
) -> dict[str, Record]:
    """Extract what is needed into a scratch folder, write every split (telling `on_written` of each
    as soon as its files are in place), remove the scratch; return every file's record."""
    work = out / CACHE / "extract"
    shutil.rmtree(work, ignore_errors=True)
    try:
        paths = source_paths(splits, local, work)
        records: dict[str, Record] = {}
        for split in splits:
            written = write_split(spec, split, out, paths, progress)
            records.update(written)
            on_written(split, written)
        return records
    finally:
        shutil.rmtree(work, ignore_errors=True)
