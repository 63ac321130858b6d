"""`nmt serve`: the batcher on its own (a fake model whose calls are recorded), then the real server on
127.0.0.1 with a random free port, talked to over HTTP with requests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import shutil
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
pytest.importorskip("python_multipart")
pytest.importorskip("fastapi_offline")
import requests  # noqa: E402
from test_cli import ENV, nmt, ok  # noqa: E402

from nmt.core.errors import ConfigError, InputError, OutputError  # noqa: E402
from nmt.engines.base import Translation  # noqa: E402
from nmt.engines.search import Hypothesis, SearchConfig  # noqa: E402
from nmt.serve import Batcher, Overloaded, RequestError, ServeConfig, TooLarge, check_files  # noqa: E402
from nmt.serve.batcher import PendingRequest  # noqa: E402

# -- the batcher -------------------------------------------------------------------------------------


class FakeModel:
    """Translates a line to its upper case; records the lines of every call (one call = one batch)."""

    def __init__(self, delay: float = 0.0):
        self.calls: list[list[str]] = []
        self.delay = delay

    def __call__(self, lines: list[str], search: SearchConfig) -> list[Translation]:
        self.calls.append(list(lines))
        time.sleep(self.delay)
        # two tokens and the end, log-probability -1.5: a text's score is -0.5 (the mean over its tokens)
        return [Translation(line.upper(), [(line.upper(), Hypothesis([1, 2], -0.5, -1.5))], line) for line in lines]


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
    # a request larger than the batch is cut into batches (slices) of that size, in order
    (ServeConfig(max_wait_ms=200, quiet_ms=200, max_batch_sentences=2), [(["a", "b", "c"], BEAM4)], [["a", "b"], ["c"]]),
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


def test_batcher_waits_for_every_client_just_answered():
    """Under load the batch waits (within max_wait) for as many requests as the last batch answered, even when
    they come farther apart than quiet_ms: a and b run from 0.05 to 0.55 s; their clients come back at 0.6 and
    0.75 s. Cut at quiet_ms, c would go alone and the clients would split into two cohorts for good."""
    async def main():
        model = FakeModel(delay=0.5)
        batcher = Batcher(model, ServeConfig(max_wait_ms=400, quiet_ms=50))
        batcher.start()
        first = [batcher.submit([line], BEAM4) for line in ("a", "b")]
        await asyncio.sleep(0.6)
        later = [batcher.submit(["c"], BEAM4)]
        await asyncio.sleep(0.15)
        later.append(batcher.submit(["d"], BEAM4))
        await asyncio.gather(*(p.future for p in first + later))
        await asyncio.get_running_loop().run_in_executor(None, batcher.close)
        return model.calls

    assert asyncio.run(main()) == [["a", "b"], ["c", "d"]]


def test_batcher_queue_limit_and_withdraw():
    async def main():
        model = FakeModel()
        batcher = Batcher(model, ServeConfig(max_queue=3, max_wait_ms=300, quiet_ms=300))
        batcher.start()
        with pytest.raises(TooLarge, match="--max-queue"):  # could never fit: retrying cannot help
            batcher.submit(["a", "b", "c", "d"], BEAM4)
        first = batcher.submit(["a", "b"], BEAM4)
        with pytest.raises(Overloaded, match="--max-queue 3"):
            batcher.submit(["c", "d"], BEAM4)
        gone = batcher.submit(["e"], BEAM4)
        assert batcher.withdraw(gone)  # the client went away before the batch was taken ...
        assert batcher.queued_lines == 2  # ... and its place in the queue is free at once
        again = batcher.submit(["f"], BEAM4)
        assert [t.text for t in await first.future] == ["A", "B"]
        assert [t.text for t in await again.future] == ["F"]
        await asyncio.get_running_loop().run_in_executor(None, batcher.close)
        return model.calls, gone.future.done()

    calls, gone_done = asyncio.run(main())
    assert calls == [["a", "b", "f"]] and not gone_done  # no work was done for the withdrawn request


class FailingModel(FakeModel):
    """Fails on any call that holds the line "boom" (as the tokenizer did on a lone surrogate)."""

    def __call__(self, lines: list[str], search: SearchConfig) -> list[Translation]:
        out = super().__call__(lines, search)
        if "boom" in lines:
            raise UnicodeEncodeError("utf-8", "boom", 0, 1, "surrogates not allowed")
        return out


def test_a_failing_request_fails_alone():
    """The batch fails; each request is tried again alone: the others get their lines, the culprit its error."""
    async def main():
        model = FailingModel()
        batcher = Batcher(model, ServeConfig(max_wait_ms=200, quiet_ms=200))
        batcher.start()
        pending = [batcher.submit(lines, BEAM4) for lines in (["a"], ["boom", "b"], ["c"])]
        results = await asyncio.gather(*(p.future for p in pending), return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, batcher.close)
        return model.calls, results

    calls, (a, boom, c) = asyncio.run(main())
    assert calls == [["a", "boom", "b", "c"], ["a"], ["boom", "b"], ["c"]]
    assert [t.text for t in a] == ["A"] and [t.text for t in c] == ["C"]
    assert isinstance(boom, UnicodeEncodeError)


class FakeEngine:
    """The engine protocol around FakeModel: search settings and languages, nothing loaded."""

    name = "fake"
    search_cfg = SearchConfig()

    def __init__(self, model: FakeModel, languages: tuple[str, str] = ("en", "de")):
        self.model, self.languages = model, languages
        self.progress = lambda event: None

    def translate_chunk(self, lines: list[str], first_line: int = 0) -> list[Translation]:
        return self.model(lines, self.search_cfg)

    def alignment(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> list[tuple[int, int]]:
        return [(i, i) for i in range(min(len(line.split()), len(hypothesis.tokens)))]

    def with_search(self, cfg: SearchConfig) -> FakeEngine:
        return self

    def with_constraints(self, terms: dict[int, list[str]]) -> FakeEngine:
        return self  # (no search to constrain: a glossary's terms searched for are then placed, or not)


class Broken(FakeModel):
    def __call__(self, lines: list[str], search: SearchConfig) -> list[Translation]:
        raise RuntimeError("device lost\nsecond line")


class StubDetector:
    """A detector whose answer the text names: a text holding "[fr]" is French (confidence 90), one without a
    letter gives no evidence, any other is the first candidate (confidence 50)."""

    def __init__(self, among):
        self.among = list(among)

    def detect(self, text: str):
        from nmt.text.languages import Detection

        if not any(c.isalpha() for c in text):
            return []
        named = [code for code in self.among if f"[{code}]" in text]
        best = named[0] if named else self.among[0]
        return [Detection(best, 90.0 if named else 50.0)] + [Detection(c, 1.0) for c in self.among if c != best]


@contextlib.contextmanager
def in_process(cfg: ServeConfig, translate, **kwargs):
    """The application in this process, on uvicorn in a thread, over FakeEngine: (its URL, its Gate)."""
    from nmt.serve import ModelInfo
    from nmt.serve.app import create_app

    kwargs.setdefault("detector", StubDetector)
    engines = kwargs.pop("engines", [FakeEngine(FakeModel())])
    infos = [ModelInfo("fake", *engine.languages, "0" * 64, {}) for engine in engines]
    gate = create_app(engines, infos, cfg, translate=translate, **kwargs)
    with on_uvicorn(gate) as url:
        yield url, gate


@contextlib.contextmanager
def on_uvicorn(gate):
    """The ASGI application `gate` served by uvicorn in a thread on a free port of 127.0.0.1: its URL."""
    import uvicorn

    from nmt.serve import listen

    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(gate, log_level="critical"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def wait_for(condition, what: str, seconds: float = 30) -> None:
    """Poll `condition` until it holds (a bound against a hang, not a timing the test depends on)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def test_a_failure_of_the_server_itself_is_a_json_500_and_one_log_line():
    """An engine that always fails."""
    errors: list[str] = []
    with in_process(ServeConfig(quiet_ms=0), Broken(), on_error=errors.append) as (url, gate):
        r = requests.post(url + "/v1/translate", json={"text": "a"}, timeout=30)
        assert r.status_code == 500 and r.headers["Content-Type"] == "application/json", r.text
        assert r.json() == {"error": "internal error: RuntimeError: device lost"}
        # the log line follows the answer (the server's thread, after the response went out): wait for it
        wait_for(lambda: errors, "the log line")
        assert errors == ["POST /v1/translate: RuntimeError: device lost"]
    assert gate.counts == {"served": 0, "failed": 1, "dropped": 0}


