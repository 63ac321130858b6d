"""`nmt serve` stopped by SIGTERM under load never crashes: exit 0 and the summary line, at any moment
(issue 41: the process was finalised while the worker thread was inside CTranslate2's translate_batch, and
aborted or crashed). benchmarks/serve_sigterm.py repeats the same with a slower model, 50 times."""

from __future__ import annotations

import random
import re
import signal
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("ctranslate2")
import requests  # noqa: E402
import test_serve  # noqa: E402
from test_cli import ENV  # noqa: E402

SUMMARY = re.compile(r"stopped: \d+ request\(s\) served, \d+ failed, \d+ dropped")
CRASHES = ("Segmentation fault", "Fatal Python error", "terminate called", "Traceback", "Aborted")


def sigterm_under_load(checkpoint: Path, lines: list[str], delay: float, *options: str) -> tuple[int, str]:
    """Exit code and stderr of a server stopped `delay` s after 16 clients began posting `lines` in a loop."""
    server = test_serve.Server(checkpoint, *options, env={**ENV, "PYTHONFAULTHANDLER": "1"})
    proc, url = server.proc, server.url
    stop = threading.Event()

    def client() -> None:
        with requests.Session() as session:
            while not stop.is_set():
                try:
                    session.post(url + "/v1/translate", json={"text": lines}, timeout=30)
                except requests.RequestException:  # refused or cut: the server is going away
                    time.sleep(0.01)

    clients = [threading.Thread(target=client, daemon=True) for _ in range(16)]
    for t in clients:
        t.start()
    try:
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for t in clients:
            t.join(timeout=35)
    return proc.returncode, stderr.decode(errors="replace")


@pytest.mark.slow
def test_sigterm_under_load_exits_0_every_time(tiny_checkpoint: Path, tiny_corpus: Path) -> None:
    """Five SIGTERMs at seeded moments while the CTranslate2 engine translates; --drain-timeout 0 cuts every
    client at once, so the worker is inside translate_batch when the drain ends (before the fix, the process
    was then finalised under that call: SIGABRT or SIGSEGV)."""
    test = (tiny_corpus / "test.en").read_text(encoding="utf-8").splitlines()
    lines = sorted(test, key=len, reverse=True)[:16]
    rng = random.Random(41)
    for delay in [rng.uniform(0.05, 0.4) for _ in range(5)]:
        code, stderr = sigterm_under_load(tiny_checkpoint, lines, delay, "--engine", "ctranslate2",
                                          "--drain-timeout", "0")
        assert code == 0, f"SIGTERM after {delay:.3f}s: exit {code}\n{stderr}"
        assert not any(crash in stderr for crash in CRASHES), stderr
        assert SUMMARY.fullmatch(stderr.strip().splitlines()[-1]), stderr
