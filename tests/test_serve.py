"""`nmt serve`: the batcher on its own (a fake model whose calls are recorded), then the real server on
127.0.0.1 with a random free port, talked to over HTTP with requests."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
import requests  # noqa: E402

from nmt.search import Hypothesis, SearchConfig  # noqa: E402
from nmt.serve import Batcher, Overloaded, ServeConfig  # noqa: E402
from nmt.translate import Translation  # noqa: E402

from test_cli import ENV, nmt, ok  # noqa: E402

# -- the batcher -------------------------------------------------------------------------------------


class FakeModel:
    """Translates a line to its upper case; records the lines of every call (one call = one batch)."""

    def __init__(self, delay: float = 0.0):
        self.calls: list[list[str]] = []
        self.delay = delay

    def __call__(self, lines: list[str], search: SearchConfig) -> list[Translation]:
        self.calls.append(list(lines))
        time.sleep(self.delay)
        return [Translation(line.upper(), [(line.upper(), Hypothesis([], 0.0, 0.0))], line) for line in lines]


def run_jobs(cfg: ServeConfig, model: FakeModel, requests_: list[tuple[list[str], SearchConfig]],
             spacing: float = 0.0) -> list:
    """Submit the requests (`spacing` seconds apart) to a Batcher; their results, in order."""
    async def main():
        batcher = Batcher(model, cfg)
        batcher.start()
        jobs = []
        for lines, search in requests_:
            jobs.append(batcher.submit(lines, search))
            await asyncio.sleep(spacing)
        results = await asyncio.gather(*(job.future for job in jobs))
        await asyncio.get_running_loop().run_in_executor(None, batcher.close)
        return [[t.text for t in r] for r in results]

    return asyncio.run(main())


BEAM4, BEAM1 = SearchConfig(beam=4), SearchConfig(beam=1)


@pytest.mark.parametrize("cfg, reqs, batches", [
    # requests queued within max_wait are merged, in arrival order
    (ServeConfig(max_wait_ms=200, quiet_ms=200), [(["a"], BEAM4), (["b", "c"], BEAM4), (["d"], BEAM4)], [["a", "b", "c", "d"]]),
    # ... but never beyond max_batch_sentences (a request is never split)
    (ServeConfig(max_wait_ms=200, quiet_ms=200, max_batch_sentences=3), [(["a", "b"], BEAM4), (["c", "d"], BEAM4), (["e"], BEAM4)],
     [["a", "b", "e"], ["c", "d"]]),
    # other search settings wait for a batch of their own
    (ServeConfig(max_wait_ms=200, quiet_ms=200), [(["a"], BEAM4), (["b"], BEAM1), (["c"], BEAM4)], [["a", "c"], ["b"]]),
    # a request larger than the batch goes alone
    (ServeConfig(max_wait_ms=200, quiet_ms=200, max_batch_sentences=2), [(["a", "b", "c"], BEAM4)], [["a", "b", "c"]]),
])
def test_batcher_merges_requests(cfg, reqs, batches):
    model = FakeModel()
    results = run_jobs(cfg, model, reqs)
    assert model.calls == batches
    assert results == [[line.upper() for line in lines] for lines, _ in reqs]  # each gets its own lines back


def test_batcher_does_not_wait_past_max_wait():
    model = FakeModel()
    start = time.monotonic()
    run_jobs(ServeConfig(max_wait_ms=50), model, [(["a"], BEAM4), (["b"], BEAM4)], spacing=0.3)
    assert model.calls == [["a"], ["b"]] and time.monotonic() - start < 2.0


def test_batcher_sends_a_lone_request_once_nothing_else_comes():
    """--max-wait-ms is a bound: when no other request comes for --quiet-ms, the batch goes."""
    model = FakeModel()
    start = time.monotonic()
    run_jobs(ServeConfig(max_wait_ms=5000, quiet_ms=5), model, [(["a"], BEAM4)])
    assert model.calls == [["a"]] and time.monotonic() - start < 2.5


def test_batcher_waits_for_the_clients_it_just_answered():
    """Under load the wait counts from when the model became free: a (0 s) runs from 0.35 to 0.85 s; b (0.5 s)
    waited meanwhile, yet still waits until 1.2 s, so that c (1.0 s), as from a client just answered, joins it."""
    model = FakeModel(delay=0.5)
    run_jobs(ServeConfig(max_wait_ms=350, quiet_ms=350), model, [(["a"], BEAM4), (["b"], BEAM4), (["c"], BEAM4)], spacing=0.5)
    assert model.calls == [["a"], ["b", "c"]]


def test_batcher_queue_limit_and_cancel():
    async def main():
        model = FakeModel()
        batcher = Batcher(model, ServeConfig(max_queue=3, max_wait_ms=300, quiet_ms=300))
        batcher.start()
        first = batcher.submit(["a", "b"], BEAM4)
        with pytest.raises(Overloaded, match="--max-queue 3"):
            batcher.submit(["c", "d"], BEAM4)
        gone = batcher.submit(["e"], BEAM4)
        batcher.cancel(gone)  # the client went away before the batch was taken
        assert [t.text for t in await first.future] == ["A", "B"]
        await asyncio.get_running_loop().run_in_executor(None, batcher.close)
        return model.calls, gone.future.done()

    calls, gone_done = asyncio.run(main())
    assert calls == [["a", "b"]] and not gone_done  # no work was done for the withdrawn request


PINNED_THREADS = """
import threading, time, torch
from nmt.search import SearchConfig
from nmt.serve import translator_function

