"""What every translating endpoint does: check the key, the texts, the format and the search settings (each rule in
one place), find the direction's model (or detect the source language), queue the texts, and wait for their
translations (or the client's departure, or the timeout); the mark a translating route bears (`translating`); the
server's files (API keys, access log), checked before it starts."""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Optional, TypeVar, Union, cast

from nmt.config import SearchConfig, ServeConfig, check_field
from nmt.config.flags import as_fields, as_flags
from nmt.core.compression import SMALL_TEXT_LIMIT, codec_of_name, read_small_text
from nmt.core.errors import ConfigError, ref, render_refs
from nmt.core.files import check_output_file
from nmt.documents.texts import FORMATS, TextTranslation, check_search
from nmt.engines.base import Translation
from nmt.serve.backend import Direction, Job, ModelInfo
from nmt.serve.batcher import Batcher
from nmt.serve.http_errors import ClientGone, RequestError, TooLarge, shown
from nmt.text.languages import Detection, Detector, language_name
from nmt.text.markup import texts_of

LINES_KEY = "nmt.lines"  # the ASGI scope entry where an endpoint notes how many lines it translated
SHORT = 40  # characters: a text of a list up to this long takes the language detected in the whole list, as in
# LibreTranslate (too short to tell alone)
SHOWN_SOURCES = 12  # an error names the directions of this many source languages at most (a multilingual model's
# may be hundreds)
DetectorFactory = Callable[[Sequence[str]], Any]  # candidates -> an object with detect(text) -> list[Detection]
TRANSLATES = "nmt_translates"  # the attribute that marks a translating route's endpoint
F = TypeVar("F", bound=Callable[..., Any])


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
    no_detector: str = ""  # why the detector cannot be built (its package missing): said to requests that need it

    @property
    def info(self) -> ModelInfo:
        """The first direction's model."""
        return next(iter(self.directions.values()))

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
                self.detector_of(self.sources if tgt is None else self.sources_to(tgt))
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

    async def detect_sources(self, texts: list[str], target: str, format: str = "text") -> list[Detection]:
        """The source language of each text among those this server translates to `target`, as LibreTranslate
        decides it for source auto: a text of a list up to SHORT characters takes the language detected in the
        whole list; a text without evidence the first candidate, with confidence 0 (LibreTranslate falls back to
        English); html is read without its tags. A 400 naming what this server translates where none translates
        to `target`."""
        among = self.sources_to(target)
        if not among:
            self.direction(self.sources[0], target)
        words = [" ".join(texts_of(text)) for text in texts] if format == "html" else texts

        def detect_all() -> list[Detection]:
            overall = self.detect("\n".join(words), among) if len(words) > 1 else []
            found = [overall if len(words) > 1 and len(text) <= SHORT else self.detect(text, among) for text in words]
            return [candidates[0] if candidates else Detection(among[0], 0.0) for candidates in found]

        return await asyncio.get_running_loop().run_in_executor(None, detect_all)

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

    def texts(self, text: Union[str, list[str]]) -> list[str]:
        """The request's texts, checked against --max-lines (the lines of all of them) and --max-chars (each
        line). A text is translated whole: its lines and sentences come back in its own layout."""
        texts = [text] if isinstance(text, str) else list(text)
        if not texts:
            raise RequestError("no text to translate: give a string or a non-empty list of strings", 400)
        lines = [line for t in texts for line in split(t)]
        if len(lines) > self.cfg.max_lines:
            raise TooLarge(as_flags(f"{len(lines)} lines in one request; at most {self.cfg.max_lines} "
                                    f"({ref('max_lines')})"))
        for i, line in enumerate(lines):
            if len(line) > self.cfg.max_chars:
                raise TooLarge(as_flags(f"line {i} has {len(line)} characters; at most {self.cfg.max_chars} "
                                        f"({ref('max_chars')})"))
            if not line.isascii():
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError as e:  # a lone surrogate: "\ud800" in JSON is no character
                    raise RequestError(f"line {i}: character {e.start} is a lone surrogate ({line[e.start]!a}), "
                                       "not text; send valid Unicode", 400) from None
        return texts

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
        for name in ("beam", "nbest"):
            value = given.get(name)
            if isinstance(value, int) and value > self.widest:
                raise RequestError(as_flags(f"{name} {value}: this server searches at most {self.widest} wide per "
                                            f"request ({ref('max_beam')})"), status)
        default = self.searches.get(direction, self.search) if direction is not None else self.search
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
                              names: Mapping[str, str] = MappingProxyType({})) -> list[TextTranslation]:
        """One TextTranslation per text, of the direction `source` to `target` (a 400 in LibreTranslate's words
        when this server does not translate it), in `format` ("text" or "html"), with `search` (or the
        direction's default search with the request's `settings`, see `search_for`; a 400 when out of range).
        `status`: the answer to a search the documents cannot take (html with n-best), whose message names the
        request's fields by `names` (nbest: alternatives) or as the fields themselves."""
        direction = self.direction(source, target)
        check_format(format)
        texts = self.texts(texts)
        if search is None:
            search = self.search_for(settings or {}, 400, direction)
        try:
            check_search(cast(Any, format), search.nbest)
        except ConfigError as e:
            raise RequestError(render_refs(str(e), lambda name, off: names.get(name, name)), status) from None
        done = await self.translate(request, texts, Job(direction, search, cast(Any, format)))
        request.scope[LINES_KEY] = request.scope.get(LINES_KEY, 0) + sum(len(split(t)) for t in texts)
        return [t if isinstance(t, TextTranslation) else as_text(t) for t in done]

    async def translate(self, request: Any, texts: list[str], job: Job) -> list[Translation]:
        """The translations of `texts`, in order, from the batcher. A request whose client leaves, or that
        waits longer than --timeout, is taken back from the queue: none of its texts is translated after the batch
        in progress (the batcher translates a request in slices)."""
        pending = self.batcher.submit(texts, job)
        gone = asyncio.ensure_future(disconnected(request.receive))
        try:
            await asyncio.wait((pending.future, gone), timeout=self.cfg.timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if pending.future.done():
            return pending.future.result()  # or this request's own failure, raised
        self.batcher.withdraw(pending)
        if gone.done() and not gone.cancelled():
            raise ClientGone("client closed the request")
        raise RequestError(as_flags(f"not translated within {self.cfg.timeout:g}s ({ref('timeout')}); retry later"),
                           504)


def as_text(t: Translation) -> TextTranslation:
    """A sentence's Translation as a text's (a stand-in engine that gives Translations, in tests)."""
    return TextTranslation(t.text, t.hypotheses, t.source, [t])


async def disconnected(receive: Any) -> None:
    """Return when the client has gone (the body was read already, so the next message is the disconnect)."""
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    except Exception:  # nothing more to read: the same for us as a client gone
        pass


def split(text: str) -> list[str]:
    """A text's lines (\\n, \\r\\n or \\r), the empty ones kept: they come back empty, and the line breaks
    come back where they were."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


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
