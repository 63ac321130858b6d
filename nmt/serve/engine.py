"""What the server needs of a translation engine (a protocol that `nmt.translate.Translator` and, later, a
CTranslate2 engine fulfil), how the worker thread calls it, and the model's identity."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence, TypeVar

import torch

from nmt.search import SearchConfig
from nmt.translate import Translation

E = TypeVar("E", bound="TranslationEngine")

TranslateFn = Callable[[list[str], SearchConfig], list[Translation]]


class TranslationEngine(Protocol):
    """A loaded model that translates chunks of lines; nothing else of it is used by the server."""

    search_cfg: SearchConfig  # the default search of every request

    @property
    def languages(self) -> tuple[str, str]:
        """(source, target) language codes of the model, e.g. ("en", "de")."""
        ...

    def translate_chunk(self, lines: list[str], first_line: int = 0) -> list[Translation]:
        """One Translation per line, in order (an empty line gives an empty translation)."""
        ...

    def with_search(self: E, cfg: SearchConfig) -> E:
        """The same model with other search settings (cheap: nothing is loaded again)."""
        ...


def translate_function(engine: TranslationEngine) -> TranslateFn:
    """translate_chunk with per-request search settings (the model and tokenizer are shared).

    Call it where the thread count is set (after --threads): the worker thread that runs the function is
    given that count, since OpenMP starts a new thread with its default (every core) whatever
    torch.set_num_threads said in the main thread, and --threads 1 would run on two cores."""
    threads = torch.get_num_threads()
    pinned = threading.local()
    variants: dict[tuple, TranslationEngine] = {}

    def translate(lines: list[str], search: SearchConfig) -> list[Translation]:
        if not getattr(pinned, "threads", False):
            torch.set_num_threads(threads)
            pinned.threads = True
        key = dataclasses.astuple(search)
        if key not in variants:
            variants[key] = engine.with_search(search)
        return variants[key].translate_chunk(lines)

    return translate


@dataclass
class ModelInfo:
    """What /v1/translate and /health tell about the model."""

    name: str
    src: str
    tgt: str
    sha256: str
    search: dict


def model_info(paths: Sequence[str | Path], engine: TranslationEngine) -> ModelInfo:
    """The model's identity: file name(s), direction, sha256 of the checkpoint file(s), search defaults."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
    search = {k: v for k, v in dataclasses.asdict(engine.search_cfg).items()
              if k in ("beam", "lenpen", "lenpen_type", "max_len_a", "max_len_b", "nbest")}
    src, tgt = engine.languages
    return ModelInfo(" + ".join(Path(p).name for p in paths), src, tgt, digest.hexdigest(), search)
