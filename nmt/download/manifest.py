"""`OUT/MANIFEST.json`: what a download wrote (files with lines, bytes, sha256), from what sources.

It tells a re-run which splits are complete (left alone), `nmt download --verify` what to check,
and `download` that a folder is nmt's to write into.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from nmt import __version__
from nmt.core.errors import DownloadError
from nmt.core.files import atomic_write
from nmt.download.fetch import size_of
from nmt.download.spec import DatasetSpec, Split
from nmt.download.store import Fetched, file_digests

MANIFEST = "MANIFEST.json"
Manifest = dict[str, Any]


def read_manifest(out: Path) -> Manifest | None:
    """OUT/MANIFEST.json as a dict, or None when absent or unreadable."""
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (FileNotFoundError, IsADirectoryError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def is_nmt_manifest(manifest: Manifest | None) -> bool:
    """Whether a parsed MANIFEST.json is one nmt wrote (a dataset name, files and splits)."""
    return (
        manifest is not None and isinstance(manifest.get("dataset"), str)
        and isinstance(manifest.get("files"), dict) and isinstance(manifest.get("splits"), dict)
    )


def write_manifest(out: Path, manifest: Manifest) -> None:
    """Write OUT/MANIFEST.json atomically."""
    with atomic_write(out / MANIFEST, "w") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _file_sha256(path: Path) -> str:
    return file_digests(path)[0]


def held_out_from(split: Split) -> tuple[list[str], list[str]]:
    """The sources whose lines each side of a monolingual split leaves out (none for another split)."""
    held = split.mono.held if split.mono is not None else ()
    return ([s.describe() for h in held for s in h.src], [s.describe() for h in held for s in h.tgt])


def split_present(spec: DatasetSpec, split: Split, out: Path, manifest: Manifest | None) -> bool:
    """True when the manifest records the split and both files are there with the recorded size and sha256
    (and, for a monolingual split, written without the lines of the same held-out splits)."""
    if not manifest:
        return False
    files = manifest.get("files", {})
    for name, held in zip(spec.outputs(split), held_out_from(split)):
        record = files.get(name)
        if not isinstance(record, dict) or not (out / name).is_file():
            return False
        if record.get("held_out_from", []) != held:
            return False  # written with or without the extra test sets: the other choice writes it again
        if size_of(out / name) != record.get("bytes") or _file_sha256(out / name) != record.get("sha256"):
            return False  # changed in place since it was written: write the split again
    return split.name in manifest.get("splits", {})


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
        elif size_of(path) != record.get("bytes"):
            problems.append(f"{path}: {size_of(path):,} bytes, the manifest says {record.get('bytes'):,}")
        elif _file_sha256(path) != record.get("sha256"):
            problems.append(f"{path}: sha256 differs from the manifest's (changed since it was written)")
        else:
            good.append(name)
    return good, problems


def _source_records(sources: dict[str, Any], fetched: dict[str, Fetched]) -> dict[str, Any]:
    """Manifest records of the downloaded files, updating those of earlier runs."""
    for item in fetched.values():
        earlier = sources.get(item.file.name, {})
        where = item.where if item.fetched else earlier.get("fetched_from", item.where)
        sources[item.file.name] = {
            "url": item.file.url,
            "fetched_from": where,
            "bytes": size_of(item.path),
            "sha256": item.sha256,
            "expected_sha256": item.file.sha256,
            "expected_md5": item.file.md5,
            "verified": item.file.sha256 is not None or item.file.md5 is not None,
        }
    return sources


def make_manifest(
    spec: DatasetSpec,
    old: Manifest | None,
    mirror: str | list[str] | None,
    splits: tuple[Split, ...],
    fetched: dict[str, Fetched],
    records: dict[str, Any],
) -> Manifest:
    """The new manifest: the old one's entries, updated with the `splits` written this run."""
    sources = _source_records(dict(old.get("sources", {})) if old else {}, fetched)
    files = dict(old.get("files", {})) if old else {}
    files.update(records)
    split_info = dict(old.get("splits", {})) if old else {}
    for split in splits:
        src, tgt = spec.outputs(split)
        if split.mono is not None:  # its sides differ in length: lines and counts are per file
            split_info[split.name] = {
                "src": src, "tgt": tgt, "monolingual": True, "lines": {n: files[n]["lines"] for n in (src, tgt)},
                "expected_read": split.lines, "held_out": [h.name for h in split.mono.held],
                "counts": {n: files[n]["counts"] for n in (src, tgt)},
            }
            continue
        split_info[split.name] = {"src": src, "tgt": tgt, "lines": files[src]["lines"], "expected_lines": split.lines}
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
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "mirror": mirror,
        "splits": split_info,
        "files": files,
        "sources": sources,
    }
