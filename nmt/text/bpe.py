"""Joint byte-pair encoding (BPE) over source and target text, with youtokentome.

One subword vocabulary is shared by both languages (as in the Transformer paper's
37000-token joint BPE for English-German), so the model can tie its embeddings.

Special token ids are youtokentome's defaults (PAD=0, UNK=1, BOS=2, EOS=3), defined in
nmt/core/vocab.py; the models this module trains and loads are checked to use them.

`BpeTokenizer` is one of the `nmt.text.tokenizer.Tokenizer`s (the other is SentencePiece's, nmt/text/spm.py).
Its subword regularisation (`encode(..., dropout=p, seed=s)`) is BPE-dropout run by `nmt.text.segment.Merges`
over the model's merge table, seeded: youtokentome's own `dropout_prob` draws from one
process-wide generator that nothing can seed (a `std::mt19937` in its bpe.cpp), so a resumed
training run could not draw the same segmentations again.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Optional, Union, cast

import numpy as np
import youtokentome as yttm

from nmt.config import check_range
from nmt.core.errors import InputError, OutputError, os_error_message
from nmt.core.files import check_output_file
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.core.vocab import BOS, EOS, PAD, SPECIALS, UNK, cut_at_eos
from nmt.text.corpus import check_train_args, save_trained, training_text
from nmt.text.segment import Merges, by_line, index_words

KIND = "youtokentome"
Seed = Union[int, Sequence[int]]  # a numpy seed: an int, or several (e.g. the run's seed, the epoch, the chunk)

# A youtokentome model is plain text: "n_chars n_rules", n_chars lines "codepoint id",
# n_rules lines "left right merged", then "unk pad bos eos".  yttm itself loads any
# garbage without complaint, so we check the shape ourselves.
_MODEL_CHARS = re.compile(r"[0-9 \n-]*")


def _model_vocab_size(data: bytes, name: str) -> int:
    """Check that `data` is a youtokentome model with our special ids; return its vocab size."""
    foreign = f"{name}: not a BPE model made by `nmt bpe`"
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise InputError(f"{foreign} (binary data); train one with `nmt bpe`") from None
    if not _MODEL_CHARS.fullmatch(text):
        raise InputError(f"{foreign} (unexpected characters); train one with `nmt bpe`")
    lines = text.rstrip("\n").split("\n")
    try:
        n_chars, n_rules = (int(x) for x in lines[0].split())
        specials = tuple(int(x) for x in lines[-1].split())
    except ValueError:
        raise InputError(f"{foreign} (bad header); train one with `nmt bpe`") from None
    if n_chars < 0 or n_rules < 0 or len(lines) != n_chars + n_rules + 2:
        raise InputError(
            f"{name}: BPE model is truncated or corrupt (header promises {n_chars} characters "
            f"and {n_rules} merges, file has {len(lines)} lines); train it again with `nmt bpe`"
        )
    # yttm writes the special ids in the order unk, pad, bos, eos.
    if specials != (UNK, PAD, BOS, EOS):
        raise InputError(
            f"{name}: BPE model uses special ids {specials} (unk pad bos eos), nmt needs "
            f"{(UNK, PAD, BOS, EOS)}; train it again with `nmt bpe`"
        )
    return len(SPECIALS) + n_chars + n_rules


def _load_yttm(data: bytes, threads: int) -> yttm.BPE:
    """Load model bytes into youtokentome, which only reads from a file path."""
    fd, tmp = tempfile.mkstemp(prefix="nmt-bpe-", suffix=".model")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return yttm.BPE(tmp, n_threads=threads)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class BpeTokenizer:
    """A loaded joint BPE model: text <-> subword ids (specials: PAD, UNK, BOS, EOS = 0..3).

    An `nmt.text.tokenizer.Tokenizer`: one model serves both sides, so `side` changes nothing.
    """

    # What `nmt.text.tokenizer`'s table of kinds reads of a kind (`TokenizerKind` there says what each is).
    kind = KIND
    display_name = "BPE"
    model_noun = "BPE model"  # as nmt's messages have always called it
    model_types: ClassVar[tuple[str, ...]] = ()  # youtokentome learns BPE only
    joint_file = "bpe.model"
    side_files: ClassVar[Optional[tuple[str, str]]] = None  # one joint model only, without a table of pieces

    def __init__(self, model_bytes: bytes, name: str = "<bytes>") -> None:
        """Prefer `from_file` / `from_bytes`; `name` appears in error messages."""
        self.vocab_size: int = _model_vocab_size(model_bytes, name)
        self.model_bytes: bytes = model_bytes
        self.name = name
        self._models: dict[int, yttm.BPE] = {}  # per thread count: yttm fixes it at load time
        self._merges: Optional[_Rules] = None  # parsed on the first encode with dropout
        if self._model(-1).vocab_size() != self.vocab_size:
            raise InputError(
                f"{name}: BPE model is corrupt (inconsistent ids); train it again with `nmt bpe`"
            )

    @classmethod
    def from_file(cls, path: str | Path) -> BpeTokenizer:
        """Load a model file; InputError when it is missing, unreadable, corrupt or foreign."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise InputError(f"{path}: no such BPE model; train one with `nmt bpe`") from None
        except OSError as e:
            raise InputError(f"{path}: cannot read BPE model ({e.strerror})") from None
        return cls(data, str(path))

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "embedded BPE model") -> BpeTokenizer:
        """Load a model from its bytes (checkpoints embed them)."""
        return cls(data, name)

    @classmethod
    def from_data(cls, data: dict[str, Any], name: str) -> BpeTokenizer:
        """From the `nmt.text.tokenizer` data form (checked there): its one joint model."""
        return cls(data["source"], name)

    @staticmethod
    def recognizes(head: bytes) -> bool:
        """Whether a file that starts with `head` looks like a youtokentome model: text that starts with a digit."""
        return head[:1].isdigit()

    @classmethod
    def train(cls, inputs: list[Path], out: Path, vocab_size: int, model_type: Optional[str], sample: Optional[int],
              seed: int, threads: int, progress: ProgressFn) -> BpeTokenizer:
        """`train_bpe` (`model_type` is None: youtokentome learns BPE only, and `train_tokenizer` refuses another)."""
        return train_bpe(inputs, out, vocab_size, sample, seed, threads, progress=progress)

    def _model(self, threads: int) -> yttm.BPE:
        if threads not in self._models:
            self._models[threads] = _load_yttm(self.model_bytes, threads)
        return self._models[threads]

    def encode(self, lines: Sequence[str], side: str = "source", threads: int = -1, dropout: float = 0.0,
               seed: Seed = 0) -> list[list[int]]:
        """Subword ids of each line, without BOS/EOS; -1 threads means all cores.

        `dropout` > 0: BPE-dropout, each applicable merge skipped with that probability at every step; the
        same lines, `dropout` and `seed` give the same ids (on one thread, whatever `threads` says).
        """
        _check_side(side)
        check_range("dropout", dropout, 0.0, 1.0, high_open=True)
        if dropout == 0.0:
            return cast(list[list[int]], self._model(threads).encode(list(lines)))  # youtokentome is untyped
        if self._merges is None:
            self._merges = _Rules(self.model_bytes.decode("ascii"), self.vocab_size)
        return self._merges.encode(list(lines), dropout, np.random.default_rng(seed))

    def decode(self, ids: Iterable[Iterable[int]], side: str = "target") -> list[str]:
        """Text of each id sequence: stops at the first EOS and skips PAD and BOS."""
        _check_side(side)
        cut = [cut_at_eos(seq) for seq in ids]
        if not cut:
            return []
        return cast(list[str], self._model(-1).decode(cut))  # youtokentome is untyped

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Subword string of each id ("▁" marks a word start), for attention plots."""
        model = self._model(-1)
        return [model.id_to_subword(int(i)) for i in ids]

    def vocab(self) -> list[str]:
        """Every piece, by id."""
        return cast(list[str], self._model(-1).vocab())  # youtokentome is untyped

    def to_data(self) -> dict[str, Any]:
        """The `nmt.text.tokenizer` data form: plain data, for checkpoints."""
        return {"kind": KIND, "version": 1, "source": self.model_bytes}


def _check_side(side: str) -> None:
    if side not in ("source", "target"):
        raise ValueError(f"side must be 'source' or 'target', not {side!r}")


# Whitespace as youtokentome sees it: C's isspace on ASCII, and its word-start mark "▁" (any other
# character, e.g. a no-break space, is part of a word). A match is a word, or the newline that ends a line.
_WORD_OR_END = re.compile("[^\t\n\v\f\r \u2581]+|\n")


class _Rules:
    """youtokentome's segmentation, as `nmt.text.segment.Merges` over the model's merge table.

    Per word: start from "▁" and its characters (a run of unknown characters is one UNK), then merge, one
    pair per step, the adjacent pair whose rule comes first in the model (leftmost on ties); that is
    youtokentome's encoding, which `encode(..., p=0)` reproduces id for id; p > 0 is BPE-dropout.

    youtokentome's own dropout differs in one respect: queue entries gone stale by earlier merges also
    draw, and one that is "kept" makes it draw again for all, so its words stop later (on Multi30k at
    p=0.1: 16% more tokens than plain BPE, against 30% here). The same p is not the same amount of noise.
    """

    def __init__(self, text: str, vocab_size: int) -> None:
        lines = text.rstrip("\n").split("\n")
        n_chars, n_rules = (int(x) for x in lines[0].split())
        self.char_id = {chr(int(cp)): int(i) for cp, i in (line.split() for line in lines[1 : 1 + n_chars])}
        self.space = self.char_id["\u2581"]
        rules = np.array([line.split() for line in lines[1 + n_chars : 1 + n_chars + n_rules]],
                         dtype=np.int64).reshape(-1, 3)
        self.unknown = vocab_size  # a run of unknown characters: never part of a rule, UNK in the output
        # A pair listed twice takes its later rule, as in yttm; priority: the rule's line in the model.
        self.merges = Merges(rules[:, 0], rules[:, 1], rules[:, 2], np.arange(len(rules)), vocab_size + 1)

    def _word_ids(self, word: str) -> list[int]:
        ids = [self.space]
        for c in word:
            i = self.char_id.get(c, self.unknown)
            if i != self.unknown or ids[-1] != self.unknown:
                ids.append(i)
        return ids

    def encode(self, lines: list[str], p: float, rng: np.random.Generator) -> list[list[int]]:
        """Ids of each line; the random draws follow the lines' order, so they are the same for the same seed."""
        words, occ, occ_line = index_words(lines, _WORD_OR_END)
        tokens, per_occ = self.merges.segment([self._word_ids(w) for w in words], occ, p, rng)
        tokens[tokens == self.unknown] = UNK
        return by_line(tokens, per_occ, occ_line, len(lines))


