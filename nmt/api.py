"""The Python API: `nmt.load(...)` opens a checkpoint (or an ensemble) on the torch or the CTranslate2 engine and
gives a `Translator`, whose `translate(texts)` returns one string per text; `translate_results(texts)` returns a
`Result` per text, with its score and n-best `Candidate`s. Each text is cut into sentences (or, with
format="html", read as an HTML document whose tags are kept) by `nmt.documents.texts.Documents`, as
`nmt translate` does, and gives the same translations.

The library never prints: errors are `nmt.core.errors.NmtError`s whose messages name the keyword arguments at
fault (`beam`, not --beam); warnings (a text cut to fit the model) go to the `progress` callback when one is
given, else to Python's `warnings` (category `NmtWarning`). A Translator may be shared by threads: each call
translates with its own copy of the engine's settings (see docs/python-api.md).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional, TypedDict, Union

from nmt.config import InferenceConfig, Overrides, Precision, SearchConfig, check_field, did_you_mean, fields_of
from nmt.config.flags import as_fields
from nmt.core.errors import ConfigError, InputError, NmtError, ref
from nmt.core.files import check_input_file
from nmt.core.progress import Progress, ProgressFn
from nmt.documents.texts import Documents, Format, TextTranslation, check_format
from nmt.engines.base import BatchEngine
from nmt.engines.choice import open_engine
from nmt.text.glossary import Glossary, Term
from nmt.workflows.threads import set_threads

if TYPE_CHECKING:  # PEP 692 (typed **kwargs): for type checkers only, so Python 3.9 runs this module as it is
    from typing_extensions import Unpack

ModelPath = Union[str, "os.PathLike[str]"]
DEVICES = {"cpu": 0, "cuda": 1}  # device -> InferenceConfig.gpus
CHUNK = 1024  # texts given to the engine at once: memory stays bounded for a long list, results do not change


class SearchOptions(TypedDict, total=False):
    """The search options `load` and each call take (the fields of `nmt.config.SearchConfig`; None or left
    out: the model's own default, else nmt's)."""

    beam: int  # beam size; 1 is greedy search
    lenpen: float  # length penalty alpha; 0: none
    lenpen_type: Literal["gnmt", "power"]
    max_len_a: float  # output limit a * source tokens + b
    max_len_b: int
    nbest: int  # translations per text (translate_results)
    sampling: bool  # draw each token at random instead of searching
    topk: int
    topp: float
    temperature: float
    seed: int
    early_stopping: bool  # beam search ends once `beam` hypotheses have ended (False: transformers' rule)


class CallOptions(SearchOptions, total=False):
    """What each call takes: the search options, and a multilingual model's direction (default: `load`'s)."""

    src_lang: str
    tgt_lang: str


class NmtWarning(UserWarning):
    """A warning of nmt's (a text cut to fit the model, a slow number format), when no `progress` is given."""


@dataclass(frozen=True)
class Candidate:
    """One translation of a text among its n best: `score` ranks them (the log-probability divided by the
    length penalty), `log_prob` is the sum of its tokens' log-probabilities (end of sentence included); both are
    sums over the text's sentences. They are the SCORE and LOGPROB columns of `nmt translate --nbest`."""

    text: str
    score: float
    log_prob: float


@dataclass(frozen=True)
class Result:
    """The translation of one text: `text` the best one; `score` how sure the model is of it (the mean
    log-probability of its tokens, from minus infinity to 0: `nmt translate --scores`; 0.0 for a text with
    nothing to translate); `candidates` the n best, best first (candidates[0].text == text)."""

    source: str
    text: str
    score: float
    candidates: tuple[Candidate, ...]

    @classmethod
    def of(cls, t: TextTranslation) -> Result:
        return cls(t.source, t.text, t.score, tuple(Candidate(text, h.score, h.log_prob) for text, h in t.hypotheses))


@contextlib.contextmanager
def python_names() -> Iterator[None]:
    """NmtErrors raised inside, their messages naming the settings as a Python caller sets them (beam)."""
    try:
        yield
    except NmtError as e:
        e.args = (as_fields(str(e)),)
        raise


