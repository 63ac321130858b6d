"""The cache of CTranslate2 conversions (nmt.engines.conversions) and the leftovers of killed writers.

An entry is verified before use: any byte flipped, removed or added in any of its files, or an export of other
options written over it, makes the next use convert again and translate exactly as a clean conversion. Staging
folders and temporary files carry their writer's pid: the next run removes those of dead writers and keeps a
live process's. A process that waits for another's conversion says so, naming its pid, before it waits.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_export import random_checkpoint

from nmt.core.files import owned_prefix, pid_alive, remove_dead_leftovers
from nmt.core.progress import Progress
from nmt.engines.search import SearchConfig

ct2 = pytest.importorskip("ctranslate2")

from nmt.engines import conversions  # noqa: E402  (after the skip: it needs ctranslate2's converter)
from nmt.engines.ct2_engine import CTranslate2Engine  # noqa: E402
from nmt.engines.ct2_export import MANIFEST_FILE, export_ctranslate2, read_manifest  # noqa: E402

LINES = ["a small dog runs", "two men sit on the grass", "the red house", "water"]
SETTINGS = settings(derandomize=True, max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def ckpt(tiny_bpe, tmp_path_factory) -> Path:
    return random_checkpoint(tmp_path_factory.mktemp("conv") / "r.pt", tiny_bpe)


@pytest.fixture(scope="module")
def reference(ckpt, tmp_path_factory) -> list[str]:
    """The translations of LINES by a clean export of `ckpt`."""
    return translations(export_ctranslate2(ckpt, tmp_path_factory.mktemp("clean") / "ct2").out_dir)


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / conversions.FOLDER


def translations(folder: Path) -> list[str]:
    translator = CTranslate2Engine(folder, SearchConfig(beam=2), threads=1)
    return [t.text for t in translator.translate_chunk(LINES)]


def messages(events: list[Progress]) -> list[str]:
    return [e.message for e in events if e.message]


def dead_pid() -> int:
    """The pid of a child that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid)
    return child.pid


# -- verification ------------------------------------------------------------------------------------


def damaged(data: bytes, how: str, at: int, byte: int) -> bytes:
    at = at % max(len(data), 1)
    if how == "flip":
        return data[:at] + bytes([data[at] ^ (byte or 1)]) + data[at + 1:] if data else b"x"
    if how == "remove":
        return data[:at] + data[at + 1:]
    if how == "truncate":
        return data[:at]
    return data + bytes([byte])  # append


@SETTINGS
@given(which=st.integers(0, 20), how=st.sampled_from(["flip", "remove", "truncate", "append"]),
       at=st.integers(0, 1 << 30), byte=st.integers(0, 255))
def test_any_damage_is_converted_again(ckpt, reference, cache, which, how, at, byte):
    entry = conversions.converted(ckpt)
    manifest = read_manifest(entry)
    assert manifest is not None
    names = sorted([*manifest["files"], MANIFEST_FILE])
    path = entry / names[which % len(names)]
    path.write_bytes(damaged(path.read_bytes(), how, at, byte))
    assert conversions.problem(entry, entry.name) is not None
    events: list[Progress] = []
    assert conversions.converted(ckpt, events.append) == entry
    warnings = [m for m in messages(events) if m.startswith("warning: the cached conversion")]
    assert len(warnings) == 1 and "is damaged (" in warnings[0] and warnings[0].endswith("; converting again")
    assert conversions.problem(entry, entry.name) is None
    assert translations(entry) == reference


def test_an_export_of_other_options_over_the_entry_is_converted_again(ckpt, reference, cache):
    entry = conversions.converted(ckpt)
    export_ctranslate2(ckpt, entry, quantization="int8", force=True)  # `nmt export --force` over the cache
    assert conversions.problem(entry, entry.name) == "its weights are int8, not float32"
    assert conversions.problem(entry, "0" * 64) == "it is a conversion of another checkpoint"
    events: list[Progress] = []
    conversions.converted(ckpt, events.append)
    assert any("weights are int8" in m and "converting again" in m for m in messages(events))
    assert translations(entry) == reference


def test_the_hashes_are_checked_again_only_when_a_file_changed(ckpt, cache, monkeypatch):
    entry = conversions.converted(ckpt)
    monkeypatch.setattr(conversions, "SETTLED_NS", 0)  # trust files written just now (a test cannot wait 2 s)
    assert conversions.problem(entry, entry.name) is None and (entry / conversions.STAMP).is_file()
    with monkeypatch.context() as m:
        m.setattr(conversions, "file_sha256", lambda path: pytest.fail(f"hashed {path}"))
        assert conversions.problem(entry, entry.name) is None
    model = entry / "model.bin"
    before = model.stat()
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    while model.stat().st_ctime_ns == before.st_ctime_ns:  # a coarse clock: write until the file's times move
        model.write_bytes(bytes(data))
    os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime set back: its ctime still tells
    assert conversions.problem(entry, entry.name) == "model.bin differs from what was written"


# -- leftovers of killed writers ---------------------------------------------------------------------