class Busy:  # a stand-in Translator: its translate_chunk measures how many cores a large matmul uses
    def with_search(self, search):
        return self
    def translate_chunk(self, lines):
        a = torch.randn(1500, 1500)
        torch.mm(a, a)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(6):
            torch.mm(a, a)
        return (time.process_time() - cpu) / (time.perf_counter() - wall)

torch.set_num_threads(1)
translate = translator_function(Busy())
out = {}
worker = threading.Thread(target=lambda: out.update(ratio=translate(["x"], SearchConfig())))
worker.start()
worker.join()
print(out["ratio"])
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores to tell one thread from two")
def test_the_worker_thread_keeps_the_thread_count():
    """OpenMP gives a new thread every core: without pinning, `--threads 1` ran the model on two (CPU time
    twice the wall time on an idle two-core machine)."""
    env = {k: v for k, v in ENV.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    r = subprocess.run([sys.executable, "-c", PINNED_THREADS], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) < 1.4


# -- the real server ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`nmt serve` in a subprocess; `url` once /health answers 200."""

    def __init__(self, checkpoint: Path, *options: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "nmt", "serve", "-m", str(checkpoint), "--port",
                                      str(self.port), "--threads", "1", *options],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
        deadline = time.monotonic() + 120
        while True:
            assert self.proc.poll() is None, self.proc.stderr.read().decode()
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except (requests.ConnectionError, requests.Timeout):  # refused, or queued while the model loads
                pass
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.1)

    def post(self, path: str, body, **kwargs) -> requests.Response:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return requests.post(self.url + path, data=data, headers={"Content-Type": "application/json"},
                             timeout=60, **kwargs)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        _, stderr = self.proc.communicate(timeout=60)
        return self.proc.returncode, stderr.decode()


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    srv = Server(tiny_checkpoint, "--max-lines", "50", "--max-chars", "300")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def sources(tiny_corpus) -> list[str]:
    return (tiny_corpus / "test.en").read_text(encoding="utf-8").splitlines()[:40]


@pytest.fixture(scope="module")
def offline(tiny_checkpoint, sources) -> list[str]:
    """`nmt translate` of the same lines with the same (default) options."""
    r = ok(nmt("translate", "-m", tiny_checkpoint, "--threads", "1", input="".join(s + "\n" for s in sources)))
    return r.stdout.splitlines()


def test_concurrent_requests_get_what_translate_gives(server, sources, offline):
    """40 clients at once, one line each: merged into batches, each gets its own line's translation."""
    with ThreadPoolExecutor(max_workers=40) as pool:
        got = list(pool.map(lambda s: server.post("/v1/translate", {"text": s}), sources))
    assert all(r.status_code == 200 for r in got), [r.text for r in got if r.status_code != 200][:3]
    assert [r.json()["translations"][0] for r in got] == offline
    body = requests.get(server.url + "/metrics", timeout=10).text
    batches = float(next(line.split()[-1] for line in body.splitlines() if line.startswith("nmt_batch_sentences_count")))
    assert batches < len(sources)  # requests were merged


def test_a_list_comes_back_in_order_and_libretranslate_works(server, sources, offline):
    r = server.post("/v1/translate", {"text": sources})
    assert r.status_code == 200 and r.json()["translations"] == offline
    assert r.json()["model"]["src"] == "en" and len(r.json()["model"]["sha256"]) == 64
    r = server.post("/translate", {"q": sources[0], "source": "en", "target": "de", "format": "text"})
    assert r.json() == {"translatedText": offline[0]}
    r = server.post("/translate", {"q": sources[:2], "source": "auto", "target": "de"})
    assert r.json() == {"translatedText": offline[:2]}


def test_nbest_and_beam_per_request(server, sources):
    r = server.post("/v1/translate", {"text": sources[:2], "beam": 3, "nbest": 3})
    hyps = r.json()["translations"]
    assert [len(h) for h in hyps] == [3, 3]
    assert all(a["score"] >= b["score"] for h in hyps for a, b in zip(h, h[1:]))


