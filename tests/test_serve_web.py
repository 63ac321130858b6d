"""The browser side of `nmt serve` (nmt/serve/web.py): CORS on every answer (--cors-origins), the page at /,
and LibreTranslate's /translate_file and /download_file, on the real application in this process (uvicorn in
a thread) over a fake engine, talked to over HTTP with requests."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
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
    """The worker's function: each sentence upper-cased (no alignment: tags placed by the words' shares); records
    the sentences of each job."""

    def __init__(self):
        self.seen: list[list[str]] = []

    def __call__(self, items: list, job) -> list:
        if job.kind == "alignments":
            return [[] for _ in items]
        self.seen.append(list(items))
        return [Translation(t.upper(), [(t.upper(), Hypothesis([], 0.0, 0.0))], t) for t in items]


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
def both_paths(tmp_path_factory):
    """One application served twice: as made (POST /v1/translate taken by `nmt.serve.native.Direct`), and with
    FastAPI alone behind the gate (Direct left out)."""
    from nmt.serve import ModelInfo
    from nmt.serve.app import create_app

    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text("secret\n")
    cfg = ServeConfig(max_lines=20, max_chars=200, max_body_bytes=10_000, api_keys=keys)
    urls = []
    with contextlib.ExitStack() as stack:
        for direct in (True, False):
            gate = create_app(FakeEngine(), ModelInfo("fake", "en", "de", "0" * 64, {}), cfg, translate=Upper(),
                              detector=FirstCandidate)
            gate.app = gate.app if direct else gate.app.app
            urls.append(stack.enter_context(test_serve.on_uvicorn(gate)))
        yield urls


@pytest.mark.parametrize("body, headers", [
    ({"text": "A dog.", "api_key": "secret"}, {}),
    ({"text": ["A dog.", "Zwei Katzen. Ein Haus.\nÄpfel"], "scores": True, "api_key": "secret"}, {}),
    ({"text": "A dog.", "nbest": 2, "beam": 2, "api_key": "secret"}, {}),
    ({"text": "<p>A <b>dog</b>.</p>", "format": "html", "api_key": "secret"}, {}),
    ({"text": "A dog.", "glossary": {"dog": "Hund"}, "api_key": "secret"}, {}),
    ({"text": "A dog.", "source": "en", "target": "en", "api_key": "secret"}, {}),
    ({"text": "A dog.", "source": "fr", "api_key": "secret"}, {}),  # a direction not served: 422
    ({"text": "A dog."}, {}),  # no key: 403
    ({"text": "A dog.", "api_key": "wrong"}, {}),
    ({"text": ["a"] * 21, "api_key": "secret"}, {}),  # too many lines: 413
    ({"text": "A dog.", "beam": 0, "api_key": "secret"}, {}),
    ({"text": 5, "api_key": "secret"}, {}),  # not valid: FastAPI's answer
    ({"text": "A dog.", "colour": "red", "api_key": "secret"}, {}),
    ({"text": "A dog.", "api_key": "secret"}, {"Content-Type": "application/json; charset=utf-8"}),
    ({"text": "A dog.", "api_key": "secret"}, {"Content-Type": "text/plain"}),
    ("[" * 100_000, {}),  # too deep for json.loads
    ("{\"text\": \"a\\ud800\", \"api_key\": \"secret\"}", {}),  # a lone surrogate
    ("x" * 20_000, {}),  # past --max-body-bytes
])
def test_direct_answers_v1_translate_as_fastapi_does(both_paths, body, headers):
    data = body if isinstance(body, str) else json.dumps(body)
    answers = [requests.post(url + "/v1/translate", data=data.encode(), timeout=30,
                             headers={"Content-Type": "application/json", **headers}) for url in both_paths]
    direct, fastapi = answers
    assert (direct.status_code, direct.content) == (fastapi.status_code, fastapi.content)
    assert direct.headers.get("content-type") == fastapi.headers.get("content-type")


@pytest.mark.parametrize("headers, hint", [
    ({}, "(the body was sent as no Content-Type: send JSON with Content-Type: application/json)"),
    ({"Content-Type": "text/plain"}, "(the body was sent as text/plain: send JSON with Content-Type: application/json)"),
    ({"Content-Type": "application/json"}, None),
])
def test_a_body_not_sent_as_json_is_told_how_to_send_it(both_paths, headers, hint):
    r = requests.post(both_paths[0] + "/v1/translate", data=json.dumps({"text": "A dog."}).encode(), headers=headers,
                      timeout=30)
    if hint is None:
        assert r.status_code == 403  # (past the body: no key)
    else:
        assert r.status_code == 422 and r.json()["error"].endswith(hint), r.text


@pytest.mark.parametrize("body, error", [
    ('{"text": "A dog.", "beam": ' + "9" * 5000 + ', "api_key": "secret"}',
     "the body holds an integer of more than 4,300 digits, more than Python reads; send a smaller one"),
    ("[" * 4000 + "]" * 4000, "the body nests its arrays or objects too deeply to be read; send a flatter one"),
    ('{"text": "A dog."', "the body is not valid JSON (in UTF-8)"),
])
def test_json_python_cannot_read_is_said_so(both_paths, body, error):
    for url in both_paths:
        r = requests.post(url + "/v1/translate", data=body.encode(), headers={"Content-Type": "application/json"},
                          timeout=30)
        assert (r.status_code, r.json()["error"]) == (400, error)


def test_a_text_in_the_target_language_says_why_it_has_one_translation(both_paths):
    body = {"text": ["A man runs.", "Hi."], "source": "en", "target": "en", "nbest": 3, "beam": 3, "api_key": "secret"}
    r = requests.post(both_paths[0] + "/v1/translate", json=body, timeout=30).json()
    assert [[h["text"] for h in t] for t in r["translations"]] == [["A man runs."], ["Hi."]] and r["untranslated"]
    assert r["note"] == "2 of 2 text(s) came back as they were (already in the target language): one translation " \
                        "each, not 3"
    libre = {"q": "A man runs.", "source": "en", "target": "en", "alternatives": 2, "api_key": "secret"}
    r = requests.post(both_paths[0] + "/translate", json=libre, timeout=30).json()
    assert r["alternatives"] == [] and r["note"].startswith("1 of 1 text(s) came back as they were") and \
        r["untranslated"] is True


@pytest.fixture(scope="module")
def served():
    """A server with the default CORS (every origin)."""
    with in_process(ServeConfig(max_lines=20, max_chars=200, max_document_chars=100, max_sentences=20)) as (url,
                                                                                                     records):
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
    (b"page.html", b"<p>hello <b>world</b></p>", "text/html; charset=utf-8", "<p>HELLO <b>WORLD</b></p>"),
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
    assert upper.seen[-2:] == [["hallo"], ["<p>hallo</p>"]]  # a page's text; a .txt file's line as it is


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
    # a file is bounded as a document, whatever its lines: the text to translate, and the sentences
    ({"source": "en", "target": "de"}, (b"a.txt", b"line\n" * 25), 413, "125 characters of text to translate in "
     "one request; at most 100 (--max-document-chars)"),
    ({"source": "en", "target": "de"}, (b"a.html", b"<p>A</p>" * 101), 413, "101 characters of text"),
    ({"source": "en", "target": "de"}, (b"a.txt", b"Go! " * 21), 413, "21 sentences in one request once its "
     "text is cut into sentences; at most 20 (--max-sentences)"),
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


def test_a_full_store_refuses_rather_than_drop_a_file_before_its_time():
    """Every link given works for the file's whole lifetime: a full store (files or bytes) refuses new ones with 503
    and Retry-After, the seconds until its oldest file goes; a file being translated holds its place."""
    from nmt.serve.http_errors import Overloaded
    from nmt.serve.libre import FileStore

    now = [0.0]
    store = FileStore(count=2, size=10, ttl=60, clock=lambda: now[0])
    with store.slot():
        a = store.put("a.txt", b"aaaa", "text/plain")
    with store.slot():
        now[0] = 15.0
        with pytest.raises(Overloaded) as full, store.slot():  # one kept, one being translated: no third place
            pass
        assert "holds 2 files (at most 2: --max-files)" in full.value.message
        assert full.value.headers == {"Retry-After": "45"}  # a goes at 60
        b = store.put("b.txt", b"bbbb", "text/plain")
    assert store.get(a).data == b"aaaa" and store.get(b).name == "b.txt"
    with pytest.raises(Overloaded), store.slot():
        pass
    now[0] = 60.0  # a's lifetime is over: its place is free
    with store.slot():
        with pytest.raises(Overloaded, match="no room for 7 more .at most 10: --max-files-bytes") as no_room:
            store.put("c.txt", b"c" * 7, "text/plain")  # 4 bytes of b kept: 3 left
        assert no_room.value.headers == {"Retry-After": "15"}  # b goes at 75
        c = store.put("c.txt", b"cc", "text/plain")
    assert [store.get(k) is not None for k in (a, b, c)] == [False, True, True] and store.bytes == 6
    now[0] = 200.0
    assert store.get(c) is None and store.bytes == 0 and not store.files and store.pending == 0
    with pytest.raises(TooLarge, match="at most 10 are kept"), store.slot():
        store.put("e.txt", b"e" * 11, "text/plain")
    with store.slot():
        one = store.put("same.txt", b"x", "text/plain")
    with store.slot():
        assert store.put("same.txt", b"x", "text/plain") != one  # never the same name twice


def test_uploads_to_a_full_store_get_503_and_every_link_works(tiny_checkpoint, tmp_path):
    """More uploads than --max-files, from concurrent clients: each gets a link that downloads its own file, or 503
    with Retry-After; none gets a link to a file already dropped."""
    from concurrent.futures import ThreadPoolExecutor

    server = Server(tiny_checkpoint, tmp_path / "access.log", "--max-files", "3")
    try:
        def one(i: int) -> requests.Response:
            return upload(server.url, f"f{i}.txt".encode(), f"A man number {i} walks.\n".encode())

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(one, range(8)))
        assert sorted({r.status_code for r in answers}) == [200, 503]
        assert sum(r.status_code == 200 for r in answers) == 3
        for r in answers:
            if r.status_code == 503:
                assert int(r.headers["Retry-After"]) >= 1 and "--max-files" in r.json()["error"]
            else:
                assert requests.get(r.json()["translatedFileUrl"], timeout=30).status_code == 200
    finally:
        server.stop()


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


@pytest.mark.parametrize("code, status", [(28, 507), (122, 507), (5, 503)])  # ENOSPC, EDQUOT, EIO
@pytest.mark.parametrize("route", ["/translate_file", "/translate"])
def test_a_full_disk_while_an_upload_is_spooled_is_one_line_never_500(served, monkeypatch, route, code, status):
    """Every route that spools a multipart body to the temporary folder: a disk that cannot take it is 507 (full) or
    503, one JSON line, not 'internal error: OSError'."""
    import errno
    import os

    from starlette.datastructures import UploadFile

    async def cannot(self, data):
        raise OSError(code, os.strerror(code))

    assert (errno.ENOSPC, errno.EDQUOT) == (28, 122)
    monkeypatch.setattr(UploadFile, "write", cannot)
    url, _ = served
    body, headers = multipart({"source": "en", "target": "de", "q": "hello"}, (b"a.txt", b"hello world.\n"))
    r = requests.post(url + route, data=body, headers=headers, timeout=30)
    assert r.status_code == status, r.text
    message = r.json()["error"]
    assert "\n" not in message and "internal error" not in message and "retry later" in message
    if status == 507:
        assert "temporary folder is full" in message


class Timed(Upper):
    """Upper, each call taking `seconds`; records the time each call began."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds, self.began, self.lock = seconds, [], threading.Lock()

    def __call__(self, items: list, job) -> list:
        with self.lock:
            self.began.append((time.monotonic(), job.kind, list(items)))
        time.sleep(self.seconds)
        return super().__call__(items, job)


