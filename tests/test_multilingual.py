"""Multilingual models: the languages' record (nmt.core.identity), stores of several pairs (nmt.data.dataset),
the pairs' sampling (nmt.data.batches.sample_parts), the tags (nmt.text.tags), and a model that translates into
two targets on both engines, through the CLI and the Python API."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import BPE_MODELS, SAMPLE_DIR, TINY_TRAIN
from test_cli_robustness import assert_cli_error, assert_cli_ok, cli

from nmt.core.errors import ConfigError, DataError
from nmt.core.identity import DataIdentity, multilingual
from nmt.data.batches import sample_parts
from nmt.data.dataset import ParallelDataset, data_identity, prepare
from nmt.engines.heatmaps import word_of_each_piece
from nmt.text.tags import Tagged, with_tags
from nmt.text.tokenizer import from_file

VOCAB = 1000  # the fixed sample BPE model's pieces: the tags are ids 1000 (de) and 1001 (fr)


def identity(src: str = "en", tgt: str = "de+fr", vocab: int = 100) -> DataIdentity:
    return DataIdentity(src, tgt, vocab, "youtokentome", "0" * 64)


# == the record of a multilingual model's languages ======================================================


def test_record_round_trip_and_bilingual_unchanged():
    found = multilingual(identity(), [["en", "de"], ["en", "fr"]], {"de": 98, "fr": 99}, "m.pt")
    assert found.directions == (("en", "de"), ("en", "fr")) and found.targets == ("de", "fr")
    assert (found.tag("de"), found.tag("fr")) == (98, 99)
    assert DataIdentity.from_dict(found.to_dict(), "m.pt") == found
    plain = DataIdentity("en", "de", 100, "youtokentome", "0" * 64)
    assert set(plain.to_dict()) == {"src", "tgt", "vocab_size", "bpe_sha256"}  # as every earlier nmt wrote it
    assert plain.directions == (("en", "de"),) and plain.tag("de") is None


def test_many_to_one_has_no_tags():
    found = multilingual(identity("de+fr", "en"), [["de", "en"], ["fr", "en"]], None, "m.pt")
    assert found.tags == () and found.targets == ("en",)
    assert found.choose(None, None, "m.pt") == ("de+fr", "en")  # the source is free: no tag asks for it
    assert found.choose("fr", "en", "m.pt") == ("fr", "en")


@pytest.mark.parametrize("pairs, tags, tgt", [
    ([["en", "de"], ["en", "fr"]], {"de": 98}, "de+fr"),  # a target without a tag
    ([["en", "de"], ["en", "fr"]], {"de": 98, "fr": 98}, "de+fr"),  # one id for two targets
    ([["en", "de"], ["en", "fr"]], {"de": 98, "fr": 100}, "de+fr"),  # an id outside the vocabulary
    ([["en", "de"], ["en", "de"]], {"de": 98}, "de"),  # a direction twice
    ([["en", "de"], ["en", "fr"]], {"de": 98, "fr": 99}, "fr+de"),  # tgt is not the pairs' targets in order
    ([["en", "EN"]], {}, "EN"),  # not a language code
    ([["en", "en"]], {}, "en"),  # one language both sides
    ([], {}, "de+fr"),
    ("en-de", {}, "de"),
    ([["en", "de"], ["en", "fr"]], {"de": True, "fr": 99}, "de+fr"),  # a bool is no id
])
def test_malformed_records_are_refused(pairs, tags, tgt):
    data = {**identity(tgt=tgt).to_dict(), "pairs": pairs, "tags": tags}
    with pytest.raises(DataError, match="m.pt: its record of a multilingual model's languages is malformed"):
        DataIdentity.from_dict(data, "m.pt")


@pytest.mark.parametrize("src, tgt, expected", [
    (None, "fr", ("en", "fr")),
    ("en", "de", ("en", "de")),
    (" EN ", "FR", ("en", "fr")),  # codes as people type them
    ("en-US", "fr_CA", ("en", "fr")),  # a region the model does not name: its language
    (None, None, "translates into de, fr: choose one with `tgt_lang`"),
    (None, "cs", "`tgt_lang` 'cs': m.pt translates en-de, en-fr only"),
    ("de", "fr", "`src_lang` 'de': m.pt translates en-de, en-fr only"),
    (None, b"fr", "`tgt_lang` b'fr': give a language code, a str"),
    (["en"], "fr", "`src_lang` \\['en'\\]: give a language code, a str"),
])
def test_choose_a_direction(src, tgt, expected):
    found = multilingual(identity(), [["en", "de"], ["en", "fr"]], {"de": 98, "fr": 99}, "m.pt")
    if isinstance(expected, tuple):
        assert found.choose(src, tgt, "m.pt") == expected
    else:
        with pytest.raises(ConfigError, match=expected):
            found.choose(src, tgt, "m.pt")


# == sampling the pairs of an epoch ===========================================================================


@pytest.mark.parametrize("counts, temperature, drawn", [
    ([100, 10], 1.0, [100, 10]),  # T = 1: the data as it is
    ([100, 10], 1000.0, [55, 55]),  # T -> infinity: every pair alike (10 pairs drawn 5.5 times each)
    ([90, 10], 2.0, [75, 25]),  # sqrt(0.9) : sqrt(0.1) = 0.75 : 0.25 of 100
    ([50, 0, 50], 5.0, [50, 0, 50]),  # an empty pair draws nothing
    ([7], 5.0, [7]),
])
def test_sample_parts_shares(counts, temperature, drawn):
    found = sample_parts(counts, temperature, seed=1, epoch=0)
    starts = np.cumsum(counts) - np.asarray(counts)
    got = [int(((found >= a) & (found < a + n)).sum()) for a, n in zip(starts, counts)]
    assert got == drawn and len(found) == sum(counts)


def test_sample_parts_repeats_a_small_pair_whole_and_is_fixed_by_seed_and_epoch():
    found = sample_parts([100, 10], 1000.0, seed=3, epoch=2)
    small = found[found >= 100]
    assert sorted(set(small.tolist())) == list(range(100, 110))  # every pair at least 5 times, 5 of them 6
    assert sorted(np.bincount(small - 100).tolist()) == [5] * 5 + [6] * 5
    big = found[found < 100]
    assert len(set(big.tolist())) == len(big) == 55  # drawn without replacement
    assert np.array_equal(found, sample_parts([100, 10], 1000.0, seed=3, epoch=2))
    assert not np.array_equal(found, sample_parts([100, 10], 1000.0, seed=3, epoch=3))


# == the tags, as the engines' tokenizer shows them ============================================================


def test_tagged_tokenizer_names_tags_and_never_decodes_them():
    inner = from_file(BPE_MODELS[VOCAB])
    tagged = Tagged(inner, (("de", VOCAB), ("fr", VOCAB + 1)))
    ids = inner.encode(["a dog runs"])[0]
    assert tagged.vocab_size == VOCAB + 2
    assert tagged.decode([[VOCAB + 1, *ids]]) == inner.decode([ids]) == ["a dog runs"]
    assert tagged.pieces([VOCAB, *ids[:1]]) == [">>de<<", *inner.pieces(ids[:1])]
    assert tagged.vocab()[VOCAB:] == [">>de<<", ">>fr<<"] and tagged.vocab()[:VOCAB] == inner.vocab()
    assert with_tags(inner, identity("en", "de")) is inner


def test_alignment_skips_the_tag():
    assert word_of_each_piece([">>fr<<", "▁a", "▁dog", "s", "</s>"]) == [-1, 0, 1, 1, -1]
    assert word_of_each_piece(["▁a", ">>fr<<"]) == [0, 0]  # a piece that only looks like a tag, mid-sentence


# == a store of two pairs and a model of it ====================================================================


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """train/valid in en, de and "fr": a copy of the English, a target that a model tells apart from German after
    a hundred updates."""
    root = tmp_path_factory.mktemp("multilingual")
    for split, n in (("train", 1500), ("valid", 60)):
        en = (SAMPLE_DIR / f"{split}.en").read_text(encoding="utf-8").splitlines(keepends=True)[:n]
        de = (SAMPLE_DIR / f"{split}.de").read_text(encoding="utf-8").splitlines(keepends=True)[:n]
        (root / f"{split}.en").write_text("".join(en), encoding="utf-8")
        (root / f"{split}.de").write_text("".join(de), encoding="utf-8")
        (root / f"{split}.fr").write_text("".join(en), encoding="utf-8")
    shutil.copyfile(BPE_MODELS[VOCAB], root / "bpe.model")
    return root


@pytest.fixture(scope="module")
def store(corpus) -> Path:
    prepare(corpus / "bpe.model", corpus / "data", None, None, corpus / "train", corpus / "valid",
            pairs=["en-de", "en-fr"])
    return corpus / "data"


@pytest.fixture(scope="module")
def model(store) -> Path:
    from nmt.training.launch import train

    out = store.parent / "run"
    train(store, out, preset="tiny", train_overrides={**TINY_TRAIN, "max_updates": 120, "save_interval": 40,
                                                      "lr_factor": 3.0})
    return out / "checkpoint_00000120.pt"


def test_store_of_two_pairs(store, corpus):
    meta = json.loads((store / "meta.json").read_text())
    assert (meta["src"], meta["tgt"], meta["pairs"], meta["tags"]) == ("en", "de+fr", [["en", "de"], ["en", "fr"]],
                                                                      {"de": VOCAB, "fr": VOCAB + 1})
    assert meta["vocab_size"] == VOCAB + 2
    data = ParallelDataset(store, "train")
    n_de = data.parts[0][1]
    assert [p for p, _ in data.parts] == ["en-de", "en-fr"] and sum(n for _, n in data.parts) == len(data)
    assert {int(data[i][0][0]) for i in range(n_de)} == {VOCAB}  # every en-de source starts with >>de<<
    assert {int(data[i][0][0]) for i in range(n_de, len(data))} == {VOCAB + 1}
    tok = from_file(corpus / "bpe.model")
    first_en = (corpus / "train.en").read_text(encoding="utf-8").splitlines()[0]
    assert data[0][0][1:].tolist() == tok.encode([first_en])[0]
    found = data_identity(store)
    assert found.directions == (("en", "de"), ("en", "fr")) and found.tags == (("de", VOCAB), ("fr", VOCAB + 1))


def test_a_store_of_one_pair_is_as_before(corpus, tmp_path):
    prepare(corpus / "bpe.model", tmp_path / "one", "en", "de", corpus / "valid")
    prepare(corpus / "bpe.model", tmp_path / "pair", None, None, corpus / "valid", pairs=["en-de"])
    a, b = (json.loads((tmp_path / d / "meta.json").read_text()) for d in ("one", "pair"))
    assert "pairs" not in a and "parts" not in a["splits"]["train"]
    assert (tmp_path / "one" / "train.bin").read_bytes() == (tmp_path / "pair" / "train.bin").read_bytes()
    assert ParallelDataset(tmp_path / "one", "train").parts == []


@pytest.mark.parametrize("args, words", [
    (["--src", "en", "--pair", "en-de"], ["either", "--src and --tgt", "--pair SRC-TGT"]),
    (["--pair", "en_de"], ["--pair 'en_de'", "SRC-TGT"]),
    (["--pair", "en-En"], ["--pair 'en-En'", "lower-case"]),
    (["--pair", "en-en"], ["--pair 'en-en'"]),
    (["--pair", "en-de", "--pair", "en-de"], ["--pair en-de is given twice"]),
    ([], ["--src en --tgt de", "--pair en-de"]),
    (["--pair", "en-de", "--pair", "en-cs"], ["train.cs"]),  # no such file
])
def test_prepare_refuses(corpus, tmp_path, args, words):
    assert_cli_error(cli("prepare", "--bpe", corpus / "bpe.model", "--train", corpus / "train", "--out",
                         tmp_path / "d", *args), *words)


def test_training_samples_pairs_by_temperature(store):
    from nmt.training.trainer import Trainer  # noqa: F401 (the module the sampling lives in)

    data = ParallelDataset(store, "train")
    counts = [n for _, n in data.parts]
    drawn = sample_parts(counts, 5.0, seed=1, epoch=0)
    assert len(drawn) == len(data) and drawn.max() < len(data)


def text_file(folder: Path, text: str) -> Path:
    """CliRunner's stdin has no file descriptor: the commands read -i FILE."""
    (folder / "in.en").write_text(text, encoding="utf-8")
    return folder / "in.en"


