"""What every translating endpoint does: check the key, the texts, the format and the search settings (each rule in
one place), find the direction's model (or detect the source language), queue the texts, and wait for their
translations (or the client's departure, or the timeout); the glossaries whose terms a translation uses (a
direction's from --glossary, a request's own over it: `nmt.serve.schemas.request_glossary`), placed per sentence by
the worker; the mark a translating route bears (`translating`); the server's files (API keys, access log), checked
before it starts."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hmac
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Optional, TypeVar, Union, cast

from nmt.config import SearchConfig, ServeConfig, check_field
from nmt.config.fields import MAX_BEAM
from nmt.config.flags import as_fields, as_flags
from nmt.core.compression import SMALL_TEXT_LIMIT, codec_of_name, read_small_text
from nmt.core.errors import ConfigError, ref, render_refs
from nmt.core.files import check_output_file
from nmt.documents.terms import Placed
from nmt.documents.texts import FORMATS, NOTHING, TextTranslation, Work, check_glossary, check_search, plan
from nmt.engines.base import Translation
from nmt.serve.backend import Direction, Job, ModelInfo, arrows
from nmt.serve.batcher import Batcher
from nmt.serve.http_errors import ClientGone, RequestError, TooLarge, shown
from nmt.text.glossary import Glossary
from nmt.text.languages import Detection, Detector, language_name
from nmt.text.markup import parse_html

LINES_KEY = "nmt.lines"  # the ASGI scope entry where an endpoint notes how many lines it translated
TERMS_KEY = "nmt.terms"  # the ASGI scope entry where the terms of a request's glossary are counted (a Placed)
SHOWN_SOURCES = 12  # an error names the directions of this many source languages at most (a multilingual model's
# may be hundreds)
DetectorFactory = Callable[[Sequence[str]], Any]  # candidates -> an object with detect(text) -> list[Detection]
UNCHANGED = NOTHING  # the hypothesis of a text given back as it is (its language is the target's)
DISTINCT_WIDTH = 2  # an n-best request searches this many times n wide, for n distinct texts
INLINE_CHARS = 2000  # a plain-text request this short is cut into sentences on the event loop (no thread hand-off)
TRANSLATES = "nmt_translates"  # the attribute that marks a translating route's endpoint
F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")


def translating(endpoint: F) -> F:
    """Mark a route's endpoint as one that translates (its latency is measured: `nmt.serve.middleware.Metrics`);
    put it under the route's decorator: `@router.post(...)` then `@translating`."""
    setattr(endpoint, TRANSLATES, True)
    return endpoint


def translating_paths(routes: Iterable[Any]) -> set[str]:
    """The paths of the routes whose endpoint is marked `translating`."""
    return {route.path for route in routes if getattr(getattr(route, "endpoint", None), TRANSLATES, False)}


def check_format(format: str) -> None:
    """A 400 in LibreTranslate's words unless `format` is one the server translates (text, html)."""
    if format not in FORMATS:
        raise RequestError(f"{shown(format)} format is not supported", 400)