PAGE = "".join(f"<p>Go <b>home</b> now {i}. Stay here {i}.</p>\n" for i in range(1000))  # 2,000 sentences


@pytest.mark.parametrize("route", ["/translate", "/translate_file"])
def test_a_page_takes_turns_in_slices_and_dies_with_its_client(route):
    """A 2,000-sentence page (every block with an inline tag) whose client leaves once it is being translated: it
    goes in slices of sentences (16 at most per engine call), a one-line request sent meanwhile is answered at the
    next engine call but one, and once the client has gone no more than the slice in progress is translated."""
    model = Timed(0.02)
    if route == "/translate":
        body = json.dumps({"q": PAGE, "source": "en", "target": "de", "format": "html"}).encode()
        headers = {"Content-Type": "application/json"}
    else:
        body, headers = multipart({"source": "en", "target": "de"}, (b"page.html", PAGE.encode()))
    with in_process(ServeConfig(max_wait_ms=0), translate=model) as (url, records):
        host, port = url.removeprefix("http://").split(":")
        head = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "Content-Length": len(body)}.items())
        client = socket.create_connection((host, int(port)))
        client.sendall(f"POST {route} HTTP/1.1\r\nHost: {host}\r\n{head}\r\n".encode() + body)
        test_serve.wait_for(lambda: len(model.began) >= 5, "the page being translated", 120)
        r = requests.post(url + "/translate", json={"q": "hello.", "source": "en", "target": "de"}, timeout=60)
        assert r.status_code == 200 and r.json()["translatedText"] == "HELLO.", r.text
        def answered() -> list:
            return [record for record in records if record.path == "/translate" and record.status == 200]
        test_serve.wait_for(answered, "its record (written once the answer is sent)")
        arrived = answered()[0].clock
        mine = next(i for i, (_, _, items) in enumerate(model.began) if items == ["hello."])
        waited = [began for began, _, _ in model.began[:mine] if began > arrived]
        # the slice in progress, and any begun while the request was read and queued (a loaded machine): a few
        # slices of the page, not the rest of it (about 180 calls)
        assert len(waited) <= 5, len(waited)
        client.close()  # the page's client leaves
        test_serve.wait_for(lambda: time.monotonic() - model.began[-1][0] > 0.5, "the engine idle", 60)
    page_sentences = [s for _, kind, items in model.began if kind == "sentences" for s in items if s != "hello."]
    assert max(len(items) for _, _, items in model.began) <= 16
    assert page_sentences[:2] == ["Go home now 0.", "Stay here 0."]
    # the rest of it dropped: its 2,000 sentences take 125 calls (2.5 s), then 63 calls of alignments
    assert 16 < len(page_sentences) < 2000 and all(kind == "sentences" for _, kind, _ in model.began)


