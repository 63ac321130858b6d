"""The browser's side of the server: CORS (--cors-origins, on every answer, errors included) and the page at GET /
to try the server in a browser (page.html: inline script and style, no request outside the server)."""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from importlib import resources
from typing import TYPE_CHECKING, Any, Callable

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware.cors import CORSMiddleware

from nmt.config import ServeConfig
from nmt.config.flags import as_flags
from nmt.core.errors import ref
from nmt.serve.http_errors import error_response, shown

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import ASGIApp, Message, Send

router = APIRouter(tags=["page"])

CORS_METHODS = ("GET", "POST")
CORS_HEADERS = ("Authorization", "Content-Type")  # LibreTranslate's Access-Control-Allow-Headers
CORS_EXPOSED = ("Retry-After", "Content-Disposition")  # what a page may read of an answer, beyond the basics
REFUSED_SAID = 100  # refused origins said in the log at most (a client can make up any number of them)
CORS_MAX_AGE = 20 * 86400  # LibreTranslate's Access-Control-Max-Age (browsers cap it lower)


# -- CORS -------------------------------------------------------------------------------------------


class Cors(CORSMiddleware):
    """Starlette's CORS middleware, but a preflight it refuses is a JSON error, an origin it does not allow gets
    no CORS header at all (Starlette would still send Access-Control-Expose-Headers), and is told to `on_refused`
    once (the browser alone shows the page's failure: the server's log is where its operator looks)."""

    def __init__(self, app: ASGIApp, on_refused: Callable[[str], None] = lambda line: None, **options: Any):
        super().__init__(app, **options)
        self.on_refused = on_refused
        self.refused: set[str] = set()

    def refuse(self, origin: str) -> None:
        """Say once per origin (of the first REFUSED_SAID) that it was refused, and why."""
        if origin in self.refused or len(self.refused) >= REFUSED_SAID:
            return
        self.refused.add(origin)
        allowed = ", ".join(self.allow_origins)
        self.on_refused(as_flags(
            f"CORS: refused the origin {shown(origin)}: not one of {ref('cors_origins')} {allowed} (a page's origin is "
            "its scheme, host and port as its address bar has them: http://localhost:8080 and http://127.0.0.1:8080 "
            "are two origins); its pages cannot read this server's answers"))

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code == 200:
            return response
        what = bytes(response.body).decode()  # "Disallowed CORS origin, method"
        if not self.is_allowed_origin(request_headers["origin"]):
            self.refuse(request_headers["origin"])
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
            self.refuse(origin)
            message.setdefault("headers", [])
            MutableHeaders(scope=message).add_vary_header("Origin")
            await send(message)
            return
        await super().send(message, send, request_headers)


def cors(cfg: ServeConfig, on_refused: Callable[[str], None] = lambda line: None) -> Callable[[ASGIApp], ASGIApp]:
    """The CORS layer of --cors-origins, for the Gate to wrap around the application."""
    return functools.partial(Cors, on_refused=on_refused, allow_origins=cfg.origins, allow_methods=CORS_METHODS,
                             allow_headers=CORS_HEADERS,
                             expose_headers=CORS_EXPOSED, max_age=CORS_MAX_AGE)


def install(app: FastAPI, cfg: ServeConfig, log: Callable[[str], None] = lambda line: None
            ) -> Callable[[ASGIApp], ASGIApp]:
    """Add the page to `app`; the CORS layer (an origin it refuses said on `log`), for the Gate to wrap around the
    application."""
    app.include_router(router)
    return cors(cfg, log)


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
