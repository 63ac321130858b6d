"""SentencePiece: training (unigram and bpe) with nmt's special ids, round trips, .gz input, seeded
sampling, two models over one table of pieces, bad models and inputs, and prepare -> train -> translate."""

from __future__ import annotations

import io
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as sp_lib
from conftest import SAMPLE_DIR, TINY_TRAIN, toy_corpus

from nmt.core.errors import ConfigError, InputError
from nmt.core.vocab import BOS, EOS, PAD, UNK
from nmt.text.spm import SentencePieceTokenizer, train_sentencepiece


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path, list[str], list[str]]:
    """A plain and a gzipped input file, and their lines."""
    return toy_corpus(tmp_path_factory.mktemp("spm"))


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def tokenizer(request, corpus, tmp_path_factory) -> SentencePieceTokenizer:
    en, de, _, _ = corpus
    out = tmp_path_factory.mktemp("m") / "spm.model"
    return train_sentencepiece([en, de], out, vocab_size=80, model_type=request.param, threads=1)


def test_round_trip_of_training_sentences(tokenizer, corpus):
    lines = corpus[2][:50] + corpus[3][-50:]  # the second half came from the .gz file
    ids = tokenizer.encode(lines)
    assert all(ids) and all(4 <= i < tokenizer.vocab_size for seq in ids for i in seq)  # no specials, no UNK
    assert tokenizer.decode(ids) == lines
    assert tokenizer.encode(lines, side="target") == ids  # one joint model


