"""LibreTranslate's API, every route of it, so that its clients and web pages work unchanged: POST /translate (routed
by source and target among the directions served; source auto detects each text's language), POST /detect,
GET /languages, GET /frontend/settings, and the file routes, POST /translate_file (.txt and .html) and
GET /download_file/{name}, whose translated files are kept in memory (`FileStore`), bounded in number, bytes and
lifetime. Bodies are JSON or form fields (urlencoded or multipart), as LibreTranslate reads them; errors are
`{"error": "..."}` with LibreTranslate's statuses (400, 403). The request fields `scores` (each translation's
confidence), `detectEach` and `glossary` (terms for this request) are nmt's extensions (docs/commands/serve.md)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import math
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from starlette.datastructures import FormData, UploadFile

from nmt.config import ServeConfig
from nmt.config.flags import as_flags
from nmt.core.errors import ref
from nmt.documents.texts import TextTranslation
from nmt.serve.http_errors import NOT_JSON, Overloaded, RequestError, TooLarge, shown
from nmt.serve.schemas import (
    ERRORS,
    Detected,
    DetectRequest,
    FrontendSettings,
    Language,
    LibreRequest,
    LibreResponse,
    request_glossary,
)
from nmt.serve.service import TERMS_KEY, Service, check_format, fewer_note, translating
from nmt.text.glossary import Glossary
from nmt.text.languages import language_name

if TYPE_CHECKING:
    from fastapi import FastAPI

router = APIRouter(tags=["LibreTranslate"])
M = TypeVar("M", bound=BaseModel)
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
# The file formats /translate_file takes: extension -> (the format translate_texts is given, the answer's type).
FILE_FORMATS = {".txt": ("text", "text/plain; charset=utf-8"), ".html": ("html", "text/html; charset=utf-8")}
SUPPORTED_FILES = list(FILE_FORMATS)  # /frontend/settings' supportedFilesFormat
MAX_NAME_BYTES = 255  # of an uploaded file's name (a file system's NAME_MAX)
ALTERNATIVES = {"nbest": "alternatives"}  # how a LibreTranslate request asks for n-best (alternatives + 1)


def install(app: FastAPI, cfg: ServeConfig) -> None:
    """Add LibreTranslate's routes to `app`, with the store of the translated files."""
    app.include_router(router)
    app.state.files = FileStore(cfg.max_files, cfg.max_files_bytes, cfg.files_ttl)


def body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI request body of an endpoint that reads JSON and forms alike."""
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {t: {"schema": schema} for t in ("application/json", *FORMS)}}}


async def fields(request: Request, service: Service) -> dict[str, Any]:
    """The request's fields: a JSON object or form fields (urlencoded or multipart), over the query string's."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    # `curl -d '{...}'` sends JSON labelled as a form: a form's first field name never starts with {
    if media == "application/json" or media.endswith("+json") or (media not in FORMS[1:] and body.lstrip()[:1] == b"{"):
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):  # UnicodeDecodeError included; RecursionError: [[[[... nested deep
            raise RequestError(NOT_JSON, 400) from None
        if not isinstance(data, dict):
            raise RequestError("Invalid JSON format: send an object such as {\"q\": \"...\", \"target\": \"de\"}", 400)
        return {**request.query_params, **data}
    if media in FORMS:
        async with form_of(request, service) as form:
            return {**request.query_params, **{k: v for k, v in form.items() if isinstance(v, str)}}
    if body:
        raise RequestError(f"send JSON or form fields, not {media or 'a body without Content-Type'}", 415)
    return dict(request.query_params)


@contextlib.asynccontextmanager
async def form_of(request: Request, service: Service) -> AsyncIterator[FormData]:
    """The request's form fields, closed at the end: its files (starlette spools a part of over 1 MB to an unnamed
    file of the temporary folder) are gone then. A disk that cannot take them is a 507 (full) or a 503 in one line,
    never a 500, and nothing of the upload is left behind."""
    try:
        async with request.form(max_part_size=service.cfg.body_limit) as form:
            yield form
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise RequestError("Insufficient storage: the server's temporary folder is full, the upload could not "
                               "be kept while it is read; retry later", 507) from None
        raise RequestError(f"the upload could not be kept while it is read ({e.strerror or e}); retry later", 503,
                           {"Retry-After": "10"}) from None


