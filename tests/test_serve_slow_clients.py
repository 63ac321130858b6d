"""Slow clients cannot starve the server (a real `nmt serve` on loopback): a body that trickles in is cut at --timeout
on every route that takes one, a request head that trickles in too, a connection beyond --max-connections is
answered 503 and closed at once, and a normal client gets its answers while a thousand slow ones trickle."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")  # the web stack: the extra nmt-toolkit[serve]

import requests  # noqa: E402
from test_serve import Server  # noqa: E402

TIMEOUT = 2.0  # the server's --timeout in these tests
HEADS = {  # a request head of each route that takes a body, announcing 10,000 bytes that will come slowly
    "/v1/translate": "application/json",
    "/translate": "application/json",
    "/detect": "application/x-www-form-urlencoded",
    "/translate_file": "multipart/form-data; boundary=x",
}


def head(path: str, length: int = 10_000) -> bytes:
    """The head, and what the body begins with (a multipart body: a file part, whose content then trickles)."""
    start = (b'--x\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\n'
             if path == "/translate_file" else b"")
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {HEADS[path]}\r\n"
            f"Content-Length: {length}\r\n\r\n").encode() + start


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    srv = Server(tiny_checkpoint, "--timeout", str(TIMEOUT), "--max-connections", "1100")
    yield srv
    srv.stop()


def trickle(url: str, first: bytes, piece: bytes, every: float, limit: float) -> tuple[bytes, float]:
    """Send `first`, then `piece` every `every` seconds until the server answers or closes (at most `limit` s);
    what it answered and when."""
    port = int(url.rsplit(":", 1)[1])
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=limit) as s:
        s.sendall(first)
        s.settimeout(every)
        while time.monotonic() - start < limit:
            try:
                data = s.recv(4096)
                return data, time.monotonic() - start
            except socket.timeout:
                try:
                    s.sendall(piece)
                except OSError:  # closed by the server
                    return b"", time.monotonic() - start
            except OSError:
                return b"", time.monotonic() - start
    return b"", time.monotonic() - start


@pytest.mark.slow
@pytest.mark.parametrize("path", list(HEADS))
def test_a_trickling_body_is_cut_at_the_timeout_on_every_route(server, path):
    answer, seconds = trickle(server.url, head(path), b"x", 0.2, 4 * TIMEOUT)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert seconds < TIMEOUT + 1.5, seconds  # from the request's start, however often a byte came


@pytest.mark.slow
def test_a_trickling_head_is_cut_at_the_timeout(server):
    answer, seconds = trickle(server.url, b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"X-A: b\r\n", 0.2,
                              4 * TIMEOUT)
    assert answer.startswith(b"HTTP/1.1 408") and b"head" in answer, answer[:200]
    assert seconds < TIMEOUT + 1.5, seconds


@pytest.mark.slow
def test_connections_beyond_the_limit_get_503_at_once(tiny_checkpoint):
    srv = Server(tiny_checkpoint, "--timeout", str(TIMEOUT), "--max-connections", "20")
    try:
        port = int(srv.url.rsplit(":", 1)[1])
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        time.sleep(0.2)  # the server has taken them
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as extra:
            answer = extra.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503") and b"--max-connections" in answer and b"retry-after: 1" in answer
        assert time.monotonic() - start < 1.0  # at once, before the 20 idle ones are cut
        for s in held:  # idle connections: no head within --timeout, cut with 408
            s.settimeout(TIMEOUT + 3)
            assert s.recv(4096).startswith(b"HTTP/1.1 408")
            s.close()
        assert requests.post(srv.url + "/translate", json={"q": "A dog.", "source": "en", "target": "de"},
                             timeout=30).status_code == 200  # the places are free again
    finally:
        srv.stop()


class Tricklers:
    """`n` clients that each send a head announcing a long body, then a byte every `every` seconds, and note the
    answer each gets (on a thread of their own, one selector over every socket)."""

    def __init__(self, url: str, n: int, every: float = 0.5):
        port = int(url.rsplit(":", 1)[1])
        self.sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
        self.answers: dict[int, bytes] = {}
        self.every, self.stop = every, threading.Event()
        for s in self.sockets:
            s.sendall(head("/translate"))
            s.setblocking(False)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        selector = selectors.DefaultSelector()
        for i, s in enumerate(self.sockets):
            selector.register(s, selectors.EVENT_READ, i)
        next_byte = time.monotonic()
        while not self.stop.is_set() and len(self.answers) < len(self.sockets):
            for key, _ in selector.select(timeout=0.05):
                try:
                    self.answers[key.data] = key.fileobj.recv(4096)
                except OSError:
                    self.answers[key.data] = b""
                selector.unregister(key.fileobj)
            if time.monotonic() >= next_byte:
                for i, s in enumerate(self.sockets):
                    if i not in self.answers:
                        with contextlib.suppress(OSError):  # closed: its answer comes with the next select
                            s.send(b"x")
                next_byte = time.monotonic() + self.every

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        for s in self.sockets:
            s.close()


@pytest.mark.slow
def test_a_normal_client_is_answered_while_a_thousand_slow_ones_trickle(server):
    slow = Tricklers(server.url, 1000)
    try:
        start = time.monotonic()
        while time.monotonic() - start < TIMEOUT:  # while every slow client is still trickling
            r = requests.post(server.url + "/translate", json={"q": "A man rides a bike.", "source": "en",
                                                               "target": "de"}, timeout=10)
            assert r.status_code == 200, r.text
        slow.thread.join(timeout=TIMEOUT + 10)
        assert len(slow.answers) == 1000  # each cut, none left holding a connection
        assert sum(a.startswith(b"HTTP/1.1 408") for a in slow.answers.values()) >= 990
    finally:
        slow.close()