def test_special_ids_and_vocab(tokenizer):
    assert tokenizer.vocab()[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tokenizer.pieces([PAD, UNK, BOS, EOS]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tokenizer.vocab_size == len(tokenizer.vocab()) == 80
    assert tokenizer.kind == "sentencepiece"


def test_decode_stops_at_eos_and_skips_pad_bos(tokenizer):
    ids = tokenizer.encode(["the cat sat", "red tree"])
    padded = [[BOS] + ids[0] + [EOS] + ids[1] + [PAD], [BOS] + ids[1] + [PAD, PAD]]
    assert tokenizer.decode(padded) == ["the cat sat", "red tree"]
    assert tokenizer.decode([[]]) == [""]
    assert tokenizer.decode([]) == []


def test_unknown_characters_are_unk(tokenizer):
    ids = tokenizer.encode(["the € cat"])[0]
    assert UNK in ids and tokenizer.decode([ids]) == ["the  ⁇  cat"]  # SentencePiece's " ⁇ " for UNK


def test_model_file_is_written(tokenizer):
    path = Path(tokenizer.name)
    assert path.read_bytes() == tokenizer.source_bytes
    assert SentencePieceTokenizer.from_file(path).vocab() == tokenizer.vocab()
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]


def test_training_is_reproducible(corpus, tmp_path):
    """On one thread SentencePiece learns the same model from the same sample, byte for byte."""
    en, de, _, _ = corpus
    a, b, c = (train_sentencepiece([en, de], tmp_path / f"{name}.model", vocab_size=80, sample=100, seed=seed,
                                   threads=1).source_bytes for name, seed in (("a", 7), ("b", 7), ("c", 8)))
    assert a == b and a != c


def test_stdout_stays_clean(corpus, tmp_path):
    en, de, _, _ = corpus
    code = (f"from nmt.text.spm import train_sentencepiece; train_sentencepiece([{str(en)!r}, {str(de)!r}], "
            f"{str(tmp_path / 'm.model')!r}, vocab_size=60, threads=1); print('RESULT')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[1])
    assert run.returncode == 0, run.stderr
    assert run.stdout == "RESULT\n"


def test_too_large_vocab_warns_and_shrinks(corpus, tmp_path):
    messages = []
    tok = train_sentencepiece([corpus[0]], tmp_path / "m.model", vocab_size=5000, threads=1,
                              progress=lambda p: p.message and messages.append(p.message))
    assert tok.vocab_size < 5000
    assert any("`vocab_size`" in m for m in messages)


@pytest.mark.parametrize("vocab_size, match", [(6, "Vocabulary size is smaller than required_chars.*`vocab_size`"),
                                               (0, "`vocab_size`"), (1 << 30, "`vocab_size`")])
def test_bad_vocab_size(corpus, tmp_path, vocab_size, match):
    with pytest.raises(InputError, match=match):
        train_sentencepiece([corpus[0]], tmp_path / "m.model", vocab_size=vocab_size, threads=1)
    assert not (tmp_path / "m.model").exists()


@pytest.mark.parametrize("content", ["", "\n\n", "   \n\t\n"])
def test_empty_input(tmp_path, content):
    (tmp_path / "empty.txt").write_text(content)
    with pytest.raises(InputError, match="empty"):
        train_sentencepiece([tmp_path / "empty.txt"], tmp_path / "m.model", vocab_size=50)
    assert not (tmp_path / "m.model").exists()


def test_missing_input_and_bad_model_type(corpus, tmp_path):
    with pytest.raises(InputError, match="no such file"):
        train_sentencepiece([tmp_path / "nope.txt"], tmp_path / "m.model")
    with pytest.raises(InputError):
        train_sentencepiece([], tmp_path / "m.model")
    with pytest.raises(InputError, match="unigram or bpe"):
        train_sentencepiece([corpus[0]], tmp_path / "m.model", model_type="char")


def test_invalid_utf8_input_names_the_line(tmp_path):
    """A bad line surfaces as nmt's error, not as the RuntimeError SentencePiece makes of it."""
    (tmp_path / "bad.txt").write_bytes(b"fine line\nbad \xff\xfe line\n")
    with pytest.raises(InputError, match="UTF-8"):
        train_sentencepiece([tmp_path / "bad.txt"], tmp_path / "m.model", vocab_size=50)


def test_output_is_a_folder(corpus, tmp_path):
    (tmp_path / "m.model").mkdir()
    with pytest.raises(Exception, match="m.model") as e:
        train_sentencepiece([corpus[0]], tmp_path / "m.model", vocab_size=50)
    assert "Traceback" not in str(e.value)


def foreign_model(lines: list[str]) -> bytes:
    """A SentencePiece model with SentencePiece's own special ids (unk 0, bos 1, eos 2, no pad)."""
    buffer = io.BytesIO()
    sp_lib.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buffer, vocab_size=60,
                                      hard_vocab_limit=False, minloglevel=2, num_threads=1)
    return buffer.getvalue()


@pytest.mark.parametrize("kind", ["garbage", "empty", "truncated", "specials"])
def test_corrupt_or_foreign_model_file(tokenizer, corpus, tmp_path, kind):
    good = tokenizer.source_bytes
    data = {"garbage": b"\n\x05hello", "empty": b"", "truncated": good[: len(good) // 2],
            "specials": foreign_model(corpus[2])}[kind]
    path = tmp_path / "bad.model"
    path.write_bytes(data)
    with pytest.raises(InputError, match="bad.model") as e:
        SentencePieceTokenizer.from_file(path)
    assert "\n" not in str(e.value)


def test_missing_model_file(tmp_path):
    with pytest.raises(InputError, match="nmt bpe"):
        SentencePieceTokenizer.from_file(tmp_path / "none.model")


# -- sampling (subword regularisation) ---------------------------------------------------------------


def test_sampling_is_seeded_and_valid(tokenizer, corpus):
    lines = corpus[2][:100]
    plain = tokenizer.encode(lines)
    a = tokenizer.encode(lines, dropout=0.3, seed=(1, 0))
    tokenizer.encode(lines[:10], dropout=0.3, seed=5)  # another call between changes nothing
    b = tokenizer.encode(lines, dropout=0.3, seed=(1, 0), threads=4)
    c = tokenizer.encode(lines, dropout=0.3, seed=(1, 1))
    assert a == b and a != c and a != plain
    assert tokenizer.decode(a) == tokenizer.decode(c) == lines  # every sample spells the text
    assert tokenizer.encode(lines, dropout=0.0, seed=9) == plain


def test_threads_sampling_at_once_get_their_own_seeds(tokenizer, corpus):
    """Each call draws from its own generator (SentencePiece's own seed is process-wide: with its sampler, 12 of
    50 samples differed while a second thread sampled)."""
    lines = corpus[2][:100]
    seeds = [(1, k) for k in range(4)]
    alone = [tokenizer.encode(lines, dropout=0.3, seed=seed) for seed in seeds]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda k: tokenizer.encode(lines, dropout=0.3, seed=seeds[k % 4]), range(40)))
    assert [together[k] == alone[k % 4] for k in range(40)] == [True] * 40


