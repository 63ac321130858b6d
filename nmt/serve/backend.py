"""What the server needs of its translation engines (`nmt.inference.engines.Engine`, torch's or CTranslate2's),
one per direction: how the worker thread calls them (texts, through `nmt.inference.documents.Documents`), and
each model's identity."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from nmt.config import SearchConfig
from nmt.inference.decoding import SHOWN
from nmt.inference.documents import Documents, Format
from nmt.inference.engines import Engine as TranslationEngine
from nmt.inference.translator import Translation

Direction = tuple[str, str]  # (source, target) language codes


@dataclass(frozen=True)
class Job:
    """What a batch shares: the direction (which engine), the search settings and the format of its texts. The
    batcher merges only requests of equal jobs."""

    direction: Direction
    search: SearchConfig
    format: Format = "text"


TranslateFn = Callable[[list[str], Job], Sequence[Translation]]


def translate_function(engines: Mapping[Direction, TranslationEngine], split: bool = True) -> TranslateFn:
    """The worker's function: the texts of a job, each translated whole (cut into sentences with `split`, lines
    and HTML kept) by the job's engine with its search settings (the model and tokenizer are shared).

    Call it where the thread count is set (after --threads): the worker thread that runs the function is
    given that count, since OpenMP starts a new thread with its default (every core) whatever
    torch.set_num_threads said in the main thread, and --threads 1 would run on two cores."""
    threads = torch.get_num_threads()
    pinned = threading.local()
    variants: dict[tuple[Any, ...], Documents] = {}

    def translate(texts: list[str], job: Job) -> Sequence[Translation]:
        if not getattr(pinned, "threads", False):
            torch.set_num_threads(threads)
            pinned.threads = True
        key = (job.direction, dataclasses.astuple(job.search), job.format)
        if key not in variants:
            variants[key] = Documents(engines[job.direction].with_search(job.search), split, job.format)
        return variants[key].translate_chunk(texts)

    return translate


@dataclass
class ModelInfo:
    """What /v1/translate and /health tell about the model of one direction."""

    name: str
    src: str
    tgt: str
    sha256: str
    search: dict[str, Any]
    engine: str = ""  # torch or ctranslate2

    @property
    def direction(self) -> Direction:
        return self.src, self.tgt


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
