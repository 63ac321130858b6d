"""Kill points: `nmt import marian`, `nmt export` and the cache of CTranslate2 conversions, interrupted anywhere.

Each example runs the command in a child process that stops at a point hypothesis chooses (and one test stops it at
every point in turn), then checks:
- the destination is absent, as it was before, or whole and equal to a clean run's: never half-written;
- what the dead child left (temporaries, staging folders) carries its pid, so that the next run can remove it;
- the next run succeeds, leaves nothing else behind, and writes exactly what a clean run writes.

Two ways to stop, both deterministic (the same point on every run, so CI never fails by chance):
- at the N-th change to the file system under the test's folder (creating, opening for writing, renaming,
  removing, chmod: Python's audit events, seen by an audit hook), by SIGKILL or by an OSError (ENOSPC) there;
- when a file grows past K bytes (RLIMIT_FSIZE): SIGXFSZ kills the child mid-write, or (signal ignored, as
  Python has it) the write fails with EFBIG.
The children are forked from one process that has imported everything once (torch, CTranslate2, nmt's CLI), so an
example costs the command itself, not an interpreter's start.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if not sys.platform.startswith("linux"):
    pytest.skip("fork, audit hooks, RLIMIT_FSIZE and SIGXFSZ as Linux has them", allow_module_level=True)
pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from test_export import random_checkpoint  # noqa: E402
from test_import_marian import build_folder, make_tokenizer_files  # noqa: E402

SETTINGS = settings(derandomize=True, max_examples=15, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
STAMP = ".nmt_verified.json"  # the cache's record of a complete check: not part of what a conversion writes

# The process that forks one child per run. A request is a JSON line; the answer is a JSON line with the child's
# pid, its exit status (negative: killed by that signal), what it printed, and the file-system events it counted.
FORKER = textwrap.dedent(r"""
    import errno, json, os, resource, signal, sys, traceback
    from pathlib import Path
    import torch, ctranslate2, ctranslate2.converters, ctranslate2.specs
    import nmt.cli.main, nmt.cli.console, nmt.workflows.model_files, nmt.importers.marian
    import nmt.engines.ct2_export, nmt.engines.conversions
    import safetensors.torch, tabulate, torch._dynamo, torch.utils._device, torch.utils.serialization, typer._adapters
    from nmt.core.errors import NmtError
    torch.set_num_threads(1)
    MUTATING = {"open", "os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.truncate",
                "shutil.rmtree", "tempfile.mkstemp", "tempfile.mkdtemp"}
    OS_ERRORS = MUTATING - {"shutil.rmtree", "tempfile.mkstemp", "tempfile.mkdtemp"}  # what the system itself does

    def writes(event, args):
        if event != "open":
            return True
        mode, flags = args[1], args[2]
        return any(c in mode for c in "wax+") if mode is not None else bool(flags & (os.O_WRONLY | os.O_RDWR))

    def stop_at(root, kill):
        count = [0]
        def hook(event, args):
            if event not in MUTATING or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
                return
            path = os.fsdecode(os.fspath(args[0]))
            if not path.startswith(root) or not writes(event, args):
                return
            count[0] += 1
            if kill.get("mode") == "event" and count[0] == kill["n"] + 1:
                if kill["action"] == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                elif event in OS_ERRORS:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        sys.addaudithook(hook)
        if kill.get("mode") == "bytes":
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL if kill["action"] == "kill" else signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (kill["n"], resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        return count

    def run(request):
        signal.alarm(120)  # a child that hangs ends (SIGALRM) rather than the test
        os.environ.update(request.get("env", {}))
        if request.get("settled_ns") is not None:
            nmt.engines.conversions.SETTLED_NS = request["settled_ns"]
        count = stop_at(request["root"], request.get("kill", {}))
        code = 0
        try:
            if request["argv"]:
                sys.argv = ["nmt", *request["argv"]]
                nmt.cli.main.main()
            else:
                nmt.engines.conversions.converted(Path(request["model"]))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except NmtError as e:
            print(f"error: {e}", file=sys.stderr)
            code = 1
        except BaseException:
            traceback.print_exc()
            code = 3
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(3, json.dumps(count[0]).encode())
        os._exit(code)

    for line in sys.stdin:
        request = json.loads(line)
        out_r, out_w = os.pipe()
        count_r, count_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(out_r)
            os.close(count_r)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            os.dup2(count_w, 3)
            run(request)
        os.close(out_w)
        os.close(count_w)
        with os.fdopen(out_r, "rb") as f:
            output = f.read().decode("utf-8", "replace")
        with os.fdopen(count_r, "rb") as f:
            counted = f.read()
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        answer = {"pid": pid, "code": code, "output": output, "events": json.loads(counted) if counted else None}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
""")


class Forker:
    """The forking process (one per module): `run(request)` runs one command in a new child."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("NMT_DEBUG", "FORCE_COLOR", "PYTHONWARNINGS")}
        env.update(PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NO_COLOR="1")
        self.process = subprocess.Popen([sys.executable, "-c", FORKER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env)
        self.lock = threading.Lock()

    def run(self, request: dict) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        with self.lock:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        assert line, "the forking process ended"
        return json.loads(line)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    f = Forker()
    yield f
    f.close()


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """What the commands read: a random Marian folder (OPUS-MT's layout) and an nmt checkpoint, and another
    checkpoint, the file a killed import may have replaced."""
    root = tmp_path_factory.mktemp("kill-sources")
    bpe = Path(__file__).resolve().parent / "data" / "sample-bpe-1000.model"
    return {
        "marian": build_folder(root / "opus-mt-en-de", make_tokenizer_files(),
                               config=dict(activation_function="swish", scale_embedding=True, init_std=0.5)),
        "checkpoint": random_checkpoint(root / "model.pt", bpe),
        "other": random_checkpoint(root / "other.pt", bpe, seed=1),
    }


# -- the three commands: what a run is, what was there before it, what it leaves --------------------------


def request(kind: str, work: Path, sources: dict[str, Path], prior: str, kill: dict | None = None) -> dict:
    """The request that runs command `kind` with its destination in `work`."""
    base = {"root": str(work), "kill": kill or {}}
    if kind == "import":
        return {**base, "argv": ["import", "marian", str(sources["marian"]), "--out", str(work / "model.pt")]}
    if kind == "export":
        force = ["--force"] if prior != "absent" else []
        return {**base, "argv": ["export", "--format", "ctranslate2", str(sources["checkpoint"]), str(work / "ct2"),
                                 *force]}
    return {**base, "argv": [], "model": str(sources["checkpoint"]), "env": {"NMT_CACHE_DIR": str(work / "cache")},
            "settled_ns": 0}  # stamps are written at once: the stamp's own writes are kill points too


PRIORS = {"import": ["absent", "another checkpoint"], "export": ["absent", "empty folder", "an int8 export"],
          "cache": ["absent", "damaged", "unchecked"]}


def destination(kind: str, work: Path, sha256: str) -> Path:
    if kind == "import":
        return work / "model.pt"
    if kind == "export":
        return work / "ct2"
    return work / "cache" / "ct2" / sha256


def snapshot(path: Path) -> dict[str, bytes] | bytes | None:
    """A file's bytes, a folder's files (relative path -> bytes), or None if absent. The cache's stamp and its
    temporary files are left out: not part of what a conversion writes (`leftovers` sees the temporaries)."""
    if path.is_file():
        return path.read_bytes()
    if not path.is_dir():
        return None
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and p.name != STAMP and owner(p, STAMP) is None}


def leftovers(kind: str, work: Path, sha256: str) -> list[Path]:
    """What lies beside the destination (and, for the cache, in the entry) besides what belongs there."""
    dest = destination(kind, work, sha256)
    allowed = {dest.name, f"{sha256}.lock"}
    beside = [p for p in dest.parent.iterdir() if p.name not in allowed] if dest.parent.is_dir() else []
    inside = [p for p in dest.iterdir() if p.name.startswith(".") and p.name != STAMP] if dest.is_dir() else []
    return sorted(beside + inside)


class Clean(dict):
    """Per command and prior state, the clean run's output, and the events and largest file it wrote; `sha256`:
    the checkpoint's. (Shown by its name in hypothesis's reports, not by its megabytes.)"""

    sha256 = ""

    def __repr__(self) -> str:
        return "clean"


@pytest.fixture(scope="module")
def clean(forker, sources, tmp_path_factory) -> Clean:
    from nmt.engines.conversions import checkpoint_digest

    out = Clean()
    out.sha256 = sha256 = checkpoint_digest(sources["checkpoint"])
    for kind, priors in PRIORS.items():
        for prior in priors:
            work = Path(tempfile.mkdtemp(dir=tmp_path_factory.mktemp("clean")))
            prepare(kind, prior, work, forker, sources, sha256)
            answer = forker.run(request(kind, work, sources, prior))
            assert answer["code"] == 0, answer["output"]
            dest = destination(kind, work, sha256)
            assert leftovers(kind, work, sha256) == []
            files = [dest] if dest.is_file() else list(dest.rglob("*"))
            out[f"{kind}/{prior}"] = {"snapshot": snapshot(dest), "events": answer["events"],
                                      "largest": max(p.stat().st_size for p in files)}
    return out


def prepare(kind: str, prior: str, work: Path, forker: Forker, sources: dict[str, Path], sha256: str) -> None:
    """Put the state `prior` in place in `work` before the run."""
    dest = destination(kind, work, sha256)
    if prior == "absent":
        return
    if prior == "another checkpoint":
        shutil.copyfile(sources["other"], dest)
    elif prior == "empty folder":
        dest.mkdir()
    elif prior == "an int8 export":
        answer = forker.run({"root": str(work), "argv": ["export", "--format", "ctranslate2", "--quantization",
                                                         "int8", str(sources["checkpoint"]), str(dest)]})
        assert answer["code"] == 0, answer["output"]
    else:  # the cache: an entry that a later use checks and stamps ("unchecked"), or one with a damaged model
        answer = forker.run({**request("cache", work, sources, "absent"), "settled_ns": 10**18})  # no stamp yet
        assert answer["code"] == 0 and not (dest / STAMP).exists(), answer["output"]
        if prior == "damaged":
            model = dest / "model.bin"
            model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])


