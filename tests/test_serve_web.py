"""The browser side of `nmt serve` (nmt/serve/web.py): CORS on every answer (--cors-origins), the page at /,
and LibreTranslate's /translate_file and /download_file, on the real application in this process (uvicorn in
a thread) over a fake engine, talked to over HTTP with requests."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("python_multipart")
pytest.importorskip("fastapi_offline")
import requests  # noqa: E402
import test_serve  # noqa: E402
from test_cli import ENV  # noqa: E402

from nmt.core.errors import ConfigError  # noqa: E402
from nmt.engines.base import Translation  # noqa: E402
from nmt.engines.search import Hypothesis, SearchConfig  # noqa: E402
from nmt.serve import ServeConfig, TooLarge  # noqa: E402

# -- servers -----------------------------------------------------------------------------------------


class Server(test_serve.Server):
    """`nmt serve` of the tiny checkpoint in a subprocess on 127.0.0.1 (a random port), once /health answers, its
    access log in `log`."""

    def __init__(self, checkpoint: Path, log: Path, *options: str):
        self.log = log
        super().__init__(checkpoint, "--access-log", str(log), *options)

    def translate(self, text: str, format: str = "text") -> str:
        """LibreTranslate's /translate of `text`, English to German."""
        r = requests.post(self.url + "/translate", json={"q": text, "source": "en", "target": "de", "format": format},
                          timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["translatedText"]


PAGE_ORIGIN = "http://127.0.0.1:9"  # a page's origin in the requests below (never contacted)


class Upper:
    """The worker's function: each text upper-cased; records each job's format."""

    def __init__(self):
        self.formats: list[str] = []

    def __call__(self, texts: list[str], job) -> list[Translation]:
        self.formats.append(job.format)
        return [Translation(t.upper(), [(t.upper(), Hypothesis([], 0.0, 0.0))], t) for t in texts]


class FirstCandidate:
    """A language detector that names its first candidate."""

    def __init__(self, among):
        self.among = list(among)

    def detect(self, text: str):
        from nmt.text.languages import Detection

        return [Detection(self.among[0], 90.0)]


class FakeEngine:
    search_cfg = SearchConfig()
    languages = ("en", "de")

    def translate_chunk(self, lines: list[str], first_line: int = 0) -> list[Translation]:
        return [Translation(line, [(line, Hypothesis([], 0.0, 0.0))], line) for line in lines]  # the warm-up

    def with_search(self, cfg: SearchConfig) -> FakeEngine:
        return self


@contextlib.contextmanager
def in_process(cfg: ServeConfig, translate=None, **kwargs):
    """The application in this process, on uvicorn in a thread: (its URL, the records of its requests)."""
    from nmt.serve import ModelInfo
    from nmt.serve.app import create_app

    records: list = []
    gate = create_app(FakeEngine(), ModelInfo("fake", "en", "de", "0" * 64, {}), cfg, translate=translate or Upper(),
                      detector=FirstCandidate, on_done=records.append, **kwargs)
    with test_serve.on_uvicorn(gate) as url:
        yield url, records


@pytest.fixture(scope="module")
def served():
    """A server with the default CORS (every origin)."""
    with in_process(ServeConfig(max_lines=20, max_chars=200)) as (url, records):
        yield url, records


@pytest.fixture(scope="module")
def only_one_origin(tmp_path_factory):
    """A server whose CORS allows PAGE_ORIGIN only, with an API key."""
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text("secret\n")
    with in_process(ServeConfig(cors_origins=[PAGE_ORIGIN + ",https://example.org"], api_keys=keys,
                                max_body_bytes=10_000)) as (url, _):
        yield url


def raw_request(url: str, head: bytes) -> bytes:
    """What the server answers to `head` (a request's head, written by hand), until it closes the connection."""
    host, port = url.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(head)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def cors_headers(r: requests.Response) -> dict[str, str]:
    return {k.lower(): v for k, v in r.headers.items() if k.lower().startswith("access-control-")}


# -- --cors-origins --------------------------------------------------------------------------------


@pytest.mark.parametrize("given, origins", [
    (None, ("*",)),
    (["*"], ("*",)),
    (["https://example.org"], ("https://example.org",)),
    (["https://a.org, http://B.org:8080", "http://[::1]:3000"], ("https://a.org", "http://b.org:8080", "http://[::1]:3000")),
    (["https://a.org", "https://a.org"], ("https://a.org",)),
    (["https://a.org,*"], ("*",)),  # * among others: every origin
])
def test_cors_origins_are_split_at_commas_and_repeated(given, origins):
    assert ServeConfig(cors_origins=given).validate().origins == origins


@pytest.mark.parametrize("given, words", [
    ([","], "`cors_origins`: no origin given"),
    (["example.org"], "`cors_origins` example.org: not an origin"),
    (["https://example.org/"], "`cors_origins` https://example.org/: not an origin"),
    (["https://example.org/app?x=1"], "not an origin; write scheme://host[:port]"),
    (["https://a.org:port"], "`cors_origins` https://a.org:port: not an origin"),
    ("https://a.org", "should be"),  # a string where a list belongs (a --config file)
])
def test_bad_cors_origins_are_config_errors(given, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        ServeConfig(cors_origins=given).validate()


def test_a_bad_cors_origin_is_one_line_before_the_model_loads(tmp_path):
    r = subprocess.run([sys.executable, "-m", "nmt", "serve", "-m", str(tmp_path / "absent.pt"), "--port", "0",
                        "--cors-origins", "https://ok.org", "--cors-origins", "ftp:/x"], capture_output=True,
                       text=True, env=ENV, timeout=60, cwd=tmp_path)
    assert r.returncode != 0 and r.stderr.startswith("error: --cors-origins ftp:/x: not an origin"), r.stderr
    assert len(r.stderr.splitlines()) == 1


# -- CORS -------------------------------------------------------------------------------------------


def preflight(url: str, origin: str, method: str = "POST", headers: str = "content-type") -> requests.Response:
    return requests.options(url + "/translate", timeout=30, headers={
        "Origin": origin, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers})


def test_a_preflight_is_answered_and_recorded_as_served(served):
    url, records = served
    r = preflight(url, PAGE_ORIGIN)
    assert r.status_code == 200
    h = cors_headers(r)
    assert h["access-control-allow-origin"] == "*"
    assert "POST" in h["access-control-allow-methods"] and "content-type" in h["access-control-allow-headers"].lower()
    record = next(rec for rec in reversed(records) if rec.method == "OPTIONS")
    assert (record.path, record.status, record.outcome) == ("/translate", 200, "served")


def test_an_allowed_origin_is_echoed(only_one_origin):
    r = preflight(only_one_origin, PAGE_ORIGIN)
    assert r.status_code == 200 and cors_headers(r)["access-control-allow-origin"] == PAGE_ORIGIN
    r = requests.get(only_one_origin + "/languages", headers={"Origin": PAGE_ORIGIN}, timeout=30)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == PAGE_ORIGIN
    assert "Origin" in r.headers["vary"]


@pytest.mark.parametrize("origin, method, headers, words", [
    ("http://127.0.0.1:10", "POST", "content-type", "Disallowed CORS origin: http://127.0.0.1:10 asked for POST"),
    ("https://evil.example", "POST", "content-type", "Disallowed CORS origin"),
    (PAGE_ORIGIN, "PUT", "content-type", "Disallowed CORS method: http://127.0.0.1:9 asked for PUT with content-type"),
    (PAGE_ORIGIN, "POST", "x-custom", "Disallowed CORS headers"),
])
def test_a_refused_preflight_is_json_without_cors_headers(only_one_origin, origin, method, headers, words):
    r = preflight(only_one_origin, origin, method, headers)
    assert r.status_code == 400 and cors_headers(r) == {}
    assert r.headers["content-type"] == "application/json" and r.json()["error"].startswith(words), r.json()
    assert "--cors-origins" in r.json()["error"]


def test_a_disallowed_origin_gets_no_cors_header_but_its_answer(only_one_origin):
    r = requests.get(only_one_origin + "/languages", headers={"Origin": "https://evil.example"}, timeout=30)
    assert r.status_code == 200 and r.json() and cors_headers(r) == {}
    r = requests.get(only_one_origin + "/languages", timeout=30)  # no Origin: no browser, no CORS
    assert r.status_code == 200 and cors_headers(r) == {}


LONG = "x" * 300
# (method, path, body or None, extra headers, status): each error a browser must be able to read
ERRORS = [
    ("POST", "/translate", b"{not json", {"Content-Type": "application/json"}, 400),
    ("POST", "/translate", b'{"q": "hi", "source": "en", "target": "de"}', {"Content-Type": "application/json"}, 403),
    ("POST", "/translate", b'{"q": "hi", "source": "en", "target": "de", "api_key": "secret"}',
     {"Content-Type": "application/json", "Content-Length": "99999999"}, 413),  # the gate's own refusal
    ("POST", "/v1/translate", b'{"text": 5, "api_key": "secret"}', {"Content-Type": "application/json"}, 422),
    ("GET", "/nowhere", None, {}, 404),
    ("GET", "/download_file/nothing.txt", None, {}, 404),
    ("PUT", "/translate", b"", {}, 405),
]


@pytest.mark.parametrize("method, path, body, headers, status", ERRORS)
def test_errors_carry_the_cors_headers(only_one_origin, method, path, body, headers, status):
    if status == 413:  # a Content-Length that lies: sent by hand (requests would correct it)
        raw = raw_request(only_one_origin, (f"POST {path} HTTP/1.1\r\nHost: x\r\nOrigin: {PAGE_ORIGIN}\r\n"
                                            "Content-Length: 99999999\r\n\r\n").encode())
        assert raw.startswith(b"HTTP/1.1 413") and f"access-control-allow-origin: {PAGE_ORIGIN}".encode() in raw.lower()
        return
    r = requests.request(method, only_one_origin + path, data=body, headers={"Origin": PAGE_ORIGIN, **headers},
                         timeout=30)
    assert r.status_code == status and "error" in r.json()
    assert r.headers["access-control-allow-origin"] == PAGE_ORIGIN
    assert "Retry-After" in r.headers["access-control-expose-headers"]


# -- the page ---------------------------------------------------------------------------------------


def test_the_page_requests_nothing_outside_the_server(served):
    url, _ = served
    r = requests.get(url + "/", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
    html = r.text
    assert re.findall(r"(?:https?:)?//[a-z0-9]", html, re.IGNORECASE) == []  # no URL of another host
    assert re.findall(r"""\b(?:src|href|action)\s*=\s*["'](?!data:)""", html, re.IGNORECASE) == []
    assert "@import" not in html and "url(" not in html
    assert "innerHTML" not in html and "outerHTML" not in html and "insertAdjacentHTML" not in html
    assert "document.write" not in html and "eval(" not in html
    policy = r.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert re.search(r"script-src 'sha256-[A-Za-z0-9+/]+=*'(;|$)", policy), policy  # its inline script, nothing else


# -- files ------------------------------------------------------------------------------------------


def multipart(fields: dict[str, str], file: tuple[bytes, bytes] = None) -> tuple[bytes, dict[str, str]]:
    """A multipart body written by hand (requests would clean a file name): fields, and (name, bytes) as `file`."""
    boundary = uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    if file is not None:
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="'.encode() + file[0]
                     + b'"\r\nContent-Type: application/octet-stream\r\n\r\n' + file[1] + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def upload(url: str, name: bytes, data: bytes, **fields: str) -> requests.Response:
    body, headers = multipart({"source": "en", "target": "de", **fields}, (name, data))
    return requests.post(url + "/translate_file", data=body, headers={"Origin": PAGE_ORIGIN, **headers}, timeout=30)


@pytest.mark.parametrize("name, data, media_type, expected", [
    (b"notes.txt", b"hello world.\n\nsecond line\r\nthird\n", "text/plain; charset=utf-8",
     "HELLO WORLD.\n\nSECOND LINE\r\nTHIRD\n"),
    (b"page.html", b"<p>hello <b>world</b></p>", "text/html; charset=utf-8", "<P>HELLO <B>WORLD</B></P>"),
    (b"bom.txt", b"\xef\xbb\xbfhello", "text/plain; charset=utf-8", "HELLO"),
    ("Überblick.TXT".encode(), "grüße".encode(), "text/plain; charset=utf-8", "GRÜSSE"),
])
def test_a_file_is_translated_and_downloaded(served, name, data, media_type, expected):
    url, _ = served
    r = upload(url, name, data)
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == "*"
    link = r.json()["translatedFileUrl"]
    assert link.startswith(url + "/download_file/")
    r = requests.get(link, timeout=30)
    assert r.status_code == 200 and r.content.decode("utf-8") == expected
    assert r.headers["content-type"] == media_type
    disposition = r.headers["content-disposition"]
    assert disposition.startswith("attachment;") and requests.utils.quote(name.decode()) in disposition


def test_a_file_is_translated_in_its_format_from_the_detected_language():
    upper = Upper()
    with in_process(ServeConfig(), translate=upper) as (url, _):
        r = upload(url, b"a.html", b"<p>hallo</p>", source="auto")
        assert r.status_code == 200, r.text
        r = upload(url, b"a.txt", b"<p>hallo</p>")
        assert r.status_code == 200, r.text
    assert upper.formats[-2:] == ["html", "text"]


@pytest.mark.parametrize("fields, file, status, words", [
    ({"source": "en", "target": "de"}, None, 400, "Invalid request: missing file parameter"),
    ({"target": "de"}, (b"a.txt", b"hi"), 400, "Invalid request: missing source parameter"),
    ({"source": "en"}, (b"a.txt", b"hi"), 400, "Invalid request: missing target parameter"),
    ({"source": "en", "target": "de"}, (b"", b"hi"), 400, "Invalid request: empty file"),
    ({"source": "en", "target": "de"}, (b"a.txt", b""), 400, "Invalid request: empty file"),
    ({"source": "en", "target": "de"}, (b"a.pdf", b"%PDF"), 400, "Invalid request: file format not supported"),
    ({"source": "en", "target": "de"}, (b"txt", b"hi"), 400, "Invalid request: file format not supported"),
    ({"source": "en", "target": "de"}, (b"a.txt", b"caf\xe9"), 400, "not UTF-8 text (byte 3"),
    ({"source": "en", "target": "de"}, (b"../x.txt", b"hi"), 400, "invalid file name ../x.txt"),
    ({"source": "en", "target": "de"}, (b"..\\x.txt", b"hi"), 400, "invalid file name"),
    ({"source": "en", "target": "de"}, (b"/etc/x.txt", b"hi"), 400, "invalid file name"),
    ({"source": "en", "target": "de"}, (b"a\x00.txt", b"hi"), 400, "invalid file name a\\x00.txt"),
    ({"source": "en", "target": "de"}, (b"a\x01b.txt", b"hi"), 400, "invalid file name"),
    ({"source": "en", "target": "de"}, (b"x" * 300 + b".txt", b"hi"), 400, "more than 255 bytes"),
    ({"source": "en", "target": "fr"}, (b"a.txt", b"hi"), 400, "fr is not supported"),
    ({"source": "xx", "target": "de"}, (b"a.txt", b"hi"), 400, "xx is not supported"),
    ({"source": "en", "target": "de"}, (b"a.txt", b"line\n" * 21), 413, "--max-lines"),
])
def test_hostile_uploads_are_4xx_json(served, fields, file, status, words):
    url, _ = served
    body, headers = multipart(fields, file)
    r = requests.post(url + "/translate_file", data=body, headers={"Origin": PAGE_ORIGIN, **headers}, timeout=30)
    assert r.status_code == status and r.headers["content-type"] == "application/json", r.text
    assert words in r.json()["error"], r.json()
    assert r.headers["access-control-allow-origin"] == "*"


def test_files_need_the_key_and_fit_the_body_limit(only_one_origin):
    r = upload(only_one_origin, b"a.txt", b"hi")
    assert r.status_code == 403 and r.json() == {"error": "Missing API key: give api_key"}
    r = upload(only_one_origin, b"a.txt", b"hi", api_key="secret")
    assert r.status_code == 200, r.text
    r = upload(only_one_origin, b"a.txt", b"hi " * 5000, api_key="secret")
    assert r.status_code == 413 and "--max-body-bytes" in r.json()["error"]
    assert r.headers["access-control-allow-origin"] == PAGE_ORIGIN
    r = requests.post(only_one_origin + "/translate_file", data=b'{"source": "en"}', timeout=30,
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 403  # the key first, as LibreTranslate checks it


@pytest.mark.parametrize("path", ["/download_file/unknown.txt", "/download_file/..%2F..%2Fetc%2Fpasswd",
                                  "/download_file/%00.txt", "/download_file/" + "a" * 5000])
def test_an_unknown_download_is_a_404_json(served, path):
    url, _ = served
    r = requests.get(url + path, timeout=30)
    assert r.status_code == 404 and "error" in r.json()


def test_the_store_keeps_the_newest_files_within_its_bounds():
    from nmt.serve.libre import FileStore

    now = [0.0]
    store = FileStore(count=2, size=10, ttl=60, clock=lambda: now[0])
    a = store.put("a.txt", b"aaaa", "text/plain")
    b = store.put("b.txt", b"bbbb", "text/plain")
    assert store.get(a).data == b"aaaa" and store.get(b).name == "b.txt"
    c = store.put("c.txt", b"cc", "text/plain")  # a third file: the oldest goes
    assert store.get(a) is None and store.get(b) is not None and store.get(c) is not None
    d = store.put("d.txt", b"d" * 9, "text/plain")  # 9 bytes: b and c go to make room
    assert [store.get(k) is not None for k in (b, c, d)] == [False, False, True] and store.bytes == 9
    now[0] = 59.9
    assert store.get(d) is not None
    now[0] = 60.0  # its lifetime is over
    assert store.get(d) is None and store.bytes == 0 and not store.files
    with pytest.raises(TooLarge, match="at most 10 are kept"):
        store.put("e.txt", b"e" * 11, "text/plain")
    assert len({store.put("same.txt", b"x", "text/plain") for _ in range(2)}) == 2  # never the same name twice


def test_a_real_model_translates_a_file_as_translate_does(tiny_checkpoint, tmp_path):
    """The files go through the same translation as LibreTranslate's /translate: a .txt file's lines, an .html
    file's text between its tags."""
    server = Server(tiny_checkpoint, tmp_path / "access.log")
    try:
        text = "A man is walking.\n\nTwo dogs play in the snow.\n"
        r = upload(server.url, b"a.txt", text.encode())
        assert r.status_code == 200, r.text
        assert requests.get(r.json()["translatedFileUrl"], timeout=30).text == server.translate(text)
        page = "<p>A man is <b>walking</b>.</p>"
        r = upload(server.url, b"a.html", page.encode())
        assert r.status_code == 200, r.text
        translated = requests.get(r.json()["translatedFileUrl"], timeout=30).text
        assert translated == server.translate(page, format="html") and translated.startswith("<p>")
    finally:
        server.stop()