class Held(FakeModel):
    """Holds its first batch until `release` is set: the engine stays busy for as long as a test needs."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()

    def __call__(self, lines: list[str], search: SearchConfig) -> list[Translation]:
        if not self.calls:
            self.calls.append(list(lines))
            assert self.release.wait(60)
            self.calls.pop()
        return super().__call__(lines, search)


def test_queue_limits_and_a_timed_out_request_is_withdrawn():
    """--max-queue 4: 5 lines can never fit (413); 3 + 3 lines do not fit now (503, retry). The engine is held
    busy with a first request (which times out too, in its batch), so the 3 lines queued behind it time out
    (--timeout 1): the 504 takes them out of the queue at once, and they are never translated. (Before --max-wait-ms and --quiet-ms were refused at or
    past --timeout, this test waited for a batch taken 3 s late.)"""
    model = Held()
    cfg = ServeConfig(max_queue=4, timeout=1.0, max_wait_ms=0, quiet_ms=0)
    with in_process(cfg, model) as (url, gate), ThreadPoolExecutor(max_workers=2) as pool:
        post = lambda lines: requests.post(url + "/v1/translate", json={"text": lines}, timeout=60)  # noqa: E731
        health = lambda: requests.get(url + "/health", timeout=10).json()  # noqa: E731
        first = pool.submit(post, ["a"])
        wait_for(lambda: model.calls == [["a"]], "the first batch")
        r = post(["b"] * 5)
        assert r.status_code == 413 and "--max-queue" in r.json()["error"], r.text
        late = pool.submit(post, ["c"] * 3)
        wait_for(lambda: health()["queued_lines"] == 3, "the request behind the busy engine")
        r = post(["d"] * 3)
        assert r.status_code == 503 and r.headers["Retry-After"] == "1" and "--max-queue 4" in r.json()["error"]
        r = late.result(timeout=60)
        assert r.status_code == 504 and "--timeout" in r.json()["error"], r.text
        assert health()["queued_lines"] == 0
        assert first.result(timeout=60).status_code == 504  # in its batch: translated, the answer dropped
        model.release.set()
        assert post(["e"]).json()["translations"] == ["E"]
    assert model.calls == [["a"], ["e"]]  # the lines that timed out in the queue were never translated


PINNED_THREADS = """
import threading, time, torch
from nmt.engines.search import SearchConfig
from nmt.engines.base import Translation
from nmt.serve import translate_function
from nmt.serve.backend import Job

class Busy:  # a stand-in engine: its translate_chunk measures how many cores a large matmul uses
    name, search_cfg, languages, progress = "busy", SearchConfig(), ("en", "de"), None
    def with_search(self, search):
        return self
    def translate_chunk(self, lines, first_line=0):
        a = torch.randn(1500, 1500)
        torch.mm(a, a)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(6):
            torch.mm(a, a)
        return [Translation(str((time.process_time() - cpu) / (time.perf_counter() - wall)), [], lines[0])]