def parse(model: type[M], data: dict[str, Any]) -> M:
    """`data` as `model`; 400 naming the first field at fault, in LibreTranslate's words where it has some."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        name = ".".join(str(p) for p in err.get("loc", ())) or "body"
        if err.get("type") == "missing":
            raise RequestError(f"Invalid request: missing {name} parameter", 400) from None
        raise RequestError(f"Invalid request: {name}: {err.get('msg')}", 400) from None


@router.post("/translate", response_model=LibreResponse, response_model_exclude_none=True, responses=ERRORS,
             openapi_extra=body_doc(LibreRequest))
@translating
async def translate(request: Request) -> dict[str, Any]:
    """LibreTranslate-compatible: `q`, `source` (or auto), `target`, `format` (text, html), `alternatives`,
    `api_key` -> `translatedText`; nmt's `scores: true` adds each translation's confidence, its `glossary` (an
    object, or in a form its JSON) terms to use."""
    service: Service = request.app.state.service
    req = parse(LibreRequest, await fields(request, service))
    service.check_key(req.api_key)
    if not req.q:
        raise RequestError("Invalid request: missing q parameter", 400)
    fmt = req.format or "text"
    check_format(fmt)
    if req.alternatives > service.widest - 1:  # in LibreTranslate's words
        raise RequestError(as_flags(f"Invalid request: alternatives parameter must be <= {service.widest - 1} "
                                    f"({ref('max_beam')} {service.widest})"), 400)
    texts = service.texts(req.q, fmt)
    glossary = request_glossary(req.glossary, 400)
    settings = {"nbest": req.alternatives + 1}
    if req.source == "auto":
        detected: list[dict[str, Any]] = [{"confidence": round(d.confidence, 2), "language": d.language}
                                          for d in await service.detect_sources(texts, req.target, fmt, req.detectEach)]
    else:
        if req.source != req.target or req.target not in service.codes:  # (one language: the text as it is)
            service.direction(req.source, req.target)
        detected = [{"confidence": 100.0, "language": req.source}] * len(texts)
    done = await translate_grouped(service, request, texts, [d["language"] for d in detected], req.target, fmt,
                                   settings, glossary)
    single = isinstance(req.q, str)
    out: dict[str, Any] = {"translatedText": done[0].text if single else [t.text for t in done]}
    if req.source == "auto":
        out["detectedLanguage"] = detected[0] if single else detected
    if req.alternatives > 0:
        alternatives = [[text for text, _ in t.hypotheses[1:]] for t in done]  # (distinct: Service.translate_texts)
        out["alternatives"] = alternatives[0] if single else alternatives
        if note := fewer_note(done, req.alternatives + 1):
            out["note"] = note
    if req.scores:
        scores = [round(t.score, 4) for t in done]
        out["scores"] = scores[0] if single else scores
    if (terms := request.scope.get(TERMS_KEY)) is not None:
        out["terms"] = {"found": terms.found, "placed": terms.placed}
    unchanged = [d["language"] == req.target for d in detected]
    if any(unchanged):  # nmt's extension: which texts were in the target language already, and came back as they were
        out["untranslated"] = unchanged[0] if single else unchanged
    return out


async def translate_grouped(service: Service, request: Request, texts: list[str], sources: list[str], target: str,
                            fmt: str, settings: dict[str, Any], glossary: Optional[Glossary] = None
                            ) -> list[TextTranslation]:
    """Each text translated from its own source language (texts of one language in one request), in order; the
    request's `glossary` over each direction's."""
    groups: dict[str, list[int]] = {}
    for i, source in enumerate(sources):
        groups.setdefault(source, []).append(i)
    results = await asyncio.gather(*(
        service.translate_texts(request, [texts[i] for i in at], source, target, format=fmt, names=ALTERNATIVES,
                                search=service.search_for(settings, 400, (source, target)), glossary=glossary)
        for source, at in groups.items()))
    done: list[Any] = [None] * len(texts)
    for at, result in zip(groups.values(), results):
        for i, t in zip(at, result):
            done[i] = t
    return done


@router.post("/detect", response_model=list[Detected], responses=ERRORS, openapi_extra=body_doc(DetectRequest))
async def detect(request: Request) -> list[dict[str, Any]]:
    """LibreTranslate-compatible language detection among the served source languages: every candidate, most
    likely first ([{"confidence": 0, "language": the first}] for a text without letters, as LibreTranslate
    falls back)."""
    service: Service = request.app.state.service
    req = parse(DetectRequest, await fields(request, service))
    service.check_key(req.api_key)
    if not req.q:
        raise RequestError("Invalid request: missing q parameter", 400)
    text = "\n".join(service.texts(req.q))  # (its limits, and no lone surrogate for the detector)
    found = await asyncio.get_running_loop().run_in_executor(None, service.detect, text)
    if not found:
        return [{"confidence": 0.0, "language": service.sources[0]}]
    return [{"confidence": round(d.confidence, 2), "language": d.language} for d in found]


@router.get("/languages", response_model=list[Language])
async def languages(request: Request) -> list[dict[str, Any]]:
    """LibreTranslate's language list: every served language, its English name and its targets."""
    return request.app.state.service.languages()  # type: ignore[no-any-return]


