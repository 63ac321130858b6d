"""Monolingual data: `nmt distill` on one side of a corpus (back-translation, forward translation) with beam or
sampling, its language filter and its torchrun shards (two gloo processes give the bytes of one), and `nmt prepare`
with synthetic corpora: the real one upsampled, the synthetic sources tagged with an id of their own that training
and both engines take (a model that translates with it loaded, the tag never in an output)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_cli import ENV, nmt, ok
from test_cli_robustness import assert_cli_error, cli

from nmt.config import InferenceConfig, Overrides, SearchConfig
from nmt.config.command_options import DistillOptions
from nmt.core.identity import SYNTHETIC_PIECE, DataIdentity
from nmt.distillation.distill import distill, language_check
from nmt.training.distributed import free_port


@pytest.fixture(scope="module")
def mono(tmp_path_factory, tiny_corpus) -> Path:
    """A monolingual corpus: mono.en, 24 English lines of the tiny corpus (no mono.de)."""
    root = tmp_path_factory.mktemp("mono")
    lines = (tiny_corpus / "train.en").read_text(encoding="utf-8").splitlines()[100:124]
    (root / "mono.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def distil_mono(mono: Path, out: Path, models: list[Path], search: dict, **changes) -> dict:
    o = DistillOptions(model=models, train=str(mono / "mono"), src="en", tgt="de", out=out, chunk_lines=8,
                       max_ratio=0, max_repeats=0, keep_copies=True, **changes)
    return distill(o, Overrides(SearchConfig, search), Overrides(InferenceConfig, {"engine": "torch", "threads": 1}))


# -- monolingual input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("search", [{"beam": 2}, {"sampling": True, "topk": 5, "seed": 3}])
def test_one_side_of_a_corpus_gives_pairs_of_its_lines_and_the_teachers_translations(search, mono, tiny_checkpoint,
                                                                                     tmp_path):
    """The real side is the monolingual text as it is (the lines kept, in order); the other is the teacher's: the
    same translations as the engine gives those lines, for beam search and for top-k sampling (seeded per line,
    so a second run, or a resumed one, draws the same)."""
    from nmt.engines.choice import open_engine

    report = distil_mono(mono, tmp_path / "a", [tiny_checkpoint], search)
    lines = (mono / "mono.en").read_text(encoding="utf-8").splitlines()
    engine = open_engine([tiny_checkpoint], Overrides(SearchConfig, search), InferenceConfig(engine="torch",
                                                                                           precision="int8"))
    expected = [t.text for k in range(0, 24, 8) for t in engine.translate_chunk(lines[k:k + 8], k)]
    kept = [(s, t) for s, t in zip(lines, expected) if t.strip()]
    out = tmp_path / "a"
    assert (out / "train.en").read_text(encoding="utf-8").splitlines() == [s for s, _ in kept]
    assert (out / "train.de").read_text(encoding="utf-8").splitlines() == [t for _, t in kept]
    assert report["lines"] == 24 and report["kept"] == len(kept) and "interpolation" not in report
    distil_mono(mono, tmp_path / "b", [tiny_checkpoint], search)
    assert (tmp_path / "b" / "train.de").read_bytes() == (out / "train.de").read_bytes()


@pytest.mark.parametrize("line, lang, threshold, kept", [
    ("Ein Mann fährt mit dem Fahrrad durch die Stadt.", "de", 50, True),
    ("A man rides his bicycle through the city.", "de", 50, False),
    ("A man rides his bicycle through the city.", "en", 50, True),
    ("12345 !!", "en", 1, False),  # no letters: no evidence of any language
    ("A man rides his bicycle through the city.", "de", 0, True),  # 0: no check
])
def test_the_language_filter(line, lang, threshold, kept):
    assert language_check(lang, threshold)(line) is kept


def test_lines_in_another_language_are_dropped_and_counted(mono, tiny_checkpoint, tmp_path):
    german = "Ein Mann fährt mit dem Fahrrad durch die Stadt."
    (tmp_path / "mono.en").write_text((mono / "mono.en").read_text(encoding="utf-8") + german + "\n",
                                      encoding="utf-8")
    report = distil_mono(tmp_path, tmp_path / "out", [tiny_checkpoint], {"beam": 1}, lid=50.0)
    assert report["dropped"]["language"] >= 1
    dropped = (tmp_path / "out" / "dropped.tsv").read_text(encoding="utf-8").splitlines()
    assert f"25\tlanguage\t{german}" in [line.rsplit("\t", 1)[0] for line in dropped]
    assert german not in (tmp_path / "out" / "train.en").read_text(encoding="utf-8")


def test_two_torchrun_processes_make_the_corpus_of_one(mono, tiny_checkpoint, tmp_path):
    """Each of two gloo processes translates every other chunk into one folder; the first assembles and prints the
    report: the files are those of a single process, byte for byte."""
    args = ["distill", "-m", str(tiny_checkpoint), "--train", str(mono / "mono"), "--src", "en", "--tgt", "de",
            "--chunk-lines", "5", "--beam", "2", "--threads", "1", "--max-repeats", "0", "--max-ratio", "0"]
    single = ok(nmt(*args, "--out", tmp_path / "one"))
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                        "127.0.0.1", "--master-port", str(free_port()), "-m", "nmt", *args, "--out",
                        str(tmp_path / "two")], capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)  # one report: the first process's
    assert report["processes"] == 2 and report["translated_now"] == 24
    assert {k: v for k, v in report.items() if k not in ("processes", "seconds", "sentences_per_second", "corpus")} == {
        k: v for k, v in json.loads(single.stdout).items() if k not in ("processes", "seconds", "sentences_per_second", "corpus")}
    for name in ("train.en", "train.de", "dropped.tsv"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    assert len(list((tmp_path / "two" / "chunks").glob("*.txt"))) == 5


# -- synthetic corpora in a store ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic_data(tmp_path_factory, tiny_corpus, tiny_bpe) -> Path:
    """A store of the tiny corpus (2x) and a tagged synthetic corpus (its first 50 pairs, sides as they are)."""
    from nmt.data.dataset import prepare

    root = tmp_path_factory.mktemp("synthetic")
    for lang in ("en", "de"):
        lines = (tiny_corpus / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:50]
        (root / f"bt.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    prepare(tiny_bpe, root / "data", "en", "de", tiny_corpus / "train", tiny_corpus / "valid",
            synthetic=[root / "bt"], upsample=2)
    return root / "data"


def test_the_real_corpus_is_upsampled_and_the_synthetic_sources_tagged(synthetic_data, tiny_data, tiny_bpe):
    from nmt.data.dataset import ParallelDataset, data_identity
    from nmt.text.tokenizer import from_file

    meta = json.loads((synthetic_data / "meta.json").read_text())
    vocab = from_file(tiny_bpe).vocab_size
    assert meta["synthetic_tag"] == vocab and meta["vocab_size"] == vocab + 1
    assert data_identity(synthetic_data) == DataIdentity(**{**vars(data_identity(tiny_data)), "vocab_size": vocab + 1,
                                                            "synthetic": vocab})
    real = ParallelDataset(tiny_data, "train")
    store = ParallelDataset(synthetic_data, "train")
    corpora = meta["splits"]["train"]["corpora"]
    assert [c["pairs"] for c in corpora] == [len(real), len(real), corpora[2]["pairs"]]
    assert "parts" not in meta["splits"]["train"]  # corpora of one pair: no language pairs to sample by temperature
    assert len(store) == 2 * len(real) + corpora[2]["pairs"]
    for i in (0, len(real) - 1):  # each copy is the real corpus as a store of it alone has it, untagged
        for copy in (0, 1):
            src, tgt = store[copy * len(real) + i]
            assert np.array_equal(src, real[i][0]) and np.array_equal(tgt, real[i][1])
    first = store[2 * len(real)]
    assert first[0][0] == vocab and real[0][0][0] != vocab  # a synthetic source: the tag, then its subwords
    assert np.array_equal(first[0][1:], real[0][0]) and np.array_equal(first[1], real[0][1])


def test_a_model_of_tagged_data_translates_on_both_engines(synthetic_data, tmp_path):
    """Trained with the tag in its vocabulary, the model loads on torch and on CTranslate2 (whose vocabulary names
    the tag), both give the same lines, and no output holds the tag's name."""
    from conftest import TINY_TRAIN

    from nmt.engines.choice import open_engine
    from nmt.training.launch import train

    train(synthetic_data, tmp_path / "run", preset="tiny", train_overrides={**TINY_TRAIN, "max_updates": 10})
    model = tmp_path / "run" / "checkpoint_00000010.pt"
    lines = ["A man rides a bike.", "Two dogs play in the snow.", ""]
    outs = {}
    for engine in ("torch", "ctranslate2"):
        opened = open_engine([model], Overrides(SearchConfig, {"beam": 2}), InferenceConfig(engine=engine, threads=1))
        assert opened.data.synthetic == opened.data.vocab_size - 1
        assert opened.tokenizer.vocab()[opened.data.synthetic] == SYNTHETIC_PIECE
        outs[engine] = [t.text for t in opened.translate_chunk(lines)]
    assert outs["torch"] == outs["ctranslate2"] and outs["torch"][2] == ""
    assert not any(SYNTHETIC_PIECE in text for text in outs["torch"])


@pytest.mark.parametrize("extra, words", [
    (["--upsample", "2"], "--upsample only applies with --synthetic"),
    (["--no-tag-synthetic"], "--no-tag-synthetic only applies with --synthetic"),
    (["--synthetic", "nowhere/bt"], "no such file"),
    (["--synthetic", "SYN", "--upsample", "0"], "--upsample must be at least 1"),
])
def test_careless_synthetic_options_are_one_line_errors(extra, words, tiny_corpus, tiny_bpe, tmp_path):
    extra = [str(tiny_corpus / "train") if e == "SYN" else e for e in extra]
    assert_cli_error(cli("prepare", "--bpe", tiny_bpe, "--train", tiny_corpus / "train", "--src", "en", "--tgt", "de",
                         "--out", tmp_path / "data", *extra), words)


def test_synthetic_corpora_go_with_one_pair(tiny_corpus, tiny_bpe, tmp_path):
    assert_cli_error(cli("prepare", "--bpe", tiny_bpe, "--train", tiny_corpus / "train", "--pair", "en-de",
                         "--pair", "de-en", "--synthetic", tiny_corpus / "train", "--out", tmp_path / "data"),
                     "one language pair")
