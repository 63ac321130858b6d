"""What the server needs of a translation engine (`nmt.inference.engines.Engine`, torch's or
CTranslate2's), how the worker thread calls it, and the model's identity."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from nmt.config import SearchConfig
from nmt.inference.decoding import SHOWN
from nmt.inference.engines import Engine as TranslationEngine
from nmt.inference.translator import Translation

TranslateFn = Callable[[list[str], SearchConfig], list[Translation]]


def translate_function(engine: TranslationEngine) -> TranslateFn:
    """translate_chunk with per-request search settings (the model and tokenizer are shared).

    Call it where the thread count is set (after --threads): the worker thread that runs the function is
    given that count, since OpenMP starts a new thread with its default (every core) whatever
    torch.set_num_threads said in the main thread, and --threads 1 would run on two cores."""
    threads = torch.get_num_threads()
    pinned = threading.local()
    variants: dict[tuple[Any, ...], TranslationEngine] = {}

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
    search: dict[str, Any]
    engine: str = ""  # torch or ctranslate2


def model_info(paths: Sequence[str | Path], engine: TranslationEngine) -> ModelInfo:
    """The model's identity: file name(s), direction, sha256 of the checkpoint file(s), search defaults."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
    search = {k: v for k, v in dataclasses.asdict(engine.search_cfg).items() if k in SHOWN}
    src, tgt = engine.languages
    return ModelInfo(" + ".join(Path(p).name for p in paths), src, tgt, digest.hexdigest(), search,
                     getattr(engine, "name", ""))