@router.get("/frontend/settings", response_model=FrontendSettings)
async def frontend_settings(request: Request) -> dict[str, Any]:
    """What a LibreTranslate web page reads first: limits, whether a key is needed, the default languages (the
    first direction's)."""
    service: Service = request.app.state.service
    src, tgt = service.info.direction
    return {"charLimit": service.cfg.max_chars, "frontendTimeout": 500, "apiKeys": service.keys is not None,
            "keyRequired": service.keys is not None, "suggestions": False, "filesTranslation": True,
            "supportedFilesFormat": list(SUPPORTED_FILES),
            "language": {"source": {"code": src, "name": language_name(src)},
                         "target": {"code": tgt, "name": language_name(tgt)}}}


# -- files ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StoredFile:
    name: str  # as uploaded: the name it is downloaded as
    data: bytes
    media_type: str
    expires: float  # on the store's clock


class FileStore:
    """Translated files kept for download, in memory, under a name no one can guess (<uuid>.<name>): at most
    `count` files and `size` bytes, each for `ttl` seconds. A file is never dropped before its time: the link a
    client was given works for `ttl` seconds. A full store refuses new files (Overloaded: 503 with Retry-After, the
    seconds until the oldest goes); a translation counts against `count` from its upload on (`slot`), so that the
    files being translated cannot outnumber the places left."""

    def __init__(self, count: int, size: int, ttl: float, clock: Callable[[], float] = time.monotonic):
        self.count, self.size, self.ttl, self.clock = count, size, ttl, clock
        self.files: OrderedDict[str, StoredFile] = OrderedDict()  # oldest first (hence first to expire)
        self.bytes = 0
        self.pending = 0  # files being translated, each with a place kept

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """A place for the file of one upload, kept while it is translated (Overloaded when there is none)."""
        self.expire()
        if len(self.files) + self.pending >= self.count:
            raise self.full(f"{len(self.files) + self.pending:,} files (at most {self.count:,}: "
                            f"{ref('max_files')})")
        self.pending += 1
        try:
            yield
        finally:
            self.pending -= 1

    def put(self, name: str, data: bytes, media_type: str) -> str:
        """Keep `data` (in a `slot`); its download name. TooLarge when it alone is more than the store may hold,
        Overloaded when the files kept leave no room for it."""
        if len(data) > self.size:
            raise TooLarge(as_flags(f"the translated file has {len(data):,} bytes; at most {self.size:,} are kept "
                                    f"({ref('max_files_bytes')})"))
        self.expire()
        if self.bytes + len(data) > self.size:
            raise self.full(f"{self.bytes:,} bytes of translated files, no room for {len(data):,} more (at most "
                            f"{self.size:,}: {ref('max_files_bytes')})")
        key = f"{uuid.uuid4().hex}.{name}"
        self.files[key] = StoredFile(name, data, media_type, self.clock() + self.ttl)
        self.bytes += len(data)
        return key

    def full(self, holds: str) -> Overloaded:
        """The answer of a full store: when to come back, the oldest file's going."""
        wait = max(1, math.ceil(next(iter(self.files.values())).expires - self.clock())) if self.files else 1
        message = (f"the store of translated files holds {holds}, each kept {self.ttl:g}s for its download "
                   f"({ref('files_ttl')}); retry in {wait} s")
        return Overloaded(as_flags(message), headers={"Retry-After": str(wait)})

    def get(self, key: str) -> Optional[StoredFile]:
        self.expire()
        return self.files.get(key)

    def expire(self) -> None:
        now = self.clock()
        while self.files and next(iter(self.files.values())).expires <= now:
            self.drop_oldest()

    def drop_oldest(self) -> None:
        _, stored = self.files.popitem(last=False)
        self.bytes -= len(stored.data)


