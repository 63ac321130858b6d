"""`nmt serve` under concurrent load, over both engines side by side: throughput and latency with 1 and 32
clients (by default), each sending one sentence per request, against offline `nmt translate` of the same
sentences with the same engine, in the same run.

Run by hand (results go to docs/commands/serve.md):

    .venv/bin/python benchmarks/serve_load.py --model run/averaged.pt --src test.en \\
        --sentences 300 --clients 1 32 --engines torch ctranslate2 --threads 1 --rounds 3
    .venv/bin/python benchmarks/serve_load.py --model student/averaged.pt --src test.en --sentences 1000 \\
        --clients 1 32 --engines ctranslate2 --int8 --beam 1 --threads 1 --rounds 3 \\
        --baseline OLD_TREE --baseline-engine ctranslate2

The last column is the server's CPU time per request (Linux /proc): its event loop's thread, and the whole
process (the engine and the batcher included).

Loopback traffic only (127.0.0.1, a port chosen at random); the benchmark starts the servers itself and
stops them at the end. Each client loops over its share of the sentences, one POST /v1/translate at a time,
so a level of C clients keeps C requests in flight. The servers and offline translation run with the same
search (nmt's defaults: beam 4, GNMT 0.6) and threads; the outputs are compared line by line.

Columns that explain the figures: the mean batch the server formed (from its /metrics); the model alone (no
HTTP, no queue, in another process) translating chunks of C lines, the most a server can reach when C
closed-loop clients never let a batch hold more than C lines; and CTranslate2 used directly on one
sentence at a time (translate_batch of one sentence, BPE included), the latency to compare 1 client with.

`--batching`: also, in one process and without HTTP, C closed-loop client threads served by nmt's batcher
over the CTranslate2 engine, against the same clients each calling CTranslate2's translate_batch themselves
(its own queue: one job per call, no merging across calls, with one thread as the engine has).

`--baseline DIR` serves the torch engine from an older source tree too (DIR holds its `nmt` package), and
`--rounds N` repeats the offline runs and every level N times, the servers taking turns within each round
(in alternating order), so that a shared machine's load weighs on all alike; figures are medians over
the rounds, "vs offline" against the offline run of the same engine in the same round.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

import requests
from serving import DEFAULT_DATA, read_sentences, start_server, tree_env


def offline(model: Path, sentences: list[str], threads: int, engine: str, tree: Path | None = None,
            extra: Sequence[str] = ()) -> tuple[float, list[str]]:
    """Seconds and output of `nmt translate --engine ENGINE EXTRA` over all sentences (model loading excluded: timed
    from the first byte written to the last line read, with the model already loaded by a warm-up line)."""
    proc = subprocess.Popen([sys.executable, "-m", "nmt", "translate", "-m", str(model), "--threads", str(threads),
                             *engine_flags(engine, tree), *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=tree_env(tree))
    proc.stdin.write("warm up\n")
    proc.stdin.flush()
    proc.stdout.readline()
    def feed() -> None:  # from a thread: a long input would fill both pipes while written at once
        proc.stdin.write("".join(s + "\n" for s in sentences))
        proc.stdin.close()

    start = time.monotonic()
    feeder = threading.Thread(target=feed)
    feeder.start()
    out = [proc.stdout.readline().rstrip("\n") for _ in sentences]
    seconds = time.monotonic() - start
    feeder.join()
    proc.wait()
    return seconds, out


MODEL_ALONE = """
import sys, time, torch
from pathlib import Path
from nmt.config import InferenceConfig, Overrides, SearchConfig
from nmt.engines.choice import open_engine
torch.set_num_threads(int(sys.argv[2]))
search = {"beam": int(sys.argv[5])} if int(sys.argv[5]) else {}
tr = open_engine([Path(sys.argv[1])], Overrides(SearchConfig, search), Overrides(InferenceConfig, {"engine": sys.argv[3], "threads": int(sys.argv[2]), "int8": sys.argv[4] == "1"}))
lines = sys.stdin.read().splitlines()
tr.translate_chunk(lines[:8])
for size in map(int, sys.argv[6:]):
    start = time.perf_counter()
    for i in range(0, len(lines), size):
        tr.translate_chunk(lines[i : i + size])
    print(size, len(lines) / (time.perf_counter() - start))