torch.set_num_threads(1)
translate = translate_function({("en", "de"): Busy()})
out = {}
worker = threading.Thread(target=lambda: out.update(ratio=translate(["x"], Job(("en", "de"), SearchConfig()))))
worker.start()
worker.join()
print(out["ratio"][0].text)
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

    def __init__(self, checkpoint: Path, *options: str, wrap: tuple[str, ...] = (), env: dict | None = None):
        """`wrap`: a command that runs the server's (as its arguments), such as a shell that adds a pipe; `env`:
        its environment (default: the tests')."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([*wrap, sys.executable, "-m", "nmt", "serve", "-m", str(checkpoint), "--port",
                                      str(self.port), "--threads", "1", *options],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or ENV)
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
    """`nmt translate` of the same lines with the same (default) options, on the torch engine: the server's
    engine (auto: CTranslate2 where installed) must answer the same."""
    r = ok(nmt("translate", "-m", tiny_checkpoint, "--threads", "1", "--engine", "torch",
               input="".join(s + "\n" for s in sources)))
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


def test_the_server_names_its_engine(server):
    """auto: CTranslate2 where installed (the test extra installs it), torch otherwise."""
    try:
        import ctranslate2  # noqa: F401
        expected = "ctranslate2"
    except ImportError:
        expected = "torch"
    assert requests.get(server.url + "/health", timeout=10).json()["model"]["engine"] == expected


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_a_server_on_either_engine_answers_as_translate(tiny_checkpoint, sources, offline, engine):
    """Concurrent requests merged into batches by nmt's batcher, over either engine: `nmt translate`'s lines."""
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
    srv = Server(tiny_checkpoint, "--engine", engine)
    try:
        assert requests.get(srv.url + "/health", timeout=10).json()["model"]["engine"] == engine
        with ThreadPoolExecutor(max_workers=20) as pool:
            got = list(pool.map(lambda s: srv.post("/v1/translate", {"text": s}), sources))
        assert [r.json()["translations"][0] for r in got] == offline
        r = srv.post("/v1/translate", {"text": sources[:4], "beam": 3, "nbest": 2})
        assert [len(h) for h in r.json()["translations"]] == [2] * 4
    finally:
        code, stderr = srv.stop()
    assert code == 0 and f"{engine} engine)" in stderr, stderr


def test_a_list_comes_back_in_order_and_libretranslate_works(server, sources, offline):
    r = server.post("/v1/translate", {"text": sources})
    assert r.status_code == 200 and r.json()["translations"] == offline
    assert r.json()["model"]["src"] == "en" and len(r.json()["model"]["sha256"]) == 64
    r = server.post("/translate", {"q": sources[0], "source": "en", "target": "de", "format": "text"})
    assert r.json() == {"translatedText": offline[0]}
    r = server.post("/translate", {"q": sources[:2], "source": "auto", "target": "de"})
    assert r.json()["translatedText"] == offline[:2]
    assert [d["language"] for d in r.json()["detectedLanguage"]] == ["en"] * 2


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


def test_a_request_sets_the_search_settings_of_the_decoding_table():
    """POST /v1/translate takes the search settings that nmt.engines.decoding lets a request set (beam, nbest),
    between the text and the key; the server checks them as the config does (422 with the setting's name)."""
    from nmt.engines.decoding import REQUEST_OPTIONS
    from nmt.serve.schemas import TranslateRequest, settings_of

    assert list(TranslateRequest.model_fields) == ["text", "source", "target", "format", "scores",
                                                   *(o.field for o in REQUEST_OPTIONS), "glossary", "api_key"]
    assert settings_of(TranslateRequest(text="a", nbest=2)) == {"beam": None, "nbest": 2}


def test_one_bad_request_fails_alone(server, sources, offline):
    """A lone surrogate broke the tokenizer, and with it the 10 requests of its batch (plain-text 500s)."""
    texts = sources[:10]
    texts[3] = "a man \ud800 is walking ."
    with ThreadPoolExecutor(max_workers=10) as pool:
        got = list(pool.map(lambda t: server.post("/v1/translate", {"text": t}), texts))
    bad = got.pop(3)
    assert bad.status_code == 400 and "lone surrogate" in bad.json()["error"], bad.text
    assert [r.status_code for r in got] == [200] * 9
    assert [r.json()["translations"][0] for r in got] == offline[:3] + offline[4:10]


@pytest.mark.parametrize("method, path, body, headers, status", [
    ("GET", "/nowhere", None, {}, 404),
    ("DELETE", "/v1/translate", None, {}, 405),
    ("POST", "/v1/translate", b'{"text": 5}', {"Content-Type": "application/json"}, 422),
    ("POST", "/v1/translate", b'{"text": ', {"Content-Type": "application/json"}, 400),
    ("POST", "/translate", b"q=a", {"Content-Type": "text/plain"}, 415),
    ("POST", "/translate", b"[" * 100_000, {"Content-Type": "application/json"}, 400),
    ("POST", "/v1/translate", b"[" * 100_000, {"Content-Type": "application/json"}, 400),
    ("POST", "/translate", b"q=a&source=en", {"Content-Type": "application/x-www-form-urlencoded"}, 400),
    ("POST", "/v1/translate", json.dumps({"text": ["a"] * 51}).encode(), {"Content-Type": "application/json"}, 413),
    ("POST", "/static-offline-docs/swagger-ui.css", b"", {}, 405),
])
def test_every_error_is_json(server, method, path, body, headers, status):
    r = requests.request(method, server.url + path, data=body, headers=headers, timeout=30)
    assert r.status_code == status and r.headers["Content-Type"] == "application/json", (r.status_code, r.text)
    assert set(r.json()) == {"error"} and r.json()["error"]


def raw_request(port: int, head: bytes, body_chunks=(), pause: float = 0.0) -> tuple[bytes, float, int]:
    """Send `head` and then the chunks, stopping as soon as the server answers; (what it answered, the
    seconds that took, the body bytes sent). Reads until the server closes the connection."""
    start = time.monotonic()
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        for chunk in body_chunks:
            if select.select([s], [], [], pause)[0]:
                break  # the answer is there: stop sending
            try:
                s.sendall(chunk)
            except OSError:  # the server closed the connection
                break
            sent += len(chunk)
        answer = b""
        try:
            while data := s.recv(65536):
                answer += data
        except OSError:
            pass
    return answer, time.monotonic() - start, sent


def test_a_huge_body_is_refused_from_its_content_length(server):
    """A 500 MB body was buffered whole (1.6 GB of memory); now its Content-Length gets a 413 at once, and the
    connection is closed without reading it."""
    head = (b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 500000000\r\n\r\n")
    answer, seconds, _ = raw_request(server.port, head, [b'{"text": "' + b"a" * 1000])
    status, _, body = answer.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 413") and b"connection: close" in status.lower(), answer[:300]
    assert "500,000,000 bytes" in json.loads(body)["error"] and seconds < 10


def test_a_chunked_body_is_counted_as_it_streams(server):
    """No Content-Length: the bytes are counted as they come, and the 413 comes once they pass the limit
    (--max-lines 50 x --max-chars 300 here: about 150 kB), long before the 4 MB the client would send."""
    head = (b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (16384, b"a" * 16384)
    answer, _, sent = raw_request(server.port, head, [chunk] * 256, pause=0.02)
    status, _, body = answer.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 413"), answer[:300]
    assert "bytes arrived" in json.loads(body.split(b"\r\n")[1] if body[:1] != b"{" else body)["error"]
    assert sent < 1_000_000


def test_libretranslate_forms_lines_and_alternatives(server, sources, offline):
    """LibreTranslate's clients send forms (urlencoded or multipart) and texts of several lines."""
    text = "\n".join(sources[:3])
    form = {"q": text, "source": "en", "target": "de"}
    for r in (requests.post(server.url + "/translate", data=form, timeout=60),
              requests.post(server.url + "/translate", files={k: (None, v) for k, v in form.items()}, timeout=60),
              server.post("/translate", form)):
        assert r.status_code == 200 and r.json() == {"translatedText": "\n".join(offline[:3])}, r.text
    r = server.post("/translate", {"q": [sources[0], sources[1]], "source": "auto", "target": "de", "alternatives": 2})
    out = r.json()
    assert out["translatedText"] == offline[:2]
    assert [d["language"] for d in out["detectedLanguage"]] == ["en"] * 2
    assert len(out["alternatives"]) == 2 and all(0 < len(a) <= 2 for a in out["alternatives"])
    assert all(alt != best for alts, best in zip(out["alternatives"], offline[:2]) for alt in alts)
    r = requests.post(server.url + "/translate", data={"q": "a", "target": "de", "alternatives": "x"}, timeout=60)
    assert r.status_code == 400 and "alternatives" in r.json()["error"]


def test_docs_work_offline(server):
    """/docs and /redoc load their scripts and styles from this server, not from a CDN."""
    for page in ("/docs", "/redoc"):
        html = requests.get(server.url + page, timeout=10).text
        urls = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"url: '([^']+)'", html)
        urls += re.findall(r'spec-url="([^"]+)"', html)
        assert any(u.endswith(".js") for u in urls), html
        for url in urls:
            assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from elsewhere"
            r = requests.get(server.url + url, timeout=10)
            assert r.status_code == 200 and len(r.content) > 100, url


def test_libretranslate_refuses_another_direction(server):
    r = server.post("/translate", {"q": "a", "source": "de", "target": "en"})
    assert r.status_code == 400 and r.json()["error"] == "de is not supported: this server translates en to de"


@pytest.mark.parametrize("texts, lines", [
    (["a\nb\nc\n"], 3),  # a last line break ends the last line: a file of 3 lines, each ending in a newline
    (["a\nb\nc"], 3), (["a\r\nb\rc\r\n"], 3), (["a\n\n"], 2), (["\n"], 1), ([""], 1),
    (["a\nb\nc\n\n"], 4), (["a", "b\n", "c"], 3),
])
def test_lines_are_counted_as_a_files_lines(texts, lines):
    """--max-lines N takes a text of N lines whether or not its last line ends with a line break (a 256-line .txt
    upload was refused by --max-lines 256 as 257 lines)."""
    from nmt.serve.service import Service

    service = Service(Batcher(lambda lines, search: [], ServeConfig(max_wait_ms=0)), ServeConfig(max_lines=lines),
                      {}, SearchConfig())
    assert service.texts(texts) == texts
    service.cfg = ServeConfig(max_lines=lines - 1) if lines > 1 else service.cfg
    if lines > 1:
        with pytest.raises(TooLarge, match=f"^{lines} lines in one request"):
            service.texts(texts)


def test_the_translating_routes_are_marked_where_they_are_declared():
    """A route that translates bears `@translating` (its latency is measured): nmt's /v1/translate and
    LibreTranslate's /translate and /translate_file; the other routes do not."""
    from nmt.serve import libre, native, web
    from nmt.serve.service import translating_paths

    routes = [*native.router.routes, *libre.router.routes, *web.router.routes]
    assert translating_paths(routes) == {"/v1/translate", "/translate", "/translate_file"}


def test_health_and_metrics(server):
    health = requests.get(server.url + "/health", timeout=10).json()
    assert health["status"] == "ok" and [m["src"] for m in health["models"]] == ["en"]
    body = requests.get(server.url + "/metrics", timeout=10).text
    for series in ("nmt_requests_total", "nmt_request_seconds_bucket", "nmt_batch_sentences_bucket",
                   "nmt_translated_sentences_total", "nmt_queue_sentences"):
        assert series in body
    assert requests.get(server.url + "/docs", timeout=10).status_code == 200


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


@pytest.mark.slow
def test_sigterm_drains_in_bounded_time_despite_stalled_clients(tiny_checkpoint, sources, offline):
    """SIGTERM: the request in flight is answered; a client that sent half a body and stopped, and one that does
    not read its answers, are cut after --drain-timeout (uvicorn waited for them, then printed tracebacks);
    the summary line counts them as dropped."""
    srv = Server(tiny_checkpoint, "--max-wait-ms", "500", "--quiet-ms", "500", "--drain-timeout", "2")
    half = socket.create_connection(("127.0.0.1", srv.port))
    half.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\n\r\n{\"text\": \"a")
    deaf = socket.socket()
    deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small receive window
    deaf.connect(("127.0.0.1", srv.port))
    deaf.sendall(b"GET /static-offline-docs/swagger-ui-bundle.js HTTP/1.1\r\nHost: x\r\n\r\n" * 16)  # ~24 MB
    result = {}
    client = threading.Thread(target=lambda: result.update(r=srv.post("/v1/translate", {"text": sources})))
    client.start()
    time.sleep(0.3)  # the request is in, waiting for its batch; the deaf client's answers fill the buffers
    start = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    try:
        client.join(timeout=60)
        _, stderr = srv.proc.communicate(timeout=30)
    finally:
        half.close()
        deaf.close()
    assert time.monotonic() - start < 12, "the drain was not bounded by --drain-timeout"
    assert "connection(s) still open after --drain-timeout 2s" in stderr.decode()  # the log names the option
    assert result["r"].status_code == 200 and result["r"].json()["translations"] == offline
    assert srv.proc.returncode == 0 and "Traceback" not in stderr.decode(), stderr.decode()
    summary = re.search(r"stopped: (\d+) request\(s\) served, (\d+) failed, (\d+) dropped", stderr.decode())
    assert summary, stderr.decode()
    served, failed, dropped = map(int, summary.groups())
    assert served >= 2 and failed == 0 and dropped == 2, stderr.decode()  # /health and the translation; half, deaf
    with pytest.raises(requests.ConnectionError):  # no longer accepting
        requests.get(srv.url + "/health", timeout=2)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux), a device every write fills")
def test_an_access_log_on_a_full_disk_loses_lines_not_the_server():
    """Every write to /dev/full fails as on a full disk: said once, naming the option and the file; serving goes on;
    the log closes without an error."""
    from nmt.serve.server import access_log

    said: list[str] = []
    with access_log(Path("/dev/full"), said.append) as write:
        for _ in range(3):
            write("POST /v1/translate 200")
    assert said[0].startswith("warning: `access_log` /dev/full: cannot write (No space left on device)")  # (--access-log)
    assert said[0].endswith("(its lines are lost until it can be written; serving goes on)")
    assert len(said) == 1  # once: neither each line nor the close says it again


def test_libretranslate_client_keys_and_access_log(tiny_checkpoint, tmp_path, sources, offline):
    """The third-party client libretranslatepy against a real server started with --api-keys; every request
    is a line of --access-log."""
    libretranslatepy = pytest.importorskip("libretranslatepy")
    from urllib.error import HTTPError

    (tmp_path / "keys").write_text("# our clients\nk-one\n\nk-two\n")
    log = tmp_path / "access.log"
    srv = Server(tiny_checkpoint, "--api-keys", str(tmp_path / "keys"), "--access-log", str(log))
    try:
        lt = libretranslatepy.LibreTranslateAPI(srv.url, api_key="k-two")
        assert lt.translate(sources[0], "en", "de") == offline[0]
        assert lt.translate(sources[0] + "\n" + sources[1], "auto", "de") == offline[0] + "\n" + offline[1]
        assert [d["language"] for d in lt.detect(sources[0])] == ["en"]
        assert lt.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                                  {"code": "de", "name": "German", "targets": []}]
        for key, message in ((None, "Missing API key"), ("k-three", "Invalid API key")):
            with pytest.raises(HTTPError) as e:
                libretranslatepy.LibreTranslateAPI(srv.url, api_key=key).translate(sources[0], "en", "de")
            assert e.value.code == 403 and json.loads(e.value.read())["error"].startswith(message)
        r = srv.post("/v1/translate", {"text": sources[:2], "api_key": "k-one"})
        assert r.status_code == 200 and r.json()["translations"] == offline[:2]
        assert srv.post("/v1/translate", {"text": "a"}).status_code == 403
        settings = requests.get(srv.url + "/frontend/settings", timeout=10).json()
        assert settings["keyRequired"] is True and settings["language"]["target"]["code"] == "de"
    finally:
        code, stderr = srv.stop()
    assert code == 0, stderr
    lines = log.read_text().splitlines()
    line = r"\S+ 127\.0\.0\.1:\d+ {} {} {} {} \d+\.\d{{3}}"
    for method, path, status, n in (("POST", "/translate", 200, 1), ("POST", "/translate", 200, 2),
                                    ("POST", "/detect", 200, 0), ("GET", "/languages", 200, 0),
                                    ("POST", "/translate", 403, 0), ("POST", "/v1/translate", 200, 2)):
        assert any(re.fullmatch(line.format(method, path, status, n), x) for x in lines), (method, path, status, lines)