@pytest.mark.parametrize("dropout", [-0.1, 1.0, float("nan")])
def test_bad_dropout(tokenizer, dropout):
    with pytest.raises(ConfigError, match="dropout"):
        tokenizer.encode(["the cat"], dropout=dropout)


def test_bpe_sampling_at_high_dropout_gives_characters(corpus, tmp_path):
    tok = train_sentencepiece([corpus[0]], tmp_path / "b.model", vocab_size=100, model_type="bpe", threads=1)
    lines = corpus[2][:20]
    pieces = [tok.pieces(ids) for ids in tok.encode(lines, dropout=0.999, seed=1)]
    assert sum(len(p) for p in pieces) > 0.95 * sum(len(line.replace(" ", "")) + line.count(" ") + 1 for line in lines)


# -- sampling in numpy, as SentencePiece samples -----------------------------------------------------

ODD_LINES = ["", "   ", "  leading and trailing  ", "tabs\tand\vfeeds", "a\u2581b \u2581\u2581 c", "no\xa0break\u2003space",
             "unknown €€ and ✓x✓ ✓", "line\nbreak", "x" * 300, "\x00\x1c", "ＡＢＣ ｶﾞ", "a<x>b <x><x>x"]


@pytest.fixture(scope="module")
def sample_lines() -> list[str]:
    return [line for lang in ("en", "de") for line in (SAMPLE_DIR / f"train.{lang}").read_text("utf-8").splitlines()]


def spm_model(lines: list[str], **options) -> SentencePieceTokenizer:
    """A SentencePiece model with nmt's special ids and SentencePiece's `options` (byte_fallback, ...)."""
    buffer = io.BytesIO()
    sp_lib.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buffer, pad_id=PAD, unk_id=UNK,
                                      bos_id=BOS, eos_id=EOS, minloglevel=2, hard_vocab_limit=False, num_threads=1,
                                      **options)
    return SentencePieceTokenizer(buffer.getvalue())


OPTIONS = {"plain": {}, "bytes and a user-defined piece": {"byte_fallback": True, "user_defined_symbols": ["<x>"]}}


@pytest.mark.parametrize("data", [b"", b"\xff\xff\xff", "another model"])
def test_pieces_that_cannot_be_read_for_sampling_are_one_error(sample_lines, data):
    """The sampler reads each piece's type from the model's bytes: bytes that do not parse, or that list other
    pieces than the loaded model has, are an InputError naming the model, not a traceback or a wrong sample."""
    from nmt.text.spm import _Sampler

    tok = spm_model(sample_lines, model_type="bpe", vocab_size=300)
    if data == "another model":
        data = spm_model(sample_lines, model_type="bpe", vocab_size=400).source_bytes
    with pytest.raises(InputError, match="m: the SentencePiece model's pieces could not be read for sampling"):
        _Sampler(tok._models["source"], data, "m")


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_bpe_sampling_that_drops_nothing_is_sentencepiece_s_encoding(sample_lines, options):
    """nmt's BPE merges over a SentencePiece BPE model give SentencePiece's ids, id for id, when no merge drops."""
    from nmt.text.spm import _Sampler

    tok = spm_model(sample_lines, model_type="bpe", vocab_size=600 if options else 300, **options)
    lines = sample_lines[:3000] + ODD_LINES
    sampler = _Sampler(tok._models["source"], tok.source_bytes, "m")
    assert sampler.encode(lines, 0.0, np.random.default_rng(0)) == tok.encode(lines)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_samples_spell_the_text_unknown_characters_too(sample_lines, model_type, options):
    """A sample decodes to what the plain encoding decodes to; a run of unknown characters is one UNK, or
    its bytes' pieces where the model has them, as in SentencePiece's own encoding."""
    tok = spm_model(sample_lines, model_type=model_type, vocab_size=600 if options else 300, **options)
    lines = sample_lines[:500] + ODD_LINES
    plain, sampled = tok.encode(lines), tok.encode(lines, dropout=0.3, seed=2)
    assert tok.decode(sampled) == tok.decode(plain)
    assert sampled != plain and sum(map(len, sampled)) > sum(map(len, plain))
    assert [seq.count(UNK) for seq in sampled] == [seq.count(UNK) for seq in plain]
    if options:
        assert UNK not in {i for seq in sampled for i in seq}  # "€€", "✓x✓ ✓": five characters, five E2 bytes
        assert tok.pieces(sampled[-6]).count("<0xE2>") == tok.pieces(plain[-6]).count("<0xE2>") == 5