def leftover(folder: Path, name: str, pid: int, kind: str, tag: str = "k3x_9q") -> Path:
    """A staging folder (with a partial file) or a temporary file as a writer with `pid` leaves it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (f".{name}.{pid}.{tag}" + (".tmp" if kind == "file" else ""))
    if kind == "file":
        path.write_bytes(b"PK\x03\x04 half a checkpoint")
    else:
        (path / "model").mkdir(parents=True)
        (path / "model" / "model.bin").write_bytes(b"half a model")
    return path


@SETTINGS
@given(where=st.sampled_from(["cache", "export"]), alive=st.lists(st.booleans(), min_size=1, max_size=3))
def test_dead_writers_leftovers_are_removed_live_ones_kept(ckpt, reference, cache, tmp_path, where, alive):
    out = cache / conversions.checkpoint_digest(ckpt) if where == "cache" else tmp_path / "out" / "ct2"
    pids = [os.getpid() if a else dead_pid() for a in alive]
    made = [leftover(out.parent, out.name, pid, "folder", f"x{i}") for i, pid in enumerate(pids)]
    conversions.discard(out)
    if where == "cache":
        conversions.converted(ckpt)
    else:
        export_ctranslate2(ckpt, out, force=True)
    assert [p.exists() for p in made] == alive
    assert translations(out) == reference
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")) == \
        sorted(p.name for p, a in zip(made, alive) if a)  # and no staging folder of these conversions
    for path in made:
        shutil.rmtree(path, ignore_errors=True)  # the test's own (a live pid's): for the next example


def test_leftover_names_are_matched_exactly(tmp_path):
    """Only `.NAME.PID.RANDOM[SUFFIX]` of a dead pid: other names, other files and a live pid's stay."""
    dead = dead_pid()
    keep = [f".m.pt.{os.getpid()}.abc.tmp", f".m.pt.{dead}.abc", f".m.ptx.{dead}.abc.tmp", f"m.pt.{dead}.abc.tmp",
            f".m.pt.{dead}.ABC.tmp", f".m.pt.x{dead}.abc.tmp", ".m.pt.abc123.tmp", "m.pt", ".m.pt.0.abc.tmp",
            ".m.pt.99999999999999999999999.abc.tmp"]
    for name in keep + [f".m.pt.{dead}.abc_12.tmp"]:
        (tmp_path / name).write_bytes(b"x")
    assert remove_dead_leftovers(tmp_path, "m.pt", ".tmp") == [tmp_path / f".m.pt.{dead}.abc_12.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)
    assert owned_prefix("m.pt") == f".m.pt.{os.getpid()}."


KILLED_EXPORT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import nmt.engines.ct2_export as export
    def stop(*args):
        print("converted", flush=True)
        time.sleep(600)
    export._write_nmt_files = stop  # killed after CTranslate2 saved the model into the staging folder
    export.export_ctranslate2(Path(sys.argv[1]), Path(sys.argv[2]))
""")

KILLED_WRITE = textwrap.dedent("""
    import sys, time
    from nmt.core.files import atomic_write
    with atomic_write(sys.argv[1]) as f:
        f.write(b"x" * 100000)
        f.flush()
        print("written", flush=True)
        time.sleep(600)
""")


def killed(script: str, *args: object) -> int:
    """Run `script` in a child, SIGKILL it once it has printed a line; its pid."""
    child = subprocess.Popen([sys.executable, "-c", script, *map(str, args)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    return child.pid


def test_an_export_killed_midway_is_cleaned_by_the_next(ckpt, reference, tmp_path):
    out = tmp_path / "ct2"
    pid = killed(KILLED_EXPORT, ckpt, out)
    staging = [p for p in tmp_path.iterdir() if p.name.startswith(f".ct2.{pid}.")]
    assert len(staging) == 1 and (staging[0] / "model" / "model.bin").is_file() and not out.exists()
    export_ctranslate2(ckpt, out)
    assert not staging[0].exists() and translations(out) == reference


def test_an_import_killed_midway_is_cleaned_by_the_next(ckpt, tmp_path, monkeypatch):
    from nmt.model import checkpoint
    from nmt.workflows import model_files

    out = tmp_path / "imported.pt"
    pid = killed(KILLED_WRITE, out)
    temporary = [p for p in tmp_path.iterdir() if p.name.startswith(f".imported.pt.{pid}.")]
    assert len(temporary) == 1 and temporary[0].stat().st_size == 100000
    live = leftover(tmp_path, out.name, os.getpid(), "file")

    loaded = checkpoint.load(ckpt)
    monkeypatch.setattr(model_files, "import_marian", lambda folder, src, tgt: SimpleNamespace(checkpoint=loaded))
    model_files.import_marian_into(out, tmp_path / "marian", None, None)
    assert not temporary[0].exists() and live.exists() and checkpoint.load(out).model_config.vocab_size > 0


# -- waiting for another process ---------------------------------------------------------------------


HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from nmt.core.usercache import locked
    with locked(Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(600)
""")


def test_a_wait_for_another_process_is_said_naming_its_pid(ckpt, reference, cache):
    sha = conversions.checkpoint_digest(ckpt)
    cache.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(cache / f"{sha}.lock")], stdout=subprocess.PIPE,
                              text=True)
    said = threading.Event()
    events: list[Progress] = []

    def progress(event: Progress) -> None:
        events.append(event)
        if event.message and event.message.startswith("waiting for"):
            said.set()

    result: list[Path] = []
    worker = threading.Thread(target=lambda: result.append(conversions.converted(ckpt, progress)))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        worker.start()
        assert said.wait(timeout=60)  # said while the other process still holds the lock
        assert holder.poll() is None and not result
    finally:
        holder.send_signal(signal.SIGKILL)  # a killed holder's lock is released by the kernel
        holder.wait()
    worker.join(timeout=300)
    assert messages(events)[0] == f"waiting for pid {holder.pid} (converting {ckpt}) ..."
    assert result == [cache / sha] and translations(result[0]) == reference
