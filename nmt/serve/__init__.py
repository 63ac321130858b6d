"""`nmt serve`: a checkpoint as an HTTP translation service, with dynamic batching.

One concept per module: `keyfiles` (its API keys and access log; the options are `nmt.config.ServeConfig`),
`backend` (what the server needs of an engine), `batcher` (the queue and the worker thread), `http_errors`
(failures as JSON), `schemas` (request and response bodies), `service` (what every translating endpoint
does), `routes` (the server's own endpoints), `libre` (LibreTranslate's API), `middleware` (the gate every
request passes: body limits, records, access log, Prometheus metrics), `app` (the wiring), `drain` (a
bounded stop), `server` (listen and serve).

The web stack (FastAPI on uvicorn, prometheus_client, python-multipart, fastapi-offline) is the optional
extra `nmt-toolkit[serve]`: this package can be imported without it, and `require_web_stack` names what is missing.
"""

from nmt.config import ServeConfig
from nmt.inference.engines import Engine as TranslationEngine
from nmt.serve.backend import ModelInfo, model_info, translate_function
from nmt.serve.batcher import Batcher, PendingRequest
from nmt.serve.http_errors import Overloaded, RequestError, TooLarge
from nmt.serve.keyfiles import check_files
from nmt.serve.server import address, listen, require_web_stack, serve

__all__ = ["Batcher", "check_files", "ModelInfo", "Overloaded", "PendingRequest", "RequestError", "ServeConfig",
           "TooLarge",
           "TranslationEngine", "address", "listen", "model_info", "require_web_stack", "serve", "translate_function"]
