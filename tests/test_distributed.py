"""Data-parallel training with torch.distributed on CPU (gloo): 2 worker processes match one process,
and two torchrun "machines" on loopback (env://) train as one job with them and resume exactly.

Each multi-process run starts fresh Python processes that import torch (several seconds each on a
small machine), so these tests are few and marked slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import prepare_sample

from nmt.config.flags import as_flags
from nmt.core.errors import ConfigError, DataError
from nmt.model import checkpoint
from nmt.training.distributed import Comm, free_port, torchrun_env, workers
from nmt.training.launch import check_resumable_here, train

MODEL = dict(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64)
NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
# Several batches per update (max 256, update 600 target tokens), so every rank accumulates, and
# groups with an odd number of batches make `shard` split one.
TRAIN = dict(max_tokens=256, update_tokens=600, warmup=10, log_interval=1, valid_interval=1000, save_interval=1000,
             valid_bleu_sentences=0)
CLI_OPTIONS = ["--preset", "tiny", "--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff", "64",
               "--max-tokens", "256", "--update-tokens", "600", "--warmup", "10", "--log-interval", "1",
               "--valid-interval", "1000", "--valid-bleu-sentences", "0", "--threads", "1"]
ATOL = 1e-5  # parameters, 2 processes vs 1: float32 sums in another order, after K Adam updates


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A prepared store from the first 400 training and 30 validation pairs of the sample corpus."""
    return prepare_sample(tmp_path_factory.mktemp("dist_data"), 400, 30)


