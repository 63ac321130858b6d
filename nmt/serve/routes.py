"""The server's own endpoints: POST /v1/translate, GET /health, GET /metrics."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from nmt.serve.http_errors import error_response
from nmt.serve.middleware import CONTENT_TYPE
from nmt.serve.schemas import ERRORS, Health, TranslateRequest, TranslateResponse, settings_of
from nmt.serve.service import Service

router = APIRouter(tags=["nmt"])


def service_of(request: Request) -> Service:
    return cast(Service, request.app.state.service)  # set by create_app; starlette's State is untyped


@router.post("/v1/translate", response_model=TranslateResponse, responses=ERRORS)
async def translate(body: TranslateRequest, request: Request) -> dict[str, Any]:
    """Translate a string or a list of strings; optional per-request `beam` and `nbest`."""
    service = service_of(request)
    service.check_key(body.api_key or request.query_params.get("api_key"))
    lines = service.lines(body.text)
    search = service.search_for(settings_of(body))
    done = await service.translate(request, lines, search)
    if search.nbest > 1:
        out: list[Any] = [[{"text": text, "score": round(h.score, 4)} for text, h in t.hypotheses] for t in done]
    else:
        out = [t.text for t in done]
    return {"translations": out, "model": dataclasses.asdict(service.info)}


@router.get("/health", response_model=Health, responses={503: ERRORS[503]})
async def health(request: Request) -> Response:
    """200 once the model is loaded and warmed up."""
    service = service_of(request)
    if not service.ready:
        return error_response(503, "starting: the model is loading")
    return JSONResponse({"status": "ready", "model": dataclasses.asdict(service.info),
                         "queued_lines": service.batcher.queued_lines})


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus metrics."""
    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE)