def web_page(size: int) -> str:
    """A page of about `size` bytes as sites write them: a script and a style in its head, a menu of links, then
    paragraphs with links and emphasis, one per line."""
    script = "<script>\n" + "".join(f"var item{i} = document.getElementById('x{i}');\n" for i in range(600)) + \
        "</script>\n"
    style = "<style>\n" + "".join(f".c{i} {{ margin: {i}px; color: #{i:06x}; }}\n" for i in range(300)) + "</style>\n"
    menu = "<ul>" + "".join(f'<li><a href="/section/{i}">Section {i}</a></li>\n' for i in range(100)) + "</ul>\n"
    head = f'<!DOCTYPE html>\n<html lang="en">\n<head><title>A page</title>{script}{style}</head>\n<body>{menu}'
    paragraphs, i = [], 0
    while len(head) + sum(map(len, paragraphs)) < size:
        paragraphs.append(f'<p>A man in a <a href="/p/{i}">blue shirt</a> is standing on a ladder number {i}. '
                          f"Two dogs are <em>playing</em> in the snow near the old red house. A woman with a "
                          f"camera takes pictures of the children.</p>\n")
        i += 1
    return head + "".join(paragraphs) + "</body>\n</html>\n"


@pytest.mark.parametrize("route", ["/translate", "/translate_file"])
def test_a_200_kb_page_goes_through_the_default_limits(route):
    """A 200 KB page (1,765 lines, a 28 KB script, 2,366 sentences, 128,000 characters of text) is within the
    default limits (--max-sentences 4096, --max-document-chars 500,000); the per-line
    limits of plain text (256 lines) would have refused it."""
    page = web_page(200_000)
    assert len(page.encode()) >= 200_000 and page.count("\n") > ServeConfig().max_lines
    with in_process(ServeConfig()) as (url, _):
        if route == "/translate":
            r = requests.post(url + route, json={"q": page, "source": "en", "target": "de", "format": "html"},
                              timeout=120)
            assert r.status_code == 200, r.text
            out = r.json()["translatedText"]
        else:
            r = upload(url, b"page.html", page.encode())
            assert r.status_code == 200, r.text
            out = requests.get(r.json()["translatedFileUrl"], timeout=30).text
        r = requests.post(url + "/translate", json={"q": page, "source": "en", "target": "de"}, timeout=30)
        assert r.status_code == 413 and "--max-lines" in r.json()["error"]  # as plain text: refused by its lines
    assert "var item599 = document.getElementById('x599');" in out  # the script as it was
    assert 'TWO DOGS ARE <em>PLAYING</em> IN THE SNOW' in out and '<a href="/section/99">SECTION 99</a>' in out