def _flush_c_stdio() -> None:
    """Flush C stdio buffers, where yttm's C++ output waits when stdout is a pipe."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send fd 1 to fd 2 for the duration: yttm's trainer chats on stdout, which carries results."""
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.flush()
    _flush_c_stdio()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no fd 1 or 2 (daemonised): nothing to protect
        yield
        return
    try:
        yield
    finally:
        _flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)


SCRATCH_PREFIX = ".nmt-bpe-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_dead_scratch(folder: Path) -> list[Path]:
    """Delete the `.nmt-bpe-PID-*` copies of the corpus that runs killed mid-training left in `folder`
    (a corpus-sized file each); those of live processes stay."""
    removed = []
    for path in folder.glob(f"{SCRATCH_PREFIX}*"):
        pid = path.name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        if path.is_dir() and (not pid.isdigit() or not _alive(int(pid))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _write_lines(path: Path, lines: Iterable[str]) -> int:
    """Write `lines` to `path`, one per line; returns how many."""
    n = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line)
            f.write("\n")
            n += 1
    return n


FULL_DISK_BYTES = 1 << 20  # free bytes below which a disk counts as full (a model cut short: `learnt`)


def learnt(data: bytes, out: Path, scratch: Path) -> BpeTokenizer:
    """The model youtokentome wrote into `scratch`, read; youtokentome says nothing when it cannot write it, so a
    model cut short beside a full disk is an OutputError of that write (else the InputError of a corrupt model)."""
    try:
        return BpeTokenizer(data, str(out))
    except InputError:
        if shutil.disk_usage(scratch).free < FULL_DISK_BYTES:
            raise OutputError(os_error_message(OSError(28, os.strerror(28)), out.parent,
                                               "cannot write the model youtokentome learnt")) from None
        raise