def test_model_knows_its_languages_and_translates_into_each(model, tmp_path):
    from nmt.model.checkpoint import load

    ckpt = load(model)
    assert ckpt.data.directions == (("en", "de"), ("en", "fr")) and ckpt.model_config.vocab_size == VOCAB + 2
    text = text_file(tmp_path, "A man is riding a bike.\nTwo dogs play.\n")
    out = {t: assert_cli_ok(cli("translate", "-m", model, "--tgt-lang", t, "--engine", "torch", "-i", text)).stdout
           for t in ("de", "fr")}
    de, fr = out["de"].splitlines(), out["fr"].splitlines()
    assert len(de) == len(fr) == 2 and de[0] != fr[0] and de[1] != fr[1]  # the tag picks the target
    assert_cli_error(cli("translate", "-m", model, "--engine", "torch", "-i", text),
                     "translates into de, fr", "--tgt-lang")
    assert_cli_error(cli("translate", "-m", model, "--tgt-lang", "cs", "--engine", "torch", "-i", text),
                     "--tgt-lang 'cs'", "en-de, en-fr")


def test_both_engines_agree_with_tags(model, tmp_path):
    text = text_file(tmp_path, "A man is riding a bike.\nTwo dogs play in the snow.\nA woman.\n")
    for t in ("de", "fr"):
        runs = [assert_cli_ok(cli("translate", "-m", model, "--tgt-lang", t, "--engine", e, "--scores",
                                  "-i", text)).stdout for e in ("torch", "ctranslate2")]
        texts = [[line.split("\t")[0] for line in r.splitlines()] for r in runs]
        assert texts[0] == texts[1]