"""


def model_alone(model: Path, sentences: list[str], sizes: list[int], threads: int, engine: str, int8: bool = False,
                beam: int = 0) -> dict[int, float]:
    """Sentences/s of the engine itself (no HTTP, no queue) translating chunks of `size` lines: the most a
    server can reach when its batches hold `size` lines (C closed-loop clients never fill more than C)."""
    out = subprocess.run([sys.executable, "-c", MODEL_ALONE, str(model), str(threads), engine, str(int(int8)),
                          str(beam), *map(str, sizes)],
                         input="\n".join(sentences), capture_output=True, text=True, check=True).stdout
    return {int(size): float(rate) for size, rate in (line.split() for line in out.splitlines())}


CT2_ONE = """
import statistics, sys, time
from pathlib import Path
import ctranslate2
from nmt.engines.conversions import converted
from nmt.engines.ct2_export import ctranslate2_vocabulary, read_meta
from nmt.text.tokenizer import load_tokenizer, read_files
folder = converted(Path(sys.argv[1]))
tok = load_tokenizer(read_files(folder, read_meta(folder).get("tokenizer")), str(folder))
vocab = ctranslate2_vocabulary(tok)
tr = ctranslate2.Translator(str(folder), compute_type=sys.argv[3], intra_threads=int(sys.argv[2]))
lines = sys.stdin.read().splitlines()
times = []
for i, line in enumerate(lines):
    start = time.perf_counter()
    pieces = [vocab[t] for t in tok.encode([line], side="source")[0]]
    out = tr.translate_batch([pieces], beam_size=4, length_penalty=0.6, max_decoding_length=int(1.5 * len(pieces)) + 11)
    tok.decode([[vocab.index(t) for t in out[0].hypotheses[0]]])
    if i >= 8:  # after a warm-up
        times.append(time.perf_counter() - start)
print(statistics.median(times))
"""


def ct2_one_sentence(model: Path, sentences: list[str], threads: int, compute_type: str = "float32") -> float:
    """Median seconds of CTranslate2 used directly on one sentence (BPE in and out included), beam 4."""
    out = subprocess.run([sys.executable, "-c", CT2_ONE, str(model), str(threads), compute_type],
                         input="\n".join(sentences), capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


BATCHING = """
import json, statistics, sys, threading, time, asyncio
from pathlib import Path
from nmt.config import InferenceConfig, Overrides, SearchConfig, ServeConfig
from nmt.engines.choice import open_engine
from nmt.serve.batcher import Batcher
from nmt.serve.backend import translate_function
model, threads, clients = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
lines = sys.stdin.read().splitlines()
engine = open_engine([model], Overrides(SearchConfig), Overrides(InferenceConfig, {"engine": "ctranslate2", "threads": threads}))
engine.translate_chunk(lines[:8])

def closed_loop(call):
    latencies, lock = [], threading.Lock()
    def client(k):
        for i in range(k, len(lines), clients):
            t0 = time.perf_counter()
            call(lines[i])
            with lock:
                latencies.append(time.perf_counter() - t0)
    start = time.perf_counter()
    workers = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for w in workers: w.start()
    for w in workers: w.join()
    q = statistics.quantiles(latencies, n=100)
    return {"sentences_per_s": len(lines) / (time.perf_counter() - start), "p50": q[49], "p99": q[98]}

# CTranslate2's own queue: each client calls translate_batch with its sentence (one job per call)
def direct(line):
    encoded = engine.encode([line], 0)
    engine.search_batch(encoded, [0])
results = {"ctranslate2 queue": closed_loop(direct)}

# nmt's batcher: requests merged into chunks by one worker thread
loop = asyncio.new_event_loop()
threading.Thread(target=loop.run_forever, daemon=True).start()
# the batching of `nmt serve` over this engine (its --max-wait-ms default is the engine's)
batcher = Batcher(translate_function(engine), ServeConfig(max_batch_sentences=128).for_engine(engine.name))
batcher.start()
def batched(line):
    async def submit():
        return await batcher.submit([line], engine.search_cfg).future
    asyncio.run_coroutine_threadsafe(submit(), loop).result()
results["nmt batcher"] = closed_loop(batched)
print(json.dumps(results))
"""


def compare_batching(model: Path, sentences: list[str], threads: int, clients: int) -> dict:
    out = subprocess.run([sys.executable, "-c", BATCHING, str(model), str(threads), str(clients)],
                         input="\n".join(sentences), capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def batch_stats(url: str) -> tuple[float, float]:
    """(lines translated, batches) so far, from the server's /metrics."""
    text = requests.get(url + "/metrics", timeout=10).text
    values = dict(line.split()[:2] for line in text.splitlines() if line.startswith("nmt_batch_sentences_"))
    return float(values["nmt_batch_sentences_sum"]), float(values["nmt_batch_sentences_count"])