@dataclass
class Service:
    """The state the endpoints share (one per application, at `app.state.service`): the models of the directions
    served (`directions`, in the order given; the first is the default), the default search of each, the
    language detectors."""

    batcher: Batcher
    cfg: ServeConfig
    directions: dict[Direction, ModelInfo]
    search: SearchConfig  # the default search of every request (of the first direction)
    keys: Optional[frozenset[str]] = None  # the accepted API keys; None: none is asked for
    ready: bool = False  # the models are loaded and warmed up, the detectors built
    searches: dict[Direction, SearchConfig] = field(default_factory=dict)  # each direction's default search
    detector: DetectorFactory = Detector
    detectors: dict[tuple[str, ...], Any] = field(default_factory=dict)
    split: bool = True  # texts cut into sentences (--no-split: each line is one)
    reader: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="nmt-reader"))
    no_detector: str = ""  # why the detector cannot be built (its package missing): said to requests that need it
    glossaries: dict[Direction, Glossary] = field(default_factory=dict)  # each direction's --glossary
    ensembles: frozenset[Direction] = frozenset()  # the directions an ensemble serves: no terms placed there
    glossary_method: str = "auto"  # how the terms get in (TextConfig.glossary_method; see `place`)

    def __post_init__(self) -> None:
        for search in [self.search, *self.searches.values()]:  # (a request without settings gets one as it is)
            search.validate()

    @property
    def info(self) -> ModelInfo:
        """The first direction's model."""
        return next(iter(self.directions.values()))

    @functools.cached_property
    def shown_models(self) -> dict[Direction, dict[str, Any]]:
        """Each direction's model as the answers show it (made once: a request's answer shares the dict)."""
        return {direction: dataclasses.asdict(info) for direction, info in self.directions.items()}

    @property
    def sources(self) -> list[str]:
        return list(dict.fromkeys(src for src, _ in self.directions))

    def sources_to(self, target: str) -> list[str]:
        """The served source languages that translate to `target`."""
        return [src for src, tgt in self.directions if tgt == target]

    def build_detectors(self) -> None:
        """A detector for every set of candidates a request may ask for (every source language for /detect,
        those with each target for source auto), built once (at start-up, in a thread: loading is slow)."""
        try:
            for tgt in [None, *dict.fromkeys(t for _, t in self.directions)]:
                self.detector_of(self.sources if tgt is None else list(dict.fromkeys([*self.sources_to(tgt), tgt])))
        except ConfigError as e:  # the server still translates from the languages a request names
            self.no_detector = str(e)

    def detector_of(self, among: Sequence[str]) -> Any:
        key = tuple(among)
        if key not in self.detectors:
            self.detectors[key] = self.detector(key)
        return self.detectors[key]

    def detect(self, text: str, among: Optional[Sequence[str]] = None) -> list[Detection]:
        """The candidates (`among`, default every served source language) for the language of `text`, most
        likely first; [] when the text gives no evidence."""
        if self.no_detector:
            raise RequestError(f"cannot detect the language: {self.no_detector}; give source", 400)
        return list(self.detector_of(self.sources if among is None else among).detect(text))

    async def detect_sources(self, texts: list[str], target: str, format: str = "text",
                             each: bool = False) -> list[Detection]:
        """The source language of each text, as LibreTranslate 1.9 decides it for source auto: one language for a
        whole list, detected in all its texts together (`each`, nmt's extension: each text its own); the candidates
        are the served sources that translate to `target`, and `target` itself (a text already in it comes back
        unchanged); a text without evidence gets the first candidate, with confidence 0 (LibreTranslate falls back
        to English); html is read as the text it would translate (`nmt.text.markup.parse_html`: no tags, scripts,
        styles). A 400 naming what this server translates where none translates to `target`."""
        sources = self.sources_to(target)
        if not sources:
            self.direction(self.sources[0], target)
        among = list(dict.fromkeys([*sources, target]))
        def detect_all() -> list[Detection]:
            words = [" ".join(parse_html(text).texts) for text in texts] if format == "html" else texts
            if each or len(words) == 1:
                found = [self.detect(text, among) for text in words]
            else:
                found = [self.detect("\n".join(words), among)] * len(words)
            return [candidates[0] if candidates else Detection(among[0], 0.0) for candidates in found]

        # (a page is read off the event loop, in the reader thread: one at a time)
        return await asyncio.get_running_loop().run_in_executor(self.reader if format == "html" else None, detect_all)

    def languages(self) -> list[dict[str, Any]]:
        """GET /languages: every served language (sources and targets), each with its English name and the
        languages it translates to, sorted by name as LibreTranslate lists them."""
        codes = dict.fromkeys(code for direction in self.directions for code in direction)
        out = [{"code": code, "name": language_name(code),
                "targets": sorted(tgt for src, tgt in self.directions if src == code)} for code in codes]
        return sorted(out, key=lambda lang: (lang["name"], lang["code"]))

    def served(self, to: str = " to ") -> str:
        """The directions served, in words: "en to de, fr to de", or by source where one has several targets
        ("en to de, fr, cs; de to en"), the first SHOWN_SOURCES sources only (GET /languages lists them all)."""
        targets: dict[str, list[str]] = {}
        for src, tgt in self.directions:
            targets.setdefault(src, []).append(tgt)
        parts = [f"{src}{to}{', '.join(tgts)}" for src, tgts in list(targets.items())[:SHOWN_SOURCES]]
        more = len(targets) - len(parts)
        listed = ("; " if any(len(t) > 1 for t in targets.values()) else ", ").join(parts)
        return listed + (f" and {more} more source languages (GET /languages lists them)" if more > 0 else "")

    @property
    def codes(self) -> set[str]:
        """Every language served, as a source or a target."""
        return {code for direction in self.directions for code in direction}

    def direction(self, source: str, target: str) -> Direction:
        """(source, target) when this server translates it; a 400 in LibreTranslate's words otherwise."""
        if (source, target) in self.directions:
            return source, target
        codes = {code for direction in self.directions for code in direction}
        if source not in self.sources:
            raise RequestError(f"{shown(source)} is not supported: this server translates {self.served()}", 400)
        if target not in codes:
            raise RequestError(f"{shown(target)} is not supported: this server translates {self.served()}", 400)
        raise RequestError(f"{language_name(target)} ({target}) is not available as a target language from "
                           f"{language_name(source)} ({source}): this server translates {self.served()}", 400)

    def check_key(self, key: Optional[str]) -> None:
        """403 unless `key` is one of --api-keys (when the server has keys)."""
        if self.keys is None:
            return
        if not key:
            raise RequestError("Missing API key: give api_key", 403)
        # Compared in constant time, so that the answer's timing tells nothing about the keys. A key holding a
        # lone surrogate (JSON's "\ud800") is no key of the file (which is UTF-8) yet must still be compared.
        given = key.encode("utf-8", "surrogatepass")
        if not any(hmac.compare_digest(given, k.encode()) for k in self.keys):
            raise RequestError("Invalid API key", 403)

    def texts(self, text: Union[str, list[str]], format: str = "text", file: bool = False) -> list[str]:
        """The request's texts. Plain text (not a `file`) is checked against --max-lines (the lines of all of them)
        and --max-chars (each line); an HTML text or a file is bounded once read (`check_work`). A text is
        translated whole: its lines and sentences come back in its own layout."""
        texts = [text] if isinstance(text, str) else list(text)
        if not texts:
            raise RequestError("no text to translate: give a string or a non-empty list of strings", 400)
        if format != "text" or file:
            for i, t in enumerate(texts):
                check_unicode(t, f"text {i}")
            if format == "text":  # its characters are known before it is read
                self.check_characters(sum(map(len, texts)))
            return texts
        lines = [line for t in texts for line in lines_of(t)]
        if len(lines) > self.cfg.max_lines:
            raise TooLarge(as_flags(f"{len(lines)} lines in one request; at most {self.cfg.max_lines} "
                                    f"({ref('max_lines')}; an HTML page or a file is bounded by "
                                    f"{ref('max_document_chars')})"))
        for i, line in enumerate(lines):
            if len(line) > self.cfg.max_chars:
                raise TooLarge(as_flags(f"line {i} has {len(line)} characters; at most {self.cfg.max_chars} "
                                        f"({ref('max_chars')})"))
            check_unicode(line, f"line {i}")
        return texts

    def check_work(self, work: Work, document: bool) -> None:
        """TooLarge unless `work` is within --max-sentences, and (an HTML text or a file: a `document`)
        --max-document-chars."""
        if document:
            self.check_characters(work.characters)
        if len(work.sentences) > self.cfg.max_sentences:
            raise TooLarge(as_flags(f"{len(work.sentences)} sentences in one request once its text is cut into "
                                    f"sentences; at most {self.cfg.max_sentences} ({ref('max_sentences')})"))

    def check_characters(self, size: int) -> None:
        """TooLarge for an HTML text or a file of more than --max-document-chars characters of text to translate."""
        if size > self.cfg.max_document_chars:
            raise TooLarge(as_flags(f"{size} characters of text to translate in one request; at most "
                                    f"{self.cfg.max_document_chars} ({ref('max_document_chars')})"))

    @property
    def widest(self) -> int:
        """The widest search a request may ask for (beam, nbest): --max-beam, or the server's own default
        search where that is wider."""
        return max(self.cfg.max_beam, *(max(s.beam, s.nbest) for s in [self.search, *self.searches.values()]))

    def search_for(self, settings: dict[str, Any], status: int = 422,
                   direction: Optional[Direction] = None) -> SearchConfig:
        """The direction's default search with the settings this request gives (beam, nbest, ...; None: the
        default; `status` when out of range or wider than --max-beam). A request's n-best widens the beam to
        match."""
        given = {name: value for name, value in settings.items() if value is not None}
        default = self.searches.get(direction, self.search) if direction is not None else self.search
        if not given:  # most requests: the default, checked once at start-up (validate costs ~0.1 ms a call)
            return default
        for name in ("beam", "nbest"):
            value = given.get(name)
            if isinstance(value, int) and value > self.widest:
                raise RequestError(as_flags(f"{name} {value}: this server searches at most {self.widest} wide per "
                                            f"request ({ref('max_beam')})"), status)
        try:
            for name, value in given.items():
                check_field(SearchConfig, name, value)
            search = dataclasses.replace(default, **given)
            if search.nbest > search.beam:
                search = dataclasses.replace(search, beam=search.nbest)  # n-best needs a beam that wide
            return search.validate()
        except ConfigError as e:
            raise RequestError(as_fields(str(e)), status) from None  # the request's own fields, as it names them

    async def translate_texts(self, request: Any, texts: list[str], source: str, target: str, *,
                              format: str = "text", search: Optional[SearchConfig] = None,
                              settings: Optional[dict[str, Any]] = None, status: int = 400,
                              names: Mapping[str, str] = MappingProxyType({}), file: bool = False,
                              glossary: Optional[Glossary] = None) -> list[TextTranslation]:
        """One TextTranslation per text (`texts` as `texts` gave them: checked), of the direction `source` to `target`
        (a 400 in LibreTranslate's words when this server does not translate it), in `format` ("text" or "html";
        a `file`'s: bounded as a document), with `search` (or the direction's default search with the request's
        `settings`, see `search_for`; a 400 when out of range). `status`: the answer to a search the documents
        cannot take (html with n-best), whose message names the request's fields by `names` (nbest: alternatives)
        or as the fields themselves. `glossary`: the request's own terms, over the direction's --glossary
        (`terms_apply`).

        The texts are cut into sentences (an HTML text read first) and bounded (`check_work`); the sentences are
        queued as the request's work, then, with a glossary, the sentences that hold its terms (`place`), then the
        alignments that the inline markup of its HTML needs: the batcher takes them in slices, in turns with other
        requests, and drops what is left when the client leaves."""
        if source == target and target in self.codes:  # already in the target language: back as it is
            check_format(format)
            return [TextTranslation(t, [(t, UNCHANGED)], t) for t in texts]
        direction = self.direction(source, target)
        check_format(format)
        if search is None:
            search = self.search_for(settings or {}, 400, direction)
        try:
            check_search(cast(Any, format), search.nbest)
        except ConfigError as e:
            raise RequestError(render_refs(str(e), lambda name, off: names.get(name, name)), status) from None
        terms = self.terms_apply(direction, format, glossary, names, status)
        asked = search.nbest
        if asked > 1:  # token sequences that read the same ("Hund." and "Hund" + "."): search wider, keep the distinct
            wide = distinct_width(asked)
            search = dataclasses.replace(search, nbest=wide, beam=max(search.beam, wide))
        deadline = asyncio.get_running_loop().time() + self.cfg.timeout
        reading = functools.partial(plan, texts, source, self.split, cast(Any, format), target)
        small = format == "text" and sum(map(len, texts)) <= INLINE_CHARS
        work = reading() if small else await self.read(reading, deadline)
        self.check_work(work, format != "text" or file)
        done = await self.translate(request, work.sentences, Job(direction, search), deadline)
        if terms:
            done = await self.place(request, done, direction, glossary, Job(direction, search, "terms"), deadline,
                                    small, status)
        pieces = work.assemble(done, search.nbest)
        aligned = work.aligned(pieces)
        pairs = await self.translate(request, [pieces[i] for i in aligned], Job(direction, search, "alignments"),
                                     deadline)
        finishing = functools.partial(work.finish, pieces, dict(zip(aligned, pairs)))
        # a page is written back in the reader thread too: off the event loop, one at a time
        out = finishing() if format == "text" else await asyncio.get_running_loop().run_in_executor(self.reader,
                                                                                                   finishing)
        if asked > 1:
            out = [distinct(t, asked) for t in out]
        request.scope[LINES_KEY] = request.scope.get(LINES_KEY, 0) + sum(len(lines_of(t)) for t in texts)
        return out

    def terms_apply(self, direction: Direction, format: str, glossary: Optional[Glossary], names: Mapping[str, str],
                    status: int) -> bool:
        """Whether a glossary's terms are placed in a request's translations: with its own `glossary` (`status` with
        format html, as the documents refuse it, or where an ensemble serves the direction: terms are placed through
        one model's attention), or the direction's --glossary, in plain text (a page is translated without it)."""
        if glossary is None:
            return format == "text" and direction in self.glossaries
        try:
            check_glossary(cast(Any, format))
        except ConfigError as e:
            raise RequestError(render_refs(str(e), lambda name, off: names.get(name, name)), status) from None
        if direction in self.ensembles:
            raise RequestError(f"glossary: {arrows([direction])} is served by an ensemble of checkpoints, and terms "
                               "are placed through one model's attention; send no glossary", status)
        return True

    async def place(self, request: Any, done: list[Translation], direction: Direction, given: Optional[Glossary],
                    job: Job, deadline: float, small: bool, status: int = 422) -> list[Translation]:
        """`done`, the translations of a request's sentences, with the terms of the direction's --glossary and the
        request's own (`given`, winning where both have a source term: `Glossary.merged`): the sentences whose source
        holds a term are found (off the event loop, unless the request is `small` and nothing is merged) and queued for
        the worker, by --glossary-method: placed through the alignment of their translation
        (`nmt.documents.terms.place_terms`); searched again, constrained to their terms (`searched_terms`); or placed,
        and searched again where some term could not be (auto; a request that samples: placed only). The terms are
        counted in the request's scope (TERMS_KEY)."""
        counts = request.scope.setdefault(TERMS_KEY, Placed())
        base = self.glossaries.get(direction)
        method = self.glossary_method
        if job.search.sampling and method != "place":
            if method == "constrain":
                raise RequestError("glossary with sampling: this server's terms are written by a constrained beam "
                                   "search (--glossary-method constrain); leave sampling out", status)
            method = "place"

        def holding() -> tuple[Glossary, list[int]]:
            glossary = given if base is None else base if given is None else base.merged(given)
            assert glossary is not None  # (terms_apply: one of them)
            return glossary, [i for i, t in enumerate(done) if t.hypotheses and glossary.matches(t.source)]

        inline = small and (base is None or given is None)
        glossary, at = holding() if inline else await self.read(holding, deadline)
        results: dict[int, tuple[Translation, Placed]] = {}
        if method != "constrain":
            results.update(zip(at, await self.translate(request, [(done[i], glossary) for i in at], job, deadline)))
        redo = at if method == "constrain" else [i for i in at if results[i][1].unplaced] if method == "auto" else []
        if redo:
            searched = Job(direction, job.search, "searched")
            results.update(zip(redo, await self.translate(request, [(done[i].source, glossary) for i in redo],
                                                          searched, deadline)))
        out = list(done)
        for i, (translation, n) in results.items():
            out[i] = translation
            counts.found += n.found
            counts.placed += n.placed
        return out

    async def read(self, reading: Callable[[], R], deadline: float) -> R:
        """`reading()` (a page or a long text cut into sentences, a glossary's terms found) in the reader thread: not
        on the event loop, which serves every other client, and one at a time, as the engine translates, so that many
        large pages sent at once take one core's turn, not a thread each; 504 when it has not begun and ended by
        `deadline`."""
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(loop.run_in_executor(self.reader, reading), deadline - loop.time())
        except asyncio.TimeoutError:  # (one not begun is dropped from the reader's queue)
            raise RequestError(as_flags(f"not translated within {self.cfg.timeout:g}s ({ref('timeout')}); retry "
                                        "later"), 504) from None

    async def translate(self, request: Any, items: list[Any], job: Job, deadline: float) -> list[Any]:
        """The results of `items` (sentences or alignments: `Job`), in order, from the batcher. A request whose
        client leaves, or that is not done by `deadline` (the event loop's time: --timeout after it came), is
        taken back from the queue: none of its items is done after the batch in progress (the batcher takes a
        request in slices)."""
        if not items:
            return []
        pending = self.batcher.submit(items, job)
        gone = asyncio.ensure_future(disconnected(request.receive))
        try:
            await asyncio.wait((pending.future, gone), timeout=max(0.0, deadline - asyncio.get_running_loop().time()),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if pending.future.done():
            return pending.future.result()  # or this request's own failure, raised
        self.batcher.withdraw(pending)
        if gone.done() and not gone.cancelled():
            raise ClientGone("client closed the request")
        raise RequestError(as_flags(f"not translated within {self.cfg.timeout:g}s ({ref('timeout')}); retry later"),
                           504)


def distinct_width(n: int) -> int:
    """The beam and n-best that an n-best request of `n` searches with, for `n` distinct texts."""
    return min(MAX_BEAM, DISTINCT_WIDTH * n)


def distinct(t: TextTranslation, n: int) -> TextTranslation:
    """`t` with its first `n` hypotheses of distinct texts (best first): fewer where the search found no more."""
    first: dict[str, Any] = {}
    for text, h in t.hypotheses:
        first.setdefault(text, (text, h))
    hypotheses = list(first.values())[:n]
    return dataclasses.replace(t, hypotheses=hypotheses)


def fewer_note(done: Sequence[TextTranslation], n: int) -> Optional[str]:
    """What an answer says where some texts have fewer than `n` distinct translations (None where none has)."""
    kept = [bool(t.hypotheses) and t.hypotheses[0][1] is UNCHANGED for t in done]  # given back as it was: no search
    short = [i for i, t in enumerate(done) if len(t.hypotheses) < n and t.source.strip() and not kept[i]]
    notes = [f"{sum(kept)} of {len(done)} text(s) came back as they were (already in the target language): one "
             f"translation each, not {n}"] if n > 1 and any(kept) else []
    if short:
        notes.append(f"{len(short)} of {len(done)} text(s) have fewer than {n} distinct translations (text(s) "
                     f"{', '.join(map(str, short[:SHOWN_SOURCES]))}{', ...' if len(short) > SHOWN_SOURCES else ''}): "
                     f"a search {distinct_width(n)} wide found no more")
    return "; ".join(notes) or None


def check_unicode(text: str, what: str) -> None:
    """A 400 for a text holding a lone surrogate ("\\ud800" in JSON is no character)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise RequestError(f"{what}: character {e.start} is a lone surrogate ({text[e.start]!a}), not text; "
                               "send valid Unicode", 400) from None


async def disconnected(receive: Any) -> None:
    """Return when the client has gone (the body was read already, so the next message is the disconnect)."""
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    except Exception:  # nothing more to read: the same for us as a client gone
        pass


def lines_of(text: str) -> list[str]:
    """A text's lines (\\n, \\r\\n or \\r), the empty ones kept (they come back empty, and the line breaks come
    back where they were), as a file's lines are counted: a line break at the end of the text ends its last line
    rather than starting one more (a file of 256 lines, each ending in a newline, is 256 lines)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return lines[:-1] if len(lines) > 1 and lines[-1] == "" else lines


