"""Joint byte-pair encoding (BPE) over source and target text, with youtokentome.

One subword vocabulary is shared by both languages (as in the Transformer paper's
37000-token joint BPE for English-German), so the model can tie its embeddings.

Special token ids are youtokentome's defaults (PAD=0, UNK=1, BOS=2, EOS=3), defined in
nmt/vocab.py; the models this module trains and loads are checked to use them.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import youtokentome as yttm

from nmt.config import INT_MAX, check_range
from nmt.errors import InputError, OutputError, os_error_message
from nmt.files import atomic_write, check_output_file, read_lines, resolve_text
from nmt.progress import Progress, ProgressFn, ignore
from nmt.vocab import BOS, EOS, PAD, SPECIALS, UNK


# Vocabulary sizes youtokentome can handle sensibly: its trainer's run time grows
# linearly with vocab_size even when the data runs out of merges (1e9 takes minutes).
MIN_VOCAB_SIZE = 5
MAX_VOCAB_SIZE = 1 << 24

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


class Tokenizer:
    """A loaded joint BPE model: text <-> subword ids (specials: PAD, UNK, BOS, EOS = 0..3)."""

    def __init__(self, model_bytes: bytes, name: str = "<bytes>") -> None:
        """Prefer `from_file` / `from_bytes`; `name` appears in error messages."""
        self.vocab_size: int = _model_vocab_size(model_bytes, name)
        self.model_bytes: bytes = model_bytes
        self.name = name
        self._models: dict[int, yttm.BPE] = {}  # per thread count: yttm fixes it at load time
        if self._model(-1).vocab_size() != self.vocab_size:
            raise InputError(
                f"{name}: BPE model is corrupt (inconsistent ids); train it again with `nmt bpe`"
            )

    @classmethod
    def from_file(cls, path: str | Path) -> "Tokenizer":
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
    def from_bytes(cls, data: bytes) -> "Tokenizer":
        """Load a model from its bytes (checkpoints embed them)."""
        return cls(data, "embedded BPE model")

    def _model(self, threads: int) -> yttm.BPE:
        if threads not in self._models:
            self._models[threads] = _load_yttm(self.model_bytes, threads)
        return self._models[threads]

    def encode(self, lines: list[str], threads: int = -1) -> list[list[int]]:
        """Subword ids of each line, without BOS/EOS; -1 threads means all cores."""
        return self._model(threads).encode(list(lines))

    def decode(self, ids: Iterable[Sequence[int]]) -> list[str]:
        """Text of each id sequence: stops at the first EOS and skips PAD and BOS."""
        cut = []
        for seq in ids:
            seq = [int(i) for i in seq]
            if EOS in seq:
                seq = seq[: seq.index(EOS)]
            cut.append(seq)
        if not cut:
            return []
        return self._model(-1).decode(cut, ignore_ids=[PAD, BOS, EOS])

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """Subword string of each id ("▁" marks a word start), for attention plots."""
        model = self._model(-1)
        return [model.id_to_subword(int(i)) for i in ids]


def _flush_c_stdio() -> None:
    """Flush C stdio buffers, where yttm's C++ output waits when stdout is a pipe."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send fd 1 to fd 2 for the duration: yttm's trainer chats on stdout, which carries results."""
    try:
        sys.stdout.flush()
    except (AttributeError, ValueError):
        pass
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


def _input_lines(inputs: list[Path], progress: ProgressFn) -> Iterator[str]:
    """Every non-blank line of every input, in order, reporting lines read."""
    done = 0
    for path in inputs:
        for line in read_lines(path):
            done += 1
            if done % 100_000 == 0:
                progress(Progress(task="bpe read", done=done, unit="lines"))
            if line.strip():
                yield line
    progress(Progress(task="bpe read", done=done, total=done, unit="lines"))


_SAMPLE_BLOCK = 4096  # lines drawn for at once by reservoir_sample; part of its seeded stream


def reservoir_sample(lines: Iterable[str], n: int, seed: int) -> list[str]:
    """A uniform sample of `n` lines (all of them when fewer), the same for the same seed.

    Algorithm R with the random draws vectorised: line k (from 0) replaces slot j, drawn
    uniformly from 0..k, when j < n.  Lines are read in blocks of 4096, so it holds at most
    n + 4096 lines, and Python touches only the lines that enter the sample.
    """
    it = iter(lines)
    sample = list(itertools.islice(it, n))
    if len(sample) < n:
        return sample
    rng = np.random.default_rng(seed)
    k = n  # number of the next line
    while block := list(itertools.islice(it, _SAMPLE_BLOCK)):
        slots = rng.integers(0, np.arange(k + 1, k + 1 + len(block), dtype=np.int64))
        hits = np.flatnonzero(slots < n)
        for i, j in zip(hits.tolist(), slots[hits].tolist()):
            sample[j] = block[i]
        k += len(block)
        del block  # before the next block is read
    return sample


def _check_train_args(vocab_size: int, sample: int | None, coverage: float, seed: int = 1) -> None:
    if not MIN_VOCAB_SIZE <= vocab_size <= MAX_VOCAB_SIZE:
        raise InputError(
            f"--vocab-size {vocab_size} is out of range; use {MIN_VOCAB_SIZE}..{MAX_VOCAB_SIZE} "
            "(37000 is the paper's joint English-German vocabulary)"
        )
    if sample is not None and not 1 <= sample <= INT_MAX:
        raise InputError(f"--sample {sample} must be a positive number of lines (or omitted)")
    check_range("--seed", seed, 0, INT_MAX)  # numpy's generators refuse negative seeds
    if not 0.0 < coverage <= 1.0:
        raise InputError(f"--coverage {coverage} must be in (0, 1]")


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


def train_bpe(
    inputs: list[Path],
    out: Path,
    vocab_size: int = 37000,
    sample: int | None = None,
    seed: int = 1,
    threads: int = -1,
    coverage: float = 1.0,
    progress: ProgressFn = ignore,
) -> Tokenizer:
    """Learn one BPE vocabulary over all `inputs` (plain or .gz) and write the model to `out`.

    `sample=N` trains on a seeded reservoir sample of N lines drawn from all inputs together.
    `coverage` is the share of characters kept (rarer ones become UNK).  The model is written
    atomically; yttm's chatter goes to stderr so stdout stays clean.
    """
    _check_train_args(vocab_size, sample, coverage, seed)
    if not inputs:
        raise InputError("no training text given; pass files to `nmt bpe --train`")
    paths = [resolve_text(p) for p in inputs]
    out = Path(out)
    check_output_file(out, "--out")  # before the training, not after it
    out.parent.mkdir(parents=True, exist_ok=True)
    names = ", ".join(str(p) for p in paths)

    # A scratch directory beside the output, since corpora may not fit in /tmp. Its name holds our pid,
    # so that the next run can tell the copies of killed runs (deleted) from those of live ones.
    remove_dead_scratch(out.parent)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f"{SCRATCH_PREFIX}{os.getpid()}-") as scratch:
        text = Path(scratch) / "text.txt"
        lines: Iterable[str] = _input_lines(paths, progress)
        if sample is not None:
            lines = reservoir_sample(lines, sample, seed)
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
            fix = "; adjust --vocab-size" if "vocab" in why.lower() else ""
            raise InputError(f"BPE training on {names} failed: {why}{fix}") from None
        except (MemoryError, OverflowError) as e:
            raise InputError(
                f"BPE training on {names} failed ({type(e).__name__}); try a smaller --vocab-size "
                "or --sample"
            ) from None
        data = model_path.read_bytes()

    tokenizer = Tokenizer(data, str(out))
    if tokenizer.vocab_size < vocab_size:
        # yttm stops when no pair is left to merge; the smaller model is still usable.
        progress(Progress(
            task="bpe",
            message=f"the data allows only {tokenizer.vocab_size} BPE tokens, fewer than "
            f"--vocab-size {vocab_size}; pass a smaller --vocab-size to silence this",
        ))
    with atomic_write(out) as f:
        f.write(data)
    return tokenizer
