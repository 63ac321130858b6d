"""Joint BPE: training, round trips, special ids, sampling, clean stdout, bad models and inputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import youtokentome as yttm
from conftest import BPE_MODELS, SAMPLE_DIR, toy_corpus

from nmt.core.errors import InputError
from nmt.core.vocab import BOS, EOS, PAD, UNK
from nmt.text.bpe import BpeTokenizer, train_bpe


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """A plain and a gzipped input file, and all their lines."""
    en, de, a, b = toy_corpus(tmp_path_factory.mktemp("bpe"))
    return en, de, a + b


@pytest.fixture(scope="module")
def tokenizer(corpus, tmp_path_factory) -> BpeTokenizer:
    en, de, _ = corpus
    return train_bpe([en, de], tmp_path_factory.mktemp("m") / "bpe.model", vocab_size=120, threads=1)


def test_round_trip_of_training_sentences(tokenizer, corpus):
    lines = corpus[2][:50] + corpus[2][-50:]
    ids = tokenizer.encode(lines)
    assert all(ids) and all(0 <= i < tokenizer.vocab_size for seq in ids for i in seq)
    assert not {PAD, UNK, BOS, EOS} & {i for seq in ids for i in seq}  # no specials added
    assert tokenizer.decode(ids) == lines


def test_special_ids_and_vocab(tokenizer):
    assert (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
    assert tokenizer.pieces([PAD, UNK, BOS, EOS]) == ["<PAD>", "<UNK>", "<BOS>", "<EOS>"]
    assert tokenizer.vocab_size == 120


def test_decode_stops_at_eos_and_skips_pad_bos(tokenizer):
    ids = tokenizer.encode(["the cat sat", "red tree"])
    padded = [[BOS] + ids[0] + [EOS] + ids[1] + [PAD], [BOS] + ids[1] + [PAD, PAD]]
    assert tokenizer.decode(padded) == ["the cat sat", "red tree"]
    assert tokenizer.decode([[]]) == [""]
    assert tokenizer.decode([]) == []


def test_pieces_spell_the_text(tokenizer):
    ids = tokenizer.encode(["the big river"])[0]
    assert "".join(tokenizer.pieces(ids)) == "▁the▁big▁river"


def test_from_bytes_equals_from_file(tokenizer, tmp_path):
    path = tmp_path / "copy.model"
    path.write_bytes(tokenizer.model_bytes)
    a, b = BpeTokenizer.from_file(path), BpeTokenizer.from_bytes(tokenizer.model_bytes)
    assert a.model_bytes == b.model_bytes == tokenizer.model_bytes
    assert a.vocab_size == b.vocab_size == tokenizer.vocab_size
    lines = ["the quick bird", "OVER THE RIVER"]
    assert a.encode(lines) == b.encode(lines) == tokenizer.encode(lines, threads=1)


def test_model_file_is_written(tokenizer, tmp_path):
    assert BpeTokenizer.from_file(tokenizer.name).model_bytes == tokenizer.model_bytes
    assert not [p for p in Path(tokenizer.name).parent.iterdir() if p.name.startswith(".")]


def test_sampled_training_is_reproducible(corpus, tmp_path, monkeypatch):
    """The same --seed gives youtokentome the same sample, another seed another one.

    That is what nmt controls. The merge table youtokentome learns from it is not compared: on a tiny
    sample it once came out different for the same text (merges of equal count tie), so a byte
    comparison of the models would fail by chance.
    """
    en, de, _ = corpus
    real_train = yttm.BPE.train
    seen: list[str] = []

    def recording_train(data: str, *args, **kwargs):
        seen.append(Path(data).read_text(encoding="utf-8"))
        return real_train(data, *args, **kwargs)

    monkeypatch.setattr(yttm.BPE, "train", recording_train)

    def sample(seed: int, name: str) -> str:
        tok = train_bpe([en, de], tmp_path / name, vocab_size=80, sample=60, seed=seed, threads=1)
        assert tok.vocab_size > 4  # a model was trained on it
        return seen[-1]

    a = sample(7, "a")
    assert len(a.splitlines()) == 60
    assert sample(7, "b") == a
    assert sample(8, "c") != a


def test_stdout_stays_clean(corpus, tmp_path, capfd):
    en, de, _ = corpus
    train_bpe([en, de], tmp_path / "m.model", vocab_size=60, threads=1)
    out, err = capfd.readouterr()
    assert out == ""
    assert "Training parameters" in err  # yttm's chatter went to stderr instead


def test_stdout_stays_clean_through_a_pipe(corpus, tmp_path):
    # Through a pipe C stdio buffers fully, so unflushed chatter would surface at exit.
    en, de, _ = corpus
    code = (
        "import sys; from nmt.text.bpe import train_bpe; "
        f"train_bpe([{str(en)!r}, {str(de)!r}], {str(tmp_path / 'm.model')!r}, vocab_size=60); "
        "print('RESULT')"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[1])
    assert run.returncode == 0, run.stderr
    assert run.stdout == "RESULT\n"
    assert "Training parameters" in run.stderr


def test_too_large_vocab_warns_and_shrinks(corpus, tmp_path):
    en, _, _ = corpus
    messages = []
    tok = train_bpe([en], tmp_path / "m.model", vocab_size=5000, threads=1,
                    progress=lambda p: p.message and messages.append(p.message))
    assert tok.vocab_size < 5000
    assert any("`vocab_size`" in m for m in messages)


@pytest.mark.parametrize("vocab_size", [6, 0, -3, 1 << 30])
def test_bad_vocab_size(corpus, tmp_path, vocab_size):
    with pytest.raises(InputError, match="vocab-size|vocab_size"):
        train_bpe([corpus[0]], tmp_path / "m.model", vocab_size=vocab_size)
    assert not (tmp_path / "m.model").exists()


@pytest.mark.parametrize("content", ["", "\n\n", "   \n\t\n"])
def test_empty_input(tmp_path, content):
    (tmp_path / "empty.txt").write_text(content)
    with pytest.raises(InputError, match="empty"):
        train_bpe([tmp_path / "empty.txt"], tmp_path / "m.model", vocab_size=50)
    assert not (tmp_path / "m.model").exists()


def test_missing_input(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        train_bpe([tmp_path / "nope.txt"], tmp_path / "m.model")
    with pytest.raises(InputError):
        train_bpe([], tmp_path / "m.model")


def test_invalid_utf8_input(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"fine line\nbad \xff\xfe line\n")
    with pytest.raises(InputError, match="UTF-8"):
        train_bpe([tmp_path / "bad.txt"], tmp_path / "m.model", vocab_size=50)


def corruptions(good: bytes) -> dict[str, bytes]:
    lines = good.decode().splitlines()
    return {
        "garbage": b"garbage here\n",
        "binary": bytes(range(256)),
        "empty": b"",
        "truncated": "\n".join(lines[: len(lines) // 2]).encode(),
        "specials": "\n".join(lines[:-1] + ["0 1 2 3"]).encode(),  # foreign special ids
        "json": b'{"model": 1}',
    }


@pytest.mark.parametrize("kind", ["garbage", "binary", "empty", "truncated", "specials", "json"])
def test_corrupt_model_file(tokenizer, tmp_path, kind):
    path = tmp_path / "bad.model"
    path.write_bytes(corruptions(tokenizer.model_bytes)[kind])
    with pytest.raises(InputError, match="bad.model"):
        BpeTokenizer.from_file(path)
    with pytest.raises(InputError):
        BpeTokenizer.from_bytes(path.read_bytes())


def test_missing_model_file(tmp_path):
    with pytest.raises(InputError, match="nmt bpe"):
        BpeTokenizer.from_file(tmp_path / "none.model")


# -- BPE-dropout --------------------------------------------------------------------------------------

# Whitespace and characters youtokentome treats in its own way: only ASCII whitespace and "▁" split words,
# a run of unknown characters is one UNK, a newline inside a line is whitespace.
ODD_LINES = ["", "   ", "  leading and trailing  ", "tabs\tand\vfeeds\fand\rreturns", "a\u2581b \u2581\u2581 c",
             "no\xa0break\u2003space", "unknown €€ and ✓x✓ ✓", "line\nbreak", "x" * 300, "\x00\x1c"]


@pytest.mark.parametrize("size", [300, 1000])
def test_dropout_zero_is_youtokentome_s_encoding(size):
    """The numpy segmentation that BPE-dropout runs reproduces youtokentome's ids exactly when nothing drops."""
    from nmt.text.bpe import _Rules

    tok = BpeTokenizer.from_file(BPE_MODELS[size])
    lines = [line for lang in ("en", "de") for line in (SAMPLE_DIR / f"train.{lang}").read_text("utf-8").splitlines()]
    lines += ODD_LINES
    merges = _Rules(tok.model_bytes.decode("ascii"), tok.vocab_size)
    assert merges.encode(lines, 0.0, np.random.default_rng(0)) == tok.encode(lines, threads=1)


