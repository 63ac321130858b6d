"""`nmt serve` in a real browser: headless Chromium loads a page of another origin (a second HTTP server) whose
script POSTs JSON to the server's /translate (a CORS preflight first), and the server's own page at /. The DOM
after the scripts ran (--dump-dom) shows what the page got.

Skipped where /usr/bin/chromium is missing (Debian's `chromium` package), unless NMT_REQUIRE_BROWSER=1 (CI),
where that is a failure."""

from __future__ import annotations

import html
import http.server
import json
import os
import re
import subprocess
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    if os.environ.get("NMT_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{CHROMIUM} is missing and NMT_REQUIRE_BROWSER=1: install the chromium package",
                    pytrace=False)
    pytest.skip(f"{CHROMIUM} is missing (the chromium package)", allow_module_level=True)
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
from test_serve_web import Server  # noqa: E402

SENTENCE = "A man is walking."
BROWSER_SECONDS = 60  # a bound against a hang, not a timing the test depends on


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    srv = Server(tiny_checkpoint, tmp_path_factory.mktemp("log") / "access.log")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def strict_server(tiny_checkpoint, tmp_path_factory):
    """A server whose pages may come from https://example.org only."""
    srv = Server(tiny_checkpoint, tmp_path_factory.mktemp("log") / "access.log", "--cors-origins",
                 "https://example.org")
    yield srv
    srv.stop()


CALLER = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>caller</title></head><body>
<div id="out">waiting</div>
<script>
fetch(%(url)s + "/translate", {method: "POST", headers: {"Content-Type": "application/json"},
                               body: JSON.stringify({q: %(q)s, source: "en", target: "de"})})
  .then((r) => r.json())
  .then((a) => { document.getElementById("out").textContent = "TRANSLATED:" + a.translatedText; })
  .catch((e) => { document.getElementById("out").textContent = "FAILED:" + e.name; });
</script></body></html>
"""


@pytest.fixture(scope="module")
def pages():
    """A static HTTP server on another port (another origin): GET /call?<nmt url> serves CALLER for that server."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            target = self.path.partition("?")[2]
            body = (CALLER % {"url": json.dumps(target), "q": json.dumps(SENTENCE)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def dom(url: str, profile: Path) -> str:
    """The DOM of `url` once its scripts ran (headless Chromium, a fresh profile, no network beyond the URL)."""
    r = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=10000",
                        "--dump-dom", url], capture_output=True, text=True, timeout=BROWSER_SECONDS)
    assert r.returncode == 0 and "</html>" in r.stdout, r.stderr[-2000:]
    return r.stdout


def element_text(page: str, element_id: str) -> str:
    found = re.search(rf'<(\w+)[^>]* id="{element_id}"[^>]*>(.*?)</\1>', page, re.DOTALL)
    assert found, f"no #{element_id} in the page"
    return html.unescape(found.group(2))


def test_a_page_of_another_origin_translates(server, pages, tmp_path):
    expected = server.translate(SENTENCE)
    page = dom(f"{pages}/call?{server.url}", tmp_path / "profile")
    assert element_text(page, "out") == "TRANSLATED:" + expected
    log = server.log.read_text()
    assert re.search(r" OPTIONS /translate 200 ", log) and re.search(r" POST /translate 200 ", log), log


def test_a_page_of_an_origin_not_allowed_cannot_read_the_answer(strict_server, pages, tmp_path):
    strict_server.translate(SENTENCE)  # the server itself translates
    page = dom(f"{pages}/call?{strict_server.url}", tmp_path / "profile")
    assert element_text(page, "out") == "FAILED:TypeError"  # what fetch raises for a CORS failure
    assert " OPTIONS /translate 400 " in strict_server.log.read_text()
    assert " POST /translate " not in strict_server.log.read_text().split(" OPTIONS ")[-1]  # never sent


def test_the_server_s_own_page_lists_the_languages_and_translates(server, tmp_path):
    page = dom(server.url + "/", tmp_path / "profile")
    sources = re.findall(r'<option value="([^"]*)">([^<]*)</option>', element_text(page, "source"))
    targets = re.findall(r'<option value="([^"]*)">([^<]*)</option>', element_text(page, "target"))
    assert sources == [("auto", "Auto Detect"), ("en", "English")]  # the languages it translates from
    assert targets == [("de", "German")]
    assert 'data-state="ready"' in page and element_text(page, "status") == "ready"
    expected = server.translate(SENTENCE)
    page = dom(f"{server.url}/?source=en&target=de&q={quote(SENTENCE)}", tmp_path / "profile2")
    assert element_text(page, "output") == expected and 'data-state="done"' in page, element_text(page, "status")