def test_a_refused_origin_is_said_once_in_the_log():
    """--cors-origins http://127.0.0.1:8765 and a page of http://localhost:8765: the answers carry no CORS header,
    and the log says once (for its requests and preflights alike) which origin was refused and why."""
    notes: list[str] = []
    with in_process(ServeConfig(cors_origins=["http://127.0.0.1:8765"]), on_note=notes.append) as (url, _):
        for _ in range(2):
            r = requests.post(url + "/translate", json={"q": "hi", "source": "en", "target": "de"},
                              headers={"Origin": "http://localhost:8765"}, timeout=30)
            assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
        r = requests.options(url + "/translate", headers={"Origin": "http://localhost:8765",
                                                          "Access-Control-Request-Method": "POST"}, timeout=30)
        assert r.status_code == 400
        r = requests.post(url + "/translate", json={"q": "hi", "source": "en", "target": "de"},
                          headers={"Origin": "http://127.0.0.1:8765"}, timeout=30)
        assert r.headers["access-control-allow-origin"] == "http://127.0.0.1:8765"
    assert len(notes) == 1 and notes[0].startswith("CORS: refused the origin http://localhost:8765: not one of "
                                                   "--cors-origins http://127.0.0.1:8765"), notes


class Repeating:
    """The worker's function: each sentence's n-best reads X, X, Y, X, Z, X, X, ... (token sequences that
    read the same, as BPE gives): three distinct texts in the first five, no more after."""

    def __call__(self, items: list, job) -> list:
        texts = ["X", "X", "Y", "X", "Z"] + ["X"] * 100
        return [Translation("X", [(text, Hypothesis([i], -float(i), -float(i))) for i, text in
                                  enumerate(texts[:job.search.nbest])], s) for s in items]