def test_dropout_is_seeded_and_valid(tokenizer, corpus):
    lines = corpus[2][:200] + ODD_LINES
    plain = tokenizer.encode(lines)
    a = tokenizer.encode(lines, dropout=0.1, seed=(3, 1))
    assert a == tokenizer.encode(lines, dropout=0.1, seed=(3, 1), threads=2)
    assert a != tokenizer.encode(lines, dropout=0.1, seed=(3, 2)) and a != plain
    assert tokenizer.decode(a) == tokenizer.decode(plain)  # every segmentation spells the text
    assert sum(map(len, a)) > sum(map(len, plain))
    assert tokenizer.encode(lines, dropout=0.0, seed=5) == plain
    assert tokenizer.encode([], dropout=0.1) == [] and tokenizer.encode(["", " "], dropout=0.5) == [[], []]


# A hand-made model: characters "▁" 4, a 5, b 6, c 7; rule 0 merges b+c into 8, rule 1 a+b into 9.
ABC_MODEL = b"4 2\n9601 4\n97 5\n98 6\n99 7\n6 7 8\n5 6 9\n1 0 2 3\n"


@pytest.mark.parametrize("p, a_bc, ab_c, a_b_c", [
    (0.0, 1.0, 0.0, 0.0),  # rule 0 first, although a+b stands to its left
    (0.1, 0.9, 0.09, 0.01),
    (0.5, 0.5, 0.25, 0.25),
    (0.8, 0.2, 0.16, 0.64),
])
def test_dropout_skips_each_merge_with_probability_p(p, a_bc, ab_c, a_b_c):
    """Each step tries the merges in rule order, skipping each with probability p, and a word whose merges
    are all skipped is finished: "abc" splits "a|bc" with 1-p, "ab|c" with p(1-p), "a|b|c" with p^2."""
    tok = BpeTokenizer(ABC_MODEL)
    assert tok.encode(["abc"]) == [[4, 5, 8]]
    n = 20_000
    ids = tok.encode([" ".join(["abc"] * n)], dropout=p, seed=11)[0]
    words = " ".join(map(str, ids)).split("4 ")[1:]
    assert len(words) == n
    counts = {key: words.count(f"{key} ") + (words[-1] == key) for key in ("5 8", "9 7", "5 6 7")}
    got = [counts["5 8"] / n, counts["9 7"] / n, counts["5 6 7"] / n]
    assert got == pytest.approx([a_bc, ab_c, a_b_c], abs=0.015)