# -- any JSON string in any field ----------------------------------------------------------------------

KEY = "k-one"


class Big(str):
    """A 1 MB string that a failing example names in two letters."""

    def __repr__(self) -> str:
        return "MB"


MB = Big("x" * 1_000_000)
# Each route's fields: a value that is fine, and the fields that hold strings (a field left at its fine value
# lets the request reach the checks of the others: a valid key, then the languages and the format).
ROUTES = {
    "/v1/translate": {"text": "a man .", "api_key": KEY},
    "/translate": {"q": "a man .", "source": "en", "target": "de", "format": "text", "api_key": KEY},
    "/detect": {"q": "a man .", "api_key": KEY},
}


@pytest.fixture(scope="module")
def keyed_server(tiny_checkpoint, tmp_path_factory):
    """A server with --api-keys, and room in a body for a 1 MB field (so that it reaches the field's checks)."""
    keys = tmp_path_factory.mktemp("keys") / "keys"
    keys.write_text(KEY + "\n")
    srv = Server(tiny_checkpoint, "--api-keys", str(keys), "--max-lines", "50", "--max-chars", "300",
                 "--max-body-bytes", "4000000")
    yield srv
    srv.stop()


def send(url: str, path: str, fields: dict, how: str = "json") -> requests.Response:
    """POST `fields` as JSON (a lone surrogate written as JSON's \\ud800), or as a form, urlencoded or multipart
    (their UTF-8 bytes, a lone surrogate's three included, as a client that does not check them sends them)."""
    from urllib.parse import urlencode

    if how == "multipart":  # written here: a client library refuses a field name that is not UTF-8
        utf8 = lambda text: text.encode("utf-8", "surrogatepass")  # noqa: E731
        body = b"".join(b'--b0undary\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % (utf8(k), utf8(v))
                        for k, vs in fields.items() for v in (vs if isinstance(vs, list) else [vs])) + b"--b0undary--\r\n"
        return requests.post(url + path, data=body, headers={"Content-Type": "multipart/form-data; boundary=b0undary"},
                             timeout=120)
    if how == "json":
        body, kind = json.dumps(fields).encode(), "application/json"
    else:
        body = urlencode(fields, doseq=True, encoding="utf-8", errors="surrogatepass").encode()
        kind = "application/x-www-form-urlencoded"
    return requests.post(url + path, data=body, headers={"Content-Type": kind}, timeout=120)


def assert_json_answer(r: requests.Response) -> None:
    """Below 500, JSON, and an error is `{"error": "..."}` of one short line."""
    assert r.status_code < 500, (r.status_code, r.text[:300])
    assert r.headers["Content-Type"] == "application/json", r.headers
    body = r.json()
    if r.status_code >= 400:
        assert set(body) == {"error"} and "\n" not in body["error"] and len(body["error"]) < 400, body


@pytest.mark.parametrize("path, fields, status, words", [
    # a lone surrogate in the key: it was a 500 (the key could not be encoded to be compared)
    ("/v1/translate", {"api_key": "\ud800"}, 403, "Invalid API key"),
    ("/translate", {"api_key": "\ud800"}, 403, "Invalid API key"),
    ("/detect", {"api_key": "\ud800"}, 403, "Invalid API key"),
    ("/v1/translate", {"api_key": "k-one\x00"}, 403, "Invalid API key"),
    ("/translate", {"api_key": MB}, 403, "Invalid API key"),
    # ... and, with a valid key, in a field the 400 quotes: it was a 500 (the message could not be encoded)
    ("/translate", {"source": "\ud800"}, 400, "\\ud800 is not supported"),
    ("/translate", {"target": "\udfff\ud800"}, 400, "\\udfff\\ud800 is not supported"),
    ("/translate", {"format": "\ud800"}, 400, "\\ud800 format is not supported"),
    ("/translate", {"format": "a\x00b"}, 400, "a\\x00b format is not supported"),
    ("/translate", {"format": MB}, 400, "x" * 40 + "... format is not supported"),  # not quoted whole
    ("/translate", {"target": MB}, 400, "x" * 40 + "... is not supported"),
    # in the text: its own 400 (a surrogate), 413 (too long), or a translation (NUL is a character)
    ("/v1/translate", {"text": "\ud800"}, 400, "lone surrogate"),
    ("/v1/translate", {"text": ["a", "\udc80"]}, 400, "line 1: character 0 is a lone surrogate"),
    ("/translate", {"q": "a\n\ud800"}, 400, "lone surrogate"),
    ("/v1/translate", {"text": MB}, 413, "at most 300"),
    ("/translate", {"q": MB}, 413, "at most 300"),
    ("/v1/translate", {"text": "a\x00man"}, 200, ""),
    ("/translate", {"q": "a\x00\u2028man\x85."}, 200, ""),
    ("/detect", {"q": "\ud800"}, 400, "lone surrogate"),
    # a field name the client made up, quoted in the 422 (not whole)
    ("/v1/translate", {"\ud800" * 100: 1}, 422, "invalid request"),
    ("/v1/translate", {"y" * 100_000: 1}, 422, "y" * 40 + "...: Extra inputs are not permitted"),
])
def test_named_strings_in_every_field(keyed_server, path, fields, status, words):
    r = send(keyed_server.url, path, {**ROUTES[path], **fields})
    assert_json_answer(r)
    assert r.status_code == status and words in (r.json()["error"] if status >= 400 else words), r.text[:300]


