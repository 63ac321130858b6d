"""The browser side of the server: CORS (--cors-origins, on every answer, errors included), the page at GET /
to try the server in a browser (page.html: inline script and style, no request outside the server), and
LibreTranslate's file routes, POST /translate_file (.txt and .html) and GET /download_file/{name}, whose
translated files are kept in memory, bounded in number, bytes and lifetime."""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import os
import re
import time
import uuid
from collections import OrderedDict
from importlib import resources
from typing import TYPE_CHECKING, Any, Callable, Optional
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import Headers, MutableHeaders, UploadFile
from starlette.middleware.cors import CORSMiddleware

from nmt.config import ServeConfig
from nmt.config.flags import as_flags
from nmt.core.errors import ref
from nmt.serve.http_errors import RequestError, TooLarge, error_response, shown
from nmt.serve.schemas import ERRORS
from nmt.serve.service import Service

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import ASGIApp, Message, Send

router = APIRouter(tags=["LibreTranslate"])

# The file formats /translate_file takes: extension -> (the format translate_texts is given, the answer's type).
FILE_FORMATS = {".txt": ("text", "text/plain; charset=utf-8"), ".html": ("html", "text/html; charset=utf-8")}
SUPPORTED_FILES = list(FILE_FORMATS)  # /frontend/settings' supportedFilesFormat
MAX_NAME_BYTES = 255  # of an uploaded file's name (a file system's NAME_MAX)
CORS_METHODS = ("GET", "POST")
CORS_HEADERS = ("Authorization", "Content-Type")  # LibreTranslate's Access-Control-Allow-Headers
CORS_EXPOSED = ("Retry-After", "Content-Disposition")  # what a page may read of an answer, beyond the basics
CORS_MAX_AGE = 20 * 86400  # LibreTranslate's Access-Control-Max-Age (browsers cap it lower)


# -- CORS -------------------------------------------------------------------------------------------


class Cors(CORSMiddleware):
    """Starlette's CORS middleware, but a preflight it refuses is a JSON error, and an origin it does not
    allow gets no CORS header at all (Starlette would still send Access-Control-Expose-Headers)."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code == 200:
            return response
        what = bytes(response.body).decode()  # "Disallowed CORS origin, method"
        asked = request_headers["access-control-request-method"]
        if "access-control-request-headers" in request_headers:
            asked += " with " + request_headers["access-control-request-headers"]
        return error_response(400, as_flags(
            f"{what}: {shown(request_headers['origin'])} asked for {shown(asked)}; this server allows the origins of "
            f"{ref('cors_origins')}, the methods {', '.join(CORS_METHODS)} and the headers {', '.join(CORS_HEADERS)}"),
            {"Vary": "Origin"})

    async def send(self, message: Message, send: Send, request_headers: Headers) -> None:
        origin = request_headers.get("origin")
        if message["type"] == "http.response.start" and origin is not None and not self.is_allowed_origin(origin):
            message.setdefault("headers", [])
            MutableHeaders(scope=message).add_vary_header("Origin")
            await send(message)
            return
        await super().send(message, send, request_headers)


def cors(cfg: ServeConfig) -> Callable[[ASGIApp], ASGIApp]:
    """The CORS layer of --cors-origins, for the Gate to wrap around the application."""
    return functools.partial(Cors, allow_origins=cfg.origins, allow_methods=CORS_METHODS, allow_headers=CORS_HEADERS,
                             expose_headers=CORS_EXPOSED, max_age=CORS_MAX_AGE)


def install(app: FastAPI, cfg: ServeConfig) -> Callable[[ASGIApp], ASGIApp]:
    """Add the page and the file routes to `app`, with their store; the CORS layer for the Gate."""
    app.include_router(router)
    app.state.files = FileStore(cfg.max_files, cfg.max_files_bytes, cfg.files_ttl)
    return cors(cfg)


# -- the page ---------------------------------------------------------------------------------------


@functools.cache
def page() -> tuple[bytes, str]:
    """page.html and its Content-Security-Policy: its own inline script and style (by their hashes) and requests
    to this server only, so that nothing outside it is loaded or called."""
    html = resources.files("nmt.serve").joinpath("page.html").read_text(encoding="utf-8")

    def hashes(tag: str) -> str:
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"
                        for body in re.findall(rf"<{tag}>(.*?)</{tag}>", html, re.DOTALL))

    policy = (f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; connect-src 'self'; "
              "img-src 'self' data:; form-action 'none'; base-uri 'none'; frame-ancestors 'none'")
    return html.encode(), policy


@router.get("/", include_in_schema=False)
async def index() -> Response:
    """A page to try the server in a browser."""
    html, policy = page()
    return Response(html, media_type="text/html; charset=utf-8",
                    headers={"Content-Security-Policy": policy, "X-Content-Type-Options": "nosniff"})


# -- files ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StoredFile:
    name: str  # as uploaded: the name it is downloaded as
    data: bytes
    media_type: str
    expires: float  # on the store's clock


class FileStore:
    """Translated files kept for download, in memory, under a name no one can guess (<uuid>.<name>): at most
    `count` files and `size` bytes (the oldest go first to make room), each for `ttl` seconds."""

    def __init__(self, count: int, size: int, ttl: float, clock: Callable[[], float] = time.monotonic):
        self.count, self.size, self.ttl, self.clock = count, size, ttl, clock
        self.files: OrderedDict[str, StoredFile] = OrderedDict()  # oldest first (hence first to expire)
        self.bytes = 0

    def put(self, name: str, data: bytes, media_type: str) -> str:
        """Keep `data`; its download name. TooLarge when it alone is more than the store may hold."""
        if len(data) > self.size:
            raise TooLarge(as_flags(f"the translated file has {len(data):,} bytes; at most {self.size:,} are kept "
                                    f"({ref('max_files_bytes')})"))
        self.expire()
        while self.files and (len(self.files) >= self.count or self.bytes + len(data) > self.size):
            self.drop_oldest()
        key = f"{uuid.uuid4().hex}.{name}"
        self.files[key] = StoredFile(name, data, media_type, self.clock() + self.ttl)
        self.bytes += len(data)
        return key

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
              "target": {"type": "string", "example": "de"}, "api_key": {"type": "string"}}
    schema = {"type": "object", "properties": fields, "required": ["file", "source", "target"]}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}


@router.post("/translate_file", responses=ERRORS, openapi_extra=form_doc())
async def translate_file(request: Request) -> dict[str, str]:
    """LibreTranslate-compatible: a .txt or .html `file` (multipart), `source` (or auto), `target` (and `api_key`)
    -> `translatedFileUrl`, where the translation can be downloaded for --files-ttl seconds."""
    service: Service = request.app.state.service
    async with request.form(max_part_size=service.cfg.body_limit) as form:
        fields = {**request.query_params, **{k: v for k, v in form.items() if isinstance(v, str)}}
        service.check_key(fields.get("api_key"))
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise RequestError("Invalid request: missing file parameter", 400)
        for field in ("source", "target"):
            if not fields.get(field):
                raise RequestError(f"Invalid request: missing {field} parameter", 400)
        name = checked_name(upload.filename)
        text = file_text(await upload.read())
    fmt, media_type = FILE_FORMATS[os.path.splitext(name)[1].lower()]
    source = await source_of(service, text, fmt, fields["source"], fields["target"])
    done = await service.translate_texts(request, [text], source, fields["target"], format=fmt)
    key = request.app.state.files.put(name, done[0].text.encode("utf-8"), media_type)
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