@pytest.mark.parametrize("dropout", [-0.1, 1.0, float("nan")])
def test_bad_dropout(tokenizer, dropout):
    from nmt.core.errors import ConfigError

    with pytest.raises(ConfigError, match="dropout"):
        tokenizer.encode(["the cat"], dropout=dropout)


def test_data_form(tokenizer):
    data = tokenizer.to_data()
    assert data == {"kind": "youtokentome", "version": 1, "source": tokenizer.model_bytes}
    assert tokenizer.vocab() == tokenizer.pieces(range(tokenizer.vocab_size))


@pytest.mark.parametrize("free, error, words", [
    (1000, "OutputError", ": cannot write the model youtokentome learnt (No space left on device); free disk space"),
    (10 << 30, "InputError", "BPE model is truncated or corrupt"),  # room left: not a full disk, as it was
])
def test_a_model_cut_short_by_a_full_disk_says_so(tmp_path, monkeypatch, free, error, words):
    """youtokentome writes its model without a word when the disk fills: a truncated model beside a full disk is
    a write that failed, named so (not a corrupt model to train again)."""
    import collections
    import shutil

    import youtokentome

    from nmt.core.errors import InputError, OutputError

    def cut_short(data, model, **kwargs):
        Path(model).write_text("54 2098\n1 2\n")

    (tmp_path / "text.en").write_text("a b c\n")
    monkeypatch.setattr(youtokentome.BPE, "train", staticmethod(cut_short))
    monkeypatch.setattr(shutil, "disk_usage", lambda path: collections.namedtuple("Usage", "total used free")(0, 0, free))
    with pytest.raises((InputError, OutputError)) as e:
        train_bpe([tmp_path / "text.en"], tmp_path / "bpe.model", vocab_size=30)
    assert type(e.value).__name__ == error and words in str(e.value)
    assert not (tmp_path / "bpe.model").exists()