def test_unigram_samples_follow_the_model_s_distribution(sample_lines):
    """Each segmentation of a word comes with probability proportional to exp(alpha * its score), the
    distribution SentencePiece samples from: every segmentation is enumerated by SentencePiece's n-best. Tried
    on the words where alpha matters most (a sampler that ignored it would be far off)."""
    tok = spm_model(sample_lines, model_type="unigram", vocab_size=300)
    model = tok._models["source"]
    alpha, n = 0.1, 20000

    def distribution(word: str, a: float) -> dict[tuple, float]:
        found = [tuple(s) for s in model.nbest_encode_as_ids(word, nbest_size=512)]
        weight = np.exp(a * np.array([sum(model.get_score(i) for i in s) for s in found]))
        return dict(zip(found, weight / weight.sum())) if len(found) < 512 else {}  # 512: maybe not all

    def distance(p: dict, q: dict) -> float:
        return 0.5 * sum(abs(p.get(s, 0.0) - q.get(s, 0.0)) for s in p.keys() | q.keys())

    words = sorted({w for line in sample_lines[:2000] for w in line.split()})
    exact = {w: distribution(w, alpha) for w in words}
    power = {w: distance(exact[w], distribution(w, 1.0)) for w in words if exact[w]}
    for word in sorted(power, key=lambda w: (-power[w], w))[:3]:
        drawn = Counter(map(tuple, tok.encode([word] * n, dropout=alpha, seed=3)))
        assert set(drawn) <= set(exact[word])
        assert distance(exact[word], {s: k / n for s, k in drawn.items()}) < 0.03 < power[word], word


# -- two models, one vocabulary -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_models(corpus, tmp_path_factory) -> SentencePieceTokenizer:
    """A source model of the lower-case text and a target model of the upper-case text, with one table of
    pieces (their union, specials first), as OPUS-MT ships them: the models' own ids differ from nmt's."""
    en, de, _, _ = corpus
    d = tmp_path_factory.mktemp("two")
    source = train_sentencepiece([en], d / "source.spm", vocab_size=60, threads=1)
    target = train_sentencepiece([de], d / "target.spm", vocab_size=70, threads=1)
    table = ["<pad>", "<unk>", "<s>", "</s>"] + sorted((set(source.vocab()) | set(target.vocab())) - {
        "<pad>", "<unk>", "<s>", "</s>"}, reverse=True)
    return SentencePieceTokenizer(source.source_bytes, target.source_bytes, table, name="two")


def test_two_models_share_the_table(two_models, corpus):
    _, _, lower, upper = corpus
    table = two_models.vocab()
    assert two_models.vocab_size == len(table) > 70
    src = two_models.encode(lower[:30], side="source")
    tgt = two_models.encode(upper[:30], side="target")
    for ids, line, side in ((src, lower, "source"), (tgt, upper, "target")):
        assert two_models.decode(ids, side=side) == line[:30]
        assert all(UNK < i < len(table) for seq in ids for i in seq)
    own = SentencePieceTokenizer(two_models.source_bytes)  # the source model alone, with its own ids
    assert [two_models.pieces(s) for s in src] == [own.pieces(s) for s in own.encode(lower[:30])]
    assert src != own.encode(lower[:30])  # the table's ids, not the model's
    # A piece the target model lacks reads as its text on the target side too (as transformers' MarianTokenizer
    # and SentencePiece's decode_pieces have it), not as unknown.
    only_source = next(i for i, p in enumerate(table) if i > EOS and p.islower() and len(p) > 3)
    for side in ("source", "target"):
        assert two_models.decode([[only_source]], side=side) == [table[only_source].replace("▁", " ").strip()]


def test_two_models_look_up_unknown_text_in_the_table(two_models):
    """Text the side's model cannot segment (a character it never saw) comes out as itself and is looked up in
    the table by its text, as transformers' MarianTokenizer does: a piece of the other side's model is found."""
    table = two_models.vocab()
    upper = next(p for p in table if len(p) == 1 and p.isupper())  # a piece of the upper-case target model only
    ids = two_models.encode([f"a {upper} a"], side="source")[0]
    assert table.index(upper) in ids and UNK not in ids
    assert two_models.encode(["a \u2603 a"], side="source")[0].count(UNK) == 1  # in neither: unknown


