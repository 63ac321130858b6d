"""CTranslate2 conversions of checkpoints, made on first use and kept in the user's cache.

An entry is CACHE/ct2/SHA256, where SHA256 is the checkpoint file's content hash (so a checkpoint that is
moved or copied keeps its entry, and one that is overwritten gets a new one): an `nmt export --format
ctranslate2` folder (float32 weights; CTranslate2 quantises at load time for --int8). It is converted
into a folder beside it (`.SHA256.PID.RANDOM`) and renamed into place when complete, under a lock
(CACHE/ct2/SHA256.lock, holding the converter's pid), so that two processes that start at once convert once:
the second says that it waits for that pid, waits, then finds the entry made. The folders of conversions that
were killed are removed by the next conversion of the checkpoint (by their pid: never a live process's).

An entry is trusted only when its nmt_manifest.json (written last, atomically) is intact, says that it is a
conversion of this checkpoint with float32 weights by this nmt, and every file has the size and sha256 it
records; otherwise it is converted again, saying why. Hashing costs about 0.13 s per 250 MB (one core of a
Zen 5 EPYC), so the files' identities (size, mtime, ctime, inode) at a complete check are kept in the entry's
`.nmt_verified.json`, and the hashes are computed again only when one of them changed: writing to a file
changes its ctime, which no program can set back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from nmt.core.errors import InputError, OutputError, os_error_message, ref
from nmt.core.files import atomic_write, owned_prefix, remove_dead_leftovers
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.core.usercache import cache_folder, locked
from nmt.engines.ct2_export import (
    MANIFEST_FILE,
    META_FILE,
    export_ctranslate2,
    file_sha256,
    identity,
    read_manifest,
    read_meta,
)

FOLDER = "ct2"  # in the user's cache (nmt.core.usercache)
QUANTIZATION: Optional[str] = None  # the weights of an entry: float32 (CTranslate2 quantises at load time)
STAMP = ".nmt_verified.json"  # in the entry: not one of its files (the manifest does not list it)
SETTLED_NS = 2_000_000_000  # a file changed within this of a check is hashed again next time (coarse clocks)


def converted(model_path: Path, progress: ProgressFn = ignore, sha256: Optional[str] = None) -> Path:
    """The cache entry of the checkpoint `model_path` (its sha256 if known), converted now if missing or
    damaged. OutputError when the cache cannot be written; InputError for an unreadable checkpoint."""
    model_path = Path(model_path)
    sha256 = sha256 or checkpoint_digest(model_path)
    root = cache_folder(FOLDER)
    entry = root / sha256
    remove_dead_leftovers(root, sha256)  # folders of conversions (or removals) that were killed
    remove_dead_leftovers(entry, STAMP, ".tmp")  # the stamp's temporary file, of a use killed while writing it
    if problem(entry, sha256) is None:
        return entry
    with locked(root / f"{sha256}.lock", waiting_message(model_path, progress)):
        why = problem(entry, sha256)
        if why is None:  # converted by another process while this one waited
            return entry
        if entry.exists():
            progress(Progress("ctranslate2", message=f"warning: the cached conversion {entry} is damaged ({why}); "
                                                     "converting again"))
        try:
            discard(entry)
            export_ctranslate2(model_path, entry, quantization=QUANTIZATION, checkpoint_sha256=sha256)
        except OutputError as e:  # removed or written beside the entry: the cache's disk is full or read-only
            raise OutputError(f"{e}; or set NMT_CACHE_DIR, or translate with {ref('engine')} torch") from None
        # said once it is done, so that a checkpoint that cannot be read is one line of error, and nothing else
        progress(Progress("ctranslate2", message=f"converted {model_path} for CTranslate2 (once) into {entry}"))
    return entry


def rebuild(entry: Path, model_path: Path, progress: ProgressFn = ignore) -> Path:
    """Convert again an entry that CTranslate2 could not load, although its files are as written."""
    sha256 = entry.name
    with locked(entry.parent / f"{sha256}.lock", waiting_message(model_path, progress)):
        discard(entry)
    return converted(model_path, progress, sha256)


def waiting_message(model_path: Path, progress: ProgressFn) -> Callable[[Optional[int]], None]:
    """What `locked` calls when another process holds the lock: one line on `progress`, naming it."""
    def waiting(pid: Optional[int]) -> None:
        who = f"pid {pid}" if pid is not None else "another nmt process"
        progress(Progress("ctranslate2", message=f"waiting for {who} (converting {model_path}) ..."))
    return waiting


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


def problem(entry: Path, sha256: str, quantization: Optional[str] = QUANTIZATION) -> Optional[str]:
    """Why `entry` cannot be trusted as the conversion of the checkpoint `sha256` with `quantization`, or None
    when it can."""
    if not entry.exists():
        return "missing"
    try:
        read_meta(entry)
    except InputError:
        return f"its {META_FILE} is missing or damaged"
    manifest = read_manifest(entry)
    if manifest is None:
        return "its nmt_manifest.json is missing or damaged"
    why = other_conversion(manifest.get("identity"), identity(sha256, quantization))
    if why:
        return why
    files: dict[str, Any] = manifest["files"]
    if "model.bin" not in files or META_FILE not in files:
        return "its manifest lists no model"
    stats: dict[str, list[int]] = {}
    for name, record in files.items():
        try:
            stats[name] = identity_of(entry / name)
        except (OSError, ValueError):
            return f"{name} is missing"
        if stats[name][0] != record.get("bytes"):
            return f"{name} differs from what was written"
    stats[MANIFEST_FILE] = identity_of(entry / MANIFEST_FILE)
    if read_stamp(entry) == stats:
        return None
    for name, record in files.items():
        try:
            if file_sha256(entry / name) != record.get("sha256"):
                return f"{name} differs from what was written"
        except OSError:
            return f"{name} cannot be read"
    write_stamp(entry, stats)
    return None


def other_conversion(found: Any, wanted: dict[str, Any]) -> Optional[str]:
    """Why the manifest's identity `found` is not `wanted`, or None when it is."""
    if found == wanted:
        return None
    if not isinstance(found, dict) or found.get("export_version") != wanted["export_version"]:
        return "it was made by another nmt"
    if found.get("checkpoint_sha256") != wanted["checkpoint_sha256"]:
        return "it is a conversion of another checkpoint"
    if found.get("quantization") != wanted["quantization"]:
        return f"its weights are {found.get('quantization') or 'float32'}, not {wanted['quantization'] or 'float32'}"
    return "it is not a conversion with these options"


