"""What the server needs of its translation engines (`nmt.engines.base.Engine`, torch's or CTranslate2's),
one per direction: how the worker thread calls them (sentences and alignments: `Job`), each
model's identity, and which checkpoint serves which direction (`plan`: checkpoints of the same languages are an
ensemble; a multilingual checkpoint serves each of its directions with its one engine; a direction offered by a
bilingual checkpoint and a multilingual one is the bilingual one's, said at start)."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Literal, Optional

import torch

from nmt.config import SearchConfig
from nmt.core.errors import ConfigError, ref
from nmt.core.identity import DataIdentity
from nmt.documents.texts import align
from nmt.engines.base import Engine
from nmt.engines.decoding import SHOWN

Direction = tuple[str, str]  # (source, target) language codes


Kind = Literal["sentences", "alignments"]


@dataclass(frozen=True)
class Job:
    """What a batch shares: the direction (which engine), the search settings, and the kind of work: "sentences"
    (each item a sentence, translated: a Translation) or "alignments" (each item a text's TextTranslation whose
    inline HTML markup needs its word alignment: a list of pairs). The batcher merges only requests of equal jobs."""

    direction: Direction
    search: SearchConfig
    kind: Kind = "sentences"


TranslateFn = Callable[[list[Any], Job], Sequence[Any]]


def translate_function(engines: Mapping[Direction, Engine]) -> TranslateFn:
    """The worker's function: the items of a job (`Job`) done by the job's engine with its search settings (the
    model and tokenizer are shared). The texts were cut into sentences before (`nmt.documents.texts.plan`).

    Call it where the thread count is set (after --threads): the worker thread that runs the function is
    given that count, since OpenMP starts a new thread with its default (every core) whatever
    torch.set_num_threads said in the main thread, and --threads 1 would run on two cores."""
    threads = torch.get_num_threads()
    pinned = threading.local()
    variants: dict[tuple[Any, ...], Engine] = {}

    def translate(items: list[Any], job: Job) -> Sequence[Any]:
        if not getattr(pinned, "threads", False):
            torch.set_num_threads(threads)
            pinned.threads = True
        key = (job.direction, dataclasses.astuple(job.search))
        if key not in variants:
            variants[key] = engines[job.direction].with_search(job.search)
        engine = variants[key]
        if job.kind == "alignments":
            return [align(engine, translation) for translation in items]
        return engine.translate_chunk(items)

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


def model_name(path: str | Path) -> str:
    """A checkpoint's name where none is given: its folder and file (two runs' averaged.pt stay apart)."""
    path = Path(path).absolute()
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def model_info(paths: Sequence[str | Path], engine: Engine, names: Mapping[Path, str] = MappingProxyType({})
               ) -> ModelInfo:
    """The model's identity: its checkpoints' names (`names`, else `model_name`), direction, sha256 of the
    checkpoint file(s), search defaults."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
    search = {k: v for k, v in dataclasses.asdict(engine.search_cfg).items() if k in SHOWN}
    src, tgt = engine.languages
    return ModelInfo(" + ".join(names.get(Path(p), model_name(p)) for p in paths), src, tgt, digest.hexdigest(), search,
                     getattr(engine, "name", ""))


@dataclass
class Group:
    """Checkpoints served by one engine (several: an ensemble) and the directions it serves (None: every one the
    model translates, read once it is open)."""

    paths: list[Path]
    directions: Optional[list[Direction]] = None

    @property
    def where(self) -> str:
        """The checkpoints, as given (in errors and notices)."""
        return " + ".join(map(str, self.paths))


def arrows(directions: Sequence[Direction]) -> str:
    return ", ".join(f"{src} -> {tgt}" for src, tgt in directions)


def plan(paths: Sequence[Path], data_of: Callable[[Path], DataIdentity],
         log: Callable[[str], None] = lambda message: None) -> list[Group]:
    """The engines to open for `paths`, in the order given, each with the directions it serves: checkpoints of
    the same languages (directions and target tags) are one ensemble; a direction that a bilingual checkpoint and a
    multilingual one both offer is the bilingual one's (a model of that one direction: said on `log`).
    ConfigError naming both files where two multilingual checkpoints of different languages share a direction, or
    where a multilingual checkpoint is left nothing to serve. `data_of(path)`: what the checkpoint says of its
    languages (read with its weights mapped, never touched); not asked of one checkpoint alone."""
    if len(paths) == 1:
        return [Group([Path(paths[0])])]
    found: dict[tuple[object, ...], tuple[DataIdentity, list[Path]]] = {}
    for path in map(Path, paths):
        data = data_of(path)
        found.setdefault((data.directions, data.tags), (data, []))[1].append(path)
    groups = [(Group(group), data) for data, group in found.values()]
    bilingual = {data.directions[0]: group for group, data in groups if len(data.directions) == 1}
    owner: dict[Direction, Group] = {}
    for group, data in groups:
        if len(data.directions) == 1:
            group.directions = list(data.directions)
            continue
        group.directions = [d for d in data.directions if d not in bilingual]
        taken = [d for d in data.directions if d in bilingual]
        if not group.directions:
            raise ConfigError(f"{group.where}: every direction it translates ({arrows(taken)}) is served by a "
                              "bilingual checkpoint given too; leave it out")
        for direction in group.directions:
            if direction in owner:
                raise ConfigError(f"{owner[direction].where} and {group.where} both translate {arrows([direction])}, "
                                  "and an ensemble needs multilingual checkpoints of the same languages (directions "
                                  "and target tags); serve one of them")
            owner[direction] = group
        for direction in taken:
            log(f"{arrows([direction])}: served by {bilingual[direction].where}, not by the multilingual "
                f"{group.where} (a bilingual checkpoint is preferred)")
    return [group for group, _ in groups]


def open_directions(paths: Sequence[Path], opener: Callable[[list[Path]], Engine],
                    data_of: Callable[[Path], DataIdentity], log: Callable[[str], None] = lambda message: None,
                    names: Optional[Sequence[str]] = None) -> tuple[list[Engine], list[ModelInfo]]:
    """One engine per direction served, and its model's identity, for the checkpoints `paths` (`plan`): `opener`
    opens each group's model once; each direction is its `with_direction` (sharing the model: a multilingual
    model is in memory once, whatever the number of its directions). `names`: one per path (ConfigError
    otherwise), what the model infos call them."""
    if names is not None and len(names) != len(paths):
        raise ConfigError(f"{ref('name')}: {len(names)} name(s) for {len(paths)} checkpoint(s) ({ref('model')}); give "
                          "one per checkpoint, in the same order")
    named = dict(zip(map(Path, paths), names or []))
    engines: list[Engine] = []
    infos: list[ModelInfo] = []
    for group in plan(paths, data_of, log):
        engine = opener(group.paths)
        info = model_info(group.paths, engine, named)  # the files hashed once, whatever the number of directions
        for src, tgt in group.directions or engine.data.directions:
            engines.append(engine.with_direction(src, tgt, str(group.paths[0])))
            infos.append(dataclasses.replace(info, src=src, tgt=tgt))
    return engines, infos
