"""SentencePiece subwords (unigram or BPE), beside youtokentome's in nmt/text/bpe.py; the only importer of
sentencepiece.

`nmt bpe --kind sentencepiece` learns one joint model over source and target text with nmt's special
ids (pad 0, unk 1, bos 2, eos 3, see nmt/core/vocab.py). `SentencePieceTokenizer` is an
`nmt.text.tokenizer.Tokenizer` over such a model, or over two models, one per side, that share one
vocabulary through a table of pieces (OPUS-MT/Marian ships `source.spm`, `target.spm` and a
`vocab.json`): then a side's pieces become nmt ids through the table, whatever ids its own model gives them,
and back, as transformers' MarianTokenizer does: a piece its model does not know (say a character the
source model never saw, or a target piece of the source model's) is looked up by its text, and decodes to it.

SentencePiece normalises text (NFKC, runs of spaces to one), so decoding gives the normalised text.
Subword regularisation samples as SentencePiece does, but from a numpy generator the caller seeds (nmt.text.segment),
since SentencePiece's own sampler gives another sample in another process: see `SentencePieceTokenizer.encode`.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Optional, Union, cast

import numpy as np
import sentencepiece as spm

from nmt.config import check_range
from nmt.core.errors import InputError
from nmt.core.files import check_output_file
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.core.vocab import BOS, EOS, PAD, UNK, cut_at_eos
from nmt.text.corpus import check_train_args, save_trained, training_text
from nmt.text.segment import CACHED_WORDS, Merges, Unigram, by_line, index_words

KIND = "sentencepiece"
MODEL_TYPES = ("unigram", "bpe")
Seed = Union[int, Sequence[int]]
# SentencePiece skips longer training lines (its default is 4192 bytes); youtokentome learns from every line.
_MAX_LINE_BYTES = 1 << 20
SPACE = "\u2581"
# A normalised line's words for sampling: each starts at "▁" (what comes before the first one is a word too).
_WORD_OR_END = re.compile(f"{SPACE}[^{SPACE}\n]*|[^{SPACE}\n]+|\n")
_LINE_OR_END = re.compile("[^\n]+|\n")  # for a model whose pieces span words: a line is one word
_MODEL_TAGS = (0x0A, 0x12, 0x1A, 0x22, 0x2A)  # a model's first byte: ModelProto fields 1-5, length-delimited


# SentencePiece's messages start with where its check failed: "INTERNAL: src/x.cc(638) [condition] ".
_LOCATION = re.compile(r"^[A-Z_]+: \S+\(\d+\) \[.*?\]\s*")


def _error_text(e: Exception) -> str:
    """SentencePiece's message without the location, and without the sentences that advise its own
    options (`--character_coverage`: not nmt's); "" when only the location is left."""
    text = _LOCATION.sub("", " ".join(str(e).split())).rstrip(".")
    return ". ".join(part for part in text.split(". ") if "--" not in part)


def _load(data: bytes, name: str, what: str = "SentencePiece model") -> spm.SentencePieceProcessor:
    if not isinstance(data, bytes) or not data:
        raise InputError(f"{name}: empty {what}; train one with `nmt bpe --kind sentencepiece`")
    try:
        return spm.SentencePieceProcessor(model_proto=data)
    except (RuntimeError, TypeError) as e:
        why = _error_text(e) or "it does not parse"
        raise InputError(f"{name}: not a {what} ({why}); train one with `nmt bpe --kind sentencepiece`") from None


class SentencePieceTokenizer:
    """SentencePiece model(s) made ready to encode and decode with nmt's ids (PAD, UNK, BOS, EOS = 0..3).

    `target`: the target side's own model (None: `source` serves both sides). `pieces`: the piece of each
    nmt id, which both models' pieces are looked up in (needed with two models; None: the model's own ids,
    which must then have nmt's special ids).
    """

    # What `nmt.text.tokenizer`'s table of kinds reads of a kind (`TokenizerKind` there says what each is).
    kind = KIND
    display_name = "SentencePiece"
    model_noun = "tokenizer model"
    model_types = MODEL_TYPES
    joint_file = "spm.model"
    side_files: ClassVar[Optional[tuple[str, str]]] = ("source.spm", "target.spm")  # as OPUS-MT ships them

    def __init__(self, source: bytes, target: Optional[bytes] = None, pieces: Optional[list[str]] = None,
                 name: str = "<bytes>") -> None:
        self.name = name
        self.source_bytes, self.target_bytes, self.table = source, target, pieces
        source_model = _load(source, name)
        target_model = source_model if target is None else _load(target, name, "SentencePiece target model")
        self._models = {"source": source_model, "target": target_model}
        self._samplers: dict[str, _Sampler] = {}  # per side, made on the first encode with dropout
        self._index: dict[str, int] = {}  # with a table: the nmt id of each piece
        if pieces is None:
            if target is not None:
                raise InputError(f"{name}: separate source and target models need a table of pieces (a shared "
                                 "vocabulary) to map both to one set of ids; the tokenizer data is damaged")
            _check_specials(source_model, name)
            self.vocab_size: int = source_model.get_piece_size()
        else:
            _check_table(pieces, name)
            self.vocab_size = len(pieces)
            self._index = {p: i for i, p in enumerate(pieces)}

    @classmethod
    def from_file(cls, path: str | Path) -> SentencePieceTokenizer:
        """Load a joint model file; InputError when it is missing, unreadable, corrupt or foreign."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise InputError(f"{path}: no such SentencePiece model; train one with "
                             "`nmt bpe --kind sentencepiece`") from None
        except OSError as e:
            raise InputError(f"{path}: cannot read SentencePiece model ({e.strerror})") from None
        return cls(data, name=str(path))

    @classmethod
    def from_data(cls, data: dict[str, Any], name: str) -> SentencePieceTokenizer:
        """From the `nmt.text.tokenizer` data form (checked there): one model or two, and a table of pieces."""
        return cls(data["source"], data.get("target"), data.get("pieces"), name)

    @staticmethod
    def recognizes(head: bytes) -> bool:
        """Whether a file that starts with `head` looks like a SentencePiece model: a protocol buffer that starts
        with the tag of one of its first fields."""
        return bool(head) and head[0] in _MODEL_TAGS

    @classmethod
    def train(cls, inputs: list[Path], out: Path, vocab_size: int, model_type: Optional[str], sample: Optional[int],
              seed: int, threads: int, progress: ProgressFn) -> SentencePieceTokenizer:
        """`train_sentencepiece`, of `model_type` (None: unigram, the first of MODEL_TYPES)."""
        return train_sentencepiece(inputs, out, vocab_size, model_type or MODEL_TYPES[0], sample, seed, threads,
                                   progress=progress)

    def _model(self, side: str) -> spm.SentencePieceProcessor:
        if side not in self._models:
            raise ValueError(f"side must be 'source' or 'target', not {side!r}")
        return self._models[side]

    def encode(self, lines: Sequence[str], side: str = "source", threads: int = -1, dropout: float = 0.0,
               seed: Seed = 0) -> list[list[int]]:
        """Subword ids of each line, without BOS/EOS; -1 threads means all cores.

        `dropout` > 0: a sampled segmentation, as SentencePiece's own sampling with `alpha` = `dropout` (and
        `nbest_size=-1`) draws it: for a unigram model, a segmentation drawn from all of them with the model's
        probabilities raised to alpha (1: as the model has them; smaller: flatter, more varied); for a BPE model,
        BPE-dropout with this probability (the paper's, as for youtokentome models: a skipped merge may be made
        at a later step; SentencePiece's own drops it for good). Drawn by nmt.text.segment from a numpy generator
        seeded by `seed`, so the same lines, `dropout` and `seed` give the same ids in any process and thread.
        """
        model = self._model(side)
        check_range("dropout", dropout, 0.0, 1.0, high_open=True)
        lines = list(lines)
        if dropout == 0.0:
            # With a table, as pieces (an unknown stretch of text comes as itself, not as UNK), looked up in it.
            threads = threads if threads > 0 else (os.cpu_count() or 1)
            found = model.encode(lines, out_type=str if self.table is not None else int, num_threads=threads)
            return found if self.table is None else [[self._index.get(p, UNK) for p in seq] for seq in found]
        if side not in self._samplers:
            data = self.source_bytes if side == "source" or self.target_bytes is None else self.target_bytes
            self._samplers[side] = _Sampler(model, data, self.name)
        sampled = self._samplers[side].encode(lines, dropout, np.random.default_rng(seed), self.table is not None)
        if self.table is None:
            return sampled  # type: ignore[return-value]  # ints only, without `unknown_as_text`
        index = self._index
        piece = model.id_to_piece
        return [[index.get(t if isinstance(t, str) else piece(t), UNK) for t in seq] for seq in sampled]

    def decode(self, ids: Iterable[Iterable[int]], side: str = "target") -> list[str]:
        """Text of each id sequence: stops at the first EOS and skips PAD and BOS (UNK reads " ⁇ ").

        With a table, the pieces are decoded as text: one the side's model does not know reads as itself
        (its "▁" as a space), as SentencePiece's own decode_pieces and transformers' MarianTokenizer have it."""
        model = self._model(side)
        cut = [cut_at_eos(seq) for seq in ids]
        if not cut:
            return []
        if self.table is None:
            return cast(list[str], model.decode(cut))  # the stub types decode's result as Any for a list
        table = self.table
        return [model.decode_pieces([table[i] for i in seq]).replace("\u2581", " ").strip() for seq in cut]

    def vocab(self) -> list[str]:
        """Every piece, by nmt id."""
        if self.table is not None:
            return list(self.table)
        return self._models["source"].id_to_piece(list(range(self.vocab_size)))

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Subword string of each id ("▁" marks a word start), for attention plots."""
        ids = [int(i) for i in ids]
        if self.table is not None:
            return [self.table[i] for i in ids]
        return self._models["source"].id_to_piece(ids)

    def to_data(self) -> dict[str, Any]:
        """The `nmt.text.tokenizer` data form: plain data, for checkpoints."""
        data: dict[str, Any] = {"kind": KIND, "version": 1, "source": self.source_bytes}
        if self.target_bytes is not None:
            data["target"] = self.target_bytes
        if self.table is not None:
            data["pieces"] = list(self.table)
        return data


def _check_specials(model: spm.SentencePieceProcessor, name: str) -> None:
    found = (model.pad_id(), model.unk_id(), model.bos_id(), model.eos_id())
    if found != (PAD, UNK, BOS, EOS):
        raise InputError(f"{name}: SentencePiece model uses special ids {found} (pad unk bos eos), nmt needs "
                         f"{(PAD, UNK, BOS, EOS)}; train it with `nmt bpe --kind sentencepiece`")


def _check_table(pieces: object, name: str) -> None:
    if not (isinstance(pieces, list) and all(isinstance(p, str) for p in pieces)):
        raise InputError(f"{name}: the table of pieces is not a list of strings; the tokenizer data is damaged")
    if len(pieces) <= len((PAD, UNK, BOS, EOS)):
        raise InputError(f"{name}: the table of pieces holds only {len(pieces)} entries; the tokenizer data is damaged")
    if len(set(pieces)) != len(pieces):
        raise InputError(f"{name}: the table of pieces names a piece twice; the tokenizer data is damaged")


# ModelProto (sentencepiece_model.proto), read for what sampling needs. sentencepiece ships a generated
# module for it, but that one demands the protobuf runtime it was generated with (7.36 for sentencepiece 0.2.3):
# too tight a pin for a toolkit installed beside others, for two fields of protobuf's wire format.
_NORMAL, _USER_DEFINED, _BYTE = 1, 4, 6  # SentencePiece.Type
_UNIGRAM, _BPE = 1, 2  # TrainerSpec.ModelType
_FLT_MIN = 1.1754943508222875e-38  # SentencePiece starts its highest score there (C's FLT_MIN, positive)
_UNKNOWN_PENALTY = 10.0  # an unknown character scores the lowest score less this (SentencePiece's kUnkPenalty)


def _fields(data: bytes) -> Iterator[tuple[int, Union[int, bytes]]]:
    """(field number, value) of each field of one protobuf message: varints as ints, the rest as bytes."""
    def varint(i: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            b = data[i]
            value |= (b & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if b < 0x80:
                return value, i

    i = 0
    while i < len(data):
        key, i = varint(i)
        wire = key & 7
        if wire == 0:
            value, i = varint(i)
            yield key >> 3, value
            continue
        if wire == 2:
            size, i = varint(i)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")
        yield key >> 3, data[i : i + size]
        i += size


def _model_facts(data: bytes) -> tuple[int, list[int]]:
    """The model type and the type of each piece, from a serialised ModelProto."""
    model_type, types = _UNIGRAM, []
    for field, value in _fields(data):
        if field == 1 and isinstance(value, bytes):  # a piece: its field 3 is the type
            types.append(next((int(v) for f, v in _fields(value) if f == 3), _NORMAL))
        elif field == 2 and isinstance(value, bytes):  # the TrainerSpec: its field 3 is the model type
            model_type = next((int(v) for f, v in _fields(value) if f == 3), _UNIGRAM)
    return model_type, types


class _Sampler:
    """One SentencePiece model's sampled segmentations, drawn by nmt.text.segment (see `SentencePieceTokenizer.encode`).

    As SentencePiece: the text is normalised by the model, a unigram model samples its lattice (an unknown
    character scores the lowest piece's score less 10, a user-defined piece its length times the highest less
    0.1), a BPE model merges characters, user-defined pieces kept whole, and a run of unknown characters is one
    unknown piece, or its bytes where the model has byte pieces. Not reproduced: a BPE model's unused pieces
    (SentencePiece splits them again after merging; here they are never merged).
    """

    def __init__(self, model: spm.SentencePieceProcessor, data: bytes, name: str) -> None:
        try:
            model_type, types = _model_facts(data)
        except (IndexError, ValueError):
            types = []
        self.model, self.size = model, model.get_piece_size()
        if len(types) != self.size:
            raise InputError(f"{name}: the SentencePiece model's pieces could not be read for sampling; the model "
                             "is damaged: train it again with `nmt bpe --kind sentencepiece`")
        if model_type not in (_UNIGRAM, _BPE):
            raise InputError(f"{name}: `bpe_dropout` needs a unigram or BPE SentencePiece model (this one is a "
                             "word or character model); train one with `nmt bpe --kind sentencepiece`")
        pieces = model.id_to_piece(list(range(self.size)))
        scores = [model.get_score(i) for i in range(self.size)]
        text = {p: i for i, (p, t) in enumerate(zip(pieces, types)) if t in (_NORMAL, _USER_DEFINED)}
        self.user_defined = sorted((p for p in text if types[text[p]] == _USER_DEFINED), key=len, reverse=True)
        self.bytes = ([model.piece_to_id(f"<0x{b:02X}>") for b in range(256)] if _BYTE in types else None)
        # Pieces that hold "▁" after their start span words (a model trained without splitting at spaces).
        self.word_or_end = _LINE_OR_END if any(SPACE in p[1:] for p in text) else _WORD_OR_END
        normal = [scores[i] for i, t in enumerate(types) if t == _NORMAL] or [0.0]
        self.unigram: Optional[Unigram] = None
        self.merges: Optional[Merges] = None
        self._symbols: dict[str, list[int]] = {}
        if model_type == _UNIGRAM:
            top = max(max(normal), _FLT_MIN)
            self.unigram = Unigram({p: (i, len(p) * top - 0.1 if types[i] == _USER_DEFINED else scores[i])
                                    for p, i in text.items()}, min(normal) - _UNKNOWN_PENALTY, self.size)
        else:
            # Merging two adjacent pieces makes the piece they spell, the one with the highest score first.
            ids = {p: i for p, i in text.items() if types[i] == _NORMAL}
            rules = [(ids[p[:k]], ids[p[k:]], i) for p, i in ids.items() for k in range(1, len(p))
                     if p[:k] in ids and p[k:] in ids]
            table = np.array(rules, np.int64).reshape(-1, 3)
            rank = np.unique(-np.array(scores)[table[:, 2]], return_inverse=True)[1] if len(table) else table[:, 2]
            self.char_id = ids
            self.merges = Merges(table[:, 0], table[:, 1], table[:, 2], rank, self.size + 0x110000)

    def unknown(self, char: str) -> int:
        """The id that stands for an unknown character (above every piece's)."""
        return self.size + ord(char)

    def _start(self, word: str) -> list[int]:
        """A BPE word's starting symbols: user-defined pieces (the longest first) and characters."""
        found = self._symbols.get(word)
        if found is None:
            if len(self._symbols) > CACHED_WORDS:
                self._symbols = {}
            found, i = [], 0
            while i < len(word):
                user = next((p for p in self.user_defined if word.startswith(p, i)), None)
                found.append(self.model.piece_to_id(user) if user else self.char_id.get(word[i], self.unknown(word[i])))
                i += len(user) if user else 1
            self._symbols[word] = found
        return found

    def encode(self, lines: list[str], alpha: float, rng: np.random.Generator,
               unknown_as_text: bool = False) -> list[list[Union[int, str]]]:
        """Sampled ids of each line; a run of unknown characters is UNK (or its bytes' pieces), or with
        `unknown_as_text` its text."""
        normalized = self.model.normalize(lines) if lines else []
        words, occ, occ_line = index_words(normalized, self.word_or_end)
        if self.unigram is not None:
            tokens, per_occ = self.unigram.segment(words, occ, alpha, rng)
        else:
            assert self.merges is not None
            tokens, per_occ = self.merges.segment([self._start(w) for w in words], occ, alpha, rng)
        ids = by_line(tokens, per_occ, occ_line, len(lines))
        if not (tokens >= self.size).any():
            return cast(list[list[Union[int, str]]], ids)
        return [self._known(seq, unknown_as_text) if seq and max(seq) >= self.size
                else cast(list[Union[int, str]], seq) for seq in ids]

    def _known(self, seq: list[int], unknown_as_text: bool) -> list[Union[int, str]]:
        """`seq` with each run of unknown characters as one UNK, its bytes' pieces, or its text."""
        out: list[Union[int, str]] = []
        run = ""
        for t in seq + [0]:
            if t >= self.size:
                run += chr(t - self.size)
                continue
            if run:
                if self.bytes is not None:
                    out += [self.bytes[b] for b in run.encode("utf-8")]
                else:
                    out.append(run if unknown_as_text else UNK)
                run = ""
            out.append(t)
        return out[:-1]


class _Feed:
    """The training lines as SentencePiece pulls them: counted, and an exception raised while reading
    (an InputError for a bad line, Ctrl-C) kept, since SentencePiece turns it into a RuntimeError."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.lines = iter(lines)
        self.count = 0
        self.error: Optional[BaseException] = None

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        try:
            line = next(self.lines)
        except StopIteration:
            raise
        except BaseException as e:
            self.error = e
            raise
        self.count += 1
        return line


def train_sentencepiece(
    inputs: list[Path],
    out: Path,
    vocab_size: int = 37000,
    model_type: str = "unigram",
    sample: int | None = None,
    seed: int = 1,
    threads: int = -1,
    coverage: float = 1.0,
    progress: ProgressFn = ignore,
) -> SentencePieceTokenizer:
    """Learn one SentencePiece vocabulary (`model_type` unigram or bpe) over all `inputs` (plain or .gz)
    and write the model to `out`, atomically.

    As `nmt.text.bpe.train_bpe`: `sample=N` trains on a seeded reservoir sample of N lines drawn from all
    inputs together, `coverage` is the share of characters kept (rarer ones become UNK), and a
    `vocab_size` larger than the data allows gives a smaller model, with a warning.
    """
    check_train_args(vocab_size, sample, coverage, seed)
    if model_type not in MODEL_TYPES:
        raise InputError(f"`model_type` {model_type!r} is not a SentencePiece model type; use unigram or bpe")
    paths, lines = training_text(inputs, sample, seed, progress)
    out = Path(out)
    check_output_file(out, "`out`")  # before the training, not after it
    out.parent.mkdir(parents=True, exist_ok=True)
    names = ", ".join(str(p) for p in paths)

    progress(Progress(task="bpe", message=f"learning {vocab_size} SentencePiece {model_type} tokens"))
    feed, buffer = _Feed(lines), io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=feed, model_writer=buffer, model_type=model_type, vocab_size=vocab_size,
            character_coverage=coverage, num_threads=threads if threads > 0 else (os.cpu_count() or 1),
            pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
            hard_vocab_limit=False,  # fewer pieces than asked for, rather than an error
            max_sentence_length=_MAX_LINE_BYTES, minloglevel=1,  # its warnings and errors, on stderr
        )
    except RuntimeError as e:
        if feed.error is not None:
            raise feed.error from None
        if feed.count == 0:
            raise InputError(f"{names}: no text to learn subwords from (empty input); check the files") from None
        why = _error_text(e)
        fix = "; adjust `vocab_size`" if "vocab" in why.lower() else ""
        raise InputError(f"SentencePiece training on {names} failed: {why}{fix}") from None
    del lines, feed  # the sample, if any
    data = buffer.getvalue()

    tokenizer = SentencePieceTokenizer(data, name=str(out))
    save_trained(out, data, tokenizer.vocab_size, vocab_size, "SentencePiece", progress)
    return tokenizer