def run(data: Path, out: Path, max_updates: int, nproc: int, model: dict, **overrides) -> Path:
    """Train on `nproc` processes, each on one thread (so both sides of a comparison do the same arithmetic)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = train(data, out, preset="tiny", model_overrides=model, nproc=nproc, threads=1,
                       train_overrides={**TRAIN, **overrides, "max_updates": max_updates})
    finally:
        torch.set_num_threads(before)
    return result.checkpoint


def grad_norms(out: Path) -> list[float]:
    records = [json.loads(line) for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r["gnorm"] for r in records if "gnorm" in r]


@pytest.mark.slow
def test_two_processes_match_one_process(data, tmp_path):
    # Adam divides each update by |gradient|: where a gradient is ~0, float rounding flips its sign
    # and moves the weight by a full lr. A larger eps keeps the update proportional to the gradient
    # there, so the comparison measures the distributed arithmetic, not that amplification. Adam
    # also hides a wrongly scaled gradient, so the logged gradient norms are compared too.
    k, eps = 4, 1e-3
    one = run(data, tmp_path / "one", k, 1, {**MODEL, **NO_DROPOUT}, adam_eps=eps)
    two = run(data, tmp_path / "two", k, 2, {**MODEL, **NO_DROPOUT}, adam_eps=eps)
    a, b = checkpoint.load(one), checkpoint.load(two)
    assert a.state.updates == b.state.updates == k
    for name, tensor in a.weights.items():
        torch.testing.assert_close(b.weights[name], tensor, atol=ATOL, rtol=0, msg=lambda m, name=name: f"{name}: {m}")
    assert grad_norms(tmp_path / "two") == pytest.approx(grad_norms(tmp_path / "one"), rel=1e-5)
    assert len(b.resumable.rng) == 2  # every rank's dropout stream is saved


def torchrun_nodes(data: Path, out: Path, max_updates: int, logs: Path) -> list[str]:
    """`nmt train` as one job of two torchrun "machines" (--nnodes 2, one process each) that meet on
    127.0.0.1, started together and sharing --out as machines on a shared filesystem do; each node's output."""
    port, processes, paths = free_port(), [], []
    for node in (0, 1):
        paths.append(logs / f"node{node}-to-{max_updates}.log")
        with open(paths[-1], "w", encoding="utf-8") as log:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                 "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
                 "-m", "nmt", "train", "--data", str(data), "--out", str(out), *CLI_OPTIONS,
                 "--max-updates", str(max_updates)], stdout=log, stderr=subprocess.STDOUT))
    try:
        codes = [p.wait(timeout=180) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
    texts = [path.read_text(encoding="utf-8") for path in paths]
    assert codes == [0, 0], "\n".join(text[-3000:] for text in texts)
    return texts


@pytest.mark.slow
def test_two_torchrun_nodes_train_as_one_job_and_resume_exactly(data, tmp_path):
    # Node 1's process has RANK 1 but LOCAL_RANK 0: only rank 0 may plan, lock the folder and write.
    # The two-node job stops at update k and is resumed to 2k, under two nodes again; dropout is on,
    # so each rank must continue its own random stream. The reference is a 2-process run on one
    # machine (`nproc=2`) straight to 2k: a job of 2 ranks does the same arithmetic whoever started
    # its processes (a sum of two gradients does not depend on their order), so the two-node job
    # equals it exactly (closer than ATOL) at update k (one job, not two), and the resumed one at 2k
    # (an exact resume: the single-machine run stands for the uninterrupted two-node run).
    k = 3
    straight = tmp_path / "straight"
    run(data, straight, 2 * k, 2, MODEL, save_interval=k)
    nodes = tmp_path / "nodes"
    first = torchrun_nodes(data, nodes, k, tmp_path)
    assert "2 processes (gloo)" in first[0] and "trained to update 3" in first[0]
    assert "trained to update" not in first[1]  # node 1 runs rank 1, which reports nothing
    resumed = torchrun_nodes(data, nodes, 2 * k, tmp_path)
    assert f"resuming from {nodes}" in resumed[0]
    for update in (k, 2 * k):
        a = checkpoint.load(straight / checkpoint.STEP_NAME.format(update))
        b = checkpoint.load(nodes / checkpoint.STEP_NAME.format(update))
        assert a.state.updates == b.state.updates == update and len(b.resumable.rng) == 2
        for name, tensor in a.weights.items():
            assert torch.equal(tensor, b.weights[name]), f"update {update}: {name}"
    assert sorted(p.name for p in nodes.glob("checkpoint_*.pt")) == [checkpoint.STEP_NAME.format(u) for u in (k, 2 * k)]


class TwoRanks(Comm):
    """This process as rank `rank` of 2, the other rank's outcome given (`gather` is faked: no process group)."""

    def __init__(self, rank: int, other: tuple):
        super().__init__(rank, 2)
        self.other = other

    def gather(self, obj):
        return [obj, self.other] if self.rank == 0 else [self.other, obj]


def fails(error):
    def fn():
        raise error
    return fn


def test_an_error_on_one_rank_is_raised_on_every_rank():
    # Without this, rank 0 would wait in its next collective for a rank that has already exited.
    def node1_lacks_data():
        return (DataError("data/train.idx: no such file"), "node1")

    with pytest.raises(DataError, match=r"^rank 1 \(on node1\): data/train.idx: no such file$"):
        TwoRanks(0, node1_lacks_data()).all_succeed(lambda: "trainer")
    assert TwoRanks(0, (None, "node1")).all_succeed(lambda: "trainer") == "trainer"
    with pytest.raises(ConfigError, match=r"^rank 1 \(on .+\): no --out$"):
        TwoRanks(1, (None, "node0")).all_succeed(fails(ConfigError("no --out")))
    with pytest.raises(ConfigError, match=r"^rank 0 \(on .+\): no --out$"):  # the lowest failing rank speaks
        TwoRanks(0, node1_lacks_data()).all_succeed(fails(ConfigError("no --out")))
    with pytest.raises(ConfigError, match=r"^no --out$"):  # one process: the error as it was
        Comm().all_succeed(fails(ConfigError("no --out")))


def test_a_machine_without_the_checkpoint_rank_0_resumes_from_is_told_to_share_the_folder(tmp_path):
    # Separate filesystems: rank 0 found OUT/checkpoint_N.pt on its machine, another machine has no such file.
    path = tmp_path / "run" / checkpoint.STEP_NAME.format(3)
    check_resumable_here(path, 0)  # rank 0 chose it from its own folder
    with pytest.raises(ConfigError, match=r"rank 0 resumes from this checkpoint.*shared filesystem"):
        check_resumable_here(path, 1)
    path.parent.mkdir()
    path.write_bytes(b"a copy")
    check_resumable_here(path, 1)


def test_torchrun_environment_is_detected(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert torchrun_env() is None
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "node0")
    assert torchrun_env() is None  # no rendezvous port: not a torchrun job
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert torchrun_env() == (5, 8, 1)


def test_worker_counts_and_their_errors(monkeypatch):
    assert workers(0, 1) == (1, False)
    assert workers(0, 3) == (3, False)
    with pytest.raises(ConfigError, match="`nproc` must be at least 1") as caught:
        workers(0, 0)
    assert as_flags(str(caught.value)) == "--nproc must be at least 1, got 0"  # the field, shown as its option
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="`gpus` 2: no CUDA device"):
        workers(2, 1)
    with pytest.raises(ConfigError, match="drop `nproc`"):
        workers(1, 2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert workers(2, 1) == (2, True)
    with pytest.raises(ConfigError, match="only 2 CUDA devices"):
        workers(4, 1)


def test_nproc_under_torchrun_is_an_error(data, tmp_path, monkeypatch):
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "1")):
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match="torchrun already started the processes"):
        train(data, tmp_path, preset="tiny", nproc=2)
    assert not os.path.exists(tmp_path / "log.jsonl")
