"""`nmt serve`: a checkpoint as an HTTP translation service."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

from nmt.cli.options import with_config_options
from nmt.config import InferenceConfig, Overrides, SearchConfig, ServeConfig, TextConfig
from nmt.config.command_options import ListenOptions

EPILOG = ("Example: nmt serve -m ende.pt -m deen.pt --port 8080   then   curl -s "
          "localhost:8080/v1/translate -H 'Content-Type: application/json' "
          "-d '{\"text\": \"A man is walking.\", \"source\": \"en\", \"target\": \"de\"}'")


@with_config_options({"given": ListenOptions, "search": SearchConfig, "inference": InferenceConfig,
                      "server": ServeConfig, "text": TextConfig})
def serve_command(given: Overrides[ListenOptions], search: Overrides[SearchConfig],
                  inference: Overrides[InferenceConfig], server: Overrides[ServeConfig],
                  text: Overrides[TextConfig]) -> None:
    """Serve checkpoints over HTTP, one direction each (-m ende.pt -m deen.pt; several of one direction are an
    ensemble), a multilingual one each of its directions (-m multi.pt -m fr-en.pt: a direction of both is the
    bilingual checkpoint's): POST /v1/translate, LibreTranslate's API (POST /translate, /detect, /languages,
    /frontend/settings), /health, /metrics, /docs; concurrent requests are batched together. Needs the web
    stack: pip install "nmt-toolkit[serve]"."""
    from nmt.cli.console import message_logger
    from nmt.config.flags import as_flags
    from nmt.core.errors import ref
    from nmt.core.outputs import check_distinct
    from nmt.core.progress import Progress
    from nmt.engines.choice import open_engine
    from nmt.model.checkpoint import load
    from nmt.serve import check_files, listen, require_web_stack, serve
    from nmt.serve.backend import open_directions, read_glossaries, served
    from nmt.workflows.threads import set_threads

    o = given.apply()
    require_web_stack()
    check_distinct("--model", o.model)
    options = inference.apply()
    cfg = (server | Overrides(ServeConfig, {"max_batch_sentences": options.batch_size})).apply()
    keys = check_files(cfg)  # now, not once the model is loaded; read once (a pipe cannot be read again)
    log = message_logger()  # the server's log: messages, not each batch's progress
    say = lambda message: log(Progress("serve", message=message))  # noqa: E731
    text_cfg = text.apply()
    data_of = lambda path: load(path, mmap=True).data  # noqa: E731 (the weights mapped, never read)
    # the directions the checkpoints serve (and which an ensemble), from their data, before any model loads
    directions = served(o.model, data_of) if o.glossary or len(o.model) > 1 else {}
    glossaries = read_glossaries(o.glossary or [], directions, say)
    set_threads(options.threads)
    sock = listen(o.host, o.port)
    if keys is not None and cfg.origins == ("*",):  # LibreTranslate's default too: said, not silent
        log(Progress("serve", message=as_flags(
            f"note: {ref('api_keys')} without {ref('cors_origins')}: a page of any origin may call this server from a "
            f"browser (with a key); give {ref('cors_origins')} to allow only yours")))
    # one engine per group of checkpoints (`nmt.serve.backend.plan`), shared by a multilingual model's directions;
    # several checkpoints are grouped by the languages they say they translate, their weights mapped, not read
    engines, infos = open_directions(o.model, lambda paths: open_engine(paths, search, options, progress=log),
                                     data_of, say, o.name)
    ensembles = frozenset(direction for direction, group in directions.items() if len(group.paths) > 1)
    if not serve(engines, infos, cfg, sock, log=say, keys=keys, split=text_cfg.split, glossaries=glossaries,
                 ensembles=ensembles, glossary_method=text_cfg.glossary_method):
        exit_now()


def exit_now() -> NoReturn:
    """End the process at once with exit status 0, output flushed, without finalising Python: the server stopped
    while its worker was still inside the engine (a batch nobody waits for after the drain), and finalisation would
    free the engine (CTranslate2's C++ translator, torch's tensors) under that call: SIGABRT or SIGSEGV."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # closed, or a reader that left: nothing more to tell it
            stream.flush()
    os._exit(0)