@pytest.mark.parametrize("body, status, words", [
    (b'{"text": ', 400, "not valid JSON"),
    (b'{"text": "\xff\xfe"}', 400, "not valid JSON"),
    ({"text": 5}, 422, "text"),
    ({"text": ["a", 5]}, 422, "text"),
    ({"txt": "a"}, 422, "txt"),
    ({"text": []}, 400, "no text"),
    ({"text": ["a"] * 51}, 413, "at most 50"),
    ({"text": "a" * 301}, 413, "at most 300"),
    ({"text": "a", "beam": 0}, 422, "beam"),
    ({"text": "a", "beam": 10**9}, 422, "beam"),
    ({"text": "a", "beam": "4"}, 422, "beam"),
])
def test_bad_requests_get_a_json_error(server, body, status, words):
    r = server.post("/v1/translate", body)
    assert r.status_code == status and words in r.json()["error"], r.text


def test_libretranslate_refuses_another_direction(server):
    r = server.post("/translate", {"q": "a", "source": "de", "target": "en"})
    assert r.status_code == 400 and "translates en to de" in r.json()["error"]


def test_health_and_metrics(server):
    assert requests.get(server.url + "/health", timeout=10).json()["status"] == "ready"
    body = requests.get(server.url + "/metrics", timeout=10).text
    for series in ("nmt_requests_total", "nmt_request_seconds_bucket", "nmt_batch_sentences_bucket",
                   "nmt_translated_sentences_total", "nmt_queue_sentences"):
        assert series in body
    assert requests.get(server.url + "/docs", timeout=10).status_code == 200


def test_a_full_queue_answers_503_with_retry_after(tiny_checkpoint):
    srv = Server(tiny_checkpoint, "--max-queue", "4")
    try:
        r = srv.post("/v1/translate", {"text": ["a man ."] * 5})
        assert r.status_code == 503 and r.headers["Retry-After"] == "1" and "--max-queue 4" in r.json()["error"]
        assert srv.post("/v1/translate", {"text": ["a man ."] * 4}).status_code == 200
    finally:
        srv.stop()


def test_a_client_that_leaves_leaves_no_work_behind(tiny_checkpoint):
    """The batch is taken 2 s after the request arrives; the client is gone after 0.3 s."""
    srv = Server(tiny_checkpoint, "--max-wait-ms", "2000", "--quiet-ms", "2000", "--max-batch-sentences", "1000")
    try:
        body = json.dumps({"text": ["a man is walking ."] * 100}).encode()
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            time.sleep(0.3)
        time.sleep(2.5)
        metrics = requests.get(srv.url + "/metrics", timeout=10).text
        assert "nmt_translated_sentences_total 0.0" in metrics
    finally:
        srv.stop()


def test_sigterm_finishes_what_is_in_flight_then_exits_0(tiny_checkpoint, sources, offline):
    srv = Server(tiny_checkpoint, "--max-wait-ms", "500", "--quiet-ms", "500")
    result = {}
    client = threading.Thread(target=lambda: result.update(r=srv.post("/v1/translate", {"text": sources})))
    client.start()
    time.sleep(0.2)  # the request is in, waiting for its batch
    srv.proc.send_signal(signal.SIGTERM)
    client.join(timeout=60)
    code, stderr = srv.stop()
    assert result["r"].status_code == 200 and result["r"].json()["translations"] == offline
    assert code == 0 and "Traceback" not in stderr, stderr
    with pytest.raises(requests.ConnectionError):  # no longer accepting
        requests.get(srv.url + "/health", timeout=2)


def test_serve_without_the_web_stack_is_one_line(tiny_checkpoint, tmp_path):
    """With fastapi hidden, the command says which extra to install."""
    (tmp_path / "fastapi").mkdir()
    (tmp_path / "fastapi" / "__init__.py").write_text("raise ImportError('hidden for the test')\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), ENV.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "nmt", "serve", "-m", str(tiny_checkpoint), "--port", "0"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and r.stderr.strip() == 'error: nmt serve needs fastapi: pip install "nmt-toolkit[serve]"'


def test_a_busy_port_is_one_line_before_the_model_loads(tmp_path):
    """The port is taken before the checkpoint is read: a missing checkpoint is not even looked at."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "nmt", "serve", "-m", str(tmp_path / "absent.pt"), "--port",
                            str(port)], capture_output=True, text=True, env=ENV, timeout=60)
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert f"--port {port}: cannot listen there" in r.stderr and "another --port" in r.stderr


def test_port_0_reports_the_port_the_system_picked(tiny_checkpoint):
    proc = subprocess.Popen([sys.executable, "-m", "nmt", "serve", "-m", str(tiny_checkpoint), "--port", "0"],
                            stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        line = ""
        while "ready:" not in line:
            line = proc.stderr.readline()
            assert line, "the server ended before it was ready"
        url = line.split(" on ")[1].split()[0]
        assert not url.endswith(":0")
        assert requests.get(url + "/health", timeout=5).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