def identity_of(path: Path) -> list[int]:
    """What changes whenever the file does: size, mtime, ctime, inode and device."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def read_stamp(entry: Path) -> Optional[dict[str, Any]]:
    """The files' identities at the entry's last complete check, or None."""
    with contextlib.suppress(OSError, ValueError):
        stamp = json.loads((entry / STAMP).read_text(encoding="utf-8"))
        return stamp if isinstance(stamp, dict) else None
    return None


def write_stamp(entry: Path, stats: dict[str, list[int]]) -> None:
    """Record that the files with `stats` were checked whole; not when one changed so recently that a change
    now could keep its times (file systems stamp with a coarse clock), nor when the cache cannot be written."""
    settled = time.time_ns() - SETTLED_NS
    if any(max(s[1], s[2]) > settled for s in stats.values()):
        return
    with contextlib.suppress(OSError, OutputError), atomic_write(entry / STAMP, "w") as f:
        f.write(json.dumps(stats, sort_keys=True) + "\n")


def discard(entry: Path) -> None:
    """Remove a cache entry: renamed aside first (at once), then deleted. OutputError naming it when it cannot be
    (a full or read-only cache)."""
    if not entry.exists():
        return
    aside: Optional[Path] = None
    try:
        aside = Path(tempfile.mkdtemp(dir=entry.parent, prefix=owned_prefix(entry.name)))
        with contextlib.suppress(FileNotFoundError):
            os.replace(entry, aside / "entry")
    except OSError as e:
        raise OutputError(os_error_message(e, entry, "cannot remove the cached conversion")) from e
    finally:
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