def warn_only(event: Progress) -> None:
    """The `progress` of a Translator given none: warnings go to Python's `warnings`, the rest nowhere."""
    if event.message and event.message.startswith("warning"):
        warnings.warn(as_fields(event.message.removeprefix("warning: ")), NmtWarning, stacklevel=2)


def check_names(options: Mapping[str, Any], function: str) -> None:
    """TypeError for a keyword argument that is no search option (as Python says of a misspelt one)."""
    known = fields_of(SearchConfig)
    for name in options:
        if name not in known:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}{did_you_mean(name, known)}")


def model_paths(model: Union[ModelPath, Sequence[ModelPath]]) -> list[Path]:
    """The checkpoint(s) `model` names, each a file that exists (an InputError otherwise)."""
    items = [model] if isinstance(model, (str, os.PathLike)) else model
    if isinstance(items, (bytes, bytearray)) or not isinstance(items, Sequence) or not items:
        raise TypeError(f"load() takes a checkpoint's path (str or os.PathLike) or a non-empty list of them (an "
                        f"ensemble), got {type(model).__name__}{'' if items else ' (empty)'}")
    paths = []
    for i, item in enumerate(items):
        if not isinstance(item, (str, os.PathLike)) or isinstance(os.fspath(item), bytes):
            raise TypeError(f"load(): model[{i}] is {type(item).__name__}, not a path (str or os.PathLike)")
        paths.append(check_input_file(os.fspath(item), "model"))
    return paths


GlossaryLike = Union[Glossary, Mapping[str, str], str, Path, None]


def glossary_of(given: GlossaryLike) -> Optional[Glossary]:
    """A call's glossary: a Glossary, {source term: target term}, or the path of a glossary file (None: none)."""
    if given is None or isinstance(given, Glossary):
        return given
    if isinstance(given, (str, Path)):
        return Glossary.read(Path(given))
    if isinstance(given, Mapping):
        for source, target in given.items():
            if not isinstance(source, str) or not isinstance(target, str) or not source.strip() or not target.strip():
                raise InputError(f"glossary: {source!r}: {target!r}: give non-empty str terms, source: target")
        return Glossary([Term(s.strip(), t.strip(), f"glossary[{s!r}]") for s, t in given.items()])
    raise TypeError(f"glossary takes a dict of terms, a file's path or a Glossary, not {type(given).__name__}")


def checked_texts(texts: object, function: str) -> list[str]:
    """`texts` as a list, each a str; a TypeError that says what was given otherwise."""
    if isinstance(texts, str):
        raise TypeError(f"{function}() takes a list of strings, got a str; for one text use translate_one(text), "
                        "or pass [text]")
    if isinstance(texts, (bytes, bytearray, Mapping)) or not isinstance(texts, Iterable):
        raise TypeError(f"{function}() takes a list of strings, got {type(texts).__name__}")
    items = list(texts)
    for i, item in enumerate(items):
        if isinstance(item, str):
            check_encodable(item, i)
            continue
        if isinstance(item, (bytes, bytearray)):
            raise TypeError(f"{function}(): texts[{i}] is bytes, not a str; decode it first (.decode('utf-8'))")
        if isinstance(item, Iterable):
            raise TypeError(f"{function}(): texts[{i}] is a {type(item).__name__}, not a str; pass one string "
                            "per text (flatten a list of lists)")
        raise TypeError(f"{function}(): texts[{i}] is {type(item).__name__}, not a str")
    return items


