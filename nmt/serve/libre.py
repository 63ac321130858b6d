"""LibreTranslate's API, so that its clients and web pages work unchanged: POST /translate (routed by source and
target among the directions served; source auto detects each text's language), POST /detect, GET /languages,
GET /frontend/settings. Bodies are JSON or form fields (urlencoded or multipart), as LibreTranslate reads them;
errors are `{"error": "..."}` with LibreTranslate's statuses (400, 403). The request field `scores` is nmt's
extension: each translation's confidence (docs/commands/serve.md)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from pydantic import BaseModel, ValidationError

from nmt.config.flags import as_flags
from nmt.core.errors import ref
from nmt.inference.documents import TextTranslation
from nmt.serve.http_errors import NOT_JSON, RequestError, shown
from nmt.serve.schemas import ERRORS, Detected, DetectRequest, FrontendSettings, Language, LibreRequest, LibreResponse
from nmt.serve.service import Service
from nmt.serve.web import SUPPORTED_FILES
from nmt.text.languages import language_name

router = APIRouter(tags=["LibreTranslate"])
M = TypeVar("M", bound=BaseModel)
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


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
    """LibreTranslate-compatible: `q`, `source` (or auto), `target`, `format` (text, html), `alternatives`,
    `api_key` -> `translatedText`; nmt's `scores: true` adds each translation's confidence."""
    service: Service = request.app.state.service
    req = parse(LibreRequest, await fields(request, service))
    service.check_key(req.api_key)
    if not req.q:
        raise RequestError("Invalid request: missing q parameter", 400)
    fmt = req.format or "text"
    if fmt not in ("text", "html"):
        raise RequestError(f"{shown(fmt)} format is not supported", 400)
    if req.alternatives > service.widest - 1:  # in LibreTranslate's words
        raise RequestError(as_flags(f"Invalid request: alternatives parameter must be <= {service.widest - 1} "
                                    f"({ref('max_beam')} {service.widest})"), 400)
    texts = service.texts(req.q)
    settings = {"nbest": req.alternatives + 1}
    if req.source == "auto":
        detected: list[dict[str, Any]] = [{"confidence": round(d.confidence, 2), "language": d.language}
                                          for d in await service.detect_sources(texts, req.target, fmt)]
    else:
        service.direction(req.source, req.target)
        detected = [{"confidence": 100.0, "language": req.source}] * len(texts)
    done = await translate_grouped(service, request, texts, [d["language"] for d in detected], req.target, fmt,
                                   settings)
    single = isinstance(req.q, str)
    out: dict[str, Any] = {"translatedText": done[0].text if single else [t.text for t in done]}
    if req.source == "auto":
        out["detectedLanguage"] = detected[0] if single else detected
    if req.alternatives > 0:
        alternatives = [list(dict.fromkeys(text for text, _ in t.hypotheses[1:] if text != t.text)) for t in done]
        out["alternatives"] = alternatives[0] if single else alternatives
    if req.scores:
        scores = [round(t.score, 4) for t in done]
        out["scores"] = scores[0] if single else scores
    return out


async def translate_grouped(service: Service, request: Request, texts: list[str], sources: list[str], target: str,
                            fmt: str, settings: dict[str, Any]) -> list[TextTranslation]:
    """Each text translated from its own source language (texts of one language in one request), in order."""
    groups: dict[str, list[int]] = {}
    for i, source in enumerate(sources):
        groups.setdefault(source, []).append(i)
    results = await asyncio.gather(*(
        service.translate_texts(request, [texts[i] for i in at], source, target, format=fmt,
                                search=service.search_for(settings, 400, (source, target)))
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