def any_string(big: bool = True):
    """Any string JSON can carry: every code point (lone surrogates, NUL, controls), or one of a few worst cases
    (`big`: a 1 MB one among them)."""
    from hypothesis import strategies as st

    worst = ["", "\ud800", "\udfff", "\x00", "\u2028", "\ufeff", "\n\r\n", " ", *([MB] if big else [])]
    return st.one_of(st.text(st.characters(exclude_categories=())), st.sampled_from(worst))


HOSTILE = [(path, field) for path, fields in ROUTES.items() for field in [*fields, "all"]] + [("/languages", "api_key")]


@pytest.mark.parametrize("path, hostile", HOSTILE)
def test_any_json_string_in_any_field_is_an_answer_or_a_4xx(keyed_server, path, hostile):
    """Random strings in every string field of every route, never a 500 and always JSON: one field at a time,
    the others fine (so that the request reaches that field's checks: the key's, the languages', the model's
    for a text), or all of them at once (with a made-up field too); as JSON, and as a form where the route
    takes one."""
    from urllib.parse import urlencode

    from hypothesis import HealthCheck, event, given, settings
    from hypothesis import strategies as st

    fine = ROUTES.get(path, {"api_key": KEY})
    big = path != "/languages"  # its fields are in a URL, where 1 MB is the HTTP parser's to refuse
    wild = {name: any_string(big) if name not in ("text", "q") else
            st.one_of(any_string(big), st.lists(any_string(big), min_size=1, max_size=3)) for name in fine}
    value = {name: wild[name] if hostile in (name, "all") else st.just(v) for name, v in fine.items()}
    extra = st.dictionaries(any_string(), any_string(), max_size=1 if hostile == "all" else 0)
    forms = ["json", "form", "multipart"] if path in ("/translate", "/detect") else ["json"]

    @settings(derandomize=True, max_examples=60, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(fields=st.fixed_dictionaries(value), more=extra, how=st.sampled_from(forms))
    def check(fields, more, how):
        if path == "/languages":  # a GET: its query string, percent-encoded UTF-8 (a surrogate's too)
            query = urlencode(fields, encoding="utf-8", errors="surrogatepass")
            r = requests.get(f"{keyed_server.url}{path}?{query}", timeout=60)
        else:
            r = send(keyed_server.url, path, {**fields, **more}, how)
        event(f"status {r.status_code}")  # --hypothesis-show-statistics: how many were translated, refused
        assert_json_answer(r)

    check()


def test_alternatives_nbest_and_beam_are_bounded(keyed_server, tmp_path):
    """alternatives=1000 was a beam of 1001 for each line; --max-beam (16) bounds what a request may ask for."""
    cases = [("/translate", {"q": "a", "target": "de", "alternatives": 1000}, 400,
              "Invalid request: alternatives parameter must be <= 15 (--max-beam 16)"),
             ("/translate", {"q": "a", "target": "de", "alternatives": 16}, 400, "must be <= 15"),
             ("/v1/translate", {"text": "a", "beam": 1001}, 422,
              "beam 1001: this server searches at most 16 wide per request (--max-beam)"),
             ("/v1/translate", {"text": "a", "nbest": 17}, 422, "nbest 17: this server searches at most 16"),
             ("/v1/translate", {"text": "a", "beam": 17, "nbest": 1}, 422, "beam 17")]
    for path, fields, status, words in cases:
        r = send(keyed_server.url, path, {**fields, "api_key": KEY})
        assert r.status_code == status and words in r.json()["error"], (fields, r.text)
    r = send(keyed_server.url, "/v1/translate", {"text": "a man .", "beam": 16, "nbest": 16, "api_key": KEY})
    assert r.status_code == 200 and len(r.json()["translations"][0]) == 16, r.text
    form = {"q": "a", "target": "de", "alternatives": "9" * 5000, "api_key": KEY}  # past Python's int-string limit
    assert_json_answer(r := send(keyed_server.url, "/translate", form, "form"))
    assert r.status_code == 400 and "alternatives" in r.json()["error"], r.text


def test_max_beam_is_the_server_s_option():
    """A narrower --max-beam; and a server whose own --beam is wider still takes requests of its width."""
    from nmt.serve.service import Service

    service = Service(Batcher(lambda lines, search: [], ServeConfig(max_wait_ms=0)), ServeConfig(max_beam=2),
                      {}, SearchConfig())
    assert service.widest == 4  # the server's own beam
    assert service.search_for({"beam": 4, "nbest": 4}).beam == 4
    with pytest.raises(RequestError) as wide:
        service.search_for({"beam": None, "nbest": 5}, 400)
    assert (wide.value.status, wide.value.message) == (400, "nbest 5: this server searches at most 4 wide per "
                                                            "request (--max-beam)")
    service = Service(service.batcher, ServeConfig(max_beam=2), {}, SearchConfig(beam=1))
    with pytest.raises(RequestError, match=r"^beam 3: .* at most 2 wide"):
        service.search_for({"beam": 3, "nbest": None})


def test_a_request_without_settings_gets_its_direction_s_default_search_as_checked_at_start():
    from nmt.serve.service import Service

    batcher = Batcher(lambda lines, search: [], ServeConfig(max_wait_ms=0))
    en_de, de_en = SearchConfig(beam=4), SearchConfig(beam=2, lenpen=1.0)
    service = Service(batcher, ServeConfig(), {}, en_de, searches={("en", "de"): en_de, ("de", "en"): de_en})
    assert service.search_for({"beam": None, "nbest": None}, direction=("de", "en")) is de_en
    assert service.search_for({}, direction=("en", "de")) is en_de
    assert service.search_for({"beam": 3}, direction=("de", "en")) == SearchConfig(beam=3, lenpen=1.0)
    with pytest.raises(ConfigError, match="nbest"):  # a default search that is wrong is refused when made
        Service(batcher, ServeConfig(), {}, SearchConfig(beam=2, nbest=3))


@pytest.mark.parametrize("environ, expected", [
    ({}, {"tracing": False, "metrics": False, "logs": False}),
    ({"PATH": "/bin", "OTEL": "x"}, {"tracing": False, "metrics": False, "logs": False}),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, None),
    ({"OTEL_SERVICE_NAME": "nmt"}, None),
])
def test_fastapi_s_own_telemetry_is_on_only_where_opentelemetry_is_configured(environ, expected):
    from nmt.serve.app import telemetry

    assert telemetry(environ) == expected


