"""The CLI under hostile and careless use, through the real `nmt` process: every expected failure is one
line on stderr and exit code 1 (no traceback, nothing half-written), a closed pipe exits 141 quietly,
two processes on one folder meet a clear refusal, and `translate` gives one line out per line in.

Each case here ended in a traceback, a hang or a silently wrong result before the error boundary and
the checks it relies on (issue "Hardened against hostile input ...").
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from nmt import checkpoint
from nmt.files import LOCK_NAME

from test_cli import ENV, assert_user_error, nmt, ok

TINY = ["--preset", "tiny", "--max-tokens", "1024", "--update-tokens", "1024", "--warmup", "50",
        "--valid-interval", "1000", "--threads", "1"]


def nmt_limited(*args, fsize: int, timeout: float = 300) -> subprocess.CompletedProcess:
    """`nmt ARGS` in a process that may write files of at most `fsize` bytes: a write beyond fails with
    EFBIG, as a full disk fails with ENOSPC (Python ignores the SIGXFSZ that comes with it)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run([sys.executable, "-m", "nmt", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=timeout, preexec_fn=limit)


# -- bad paths and values: one line, exit 1 ------------------------------------------------------------


def bad_usage(tmp: Path, ckpt: Path, data: Path, bpe: Path) -> dict[str, tuple[list, str]]:
    """name -> (arguments, a word the one error line must contain). Paths under `tmp` are made by the test."""
    a_file = tmp / "a_file"
    translate = ["translate", "-m", ckpt]
    return {
        "translate missing -i": (translate + ["-i", tmp / "nonexistent.txt"], "nonexistent.txt"),
        "bpe --out is a folder": (["bpe", "--train", tmp / "text.en", "--vocab-size", "100", "--out", tmp], "is a folder"),
        "train --out is a file": (["train", "--data", data, "--out", a_file, *TINY], "not a folder"),
        "demo --out is a file": (["demo", "--out", a_file], "not a folder"),
        "average --out is a folder": (["average", ckpt, "--out", tmp], "is a folder"),
        "eval --save-hyp under a file": (["eval", "-m", ckpt, "--src", tmp / "text.en", "--ref", tmp / "text.en",
                                          "--save-hyp", a_file / "hyp.de"], "--save-hyp"),
        "--max-len-a inf": (translate + ["--max-len-a", "inf"], "--max-len-a"),
        "--max-len-a nan": (translate + ["--max-len-a", "nan"], "--max-len-a"),
        "--max-len-a 1e30": (translate + ["--max-len-a", "1e30"], "--max-len-a"),
        "--lenpen nan": (translate + ["--lenpen", "nan"], "--lenpen"),
        "--max-tokens 0": (translate + ["--max-tokens", "0"], "--max-tokens"),
        "--batch-size 0": (translate + ["--batch-size", "0"], "--batch-size"),
        "--threads -1": (translate + ["--threads", "-1"], "--threads"),
        "--beam 10**9": (translate + ["--beam", "1000000000"], "--beam"),
        "--topp nan": (translate + ["--sampling", "--topp", "nan"], "--topp"),
        "--max-ratio nan": (["prepare", "--bpe", bpe, "--train", tmp / "text", "--src", "en", "--tgt", "de",
                             "--out", tmp / "store", "--max-ratio", "nan"], "--max-ratio"),
        "--max-time -1": (["train", "--data", data, "--out", tmp / "run", "--max-time", "-1", *TINY], "--max-time"),
        "--lr-factor nan": (["train", "--data", data, "--out", tmp / "run", "--lr-factor", "nan", *TINY], "--lr-factor"),
        "translate --int8 --precision bf16": (translate + ["--int8", "--precision", "bf16"], "--int8 contradicts"),
        "translate -o is a folder": (translate + ["-o", tmp], "--output"),
        "--paired-bs-n 0": (["eval", "--ref", tmp / "text.en", "--hyp", tmp / "text.en", "--paired-bs",
                             "--paired-bs-n", "0"], "--paired-bs-n"),
    }


CASES = sorted(bad_usage(Path("."), Path("."), Path("."), Path(".")))


@pytest.mark.parametrize("case", CASES)
def test_bad_usage_is_one_line(case, tiny_checkpoint, tiny_data, tiny_bpe, tmp_path):
    (tmp_path / "a_file").write_text("not a folder\n")
    for lang in ("en", "de"):
        (tmp_path / f"text.{lang}").write_text("a man .\n")
    args, word = bad_usage(tmp_path, tiny_checkpoint, tiny_data, tiny_bpe)[case]
    r = nmt(*args, input="a man .\n", timeout=120)
    assert_user_error(r, word)
    assert not (tmp_path / "run").exists() and not (tmp_path / "store").exists()  # nothing begun


def test_stdout_on_a_full_device_is_one_line(tiny_checkpoint):
    with open("/dev/full", "wb") as full:
        r = subprocess.run([sys.executable, "-m", "nmt", "translate", "-m", str(tiny_checkpoint), "--beam", "1"],
                           input=b"a man .\n", stdout=full, stderr=subprocess.PIPE, env=ENV, timeout=120)
    stderr = r.stderr.decode()
    assert r.returncode == 1 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == ("error: stdout: cannot write the results (No space left on device); "
                                               "free disk space or choose another location")


def test_a_reader_that_goes_away_exits_141_quietly(tiny_checkpoint):
    """`nmt translate ... | head -1`: the shell's convention for a writer killed by SIGPIPE."""
    lines = "".join(f"a man number {i} is walking .\n" for i in range(3000)).encode()
    proc = subprocess.Popen([sys.executable, "-m", "nmt", "translate", "-m", str(tiny_checkpoint), "--beam", "1",
                             "--batch-size", "8"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)
    proc.stdin.write(lines)
    proc.stdin.close()
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does after its line
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert first.endswith(b"\n") and "Traceback" not in stderr and "error" not in stderr


# -- full disks ----------------------------------------------------------------------------------------


def test_training_onto_a_full_disk_is_one_line(tiny_data, tmp_path):
    """Checkpoints of the tiny model take ~1 MB: a 64 kB file-size limit fails the first one."""
    r = nmt_limited("train", "--data", tiny_data, "--out", tmp_path / "run", "--max-updates", "2", *TINY,
                    fsize=64_000)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "File too large" in last and "checkpoint" in last, last
    assert checkpoint.step_checkpoints(tmp_path / "run") == []  # no half-written checkpoint under its name
    assert not list((tmp_path / "run").glob(".*.tmp"))


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 256 kB file system (tmpfs); needs root, else the test is skipped."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_training_onto_a_real_full_disk_is_one_line(tiny_data, small_tmpfs):
    r = nmt("train", "--data", tiny_data, "--out", small_tmpfs / "run", "--max-updates", "2", *TINY)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "No space left on device" in last, last
    assert not list((small_tmpfs / "run").glob(".*.tmp"))


def test_bpe_onto_a_real_full_disk_is_one_line(small_tmpfs):
    text = small_tmpfs.parent / "big.txt"
    text.write_text("".join(f"line {i} of a corpus larger than the disk\n" for i in range(20_000)))
    r = nmt("bpe", "--train", text, "--vocab-size", "100", "--out", small_tmpfs / "bpe.model")
    assert_user_error(r, "No space left on device")
    assert list(small_tmpfs.iterdir()) == []  # the scratch copy is gone too


# -- damaged artefacts ---------------------------------------------------------------------------------


def test_nan_weights_are_refused(tiny_checkpoint, tmp_path):
    ckpt = torch.load(tiny_checkpoint, weights_only=True)
    name = next(iter(ckpt["model"]))
    ckpt["model"][name] = torch.full_like(ckpt["model"][name], float("nan"))
    torch.save(ckpt, tmp_path / "nan.pt")
    assert_user_error(nmt("translate", "-m", tmp_path / "nan.pt", input="a man .\n"), "NaN", name)


def test_a_swapped_bpe_model_is_refused_before_training(tiny_data, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    model = (data / "bpe.model").read_bytes()
    (data / "bpe.model").write_bytes(model.replace(b"\n", b"\n\n", 1))
    r = nmt("train", "--data", data, "--out", tmp_path / "run", *TINY)
    assert_user_error(r, "bpe.model", "sha256", "nmt prepare")


def test_average_refuses_checkpoints_of_different_shapes(tiny_run, tmp_path):
    a, b = checkpoint.step_checkpoints(tiny_run)[-2:]
    ckpt = torch.load(b, weights_only=True)
    name = next(k for k, v in ckpt["model"].items() if v.dim() == 2)
    ckpt["model"][name] = ckpt["model"][name][:1]  # broadcasts against the other: was averaged silently
    torch.save(ckpt, tmp_path / "b.pt")
    assert_user_error(nmt("average", a, tmp_path / "b.pt", "--out", tmp_path / "avg.pt"), name, "one run")
    del ckpt["model"][name]
    torch.save(ckpt, tmp_path / "b.pt")
    assert_user_error(nmt("average", a, tmp_path / "b.pt", "--out", tmp_path / "avg.pt"), "lacks", name)
    assert not (tmp_path / "avg.pt").exists()


# -- two processes on one folder -----------------------------------------------------------------------


def test_a_second_train_on_the_run_folder_is_refused(tiny_data, tmp_path):
    run = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "nmt", "train", "--data", str(tiny_data), "--out", str(run),
                              "--max-updates", "40", "--save-interval", "10", *TINY],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        deadline = time.monotonic() + 120
        while not (run / LOCK_NAME).is_file() or not (run / LOCK_NAME).read_text().strip():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        second = nmt("train", "--data", tiny_data, "--out", run, "--max-updates", "40", *TINY)
        assert first.poll() is None, "the first run ended before the second started; train it longer"
    finally:
        _, stderr = first.communicate(timeout=300)
    assert_user_error(second, f"another nmt process (pid {first.pid}) is using {run}")
    assert first.returncode == 0, stderr.decode()[-2000:]
    updates = [json.loads(line)["update"] for line in (run / "log.jsonl").read_text().splitlines()
               if json.loads(line).get("section", "train") == "train" and "update" in json.loads(line)]
    assert updates == sorted(set(updates)) and updates[-1] == 40  # one run's log, each update once
    assert checkpoint.load(checkpoint.latest(run)).state.updates == 40


# -- leftovers and recovery ----------------------------------------------------------------------------


def test_resume_skips_a_truncated_newest_checkpoint(tiny_run, tiny_data, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    newest = checkpoint.latest(run)
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # as a crash mid-write on NFS could
    (run / ".checkpoint_00000040.pt.x1y2.tmp").write_bytes(b"left by kill -9")
    r = ok(nmt("train", "--data", tiny_data, "--out", run, "--max-updates", "40", "--save-interval", "10", *TINY))
    assert f"skipped {newest}" in r.stderr and "resuming from checkpoint_00000020.pt" in r.stderr
    assert (run / (newest.name + ".damaged")).is_file()
    assert not list(run.glob(".*.tmp"))
    assert checkpoint.load(checkpoint.latest(run)).state.updates == 40


def test_resume_with_no_loadable_checkpoint_is_refused(tiny_run, tiny_data, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    for path in checkpoint.step_checkpoints(run):
        path.write_bytes(b"garbage")
    r = nmt("train", "--data", tiny_data, "--out", run, *TINY)
    assert_user_error(r, "none of its 3 step checkpoints can resume training")
    assert len(checkpoint.step_checkpoints(run)) == 3  # nothing renamed or overwritten


def test_bpe_removes_the_scratch_copies_of_killed_runs(tiny_corpus, tmp_path):
    dead = tmp_path / ".nmt-bpe-999999999-abcd"  # no such pid
    dead.mkdir()
    (dead / "text.txt").write_text("a corpus-sized copy\n")
    live = tmp_path / f".nmt-bpe-{os.getpid()}-efgh"  # this test's own process: alive
    live.mkdir()
    ok(nmt("bpe", "--train", tiny_corpus / "train.en", "--vocab-size", "100", "--out", tmp_path / "bpe.model"))
    assert not dead.exists() and live.exists()


# -- translate is a filter: one line out per line in ---------------------------------------------------


def hostile_lines(seed: int, n: int) -> bytes:
    """Random bytes, invalid UTF-8, NULs, Unicode line and paragraph separators, every whitespace,
    CRLF, very long lines and empty ones."""
    import random

    rng = random.Random(seed)
    pieces = ["a man .", "\r", "\x00", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\u00a0",
              "\u3000", "\ufeff", "\t", " ", "é", "😀", "\u200b", "\ud7ff", "Ä", "ß", "..."]
    lines = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.1:
            lines.append(b"")
        elif kind < 0.2:
            lines.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80))).replace(b"\n", b""))
        elif kind < 0.25:
            lines.append(("word " * rng.randrange(500, 3000)).encode())
        else:
            lines.append("".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30))).encode("utf-8", "surrogatepass"))
    return b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")