def check_encodable(text: str, index: int) -> None:
    """InputError for a text holding a lone surrogate (a str from bytes decoded with surrogateescape, or JSON's
    "\\ud800"): no character, which no tokenizer can read."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"texts[{index}] holds a lone surrogate ({text[e.start]!r} at character {e.start}), which "
                         "is no character; decode the text's bytes without errors='surrogateescape'") from None


def chunks_of(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Translator:
    """A model ready to translate (from `nmt.load`). Its calls may run in several threads at once: each
    translates with its own copy of the engine's settings, the model itself being shared (read only)."""

    def __init__(self, engine: BatchEngine, split: bool = True, format: Format = "text",
                 progress: Optional[ProgressFn] = None, src_lang: Optional[str] = None,
                 tgt_lang: Optional[str] = None):
        with python_names():
            if tgt_lang is not None or src_lang is not None or len(engine.data.targets) == 1:
                engine = engine.with_direction(src_lang, tgt_lang)  # else each call names its target
        self._engine, self._split, self._format = engine, split, format
        self._progress = progress or warn_only
        with python_names():
            Documents(engine, split, format)  # a format that is none, html with n-best: refused now

    @property
    def engine(self) -> str:
        """The engine that translates: "torch" or "ctranslate2"."""
        return self._engine.name

    @property
    def languages(self) -> tuple[str, str]:
        """(source, target) language codes of the model, e.g. ("en", "de")."""
        return self._engine.languages

    @property
    def directions(self) -> list[tuple[str, str]]:
        """Every (source, target) the model translates: one, or a multilingual model's (pick one per call with
        tgt_lang=...)."""
        return list(self._engine.data.directions)

    @property
    def search(self) -> SearchConfig:
        """The search of a call that sets no search option (the model's defaults, then `load`'s options)."""
        return self._engine.search_cfg

    def __repr__(self) -> str:
        src, tgt = self.languages
        return f"<nmt.Translator {src}->{tgt} on {self.engine}, beam {self.search.beam}>"

    def translate(self, texts: Sequence[str], *, split: Optional[bool] = None, format: Optional[Format] = None,
                  batch_size: Optional[int] = None, max_tokens: Optional[int] = None,
                  glossary: GlossaryLike = None, glossary_method: str = "auto",
                  **search: Unpack[CallOptions]) -> list[str]:
        """The best translation of each text, in order (an empty list gives []). `split`: cut each text into
        sentences (default: `load`'s); `format`: "text" or "html"; `batch_size`, `max_tokens`: sentences and
        source tokens per batch; `glossary`: terms to use, {source term: target term} or a glossary file (see
        `nmt translate --glossary`), `glossary_method` how its terms get in ("auto", "place" or "constrain": `nmt
        translate --glossary-method`); `tgt_lang`, `src_lang`: a multilingual model's direction (default: `load`'s);
        search options (beam=5, ...) for this call only."""
        if (search.get("nbest") or 1) > 1:
            raise ConfigError(f"nbest {search.get('nbest')}: translate() gives the best translation of each text; "
                              "use translate_results() for the n best")
        return [t.text for t in self._translate(texts, "translate", split, format, batch_size, max_tokens, search,
                                                glossary, glossary_method)]

    def translate_one(self, text: str, *, split: Optional[bool] = None, format: Optional[Format] = None,
                      glossary: GlossaryLike = None, glossary_method: str = "auto",
                      **search: Unpack[CallOptions]) -> str:
        """The best translation of one text."""
        if not isinstance(text, str):
            raise TypeError(f"translate_one() takes one str, got {type(text).__name__}; for several texts use "
                            "translate(texts)")
        return self.translate([text], split=split, format=format, glossary=glossary, glossary_method=glossary_method,
                              **search)[0]

    def translate_results(self, texts: Sequence[str], *, split: Optional[bool] = None,
                          format: Optional[Format] = None, batch_size: Optional[int] = None,
                          max_tokens: Optional[int] = None, glossary: GlossaryLike = None,
                          glossary_method: str = "auto", **search: Unpack[CallOptions]) -> list[Result]:
        """A `Result` per text, in order: the best translation, its score and the `nbest` best candidates (a
        `glossary` changes the best one only)."""
        found = self._translate(texts, "translate_results", split, format, batch_size, max_tokens, search, glossary,
                                glossary_method)
        return [Result.of(t) for t in found]

    def _translate(self, texts: Sequence[str], function: str, split: Optional[bool], format: Optional[Format],
                   batch_size: Optional[int], max_tokens: Optional[int],
                   search: Mapping[str, Any], glossary: GlossaryLike = None,
                   glossary_method: str = "auto") -> list[TextTranslation]:
        items = checked_texts(texts, function)
        search = dict(search)
        direction = (search.pop("src_lang", None), search.pop("tgt_lang", None))
        check_names(search, function)
        with python_names():
            engine = self._variant(search, batch_size, max_tokens)
            if direction != (None, None):
                engine = engine.with_direction(*direction)
            documents = Documents(engine, self._split if split is None else split, format or self._format,
                                  glossary_of(glossary), glossary_method)
            return list(documents.translate(chunks_of(items, CHUNK)))

    def _variant(self, search: Mapping[str, Any], batch_size: Optional[int],
                 max_tokens: Optional[int]) -> BatchEngine:
        """A copy of the engine with this call's settings (cheap: the model is shared): a call's batch sizes,
        search and progress are its own, whatever other threads do."""
        base = self._engine.search_cfg
        cfg = Overrides(SearchConfig, dict(search)).apply(base) if search else base
        if self.engine == "ctranslate2" and cfg.sampling and (not base.sampling or cfg.seed != base.seed):
            raise ConfigError(f"{ref('sampling')} and {ref('seed')} per call on the ctranslate2 engine: CTranslate2 "
                              f"seeds its samples when the model loads; give them to load(), or load with "
                              f"engine='torch'")
        engine = self._engine.with_search(cfg)
        for name, value in (("batch_size", batch_size), ("max_tokens", max_tokens)):
            if value is not None:
                check_field(InferenceConfig, name, value)
        engine.max_sentences = batch_size or engine.max_sentences
        engine.max_tokens = max_tokens or engine.max_tokens
        engine.progress = self._progress
        return engine


