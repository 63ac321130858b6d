"""Listening, serving and stopping: the socket is taken before the model loads, uvicorn runs the application,
and SIGTERM/SIGINT drain it within --drain-timeout, ending with one summary line (and telling the caller whether the
model is still inside a batch nobody waits for)."""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Optional, TextIO

from nmt.config import ServeConfig
from nmt.core.errors import ConfigError, OutputError, os_error_message, ref
from nmt.engines.base import Engine
from nmt.serve.backend import Direction, ModelInfo
from nmt.text.glossary import Glossary

EXTRA_HINT = 'pip install "nmt-toolkit[serve]"'
# The web stack: module -> the package that installs it.
WEB_STACK = {"fastapi": "fastapi", "uvicorn": "uvicorn", "prometheus_client": "prometheus_client",
             "python_multipart": "python-multipart", "fastapi_offline": "fastapi-offline"}


def require_web_stack() -> None:
    """ConfigError naming the packages missing and the extra that installs them."""
    missing = []
    for module, package in WEB_STACK.items():
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if missing:
        raise ConfigError(f"nmt serve needs {', '.join(missing)}: {EXTRA_HINT}")


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: one the system picks), taken before the model loads so that a busy
    port or an unknown host is a one-line error at once rather than after the start-up."""
    where = f"{ref('host')} {host} {ref('port')} {port}"
    try:
        family, kind, proto, _, address_ = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                              flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise ConfigError(f"{where}: cannot resolve the host ({e}); give an address such as 127.0.0.1") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait for TIME_WAIT
        sock.bind(address_)
        sock.listen(2048)  # connections wait in the backlog from now on, even before the server accepts them
    except OSError as e:
        sock.close()
        raise ConfigError(f"{where}: cannot listen there ({e.strerror or e}); choose another {ref('port')}, "
                          "or stop the process that uses it") from None
    return sock


def address(sock: socket.socket) -> str:
    """http://HOST:PORT of a bound socket, with the port the system picked for port 0."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@contextlib.contextmanager
def access_log(path: Optional[Path], log: Callable[[str], None] = lambda s: None
               ) -> Iterator[Optional[Callable[[str], None]]]:
    """A function that appends one line to --access-log (stderr for "-"); None without a log. A line that cannot be
    written (a full disk) is lost, not the server: said once on `log` when it starts and when lines are written
    again, with the number lost."""
    if path is None:
        yield None
        return
    if str(path) == "-":
        yield lambda line: print(line, file=sys.stderr, flush=True)
        return
    try:
        # line-buffered: `tail -f` sees each request; opened here so that an error names the option (closed below)
        f: TextIO = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
    except OSError as e:
        raise OutputError(f"{ref('access_log')} {os_error_message(e, path, 'cannot open')}") from None
    lost = 0

    def write(line: str) -> None:
        nonlocal lost
        try:
            f.write(line + "\n")
        except OSError as e:  # a full disk must not take the server down; the metrics still count
            if not lost:
                log(f"warning: {ref('access_log')} {os_error_message(e, path, 'cannot write')} (its lines are lost "
                    "until it can be written; serving goes on)")
            lost += 1
            return
        if lost:
            log(f"{ref('access_log')} {path}: written again; {lost:,} line(s) lost")
            lost = 0

    try:
        yield write
    finally:
        try:
            f.close()
        except OSError as e:  # (its last line, buffered; said already where lines were being lost)
            if not lost:
                log(f"warning: {ref('access_log')} {os_error_message(e, path, 'cannot write')} (its last line is "
                    "lost)")


SWITCH_INTERVAL = 0.0001  # seconds: how often Python's threads may take the GIL from each other while serving


