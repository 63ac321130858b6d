"""The Tokenizer interface: both kinds implement it, the data form survives `torch.load(weights_only=True)`,
damaged data is a one-line error, model files are told apart, identities and folder files round trip."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import BPE_MODELS, SAMPLE_DIR

from nmt.core.errors import ConfigError, InputError
from nmt.text.bpe import BpeTokenizer
from nmt.text.spm import SentencePieceTokenizer, train_sentencepiece
from nmt.text.tokenizer import (
    FILE_NAMES,
    TOKENIZER_KINDS,
    Tokenizer,
    describe_kind,
    digest,
    file_names,
    from_file,
    identity,
    load_tokenizer,
    read_files,
    save_files,
    train_tokenizer,
)

LINES = ["A man in an orange hat starring at something .", "Zwei Hunde spielen im Schnee .", ""]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("spm") / "spm.model"
    train_sentencepiece([SAMPLE_DIR / "valid.en", SAMPLE_DIR / "valid.de"], out, vocab_size=300, threads=1)
    return out


@pytest.fixture(scope="module")
def two_model_data(spm_model, tmp_path_factory) -> dict:
    """The two-model form: a source and a target model over one table of pieces (here both models are
    learned from one side each; the table is their union, specials first)."""
    d = tmp_path_factory.mktemp("two")
    source = train_sentencepiece([SAMPLE_DIR / "valid.en"], d / "source.spm", vocab_size=200, threads=1)
    target = train_sentencepiece([SAMPLE_DIR / "valid.de"], d / "target.spm", vocab_size=200, threads=1)
    specials = source.vocab()[:4]
    pieces = specials + sorted((set(source.vocab()) | set(target.vocab())) - set(specials))
    return {"kind": "sentencepiece", "version": 1, "source": source.source_bytes, "target": target.source_bytes,
            "pieces": pieces}


@pytest.fixture(params=["youtokentome", "sentencepiece", "two models"])
def data(request, spm_model, two_model_data) -> dict:
    if request.param == "youtokentome":
        return BpeTokenizer.from_file(BPE_MODELS[300]).to_data()
    if request.param == "sentencepiece":
        return SentencePieceTokenizer.from_file(spm_model).to_data()
    return two_model_data


def plain(value) -> bool:
    """Only what `torch.load(weights_only=True)` reads back without help."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(v) for v in value)
    return isinstance(value, (str, bytes, int))


def test_data_form_round_trips_through_a_weights_only_load(data, tmp_path):
    tok = load_tokenizer(data)
    assert isinstance(tok, Tokenizer) and tok.kind == data["kind"]
    assert plain(tok.to_data()) and tok.to_data() == data
    torch.save({"tokenizer": tok.to_data()}, tmp_path / "t.pt")
    again = load_tokenizer(torch.load(tmp_path / "t.pt", weights_only=True)["tokenizer"])
    assert again.to_data() == data and again.vocab() == tok.vocab() and again.vocab_size == len(tok.vocab())
    for side in ("source", "target"):
        ids = tok.encode(LINES, side=side)
        assert again.encode(LINES, side=side) == ids
        assert again.decode(ids, side=side) == tok.decode(ids, side=side)
    assert tok.encode(LINES, dropout=0.1, seed=(4, 2)) == again.encode(LINES, dropout=0.1, seed=(4, 2))


def test_both_kinds_round_trip_text(data):
    tok = load_tokenizer(data)
    side = "target"
    assert tok.decode(tok.encode(LINES, side=side), side=side) == LINES
    assert tok.decode(tok.encode(LINES, side=side, dropout=0.2, seed=1), side=side) == LINES
    assert tok.vocab()[4:] == tok.pieces(range(4, tok.vocab_size))