def owner(path: Path, name: str) -> int | None:
    """The pid in a leftover's name `.NAME.PID.RANDOM[.tmp]`, or None."""
    head = f".{name}."
    if not path.name.startswith(head):
        return None
    pid = path.name[len(head):].split(".")[0]
    return int(pid) if pid.isdigit() else None


# -- the property ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["import", "export", "cache"])
@SETTINGS
@given(data=st.data(), mode=st.sampled_from(["event", "bytes"]), action=st.sampled_from(["kill", "kill", "raise"]))
def test_a_run_stopped_anywhere_leaves_a_whole_destination_or_none(forker, sources, clean, tmp_path, kind, data,
                                                                   mode, action):
    prior = data.draw(st.sampled_from(PRIORS[kind]), label="prior")
    reference = clean[f"{kind}/{prior}"]
    limit = reference["events"] - 1 if mode == "event" else reference["largest"]
    kill = {"mode": mode, "action": action, "n": data.draw(st.integers(0, limit), label="stop at")}
    stopped_and_run_again(forker, sources, clean, Path(tempfile.mkdtemp(dir=tmp_path)), kind, prior, kill)


def stopped_and_run_again(forker: Forker, sources: dict[str, Path], clean: Clean, work: Path, kind: str, prior: str,
                          kill: dict) -> int:
    """Run command `kind` over `prior` in `work`, stopped as `kill` says, then again; check both. The stopped
    run's exit status."""
    sha256 = clean.sha256
    reference = clean[f"{kind}/{prior}"]
    prepare(kind, prior, work, forker, sources, sha256)
    dest = destination(kind, work, sha256)
    before = snapshot(dest)

    stopped = forker.run(request(kind, work, sources, prior, kill))
    said = stopped["output"]
    if kill["action"] == "kill":
        assert stopped["code"] in (0, -signal.SIGKILL, -signal.SIGXFSZ), said
    else:  # a failed write is one line of error, never a traceback
        assert stopped["code"] in (0, 1) and "Traceback" not in said, said
        assert stopped["code"] == 0 or said.splitlines()[-1].startswith("error: "), said
    after = snapshot(dest)
    if stopped["code"] == 0:
        assert after == reference["snapshot"]
    else:
        # (a replaced export or cache entry is moved aside before the new one is moved in: it may be gone)
        allowed = [before, reference["snapshot"]] + ([None] if kind != "import" else [])
        assert after in allowed, f"half-written {dest}"
    for path in leftovers(kind, work, sha256):  # each removable by the next run: it names the dead writer
        name = STAMP if path.parent == dest else dest.name
        assert owner(path, name) == stopped["pid"], f"{path} left by a killed run cannot be told as its"

    again = forker.run(request(kind, work, sources, prior))
    if kind == "export" and prior == "absent" and after == reference["snapshot"]:
        # its export is in place: the same command again refuses to replace it without --force
        assert again["code"] == 1 and "folder exists and is not empty" in again["output"], again["output"]
    else:
        assert again["code"] == 0, again["output"]
    assert snapshot(dest) == reference["snapshot"]
    left = leftovers(kind, work, sha256)
    assert left == [], f"left behind after the next run: {[p.name for p in left]}"
    return stopped["code"]


