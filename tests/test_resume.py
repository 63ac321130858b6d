"""Exact resumption: straight vs stopped-and-resumed runs give identical parameters (torch.equal), after a
normal stop, Ctrl-C (SIGINT) and kill -9, with dropout on; a failed checkpoint write leaves a loadable one.
Each resumed run must train only the updates that were left (a restart from scratch reaches the same
parameters, so equality alone cannot tell the two apart).

Runs use one CPU thread (in this process and in the subprocesses), so both sides do the same arithmetic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import prepare_sample, torch_threads

from nmt.core.errors import CheckpointError
from nmt.model import checkpoint
from nmt.training.launch import train
from nmt.training.trainer import Trainer

MODEL = dict(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64)  # dropout 0.1 (tiny preset)
TRAIN = dict(max_tokens=256, update_tokens=600, warmup=10, log_interval=1, valid_interval=1000, save_interval=1000,
             valid_bleu_sentences=5)
CLI_OPTIONS = ["--preset", "tiny", "--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff", "64",
               "--max-tokens", "256", "--update-tokens", "600", "--warmup", "10", "--log-interval", "1",
               "--valid-interval", "1000", "--valid-bleu-sentences", "5", "--threads", "1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A prepared store from the first 400 training and 30 validation pairs of the sample corpus."""
    return prepare_sample(tmp_path_factory.mktemp("resume_data"), 400, 30)


def run(data: Path, out: Path, max_updates: int, **overrides) -> Path:
    with torch_threads(1):
        result = train(data, out, preset="tiny", model_overrides=MODEL,
                       train_overrides={**TRAIN, **overrides, "max_updates": max_updates})
    return result.checkpoint


def resume(data: Path, out: Path, max_updates: int, **overrides) -> Path:
    """Rerun on `out`, which holds a checkpoint: the run must go on from it, training only the rest."""
    start = checkpoint.load(checkpoint.latest(out)).state.updates
    logged = len(logged_updates(out, "loss"))
    path = run(data, out, max_updates, **overrides)
    assert logged_updates(out, "loss")[logged:] == list(range(start + 1, max_updates + 1)), "the run did not resume"
    return path


def assert_identical(a: Path, b: Path) -> None:
    ca, cb = checkpoint.load(a), checkpoint.load(b)
    for key in ("updates", "epoch", "position"):
        assert getattr(ca.state, key) == getattr(cb.state, key), key
    assert ca.weights.keys() == cb.weights.keys()
    for name, tensor in ca.weights.items():
        assert torch.equal(tensor, cb.weights[name]), f"{name} differs between {a} and {b}"
    sa, sb = ca.resumable.optimizer["state"], cb.resumable.optimizer["state"]
    assert sa.keys() == sb.keys() and ca.resumable.optimizer["param_groups"] == cb.resumable.optimizer["param_groups"]
    for param in sa:
        assert sa[param].keys() == sb[param].keys()
        assert all(torch.equal(sa[param][k], sb[param][k]) for k in sa[param]), f"Adam state of parameter {param} differs"


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """Checkpoint of an uninterrupted run at update N (one run per N, cached)."""
    made: dict[int, Path] = {}

    def at(n: int) -> Path:
        if n not in made:
            made[n] = run(data, tmp_path_factory.mktemp(f"straight_{n}"), n)
        return made[n]

    return at


def test_stop_and_resume_gives_identical_parameters(data, tmp_path, reference):
    # 20 updates cross the epoch boundary (14 updates per epoch here); dropout is on.
    k = 10
    first = run(data, tmp_path, k)
    assert checkpoint.load(first).state.updates == k
    assert_identical(resume(data, tmp_path, 2 * k), reference(2 * k))


def test_a_run_with_a_tail_resumes_exactly(data, tmp_path):
    """--lr-tail's rate depends on where the run ends (--max-updates 20), not on where a session stopped
    (here at the end of epoch 1, 14 updates)."""
    tail = dict(lr_tail="cosine", lr_tail_share=0.5)
    straight = run(data, tmp_path / "straight", 20, **tail)
    first = run(data, tmp_path / "stopped", 20, max_epochs=1, **tail)
    assert checkpoint.load(first).state.updates == 14
    assert_identical(resume(data, tmp_path / "stopped", 20, **tail), straight)


@pytest.mark.parametrize("used", [500.0, 1000.0, 499.0])
def test_max_time_counts_the_run_not_the_session(used, data, tmp_path):
    """A resumed run keeps its clock: a run that has used up its --max-time makes no update (a rerun of a
    finished recipe used to make one more, and a checkpoint that changed the average); one with time
    left trains on."""
    run(data, tmp_path, 3)
    path = checkpoint.latest(tmp_path)
    ckpt = checkpoint.load(path)
    ckpt.state.elapsed = used  # seconds the run has taken so far
    checkpoint.save(path, ckpt)
    files, logged = sorted(tmp_path.iterdir()), len(logged_updates(tmp_path, "loss"))
    with torch_threads(1):
        result = train(data, tmp_path, preset="tiny", model_overrides=MODEL,
                       train_overrides={**TRAIN, "max_updates": 50, "max_time": 500.0})
    if used >= 500.0:
        assert (result.updates, result.new_updates, result.stopped) == (3, 0, "max-time")
        assert sorted(tmp_path.iterdir()) == files and len(logged_updates(tmp_path, "loss")) == logged
        assert checkpoint.latest(tmp_path) == path
    else:  # the second left: it trains on until the clock or --max-updates stops it
        assert result.new_updates > 0 and result.updates == 3 + result.new_updates


