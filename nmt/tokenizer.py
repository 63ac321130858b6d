"""The one interface every user of subwords goes through: `Tokenizer`, its plain-data form, its files.

Two kinds implement it: youtokentome's joint BPE (`nmt.bpe`, the default) and SentencePiece (`nmt.spm`).
Every kind keeps nmt's special ids (PAD 0, UNK 1, BOS 2, EOS 3, from nmt/vocab.py).

The data form (`Tokenizer.to_data()`, read back by `load_tokenizer`) is what a checkpoint stores under
"tokenizer": a dict of str, int, bytes and lists only, so that `torch.load(weights_only=True)` reads it:

    kind      "youtokentome" or "sentencepiece"
    version   1
    source    the model's file, as bytes (the source side's model when "target" is given)
    target    optional: the target side's model (none: "source" serves both sides)
    pieces    optional: the piece of each id, a shared vocabulary through which both models' pieces
              become ids (SentencePiece only; OPUS-MT/Marian models ship source.spm, target.spm and one)

A data folder and a CTranslate2 export keep the same parts as files (`save_files`, `read_files`): a
youtokentome model as bpe.model (as nmt always has), a joint SentencePiece model as spm.model, two models
as source.spm and target.spm, the pieces as pieces.json.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable, Optional, Protocol, Sequence, Union, runtime_checkable

from nmt.bpe import KIND as YOUTOKENTOME
from nmt.bpe import BpeTokenizer, train_bpe
from nmt.errors import ConfigError, InputError
from nmt.files import atomic_write
from nmt.identity import tokenizer_identity
from nmt.progress import ProgressFn, ignore
from nmt.spm import KIND as SENTENCEPIECE
from nmt.spm import MODEL_TYPES, SentencePieceTokenizer, train_sentencepiece

KINDS = (YOUTOKENTOME, SENTENCEPIECE)
DATA_VERSION = 1
Seed = Union[int, Sequence[int]]
PIECES_FILE = "pieces.json"
_SENTENCEPIECE_TAGS = (0x0A, 0x12, 0x1A, 0x22, 0x2A)  # ModelProto fields 1-5 (pieces, specs), length-delimited
# Every file name a tokenizer may have in a folder (a store being replaced drops those of its old tokenizer).
FILE_NAMES = ("bpe.model", "spm.model", "source.spm", "target.spm", PIECES_FILE)


@runtime_checkable
class Tokenizer(Protocol):
    """Text <-> subword ids, the same ids for both sides (one vocabulary: the model ties its embeddings)."""

    kind: str  # one of KINDS
    vocab_size: int  # specials included
    name: str  # the file or checkpoint it came from, for messages

    def encode(self, lines: Sequence[str], side: str = "source", threads: int = -1, dropout: float = 0.0,
               seed: Seed = 0) -> list[list[int]]:
        """Ids of each line of `side` ("source" or "target"), without BOS/EOS. `dropout` > 0 samples a
        segmentation (subword regularisation, for training), the same for the same lines and `seed` in any
        process."""
        ...

    def decode(self, ids: Iterable[Iterable[int]], side: str = "target") -> list[str]:
        """Text of each id sequence: stops at the first EOS, skips PAD and BOS."""
        ...

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """The piece of each id ("▁" marks a word start)."""
        ...

    def vocab(self) -> list[str]:
        """Every piece, by id (what an exported model's vocabulary lists)."""
        ...

    def to_data(self) -> dict:
        """The plain-data form (see the module's docstring)."""
        ...


def train_tokenizer(kind: str, inputs: list[Path], out: Path, vocab_size: int = 37000, model_type: Optional[str] = None,
                    sample: Optional[int] = None, seed: int = 1, threads: int = -1,
                    progress: ProgressFn = ignore) -> Tokenizer:
    """`nmt bpe`: learn a joint model of `kind` (`model_type`: SentencePiece's unigram, the default, or bpe)
    and write it to `out`; see `nmt.bpe.train_bpe` and `nmt.spm.train_sentencepiece`."""
    if kind == SENTENCEPIECE:
        return train_sentencepiece(inputs, out, vocab_size, model_type or MODEL_TYPES[0], sample, seed, threads,
                                   progress=progress)
    if kind != YOUTOKENTOME:
        raise ConfigError(f"--kind {kind!r}: use {' or '.join(KINDS)}")
    if model_type is not None:
        raise ConfigError(f"--model-type goes with --kind {SENTENCEPIECE} (youtokentome learns BPE); drop it")
    return train_bpe(inputs, out, vocab_size, sample, seed, threads, progress=progress)


def describe_kind(tok: Tokenizer) -> str:
    """'BPE' or 'SentencePiece' (for messages)."""
    return "BPE" if tok.kind == YOUTOKENTOME else "SentencePiece"


def load_tokenizer(data: object, name: str = "embedded tokenizer") -> Tokenizer:
    """A tokenizer from its data form; InputError naming `name` (e.g. the checkpoint) when it is damaged."""
    data = check_data(data, name)
    if data["kind"] == YOUTOKENTOME:
        return BpeTokenizer(data["source"], name)
    return SentencePieceTokenizer(data["source"], data.get("target"), data.get("pieces"), name)


def check_data(data: object, name: str = "embedded tokenizer") -> dict:
    """`data` if it has the shape of the data form (the models themselves are checked when loaded);
    InputError naming `name` otherwise."""
    if not isinstance(data, dict):
        raise InputError(f"{name}: the tokenizer is not a dict of its parts ({type(data).__name__}); it is damaged")
    kind, version = data.get("kind"), data.get("version")
    if kind not in KINDS:
        raise InputError(f"{name}: unknown tokenizer kind {kind!r} (this nmt knows {', '.join(KINDS)}); "
                         "it is damaged, or from a newer nmt")
    if version != DATA_VERSION:
        raise InputError(f"{name}: tokenizer data of version {version!r}, this nmt reads {DATA_VERSION}; upgrade nmt")
    source, target, pieces = data.get("source"), data.get("target"), data.get("pieces")
    if not isinstance(source, bytes) or not (target is None or isinstance(target, bytes)):
        raise InputError(f"{name}: the tokenizer's model is missing or not bytes; it is damaged")
    if not (pieces is None or (isinstance(pieces, list) and all(isinstance(p, str) for p in pieces))):
        raise InputError(f"{name}: the tokenizer's table of pieces is not a list of strings; it is damaged")
    if kind == YOUTOKENTOME and (target is not None or pieces is not None):
        raise InputError(f"{name}: a youtokentome tokenizer is one joint model, without a target model or "
                         "a table of pieces; it is damaged")
    return data


def from_file(path: str | Path) -> Tokenizer:
    """A model file from `nmt bpe`, youtokentome's or SentencePiece's (told apart by their first byte)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(1)
    except FileNotFoundError:
        raise InputError(f"{path}: no such BPE model; train one with `nmt bpe`") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read BPE model ({e.strerror})") from None
    # youtokentome's is text that starts with a digit; SentencePiece's is a protocol buffer that starts
    # with the tag of one of its first fields. Anything else gets youtokentome's detailed checks.
    if head and head[0] in _SENTENCEPIECE_TAGS:
        return SentencePieceTokenizer.from_file(path)
    return BpeTokenizer.from_file(path)


def digest(data: dict) -> str:
    """sha256 that identifies a tokenizer: of its model file when it is one joint model without a table
    (as `sha256sum bpe.model` gives, and nmt's data stores and checkpoints have always recorded), else of
    all its parts."""
    if data.get("target") is None and data.get("pieces") is None:
        return hashlib.sha256(data["source"]).hexdigest()
    h = hashlib.sha256()
    for part in (data["kind"].encode(), data["source"], data.get("target") or b"",
                 json.dumps(data.get("pieces"), ensure_ascii=False).encode()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def identity(data: dict, name: str = "embedded tokenizer") -> dict:
    """What a data store and its checkpoints record of the tokenizer, to tell whether they match."""
    data = check_data(data, name)
    return identity_of(data["kind"], digest(data))


def identity_of(kind: str, sha256: str) -> dict:
    """`identity` from a kind and a digest (nmt.identity's record of a tokenizer)."""
    return tokenizer_identity(kind, sha256)


def file_names(data: dict) -> dict[str, str]:
    """The file name of each part ("source", "target", "pieces") of a tokenizer in a folder."""
    if data["kind"] == YOUTOKENTOME:
        return {"source": "bpe.model"}
    names = {"source": "spm.model"} if data.get("target") is None else {"source": "source.spm", "target": "target.spm"}
    if data.get("pieces") is not None:
        names["pieces"] = PIECES_FILE
    return names


def save_files(data: dict, folder: Path) -> dict:
    """Write the tokenizer's parts into `folder` (each atomically); return what meta.json records of
    them: kind, the file of each part, digest."""
    names = file_names(data)
    for part, file_name in names.items():
        content = data[part] if part != "pieces" else (json.dumps(data[part], ensure_ascii=False) + "\n").encode()
        with atomic_write(Path(folder) / file_name) as f:
            f.write(content)
    return {"kind": data["kind"], "files": names, "sha256": digest(data)}


def read_files(folder: Path, record: Optional[dict]) -> dict:
    """The data form from the files `save_files` wrote and the `record` it returned (None: a folder
    written before SentencePiece came, with its youtokentome model in bpe.model). OSError when a file
    cannot be read; InputError when the record or pieces.json is malformed."""
    folder = Path(folder)
    if record is None:
        record = {"kind": YOUTOKENTOME, "files": {"source": "bpe.model"}}
    files = record.get("files") if isinstance(record, dict) else None
    if not (isinstance(files, dict) and isinstance(files.get("source"), str)
            and all(v in FILE_NAMES for v in files.values())):
        raise InputError(f"{folder}: the tokenizer record names no valid files; it is damaged")
    data: dict = {"kind": record.get("kind"), "version": DATA_VERSION,
                  "source": (folder / files["source"]).read_bytes()}
    if "target" in files:
        data["target"] = (folder / files["target"]).read_bytes()
    if "pieces" in files:
        try:
            data["pieces"] = json.loads((folder / files["pieces"]).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(f"{folder / files['pieces']}: not a JSON list of pieces ({e})") from None
    return data
