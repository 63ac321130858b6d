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
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_cli import ENV, assert_user_error, nmt, ok

from nmt.core.files import LOCK_NAME
from nmt.model import checkpoint

TINY = ["--preset", "tiny", "--max-tokens", "1024", "--update-tokens", "1024", "--warmup", "50",
        "--valid-interval", "1000", "--threads", "1"]
# A run that ends at once where a check is missing (as in the code before these checks), not a base model's
# 100,000 updates
SHORT = ["--preset", "tiny", "--max-updates", "1", "--threads", "1"]


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
    """In this process (`cli`): the error boundary is the same, without an interpreter per case."""
    (tmp_path / "a_file").write_text("not a folder\n")
    for lang in ("en", "de"):
        (tmp_path / f"text.{lang}").write_text("a man .\n")
    args, word = bad_usage(tmp_path, tiny_checkpoint, tiny_data, tiny_bpe)[case]
    if args[0] == "translate" and "-i" not in args:
        args = [*args, "-i", tmp_path / "text.en"]  # CliRunner's stdin has no file descriptor to read
    assert_cli_error(cli(*args), word)
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
    (MemoryError(), "out of memory; lower `max_tokens` (or `batch_size`, `beam`), or use a machine with more "
                    "memory (MemoryError)"),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 10 bytes"),
     "out of memory; lower `max_tokens` (or `batch_size`, `beam`), or use a machine with more memory "
     "(DefaultCPUAllocator: can't allocate memory: you tried to allocate 10 bytes)"),
])
def test_error_lines(error, line):
    from nmt.config.flags import as_flags
    from nmt.core.failures import error_line

    assert error_line(error) == (line, 1)  # the library names fields; the command line shows their options
    if "out of memory" in line:
        assert as_flags(line).startswith("out of memory; lower --max-tokens (or --batch-size, --beam), or use a ")


def test_bugs_keep_their_traceback():
    from nmt.core.failures import is_out_of_memory, is_torch_io_error

    bug = RuntimeError("shape mismatch")
    assert not is_torch_io_error(bug) and not is_out_of_memory(bug)


# == in-process: refusals that come before any work =====================================================
# typer's CliRunner runs a command in this process: no new interpreter (and torch import) per case.


def cli(*args, input: str | bytes | None = None):
    """`nmt ARGS` run in this process."""
    from typer.testing import CliRunner

    from nmt.cli.main import app

    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def assert_cli_error(result, *words: str) -> str:
    """Exit code 1 through the error boundary (no stray exception), nothing on stdout, one stderr line."""
    assert isinstance(result.exception, SystemExit) and result.exit_code == 1, (
        f"exit code {result.exit_code}, {result.exception!r}; stderr:\n{result.stderr[-3000:]}")
    assert result.stdout == "", result.stdout[:500]
    lines = result.stderr.strip("\n").splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    return lines[0]


def assert_cli_ok(result):
    assert result.exit_code == 0, f"exit code {result.exit_code}, {result.exception!r}; stderr:\n{result.stderr[-3000:]}"
    return result


def sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder" if path.is_dir() else "none"


def with_data(ckpt: Path, out: Path, **data) -> Path:
    """A copy of checkpoint `ckpt` whose `data` entries (languages, ...) are replaced by `data`."""
    payload = torch.load(ckpt, weights_only=True)
    payload["data"] = {**payload["data"], **data}
    torch.save(payload, out)
    return out


def with_config(ckpt: Path, out: Path, **fields) -> Path:
    """A copy of checkpoint `ckpt` whose stored model config has `fields` replaced (a hand-edited file)."""
    payload = torch.load(ckpt, weights_only=True)
    payload["model_config"] = {**payload["model_config"], **fields}
    torch.save(payload, out)
    return out


# -- class 1: an output is never an input -------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path, tiny_checkpoint, tiny_run, tiny_data, tiny_bpe, tiny_corpus) -> Path:
    """Copies of every kind of input in one folder (the commands may not write over the session's)."""
    for name in ("text.en", "text.de", "hyp.de"):
        source = tiny_corpus / ("test.en" if name == "text.en" else "test.de")
        (tmp_path / name).write_text("".join(source.read_text(encoding="utf-8").splitlines(True)[:20]), encoding="utf-8")
    shutil.copyfile(tiny_checkpoint, tmp_path / "model.pt")
    shutil.copyfile(tiny_bpe, tmp_path / "bpe.model")
    shutil.copytree(tiny_data, tmp_path / "data")
    shutil.copytree(tiny_run, tmp_path / "run", ignore=shutil.ignore_patterns(LOCK_NAME))
    (tmp_path / "config.toml").write_text("[train]\nmax_updates = 1\n")
    (tmp_path / "keys.txt").write_text("secret\n")
    (tmp_path / "marian").mkdir()  # a Marian folder's files (the guard acts before they are read)
    for name in ("config.json", "source.spm", "target.spm", "vocab.json"):
        (tmp_path / "marian" / name).write_text("{}\n")
    return tmp_path