@pytest.mark.parametrize("fields, error, words", [
    (dict(api_keys=Path("absent-keys.txt")), InputError, "`api_keys` absent-keys.txt: cannot read"),
    (dict(api_keys=Path("empty-keys.txt")), ConfigError, "`api_keys` empty-keys.txt: holds no key"),
    (dict(access_log=Path(".")), OutputError, "`access_log` .: is a folder"),
    (dict(access_log=Path("access.log.gz")), ConfigError, "`access_log` access.log.gz: the log is appended to"),
    (dict(access_log=Path("access.log.zst")), OutputError, "`access_log` access.log.zst: nmt writes text plain or"),
    (dict(drain_timeout=-1.0), ConfigError, "`drain_timeout` must be at least"),
    (dict(max_body_bytes=-5), ConfigError, "`max_body_bytes` must be at least"),
    (dict(max_beam=0), ConfigError, "`max_beam` must be at least 1"),
    # every lone request waited past its timeout, and got 504
    (dict(quiet_ms=5000.0, max_wait_ms=5000.0, timeout=1.0), ConfigError,
     "`quiet_ms` 5000 is not below `timeout` 1 s (1000 ms): requests would time out waiting for their batch; "
     "lower `quiet_ms` or raise `timeout`"),
    (dict(quiet_ms=1000.0, timeout=1.0), ConfigError, "`quiet_ms` 1000 is not below `timeout` 1 s"),
    (dict(max_wait_ms=60_000.0), ConfigError, "`max_wait_ms` 60000 is not below `timeout` 60 s (60000 ms)"),
    # read whole until memory ran out
    pytest.param(dict(api_keys=Path("/dev/zero")), InputError, "`api_keys` /dev/zero: holds more than 16 MiB",
                 marks=pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")),
])
def test_bad_serve_options(tmp_path, monkeypatch, fields, error, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty-keys.txt").write_text("# none yet\n\n")
    with pytest.raises(error, match=re.escape(words)):
        check_files(ServeConfig(**fields).validate())


def test_api_keys_are_read_plain_or_compressed(tmp_path):
    import gzip

    from nmt.serve.service import read_api_keys

    (tmp_path / "keys").write_text("\ufeff# ours\nalpha\n\n beta \n", encoding="utf-8")
    (tmp_path / "keys.gz").write_bytes(gzip.compress((tmp_path / "keys").read_bytes()))
    assert read_api_keys(tmp_path / "keys") == read_api_keys(tmp_path / "keys.gz") == {"alpha", "beta"}
    (tmp_path / "damaged.gz").write_bytes((tmp_path / "keys.gz").read_bytes()[:-10])
    with pytest.raises(InputError, match="`api_keys` .*damaged.gz"):
        read_api_keys(tmp_path / "damaged.gz")


def test_a_bad_key_file_is_one_line_before_the_model_loads(tmp_path):
    r = subprocess.run([sys.executable, "-m", "nmt", "serve", "-m", str(tmp_path / "absent.pt"), "--port", "0",
                        "--api-keys", "absent-keys.txt"], capture_output=True, text=True, env=ENV, timeout=60,
                       cwd=tmp_path)
    assert r.returncode == 1 and r.stderr == "error: --api-keys absent-keys.txt: cannot read (No such file or " \
                                             "directory); check the path\n", r.stderr


@pytest.mark.parametrize("options, line", [
    (["--quiet-ms", "5000", "--max-wait-ms", "5000", "--timeout", "1"],
     "error: --quiet-ms 5000 is not below --timeout 1 s (1000 ms): requests would time out waiting for their batch; "
     "lower --quiet-ms or raise --timeout\n"),
    (["--max-beam", "0"], "error: --max-beam must be at least 1, got 0\n"),
    pytest.param(["--api-keys", "/dev/zero"], "error: --api-keys /dev/zero: holds more than 16 MiB",
                 marks=pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")),
])
def test_a_bad_serve_option_is_one_line_naming_it_before_the_model_loads(tmp_path, options, line):
    r = subprocess.run([sys.executable, "-m", "nmt", "serve", "-m", str(tmp_path / "absent.pt"), "--port", "0",
                        *options], capture_output=True, text=True, env=ENV, timeout=120, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith(line) and r.stderr.count("\n") == 1, r.stderr


def test_the_key_file_is_read_once(tmp_path, monkeypatch):
    """The command checked the file, then the application read it again: a second read of a pipe is empty."""
    from nmt.serve import service as keyfiles

    reads = []
    read = keyfiles.read_small_text
    monkeypatch.setattr(keyfiles, "read_small_text", lambda path, *a, **k: reads.append(path) or read(path, *a, **k))
    (tmp_path / "keys").write_text("k-once\n")
    cfg = ServeConfig(api_keys=tmp_path / "keys", max_wait_ms=0)
    keys = check_files(cfg)
    with in_process(cfg, FakeModel(), keys=keys) as (url, _):
        r = requests.post(url + "/v1/translate", json={"text": "a", "api_key": "k-once"}, timeout=30)
        assert r.status_code == 200 and r.json()["translations"] == ["A"], r.text
    assert reads == [tmp_path / "keys"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash for <(...)")
def test_api_keys_from_a_pipe(tiny_checkpoint):
    """`--api-keys <(...)`: the server started only to stop at once on "holds no key" (its second read)."""
    srv = Server(tiny_checkpoint, wrap=("bash", "-c", 'exec "$@" --api-keys <(printf "# ours\\nk-pipe\\n")', "bash"))
    try:
        assert srv.post("/v1/translate", {"text": "a man .", "api_key": "k-pipe"}).status_code == 200
        assert srv.post("/v1/translate", {"text": "a man .", "api_key": "k-other"}).status_code == 403
    finally:
        code, stderr = srv.stop()
    assert code == 0, stderr


def test_serve_without_the_web_stack_is_one_line(tiny_checkpoint, tmp_path):
    """With fastapi hidden, the command says which extra to install."""
    (tmp_path / "fastapi").mkdir()
    (tmp_path / "fastapi" / "__init__.py").write_text("raise ImportError('hidden for the test')\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), ENV.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "nmt", "serve", "-m", str(tiny_checkpoint), "--port", "0"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == 'error: nmt serve needs fastapi, fastapi-offline: pip install "nmt-toolkit[serve]"'


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


def test_the_server_s_library_errors_name_fields_and_its_answers_keep_their_words(tmp_path):
    """The library names the server's settings as fields (`port`), which the command line shows as options;
    an HTTP answer names the server's options as it was started with them (--max-lines), and a request's own
    settings as the request names them (beam)."""
    from nmt.serve import listen
    from nmt.serve.service import Service

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=f"^`host` 127.0.0.1 `port` {port}: cannot listen there .*another `port`"):
            listen("127.0.0.1", port)
    service = Service(Batcher(lambda lines, search: [], ServeConfig(max_wait_ms=0)), ServeConfig(max_lines=2),
                      {}, SearchConfig())
    with pytest.raises(TooLarge) as too_large:
        service.texts(["a", "b", "c"])
    assert too_large.value.message == (
        "3 lines in one request; at most 2 (--max-lines; an HTML page or a file is bounded by --max-document-chars)")
    with pytest.raises(RequestError) as invalid:
        service.search_for({"beam": 0, "nbest": None})
    assert (invalid.value.status, invalid.value.message) == (422, "beam must be at least 1, got 0")


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


# -- several directions in one server ------------------------------------------------------------------

THREE = [("en", "de"), ("fr", "de"), ("de", "en")]


@pytest.fixture()
def three(request):
    """A server of three fake directions (each engine upper-cases its lines and records its calls; the detector
    is StubDetector), texts translated through nmt's Documents: (its URL, the engines' models)."""
    models = {direction: FakeModel() for direction in THREE}
    engines = [FakeEngine(models[d], d) for d in THREE]
    with in_process(ServeConfig(quiet_ms=0, max_wait_ms=0), None, engines=engines) as (url, _):
        for model in models.values():
            model.calls.clear()  # the warm-up
        yield url, models


def post(url: str, path: str, body: dict) -> requests.Response:
    return requests.post(url + path, json=body, timeout=30)


@pytest.mark.parametrize("body, status, answer", [
    ({"text": "a man .", "source": "de", "target": "en"}, 200, ["A MAN ."]),
    ({"text": "a man .", "source": "fr"}, 200, ["A MAN ."]),  # the one direction from fr
    ({"text": "a man .", "target": "en"}, 200, ["A MAN ."]),  # the one direction to en
    ({"text": "a man ."}, 422, "give source and target: this server translates en -> de, fr -> de, de -> en"),
    ({"text": "a man .", "target": "de"}, 422, "give source and target"),
    ({"text": "a man .", "source": "en", "target": "fr"}, 422, "does not translate en -> fr; it translates en -> de"),
    ({"text": "a man .", "source": "\ud800", "target": "de"}, 422, "does not translate \\ud800 -> de"),
    ({"text": "a", "source": "en", "target": "de", "format": "pdf"}, 422, "format"),
    ({"text": "a", "source": "en", "target": "de", "scores": "yes"}, 422, "scores"),
])
def test_v1_translate_is_routed_by_source_and_target(three, body, status, answer):
    url, models = three
    r = post(url, "/v1/translate", body)
    assert r.status_code == status, r.text
    if status == 200:
        assert r.json()["translations"] == answer
        direction = (r.json()["model"]["src"], r.json()["model"]["tgt"])
        assert [d for d, m in models.items() if m.calls] == [direction]  # that direction's engine, no other
    else:
        assert answer in r.json()["error"]


def test_v1_translate_gives_a_text_in_the_target_language_back_as_it_was(three):
    url, models = three
    r = post(url, "/v1/translate", {"text": ["a man .", "b"], "source": "en", "target": "en", "scores": True})
    assert r.status_code == 200, r.text
    assert r.json() == {"translations": [{"text": "a man .", "score": 0.0}, {"text": "b", "score": 0.0}],
                        "model": None, "untranslated": True, "note": None, "terms": None}
    assert not any(m.calls for m in models.values())  # no engine asked
    r = post(url, "/v1/translate", {"text": "a", "source": "xx", "target": "xx"})
    assert r.status_code == 422 and "does not translate xx -> xx" in r.json()["error"]


def test_a_text_is_translated_whole_every_sentence_in_one_engine_call(three):
    """Documents cuts each text into lines and sentences: every sentence goes to the engine, in one call, and
    the translation keeps the text's own line breaks and spaces."""
    url, models = three
    texts = ["A man walks. A dog runs!\nThe end.", "One more."]
    r = post(url, "/v1/translate", {"text": texts, "source": "en", "target": "de"})
    assert r.json()["translations"] == [t.upper() for t in texts]
    assert models["en", "de"].calls == [["A man walks.", "A dog runs!", "The end.", "One more."]]
    r = post(url, "/translate", {"q": texts[0], "source": "en", "target": "de"})
    assert r.json() == {"translatedText": texts[0].upper()}
    assert models["en", "de"].calls[-1] == ["A man walks.", "A dog runs!", "The end."]


def test_scores_and_html(three):
    url, models = three
    r = post(url, "/v1/translate", {"text": ["a man .", "b"], "source": "en", "target": "de", "scores": True})
    assert r.json()["translations"] == [{"text": "A MAN .", "score": -0.5}, {"text": "B", "score": -0.5}]
    r = post(url, "/translate", {"q": ["a man .", "b", "..."], "source": "en", "target": "de", "scores": True})
    assert r.json() == {"translatedText": ["A MAN .", "B", "..."], "scores": [-0.5, -0.5, 0.0]}  # "...": nothing
    r = post(url, "/translate", {"q": "a. b!", "source": "en", "target": "de", "scores": True})
    assert r.json() == {"translatedText": "A. B!", "scores": -0.5}  # (-1.5 - 1.5) / 6 tokens
    html = "<p>a man .<b>x</b></p>"
    r = post(url, "/translate", {"q": html, "source": "en", "target": "de", "format": "html"})
    assert r.status_code == 200 and r.json()["translatedText"].startswith("<p>"), r.text
    assert "<b>" in r.json()["translatedText"] and "A MAN" in r.json()["translatedText"]
    r = post(url, "/v1/translate", {"text": html, "source": "en", "target": "de", "format": "html"})
    assert r.status_code == 200 and r.json()["translations"][0].startswith("<p>"), r.text
    r = post(url, "/translate", {"q": "a", "source": "en", "target": "de", "format": "pdf"})
    assert (r.status_code, r.json()) == (400, {"error": "pdf format is not supported"})
    r = post(url, "/translate", {"q": html, "source": "en", "target": "de", "format": "html", "alternatives": 1})
    assert r.status_code == 400 and "html" in r.json()["error"], r.text


@pytest.mark.parametrize("body, status, answer", [
    # routed by source and target
    ({"q": "hello", "source": "de", "target": "en"}, 200, {"translatedText": "HELLO"}),
    # one language: the text as it was (LibreTranslate 1.9's identity translation), said in `untranslated`
    ({"q": "hello", "source": "en", "target": "en"}, 200, {"translatedText": "hello", "untranslated": True}),
    ({"q": "hello", "source": "xx", "target": "xx"}, 400, {"error": "xx is not supported: this server translates "
                                                                    "en to de, fr to de, de to en"}),
    ({"q": "hello", "source": "xx", "target": "de"}, 400, {"error": "xx is not supported: this server translates "
                                                                    "en to de, fr to de, de to en"}),
    ({"q": "hello", "source": "auto", "target": "xx"}, 400, {"error": "xx is not supported: this server translates "
                                                                      "en to de, fr to de, de to en"}),
    # auto: among the sources that translate to the target (en, fr for de)
    ({"q": "bonjour [fr]", "source": "auto", "target": "de"}, 200,
     {"translatedText": "BONJOUR [FR]", "detectedLanguage": {"confidence": 90.0, "language": "fr"}}),
    ({"q": "hello", "source": "auto", "target": "de"}, 200,
     {"translatedText": "HELLO", "detectedLanguage": {"confidence": 50.0, "language": "en"}}),
    # no evidence: the first candidate at confidence 0, as LibreTranslate falls back to English
    ({"q": "1234 ...", "source": "auto", "target": "de"}, 200,
     {"translatedText": "1234 ...", "detectedLanguage": {"confidence": 0.0, "language": "en"}}),
    # a list: one language for all, detected in all its texts together, as LibreTranslate 1.9 does ...
    ({"q": ["hello there, this is a rather long English text .", "bonjour, ceci est un assez long texte [fr] ."],
      "source": "auto", "target": "de"}, 200,
     {"translatedText": ["HELLO THERE, THIS IS A RATHER LONG ENGLISH TEXT .",
                         "BONJOUR, CECI EST UN ASSEZ LONG TEXTE [FR] ."],
      "detectedLanguage": [{"confidence": 90.0, "language": "fr"}] * 2}),
    # ... or with detectEach (nmt's extension), each text its own
    ({"q": ["hello there, this is a rather long English text .", "bonjour, ceci est un assez long texte [fr] ."],
      "source": "auto", "target": "de", "detectEach": True}, 200,
     {"translatedText": ["HELLO THERE, THIS IS A RATHER LONG ENGLISH TEXT .",
                         "BONJOUR, CECI EST UN ASSEZ LONG TEXTE [FR] ."],
      "detectedLanguage": [{"confidence": 50.0, "language": "en"}, {"confidence": 90.0, "language": "fr"}]}),
    # a text in the target language already (detected among the sources and the target): back as it was
    ({"q": ["ein Hund [de]", "a dog"], "source": "auto", "target": "de", "detectEach": True}, 200,
     {"translatedText": ["ein Hund [de]", "A DOG"], "untranslated": [True, False],
      "detectedLanguage": [{"confidence": 90.0, "language": "de"}, {"confidence": 50.0, "language": "en"}]}),
])
def test_libretranslate_routes_and_detects_among_the_directions(three, body, status, answer):
    url, models = three
    r = post(url, "/translate", body)
    assert (r.status_code, r.json()) == (status, answer)


def test_languages_detect_health_and_settings_of_several_directions(three):
    url, _ = three
    assert requests.get(url + "/languages", timeout=10).json() == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "fr", "name": "French", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": ["en"]}]
    assert post(url, "/detect", {"q": "salut [fr]"}).json() == [
        {"confidence": 90.0, "language": "fr"}, {"confidence": 1.0, "language": "en"},
        {"confidence": 1.0, "language": "de"}]
    assert post(url, "/detect", {"q": "..."}).json() == [{"confidence": 0.0, "language": "en"}]
    health = requests.get(url + "/health", timeout=10).json()
    assert health["status"] == "ok" and [(m["src"], m["tgt"]) for m in health["models"]] == THREE
    settings = requests.get(url + "/frontend/settings", timeout=10).json()
    assert settings["language"] == {"source": {"code": "en", "name": "English"},
                                    "target": {"code": "de", "name": "German"}}


@pytest.fixture(scope="module")
def reversed_checkpoint(tiny_checkpoint, tmp_path_factory) -> Path:
    """The tiny checkpoint with its stored direction turned round (de -> en): a second direction to serve."""
    import dataclasses

    from nmt.model.checkpoint import load, save

    ckpt = load(tiny_checkpoint)
    path = tmp_path_factory.mktemp("reversed") / "deen.pt"
    save(path, dataclasses.replace(ckpt, data=dataclasses.replace(ckpt.data, src="de", tgt="en")))
    return path


GERMAN = "Ein Mann mit einem roten Hut geht mit seinem Hund durch den Park."


def test_two_directions_in_one_server_with_libretranslate_s_client(tiny_checkpoint, reversed_checkpoint, sources,
                                                                   offline):
    """`nmt serve -m ende.pt -m deen.pt`: each request goes to its direction's model; the real detector tells
    German from English; libretranslatepy works against it."""
    libretranslatepy = pytest.importorskip("libretranslatepy")
    srv = Server(tiny_checkpoint, "-m", str(reversed_checkpoint), "--name", "tiny en-de", "--name", "deen.pt")
    try:
        health = requests.get(srv.url + "/health", timeout=10).json()
        assert [(m["src"], m["tgt"], m["name"]) for m in health["models"]] == [
            ("en", "de", "tiny en-de"), ("de", "en", "deen.pt")]
        r = srv.post("/v1/translate", {"text": sources[:3], "source": "en", "target": "de"})
        assert r.json()["translations"] == offline[:3]
        assert srv.post("/v1/translate", {"text": "a"}).status_code == 422
        r = srv.post("/v1/translate", {"text": GERMAN, "source": "de", "target": "en"})
        assert r.status_code == 200 and r.json()["model"]["name"] == "deen.pt"
        lt = libretranslatepy.LibreTranslateAPI(srv.url)
        assert lt.translate(sources[0], "en", "de") == offline[0]
        assert lt.detect(GERMAN)[0]["language"] == "de" and lt.detect(sources[0])[0]["language"] == "en"
        assert lt.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                                  {"code": "de", "name": "German", "targets": ["en"]}]
        r = srv.post("/translate", {"q": GERMAN, "source": "auto", "target": "en"})
        assert r.json()["detectedLanguage"]["language"] == "de" and r.json()["detectedLanguage"]["confidence"] > 50
        assert lt.translate(GERMAN, "auto", "en") == r.json()["translatedText"]
    finally:
        code, stderr = srv.stop()
    assert code == 0 and "de -> en" in stderr, stderr


# -- fairness: a request's texts in slices, requests taking turns ------------------------------------------

FAIR = ServeConfig(max_wait_ms=0, quiet_ms=0)


async def held_first_slice(model: Held, batcher: Batcher) -> None:
    """Wait (on the event loop) until the worker is inside its first engine call, which `model` holds."""
    deadline = time.monotonic() + 30
    while not model.calls:
        assert time.monotonic() < deadline, "the first slice never reached the engine"
        await asyncio.sleep(0.01)


class HeldAtThird(Held):
    """Held, and holds its third call too, until `third` is set: what happened before it can be looked at."""

    def __init__(self):
        super().__init__()
        self.third = threading.Event()

    def __call__(self, lines: list[str], search: SearchConfig) -> list[Translation]:
        if len(self.calls) == 2:
            assert self.third.wait(60)
        return super().__call__(lines, search)


async def big_request_held(model: Held | None = None) -> tuple[Held, Batcher, PendingRequest]:
    """A batcher of slices of 2, given an 8-line request (b0..b7), once its first slice is inside the engine call
    that the returned model (`model`, or a new Held) holds (until `model.release` is set)."""
    model = model or Held()
    batcher = Batcher(model, FAIR, slice_lines=2)
    batcher.start()
    big = batcher.submit([f"b{i}" for i in range(8)], BEAM4)
    await held_first_slice(model, batcher)
    return model, batcher, big


def test_a_one_line_request_is_answered_between_the_slices_of_a_large_one():
    """8 lines in slices of 2; a one-line request comes while the first slice is translated: it has the next
    engine call to itself (no slice of a request begun joins a batch headed by one not begun), and is answered
    before the large request's last slice is translated."""
    async def main():
        model = HeldAtThird()
        model, batcher, big = await big_request_held(model)
        small = batcher.submit(["s"], BEAM4)
        model.release.set()
        # The engine holds the large request's second slice: the small one is answered all the same (a wait for
        # the large request's last slice would time out here).
        assert [t.text for t in await asyncio.wait_for(small.future, 30)] == ["S"]
        calls_when_small_answered = list(model.calls)
        model.third.set()
        assert [t.text for t in await big.future] == [f"B{i}" for i in range(8)]
        await asyncio.get_running_loop().run_in_executor(None, batcher.close)
        return model.calls, calls_when_small_answered

    calls, before = asyncio.run(main())
    assert calls == [["b0", "b1"], ["s"], ["b2", "b3"], ["b4", "b5"], ["b6", "b7"]]
    assert before == [["b0", "b1"], ["s"]]  # answered before the large request's other slices were translated


def test_a_withdrawn_request_has_no_further_slice_translated():
    """The client of an 8-line request leaves during its first slice: that slice finishes, no other starts;
    its lines leave the queue's count at once."""
    async def main():
        model, batcher, big = await big_request_held()
        assert batcher.queued_lines == 6
        assert not batcher.withdraw(big)  # a slice of it is being translated
        assert batcher.queued_lines == 0
        model.release.set()
        after = batcher.submit(["a"], BEAM4)
        assert [t.text for t in await after.future] == ["A"]
        await asyncio.get_running_loop().run_in_executor(None, batcher.close)
        return model.calls, big.future.done(), batcher.queued_lines

    calls, big_done, queued = asyncio.run(main())
    assert calls == [["b0", "b1"], ["a"]] and not big_done and queued == 0


@pytest.mark.parametrize("slice_lines, sizes, batch, calls", [
    (1, [3], 128, [["0.0"], ["0.1"], ["0.2"]]),
    (2, [5, 1], 128, [["0.0", "0.1", "1.0"], ["0.2", "0.3"], ["0.4"]]),
    (3, [4, 4], 128, [["0.0", "0.1", "0.2", "1.0", "1.1", "1.2"], ["0.3", "1.3"]]),
    # a slice that does not fit waits; a request not begun goes first, alone; then those begun take turns
    (3, [4, 4], 4, [["0.0", "0.1", "0.2"], ["1.0", "1.1", "1.2"], ["0.3", "1.3"]]),
    (100, [7, 2], 128, [["0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "1.0", "1.1"]]),
    (5, [2, 2, 2], 128, [["0.0", "0.1", "1.0", "1.1", "2.0", "2.1"]]),  # small requests: merged as ever
])
def test_sliced_requests_get_their_own_lines_in_order(slice_lines, sizes, batch, calls):
    """Requests queued together take turns, a slice each per engine call; each gets its translations whole and
    in order."""
    async def main():
        model = FakeModel()
        batcher = Batcher(model, ServeConfig(max_wait_ms=0, quiet_ms=0, max_batch_sentences=batch),
                          slice_lines=slice_lines)
        pending = [batcher.submit([f"{r}.{i}" for i in range(n)], BEAM4) for r, n in enumerate(sizes)]
        batcher.start()  # (everything queued before the worker looks)
        results = await asyncio.gather(*(p.future for p in pending))
        await asyncio.get_running_loop().run_in_executor(None, batcher.close)
        return model.calls, [[t.text for t in r] for r in results]

    got_calls, results = asyncio.run(main())
    assert got_calls == calls
    assert results == [[f"{r}.{i}" for i in range(n)] for r, n in enumerate(sizes)]


def test_a_slice_that_fails_fails_its_request_alone_and_ends_it():
    """The second slice of a request fails: that request gets the error and no further slice is translated;
    the request beside it gets its lines."""
    async def main():
        model = FailingModel()
        batcher = Batcher(model, FAIR, slice_lines=2)
        big = batcher.submit(["a", "b", "boom", "c", "d", "e"], BEAM4)
        other = batcher.submit(["x"], BEAM4)
        batcher.start()
        results = await asyncio.gather(big.future, other.future, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, batcher.close)
        return model.calls, results, batcher.queued_lines

    calls, (big, other), queued = asyncio.run(main())
    assert calls == [["a", "b", "x"], ["boom", "c"]]
    assert isinstance(big, UnicodeEncodeError) and [t.text for t in other] == ["X"] and queued == 0


def test_slice_lines_must_be_positive():
    with pytest.raises(ValueError, match="slice_lines 0"):
        Batcher(FakeModel(), FAIR, slice_lines=0)
