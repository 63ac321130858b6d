"""`nmt serve` under a few clients that send large requests: the latency of one-line requests beside them
(fairness), and how soon the engine is free after a large request's client leaves (cancellation).

Run by hand (results go to docs/commands/serve.md):

    .venv/bin/python benchmarks/serve_fairness.py --model run/averaged.pt --src test.en --threads 1 \\
        --big-clients 3 --big-lines 256 --probes 20 [--baseline DIR]

Loopback traffic only; the benchmark starts each server itself (a port chosen at random) and stops it. Per
server, three phases: one-line requests alone, one a second (`--probes` of them: p50, p99, max); the same
while `--big-clients` clients each send requests of `--big-lines` lines (beam `--beam`) in a loop, one at a
time; then, the big clients stopped and the engine idle, one large request whose client leaves after
`--leave-after` s, and a one-line request sent at that moment: its latency is how long the departed client's
work still held the engine. `--baseline DIR` measures the server of an older source tree too (DIR holds its
`nmt` package, put first on PYTHONPATH), in the same run.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import requests
from serving import DEFAULT_DATA, read_sentences, start_server, tree_env


def one_line(url: str, line: str) -> float:
    """Seconds to translate one line."""
    start = time.monotonic()
    r = requests.post(url + "/v1/translate", json={"text": line}, timeout=600)
    r.raise_for_status()
    return time.monotonic() - start


def probes(url: str, lines: list[str], n: int) -> list[float]:
    """n one-line requests, one a second (or as soon as the last is answered, when it took longer)."""
    out = []
    for i in range(n):
        began = time.monotonic()
        out.append(one_line(url, lines[i % len(lines)]))
        time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
    return out


def big_load(url: str, lines: list[str], beam: int, stop: threading.Event, done: list[float]) -> None:
    while not stop.is_set():
        start = time.monotonic()
        r = requests.post(url + "/v1/translate", json={"text": lines, "beam": beam}, timeout=600)
        r.raise_for_status()
        done.append(time.monotonic() - start)


def leave_early(url: str, lines: list[str], beam: int, after: float) -> None:
    """A large request whose client closes the connection `after` s after sending it."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"text": lines, "beam": beam}).encode()
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(after)


def quantiles(seconds: list[float]) -> str:
    if not seconds:  # e.g. no large request finished while the probes ran
        return "none finished (n 0)"
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return f"p50 {statistics.median(ms):7.0f} ms  p99 {p99:7.0f} ms  max {ms[-1]:7.0f} ms  (n {len(ms)})"


def measure(args: argparse.Namespace, name: str, tree: str | None, sentences: list[str]) -> None:
    options = ["--threads", str(args.threads), "--engine", args.engine, "--max-lines", str(args.big_lines),
               *args.server_options]
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        proc, url = start_server(["-m", args.model, *options], tree_env(tree), Path(log.name), timeout=180)
    try:
        small, big = sentences[: args.probes], sentences[: args.big_lines]
        one_line(url, small[0])
        print(f"{name}: one-line requests alone:    {quantiles(probes(url, small, args.probes))}", flush=True)
        stop, done = threading.Event(), []  # type: ignore[var-annotated]
        clients = [threading.Thread(target=big_load, args=(url, big, args.beam, stop, done))
                   for _ in range(args.big_clients)]
        for c in clients:
            c.start()
        time.sleep(1.0)
        loaded = probes(url, small, args.probes)
        stop.set()
        for c in clients:
            c.join()
        print(f"{name}: one-line requests under load: {quantiles(loaded)}", flush=True)
        print(f"{name}: {args.big_lines}-line requests meanwhile:  {quantiles(done)}", flush=True)
        one_line(url, small[0])
        leaver = threading.Thread(target=leave_early, args=(url, big, args.beam, args.leave_after))
        leaver.start()
        leaver.join()
        print(f"{name}: a one-line request as a {args.big_lines}-line request's client leaves after "
              f"{args.leave_after:g} s: {one_line(url, small[1]) * 1000:.0f} ms", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--src", type=Path, default=DEFAULT_DATA / "test_2016_flickr.en.gz")
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--big-clients", type=int, default=3)
    parser.add_argument("--big-lines", type=int, default=256)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--leave-after", type=float, default=1.0)
    parser.add_argument("--baseline", help="an older source tree (the folder holding its nmt package)")
    parser.add_argument("server_options", nargs="*", help="more options of nmt serve (after --)")
    args = parser.parse_args()
    sentences = read_sentences(args.src, max(args.big_lines, args.probes))
    if args.baseline:
        measure(args, "before", args.baseline, sentences)
    measure(args, "this tree" if args.baseline else "nmt serve", str(Path(__file__).resolve().parents[1]),
            sentences)


if __name__ == "__main__":
    main()
