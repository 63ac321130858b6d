"""`nmt serve`: checkpoints as an HTTP translation service (one model per direction, or an ensemble; a
multilingual model every direction it translates, loaded once), with dynamic batching.

One concept per module: `backend` (what the server needs of an engine: each request's job, a direction, a search and
a format, run through `nmt.documents.texts`; which checkpoint serves which direction, and which glossary file),
`batcher` (the queue and the worker thread, merging requests of one job), `http_errors` (failures as JSON),
`schemas` (request and response bodies, a request's glossary read and bounded), `service` (what every translating
endpoint does: routing by direction, language detection, limits, glossaries, a request's over its direction's; the
API keys and access log checked), `routes` (the server's own endpoints), `libre` (LibreTranslate's API), `web` (the
browser's side: CORS, the page at /, file translation), `middleware` (the gate every request passes: body limits,
records, access log, Prometheus metrics), `app` (the wiring), `drain` (a bounded stop), `server` (listen and serve).

The web stack (FastAPI on uvicorn, prometheus_client, python-multipart, fastapi-offline) is the optional
extra `nmt-toolkit[serve]`: this package can be imported without it, and `require_web_stack` names what is missing.
"""

from nmt.config import ServeConfig
from nmt.engines.base import Engine
from nmt.serve.backend import ModelInfo, model_info, translate_function
from nmt.serve.batcher import Batcher, PendingRequest
from nmt.serve.http_errors import Overloaded, RequestError, TooLarge
from nmt.serve.server import address, listen, require_web_stack, serve
from nmt.serve.service import check_files

__all__ = ["Batcher", "check_files", "ModelInfo", "Overloaded", "PendingRequest", "RequestError", "ServeConfig",
           "TooLarge",
           "Engine", "address", "listen", "model_info", "require_web_stack", "serve", "translate_function"]