def test_translate_keeps_one_line_per_line_on_hostile_input(tiny_checkpoint):
    stream = hostile_lines(seed=7, n=300)
    expected = stream.count(b"\n") + (not stream.endswith(b"\n"))
    for extra in ([], ["--nbest", "2"]):
        r = subprocess.run([sys.executable, "-m", "nmt", "translate", "-m", str(tiny_checkpoint), "--beam", "2",
                            "--max-len-a", "0.2", *extra], input=stream, capture_output=True, env=ENV, timeout=300)
        assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-2000:]
        rows = r.stdout.split(b"\n")
        assert rows[-1] == b"" and len(rows) - 1 == expected * (2 if extra else 1)


@pytest.mark.parametrize("command", [["translate"], ["eval", "--ref", "REF"]])
def test_a_closed_stdin_is_one_line(command, tiny_checkpoint, tmp_path):
    (tmp_path / "ref.de").write_text("ein Mann .\n")
    args = [str(tmp_path / "ref.de") if a == "REF" else a for a in command]
    args += ["-m", str(tiny_checkpoint)] if command == ["translate"] else []
    r = subprocess.run([sys.executable, "-m", "nmt", *args], capture_output=True, text=True, env=ENV, timeout=120,
                       stdin=None, preexec_fn=lambda: os.close(0))  # as `nmt ... <&-`
    assert_user_error(r, "stdin is closed")


def chained(error: BaseException, context: BaseException) -> BaseException:
    error.__context__ = context
    return error


@pytest.mark.parametrize("error, line", [
    (OSError(28, "No space left on device", "run/x.pt"),
     "run/x.pt: No space left on device; free disk space or choose another location"),
    (PermissionError(13, "Permission denied", "/etc/out"),
     "/etc/out: Permission denied; check the permissions of the file and its folders, or choose another location"),
    (chained(RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 12"),
             OSError(27, "File too large")),
     "File too large; the file is too large for this file system; choose another location"),
    (MemoryError(), "out of memory; lower --max-tokens (or --batch-size, --beam), or use a machine with more "
                    "memory (MemoryError)"),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 10 bytes"),
     "out of memory; lower --max-tokens (or --batch-size, --beam), or use a machine with more memory "
     "(DefaultCPUAllocator: can't allocate memory: you tried to allocate 10 bytes)"),
])
def test_error_lines(error, line):
    from nmt.cli import error_line

    assert error_line(error) == (line, 1)


def test_bugs_keep_their_traceback():
    from nmt.cli import is_out_of_memory, is_torch_io_error

    bug = RuntimeError("shape mismatch")
    assert not is_torch_io_error(bug) and not is_out_of_memory(bug)