def test_python_api_directions(model):
    import nmt

    t = nmt.load(model, engine="torch")
    assert t.directions == [("en", "de"), ("en", "fr")] and t.languages == ("en", "de+fr")
    fr = t.translate(["A man is riding a bike."], tgt_lang="fr")
    assert fr == nmt.load(model, engine="torch", tgt_lang="fr").translate(["A man is riding a bike."])
    with pytest.raises(ConfigError, match="choose one with tgt_lang"):
        t.translate(["A man."])


def test_eval_per_direction(model, corpus):
    r = assert_cli_ok(cli("eval", "-m", model, "--src", corpus / "valid.en", "--ref", corpus / "valid.fr",
                          "--tgt-lang", "fr", "--engine", "torch", "--beam", "1", "--json"))
    assert json.loads(r.stdout)["lines"] == 60
    assert_cli_error(cli("eval", "--hyp", corpus / "valid.fr", "--ref", corpus / "valid.fr", "--tgt-lang", "fr"),
                     "--tgt-lang fr", "--model")


def test_fine_tuning_needs_the_same_pairs_in_order(model, corpus, tmp_path):
    from nmt.training.launch import train
    from nmt.workflows.preparing import tokenizer_source

    prepare(tokenizer_source(model), tmp_path / "swapped", None, None, corpus / "valid", pairs=["en-fr", "en-de"])
    with pytest.raises(ConfigError, match="--pair en-de --pair en-fr"):
        train(tmp_path / "swapped", tmp_path / "run", train_overrides={"init_from": str(model), "max_updates": 1})


