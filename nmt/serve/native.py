"""nmt's own API (beside LibreTranslate's, `nmt.serve.libre`): POST /v1/translate, GET /health, GET /metrics."""

from __future__ import annotations

import json
from typing import Any, Optional, cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nmt.documents.texts import TextTranslation
from nmt.serve.backend import Direction
from nmt.serve.http_errors import RequestError, error_response, on_http_exception, on_unexpected, shown
from nmt.serve.middleware import CONTENT_TYPE
from nmt.serve.schemas import ERRORS, Health, TranslateRequest, TranslateResponse, request_glossary, settings_of
from nmt.serve.service import TERMS_KEY, Service, fewer_note, translating

router = APIRouter(tags=["nmt"])


def service_of(request: Request) -> Service:
    return cast(Service, request.app.state.service)  # set by create_app; starlette's State is untyped


@router.post("/v1/translate", response_model=TranslateResponse, responses=ERRORS)
@translating
async def translate(body: TranslateRequest, request: Request) -> dict[str, Any]:
    """Translate a text or a list of texts; optional `source` and `target` (needed when the server translates
    several directions), `format` (text, html), `scores`, per-request `beam` and `nbest`, a `glossary`."""
    service = service_of(request)
    # (the query string is parsed only where there is one: parsing an empty one was ~5% of a request's time)
    service.check_key(body.api_key or (request.query_params.get("api_key") if request.scope["query_string"] else None))
    texts = service.texts(body.text, body.format)
    glossary = request_glossary(body.glossary, 422)
    if body.source is not None and body.source == body.target and body.target in service.codes:
        done = await service.translate_texts(request, texts, body.source, body.target, format=body.format)
        nbest = settings_of(body).get("nbest") or 1
        return {"translations": rows(done, body.scores, nbest), "model": None, "untranslated": True,
                "note": fewer_note(done, nbest)}  # already in the target language: back as they were, no model asked
    src, tgt = direction_of(service, body.source, body.target)
    search = service.search_for(settings_of(body), direction=(src, tgt))
    done = await service.translate_texts(request, texts, src, tgt, format=body.format, search=search, status=422,
                                         glossary=glossary)
    out = {"translations": rows(done, body.scores, search.nbest),
           "model": service.shown_models[src, tgt]}
    if (terms := request.scope.get(TERMS_KEY)) is not None:
        out["terms"] = {"found": terms.found, "placed": terms.placed}
    if search.nbest > 1 and (note := fewer_note(done, search.nbest)):
        out["note"] = note
    return out


def rows(done: list[TextTranslation], scores: bool, nbest: int) -> list[Any]:
    """The answer's translations: each text's, or with `scores` its text and score, or with n-best a list of them."""
    if nbest > 1:
        return [[{"text": text, "score": round(h.score, 4)} for text, h in t.hypotheses] for t in done]
    if scores:
        return [{"text": t.text, "score": round(t.score, 4)} for t in done]
    return [t.text for t in done]


def direction_of(service: Service, source: Optional[str], target: Optional[str]) -> Direction:
    """The direction a request asks for: the one served that matches the `source` and `target` it gives (either
    may be left out where only one direction matches); 422 naming the directions served otherwise."""
    matches = [d for d in service.directions if source in (None, d[0]) and target in (None, d[1])]
    if len(matches) == 1:
        return matches[0]
    served = service.served(" -> ")
    if not matches:
        asked = f"{shown(source or '?')} -> {shown(target or '?')}"
        raise RequestError(f"this server does not translate {asked}; it translates {served}", 422)
    raise RequestError(f"give source and target: this server translates {served}", 422)


@router.get("/health", response_model=Health, responses={503: ERRORS[503]})
async def health(request: Request) -> Response:
    """200 once every model is loaded and warmed up: {"status": "ok", ...} as LibreTranslate answers."""
    service = service_of(request)
    if not service.ready:
        return error_response(503, "starting: the model is loading")
    models = list(service.shown_models.values())
    return JSONResponse({"status": "ok", "model": models[0], "models": models,
                         "queued_lines": service.batcher.queued_lines})


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus metrics."""
    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE)


class Direct:
    """POST /v1/translate answered without FastAPI's layers (its exception middlewares, routing, dependency solving
    and response checks: a fifth of a one-sentence request's time on the event loop) where the request is the
    common one: a JSON body that `TranslateRequest` takes. The endpoint and the answer's model are FastAPI's own,
    so the answer is the same; any other request (another route, another content type, a body that does not
    parse or validate) goes to `app` as it came, its body replayed, so that its errors are FastAPI's."""

    PATH = "/v1/translate"

    def __init__(self, app: ASGIApp):
        self.app = app  # the FastAPI application

    @property
    def state(self) -> Any:
        """The application's state (the service, the metrics), as the gate's holders look for it."""
        return cast(Any, self.app).state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.PATH or not is_json(scope):
            await self.app(scope, receive, send)
            return
        scope["app"] = self.app  # (what FastAPI would set: the endpoint finds the service there)
        request = Request(scope, receive)
        try:
            body = await request.body()
        except HTTPException as e:  # too large or too slow (the gate's receive): answered as FastAPI would
            await (await on_http_exception(request, e))(scope, receive, send)
            return
        try:
            parsed = TranslateRequest.model_validate(json.loads(body))
        except Exception:  # not JSON, too deep, not valid: FastAPI's own answer, from the body again
            await self.app(scope, replay(body, receive), send)
            return
        response: Response
        try:
            answer = TranslateResponse.model_validate(await translate(parsed, request))
        except RequestError as e:
            response = error_response(e.status, e.message, e.headers)
        except Exception as e:  # as FastAPI's handler of the unexpected: answered, then raised for the gate to log
            await (await on_unexpected(request, e))(scope, receive, send)
            raise
        else:
            response = Response(answer.model_dump_json().encode(), media_type="application/json")
        await response(scope, receive, send)


def is_json(scope: Scope) -> bool:
    """Whether the request says its body is JSON (application/json, perhaps with parameters)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return bool(value.split(b";", 1)[0].strip().lower() == b"application/json")
    return False


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives `body` whole first, then what `receive` gives (a disconnect)."""
    given = False

    async def again() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again
