"""SentencePiece subwords (unigram or BPE), beside youtokentome's in nmt/bpe.py; the only importer of sentencepiece.

`nmt bpe --kind sentencepiece` learns one joint model over source and target text with nmt's special
ids (pad 0, unk 1, bos 2, eos 3, see nmt/vocab.py). `SentencePieceTokenizer` is an
`nmt.tokenizer.Tokenizer` over such a model, or over two models, one per side, that share one
vocabulary through a table of pieces (OPUS-MT/Marian ships `source.spm`, `target.spm` and a
`vocab.json`): then a side's pieces become nmt ids through the table, whatever ids its own model gives them,
and back, as transformers' MarianTokenizer does: a piece its model does not know (say a character the
source model never saw, or a target piece of the source model's) is looked up by its text, and decodes to it.

SentencePiece normalises text (NFKC, runs of spaces to one), so decoding gives the normalised text.
Subword regularisation is SentencePiece's sampling, seeded: see `SentencePieceTokenizer.encode`.
"""

from __future__ import annotations

import io
import os
import re
import threading
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import numpy as np
import sentencepiece as spm

from nmt.config import check_range
from nmt.corpus import check_train_args, save_trained, training_text
from nmt.errors import InputError
from nmt.files import check_output_file
from nmt.progress import Progress, ProgressFn, ignore
from nmt.vocab import BOS, EOS, PAD, UNK, cut_at_eos

KIND = "sentencepiece"
MODEL_TYPES = ("unigram", "bpe")
Seed = Union[int, Sequence[int]]
# SentencePiece skips longer training lines (its default is 4192 bytes); youtokentome learns from every line.
_MAX_LINE_BYTES = 1 << 20
# SentencePiece seeds each new worker thread's generator from one process-wide seed: a second thread that
# sets it between our seeding and our worker's first draw changes our sample (measured: 12 of 50 samples
# differed with another thread sampling), so seeding and sampling happen under one lock.
_SAMPLING = threading.Lock()


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

    kind = KIND
    # sentencepiece 0.2.3 draws from absl::BitGen, which mixes a per-process salt into every seed: the same seed
    # gives another sample in another process (measured: 3 processes, 3 samples; within one process, the same).
    same_sample_in_every_process = False

    def __init__(self, source: bytes, target: Optional[bytes] = None, pieces: Optional[list[str]] = None,
                 name: str = "<bytes>") -> None:
        self.name = name
        self.source_bytes, self.target_bytes, self.table = source, target, pieces
        source_model = _load(source, name)
        target_model = source_model if target is None else _load(target, name, "SentencePiece target model")
        self._models = {"source": source_model, "target": target_model}
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
    def from_file(cls, path: str | Path) -> "SentencePieceTokenizer":
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

    def _model(self, side: str) -> spm.SentencePieceProcessor:
        if side not in self._models:
            raise ValueError(f"side must be 'source' or 'target', not {side!r}")
        return self._models[side]

    def encode(self, lines: Sequence[str], side: str = "source", threads: int = -1, dropout: float = 0.0,
               seed: Seed = 0) -> list[list[int]]:
        """Subword ids of each line, without BOS/EOS; -1 threads means all cores.

        `dropout` > 0: SentencePiece's sampling with its `alpha` = `dropout` (and `nbest_size=-1`): for a
        BPE model that is BPE-dropout with this probability; for a unigram model, a sample from all
        segmentations with the model's probabilities raised to alpha (1: as the model has them; smaller:
        flatter, more varied). Drawn on one thread, from a generator seeded by `seed` at each call, so the
        same lines, `dropout` and `seed` give the same ids. That seed is SentencePiece's process-wide one, so
        threads that sample take turns (a lock); encoding without dropout runs on `threads` threads at once.
        """
        model = self._model(side)
        check_range("dropout", dropout, 0.0, 1.0, high_open=True)
        lines = list(lines)
        # With a table, as pieces (an unknown stretch of text comes as itself, not as the unk piece), looked up in it.
        out_type = str if self.table is not None else int
        if dropout == 0.0:
            threads = threads if threads > 0 else (os.cpu_count() or 1)
            found = model.encode(lines, out_type=out_type, num_threads=threads)
        else:
            # Each call's workers start their generators from the seed (a second call without a new seed
            # repeats the first), and one worker draws for the lines in their order.
            with _SAMPLING:
                spm.set_random_generator_seed(int(np.random.SeedSequence(seed).generate_state(1)[0]))
                found = model.encode(lines, out_type=out_type, enable_sampling=True, alpha=dropout, nbest_size=-1,
                                     num_threads=1)
        if self.table is None:
            return found
        index = self._index
        return [[index.get(p, UNK) for p in seq] for seq in found]

    def decode(self, ids: Iterable[Iterable[int]], side: str = "target") -> list[str]:
        """Text of each id sequence: stops at the first EOS and skips PAD and BOS (UNK reads " ⁇ ").

        With a table, the pieces are decoded as text: one the side's model does not know reads as itself
        (its "▁" as a space), as SentencePiece's own decode_pieces and transformers' MarianTokenizer have it."""
        model = self._model(side)
        cut = [cut_at_eos(seq) for seq in ids]
        if not cut:
            return []
        if self.table is None:
            return model.decode(cut)
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

    def to_data(self) -> dict:
        """The `nmt.tokenizer` data form: plain data, for checkpoints."""
        data: dict = {"kind": KIND, "version": 1, "source": self.source_bytes}
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


class _Feed:
    """The training lines as SentencePiece pulls them: counted, and an exception raised while reading
    (an InputError for a bad line, Ctrl-C) kept, since SentencePiece turns it into a RuntimeError."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.lines = iter(lines)
        self.count = 0
        self.error: Optional[BaseException] = None

    def __iter__(self) -> "_Feed":
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

    As `nmt.bpe.train_bpe`: `sample=N` trains on a seeded reservoir sample of N lines drawn from all
    inputs together, `coverage` is the share of characters kept (rarer ones become UNK), and a
    `vocab_size` larger than the data allows gives a smaller model, with a warning.
    """
    check_train_args(vocab_size, sample, coverage, seed)
    if model_type not in MODEL_TYPES:
        raise InputError(f"--model-type {model_type!r} is not a SentencePiece model type; use unigram or bpe")
    paths, lines = training_text(inputs, sample, seed, progress)
    out = Path(out)
    check_output_file(out, "--out")  # before the training, not after it
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
        fix = "; adjust --vocab-size" if "vocab" in why.lower() else ""
        raise InputError(f"SentencePiece training on {names} failed: {why}{fix}") from None
    del lines, feed  # the sample, if any
    data = buffer.getvalue()

    tokenizer = SentencePieceTokenizer(data, name=str(out))
    save_trained(out, data, tokenizer.vocab_size, vocab_size, "SentencePiece", progress)
    return tokenizer