def test_bpe_dropout_keeps_each_tag(store):
    from nmt.data.dataset import read_tokenizer
    from nmt.data.regularization import Resegmenter

    data = ParallelDataset(store, "train")
    seg = Resegmenter(data, read_tokenizer(store), 0.1, seed=1, max_len=256)
    try:
        sampled = seg.sample(0)
    finally:
        seg.close()
    n_de = data.parts[0][1]
    assert all(int(sampled[i][0][0]) == VOCAB for i in range(0, n_de, 50))
    assert all(int(sampled[i][0][0]) == VOCAB + 1 for i in range(n_de, len(data), 50))
    assert any(not np.array_equal(sampled[i][0], data[i][0]) for i in range(50))  # resampled, tag kept
    assert torch.tensor(sampled.tokens).max() < VOCAB + 2


def test_validation_bleu_takes_each_pair_in_turn(store):
    from nmt.training.validation import Validator

    data = ParallelDataset(store, "valid")
    n_de = data.parts[0][1]
    found = Validator(store, from_file(BPE_MODELS[VOCAB]), 256, 1024, 10, 1).bleu_index
    assert found.tolist() == [0, 1, 2, 3, 4, n_de, n_de + 1, n_de + 2, n_de + 3, n_de + 4]


def test_a_many_to_one_store_has_no_tags(corpus, tmp_path):
    prepare(corpus / "bpe.model", tmp_path / "x", None, None, corpus / "valid", pairs=["de-en", "fr-en"])
    meta = json.loads((tmp_path / "x" / "meta.json").read_text())
    assert (meta["src"], meta["tgt"], meta["tags"], meta["vocab_size"]) == ("de+fr", "en", {}, VOCAB)
    data = ParallelDataset(tmp_path / "x", "train")
    assert int(data.tokens.max()) < VOCAB and [p for p, _ in data.parts] == ["de-en", "fr-en"]
    found = data_identity(tmp_path / "x")
    assert found.directions == (("de", "en"), ("fr", "en")) and found.tags == ()


def test_a_many_to_many_store_tags_every_target(corpus, tmp_path):
    prepare(corpus / "bpe.model", tmp_path / "x", None, None, corpus / "valid", pairs=["en-de", "de-en", "fr-de"])
    meta = json.loads((tmp_path / "x" / "meta.json").read_text())
    assert (meta["src"], meta["tgt"], meta["tags"]) == ("en+de+fr", "de+en", {"de": VOCAB, "en": VOCAB + 1})
    data = ParallelDataset(tmp_path / "x", "train")
    starts = np.cumsum([0] + [n for _, n in data.parts])
    assert [int(data[int(i)][0][0]) for i in starts[:-1]] == [VOCAB, VOCAB + 1, VOCAB]
    found = data_identity(tmp_path / "x")
    assert found.choose(None, "de", "m.pt") == ("en+fr", "de") and found.choose("fr", "de", "m.pt") == ("fr", "de")