def templates(root: Path) -> dict[str, list]:
    """A valid call of every command, its inputs in the workspace `root` and its outputs named new-*."""
    return {
        "bpe": ["bpe", "--train", root / "text.en", root / "text.de", "--out", root / "new-bpe.model", "--vocab-size", 100],
        "prepare": ["prepare", "--bpe", root / "bpe.model", "--train", root / "text", "--src", "en", "--tgt", "de",
                    "--out", root / "new-data"],
        "train": ["train", "--data", root / "data", "--out", root / "new-run", "--config", root / "config.toml",
                  "--init-from", root / "model.pt", "--preset", "tiny", "--max-updates", 1, "--threads", 1],
        "average": ["average", root / "run", "--last", 2, "--out", root / "new-average.pt"],
        "translate": ["translate", "-m", root / "model.pt", "-i", root / "text.en", "-o", root / "new.de",
                      "--attention", root / "new-attention"],
        "eval": ["eval", "-m", root / "model.pt", "--src", root / "text.en", "--ref", root / "text.de", "--hyp",
                 root / "hyp.de", "--save-hyp", root / "new-hyp.de"],
        "demo": ["demo", "--out", root / "new-demo"],
        "download": ["download", "multi30k", "--out", root / "new-download"],
        "serve": ["serve", "-m", root / "model.pt", "--api-keys", root / "keys.txt", "--access-log", root / "new-access.log"],
        "export": ["export", root / "model.pt", root / "new-export"],
        "import marian": ["import", "marian", root / "marian", "--out", root / "new-imported.pt"],
        "distill": ["distill", "-m", root / "model.pt", "--train", root / "text", "--src", "en", "--tgt", "de",
                    "--out", root / "new-distilled"],
        "shortlist": ["shortlist", "--model", root / "model.pt", "--data", root / "data", "--out",
                      root / "new-shortlisted.pt"],
    }


def command_of(name: str):
    """A command by its name below the program's: "translate", "import marian"."""
    import typer.main

    from nmt.cli.main import app

    command = typer.main.get_command(app)
    for word in name.split():
        command = command.commands[word]
    return command


def commands() -> list[str]:
    """Every command that runs (the groups' subcommands, not the groups)."""
    import typer.main

    from nmt.cli.main import app

    def walk(group, prefix):
        for name, command in group.commands.items():
            if hasattr(command, "commands"):  # a group (typer's own, or click's before typer 0.20)
                yield from walk(command, prefix + name + " ")
            else:
                yield prefix + name

    return sorted(walk(typer.main.get_command(app), ""))


def test_every_command_is_guarded_and_has_a_template():
    """A new command is covered by the path rule (PathGuard and an entry in COMMAND_PATHS, which marks
    its outputs) and by the generated test below (a template)."""
    from nmt.cli.guard import PathGuard
    from nmt.cli.paths import COMMAND_PATHS

    assert set(COMMAND_PATHS) == set(commands()) == set(templates(Path(".")))
    for name in commands():
        assert isinstance(command_of(name), PathGuard), name


def test_every_path_that_is_written_is_marked_an_output():
    """A Path parameter whose name or help says it is written must be an output in COMMAND_PATHS (else the
    rule would take it for an input and never guard it)."""
    import re

    from nmt.cli.guard import is_path_parameter
    from nmt.cli.paths import COMMAND_PATHS

    for name in commands():
        for param in command_of(name).params:
            if not is_path_parameter(param):
                continue
            written = re.search(r"\b(write|writes|written|append|appends|output|folder for)\b", param.help or "", re.I)
            written = written or re.fullmatch(r"out(put)?(_dir)?|save_\w+", param.name)
            assert bool(written) == (param.name in COMMAND_PATHS[name].outputs), (name, param.name, param.help)


@pytest.mark.parametrize("name", sorted(templates(Path("."))))
def test_no_command_writes_over_its_inputs(name, workspace):
    """Generated from the commands' own parameters: each output set to each input's path (files, folders
    and the files that string options name) is a one-line error naming both, and no input changes."""
    from nmt.cli.guard import command_paths
    from nmt.cli.paths import COMMAND_PATHS

    args = [str(a) for a in templates(workspace)[name]]
    command = command_of(name)
    params = command.make_context(name, list(args[len(name.split()):])).params
    outputs, inputs = command_paths(name, command, params)
    assert bool(outputs) == bool(COMMAND_PATHS[name].outputs)
    before = {path: sha(path) for _, path in inputs}
    cases = 0
    for output in outputs:
        for label, path in inputs:
            if not path.exists():
                continue
            cases += 1
            called = [str(path) if a == str(output.path) else a for a in args]
            line = assert_cli_error(cli(*called), f"{output.option} {path} is also the input {label} {path}")
            assert {p: sha(p) for p in before} == before, line
    assert cases >= len(outputs) * bool(inputs)


def test_the_examples_of_the_issue_lose_no_data(workspace):
    w = workspace
    before = {p: sha(p) for p in w.rglob("*") if p.is_file()}
    assert_cli_error(cli("bpe", "--train", w / "text.en", "--out", w / "text.en"), "--out", "--train")
    assert_cli_error(cli("eval", "-m", w / "model.pt", "--src", w / "text.en", "--ref", w / "text.de",
                         "--save-hyp", w / "text.de"), "--save-hyp", "--ref")
    assert_cli_error(cli("translate", "-m", w / "model.pt", "-o", w / "model.pt", input="a man .\n"), "--output", "--model")
    assert_cli_error(cli("average", w / "run", "--last", 2, "--out", w / "run" / "checkpoint_00000030.pt"), "--out")
    assert_cli_error(cli("translate", "-m", w / "model.pt", "-i", w / "text.en", "-o", w / "text.en"), "--output", "--input")
    assert_cli_error(cli("translate", "-m", w / "model.pt", "-i", w / "text.en", "--attention", w / "text.en"), "--attention")
    assert_cli_error(cli("train", "--data", w / "data", "--out", w / "data", *SHORT), "--out", "--data")
    assert_cli_error(cli("export", w / "model.pt", w / "model.pt"), "OUT_DIR", "MODEL")
    os.link(w / "text.en", w / "hard-link.en")  # the same file by another name
    (w / "soft-link.en").symlink_to(w / "text.en")
    for link in ("hard-link.en", "soft-link.en"):
        assert_cli_error(cli("bpe", "--train", w / "text.en", "--out", w / link), "is also the input --train")
    assert {p: sha(p) for p in before} == before


