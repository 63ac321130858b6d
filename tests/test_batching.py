"""Token-based batching: coverage, budget, determinism, sharding and collation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nmt.core.errors import InputError
from nmt.core.vocab import BOS, EOS, PAD
from nmt.data.batches import Batch, collate, group_updates, make_batches, shard


def lengths(n: int = 500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(N,) src and tgt lengths of 1..60 tokens, loosely correlated, with many ties."""
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 60, n)
    tgt = np.clip(src + rng.integers(-5, 6, n), 1, 60)
    return src, tgt


def cost(batch: np.ndarray, src: np.ndarray, tgt: np.ndarray) -> int:
    """Padded tokens of a batch: B * max(len + 1) over both sides."""
    return len(batch) * int(max((src[batch] + 1).max(), (tgt[batch] + 1).max()))


@pytest.mark.parametrize("max_tokens", [1, 61, 100, 1000, 4096, 10**6])
@pytest.mark.parametrize("shuffle", [True, False])
def test_every_pair_exactly_once_within_budget(max_tokens, shuffle):
    src, tgt = lengths()
    batches = make_batches(src, tgt, max_tokens, shuffle=shuffle)
    assert all(b.dtype == np.int64 and len(b) for b in batches)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(src)))
    for b in batches:
        assert cost(b, src, tgt) <= max_tokens or len(b) == 1  # an over-long pair goes alone


def test_batches_are_full_not_just_legal():
    # Greedy cutting in length order: adding the next pair would break the budget.
    src, tgt = lengths(2000)
    batches = make_batches(src, tgt, 2000, shuffle=False)
    order = np.concatenate(batches)
    for b, nxt in zip(batches, batches[1:]):
        assert cost(np.append(b, nxt[0]), src, tgt) > 2000
    assert np.all(np.diff(tgt[order]) >= 0)  # sorted by target length when not shuffled


def test_max_sentences():
    src, tgt = np.ones(100, dtype=np.int64), np.ones(100, dtype=np.int64)
    batches = make_batches(src, tgt, 10**6, max_sentences=16)
    assert max(map(len, batches)) == 16 and sum(map(len, batches)) == 100


def test_over_long_pair_gets_its_own_batch():
    src = np.array([3, 500, 4, 2])
    tgt = np.array([3, 2, 4, 700])
    batches = make_batches(src, tgt, 100, shuffle=False)
    assert sorted(np.concatenate(batches).tolist()) == [0, 1, 2, 3]
    assert [1] in [b.tolist() for b in batches] and [3] in [b.tolist() for b in batches]


def test_deterministic_per_seed_and_epoch():
    src, tgt = lengths()
    same = lambda a, b: len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))  # noqa: E731
    a = make_batches(src, tgt, 1000, seed=3, epoch=1)
    assert same(a, make_batches(src, tgt, 1000, seed=3, epoch=1))
    assert not same(a, make_batches(src, tgt, 1000, seed=3, epoch=2))
    assert not same(a, make_batches(src, tgt, 1000, seed=4, epoch=1))
    # The buckets themselves change, not just their order (random tie-break).
    sets = lambda bs: {frozenset(b.tolist()) for b in bs}  # noqa: E731
    assert sets(a) != sets(make_batches(src, tgt, 1000, seed=3, epoch=2))
    # Without shuffling, batches do not depend on the epoch.
    assert same(make_batches(src, tgt, 1000, shuffle=False, epoch=0),
                make_batches(src, tgt, 1000, shuffle=False, epoch=5))


def test_empty_and_bad_arguments():
    assert make_batches(np.zeros(0), np.zeros(0), 100) == []
    with pytest.raises(InputError, match="`max_tokens`"):
        make_batches(*lengths(10), 0)
    with pytest.raises(InputError, match="max-sentences"):
        make_batches(*lengths(10), 100, max_sentences=0)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("n_pairs", [1, 5, 37, 500])
def test_shard_disjoint_equal_and_covering(world_size, n_pairs):
    src, tgt = lengths(n_pairs)
    batches = make_batches(src, tgt, 300, seed=1, epoch=0)
    shares = [shard(batches, r, world_size) for r in range(world_size)]
    assert len({len(s) for s in shares}) == 1  # equal step counts on every rank
    taken = [i for s in shares for b in s for i in b.tolist()]
    if n_pairs >= world_size:
        assert sorted(taken) == list(range(n_pairs))  # disjoint, and nothing dropped
    else:  # too few pairs to give each rank its own: some are repeated, none lost
        assert set(taken) == set(range(n_pairs))
    for s in shares:
        for b in s:
            assert len(b) and cost(b, src, tgt) <= 300
    # Every rank computes the same split independently.
    assert all(np.array_equal(x, y) for x, y in zip(shard(batches, 0, world_size), shares[0]))


def test_shard_without_remainder_is_round_robin():
    batches = [np.array([i]) for i in range(6)]
    assert [b.tolist() for b in shard(batches, 1, 3)] == [[1], [4]]
    with pytest.raises(InputError):
        shard(batches, 3, 3)


class ListDataset:
    """Stands in for ParallelDataset: pairs of uint16 id arrays."""

    def __init__(self, pairs):
        self.pairs = [(np.array(s, dtype=np.uint16), np.array(t, dtype=np.uint16)) for s, t in pairs]

    def __getitem__(self, i):
        return self.pairs[i]


