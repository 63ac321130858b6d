"""The application: the endpoints, their JSON errors, the batcher's life, the metrics and the gate, wired."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Callable, Optional

from nmt.config import ServeConfig
from nmt.inference.engines import Engine as TranslationEngine
from nmt.serve.backend import ModelInfo, TranslateFn, translate_function
from nmt.serve.batcher import Batcher
from nmt.serve.http_errors import install_handlers
from nmt.serve.keyfiles import check_files
from nmt.serve.libre import router as libre_router
from nmt.serve.middleware import Gate, Metrics, RequestRecord
from nmt.serve.routes import router as own_router
from nmt.serve.service import Service


@contextlib.asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """Start the batcher and warm the model up before the first request; at the end (after the drain),
    translate what is still queued and stop the worker."""
    service: Service = app.state.service
    loop = asyncio.get_running_loop()
    service.batcher.start()
    await loop.run_in_executor(None, app.state.warm_up)
    service.ready = True
    app.state.on_ready()
    yield
    service.ready = False
    await loop.run_in_executor(None, service.batcher.close, service.cfg.drain_timeout)


def create_app(engine: TranslationEngine, info: ModelInfo, cfg: ServeConfig, translate: Optional[TranslateFn] = None,
               on_ready: Callable[[], None] = lambda: None,
               on_done: Callable[[RequestRecord], None] = lambda r: None,
               on_error: Callable[[str], None] = lambda line: None,
               keys: Optional[frozenset[str]] = None) -> Gate:
    """The ASGI application (see docs/commands/serve.md for the API): FastAPI behind a `Gate`.

    `translate`: what the worker calls (default: `engine` with per-request search settings); `on_ready` once the
    model is warm; `on_done(record)` after each request; `on_error(line)` for each failure no handler expected;
    `keys`: what `check_files(cfg)` returned, where the caller has checked the files already (None: they are
    checked, and the keys read, here)."""
    from fastapi_offline import FastAPIOffline  # /docs and /redoc from files in the package, not from a CDN

    cfg = cfg.validate().for_engine(getattr(engine, "name", "torch"))
    if keys is None:
        keys = check_files(cfg)
    app = FastAPIOffline(title="nmt", description=f"Translation {info.src} -> {info.tgt} with {info.name}",
                         lifespan=lifespan)
    install_handlers(app)
    app.include_router(own_router)
    app.include_router(libre_router)
    metrics = Metrics({getattr(route, "path", "") for route in app.routes})
    batcher = Batcher(translate or translate_function(engine), cfg, metrics.on_batch)
    metrics.watch_queue(lambda: batcher.queued_lines)
    app.state.service = Service(batcher, cfg, info, engine.search_cfg, keys)
    app.state.metrics = metrics
    app.state.warm_up = lambda: engine.translate_chunk(["warm up"])
    app.state.on_ready = on_ready

    def done(record: RequestRecord) -> None:
        metrics.on_request(record.path, record.status, record.seconds)
        on_done(record)

    return Gate(app, cfg.body_limit, cfg.timeout, on_done=done, on_error=on_error)