@pytest.mark.parametrize("case", ["prepare into the corpus folder", "export over the model's folder",
                                  "train over its --init-from", "average to a step checkpoint name",
                                  "average to the best checkpoint's name"])
def test_an_output_folder_never_swallows_an_input(case, workspace):
    w = workspace
    (w / "corpus").mkdir()
    for lang in ("en", "de"):
        shutil.copyfile(w / f"text.{lang}", w / "corpus" / f"train.{lang}")
    shutil.copyfile(w / "model.pt", w / "run" / "checkpoint_best.pt")
    args, words = {
        "prepare into the corpus folder": (["prepare", "--bpe", w / "bpe.model", "--train", w / "corpus" / "train",
                                            "--src", "en", "--tgt", "de", "--out", w / "corpus"],
                                           ["--out", "holds the input --train"]),
        "export over the model's folder": (["export", w / "run" / "checkpoint_00000030.pt", w / "run", "--force"],
                                           ["OUT_DIR", "holds the input MODEL"]),
        "train over its --init-from": (["train", "--data", w / "data", "--out", w / "run", "--init-from",
                                        w / "run" / "checkpoint_best.pt"], ["--out", "holds the input --init-from"]),
        "average to a step checkpoint name": (["average", w / "model.pt", w / "run" / "checkpoint_00000020.pt",
                                               "--out", w / "run" / "checkpoint_00000099.pt"], ["checkpoint_00000099.pt"]),
        "average to the best checkpoint's name": (["average", w / "run", "--out", w / "run" / "checkpoint_best.pt"],
                                                  ["checkpoint_best.pt"]),
    }[case]
    before = {p: sha(p) for p in w.rglob("*") if p.is_file()}
    assert_cli_error(cli(*args), *words)
    assert {p: sha(p) for p in w.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("kind", ["youtokentome", "sentencepiece"])
def test_a_data_folder_may_be_prepared_again_with_its_own_tokenizer_model(kind, workspace, tiny_spm):
    """The store's own model as --bpe is written back byte for byte: no data lost, so not refused, whatever
    its kind (a SentencePiece store's spm.model was refused while a youtokentome store's bpe.model was not)."""
    w = workspace
    args = ["--train", w / "text", "--src", "en", "--tgt", "de", "--min-len", 1]
    if kind == "sentencepiece":
        shutil.rmtree(w / "data")
        assert_cli_ok(cli("prepare", "--bpe", tiny_spm, *args, "--out", w / "data"))
    model = w / "data" / ("bpe.model" if kind == "youtokentome" else "spm.model")
    def tokenizer_record():
        meta = json.loads((w / "data" / "meta.json").read_text())
        return {key: meta.get(key) for key in ("tokenizer", "bpe_sha256", "vocab_size")}

    before, record = model.read_bytes(), tokenizer_record()
    assert_cli_ok(cli("prepare", "--bpe", model, *args, "--out", w / "data"))
    assert model.read_bytes() == before and tokenizer_record() == record


def test_a_side_of_a_sentencepiece_pair_in_the_data_folder_is_refused(workspace, tiny_spm):
    """source.spm as --bpe would be read as a joint model, written back as spm.model, and deleted: refused."""
    w = workspace
    (w / "data" / "source.spm").write_bytes(tiny_spm.read_bytes())
    before = {p: sha(p) for p in w.rglob("*") if p.is_file()}
    assert_cli_error(cli("prepare", "--bpe", w / "data" / "source.spm", "--train", w / "text", "--src", "en", "--tgt",
                         "de", "--out", w / "data"), "--out", "holds the input --bpe")
    assert {p: sha(p) for p in w.rglob("*") if p.is_file()} == before


def test_average_of_a_run_glob_refuses_the_best_checkpoint_beside_its_step(workspace):
    """`nmt average RUN/*.pt` takes checkpoint_best.pt, a copy of one step, which would count twice: one line
    naming both files; the step checkpoints alone (RUN/checkpoint_0*.pt, or RUN --last N) average."""
    w = workspace
    shutil.copyfile(w / "run" / "checkpoint_00000020.pt", w / "run" / "checkpoint_best.pt")
    assert_cli_error(cli("average", *sorted((w / "run").glob("*.pt")), "--out", w / "averaged.pt"),
                     str(w / "run" / "checkpoint_best.pt"), str(w / "run" / "checkpoint_00000020.pt"), "twice")
    assert not (w / "averaged.pt").exists()
    assert_cli_ok(cli("average", *sorted((w / "run").glob("checkpoint_0*.pt")), "--out", w / "averaged.pt"))


# -- class 2: compressed files both ways --------------------------------------------------------------


def gzip_file(path: Path, text: str) -> Path:
    import gzip

    path.write_bytes(gzip.compress(text.encode("utf-8")))
    return path


def test_translate_reads_and_writes_gzip(workspace):
    import gzip

    w = workspace
    text = (w / "text.en").read_text(encoding="utf-8")
    plain = assert_cli_ok(cli("translate", "-m", w / "model.pt", "-i", w / "text.en", "--beam", 1)).stdout
    assert plain.count("\n") == text.count("\n")
    gzip_file(w / "text.en.gz", text)
    assert assert_cli_ok(cli("translate", "-m", w / "model.pt", "-i", w / "text.en.gz", "--beam", 1)).stdout == plain
    assert_cli_ok(cli("translate", "-m", w / "model.pt", "-i", w / "text.en.gz", "--beam", 1, "-o", w / "out.de.gz"))
    assert gzip.decompress((w / "out.de.gz").read_bytes()).decode("utf-8") == plain
    (w / "text.en").unlink()
    assert_cli_error(cli("translate", "-m", w / "model.pt", "-i", w / "text.en"), "text.en.gz exists: give that name")


def test_eval_reads_and_writes_gzip(workspace):
    import gzip

    w = workspace
    args = ["eval", "-m", w / "model.pt", "--beam", 1, "--json"]
    plain = assert_cli_ok(cli(*args, "--src", w / "text.en", "--ref", w / "text.de", "--save-hyp", w / "hyp-plain.de"))
    for name in ("text.en", "text.de"):
        gzip_file(w / f"{name}.gz", (w / name).read_text(encoding="utf-8"))
    packed = assert_cli_ok(cli(*args, "--src", w / "text.en.gz", "--ref", w / "text.de.gz", "--save-hyp", w / "hyp.de.gz"))
    assert json.loads(packed.stdout)["scores"] == json.loads(plain.stdout)["scores"]
    assert gzip.decompress((w / "hyp.de.gz").read_bytes()) == (w / "hyp-plain.de").read_bytes()
    scored = assert_cli_ok(cli("eval", "--ref", w / "text.de.gz", "--hyp", w / "hyp.de.gz", "--json"))
    assert json.loads(scored.stdout)["scores"] == json.loads(plain.stdout)["scores"]


def test_bpe_and_prepare_read_gzip_by_its_bytes(workspace):
    """A gzip file is read as the text it holds whatever its name (bpe, prepare)."""
    w = workspace
    gzip_file(w / "train.en", (w / "text.en").read_text(encoding="utf-8"))  # gzip under a plain name
    shutil.copyfile(w / "text.de", w / "train.de")
    assert_prepares_as_the_plain_text(w, "train")
    pieces = learned_pieces(w, w / "train.en")
    assert "\x1f" not in pieces and "\ufffd" not in pieces  # learned from the text, not from compressed bytes


def assert_prepares_as_the_plain_text(w: Path, prefix: str) -> None:
    """`prepare --train w/PREFIX` stores the same training data as from the workspace's plain text.* files."""
    for name in (prefix, "text"):
        assert_cli_ok(cli("prepare", "--bpe", w / "bpe.model", "--train", w / name, "--src", "en", "--tgt", "de",
                          "--out", w / f"store-{name}", "--min-len", 1))
    assert (w / f"store-{prefix}" / "train.bin").read_bytes() == (w / "store-text" / "train.bin").read_bytes()


def learned_pieces(w: Path, train: Path) -> str:
    """The pieces (all but the 4 specials) of a 60-piece BPE model that `nmt bpe` learns from `train`."""
    from nmt.text.bpe import BpeTokenizer

    assert_cli_ok(cli("bpe", "--train", train, "--vocab-size", 60, "--out", w / "learned.model"))
    return "".join(BpeTokenizer.from_file(w / "learned.model").pieces(range(4, 60)))


def test_a_prefix_with_both_plain_and_gzip_files_is_refused(workspace):
    w = workspace
    gzip_file(w / "text.en.gz", "another text\n")
    assert_cli_error(cli("prepare", "--bpe", w / "bpe.model", "--train", w / "text", "--src", "en", "--tgt", "de",
                         "--out", w / "store"), "text.en.gz", "both exist")


def test_translate_streams_gzip_from_stdin(tiny_checkpoint):
    """stdin that is gzip data (`nmt translate < x.gz`, or a producer that flushes per line) is inflated
    as it arrives: each line is answered while stdin is still open."""
    import queue
    import threading
    import zlib

    proc = subprocess.Popen([sys.executable, "-m", "nmt", "translate", "-m", str(tiny_checkpoint), "--beam", "1",
                             "--threads", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=ENV)
    got: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [got.put(line) for line in iter(proc.stdout.readline, b"")], daemon=True).start()
    pack = zlib.compressobj(wbits=31)
    try:
        for line, timeout in ((b"A man is riding a bicycle.\n", 120), (b"\n", 60), (b"Two dogs.\n", 60)):
            proc.stdin.write(pack.compress(line) + pack.flush(zlib.Z_SYNC_FLUSH))
            proc.stdin.flush()
            answer = got.get(timeout=timeout)
            assert answer.endswith(b"\n") and (answer == b"\n") == (line == b"\n")
        proc.stdin.write(pack.flush())
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert got.empty()


# -- class 5 (byte-order marks) -------------------------------------------------------------------------


def test_a_byte_order_mark_is_not_text(workspace):
    """Windows editors start a UTF-8 file with U+FEFF: translate, eval, bpe and prepare read the text after it."""
    w = workspace
    text = (w / "text.en").read_text(encoding="utf-8")
    (w / "bom.en").write_text("\ufeff" + text.replace("\n", "\r\n"), encoding="utf-8")
    plain = assert_cli_ok(cli("translate", "-m", w / "model.pt", "-i", w / "text.en", "--beam", 1)).stdout
    assert assert_cli_ok(cli("translate", "-m", w / "model.pt", "-i", w / "bom.en", "--beam", 1)).stdout == plain
    (w / "bom.de").write_text("\ufeff" + (w / "text.de").read_text(encoding="utf-8"), encoding="utf-8")
    scored = json.loads(assert_cli_ok(cli("eval", "--ref", w / "text.de", "--hyp", w / "bom.de", "--json")).stdout)
    assert scored["scores"][0]["score"] == 100.0
    shutil.copyfile(w / "bom.en", w / "b.en")
    shutil.copyfile(w / "bom.de", w / "b.de")
    assert_prepares_as_the_plain_text(w, "b")
    assert "\ufeff" not in learned_pieces(w, w / "bom.en")


# -- class 3: models that do not fit together ---------------------------------------------------------


def test_an_ensemble_of_two_directions_is_refused(tiny_checkpoint, tmp_path):
    """(`nmt serve` serves each direction of its --model with its own model: tests/test_serve.py.)"""
    reverse = with_data(tiny_checkpoint, tmp_path / "de-en.pt", src="de", tgt="en")
    (tmp_path / "in.en").write_text("a man .\n")
    for args in (["translate", "-i", tmp_path / "in.en"],
                 ["eval", "--src", tmp_path / "in.en", "--ref", tmp_path / "in.en"]):
        assert_cli_error(cli(*args, "-m", tiny_checkpoint, "-m", reverse), "de -> en", "en -> de", "one direction")


def test_average_refuses_checkpoints_of_two_directions(tiny_checkpoint, tmp_path):
    reverse = with_data(tiny_checkpoint, tmp_path / "de-en.pt", src="de", tgt="en")
    assert_cli_error(cli("average", tiny_checkpoint, reverse, "--out", tmp_path / "avg.pt"), "de -> en", "one run")
    assert not (tmp_path / "avg.pt").exists()


def test_a_model_and_its_bpe_model_must_agree(tiny_checkpoint, tmp_path):
    """A checkpoint whose embedded BPE model has another vocabulary than the model would decode ids that
    mean nothing."""
    from conftest import BPE_MODELS

    payload = torch.load(tiny_checkpoint, weights_only=True)
    payload["tokenizer"] = {**payload["tokenizer"], "source": BPE_MODELS[300].read_bytes()}
    torch.save(payload, tmp_path / "mixed.pt")
    (tmp_path / "in.en").write_text("a man .\n")
    assert_cli_error(cli("translate", "-m", tmp_path / "mixed.pt", "-i", tmp_path / "in.en"), "mixed.pt", "tokenizer")


def test_init_from_a_model_of_the_other_direction_is_refused(tiny_checkpoint, tiny_data, tmp_path):
    reverse = with_data(tiny_checkpoint, tmp_path / "de-en.pt", src="de", tgt="en")
    assert_cli_error(cli("train", "--data", tiny_data, "--out", tmp_path / "run", "--init-from", reverse, "--max-updates", 1),
                     "--init-from", "de -> en", "en -> de")
    assert not (tmp_path / "run").exists()


def test_init_from_into_a_folder_holding_another_run_is_refused(tiny_run, tiny_checkpoint, tiny_data, tmp_path):
    """It used to resume the old run and ignore --init-from."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns(LOCK_NAME))
    other = shutil.copyfile(tiny_checkpoint, tmp_path / "other.pt")
    before = {p: sha(p) for p in run.iterdir()}
    assert_cli_error(cli("train", "--data", tiny_data, "--out", run, "--init-from", other, "--max-updates", 40),
                     "--init-from", "holds another run", "checkpoint_00000030.pt")
    assert {p: sha(p) for p in run.iterdir() if p.name != LOCK_NAME} == before


# -- class 4: the last tracebacks -----------------------------------------------------------------------


def test_max_positions_below_the_data_is_refused_before_training(tiny_data, tmp_path):
    line = assert_cli_error(cli("train", "--data", tiny_data, "--out", tmp_path / "run", "--preset", "tiny",
                                "--max-positions", 20), str(tiny_data), "max_positions 20", "--max-len")
    assert not (tmp_path / "run").exists(), line


@pytest.mark.parametrize("command", ["translate", "eval", "serve", "average", "export", "train --init-from",
                                     "prepare --bpe"])
@pytest.mark.parametrize("field, value", [("d_model", "512"), ("n_heads", None), ("dropout", "0.1")])
def test_a_damaged_checkpoint_config_is_one_line_naming_the_file(command, field, value, tiny_checkpoint, tiny_data,
                                                               tmp_path):
    """Every command that loads a checkpoint names the file and the field (not an option never given)."""
    bad = with_config(tiny_checkpoint, tmp_path / "edited.pt", **{field: value})
    (tmp_path / "in.en").write_text("a man .\n")
    args = {
        "translate": ["translate", "-m", bad, "-i", tmp_path / "in.en"],
        "eval": ["eval", "-m", bad, "--src", tmp_path / "in.en", "--ref", tmp_path / "in.en"],
        "serve": ["serve", "-m", bad, "--port", 0],
        "average": ["average", bad, tiny_checkpoint, "--out", tmp_path / "avg.pt"],
        "export": ["export", bad, tmp_path / "ct2"],
        "train --init-from": ["train", "--data", tiny_data, "--out", tmp_path / "run", "--init-from", bad, "--max-updates", 1],
        "prepare --bpe": ["prepare", "--bpe", bad, "--train", tmp_path / "in", "--src", "en", "--tgt", "en2",
                          "--out", tmp_path / "store"],
    }[command]
    (tmp_path / "in.en2").write_text("a man .\n")
    line = assert_cli_error(cli(*args), "edited.pt", field)
    assert f"--{field.replace('_', '-')}" not in line
    assert not (tmp_path / "avg.pt").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("key, value", [("vocab_size", "1000"), ("src", None), ("bpe_sha256", 5), ("vocab_size", -3)])
def test_a_damaged_meta_json_is_one_line_naming_it(key, value, tiny_data, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    meta = json.loads((data / "meta.json").read_text())
    meta[key] = value
    (data / "meta.json").write_text(json.dumps(meta))
    assert_cli_error(cli("train", "--data", data, "--out", tmp_path / "run", *SHORT), "meta.json", key)


def test_a_binary_config_file_is_one_line(tiny_data, tmp_path):
    (tmp_path / "c.toml").write_bytes(b"\x00\xff\xfe binary \x80")
    assert_cli_error(cli("train", "--data", tiny_data, "--out", tmp_path / "run", "--config", tmp_path / "c.toml"),
                     "c.toml", "not a text file")


@pytest.mark.parametrize("args", [
    ["translate", "-m", "MODEL", "-i", "TEXT"], ["eval", "--ref", "TEXT", "--hyp", "TEXT"],
    ["prepare", "--bpe", "BPE", "--train", "PREFIX", "--src", "en", "--tgt", "de", "--out", "OUT"],
    ["train", "--data", "DATA", "--out", "OUT", "--print-config"], ["demo", "--out", "OUT"], ["--version"],
], ids=["translate", "eval", "prepare", "train --print-config", "demo", "--version"])
def test_results_into_a_closed_stdout_are_refused_before_any_work(args, tiny_checkpoint, tiny_data, tiny_bpe, tmp_path):
    """`nmt ... >&-`: exit 1 before the work (it was exit 0 with the results gone, or an AttributeError)."""
    (tmp_path / "text.en").write_text("a man .\n")
    (tmp_path / "text.de").write_text("ein Mann .\n")
    values = {"MODEL": tiny_checkpoint, "TEXT": tmp_path / "text.en", "BPE": tiny_bpe, "PREFIX": tmp_path / "text",
              "OUT": tmp_path / "out", "DATA": tiny_data}
    r = subprocess.run([sys.executable, "-m", "nmt", *[str(values.get(a, a)) for a in args]], capture_output=True,
                       text=True, env=ENV, timeout=120, preexec_fn=lambda: os.close(1))
    assert_user_error(r, "stdout is closed")
    assert not (tmp_path / "out").exists()


# -- class 5: options that do nothing are refused -------------------------------------------------------


@pytest.mark.parametrize("command", ["translate", "eval", "serve"])
@pytest.mark.parametrize("extra, words", [
    (["--topk", "5"], ["--topk only applies with --sampling"]),
    (["--topp", "0.5"], ["--topp only applies with --sampling"]),
    (["--temperature", "0.7"], ["--temperature only applies with --sampling"]),
    (["--seed", "3"], ["--seed only applies with --sampling"]),
    (["--sampling", "--beam", "5"], ["--beam 5 does nothing with --sampling"]),
    (["--lenpen", "0", "--lenpen-type", "power"], ["--lenpen-type power does nothing with --lenpen 0.0"]),
])
def test_search_options_that_would_do_nothing_are_refused(command, extra, words, tiny_checkpoint, tmp_path):
    (tmp_path / "in.en").write_text("a man .\n")
    args = {"translate": ["translate", "-i", tmp_path / "in.en"], "serve": ["serve", "--port", 0],
            "eval": ["eval", "--src", tmp_path / "in.en", "--ref", tmp_path / "in.en"]}[command]
    assert_cli_error(cli(*args, "-m", tiny_checkpoint, *extra), *words)


def test_eval_nbest_without_sampling_is_refused(tiny_checkpoint, tmp_path):
    (tmp_path / "in.en").write_text("a man .\n")
    assert_cli_error(cli("eval", "-m", tiny_checkpoint, "--src", tmp_path / "in.en", "--ref", tmp_path / "in.en",
                         "--nbest", 2), "--nbest 2 does nothing")


@pytest.mark.parametrize("extra, words", [
    (["--paired-bs-n", "10"], ["--paired-bs-n only applies with --paired-bs"]),
    (["--save-hyp", "SAVE"], ["--save-hyp", "only applies with --model"]),
    (["--src", "TEXT"], ["--src", "only applies with --model"]),
    (["--beam", "2"], ["--beam", "only applies with --model"]),
    (["--nbest", "1", "--threads", "2"], ["--nbest, --threads", "only apply with --model"]),
    (["--int8"], ["--int8", "only applies with --model"]),
])
def test_eval_options_that_would_do_nothing_are_refused(extra, words, tmp_path):
    (tmp_path / "text.de").write_text("ein Mann .\n")
    extra = [str(tmp_path / "saved.de") if a == "SAVE" else str(tmp_path / "text.de") if a == "TEXT" else a
             for a in extra]
    assert_cli_error(cli("eval", "--ref", tmp_path / "text.de", "--hyp", tmp_path / "text.de", *extra), *words)
    assert not (tmp_path / "saved.de").exists()


@pytest.mark.parametrize("args, words", [
    (["train", "--layers", "2", "--encoder-layers", "1", "--decoder-layers", "1"], ["--layers does nothing"]),
    (["train", "--valid-bleu-sentences", "0", "--valid-beam", "4", "VALIDATED"],
     ["--valid-beam 4 does nothing with --valid-bleu-sentences 0"]),
    (["train", "--patience", "3"], ["--patience 3", "no validation split"]),
    (["train", "--valid-beam", "2"], ["--valid-beam 2", "no validation split"]),
    (["bpe", "--seed", "3"], ["--seed only applies with --sample"]),
])
def test_training_options_that_would_do_nothing_are_refused(args, words, tiny_data, tiny_corpus, tmp_path):
    """tiny_data has no validation split (VALIDATED: data with one)."""
    from conftest import prepare_sample

    if "VALIDATED" in args:
        (tmp_path / "corpus").mkdir()
        tiny_data, args = prepare_sample(tmp_path / "corpus", 50, 10), [a for a in args if a != "VALIDATED"]
    where = (["--data", tiny_data, "--out", tmp_path / "run", *SHORT] if args[0] == "train" else
             ["--train", tiny_corpus / "train.en", "--out", tmp_path / "bpe.model"])
    assert_cli_error(cli(args[0], *where, *args[1:]), *words)
    assert not (tmp_path / "run").exists() and not (tmp_path / "bpe.model").exists()


def test_a_misspelt_config_key_gets_a_did_you_mean(tiny_data, tmp_path):
    (tmp_path / "c.toml").write_text("[train]\nmax_update = 10\n")
    assert_cli_error(cli("train", "--data", tiny_data, "--out", tmp_path / "run", "--config", tmp_path / "c.toml"),
                     "c.toml", "no field 'max_update'", "did you mean 'max_updates'?")


# -- found by running every command on hostile inputs ------------------------------------------------


def hostile_usage(tmp: Path, ckpt: Path, data: Path, bpe: Path) -> dict[str, tuple[list, list[str]]]:
    """name -> (arguments, words of the one error line); every one ran or crashed before."""
    return {
        "bpe --train a folder": (["bpe", "--train", tmp, "--out", tmp / "b.model"], ["is a folder"]),
        "bpe --train /dev/null": (["bpe", "--train", "/dev/null", "--out", tmp / "b.model"], ["/dev/null", "empty input"]),
        "bpe --threads -5": (["bpe", "--train", tmp / "text.en", "--out", tmp / "b.model", "--threads", -5], ["--threads"]),
        "prepare --threads -3": (["prepare", "--bpe", bpe, "--train", tmp / "text", "--src", "en", "--tgt", "de",
                                  "--out", tmp / "store", "--threads", -3], ["--threads"]),
        "demo --max-updates 0": (["demo", "--out", tmp / "demo", "--max-updates", 0], ["--max-updates"]),
        "average a checkpoint with itself": (["average", ckpt, ckpt, "--out", tmp / "avg.pt"], ["given twice"]),
        "an ensemble of one model twice": (["translate", "-m", ckpt, "-m", ckpt, "-i", tmp / "text.en"], ["given twice"]),
        "--init-from /dev/null": (["train", "--data", data, "--out", tmp / "run", "--init-from", "/dev/null"],
                                  ["/dev/null: not a checkpoint file"]),
        "--lr-factor 1e308": (["train", "--data", data, "--out", tmp / "run", "--lr-factor", "1e308", *SHORT],
                              ["--lr-factor"]),
        "--adam-eps 1e308": (["train", "--data", data, "--out", tmp / "run", "--adam-eps", "1e308", *SHORT],
                             ["--adam-eps"]),
    }


@pytest.mark.parametrize("case", sorted(hostile_usage(Path("."), Path("."), Path("."), Path("."))))
def test_hostile_usage_is_one_line(case, tiny_checkpoint, tiny_data, tiny_bpe, tmp_path):
    for lang in ("en", "de"):
        (tmp_path / f"text.{lang}").write_text("a man .\n")
    args, words = hostile_usage(tmp_path, tiny_checkpoint, tiny_data, tiny_bpe)[case]
    r = cli(*args)
    if case == "bpe --train /dev/null":  # the reading's progress line comes first: keep the error line
        r.stderr_bytes = r.stderr.splitlines(keepends=True)[-1].encode()
    line = assert_cli_error(r, *words)
    for made in ("b.model", "store", "demo", "avg.pt", "run"):
        assert not (tmp_path / made).exists(), line


def test_eval_leaves_ter_out_of_a_line_too_long_for_it(tmp_path, monkeypatch):
    """TER's cost is quadratic in a line's words: a 200,000-word line took all the memory of the machine."""
    from nmt import scoring as evaluate
    monkeypatch.setattr(evaluate, "MAX_TER_WORDS", 50)
    (tmp_path / "long.de").write_text("ein Mann .\n" + "Wort " * 60 + "\n")
    r = assert_cli_ok(cli("eval", "--ref", tmp_path / "long.de", "--hyp", tmp_path / "long.de"))
    import re

    rows = [line.split()[0] for line in r.stdout.splitlines()[1:]]
    assert rows == ["BLEU", "BLEU", "BLEU", "BLEU", "chrF"] and re.search(r"BLEU 13a cased +100\.00", r.stdout)
    assert r.stderr.startswith("warning: TER left out: line 2 of") and "60 words" in r.stderr


@pytest.mark.parametrize("damage, skipped", [
    ({"rng": "x"}, True), ({"position": "5"}, True), ({"updates": -5}, True), ({"lr_offset": "x"}, True),
    ({"valid_bleu": "x"}, True), ({"optimizer": {"state": "x", "param_groups": []}}, True),
    ({"optimizer": {"state": {}, "param_groups": []}}, False), ({"model": "extra"}, False),
], ids=["rng", "position", "negative updates", "lr_offset", "valid_bleu", "optimizer type", "optimizer groups",
        "model keys"])
def test_resuming_from_a_damaged_training_state_is_never_a_traceback(damage, skipped, tiny_run, tiny_data, tmp_path):
    """A damaged newest checkpoint is set aside (the run resumes from the one before) or, where only the
    model can tell (weights, optimizer groups), refused in one line naming it."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns(LOCK_NAME))
    newest = checkpoint.latest(run)
    payload = torch.load(newest, weights_only=True)
    if damage.get("model") == "extra":
        payload["model"]["extra.weight"] = torch.zeros(2)
    else:  # the training state's counters and figures are one entry of the file, the rest are entries of their own
        state = {k: v for k, v in damage.items() if k in payload["state"] or k == "updates"}
        payload["state"].update(state)
        payload.update({k: v for k, v in damage.items() if k not in state})
    torch.save(payload, newest)
    r = cli("train", "--data", tiny_data, "--out", run, "--max-updates", 21, "--save-interval", 100)
    if skipped:
        assert_cli_ok(r)
        assert f"skipped {newest}" in r.stderr and (run / (newest.name + ".damaged")).is_file()
    else:
        line = assert_cli_error(r, str(newest))
        assert "does not fit" in line or "do not match" in line


def test_average_refuses_checkpoints_of_two_runs(tiny_checkpoint, tmp_path):
    """Same architecture and vocabulary, another seed: another run, whose weights do not average with these."""
    payload = torch.load(tiny_checkpoint, weights_only=True)
    payload["train_config"] = {**payload["train_config"], "seed": 7}
    torch.save(payload, tmp_path / "other-run.pt")
    assert_cli_error(cli("average", tiny_checkpoint, tmp_path / "other-run.pt", "--out", tmp_path / "avg.pt"),
                     "different training runs", "seed")
    assert not (tmp_path / "avg.pt").exists()


# -- issue 41: the demo's folder, --config files that are bombs or hold huge numbers -----------------------


def tree_bytes(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under `root`, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def test_demo_refuses_a_folder_that_is_not_its_own_before_writing_into_it(tiny_bpe, tiny_data, tmp_path):
    """`nmt demo --out PROJECT` wrote its own bpe.model and data/ over the user's: now a folder that holds
    anything and no .nmt-demo is refused first, left byte for byte as it was."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copyfile(tiny_bpe, project / "bpe.model")
    shutil.copytree(tiny_data, project / "data", ignore=shutil.ignore_patterns(LOCK_NAME))
    (project / "notes.txt").write_text("mine\n")
    before = tree_bytes(project)
    assert_cli_error(cli("demo", "--out", project, "--max-updates", 1), f"--out {project}", "not an earlier demo's",
                     ".nmt-demo", "choose a new or empty folder")
    assert tree_bytes(project) == before


def test_demo_claims_a_new_an_empty_or_its_own_folder(tmp_path):
    """The demo writes .nmt-demo into its folder before anything else; that file is how it knows the folder
    again (a later demo may write over it)."""
    from nmt.core.errors import OutputError
    from nmt.workflows.demo import MARKER, claim_folder

    for folder in (tmp_path / "new" / "demo", tmp_path / "empty"):
        (tmp_path / "empty").mkdir(exist_ok=True)
        claim_folder(folder)
        assert [p.name for p in folder.iterdir()] == [MARKER]
    (tmp_path / "empty" / "bpe.model").write_text("the demo's\n")
    claim_folder(tmp_path / "empty")  # an earlier demo's: claimed again
    assert (tmp_path / "empty" / "bpe.model").read_text() == "the demo's\n"
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / MARKER).mkdir()  # a folder of that name is no marker
    with pytest.raises(OutputError, match="not an earlier demo's"):
        claim_folder(tmp_path / "theirs")


@pytest.mark.parametrize("form", ["gzip", "bzip2", "xz"])
def test_a_config_bomb_is_one_line(form, tiny_data, tmp_path):
    """A few kilobytes that inflate to 1 GiB: refused at 1 MiB, not read until memory runs out."""
    import bz2
    import gzip
    import lzma

    compress = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}[form]
    bomb = tmp_path / f"c.toml.{form}"
    bomb.write_bytes(compress(bytes(1 << 20)) * 1024)
    assert_cli_error(cli("train", "--data", tiny_data, "--out", tmp_path / "run", "--config", bomb),
                     f"--config {bomb}: holds more than 1 MiB once decompressed")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value, words", [
    ("9" * 5000, "max_updates (line 2) is a number of more than 4,300 digits"),
    ("9" * 5000 + ".0", "max_updates inf: should be a whole number"),
    ("0x" + "f" * 5000, "max_updates must be at most 2147483647, got a 6,021-digit number"),
], ids=["5,000 digits", "5,000-digit float", "hexadecimal"])
def test_a_config_with_a_huge_number_is_one_line(value, words, tiny_data, tmp_path):
    (tmp_path / "c.toml").write_text(f"[train]\nmax_updates = {value}\n")
    assert_cli_error(cli("train", "--data", tiny_data, "--out", tmp_path / "run", "--config", tmp_path / "c.toml"),
                     str(tmp_path / "c.toml"), words)
    assert not (tmp_path / "run").exists()
