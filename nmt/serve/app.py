"""The application: the endpoints, their JSON errors, the batcher's life, the metrics and the gate, wired."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Callable, Optional, Union

from nmt.config import ServeConfig
from nmt.core.errors import ConfigError
from nmt.engines.base import Engine
from nmt.serve.backend import Direction, ModelInfo, TranslateFn, translate_function
from nmt.serve.batcher import Batcher
from nmt.serve.http_errors import install_handlers
from nmt.serve.libre import install as install_libre
from nmt.serve.libre import router as libre_router
from nmt.serve.middleware import Gate, Metrics, RequestRecord
from nmt.serve.native import Direct
from nmt.serve.native import router as native_router
from nmt.serve.service import DetectorFactory, Service, check_files, translating_paths
from nmt.serve.web import install as install_web
from nmt.serve.web import router as web_router
from nmt.text.glossary import Glossary
from nmt.text.languages import Detector

# Seconds the worker still gets after the drain for the batch it is in (its clients were cut; a batch about to
# end ends, and the process then finalises normally rather than leaving the worker behind).
WORKER_GRACE = 1.0


@contextlib.asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """Start the batcher, warm the models up and build the language detectors before the first request; at the
    end (after the drain), translate what is still queued and stop the worker, waiting for it until the drain's
    deadline (`app.state.stop_by`, set by `DrainingServer`; --drain-timeout from now without one) or at least
    WORKER_GRACE seconds: the caller must not free the engines while it is still busy (`nmt.serve.server`)."""
    service: Service = app.state.service
    loop = asyncio.get_running_loop()
    service.batcher.start()
    await asyncio.gather(loop.run_in_executor(None, app.state.warm_up),
                         loop.run_in_executor(None, service.build_detectors))
    service.ready = True
    app.state.on_ready()
    yield
    service.ready = False
    stop_by = getattr(app.state, "stop_by", None)
    wait = service.cfg.drain_timeout if stop_by is None else stop_by - time.monotonic()
    await loop.run_in_executor(None, service.batcher.close, max(wait, WORKER_GRACE))


def telemetry(environ: Mapping[str, str] = os.environ) -> Optional[dict[str, bool]]:
    """FastAPI's own OpenTelemetry spans and metrics (FastAPI 0.16x; older ones take the setting as an unused extra):
    on where an OTEL_ variable configures OpenTelemetry (None: FastAPI's defaults), off otherwise, since FastAPI
    then asks the environment for a provider on every request (4% of a one-sentence request's event-loop time);
    nmt's own Prometheus metrics are at /metrics either way."""
    if any(name.startswith("OTEL_") for name in environ):
        return None
    return {"tracing": False, "metrics": False, "logs": False}


def create_app(engines: Union[Engine, Sequence[Engine]],
               infos: Union[ModelInfo, Sequence[ModelInfo]], cfg: ServeConfig, translate: Optional[TranslateFn] = None,
               on_ready: Callable[[], None] = lambda: None,
               on_done: Callable[[RequestRecord], None] = lambda r: None,
               on_error: Callable[[str], None] = lambda line: None,
               on_note: Callable[[str], None] = lambda line: None,
               keys: Optional[frozenset[str]] = None, split: bool = True,
               detector: DetectorFactory = Detector,
               glossaries: Mapping[Direction, Glossary] = MappingProxyType({}),
               ensembles: frozenset[Direction] = frozenset(), glossary_method: str = "auto") -> Gate:
    """The ASGI application (see docs/commands/serve.md for the API): FastAPI behind a `Gate`.

    `engines`: one per direction, each with its `infos` (the first direction is the default one); `translate`:
    what the worker calls (default: the engines with per-request search settings: `translate_function`); `split`:
    each text cut into sentences; `on_ready` once the models are warm; `on_done(record)` after each request;
    `on_error(line)` for each failure no handler expected; `on_note(line)` for what the operator should know (an
    origin CORS refused); `keys`: what `check_files(cfg)` returned, where the
    caller has checked the files already (None: they are checked, and the keys read, here); `detector`: makes
    the language detector of some candidate languages (`nmt.text.languages.Detector`); `glossaries`: the terms of
    some directions (`nmt.serve.backend.read_glossaries`); `ensembles`: the directions an ensemble serves (a request's
    glossary is refused there); `glossary_method`: how terms get in (TextConfig.glossary_method)."""
    from fastapi_offline import FastAPIOffline  # /docs and /redoc from files in the package, not from a CDN

    engines = [engines] if not isinstance(engines, Sequence) else list(engines)
    infos = [infos] if isinstance(infos, ModelInfo) else list(infos)
    directions = {info.direction: info for info in infos}
    if len(directions) != len(infos) or len(engines) != len(infos):
        raise ConfigError("give one engine, and its model info, per direction")
    if set(glossaries) - set(directions) or set(glossaries) & ensembles:
        raise ConfigError("give glossaries of the directions served, each by one model")
    cfg = cfg.validate().for_engine(getattr(engines[0], "name", "torch"))
    if keys is None:
        keys = check_files(cfg)
    served = ", ".join(f"{info.src} -> {info.tgt} with {info.name}" for info in infos)
    app = FastAPIOffline(title="nmt", description=f"Translation {served}", lifespan=lifespan, telemetry=telemetry())
    install_handlers(app)
    app.include_router(native_router)  # nmt's own API
    install_libre(app, cfg)  # LibreTranslate's, its file routes and their store included
    web = install_web(app, cfg, on_note)  # the page; the CORS layer
    # the routes as declared: FastAPI may keep an included router's routes inside it, out of app.routes
    routes = [*app.routes, *native_router.routes, *libre_router.routes, *web_router.routes]
    metrics = Metrics({getattr(route, "path", "") for route in routes} - {""}, translating_paths(routes))
    by_direction = {info.direction: engine for info, engine in zip(infos, engines)}
    batcher = Batcher(translate or translate_function(by_direction), cfg, metrics.on_batch)
    metrics.watch_queue(lambda: batcher.queued_lines)
    app.state.service = Service(batcher, cfg, directions, engines[0].search_cfg, keys,
                                searches={d: e.search_cfg for d, e in by_direction.items()}, detector=detector,
                                split=split, glossaries=dict(glossaries), ensembles=frozenset(ensembles),
                                glossary_method=glossary_method)
    app.state.metrics = metrics
    app.state.warm_up = lambda: [engine.translate_chunk(["warm up"]) for engine in engines]
    app.state.on_ready = on_ready

    def done(record: RequestRecord) -> None:
        if record.method != "OPTIONS":  # a browser's CORS preflight is no translation: not in its latencies
            metrics.on_request(record.path, record.status, record.seconds)
        on_done(record)

    return Gate(Direct(app), cfg.body_limit, cfg.timeout, on_done=done, on_error=on_error, wrap=web)