def checked_name(name: Optional[str]) -> str:
    """An uploaded file's name, as LibreTranslate checks it; 400 for one that is a path or holds a control
    character (it is sent back in a URL and a Content-Disposition header)."""
    if not name:
        raise RequestError("Invalid request: empty file", 400)
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise RequestError(f"Invalid request: invalid file name {shown(name)}: more than {MAX_NAME_BYTES} bytes", 400)
    if "/" in name or "\\" in name or name.strip(".") == "" or not name.isprintable():
        raise RequestError(f"Invalid request: invalid file name {shown(name)}: give a file's own name, without a "
                           "folder or control characters", 400)
    if os.path.splitext(name)[1].lower() not in FILE_FORMATS:
        raise RequestError(f"Invalid request: file format not supported ({shown(name)}); send "
                           f"{' or '.join(FILE_FORMATS)}", 400)
    return name


def file_text(data: bytes) -> str:
    """An uploaded file's text: UTF-8 (a byte order mark dropped); 400 when empty or not UTF-8."""
    if not data:
        raise RequestError("Invalid request: empty file", 400)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise RequestError(f"Invalid request: the file is not UTF-8 text (byte {e.start:,} cannot be read); save it "
                           "as UTF-8", 400) from None


async def source_of(service: Service, text: str, fmt: str, source: str, target: str) -> str:
    """`source`, or for auto the language detected (`Service.detect_sources`)."""
    if source != "auto":
        return source
    return (await service.detect_sources([text], target, fmt))[0].language


def form_doc() -> dict[str, Any]:
    """The OpenAPI request body of /translate_file: LibreTranslate's multipart fields."""
    fields = {"file": {"type": "string", "format": "binary"}, "source": {"type": "string", "example": "en"},
              "target": {"type": "string", "example": "de"}, "api_key": {"type": "string"},
              "glossary": {"type": "string", "description": "nmt's extension: terms for this file, a JSON object "
                                                            '{"source term": "target term"} (.txt files only)'}}
    schema = {"type": "object", "properties": fields, "required": ["file", "source", "target"]}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}


@router.post("/translate_file", responses=ERRORS, openapi_extra=form_doc())
@translating
async def translate_file(request: Request) -> dict[str, str]:
    """LibreTranslate-compatible: a .txt or .html `file` (multipart), `source` (or auto), `target` (and `api_key`)
    -> `translatedFileUrl`, where the translation can be downloaded for --files-ttl seconds. nmt's extension: a
    `glossary` field (a JSON object of terms, as /translate's; .txt files only)."""
    service: Service = request.app.state.service
    async with form_of(request, service) as form:
        fields = {**request.query_params, **{k: v for k, v in form.items() if isinstance(v, str)}}
        service.check_key(fields.get("api_key"))
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise RequestError("Invalid request: missing file parameter", 400)
        for field in ("source", "target"):
            if not fields.get(field):
                raise RequestError(f"Invalid request: missing {field} parameter", 400)
        name = checked_name(upload.filename)
        glossary = request_glossary(fields.get("glossary"), 400)
        text = file_text(await upload.read())
    fmt, media_type = FILE_FORMATS[os.path.splitext(name)[1].lower()]
    store: FileStore = request.app.state.files
    with store.slot():  # a full store refuses now, not after translating (never a link to a file dropped early)
        texts = service.texts(text, fmt, file=True)
        source = await source_of(service, text, fmt, fields["source"], fields["target"])
        done = await service.translate_texts(request, texts, source, fields["target"], format=fmt, file=True,
                                             glossary=glossary)
        key = store.put(name, done[0].text.encode("utf-8"), media_type)
    return {"translatedFileUrl": f"{request.base_url}download_file/{quote(key)}"}


@router.get("/download_file/{name}", response_class=Response, responses={404: ERRORS[400]})
async def download_file(name: str, request: Request) -> Response:
    """A file /translate_file translated, as an attachment under its own name; 404 once it is gone."""
    stored = request.app.state.files.get(name)
    if stored is None:
        raise RequestError(as_flags(f"no translated file {shown(name)}: it was never made here, or has gone (kept "
                                    f"{ref('files_ttl')} seconds, {ref('max_files')} files at most)"), 404)
    ascii_name = stored.name.encode("ascii", "replace").decode().replace('"', "_").replace("?", "_")
    disposition = f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(stored.name)}"
    # sandboxed and never sniffed: an uploaded page is downloaded, not run as one of this server's
    return Response(stored.data, media_type=stored.media_type,
                    headers={"Content-Disposition": disposition, "Content-Security-Policy": "sandbox",
                             "X-Content-Type-Options": "nosniff"})
