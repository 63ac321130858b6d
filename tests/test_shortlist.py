"""The vocabulary shortlist: the table learnt from a corpus (counted by hand), the checkpoint's field (weights_only,
malformed ones refused), the batch's candidates, both engines alike with it, CTranslate2's vmap.txt and the
errors of `nmt shortlist`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import prepare_sample

from nmt.config import SearchConfig
from nmt.core.errors import CheckpointError, ConfigError, DataError
from nmt.core.vocab import EOS, SPECIALS
from nmt.distillation.cooccurrence import learn_shortlist
from nmt.distillation.shortlisting import attach_shortlist
from nmt.engines.search import Restricted
from nmt.model import checkpoint
from nmt.model.shortlist import NONE, Shortlist

# (source ids, target ids) of each pair; target counts 6: 3, 7: 2, 8: 2, 9: 3; sources 4 and 5 in 3 pairs each
PAIRS = [([4, 5], [6, 7]), ([4], [6, 8]), ([5, 5], [7, 9, 9]), ([4, 5], [6, 9, 8])]


class Store:
    """The parts of a ParallelDataset that learning reads, for PAIRS (vocabulary 10)."""

    def __init__(self, pairs: list[tuple[list[int], list[int]]]):
        self.meta = {"vocab_size": 10}
        self.pairs = [(np.array(s, np.uint16), np.array(t, np.uint16)) for s, t in pairs]
        self.tokens = np.concatenate([np.concatenate(p) for p in self.pairs])
        ends = np.cumsum([len(s) + len(t) for s, t in pairs])
        self.tgt_lengths = np.array([len(t) for _, t in pairs], np.int32)
        self.tgt_offsets = ends - self.tgt_lengths

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.pairs[i]


@pytest.mark.parametrize("top, frequent, always, rows", [
    # frequent 6 (3 tokens; 9 too, the larger id); c(4, 7) = 1, c(4, 8) = 2, c(4, 9) = 1; c(5, 7) = 2, c(5, 9) = 2
    (2, 1, [6], {4: [8, 7], 5: [7, 9]}),
    (1, 1, [6], {4: [8], 5: [7]}),
    (2, 0, [], {4: [6, 8], 5: [6, 7]}),  # c(4, 6) = 3: p 1; c(5, 6) = c(5, 7) = 2: the smaller id first
    (3, 2, [6, 9], {4: [8, 7], 5: [7, 8]}),  # frequent targets take no place in a row
    (2**31 - 1, 1, [6], {4: [8, 7, 9], 5: [7, 9, 8]}),  # as wide as the longest row: 3, not 2**31 - 1
])
def test_the_learnt_table(top, frequent, always, rows):
    table, found = learn_shortlist(Store(PAIRS), top, frequent)  # type: ignore[arg-type]
    assert found.tolist() == [*SPECIALS, *always]
    expected = np.full((10, min(top, max(map(len, rows.values())))), NONE)
    for source, targets in rows.items():
        expected[source, : len(targets)] = targets
    assert table.tolist() == expected.tolist()


def test_a_table_too_large_is_one_error_naming_top(monkeypatch):
    import nmt.distillation.cooccurrence as cooccurrence

    monkeypatch.setattr(cooccurrence, "MAX_TABLE_BYTES", 100)  # 10 ids x 3 targets x 4 bytes = 120
    with pytest.raises(ConfigError, match=r"`top` 1000: a table of 10 source ids x 3 targets would take"):
        learn_shortlist(Store(PAIRS), 1000, 1)  # type: ignore[arg-type]


def shortlist_of(vocab: int = 10) -> Shortlist:
    table = torch.full((vocab, 2), NONE, dtype=torch.int32)
    table[4], table[5, 0] = torch.tensor([8, 7]), 9
    return Shortlist(table, torch.tensor([*SPECIALS, 6], dtype=torch.int32))


def test_a_batch_may_output_the_union_of_its_sources_rows():
    sl = shortlist_of()
    assert sl.candidates(torch.tensor([[4, EOS, 0]])).tolist() == [0, 1, 2, 3, 6, 7, 8]
    assert sl.candidates(torch.tensor([[4, EOS], [5, EOS]])).tolist() == [0, 1, 2, 3, 6, 7, 8, 9]


def test_restricted_log_probabilities_are_the_allowed_ones_renormalised():
    class Fixed:
        def start_decoding(self, src):
            return None

        def step(self, tokens, state):
            return torch.log_softmax(torch.arange(10.0).repeat(2, 1), -1)

    out = Restricted(Fixed(), torch.tensor([1, 3, 8])).step(torch.zeros(2), None)
    assert torch.isinf(out[:, [0, 2, 4, 5, 6, 7, 9]]).all()
    assert torch.allclose(out[:, [1, 3, 8]], torch.log_softmax(torch.tensor([1.0, 3.0, 8.0]), -1).repeat(2, 1))


def test_the_checkpoint_keeps_it_as_data(tiny_checkpoint, tmp_path):
    ckpt = checkpoint.load(tiny_checkpoint)
    assert ckpt.shortlist is None  # a checkpoint without one loads as before
    vocab = ckpt.model_config.vocab_size
    path = tmp_path / "s.pt"
    checkpoint.save(path, dataclasses.replace(ckpt, shortlist=shortlist_of(vocab)))
    assert set(torch.load(path, weights_only=True)["shortlist"]) == {"table", "frequent"}
    back = checkpoint.load(path).shortlist
    assert back is not None and torch.equal(back.table, shortlist_of(vocab).table)
    assert torch.equal(back.frequent, shortlist_of(vocab).frequent)


@pytest.mark.parametrize("damage, why", [
    (lambda p: [1, 2], "not a table"),
    (lambda p: {**p, "table": p["table"].long()}, "int32"),
    (lambda p: {**p, "table": p["table"][:5]}, "rows for a vocabulary"),
    (lambda p: {**p, "table": p["table"].clone().fill_(99999)}, "outside the vocabulary"),
    (lambda p: {**p, "table": torch.where(torch.arange(len(p["table"]))[:, None] == EOS, 5, p["table"])},
     "special token"),
    (lambda p: {**p, "frequent": p["frequent"][1:]}, "special tokens"),
])
def test_a_malformed_shortlist_is_one_line(tiny_checkpoint, tmp_path, damage, why):
    ckpt = checkpoint.load(tiny_checkpoint)
    payload = dataclasses.replace(ckpt, shortlist=shortlist_of(ckpt.model_config.vocab_size)).to_payload()
    payload["shortlist"] = damage(payload["shortlist"])
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=why) as e:
        checkpoint.load(tmp_path / "bad.pt")
    assert "\n" not in str(e.value) and "nmt shortlist" in str(e.value)


@pytest.fixture(scope="module")
def shortlisted(tiny_checkpoint, tmp_path_factory) -> tuple[Path, dict]:
    """The briefly trained tiny model, its EOS scaled up (hypotheses that end: see test_engine.py), with a shortlist
    of its own data (train and valid of the same tokenizer)."""
    root = tmp_path_factory.mktemp("shortlisted")
    ckpt = checkpoint.load(tiny_checkpoint)
    ckpt.weights["embed.weight"][EOS] *= 3.0
    checkpoint.save(root / "model.pt", ckpt)
    data = prepare_sample(root, 1000, 50, vocab_size=1000)
    return root / "model.pt", attach_shortlist(root / "model.pt", data, root / "s.pt", top=8, frequent=30)


def test_the_report(shortlisted):
    model, report = shortlisted
    assert report["out"] == str(model.parent / "s.pt") and (report["top"], report["frequent"]) == (8, 34)
    assert 0 < report["targets_per_source"] <= 8 and 0.5 < report["coverage"] < 1
    assert 34 < report["candidates_per_sentence"] < 1000


def lines(n: int = 30) -> list[str]:
    from conftest import SAMPLE_DIR

    return (SAMPLE_DIR / "test.en").read_text(encoding="utf-8").splitlines()[:n]


@pytest.mark.parametrize("beam", [1, 4])
def test_both_engines_translate_alike_with_it(shortlisted, beam):
    pytest.importorskip("ctranslate2")
    from nmt.engines.ct2_engine import CTranslate2Engine
    from nmt.engines.ct2_export import export_ctranslate2
    from nmt.engines.torch_engine import TorchEngine

    model = shortlisted[0].parent / "s.pt"
    out = model.parent / f"ct2-{beam}"
    export_ctranslate2(model, out)
    cfg = SearchConfig(beam=beam).validate()
    ours = TorchEngine(model, cfg, max_sentences=8).translate_chunk(lines())
    ct2 = CTranslate2Engine(out, cfg, threads=1, max_sentences=8, fallback=lambda: TorchEngine(model, cfg))
    theirs = ct2.translate_chunk(lines())
    assert ct2.use_vmap and [t.text for t in theirs] == [t.text for t in ours]
    assert [t.hypotheses[0][1].log_prob for t in theirs] == pytest.approx(
        [t.hypotheses[0][1].log_prob for t in ours], abs=1e-3)
    assert ct2.fallback is not None and ct2.fallback.sentences < len(lines()) // 2  # mostly CTranslate2's own
    whole = TorchEngine(model, cfg, max_sentences=8, shortlist=False).translate_chunk(lines())
    assert [t.text for t in whole] != [t.text for t in ours]  # the shortlist restricts something
    unrestricted = CTranslate2Engine(out, cfg, threads=1, max_sentences=8, shortlist=False)
    assert not unrestricted.use_vmap


def test_vmap_txt(shortlisted, tmp_path):
    pytest.importorskip("ctranslate2")
    from nmt.engines.ct2_export import MANIFEST_FILE, VMAP_FILE, ctranslate2_vocabulary, export_ctranslate2
    from nmt.text.tokenizer import load_tokenizer

    model = shortlisted[0].parent / "s.pt"
    export_ctranslate2(model, tmp_path / "ct2")
    ckpt = checkpoint.load(model)
    assert ckpt.shortlist is not None
    vocab = ctranslate2_vocabulary(load_tokenizer(ckpt.tokenizer))
    text = (tmp_path / "ct2" / VMAP_FILE).read_text(encoding="utf-8").splitlines()
    assert text[0] == "\t" + " ".join(vocab[t] for t in ckpt.shortlist.frequent.tolist())
    assert text[0].startswith("\t<blank> <unk> <s> </s> ")
    rows = {vocab[s]: [vocab[t] for t in row] for s, row in enumerate(ckpt.shortlist.rows()) if row}
    assert {line.split("\t")[0]: line.split("\t")[1].split(" ") for line in text[1:]} == rows
    assert VMAP_FILE in json.loads((tmp_path / "ct2" / MANIFEST_FILE).read_text())["files"]
    export_ctranslate2(shortlisted[0], tmp_path / "plain")
    assert not (tmp_path / "plain" / VMAP_FILE).exists()


def test_the_command_prints_one_line_of_json(shortlisted, tmp_path):
    from typer.testing import CliRunner

    from nmt.cli.main import app

    model = shortlisted[0]
    r = CliRunner().invoke(app, ["shortlist", "--model", str(model), "--data", str(model.parent / "data"),
                                 "--out", str(tmp_path / "s.pt"), "--top", "4", "--frequent", "10"])
    assert r.exit_code == 0, r.output
    assert r.stdout.count("\n") == 1 and json.loads(r.stdout)["top"] == 4
    assert checkpoint.load(tmp_path / "s.pt").shortlist is not None


def test_the_commands_errors(shortlisted, tmp_path):
    model = shortlisted[0]
    data = model.parent / "data"
    with pytest.raises(ConfigError, match="another file"):
        attach_shortlist(model, data, model)
    (tmp_path / "other").mkdir()
    other = prepare_sample(tmp_path / "other", 50, 5, vocab_size=300)
    with pytest.raises(ConfigError, match="different tokenizers"):
        attach_shortlist(model, other, tmp_path / "s.pt")
    with pytest.raises(DataError, match="no such dataset"):
        attach_shortlist(model, tmp_path / "missing", tmp_path / "s.pt")
    with pytest.raises(ConfigError, match="top"):
        attach_shortlist(model, data, tmp_path / "s.pt", top=0)
    assert not (tmp_path / "s.pt").exists()