@pytest.mark.parametrize("kind, prior", [("import", "absent"), ("export", "absent"), ("cache", "absent"),
                                         ("cache", "unchecked")])
def test_every_kill_point_in_turn(forker, sources, clean, tmp_path, kind, prior):
    """SIGKILL at each change to the file system in turn, the last ones included: after the export is in place but
    before its staging folder is removed (the same command again, refused without --force, removes that folder),
    and while a use of the cache stamps its entry (the next use removes the stamp's temporary file)."""
    events = clean[f"{kind}/{prior}"]["events"]
    assert events >= 4  # the temporary file or folder is made, written, renamed: at least
    codes = [stopped_and_run_again(forker, sources, clean, Path(tempfile.mkdtemp(dir=tmp_path)), kind, prior,
                                   {"mode": "event", "action": "kill", "n": n}) for n in range(events)]
    assert codes == [-signal.SIGKILL] * events


def test_a_damaged_entry_that_cannot_be_removed_is_one_line_of_error(sources, tmp_path, monkeypatch):
    """A full (or read-only) cache with a damaged entry: an OutputError naming the entry and NMT_CACHE_DIR, where
    discarding the entry raised the OSError of tempfile.mkdtemp or os.replace."""
    import errno
    import re

    from nmt.core.errors import OutputError
    from nmt.engines import conversions

    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))
    entry = conversions.converted(sources["checkpoint"])
    (entry / "model.bin").write_bytes(b"damaged")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    for name in ("mkdtemp", "replace"):
        with monkeypatch.context() as m:
            m.setattr(conversions.tempfile if name == "mkdtemp" else conversions.os, name, full)
            with pytest.raises(OutputError, match=re.escape(f"{entry}: cannot remove the cached conversion (No space "
                                                            "left on device); ") + ".*NMT_CACHE_DIR"):
                conversions.converted(sources["checkpoint"])
        assert sorted(p.name for p in entry.parent.iterdir()) == sorted([entry.name, f"{entry.name}.lock"])
    assert conversions.problem(entry, entry.name) is not None  # left as it was, damaged, for the next use
    assert conversions.converted(sources["checkpoint"]) == entry and conversions.problem(entry, entry.name) is None
