"""nmt.regularization: a fresh sampled segmentation of the training split per epoch (--bpe-dropout),
deterministic per (seed, epoch), decoding to the same text, and exact on resume."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import prepare_sample, torch_threads

from nmt import checkpoint
from nmt.batching import collate
from nmt.config import ModelConfig, TrainConfig
from nmt.dataset import ParallelDataset, read_tokenizer
from nmt.distributed import Comm
from nmt.errors import ConfigError
from nmt.regularization import Resegmenter, pack
from nmt.train import train
from nmt.trainer import Trainer


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return prepare_sample(tmp_path_factory.mktemp("reg_data"), 300, 20)


def resegmenter(data: Path, dropout: float = 0.1, seed: int = 1, max_len: int = 255) -> Resegmenter:
    return Resegmenter(ParallelDataset(data, "train"), read_tokenizer(data), dropout, seed, max_len)


def test_pack_keeps_every_pair_and_collates_like_the_store(data):
    store = ParallelDataset(data, "train")
    pairs = [store[i] for i in range(len(store))]
    packed = pack([s.tolist() for s, _ in pairs], [t.tolist() for _, t in pairs])
    assert len(packed) == len(store)
    assert all(np.array_equal(packed[i][0], s) and np.array_equal(packed[i][1], t) for i, (s, t) in enumerate(pairs))
    index = np.array([5, 0, 17])
    a, b = collate(packed, index), collate(store, index)
    assert torch.equal(a.src, b.src) and torch.equal(a.tgt_in, b.tgt_in) and torch.equal(a.tgt_out, b.tgt_out)


def test_an_epoch_is_sampled_from_seed_and_epoch_alone(data):
    one, two = resegmenter(data), resegmenter(data)
    try:
        a0, b0 = one.epoch(0), two.sample(0)
        assert np.array_equal(a0.tokens, b0.tokens) and np.array_equal(a0.src_lengths, b0.src_lengths)
        a1 = one.epoch(1)  # sampled ahead by the worker: the same as sampled now
        assert np.array_equal(a1.tokens, two.sample(1).tokens)
        assert not np.array_equal(a0.tokens, a1.tokens)  # another epoch, another segmentation
        other_seed = resegmenter(data, seed=2).sample(0)
        assert not np.array_equal(a0.tokens, other_seed.tokens)
    finally:
        one.close(), two.close()


def test_a_jump_to_another_epoch_waits_for_the_sample_already_running(data):
    """After a jump (a resume within one process) the stale sample ahead is cancelled or, once running,
    left to end: never two samples at once (SentencePiece's sampling takes turns anyway; this saves the core)."""
    reseg, running, most = resegmenter(data), [0], [0]
    sample = reseg.sample

    def counted(epoch: int):
        running[0] += 1
        most[0] = max(most[0], running[0])
        time.sleep(0.2)  # long enough that the jump below comes while epoch 1 is sampled
        try:
            return sample(epoch)
        finally:
            running[0] -= 1

    reseg.sample = counted
    try:
        reseg.epoch(0)
        time.sleep(0.05)  # the worker has started on epoch 1
        jumped = reseg.epoch(5)
        assert most[0] == 1 and list(reseg._ahead) == [6]
        assert np.array_equal(jumped.tokens, sample(5).tokens)
    finally:
        reseg.close()


def test_the_sampled_ids_spell_the_same_text_in_more_pieces(data):
    reseg = resegmenter(data, dropout=0.2)
    try:
        sampled, store = reseg.sample(0), ParallelDataset(data, "train")
        tok = read_tokenizer(data)
        n = len(store)
        for side in (0, 1):
            stored = tok.decode([store[i][side].tolist() for i in range(n)])
            again = tok.decode([sampled[i][side].tolist() for i in range(n)])
            assert again == stored
        stored_tokens = int(store.src_lengths.sum() + store.tgt_lengths.sum())
        assert len(sampled.tokens) > 1.05 * stored_tokens  # BPE-dropout splits words into more pieces
    finally:
        reseg.close()


def test_pairs_too_long_once_sampled_keep_their_stored_ids(data):
    store = ParallelDataset(data, "train")
    limit = int(max(store.src_lengths.max(), store.tgt_lengths.max()))
    reseg = resegmenter(data, dropout=0.5, max_len=limit)
    try:
        sampled = reseg.sample(0)
        assert sampled.fallbacks > 0 and int(max(sampled.src_lengths.max(), sampled.tgt_lengths.max())) <= limit
    finally:
        reseg.close()


MODEL = dict(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64)
TRAIN = dict(max_tokens=256, update_tokens=600, warmup=10, log_interval=1, valid_interval=1000, save_interval=1000,
             valid_bleu_sentences=0, bpe_dropout=0.1)


def run(data: Path, out: Path, max_updates: int) -> checkpoint.Checkpoint:
    with torch_threads(1):
        result = train(data, out, preset="tiny", model_overrides=MODEL,
                       train_overrides={**TRAIN, "max_updates": max_updates})
    return checkpoint.load(result.checkpoint)


def test_training_with_bpe_dropout_resumes_exactly(data, tmp_path):
    """Stopped at update 6 (epoch 0) and resumed to 24 (a few epochs: each draws its own segmentation), the
    run ends where an uninterrupted one does."""
    straight = run(data, tmp_path / "straight", 24)
    assert straight.state.epoch >= 2
    run(data, tmp_path / "stopped", 6)
    resumed = run(data, tmp_path / "stopped", 24)
    assert resumed.state.updates == straight.state.updates == 24
    assert all(torch.equal(v, resumed.weights[k]) for k, v in straight.weights.items())
    without = checkpoint.load(train(data, tmp_path / "plain", preset="tiny", model_overrides=MODEL,
                                    train_overrides={**TRAIN, "bpe_dropout": 0.0, "max_updates": 24}).checkpoint)
    assert not all(torch.equal(v, without.weights[k]) for k, v in straight.weights.items())  # it did something


@pytest.fixture(scope="module")
def spm_data(tiny_spm, tiny_corpus, tmp_path_factory) -> Path:
    from nmt.dataset import prepare

    out = tmp_path_factory.mktemp("reg_spm") / "data"
    prepare(tiny_spm, out, "en", "de", tiny_corpus / "train", tiny_corpus / "valid")
    return out


@pytest.mark.parametrize("world, expect", [(1, "note: sentencepiece samples"), (2, "train it in one process")])
def test_sentencepiece_sampling_is_kept_to_one_process(spm_data, tmp_path, world, expect):
    """SentencePiece samples differently in each process: ranks would batch different segmentations (their
    updates would not line up), so more than one process is refused; one process gets a note about resuming."""
    cfg = TrainConfig(**{**TRAIN, "max_updates": 1})
    messages: list[str] = []
    make = functools.partial(Trainer, spm_data, tmp_path / "run", ModelConfig(**MODEL, vocab_size=read_tokenizer(
        spm_data).vocab_size), cfg, torch.device("cpu"), lambda p: p.message and messages.append(p.message),
                             Comm(rank=0, world=world))
    if world == 1:
        make()
        assert any(expect in m for m in messages)
    else:
        with pytest.raises(ConfigError, match=expect):
            make()


def test_several_processes_are_refused_before_they_start(spm_data, tmp_path, monkeypatch):
    monkeypatch.setattr("nmt.train.spawn", lambda *a, **k: pytest.fail("spawned"))
    with pytest.raises(ConfigError, match="--bpe-dropout with a sentencepiece model"):
        train(spm_data, tmp_path / "run", preset="tiny", model_overrides=MODEL,
              train_overrides={**TRAIN, "max_updates": 1}, nproc=2)
    assert not list((tmp_path / "run").glob("*.pt"))
