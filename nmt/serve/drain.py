"""uvicorn's server within nmt's bounds: connections bounded in number (`bounded`: one beyond --max-connections gets
503 and is closed at once, so that slow or idle clients cannot take the file descriptors the others need), and a
stop bounded in time: on SIGTERM/SIGINT, stop accepting, let the requests in flight finish for at most
--drain-timeout seconds, then cut the connections still open (a client that sent half a body and stopped,
one that does not read its answer), so that the process ends on time and quietly.

uvicorn's own graceful shutdown waits for such clients, then cancels their tasks, which log a traceback
each; cutting the connections first lets every task end by itself: a body being read ends as a
disconnect, an answer being written returns, a request waiting for its batch is taken back from the queue.
The application's lifespan then waits for the worker's batch until the same deadline (at least a moment).
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import time
from typing import Any, Callable, Optional

import uvicorn

from nmt.config.flags import as_flags
from nmt.core.errors import ConfigError, ref
from nmt.serve.middleware import Gate

BACKSTOP = 5  # seconds uvicorn still waits for the tasks of the connections cut (they end within ~0.1 s)
FD_MARGIN = 64  # file descriptors kept for the process's own files (models, logs, uploads spooled, sockets)
MAX_CONNECTIONS = 4096  # the default bound where the process may open more descriptors than that


def connection_limit(asked: int) -> int:
    """--max-connections, or (0) the process's file-descriptor limit less FD_MARGIN, at most MAX_CONNECTIONS;
    ConfigError for a number the process cannot open."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    room = MAX_CONNECTIONS if soft == resource.RLIM_INFINITY else soft - FD_MARGIN
    if asked > room:
        raise ConfigError(f"{ref('max_connections')} {asked}: this process may open {soft} files (ulimit -n), "
                          f"{FD_MARGIN} of them for its own; raise ulimit -n or lower {ref('max_connections')}")
    return asked or max(1, min(room, MAX_CONNECTIONS))


def refusal(limit: int) -> bytes:
    """The answer of a connection beyond the limit: 503, JSON, Retry-After, and the connection closed."""
    return answer("503 Service Unavailable", as_flags(f"busy: {limit} connections are open, the most this server "
                                                       f"keeps ({ref('max_connections')}); retry in a moment"), True)


def answer(status: str, message: str, retry: bool = False) -> bytes:
    """A whole HTTP answer written by hand (the connection is closed after it): `{"error": message}`."""
    body = json.dumps({"error": message}).encode()
    headers = ["content-type: application/json", *(["retry-after: 1"] if retry else []), "connection: close",
               f"content-length: {len(body)}"]
    return "\r\n".join([f"HTTP/1.1 {status}", *headers, "", ""]).encode() + body


LATE_HEAD = answer("408 Request Timeout", "the request's head (its line and headers) did not arrive in time")


def bounded(protocol: type[asyncio.Protocol], limit: int, head_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP `protocol`, closing a connection made while `limit` others are open (with `refusal`), before
    it reads anything: the descriptor is freed at once, whatever the client does; and, where the protocol tells when
    a request's head is complete (uvicorn's httptools one), closing a connection whose request head (the request line
    and headers) has not come whole `head_timeout` seconds after the connection was made, or after the answer to
    its last request: uvicorn reads a head without a deadline, so a client trickling its headers held a connection
    for as long as it went on."""
    bounds = {"limit": limit, "head_timeout": head_timeout, "refused_answer": refusal(limit),
              "heads": hasattr(protocol, "on_headers_complete")}
    return type("Bounded", (Bounds, protocol), bounds)


class Bounds:
    """What `bounded` adds to uvicorn's protocol (its first base: these methods come before the protocol's)."""

    limit: int
    head_timeout: float
    refused_answer: bytes
    heads: bool
    refused = False
    head_timer: Optional[asyncio.TimerHandle] = None
    connections: set[Any]  # the protocol's
    transport: Any
    cycle: Any

    def connection_made(self, transport: Any) -> None:
        if len(self.connections) >= self.limit:
            self.refused = True
            transport.write(self.refused_answer)
            transport.close()
            return
        super().connection_made(transport)  # type: ignore[misc]
        self.wait_for_head()

    def wait_for_head(self) -> None:
        if self.heads:
            self.head_timer = asyncio.get_running_loop().call_later(self.head_timeout, self.head_late)

    def head_late(self) -> None:
        self.head_timer = None
        if not self.transport.is_closing():
            self.transport.write(LATE_HEAD)
            self.transport.close()

    def on_headers_complete(self) -> None:
        self.stop_waiting()
        super().on_headers_complete()  # type: ignore[misc]

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self.wait_for_head()  # idle: the next request's head within the time too

    def stop_waiting(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if not self.refused:
            self.stop_waiting()
            super().connection_lost(exc)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        if not self.refused:
            super().data_received(data)  # type: ignore[misc]

    def eof_received(self) -> None:
        if not self.refused:
            super().eof_received()  # type: ignore[misc]


class DrainingServer(uvicorn.Server):
    """uvicorn's server with a drain of at most `drain_timeout` seconds (see the module doc)."""

    def __init__(self, config: uvicorn.Config, gate: Gate, drain_timeout: float, log: Callable[[str], None]):
        super().__init__(config)
        self.gate, self.drain_timeout, self.log = gate, drain_timeout, log

    async def shutdown(self, sockets: Optional[list[socket.socket]] = None) -> None:
        for server in self.servers:  # stop accepting
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()  # idle keep-alive connections close now, busy ones after their answer
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_timeout
        state = getattr(self.gate.app, "state", None)
        if state is not None:  # the lifespan waits for the worker until then (at least a moment)
            state.stop_by = time.monotonic() + self.drain_timeout
        if self.server_state.tasks:
            self.log(f"stopping: {len(self.server_state.tasks)} request(s) in flight, waiting up to "
                     f"{self.drain_timeout:g}s ({ref('drain_timeout')})")
        # Connections, not only tasks: an answer written to a client that does not read it waits in our buffer.
        while (self.server_state.tasks or self.server_state.connections) and loop.time() < deadline \
                and not self.force_exit:
            await asyncio.sleep(0.05)
        stalled = list(self.server_state.connections)
        for connection in stalled:
            cycle = getattr(connection, "cycle", None)
            self.gate.cut(getattr(cycle, "scope", {}))
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
        if stalled:
            self.log(f"stopping: cut {len(stalled)} connection(s) still open after {ref('drain_timeout')} "
                     f"{self.drain_timeout:g}s")
        self.config.timeout_graceful_shutdown = BACKSTOP
        await super().shutdown(sockets)
