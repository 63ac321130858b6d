"""What the server benchmarks share (serve_load.py, serve_fairness.py, serve_sigterm.py): their input sentences,
the environment that runs another source tree's nmt, and `nmt serve` started on a free port and waited for."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional, Union

import requests

from nmt.training.distributed import free_port

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def read_sentences(path: Path, n: int) -> list[str]:
    """The first `n` lines of a text file (plain or gzip)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f][:n]


def tree_env(tree: Union[str, Path, None], **extra: str) -> dict[str, str]:
    """This process's environment, with the source tree `tree` (its nmt package) first on PYTHONPATH, and `extra`."""
    env = {**os.environ, **extra}
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH")) if p)
    return env


def start_server(options: Sequence[str], env: dict[str, str], stderr_path: Optional[Path] = None,
                 timeout: float = 300, cwd: Union[str, Path, None] = None) -> tuple[subprocess.Popen[bytes], str]:
    """`nmt serve OPTIONS` on a free port of 127.0.0.1, (process, url) once /health answers 200; its stderr to
    `stderr_path` (shown if it stops before) or nowhere. SystemExit when it stops or is not ready in `timeout` s."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(stderr_path, "wb") if stderr_path else open(os.devnull, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "nmt", "serve", "--port", str(port), *options],
                                stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=cwd)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = stderr_path.read_text(encoding="utf-8", errors="replace") if stderr_path else ""
            raise SystemExit(f"the server exited {proc.returncode} before it was ready:\n{said}")
        try:
            if requests.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except requests.RequestException:  # refused, or held while the model loads
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the server did not become ready in {timeout:g} s")