@pytest.mark.parametrize("change, match", [
    (lambda d: ["not", "a", "dict"], "not a dict"),
    (lambda d: {**d, "kind": "wordpiece"}, "unknown tokenizer kind 'wordpiece'"),
    (lambda d: {k: v for k, v in d.items() if k != "kind"}, "unknown tokenizer kind None"),
    (lambda d: {**d, "version": 2}, "version 2.*upgrade nmt"),
    (lambda d: {**d, "source": "text"}, "not bytes"),
    (lambda d: {k: v for k, v in d.items() if k != "source"}, "missing"),
    (lambda d: {**d, "target": 3}, "not bytes"),
    (lambda d: {**d, "pieces": "abc"}, "not a list of strings"),
    (lambda d: {**d, "source": b"\n\x03abc"}, "not a"),
    (lambda d: {**d, "source": d["source"][: len(d["source"]) // 2]}, "model"),
])
def test_damaged_data_is_a_one_line_error(data, change, match):
    with pytest.raises(InputError, match=match) as e:
        load_tokenizer(change(data), "run/x.pt")
    assert str(e.value).startswith("run/x.pt: ") and "\n" not in str(e.value)


def test_youtokentome_is_one_joint_model(data):
    bpe = BpeTokenizer.from_file(BPE_MODELS[300]).to_data()
    for extra in ({"target": bpe["source"]}, {"pieces": ["<PAD>", "<UNK>", "<BOS>", "<EOS>", "a"]}):
        with pytest.raises(InputError, match="one joint model"):
            load_tokenizer({**bpe, **extra}, "x")


def test_from_file_tells_the_kinds_apart(spm_model, tmp_path):
    assert isinstance(from_file(BPE_MODELS[300]), BpeTokenizer)
    assert isinstance(from_file(spm_model), SentencePieceTokenizer)
    for name, content in (("empty", b""), ("text", b"hello world\n"), ("binary", bytes(range(256))),
                          ("cut.model", spm_model.read_bytes()[:100])):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(InputError, match=name) as e:
            from_file(tmp_path / name)
        assert "nmt bpe" in str(e.value)
    with pytest.raises(InputError, match="no such"):
        from_file(tmp_path / "none.model")


def test_identity_keeps_youtokentome_s_key(spm_model, two_model_data):
    bpe = BPE_MODELS[300].read_bytes()
    assert identity(BpeTokenizer(bpe).to_data()) == {"bpe_sha256": hashlib.sha256(bpe).hexdigest()}
    assert identity(SentencePieceTokenizer.from_file(spm_model).to_data()) == {
        "tokenizer": "sentencepiece", "tokenizer_sha256": hashlib.sha256(spm_model.read_bytes()).hexdigest()}
    two = digest(two_model_data)
    assert two != hashlib.sha256(two_model_data["source"]).hexdigest()
    pieces = two_model_data["pieces"]
    assert digest({**two_model_data, "pieces": pieces[:4] + pieces[5:] + pieces[4:5]}) != two  # an id moved
    with pytest.raises(InputError, match="x.pt"):
        identity({"kind": "youtokentome"}, "x.pt")


def test_files_round_trip(data, tmp_path):
    record = save_files(data, tmp_path)
    assert record == {"kind": data["kind"], "files": file_names(data), "sha256": digest(data)}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(record["files"].values())
    assert read_files(tmp_path, record) == data
    assert (tmp_path / record["files"]["source"]).read_bytes() == data["source"]
    if "pieces" in data:
        assert json.loads((tmp_path / "pieces.json").read_text(encoding="utf-8")) == data["pieces"]


def test_files_of_each_form():
    bpe = {"kind": "youtokentome", "source": b""}
    assert file_names(bpe) == {"source": "bpe.model"}
    assert file_names({"kind": "sentencepiece", "source": b""}) == {"source": "spm.model"}
    assert file_names({"kind": "sentencepiece", "source": b"", "target": b"", "pieces": []}) == {
        "source": "source.spm", "target": "target.spm", "pieces": "pieces.json"}


def test_read_files_of_an_older_folder(tmp_path):
    """A data folder or export from before SentencePiece: bpe.model, and no tokenizer record."""
    (tmp_path / "bpe.model").write_bytes(BPE_MODELS[300].read_bytes())
    assert read_files(tmp_path, None) == BpeTokenizer.from_file(BPE_MODELS[300]).to_data()
    with pytest.raises(InputError, match="no valid files"):
        read_files(tmp_path, {"kind": "sentencepiece", "files": {"source": "../../etc/passwd"}})


def test_train_tokenizer_dispatches(tmp_path):
    inputs = [SAMPLE_DIR / "valid.en"]
    assert train_tokenizer("youtokentome", inputs, tmp_path / "a.model", vocab_size=200, threads=1).kind == "youtokentome"
    tok = train_tokenizer("sentencepiece", inputs, tmp_path / "b.model", vocab_size=200, model_type="bpe", threads=1)
    assert tok.kind == "sentencepiece" and tok.vocab_size == 200
    with pytest.raises(ConfigError, match="`kind` 'wordpiece'"):
        train_tokenizer("wordpiece", inputs, tmp_path / "c.model")
    with pytest.raises(ConfigError, match="`model_type` goes with `kind`"):
        train_tokenizer("youtokentome", inputs, tmp_path / "c.model", model_type="bpe")
    assert not (tmp_path / "c.model").exists()


def test_sentencepiece_s_global_seed_is_not_disturbed_across_kinds(spm_model):
    """youtokentome's dropout draws from numpy alone: SentencePiece's sampling in between changes nothing."""
    bpe, sp = BpeTokenizer.from_file(BPE_MODELS[300]), SentencePieceTokenizer.from_file(spm_model)
    a = bpe.encode(LINES * 5, dropout=0.3, seed=1)
    sp.encode(LINES, dropout=0.3, seed=2)
    assert bpe.encode(LINES * 5, dropout=0.3, seed=1) == a


def test_a_seed_gives_the_same_sample_in_another_process(data, tmp_path):
    """A resumed run and every rank sample in their own process: one seed must give one sample everywhere
    (SentencePiece's own sampler does not: its generator is salted per process)."""
    torch.save(data, tmp_path / "tok.pt")
    code = ("import hashlib, sys, torch; from nmt.text.tokenizer import load_tokenizer; "
            "t = load_tokenizer(torch.load(sys.argv[1], weights_only=True)); "
            "print(hashlib.sha256(repr(t.encode(sys.argv[2:] * 20, dropout=0.3, seed=(4, 2))).encode()).hexdigest())")
    runs = [subprocess.run([sys.executable, "-c", code, str(tmp_path / "tok.pt"), *LINES[:2]], capture_output=True,
                           text=True, timeout=120, check=True).stdout.strip() for _ in range(2)]
    here = load_tokenizer(data).encode(LINES[:2] * 20, dropout=0.3, seed=(4, 2))
    assert runs[0] == runs[1] == hashlib.sha256(repr(here).encode()).hexdigest()
    assert here != load_tokenizer(data).encode(LINES[:2] * 20)  # it sampled


def test_each_kind_is_one_class_in_the_table(spm_model):
    """The table is kind -> class, each class keyed by its own kind, its files among those a folder may hold."""
    assert {"youtokentome": BpeTokenizer, "sentencepiece": SentencePieceTokenizer} == TOKENIZER_KINDS
    for kind, cls in TOKENIZER_KINDS.items():
        assert cls.kind == kind and {cls.joint_file, *(cls.side_files or ())} <= set(FILE_NAMES)
    assert len(FILE_NAMES) == len(set(FILE_NAMES))
    bpe, sp = BpeTokenizer.from_file(BPE_MODELS[300]), SentencePieceTokenizer.from_file(spm_model)
    assert (describe_kind(bpe), describe_kind(sp)) == ("BPE", "SentencePiece")
    heads = {BpeTokenizer: BPE_MODELS[300].read_bytes()[:1], SentencePieceTokenizer: spm_model.read_bytes()[:1]}
    for cls, head in heads.items():  # each kind recognizes its own files, and no other kind's
        assert [c for c in TOKENIZER_KINDS.values() if c.recognizes(head)] == [cls]


class Letters:
    """A made-up kind (each character a piece, ids from 4): the table is all there is to register."""

    kind, display_name, model_noun, model_types, joint_file, side_files = "letters", "Letters", "model", (), "bpe.model", None

    def __init__(self, alphabet: bytes, name: str = "<bytes>") -> None:
        self.alphabet, self.name, self.vocab_size = alphabet.decode(), name, 4 + len(alphabet)

    @classmethod
    def from_file(cls, path):
        return cls(Path(path).read_bytes()[1:], str(path))

    @classmethod
    def from_data(cls, data, name):
        return cls(data["source"], name)

    @staticmethod
    def recognizes(head):
        return head == b"#"

    @classmethod
    def train(cls, inputs, out, vocab_size, model_type, sample, seed, threads, progress):
        Path(out).write_bytes(b"#" + "".join(sorted(set("".join(p.read_text() for p in inputs)) - {"\n"})).encode())
        return cls.from_file(out)

    def encode(self, lines, side="source", threads=-1, dropout=0.0, seed=0):
        return [[4 + self.alphabet.index(c) for c in line] for line in lines]

    def decode(self, ids, side="target"):
        return ["".join(self.alphabet[i - 4] for i in seq) for seq in ids]

    def pieces(self, ids):
        return [self.alphabet[i - 4] for i in ids]

    def vocab(self):
        return ["<PAD>", "<UNK>", "<BOS>", "<EOS>", *self.alphabet]

    def to_data(self):
        return {"kind": self.kind, "version": 1, "source": self.alphabet.encode()}


def test_a_kind_registered_in_the_table_is_used_everywhere(monkeypatch, tmp_path):
    monkeypatch.setitem(TOKENIZER_KINDS, "letters", Letters)
    (tmp_path / "text").write_text("abc\ncab\n")
    tok = train_tokenizer("letters", [tmp_path / "text"], tmp_path / "l.model")
    assert isinstance(tok, Tokenizer) and describe_kind(tok) == "Letters" and tok.encode(["cab"]) == [[6, 4, 5]]
    assert isinstance(from_file(tmp_path / "l.model"), Letters)
    data = tok.to_data()
    assert load_tokenizer(data).decode([[6, 4, 5]]) == ["cab"] and file_names(data) == {"source": "bpe.model"}
    assert read_files(tmp_path, save_files(data, tmp_path)) == data
    with pytest.raises(InputError, match="one joint model"):
        load_tokenizer({**data, "target": b"ab"})
    with pytest.raises(ConfigError, match=r"`kind` sentencepiece \(letters learns Letters\)"):
        train_tokenizer("letters", [tmp_path / "text"], tmp_path / "m.model", model_type="bpe")
