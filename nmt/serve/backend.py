"""What the server needs of its translation engines (`nmt.engines.base.Engine`, torch's or CTranslate2's),
one per direction: how the worker thread calls them (sentences, alignments and terms: `Job`), each
model's identity, and which checkpoint serves which direction (`plan`: checkpoints of the same languages are an
ensemble; a multilingual checkpoint serves each of its directions with its one engine; a direction offered by a
bilingual checkpoint and a multilingual one is the bilingual one's, said at start; `served`: the directions, known
before any model loads), and the glossary file of each direction (`read_glossaries`)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
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
from nmt.documents.terms import place_terms, search_terms
from nmt.documents.texts import align
from nmt.engines.base import Engine
from nmt.engines.decoding import SHOWN
from nmt.text.glossary import Glossary

Direction = tuple[str, str]  # (source, target) language codes
# --glossary SRC-TGT=FILE: the direction it names (a bare FILE: the server's only direction)
GLOSSARY_SPEC = re.compile(r"([A-Za-z][A-Za-z0-9_]*)-([A-Za-z][A-Za-z0-9_]*)=(.*)", re.S)


Kind = Literal["sentences", "alignments", "terms", "searched"]


@dataclass(frozen=True)
class Job:
    """What a batch shares: the direction (which engine), the search settings, and the kind of work: "sentences"
    (each item a sentence, translated: a Translation), "alignments" (each item a text's TextTranslation whose
    inline HTML markup needs its word alignment: a list of pairs), "terms" (each item a sentence's Translation and
    the Glossary whose terms its source holds: the Translation with the terms placed through the engine's alignment,
    and their counts, `nmt.documents.terms.place_terms`) or "searched" (each item a sentence and such a Glossary: its
    translation by the search constrained to its terms, and their counts, `nmt.documents.terms.searched_terms`). The
    batcher merges only requests of equal jobs."""

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
        if job.kind == "terms":
            return [place_terms(translation, glossary, engine.alignment) for translation, glossary in items]
        if job.kind == "searched":
            return search_terms(engine, items)
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


def served(paths: Sequence[Path], data_of: Callable[[Path], DataIdentity]) -> dict[Direction, Group]:
    """Every direction that the checkpoints `paths` will serve, and the group of checkpoints that serves it (`plan`;
    more than one path: an ensemble), from what the checkpoints say of their languages, before any model loads."""
    out: dict[Direction, Group] = {}
    for group in plan(paths, data_of):
        for direction in group.directions or data_of(group.paths[0]).directions:
            out[direction] = group
    return out


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


def read_glossaries(given: Sequence[str], served: Mapping[Direction, Group],
                    log: Callable[[str], None] = lambda line: None) -> dict[Direction, Glossary]:
    """Each direction's glossary from --glossary values: `SRC-TGT=FILE`, or a bare FILE where the server serves one
    direction (`served`: `nmt.serve.backend.served`). ConfigError naming --glossary for a direction not served, two
    files for one direction, a bare FILE among several directions, or a direction an ensemble serves (terms are placed
    through one model's attention), before any file is read; then InputError naming FILE:LINE for a line that is no
    term (`Glossary.read`). Each is said on `log`."""
    files: dict[Direction, Path] = {}
    for value in given:
        spec = GLOSSARY_SPEC.fullmatch(value)
        if spec is None:
            if len(served) != 1:
                raise ConfigError(f"{ref('glossary')} {value}: this server translates {arrows(list(served))}; name "
                                  f"the file's direction: {ref('glossary')} SRC-TGT={value}")
            direction, path = next(iter(served)), value
        else:
            direction, path = (spec.group(1).lower(), spec.group(2).lower()), spec.group(3)
        if not path:
            raise ConfigError(f"{ref('glossary')} {value}: no file; write {ref('glossary')} SRC-TGT=FILE")
        if direction not in served:
            raise ConfigError(f"{ref('glossary')} {value}: this server does not translate {arrows([direction])}; it "
                              f"translates {arrows(list(served))}")
        if direction in files:
            raise ConfigError(f"{ref('glossary')} {value}: {arrows([direction])} has a glossary already "
                              f"({files[direction]}); give one file per direction")
        if len(served[direction].paths) > 1:
            raise ConfigError(f"{ref('glossary')} {value}: {arrows([direction])} is served by an ensemble "
                              f"({served[direction].where}), and terms are placed through one model's attention; "
                              "serve it with one checkpoint, or leave its glossary out")
        files[direction] = Path(path)
    glossaries = {}
    for direction, file in files.items():
        glossaries[direction] = Glossary.read(file, ref("glossary"))
        log(f"glossary {arrows([direction])}: {len(glossaries[direction]):,} term(s) from {file}")
    return glossaries