def test_two_models_sample_too(two_models, corpus):
    lines = corpus[3][:40]
    a = two_models.encode(lines, side="target", dropout=0.2, seed=3)
    assert a == two_models.encode(lines, side="target", dropout=0.2, seed=3) != two_models.encode(lines, side="target")
    assert two_models.decode(a, side="target") == lines


def test_two_models_need_a_valid_table(two_models):
    with pytest.raises(InputError, match="table of pieces"):
        SentencePieceTokenizer(two_models.source_bytes, two_models.target_bytes, None, name="x")
    for bad in (["<pad>", "<unk>"], ["<pad>", "<unk>", "<s>", "</s>", "a", "a"], ["<pad>", 1, "<s>", "</s>", "a"]):
        with pytest.raises(InputError, match="x: the table of pieces"):
            SentencePieceTokenizer(two_models.source_bytes, two_models.target_bytes, bad, name="x")


def test_bad_side(tokenizer):
    with pytest.raises(ValueError, match="side"):
        tokenizer.encode(["a"], side="middle")


# -- end to end ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_prepare_train_translate_with_sentencepiece(tiny_spm, tiny_corpus, tmp_path):
    """nmt prepare --bpe SPM.model, a few updates of training, and translation, as with youtokentome."""
    from nmt.data.dataset import data_identity, load_meta, prepare, read_tokenizer
    from nmt.engines.search import SearchConfig
    from nmt.engines.torch_engine import TorchEngine
    from nmt.model import checkpoint
    from nmt.training.launch import train

    prepare(tiny_spm, tmp_path / "data", "en", "de", tiny_corpus / "train", tiny_corpus / "valid")
    meta = load_meta(tmp_path / "data")
    assert meta["tokenizer"]["kind"] == "sentencepiece" and "bpe_sha256" not in meta
    assert (tmp_path / "data" / "spm.model").read_bytes() == tiny_spm.read_bytes()
    assert read_tokenizer(tmp_path / "data").vocab() == SentencePieceTokenizer.from_file(tiny_spm).vocab()
    train(tmp_path / "data", tmp_path / "run", preset="tiny",
          train_overrides={**TINY_TRAIN, "max_updates": 4, "save_interval": 2, "valid_interval": 2,
                           "valid_bleu_sentences": 5})
    ckpt = checkpoint.load(checkpoint.latest(tmp_path / "run"))
    assert ckpt.tokenizer == {"kind": "sentencepiece", "version": 1, "source": tiny_spm.read_bytes()}
    assert ckpt.data == data_identity(tmp_path / "data")
    [t] = TorchEngine(checkpoint.latest(tmp_path / "run"), SearchConfig(beam=2)).translate_chunk(["A man is riding a bicycle ."])
    assert isinstance(t.text, str) and t.hypotheses


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_the_bpe_command_learns_sentencepiece(tiny_corpus, tmp_path, model_type):
    """`nmt bpe --kind sentencepiece --model-type T`: a SentencePiece model of that type, which prepare reads."""
    from nmt.data.dataset import load_meta, prepare

    out = tmp_path / "spm.model"
    r = subprocess.run([sys.executable, "-m", "nmt", "bpe", "--kind", "sentencepiece", "--model-type", model_type,
                        "--train", str(tiny_corpus / "train.en"), str(tiny_corpus / "train.de"), "--vocab-size", "300",
                        "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    proto = sp_lib.SentencePieceProcessor(model_file=str(out))
    assert proto.get_piece_size() == 300
    # a BPE model scores its pieces by merge rank (-0, -1, ...), a unigram model by log-probability
    scores = [proto.get_score(i) for i in range(proto.get_piece_size()) if proto.is_unknown(i) + proto.is_control(i) == 0]
    assert all(score.is_integer() for score in scores) == (model_type == "bpe")
    prepare(out, tmp_path / "data", "en", "de", tiny_corpus / "train", tiny_corpus / "valid")
    assert load_meta(tmp_path / "data")["tokenizer"]["kind"] == "sentencepiece"

