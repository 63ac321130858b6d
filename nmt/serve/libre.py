"""LibreTranslate's API, so that its clients and web pages work unchanged: POST /translate, POST /detect,
GET /languages, GET /frontend/settings. Bodies are JSON or form fields (urlencoded or multipart), as
LibreTranslate reads them; errors are `{"error": "..."}` with LibreTranslate's statuses (400, 403)."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from pydantic import BaseModel, ValidationError

from nmt.config.flags import as_flags
from nmt.core.errors import ref
from nmt.serve.http_errors import NOT_JSON, RequestError, shown
from nmt.serve.schemas import ERRORS, Detected, DetectRequest, FrontendSettings, Language, LibreRequest, LibreResponse
from nmt.serve.service import Service, split

router = APIRouter(tags=["LibreTranslate"])
M = TypeVar("M", bound=BaseModel)
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
CONFIDENCE = 100.0  # /detect answers the model's one source language: there is nothing else it could translate


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
        form = await request.form(max_part_size=service.cfg.body_limit)
        return {**request.query_params, **{k: v for k, v in form.items() if isinstance(v, str)}}
    if body:
        raise RequestError(f"send JSON or form fields, not {media or 'a body without Content-Type'}", 415)
    return dict(request.query_params)


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
async def translate(request: Request) -> dict[str, Any]:
    """LibreTranslate-compatible: `q`, `source`, `target` (and `alternatives`, `api_key`) -> `translatedText`."""
    service: Service = request.app.state.service
    info = service.info
    req = parse(LibreRequest, await fields(request, service))
    service.check_key(req.api_key)
    if req.source not in ("auto", info.src) or req.target != info.tgt:
        raise RequestError(f"this server translates {info.src} to {info.tgt}, not {shown(req.source)} to "
                           f"{shown(req.target)}", 400)
    if req.format not in ("text", ""):
        raise RequestError(f"{shown(req.format)} format is not supported: this server translates plain text", 400)
    if req.alternatives > service.widest - 1:  # in LibreTranslate's words
        raise RequestError(as_flags(f"Invalid request: alternatives parameter must be <= {service.widest - 1} "
                                    f"({ref('max_beam')} {service.widest})"), 400)
    texts = [req.q] if isinstance(req.q, str) else req.q
    if not req.q:
        raise RequestError("Invalid request: missing q parameter", 400)
    lines = service.lines(texts, split_lines=True)
    done = await service.translate(request, lines, service.search_for({"nbest": req.alternatives + 1}, 400))
    results, alternatives, at = [], [], 0
    for text in texts:
        mine = done[at : at + len(split(text))]
        at += len(mine)
        best = "\n".join(t.text for t in mine)
        results.append(best)
        # the k-th alternative of a text: the k-th hypothesis of each of its lines (the best where a line has fewer)
        others = ["\n".join(t.hypotheses[k][0] if k < len(t.hypotheses) else t.text for t in mine)
                  for k in range(1, req.alternatives + 1)]
        alternatives.append(list(dict.fromkeys(a for a in others if a != best)))
    detected = {"confidence": CONFIDENCE, "language": info.src}
    single = isinstance(req.q, str)
    out: dict[str, Any] = {"translatedText": results[0] if single else results}
    if req.source == "auto":
        out["detectedLanguage"] = detected if single else [detected] * len(texts)
    if req.alternatives > 0:
        out["alternatives"] = alternatives[0] if single else alternatives
    return out


@router.post("/detect", response_model=list[Detected], responses=ERRORS, openapi_extra=body_doc(DetectRequest))
async def detect(request: Request) -> list[dict[str, Any]]:
    """LibreTranslate-compatible language detection: the model's source language (its one language)."""
    service: Service = request.app.state.service
    req = parse(DetectRequest, await fields(request, service))
    service.check_key(req.api_key)
    if not req.q:
        raise RequestError("Invalid request: missing q parameter", 400)
    return [{"confidence": CONFIDENCE, "language": service.info.src}]


@router.get("/languages", response_model=list[Language])
async def languages(request: Request) -> list[dict[str, Any]]:
    """LibreTranslate's language list: the model's one direction."""
    info = request.app.state.service.info
    return [{"code": info.src, "name": info.src, "targets": [info.tgt]}]


@router.get("/frontend/settings", response_model=FrontendSettings)
async def frontend_settings(request: Request) -> dict[str, Any]:
    """What a LibreTranslate web page reads first: limits, whether a key is needed, the default languages."""
    service: Service = request.app.state.service
    info = service.info
    return {"charLimit": service.cfg.max_chars, "frontendTimeout": 500, "apiKeys": service.keys is not None,
            "keyRequired": service.keys is not None, "suggestions": False, "filesTranslation": False,
            "supportedFilesFormat": [],
            "language": {"source": {"code": info.src, "name": info.src},
                         "target": {"code": info.tgt, "name": info.tgt}}}
