"""`nmt serve`: a checkpoint as an HTTP translation service."""

from __future__ import annotations

from nmt.cli.options import with_config_options
from nmt.config import InferenceConfig, Overrides, SearchConfig, ServeConfig
from nmt.config.command_options import ListenOptions

EPILOG = ("Example: nmt serve -m run/averaged.pt --port 8080   then   curl -s "
          "localhost:8080/v1/translate -H 'Content-Type: application/json' "
          "-d '{\"text\": \"A man is walking.\"}'")


@with_config_options({"given": ListenOptions, "search": SearchConfig, "inference": InferenceConfig,
                      "server": ServeConfig})
def serve_command(given: Overrides[ListenOptions], search: Overrides[SearchConfig],
                  inference: Overrides[InferenceConfig], server: Overrides[ServeConfig]) -> None:
    """Serve a checkpoint over HTTP: POST /v1/translate, LibreTranslate's API (POST /translate, /detect,
    /languages, /frontend/settings), /health, /metrics, /docs; concurrent requests are batched together.
    Needs the web stack: pip install "nmt-toolkit[serve]"."""
    from nmt.cli.console import message_logger
    from nmt.core.progress import Progress
    from nmt.inference.engines import open_engine
    from nmt.serve import check_files, listen, model_info, require_web_stack, serve
    from nmt.workflows.paths import check_distinct
    from nmt.workflows.threads import set_threads

    o = given.apply()
    require_web_stack()
    check_distinct("--model", o.model)
    options = inference.apply()
    cfg = (server | Overrides(ServeConfig, {"max_batch_sentences": options.batch_size})).apply()
    keys = check_files(cfg)  # now, not once the model is loaded; read once (a pipe cannot be read again)
    set_threads(options.threads)
    sock = listen(o.host, o.port)
    log = message_logger()  # the server's log: messages, not each batch's progress
    engine = open_engine(o.model, search, options, progress=log)
    serve(engine, model_info(o.model, engine), cfg, sock, log=lambda message: log(Progress("serve", message=message)),
          keys=keys)