def test_collate_layout():
    ds = ListDataset([([10, 11, 12], [20]), ([13], [21, 22, 23, 24]), ([14, 15], [25, 26])])
    batch = collate(ds, np.array([2, 0, 1]))
    assert isinstance(batch, Batch)
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.long
    assert batch.src.tolist() == [[14, 15, EOS, PAD], [10, 11, 12, EOS], [13, EOS, PAD, PAD]]
    assert batch.tgt_in.tolist() == [[BOS, 25, 26, PAD, PAD], [BOS, 20, PAD, PAD, PAD],
                                     [BOS, 21, 22, 23, 24]]
    assert batch.tgt_out.tolist() == [[25, 26, EOS, PAD, PAD], [20, EOS, PAD, PAD, PAD],
                                      [21, 22, 23, 24, EOS]]
    assert batch.src_tokens == int((batch.src != PAD).sum()) == 9
    assert batch.tgt_tokens == int((batch.tgt_out != PAD).sum()) == 10
    assert batch.indices.tolist() == [2, 0, 1]
    # tgt_in is tgt_out shifted right by one (teacher forcing), EOS replaced by PAD.
    words = (batch.tgt_out[:, :-1] != PAD) & (batch.tgt_out[:, :-1] != EOS)
    assert torch.equal(batch.tgt_in[:, 1:][words], batch.tgt_out[:, :-1][words])


def test_collate_with_a_prepared_store(tmp_path):
    from nmt.data.dataset import ParallelDataset, prepare
    from nmt.text.bpe import train_bpe

    en = [f"the cat number {i} sat on the mat" for i in range(30)]
    de = [f"die katze nummer {i} sass auf der matte" for i in range(30)]
    (tmp_path / "t.en").write_text("\n".join(en) + "\n")
    (tmp_path / "t.de").write_text("\n".join(de) + "\n")
    train_bpe([tmp_path / "t.en", tmp_path / "t.de"], tmp_path / "bpe.model", vocab_size=80, threads=1)
    prepare(tmp_path / "bpe.model", tmp_path / "data", "en", "de", tmp_path / "t")
    ds = ParallelDataset(tmp_path / "data", "train")
    for idx in make_batches(ds.src_lengths, ds.tgt_lengths, 200):
        batch = collate(ds, idx)
        for row, i in enumerate(idx):
            s, t = ds[int(i)]
            assert batch.src[row, : len(s)].tolist() == s.tolist()
            assert batch.src[row, len(s)] == EOS
            assert batch.tgt_out[row, len(t)] == EOS and batch.tgt_in[row, 0] == BOS
        assert batch.src.numel() <= 200 and batch.tgt_out.numel() <= 200


class FlatDataset:
    """Stands in for ParallelDataset's layout: flat ids, offsets and lengths (the vectorised path)."""

    def __init__(self, pairs, dtype):
        flat, self.src_offsets, self.tgt_offsets = [], [], []
        for s, t in pairs:
            self.src_offsets.append(len(flat))
            flat += s
            self.tgt_offsets.append(len(flat))
            flat += t
        self.tokens = np.array(flat, dtype=dtype)
        self.src_offsets = np.array(self.src_offsets, dtype="<i8")
        self.tgt_offsets = np.array(self.tgt_offsets, dtype="<i8")
        self.src_lengths = np.array([len(s) for s, _ in pairs], dtype="<i4")
        self.tgt_lengths = np.array([len(t) for _, t in pairs], dtype="<i4")


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_vectorised_collate_matches_pair_by_pair(dtype):
    rng = np.random.default_rng(0)
    pairs = [(rng.integers(4, 70000 if dtype == np.uint32 else 65535, rng.integers(0, 9)).tolist(),
              rng.integers(4, 1000, rng.integers(0, 9)).tolist()) for _ in range(60)]  # some empty sides
    flat, listed = FlatDataset(pairs, dtype), ListDataset([])
    listed.pairs = [(np.array(s, dtype=dtype), np.array(t, dtype=dtype)) for s, t in pairs]
    for indices in (rng.permutation(60)[:17], np.array([5]), np.arange(60), np.array([], dtype=np.int64)):
        a, b = collate(flat, indices), collate(listed, indices)
        for name in ("src", "tgt_in", "tgt_out"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype == torch.long and torch.equal(x, y), name
        assert (a.src_tokens, a.tgt_tokens) == (b.src_tokens, b.tgt_tokens)
        assert a.indices.tolist() == b.indices.tolist() == indices.tolist()
        for row, i in enumerate(indices.tolist()):  # and both are right
            s, t = pairs[i]
            assert a.src[row].tolist() == s + [EOS] + [PAD] * (a.src.shape[1] - len(s) - 1)
            assert a.tgt_in[row].tolist() == [BOS] + t + [PAD] * (a.tgt_in.shape[1] - len(t) - 1)


@pytest.mark.parametrize("update_tokens", [1, 10, 25, 1000])
def test_group_updates_covers_batches_in_order(update_tokens):
    lengths = np.array([3, 4, 5, 6, 7, 8])
    batches = [np.array([0, 1]), np.array([2]), np.array([3, 4]), np.array([5])]
    groups = group_updates(batches, lengths, update_tokens)
    assert [i for g in groups for i in g] == list(range(len(batches)))
    tokens = [sum(int(lengths[batches[i]].sum()) + len(batches[i]) for i in g) for g in groups]
    assert all(t >= update_tokens for t in tokens[:-1])
    # a group closes as soon as it reaches the budget
    assert all(t - (int(lengths[batches[g[-1]]].sum()) + len(batches[g[-1]])) < update_tokens for t, g in zip(tokens, groups))