@pytest.mark.parametrize("path, body, want, note", [
    ("/v1/translate", {"text": "a", "nbest": 3}, ["X", "Y", "Z"], None),
    ("/v1/translate", {"text": "a", "nbest": 2}, ["X", "Y"], None),
    ("/v1/translate", {"text": ["a"], "nbest": 5}, ["X", "Y", "Z"], "1 of 1 text(s) have fewer than 5 distinct "
     "translations (text(s) 0): a search 10 wide found no more"),
    ("/translate", {"q": "a", "source": "en", "target": "de", "alternatives": 2}, ["X", "Y", "Z"], None),
    ("/translate", {"q": "a", "source": "en", "target": "de", "alternatives": 4}, ["X", "Y", "Z"], "1 of 1 text(s)"),
])
def test_n_best_and_alternatives_are_distinct(path, body, want, note):
    """N-best and alternatives are N distinct texts, from a search twice as wide; where fewer exist, the answer
    says so (`note`)."""
    with in_process(ServeConfig(), translate=Repeating()) as (url, _):
        r = requests.post(url + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()
    got = [h["text"] for h in out["translations"][0]] if path == "/v1/translate" else \
        [out["translatedText"], *out["alternatives"]]
    assert got == want
    assert out.get("note") is None if note is None else out["note"].startswith(note), out


def test_pages_are_read_one_at_a_time_off_the_event_loop(monkeypatch):
    """Four pages at once: each is read (parsed and cut into sentences) in the reader thread, one after another
    (many large pages take one core's turn, not a thread each), while a plain line is answered meanwhile."""
    from nmt.serve import service

    reading, most, lock = [0], [0], threading.Lock()
    real_plan = service.plan

    def slow_plan(*args, **kwargs):
        if args[3] != "html":  # (a short plain line: cut on the event loop)
            return real_plan(*args, **kwargs)
        with lock:
            reading[0] += 1
            most[0] = max(most[0], reading[0])
        time.sleep(0.3)
        with lock:
            reading[0] -= 1
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(service, "plan", slow_plan)
    with in_process(ServeConfig()) as (url, _):
        def page(i: int) -> requests.Response:
            return requests.post(url + "/translate", json={"q": f"<p>page {i}.</p>", "source": "en", "target": "de",
                                                           "format": "html"}, timeout=60)
        with ThreadPoolExecutor(4) as pool:
            pages = [pool.submit(page, i) for i in range(4)]
            start = time.monotonic()
            r = requests.post(url + "/translate", json={"q": "a line.", "source": "en", "target": "de"}, timeout=60)
            line_seconds = time.monotonic() - start
            answers = [p.result() for p in pages]
    assert r.status_code == 200 and all(a.status_code == 200 for a in answers)
    assert [a.json()["translatedText"] for a in answers] == [f"<p>PAGE {i}.</p>" for i in range(4)]
    assert most[0] == 1
    assert line_seconds < 0.3 * 4  # (a short line is cut on the event loop: it waits for no page)
