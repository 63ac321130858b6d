"""CTranslate2 conversions of checkpoints, made on first use and kept in the user's cache.

An entry is CACHE/ct2/SHA256, where SHA256 is the checkpoint file's content hash (so a checkpoint that is
moved or copied keeps its entry, and one that is overwritten gets a new one): an `nmt export --format
ctranslate2` folder (float32 weights; CTranslate2 quantises at load time for --int8). It is converted
into a folder beside it and renamed into place when complete, under a lock, so that two processes that
start at once convert once: the second waits, then finds the entry made. An entry is trusted only when
its nmt_export.json names this checkpoint and every file has the size and sha256 recorded at
conversion; otherwise it is converted again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from nmt.core.errors import InputError, OutputError, os_error_message, ref
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.core.usercache import cache_folder, locked
from nmt.inference.ct2_export import EXPORT_VERSION, export_ctranslate2, file_sha256, read_meta

FOLDER = "ct2"  # in the user's cache (nmt.core.usercache)


def converted(model_path: Path, progress: ProgressFn = ignore, sha256: Optional[str] = None) -> Path:
    """The cache entry of the checkpoint `model_path` (its sha256 if known), converted now if missing or
    damaged. OutputError when the cache cannot be written; InputError for an unreadable checkpoint."""
    model_path = Path(model_path)
    sha256 = sha256 or checkpoint_digest(model_path)
    root = cache_folder(FOLDER)
    entry = root / sha256
    if problem(entry, sha256) is None:
        return entry
    with locked(root / f"{sha256}.lock"):
        why = problem(entry, sha256)
        if why is None:  # converted by another process while this one waited
            return entry
        remove_staging(root, sha256)  # left by a conversion that was killed: nobody else holds the lock
        if entry.exists():
            progress(Progress("ctranslate2", message=f"warning: {entry}: {why}; converting the model again"))
            discard(entry)
        try:
            export_ctranslate2(model_path, entry, checkpoint_sha256=sha256)
        except OutputError as e:  # written beside the entry: the cache's disk is full or read-only
            raise OutputError(f"{e}; or set NMT_CACHE_DIR, or translate with {ref('engine')} torch") from None
        # said once it is done, so that a checkpoint that cannot be read is one line of error, and nothing else
        progress(Progress("ctranslate2", message=f"converted {model_path} for CTranslate2 (once) into {entry}"))
    return entry


def rebuild(entry: Path, model_path: Path, progress: ProgressFn = ignore) -> Path:
    """Convert again an entry that CTranslate2 could not load, although its files are as written."""
    sha256 = entry.name
    with locked(entry.parent / f"{sha256}.lock"):
        discard(entry)
    return converted(model_path, progress, sha256)


def checkpoint_digest(model_path: Path) -> str:
    """sha256 of the checkpoint file; InputError naming it when it cannot be read."""
    try:
        return file_sha256(model_path)
    except FileNotFoundError:
        raise InputError(f"{model_path}: no such checkpoint; check {ref('model')}") from None
    except IsADirectoryError:
        raise InputError(f"{model_path}: is a directory; pass a checkpoint file") from None
    except OSError as e:
        raise InputError(os_error_message(e, model_path, "cannot read the checkpoint")) from None


def problem(entry: Path, sha256: str) -> Optional[str]:
    """Why `entry` cannot be trusted as the conversion of the checkpoint `sha256`, or None when it can."""
    if not entry.exists():
        return "missing"
    try:
        meta = read_meta(entry)
    except InputError:
        return "its nmt_export.json is missing or damaged"
    if meta.get("version") != EXPORT_VERSION or meta.get("checkpoint_sha256") != sha256:
        return "it was made by another nmt or of another checkpoint"
    files = meta.get("files")
    if not isinstance(files, dict) or "model.bin" not in files:
        return "it lists no files"
    for name, expected in files.items():
        path = entry / name
        try:
            if path.stat().st_size != expected.get("bytes") or file_sha256(path) != expected.get("sha256"):
                return f"{name} differs from what was written"
        except (OSError, AttributeError):
            return f"{name} is missing"
    return None


def discard(entry: Path) -> None:
    """Remove a cache entry: renamed aside first (at once), then deleted."""
    if not entry.exists():
        return
    aside = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".{entry.name}.discarded."))
    with contextlib.suppress(FileNotFoundError):
        os.replace(entry, aside / "entry")
    shutil.rmtree(aside, ignore_errors=True)


def remove_staging(root: Path, sha256: str) -> None:
    """The folders beside the entry that a killed conversion (or removal) left: `.SHA256.*`."""
    for path in root.glob(f".{sha256}.*"):
        shutil.rmtree(path, ignore_errors=True)
