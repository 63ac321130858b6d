"""A stop bounded in time: on SIGTERM/SIGINT, stop accepting, let the requests in flight finish for at most
--drain-timeout seconds, then cut the connections still open (a client that sent half a body and stopped,
one that does not read its answer), so that the process ends on time and quietly.

uvicorn's own graceful shutdown waits for such clients, then cancels their tasks, which log a traceback
each; cutting the connections first lets every task end by itself: a body being read ends as a
disconnect, an answer being written returns, a request waiting for its batch is taken back from the queue.
The application's lifespan then waits for the worker's batch until the same deadline (at least a moment).
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Callable, Optional

import uvicorn

from nmt.core.errors import ref
from nmt.serve.middleware import Gate

BACKSTOP = 5  # seconds uvicorn still waits for the tasks of the connections cut (they end within ~0.1 s)


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