def check_files(cfg: ServeConfig) -> Optional[frozenset[str]]:
    """The keys of the --api-keys file (None without one), read once: the server is given these, since a
    pipe (`--api-keys <(...)`) can be read only once. InputError/OutputError naming the option unless that
    file holds keys and the --access-log file can be written (before the server starts, not at its first
    request)."""
    keys = read_api_keys(cfg.api_keys) if cfg.api_keys is not None else None
    if cfg.access_log is not None and str(cfg.access_log) != "-":
        if codec_of_name(str(cfg.access_log), ref("access_log")) is not None:  # (other suffixes: its own error)
            raise ConfigError(f"{ref('access_log')} {cfg.access_log}: the log is appended to line by line, as plain "
                              "text; name it without the compression suffix (compress it when it is rotated)")
        check_output_file(cfg.access_log, ref("access_log"))
    return keys


def read_api_keys(path: Path) -> frozenset[str]:
    """The keys of an --api-keys file: one per line; blank lines and lines starting with # are skipped. Read
    bounded, as every small text file is (`/dev/zero` is an error naming the file, not all the memory)."""
    text = read_small_text(path, f"{ref('api_keys')} {path}", "write one key per line", limit=SMALL_TEXT_LIMIT)
    keys = frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    if not keys:
        raise ConfigError(f"{ref('api_keys')} {path}: holds no key; write one key per line (or leave {ref('api_keys')} "
                          "out)")
    return keys
