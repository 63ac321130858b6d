"""The one interface every user of subwords goes through: `Tokenizer`, its plain-data form, its files.

Each kind of tokenizer is one class in its own module, registered in TOKENIZER_KINDS (kind -> class; the
class is a `TokenizerKind`, its instances `Tokenizer`s): youtokentome's joint BPE (`nmt.text.bpe`, the
default) and SentencePiece (`nmt.text.spm`). Nothing here asks which kind it has: it asks the kind's class.
Every kind keeps nmt's special ids (PAD 0, UNK 1, BOS 2, EOS 3, from nmt/core/vocab.py).

The data form (`Tokenizer.to_data()`, read back by `load_tokenizer`) is what a checkpoint stores under
"tokenizer": a dict of str, int, bytes and lists only, so that `torch.load(weights_only=True)` reads it:

    kind      "youtokentome" or "sentencepiece" (a key of TOKENIZER_KINDS)
    version   1
    source    the model's file, as bytes (the source side's model when "target" is given)
    target    optional: the target side's model (none: "source" serves both sides)
    pieces    optional: the piece of each id, a shared vocabulary through which both models' pieces
              become ids (OPUS-MT/Marian models ship source.spm, target.spm and one)
    ("target" and "pieces" only for a kind with `side_files`: SentencePiece)

A data folder and a CTranslate2 export keep the same parts as files (`save_files`, `read_files`): a joint
model as its kind's `joint_file` (bpe.model for youtokentome, as nmt always has; spm.model), two models as
its `side_files` (source.spm and target.spm), the pieces as pieces.json.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Optional, Protocol, Union, runtime_checkable

from nmt.core.errors import ConfigError, InputError
from nmt.core.files import atomic_write
from nmt.core.identity import tokenizer_identity
from nmt.core.outputs import claim_file
from nmt.core.progress import ProgressFn, ignore
from nmt.text.bpe import BpeTokenizer
from nmt.text.spm import SentencePieceTokenizer

DATA_VERSION = 1
Seed = Union[int, Sequence[int]]
PIECES_FILE = "pieces.json"


@runtime_checkable
class Tokenizer(Protocol):
    """Text <-> subword ids, the same ids for both sides (one vocabulary: the model ties its embeddings)."""

    kind: str  # the key of its class in TOKENIZER_KINDS
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

    def to_data(self) -> dict[str, Any]:
        """The plain-data form (see the module's docstring)."""
        ...


class TokenizerKind(Protocol):
    """A kind of tokenizer: its class, which TOKENIZER_KINDS holds (its instances are `Tokenizer`s)."""

    @property
    def kind(self) -> str:
        """Its name: `nmt bpe --kind`, the data form's "kind", meta.json's."""
        ...

    @property
    def display_name(self) -> str:
        """In messages: "BPE model with 37,000 tokens written to ..."."""
        ...

    @property
    def model_noun(self) -> str:
        """What messages call its model file: "BPE model"."""
        ...

    @property
    def model_types(self) -> tuple[str, ...]:
        """The --model-types it learns, the first the default; () when it takes none."""
        ...

    @property
    def joint_file(self) -> str:
        """The file of its one joint model in a folder."""
        ...

    @property
    def side_files(self) -> Optional[tuple[str, str]]:
        """The files of a source and a target model in a folder; None: a joint model only, without a table
        of pieces either."""
        ...

    def train(self, inputs: list[Path], out: Path, vocab_size: int, model_type: Optional[str],
              sample: Optional[int], seed: int, threads: int, progress: ProgressFn) -> Tokenizer:
        """Learn a joint model from `inputs` and write it to `out` (see `train_tokenizer`)."""
        ...

    def from_file(self, path: str | Path) -> Tokenizer:
        """A model file of this kind; InputError when it is missing, unreadable, corrupt or foreign."""
        ...

    def from_data(self, data: dict[str, Any], name: str) -> Tokenizer:
        """From the data form, which `check_data` has checked; InputError naming `name` when it is damaged."""
        ...

    def recognizes(self, head: bytes) -> bool:
        """Whether a model file that starts with `head` (its first byte) is of this kind (`from_file`)."""
        ...


# The table of kinds: adding one is a module with its class (a TokenizerKind) and a line here.
_CLASSES: tuple[TokenizerKind, ...] = (
    BpeTokenizer,
    SentencePieceTokenizer,
)
TOKENIZER_KINDS: dict[str, TokenizerKind] = {cls.kind: cls for cls in _CLASSES}
YOUTOKENTOME, SENTENCEPIECE = BpeTokenizer.kind, SentencePieceTokenizer.kind
# nmt's first kind: of folders written before there were others, and of a model file no kind recognizes.
DEFAULT_KIND = YOUTOKENTOME
# Every file name a tokenizer may have in a folder (a store being replaced drops those of its old tokenizer).
FILE_NAMES = (*(name for c in TOKENIZER_KINDS.values() for name in (c.joint_file, *(c.side_files or ()))),
              PIECES_FILE)


def train_tokenizer(kind: str, inputs: list[Path], out: Path, vocab_size: int = 37000, model_type: Optional[str] = None,
                    sample: Optional[int] = None, seed: int = 1, threads: int = -1,
                    progress: ProgressFn = ignore) -> Tokenizer:
    """`nmt bpe`: learn a joint model of `kind` (`model_type`: one of its `model_types`, the first by default,
    e.g. SentencePiece's unigram or bpe) and write it to `out`; see the kind's `train`."""
    cls = TOKENIZER_KINDS.get(kind)
    if cls is None:
        raise ConfigError(f"`kind` {kind!r}: use {' or '.join(TOKENIZER_KINDS)}")
    if model_type is not None and not cls.model_types:
        typed = " or ".join(k for k, c in TOKENIZER_KINDS.items() if c.model_types)
        raise ConfigError(f"`model_type` goes with `kind` {typed} ({kind} learns {cls.display_name}); drop it")
    claim_file(out, "`out`", is_model_file, "a subword model")  # never a user's text (train.en, say)
    return cls.train(inputs, out, vocab_size, model_type, sample, seed, threads, progress)


def is_model_file(path: Path) -> bool:
    """Whether `path` is a subword model of a kind nmt knows (one it may write over)."""
    try:
        from_file(path)
        return True
    except (InputError, ConfigError, OSError, ValueError):
        return False


def describe_kind(tok: Tokenizer) -> str:
    """The kind's display name, 'BPE' or 'SentencePiece' (for messages)."""
    return TOKENIZER_KINDS[tok.kind].display_name


def model_noun(kind: object) -> str:
    """What messages call a model file of `kind`: "BPE model"; "tokenizer model" for a kind nmt does not know."""
    cls = TOKENIZER_KINDS.get(kind) if isinstance(kind, str) else None
    return "tokenizer model" if cls is None else cls.model_noun


def load_tokenizer(data: object, name: str = "embedded tokenizer") -> Tokenizer:
    """A tokenizer from its data form; InputError naming `name` (e.g. the checkpoint) when it is damaged."""
    data = check_data(data, name)
    return TOKENIZER_KINDS[data["kind"]].from_data(data, name)


def check_data(data: object, name: str = "embedded tokenizer") -> dict[str, Any]:
    """`data` if it has the shape of the data form (the models themselves are checked when loaded);
    InputError naming `name` otherwise."""
    if not isinstance(data, dict):
        raise InputError(f"{name}: the tokenizer is not a dict of its parts ({type(data).__name__}); it is damaged")
    kind, version = data.get("kind"), data.get("version")
    if not (isinstance(kind, str) and kind in TOKENIZER_KINDS):
        raise InputError(f"{name}: unknown tokenizer kind {kind!r} (this nmt knows {', '.join(TOKENIZER_KINDS)}); "
                         "it is damaged, or from a newer nmt")
    if version != DATA_VERSION:
        raise InputError(f"{name}: tokenizer data of version {version!r}, this nmt reads {DATA_VERSION}; upgrade nmt")
    source, target, pieces = data.get("source"), data.get("target"), data.get("pieces")
    if not isinstance(source, bytes) or not (target is None or isinstance(target, bytes)):
        raise InputError(f"{name}: the tokenizer's model is missing or not bytes; it is damaged")
    if not (pieces is None or (isinstance(pieces, list) and all(isinstance(p, str) for p in pieces))):
        raise InputError(f"{name}: the tokenizer's table of pieces is not a list of strings; it is damaged")
    if TOKENIZER_KINDS[kind].side_files is None and (target is not None or pieces is not None):
        raise InputError(f"{name}: a {kind} tokenizer is one joint model, without a target model or "
                         "a table of pieces; it is damaged")
    return data


def from_file(path: str | Path) -> Tokenizer:
    """A model file from `nmt bpe` of any kind (told apart by their first byte: each kind `recognizes` its own)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(1)
    except FileNotFoundError:
        raise InputError(f"{path}: no such BPE model; train one with `nmt bpe`") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read BPE model ({e.strerror})") from None
    # A file no kind recognizes gets the default kind's detailed checks, and their message.
    cls = next((c for c in TOKENIZER_KINDS.values() if c.recognizes(head)), TOKENIZER_KINDS[DEFAULT_KIND])
    return cls.from_file(path)


def digest(data: dict[str, Any]) -> str:
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


def identity(data: dict[str, Any], name: str = "embedded tokenizer") -> dict[str, Any]:
    """What a data store and its checkpoints record of the tokenizer, to tell whether they match."""
    data = check_data(data, name)
    return identity_of(data["kind"], digest(data))


def identity_of(kind: str, sha256: str) -> dict[str, Any]:
    """`identity` from a kind and a digest (nmt.core.identity's record of a tokenizer)."""
    return tokenizer_identity(kind, sha256)


def file_names(data: dict[str, Any]) -> dict[str, str]:
    """The file name of each part ("source", "target", "pieces") of a tokenizer in a folder."""
    cls = TOKENIZER_KINDS[data["kind"]]
    if cls.side_files is None:
        return {"source": cls.joint_file}
    source, target = cls.side_files
    names = {"source": cls.joint_file} if data.get("target") is None else {"source": source, "target": target}
    if data.get("pieces") is not None:
        names["pieces"] = PIECES_FILE
    return names


def save_files(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Write the tokenizer's parts into `folder` (each atomically); return what meta.json records of
    them: kind, the file of each part, digest."""
    names = file_names(data)
    for part, file_name in names.items():
        content = data[part] if part != "pieces" else (json.dumps(data[part], ensure_ascii=False) + "\n").encode()
        with atomic_write(Path(folder) / file_name) as f:
            f.write(content)
    return {"kind": data["kind"], "files": names, "sha256": digest(data)}


def read_files(folder: Path, record: Optional[dict[str, Any]]) -> dict[str, Any]:
    """The data form from the files `save_files` wrote and the `record` it returned (None: a folder
    written before SentencePiece came, with its youtokentome model in bpe.model). OSError when a file
    cannot be read; InputError when the record or pieces.json is malformed."""
    folder = Path(folder)
    if record is None:
        record = {"kind": DEFAULT_KIND, "files": {"source": TOKENIZER_KINDS[DEFAULT_KIND].joint_file}}
    files = record.get("files") if isinstance(record, dict) else None
    if not (isinstance(files, dict) and isinstance(files.get("source"), str)
            and all(v in FILE_NAMES for v in files.values())):
        raise InputError(f"{folder}: the tokenizer record names no valid files; it is damaged")
    data: dict[str, Any] = {"kind": record.get("kind"), "version": DATA_VERSION,
                  "source": (folder / files["source"]).read_bytes()}
    if "target" in files:
        data["target"] = (folder / files["target"]).read_bytes()
    if "pieces" in files:
        try:
            data["pieces"] = json.loads((folder / files["pieces"]).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(f"{folder / files['pieces']}: not a JSON list of pieces ({e})") from None
    return data
