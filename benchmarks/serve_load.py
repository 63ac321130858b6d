"""`nmt serve` under concurrent load: throughput and latency with 1, 8, 32 and 128 clients, each sending one
sentence per request, against offline `nmt translate` of the same sentences in the same run.

Run by hand (results go to docs/commands/serve.md):

    .venv/bin/python benchmarks/serve_load.py --model multi30k-run/en-de/averaged.pt \\
        --sentences 300 --clients 1 32 --threads 1 --rounds 5 [--baseline ../nmt-before]

Loopback traffic only (127.0.0.1, a port chosen at random); the benchmark starts the server itself and
stops it at the end. Each client loops over its share of the sentences, one POST /v1/translate at a time,
so a level of C clients keeps C requests in flight. The server and offline translation run with the same
search (beam 4, lenpen 0.6) and the same torch threads; the outputs are compared line by line.

Two more columns explain the figures: the mean batch the server formed (from its /metrics), and the
model alone (no HTTP, no queue, in another process) translating chunks of C lines, the most a server can
reach when C closed-loop clients never let a batch hold more than C lines.

`--baseline DIR` serves the same model from an older source tree too (DIR holds its `nmt` package), and
`--rounds N` repeats the offline run and every level N times, the servers taking turns within each round
(in alternating order), so that a shared machine's load weighs on both alike; figures are medians over
the rounds, "vs offline" against the offline run of the same round.
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


MODEL_ALONE = """
import sys, time, torch
from pathlib import Path
from nmt.search import SearchConfig
from nmt.translate import Translator
torch.set_num_threads(int(sys.argv[2]))
tr = Translator([Path(sys.argv[1])], SearchConfig(beam=4, lenpen=0.6), device="cpu", progress=lambda p: None)
lines = sys.stdin.read().splitlines()
tr.translate_chunk(lines[:8])
for size in map(int, sys.argv[3:]):
    start = time.perf_counter()
    for i in range(0, len(lines), size):
        tr.translate_chunk(lines[i : i + size])
    print(size, len(lines) / (time.perf_counter() - start))
"""


def model_alone(model: Path, sentences: list[str], sizes: list[int], threads: int) -> dict[int, float]:
    """Sentences/s of the model itself (no HTTP, no queue) translating chunks of `size` lines: the most a
    server can reach when its batches hold `size` lines (C closed-loop clients never fill more than C)."""
    out = subprocess.run([sys.executable, "-c", MODEL_ALONE, str(model), str(threads), *map(str, sizes)],
                         input="\n".join(sentences), capture_output=True, text=True, check=True).stdout
    return {int(size): float(rate) for size, rate in (line.split() for line in out.splitlines())}


def batch_stats(url: str) -> tuple[float, float]:
    """(lines translated, batches) so far, from the server's /metrics."""
    text = requests.get(url + "/metrics", timeout=10).text
    values = dict(line.split()[:2] for line in text.splitlines() if line.startswith("nmt_batch_sentences_"))
    return float(values["nmt_batch_sentences_sum"]), float(values["nmt_batch_sentences_count"])


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


def start_server(args, tree: Path | None) -> tuple[subprocess.Popen, str]:
    """`nmt serve` (from the source tree `tree`, else this one) on a free port; (process, url) once ready."""
    port = free_port()
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH")) if p)
    server = subprocess.Popen([sys.executable, "-m", "nmt", "serve", "-m", str(args.model), "--port", str(port),
                               "--threads", str(args.threads), "--max-wait-ms", str(args.max_wait_ms),
                               "--quiet-ms", str(args.quiet_ms)],
                              stderr=subprocess.DEVNULL, env=env, cwd=tree)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            if requests.get(url + "/health", timeout=1).status_code == 200:
                return server, url
        except (requests.ConnectionError, requests.Timeout):  # refused, or held while the model loads
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            server.terminate()
            sys.exit(f"the server ({tree or 'this tree'}) did not start")
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with test_2016_flickr.en.gz")
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-wait-ms", type=float, default=50.0)
    ap.add_argument("--quiet-ms", type=float, default=5.0)
    ap.add_argument("--alone-sentences", type=int, default=256, help="sentences for the model-alone column")
    ap.add_argument("--baseline", type=Path, help="folder holding an older `nmt` package: its server runs too")
    ap.add_argument("--rounds", type=int, default=1, help="repeat everything; medians over the rounds")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    sentences = read_sentences(args.data / "test_2016_flickr.en.gz", args.sentences)
    trees: dict[str, Path | None] = {"nmt": None}
    if args.baseline:
        trees["nmt@base"] = args.baseline.resolve()
    servers = {name: start_server(args, tree) for name, tree in trees.items()}
    runs: dict[tuple[str, int], list[dict]] = {(name, c): [] for name in servers for c in args.clients}
    offline_rates, offline_out = [], []
    try:
        for r in range(args.rounds):
            offline_s, offline_out = offline(args.model, sentences, args.threads)
            offline_rates.append(len(sentences) / offline_s)
            for c in args.clients:
                for name in (list(servers) if r % 2 == 0 else list(servers)[::-1]):
                    url = servers[name][1]
                    before = batch_stats(url)
                    row = load(url + "/v1/translate", sentences, c)
                    after = batch_stats(url)
                    row["mean_batch"] = (after[0] - before[0]) / max(after[1] - before[1], 1)
                    row["vs_offline"] = row["sentences_per_s"] / offline_rates[-1]
                    row["same"] = sum(a == b for a, b in zip(row.pop("outputs"), offline_out))
                    runs[name, c].append(row)
    finally:
        for server, _ in servers.values():
            server.terminate()
            server.wait(timeout=120)

    alone = model_alone(args.model, sentences[: args.alone_sentences], args.clients, args.threads)
    offline_rate = statistics.median(offline_rates)
    rows = []
    for (name, c), found in runs.items():
        row = {k: statistics.median(x[k] for x in found)
               for k in ("sentences_per_s", "vs_offline", "p50", "p95", "p99", "mean_batch", "seconds")}
        row.update(server=name, clients=c, errors=sum(x["errors"] for x in found), same=min(x["same"] for x in found),
                   model_alone=alone[c])
        rows.append(row)
    print(f"offline `nmt translate`: {len(sentences)} sentences at {offline_rate:.1f} sentences/s (median of "
          f"{args.rounds} round(s): {', '.join(f'{x:.1f}' for x in offline_rates)}; threads {args.threads}, "
          f"{os.cpu_count()} CPUs)")
    print("| server | clients | sentences/s | vs offline | vs 1 client | p50 ms | p95 ms | p99 ms | errors "
          "| same output as offline | mean batch | model alone, batches of C lines |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for r in rows:
        one = next((x for x in rows if x["server"] == r["server"] and x["clients"] == 1), r)
        print(f"| {r['server']} | {r['clients']} | {r['sentences_per_s']:.1f} | {r['vs_offline']:.0%} | "
              f"{r['sentences_per_s'] / one['sentences_per_s']:.1f}x | {r['p50'] * 1000:.0f} | {r['p95'] * 1000:.0f} | "
              f"{r['p99'] * 1000:.0f} | {r['errors']} | {r['same']}/{len(sentences)} | {r['mean_batch']:.1f} | "
              f"{alone[r['clients']]:.1f} ({alone[r['clients']] / offline_rate:.0%}) |")
    if args.json:
        args.json.write_text(json.dumps({"offline_rates": offline_rates, "sentences": len(sentences),
                                         "rounds": args.rounds, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