def train_bpe(
    inputs: list[Path],
    out: Path,
    vocab_size: int = 37000,
    sample: int | None = None,
    seed: int = 1,
    threads: int = -1,
    coverage: float = 1.0,
    progress: ProgressFn = ignore,
) -> BpeTokenizer:
    """Learn one BPE vocabulary over all `inputs` (plain or .gz) and write the model to `out`.

    `sample=N` trains on a seeded reservoir sample of N lines drawn from all inputs together.
    `coverage` is the share of characters kept (rarer ones become UNK).  The model is written
    atomically; yttm's chatter goes to stderr so stdout stays clean.
    """
    check_train_args(vocab_size, sample, coverage, seed)
    paths, lines = training_text(inputs, sample, seed, progress)
    out = Path(out)
    check_output_file(out, "`out`")  # before the training, not after it
    out.parent.mkdir(parents=True, exist_ok=True)
    names = ", ".join(str(p) for p in paths)

    # A scratch directory beside the output, since corpora may not fit in /tmp. Its name holds our pid,
    # so that the next run can tell the copies of killed runs (deleted) from those of live ones.
    remove_dead_scratch(out.parent)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f"{SCRATCH_PREFIX}{os.getpid()}-") as scratch:
        text = Path(scratch) / "text.txt"
        try:
            n_lines = _write_lines(text, lines)
        except OSError as e:  # a full or read-only disk (read errors are InputErrors already)
            raise OutputError(os_error_message(e, out.parent, "cannot write the scratch copy of the text")) from e
        del lines  # free the sample before youtokentome loads its own copy of the text
        if n_lines == 0:
            raise InputError(f"{names}: no text to learn BPE from (empty input); check the files")
        progress(Progress(task="bpe", message=f"learning {vocab_size} BPE tokens from {n_lines} lines"))

        model_path = Path(scratch) / "bpe.model"
        try:
            with _stdout_to_stderr():
                yttm.BPE.train(
                    data=str(text), model=str(model_path), vocab_size=vocab_size,
                    coverage=coverage, n_threads=threads,
                    pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
                )
        except ValueError as e:  # yttm reports bad arguments (e.g. vocab too small) this way
            why = " ".join(str(e).split())
            fix = "; adjust `vocab_size`" if "vocab" in why.lower() else ""
            raise InputError(f"BPE training on {names} failed: {why}{fix}") from None
        except (MemoryError, OverflowError) as e:
            raise InputError(
                f"BPE training on {names} failed ({type(e).__name__}); try a smaller `vocab_size` "
                "or `sample`"
            ) from None
        data = model_path.read_bytes()
        tokenizer = learnt(data, out, Path(scratch))
    save_trained(out, data, tokenizer.vocab_size, vocab_size, "BPE", progress)  # yttm stops when no pair is left
    return tokenizer
