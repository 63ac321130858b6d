"""nmt.data.regularization: a fresh sampled segmentation of the training split per epoch (--bpe-dropout),
deterministic per (seed, epoch), decoding to the same text, and exact on resume."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import prepare_sample, torch_threads

from nmt.core.errors import InputError
from nmt.data.batches import collate
from nmt.data.dataset import ParallelDataset, read_tokenizer
from nmt.data.regularization import Resegmenter, pack
from nmt.model import checkpoint
from nmt.training.launch import train


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
    from nmt.data.dataset import prepare

    out = tmp_path_factory.mktemp("reg_spm") / "data"
    prepare(tiny_spm, out, "en", "de", tiny_corpus / "train", tiny_corpus / "valid")
    return out


def test_training_with_sentencepiece_sampling_resumes_exactly(spm_data, tmp_path):
    """As with youtokentome: the resumed part runs in a fresh process, which samples the epoch again
    (SentencePiece's own sampler would draw another sample there), and ends where an uninterrupted run does."""
    straight = run(spm_data, tmp_path / "straight", 16)
    run(spm_data, tmp_path / "stopped", 4)
    code = ("import sys; sys.path.insert(0, sys.argv[3]); from pathlib import Path; from test_regularization import run; "
            "run(Path(sys.argv[1]), Path(sys.argv[2]), 16)")
    subprocess.run([sys.executable, "-c", code, str(spm_data), str(tmp_path / "stopped"), str(Path(__file__).parent)],
                   check=True, timeout=300, capture_output=True)
    resumed = checkpoint.load(checkpoint.latest(tmp_path / "stopped"))
    assert resumed.state.updates == straight.state.updates == 16
    assert all(torch.equal(v, resumed.weights[k]) for k, v in straight.weights.items())


def test_a_tokenizer_that_cannot_sample_stops_the_start(tmp_path, monkeypatch):
    """A SentencePiece word model has no sampling: the error comes before training (and before any spawn)."""
    import sentencepiece as spm

    from nmt.data.dataset import prepare

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    lines = {"en": ["a man rides a bike", "two dogs play"] * 30, "de": ["ein mann fährt rad", "zwei hunde spielen"] * 30}
    for split in ("train", "valid"):
        for lang, text in lines.items():
            (corpus / f"{split}.{lang}").write_text("\n".join(text) + "\n", "utf-8")
    spm.SentencePieceTrainer.train(input=[str(corpus / "train.en"), str(corpus / "train.de")], model_type="word",
                                   model_prefix=str(tmp_path / "word"), vocab_size=14, pad_id=0, unk_id=1, bos_id=2,
                                   eos_id=3, minloglevel=2)
    prepare(tmp_path / "word.model", tmp_path / "data", "en", "de", corpus / "train", corpus / "valid")
    monkeypatch.setattr("nmt.training.launch.spawn", lambda *a, **k: pytest.fail("spawned"))
    for nproc in (1, 2):
        with pytest.raises(InputError, match="`bpe_dropout` needs a unigram or BPE SentencePiece model"):
            train(tmp_path / "data", tmp_path / "run", preset="tiny", model_overrides=MODEL,
                  train_overrides={**TRAIN, "max_updates": 1}, nproc=nproc)