def serve(engines: Sequence[Engine], infos: Sequence[ModelInfo], cfg: ServeConfig, sock: socket.socket,
          log: Callable[[str], None] = lambda s: None, keys: Optional[frozenset[str]] = None,
          split: bool = True, glossaries: Mapping[Direction, Glossary] = MappingProxyType({}),
          ensembles: frozenset[Direction] = frozenset(), glossary_method: str = "auto") -> bool:
    """Run the server of `engines` (one per direction, described by `infos`) on `sock` (from `listen`) until
    SIGINT/SIGTERM: it then stops accepting, answers what is in flight within --drain-timeout, cuts what is
    left, and returns after one summary line: True, or False if the worker is then still inside the engine (the
    caller must then end the process without finalising Python, which would free the engine under that call and
    crash: SIGABRT or SIGSEGV; nobody waits for that batch any more). `keys`: what
    `check_files(cfg)` returned (None: the files are checked, and the keys read, when the application is made);
    `split`: texts cut into sentences; `glossaries`, `ensembles`, `glossary_method`: as `nmt.serve.app.create_app`
    takes them."""
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from nmt.serve.app import create_app
    from nmt.serve.drain import BACKSTOP, DrainingServer, bounded, connection_limit
    from nmt.serve.middleware import access_line

    def ready() -> None:
        log(f"ready: {described(infos)} on {address(sock)} (API docs: /docs)")

    with access_log(cfg.access_log, log) as write:
        gate = create_app(engines, infos, cfg, on_ready=ready, split=split, on_error=lambda line: log(f"error: {line}"),
                          on_note=log,
                          on_done=(lambda record: write(access_line(record))) if write else (lambda record: None),
                          keys=keys, glossaries=glossaries, ensembles=ensembles, glossary_method=glossary_method)
        limit = connection_limit(cfg.max_connections)
        config = uvicorn.Config(gate, log_level="warning", access_log=False, lifespan="on", limit_concurrency=limit,
                                http=bounded(AutoHTTPProtocol, limit, cfg.timeout),
                                timeout_graceful_shutdown=BACKSTOP)
        server = DrainingServer(config, gate, cfg.drain_timeout, log)
        # uvicorn turns SIGINT/SIGTERM into a graceful shutdown, then raises the signal again for the handler
        # that was there before it: a no-op one here, so that a graceful stop exits 0, not 128 + signal.
        previous = {sig: signal.signal(sig, lambda signum, frame: None) for sig in (signal.SIGINT, signal.SIGTERM)}
        # The worker thread needs the GIL back the moment the engine returns, while the event loop, busy with
        # HTTP, holds it: Python hands it over only every switch interval (5 ms by default), an idle engine
        # each time (at 32 clients 69% of offline throughput with 5 ms, 89% with 0.1 ms: docs/commands/serve.md).
        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
        try:
            server.run(sockets=[sock])
        finally:
            sys.setswitchinterval(switch_interval)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            sock.close()
    busy = not stop_worker(gate)
    if busy:
        log(f"stopping: the model is still translating a batch no client waits for after {ref('drain_timeout')} "
            f"{cfg.drain_timeout:g}s; leaving it")
    n = gate.counts
    log(f"stopped: {n['served']:,} request(s) served, {n['failed']:,} failed, {n['dropped']:,} dropped")
    return not busy


def described(infos: Sequence[ModelInfo]) -> str:
    """The models served, each once with its directions: "multi.pt (en -> de, en -> fr, torch engine); ..."."""
    models: dict[tuple[str, str, str], list[str]] = {}
    for info in infos:
        models.setdefault((info.name, info.sha256, info.engine), []).append(f"{info.src} -> {info.tgt}")
    return "; ".join(f"{name} ({', '.join(directions)}{f', {engine} engine' if engine else ''})"
                     for (name, _, engine), directions in models.items())


def stop_worker(gate: Any) -> bool:
    """Stop the batcher's worker of the application behind `gate` (the lifespan has, unless a second Ctrl-C
    skipped it), waiting a moment; False if it is still inside the engine."""
    from nmt.serve.app import WORKER_GRACE

    batcher = gate.app.state.service.batcher
    return not batcher.thread.is_alive() or bool(batcher.close(WORKER_GRACE))