def test_rerunning_a_finished_run_says_so(data, tmp_path):
    run(data, tmp_path, 3)
    r = subprocess.run([sys.executable, "-m", "nmt", "train", "--data", str(data), "--out", str(tmp_path),
                        *CLI_OPTIONS, "--max-updates", "3"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"nothing to train: {tmp_path} had already ended at update 3 (stopped by max-updates); raise " \
           "--max-updates to train on" in r.stderr, r.stderr
    assert not list(tmp_path.glob("checkpoint_00000004.pt"))


def test_a_restart_from_scratch_is_not_taken_for_a_resume(data, tmp_path, reference, monkeypatch):
    """The check above on a deliberately broken `restore` that loads nothing: training restarts from
    update 0 and reaches the reference parameters all the same, so only the log can tell."""
    run(data, tmp_path, 3)
    monkeypatch.setattr(Trainer, "restore", lambda self, path: None)
    with pytest.raises(AssertionError, match="the run did not resume"):
        resume(data, tmp_path, 6)
    assert_identical(checkpoint.latest(tmp_path), reference(6))  # equality alone would have passed


def start_cli(data: Path, out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "nmt", "train", "--data", str(data), "--out", str(out), *CLI_OPTIONS,
           "--max-updates", "100000", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_update(proc: subprocess.Popen, out: Path, update: int, timeout: float = 60.0) -> None:
    """Wait until the run has logged `update` (its earlier checkpoints are then complete)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"training ended early: {proc.communicate()[1][-2000:]}"
        if logged_updates(out) and max(logged_updates(out)) >= update:
            return
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"no update {update} logged within {timeout}s")


def logged_updates(out: Path, key: str = "update") -> list[int]:
    """The updates of the log's records (those with `key`: "loss" for the training records alone)."""
    path = out / "log.jsonl"
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.endswith("}")]  # the last line may be half-written
    return [r["update"] for r in records if key in r]


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_checkpoints_the_last_completed_update(data, tmp_path, reference, signum, code):
    proc = start_cli(data, tmp_path)
    wait_for_update(proc, tmp_path, 3)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    saved = checkpoint.latest(tmp_path)
    n = checkpoint.load(saved).state.updates
    assert n == max(logged_updates(tmp_path)) >= 3  # the update under way when Ctrl-C came was finished and saved
    assert f"interrupted at update {n}" in stderr and "run the same command to resume" in stderr
    assert_identical(resume(data, tmp_path, n + 2), reference(n + 2))


@pytest.mark.slow
def test_kill_9_between_checkpoints_resumes_from_the_last_one(data, tmp_path, reference):
    proc = start_cli(data, tmp_path, "--save-interval", "2")
    wait_for_update(proc, tmp_path, 5)  # checkpoint 4 is complete; update 5 is past it
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    saved = checkpoint.latest(tmp_path)
    last = checkpoint.load(saved).state.updates
    assert last >= 4 and last % 2 == 0
    assert max(logged_updates(tmp_path)) >= last  # (> in practice: the kill lands between checkpoints)
    assert_identical(resume(data, tmp_path, last + 3), reference(last + 3))


def test_failed_checkpoint_write_leaves_the_previous_one_loadable(data, tmp_path, monkeypatch, reference):
    real_save = torch.save
    calls = {"n": 0}

    def crash_midway(obj, f, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] < 2:
            return real_save(obj, f, *args, **kwargs)
        f.write(b"PK\x03\x04 half a checkpoint")  # what a crash leaves behind
        raise OSError("simulated crash while writing")

    monkeypatch.setattr(torch, "save", crash_midway)
    # An OSError while writing (disk full) is reported as a one-line CheckpointError naming the file.
    with pytest.raises(CheckpointError, match="checkpoint_00000004.pt: cannot write the checkpoint .simulated crash"):
        run(data, tmp_path, 4, save_interval=2, valid_bleu_sentences=0)
    monkeypatch.undo()

    assert [p.name for p in checkpoint.step_checkpoints(tmp_path)] == ["checkpoint_00000002.pt"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # the temporary file was removed
    assert checkpoint.load(checkpoint.latest(tmp_path)).state.updates == 2
    # kill -9 during a write leaves its temporary file: it must not be taken for a checkpoint.
    (tmp_path / ".checkpoint_00000004.pt.x1y2z3.tmp").write_bytes(b"PK\x03\x04 truncated")
    assert checkpoint.latest(tmp_path).name == "checkpoint_00000002.pt"
    assert_identical(resume(data, tmp_path, 4, save_interval=2, valid_bleu_sentences=0), reference(4))
