"""`nmt serve` under concurrent load: throughput and latency with 1, 8, 32 and 128 clients, each sending one
sentence per request, against offline `nmt translate` of the same sentences in the same run.

Run by hand (results go to docs/commands/serve.md):

    .venv/bin/python benchmarks/serve_load.py --model multi30k-run/en-de/averaged.pt \\
        --sentences 1000 --threads 1

Loopback traffic only (127.0.0.1, a port chosen at random); the benchmark starts the server itself and
stops it at the end. Each client loops over its share of the sentences, one POST /v1/translate at a time,
so a level of C clients keeps C requests in flight. The server and offline translation run with the same
search (beam 4, lenpen 0.6) and the same torch threads; the outputs are compared line by line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def read_sentences(path: Path, n: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f][:n]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offline(model: Path, sentences: list[str], threads: int) -> tuple[float, list[str]]:
    """Seconds and output of `nmt translate` over all sentences (model loading excluded: timed from the
    first byte written to the last line read, with the model already loaded by a warm-up line)."""
    proc = subprocess.Popen([sys.executable, "-m", "nmt", "translate", "-m", str(model), "--threads", str(threads)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    proc.stdin.write("warm up\n")
    proc.stdin.flush()
    proc.stdout.readline()
    start = time.monotonic()
    proc.stdin.write("".join(s + "\n" for s in sentences))
    proc.stdin.close()
    out = [proc.stdout.readline().rstrip("\n") for _ in sentences]
    seconds = time.monotonic() - start
    proc.wait()
    return seconds, out


def load(url: str, sentences: list[str], clients: int) -> dict:
    """`clients` threads, each posting its share of the sentences one at a time."""
    latencies: list[float] = []
    results: dict[int, str] = {}
    errors = []
    lock = threading.Lock()

    def client(k: int) -> None:
        with requests.Session() as session:
            for i in range(k, len(sentences), clients):
                t0 = time.monotonic()
                r = session.post(url, json={"text": sentences[i]}, timeout=120)
                dt = time.monotonic() - t0
                with lock:
                    if r.status_code != 200:
                        errors.append(r.status_code)
                        continue
                    latencies.append(dt)
                    results[i] = r.json()["translations"][0]

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [latencies[0]] * 99
    return {"clients": clients, "seconds": seconds, "sentences_per_s": len(latencies) / seconds,
            "p50": q[49], "p95": q[94], "p99": q[98], "errors": len(errors),
            "outputs": [results.get(i) for i in range(len(sentences))]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with test_2016_flickr.en.gz")
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-wait-ms", type=float, default=10.0)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    sentences = read_sentences(args.data / "test_2016_flickr.en.gz", args.sentences)
    offline_s, offline_out = offline(args.model, sentences, args.threads)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "nmt", "serve", "-m", str(args.model), "--port", str(port),
                               "--threads", str(args.threads), "--max-wait-ms", str(args.max_wait_ms)],
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if requests.get(url + "/health", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit("the server did not start")
            time.sleep(0.2)
        rows = [load(url + "/v1/translate", sentences, c) for c in args.clients]
    finally:
        server.terminate()
        server.wait(timeout=120)

    offline_rate = len(sentences) / offline_s
    one = next((r for r in rows if r["clients"] == 1), rows[0])
    print(f"offline `nmt translate`: {len(sentences)} sentences in {offline_s:.1f} s = {offline_rate:.1f} sentences/s "
          f"(threads {args.threads}, {os.cpu_count()} CPUs)")
    print("| clients | sentences/s | vs offline | vs 1 client | p50 ms | p95 ms | p99 ms | errors | same output as offline |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        same = sum(a == b for a, b in zip(r["outputs"], offline_out))
        print(f"| {r['clients']} | {r['sentences_per_s']:.1f} | {r['sentences_per_s'] / offline_rate:.0%} | "
              f"{r['sentences_per_s'] / one['sentences_per_s']:.1f}x | {r['p50'] * 1000:.0f} | {r['p95'] * 1000:.0f} | "
              f"{r['p99'] * 1000:.0f} | {r['errors']} | {same}/{len(sentences)} |")
    if args.json:
        args.json.write_text(json.dumps({"offline_seconds": offline_s, "sentences": len(sentences),
                                         "rows": [{k: v for k, v in r.items() if k != "outputs"} for r in rows]},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