def load(model: Union[ModelPath, Sequence[ModelPath]], *, engine: Literal["auto", "torch", "ctranslate2"] = "auto",
         device: Literal["cpu", "cuda"] = "cpu", threads: int = 0, precision: Union[Precision, str, None] = None,
         inter_threads: Optional[int] = None, batch_size: Optional[int] = None, max_tokens: Optional[int] = None,
         split: bool = True, format: Format = "text", progress: Optional[ProgressFn] = None,
         src_lang: Optional[str] = None, tgt_lang: Optional[str] = None, **search: Unpack[SearchOptions]) -> Translator:
    """A Translator of the checkpoint `model` (a path; a list of paths: an ensemble, on torch).

    `engine`: "torch", "ctranslate2", or "auto" (CTranslate2 where installed and able to do what is asked, the
    model converted once into the user's cache; torch otherwise); `device`: "cpu" or "cuda"; `threads`: CPU
    threads (0: the engine's default; on torch this sets torch's threads for the whole process); `precision`:
    fp32 (default), bf16, fp16, int8 or auto; `inter_threads`: batches translated at once (CTranslate2);
    `batch_size`, `max_tokens`: sentences and source tokens per batch; `split`, `format`: the defaults of each
    call; `progress`: a callable given each `nmt.core.progress.Progress` (the engine chosen, warnings; without
    it warnings go to Python's `warnings`); `tgt_lang`, `src_lang`: a multilingual model's direction (without
    them each call names its target); search options (beam=5, ...) over the model's own defaults."""
    paths = model_paths(model)
    check_names(search, "load")
    with python_names():
        check_format(format)  # before the model loads
    if device not in DEVICES:
        raise ConfigError(f"device {device!r}: give one of {', '.join(DEVICES)}")
    report = progress or warn_only
    with python_names():
        options = Overrides(InferenceConfig, dict(engine=engine, gpus=DEVICES[device], threads=threads,
                                                  precision=precision, inter_threads=inter_threads,
                                                  batch_size=batch_size, max_tokens=max_tokens)).apply()
        set_threads(options.threads)
        opened = open_engine(paths, Overrides(SearchConfig, dict(search)), options, progress=report)
    assert isinstance(opened, BatchEngine), "both engines are BatchTranslators"
    return Translator(opened, split, format, progress, src_lang, tgt_lang)