def load(url: str, sentences: list[str], clients: int, kind: str = "http.client") -> dict:
    """`clients` threads, each posting its share of the sentences one at a time over one kept-alive connection:
    with `requests` (a Session each), or with the standard library's http.client, which spends a fifth of the
    CPU time per request (the clients share the server's cores here, as real clients would not)."""
    latencies: list[float] = []
    results: dict[int, str] = {}
    errors = []
    lock = threading.Lock()
    address = urllib.parse.urlsplit(url)

    def post_with_requests(session: requests.Session, text: str) -> tuple[int, bytes]:
        r = session.post(url, json={"text": text}, timeout=120)
        return r.status_code, r.content

    def post_with_http_client(connection: http.client.HTTPConnection, text: str) -> tuple[int, bytes]:
        connection.request("POST", address.path, body=json.dumps({"text": text}),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()

    def client(k: int) -> None:
        if kind == "requests":
            connection, post = requests.Session(), post_with_requests
        else:
            connection, post = http.client.HTTPConnection(address.hostname, address.port, timeout=120), \
                post_with_http_client
        with contextlib.closing(connection):
            for i in range(k, len(sentences), clients):
                t0 = time.monotonic()
                status, body = post(connection, sentences[i])  # type: ignore[arg-type]
                dt = time.monotonic() - t0
                with lock:
                    if status != 200:
                        errors.append(status)
                        continue
                    latencies.append(dt)
                    results[i] = json.loads(body)["translations"][0]

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


def engine_flags(engine: str, tree: Path | None) -> list[str]:
    """--engine ENGINE, left out for an older tree's torch (trees from before --engine serve with torch)."""
    return [] if tree is not None and engine == "torch" else ["--engine", engine]


def search_flags(args) -> list[str]:
    """The options of both the servers and offline translation: --int8, --beam."""
    return [*(["--int8"] if args.int8 else []), *(["--beam", str(args.beam)] if args.beam else [])]


def server_of(args, engine: str, tree: Path | None) -> tuple[subprocess.Popen, str]:
    """`nmt serve --engine ENGINE` (from the source tree `tree`, else this one) on a free port; (process, url)
    once ready."""
    return start_server(["-m", str(args.model), "--threads", str(args.threads), *search_flags(args),
                         *(["--max-wait-ms", str(args.max_wait_ms)] if args.max_wait_ms is not None else []),
                         *(["--quiet-ms", str(args.quiet_ms)] if args.quiet_ms is not None else []),
                         *engine_flags(engine, tree)], tree_env(tree), cwd=tree)


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) of the process's main thread (the event loop) and of the whole process, from
    /proc (Linux; (nan, nan) elsewhere)."""
    def read(path: str) -> float:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    try:
        return read(f"/proc/{pid}/task/{pid}/stat"), read(f"/proc/{pid}/stat")
    except OSError:
        return float("nan"), float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with test_2016_flickr.en.gz")
    ap.add_argument("--src", type=Path, help="source sentences (default DATA/test_2016_flickr.en.gz)")
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--engines", nargs="+", default=["torch", "ctranslate2"], choices=["torch", "ctranslate2"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-wait-ms", type=float, help="the servers' --max-wait-ms (default: theirs)")
    ap.add_argument("--quiet-ms", type=float, help="the servers' --quiet-ms (default: theirs)")
    ap.add_argument("--alone-sentences", type=int, default=256, help="sentences for the model-alone column")
    ap.add_argument("--batching", action="store_true", help="also compare nmt's batcher with CTranslate2's own queue")
    ap.add_argument("--baseline", type=Path, help="folder holding an older `nmt` package: its server runs too")
    ap.add_argument("--baseline-engine", default="torch", choices=["torch", "ctranslate2"],
                    help="--baseline's engine (torch: a tree from before --engine too)")
    ap.add_argument("--int8", action="store_true", help="servers and offline: --int8")
    ap.add_argument("--beam", type=int, help="servers and offline: --beam N (default: the checkpoint's)")
    ap.add_argument("--client", choices=["http.client", "requests"], default="http.client",
                    help="the load generator's HTTP library (requests spends about 5x the CPU per request)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat everything; medians over the rounds")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    sentences = read_sentences(args.src or args.data / "test_2016_flickr.en.gz", args.sentences)
    if "ctranslate2" in args.engines:
        from nmt.engines.conversions import converted

        converted(args.model)  # made before the servers start, as a second use finds it
    plans: dict[str, tuple[str, Path | None]] = {engine: (engine, None) for engine in args.engines}
    if args.baseline:
        plans[f"{args.baseline_engine}@base"] = (args.baseline_engine, args.baseline.resolve())
    servers = {name: server_of(args, engine, tree) for name, (engine, tree) in plans.items()}
    runs: dict[tuple[str, int], list[dict]] = {(name, c): [] for name in servers for c in args.clients}
    offline_rates: dict[str, list[float]] = {name: [] for name in servers}
    try:
        for r in range(args.rounds):
            outputs = {}
            for name, (engine, tree) in plans.items():
                offline_s, outputs[name] = offline(args.model, sentences, args.threads, engine, tree,
                                                   search_flags(args))
                offline_rates[name].append(len(sentences) / offline_s)
            for c in args.clients:
                for name in (list(servers) if r % 2 == 0 else list(servers)[::-1]):
                    url = servers[name][1]
                    before, cpu_before = batch_stats(url), cpu_seconds(servers[name][0].pid)
                    row = load(url + "/v1/translate", sentences, c, args.client)
                    after, cpu_after = batch_stats(url), cpu_seconds(servers[name][0].pid)
                    row["loop_ms"], row["process_ms"] = ((b - a) * 1000 / len(sentences)
                                                         for a, b in zip(cpu_before, cpu_after))
                    row["mean_batch"] = (after[0] - before[0]) / max(after[1] - before[1], 1)
                    row["vs_offline"] = row["sentences_per_s"] / offline_rates[name][-1]
                    row["same"] = sum(a == b for a, b in zip(row.pop("outputs"), outputs[name]))
                    row["same_as_torch"] = sum(a == b for a, b in zip(outputs[name], outputs[args.engines[0]]))
                    runs[name, c].append(row)
    finally:
        for server, _ in servers.values():
            server.terminate()
            server.wait(timeout=120)

    alone = {engine: model_alone(args.model, sentences[: args.alone_sentences], args.clients, args.threads, engine,
                                 args.int8, args.beam or 0) for engine in args.engines}
    one = ct2_one_sentence(args.model, sentences[: args.alone_sentences], args.threads)
    rows = []
    for (name, c), found in runs.items():
        row = {k: statistics.median(x[k] for x in found)
               for k in ("sentences_per_s", "vs_offline", "p50", "p95", "p99", "mean_batch", "seconds", "loop_ms",
                         "process_ms")}
        row.update(server=name, clients=c, errors=sum(x["errors"] for x in found), same=min(x["same"] for x in found),
                   model_alone=alone.get(name, {}).get(c), offline=statistics.median(offline_rates[name]))
        rows.append(row)
    for name, rates in offline_rates.items():
        print(f"offline `nmt translate` ({name}): {len(sentences)} sentences at {statistics.median(rates):.1f} "
              f"sentences/s (median of {args.rounds} round(s): {', '.join(f'{x:.1f}' for x in rates)})")
    print(f"CTranslate2 used directly, one sentence (float32, beam 4, BPE included): median {one * 1000:.0f} ms; "
          f"threads {args.threads}, {os.cpu_count()} CPUs; clients: {args.client}")
    print("| server | clients | sentences/s | vs offline | p50 ms | p95 ms | p99 ms | p50 / CTranslate2's one sentence "
          "| errors | same output as offline | mean batch | engine alone, batches of C lines "
          "| server CPU ms per request: event loop, process |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in rows:
        alone_rate = f"{r['model_alone']:.1f} ({r['model_alone'] / r['offline']:.0%})" if r["model_alone"] else ""
        print(f"| {r['server']} | {r['clients']} | {r['sentences_per_s']:.1f} | {r['vs_offline']:.0%} | "
              f"{r['p50'] * 1000:.0f} | {r['p95'] * 1000:.0f} | {r['p99'] * 1000:.0f} | {r['p50'] / one:.1f}x | "
              f"{r['errors']} | {r['same']}/{len(sentences)} | {r['mean_batch']:.1f} | {alone_rate} | "
              f"{r['loop_ms']:.2f}, {r['process_ms']:.2f} |")
    batching = {}
    if args.batching:
        batching = {c: compare_batching(args.model, sentences, args.threads, c) for c in args.clients if c > 1}
        print()
        print("| clients | batching | sentences/s | p50 ms | p99 ms |")
        print("|---:|---|---:|---:|---:|")
        for c, found in batching.items():
            for how, m in found.items():
                print(f"| {c} | {how} | {m['sentences_per_s']:.1f} | {m['p50'] * 1000:.0f} | {m['p99'] * 1000:.0f} |")
    if args.json:
        args.json.write_text(json.dumps({"offline_rates": offline_rates, "sentences": len(sentences),
                                         "ct2_one_sentence_s": one, "rounds": args.rounds, "rows": rows,
                                         "batching": batching}, indent=2) + "\n")


if __name__ == "__main__":
    main()
