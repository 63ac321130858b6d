"""SIGTERM under load, repeated: `nmt serve` must exit 0 after its drain, with its summary line, every time.

Each try starts `nmt serve` (port 0 chosen here, --threads 1), waits for /health, starts C clients that each
post requests of L long lines in a loop, sends SIGTERM at a random moment (seeded: `--seed`, the same moments
every run) while the engine is busy, and waits for the process to end. It records the exit code and the last
line of stderr; the table counts exits 0 (with the summary line), other exit codes (139: a segmentation fault)
and timeouts (killed after --wait seconds).

Run by hand (results go to docs/commands/serve.md, "Lifecycle"):

    .venv/bin/python benchmarks/serve_sigterm.py --engine ctranslate2 --tries 50
    .venv/bin/python benchmarks/serve_sigterm.py --engine torch --tries 10

Without --model it makes one in --workdir (kept for the next run): the "small" preset (3+3 layers, d_model 256)
trained for 2 updates on the bundled sample corpus. Untrained, it writes every output to its length limit, so a
batch of 16 long lines takes a few hundred milliseconds on one thread: SIGTERM lands inside the engine's call.
"""

from __future__ import annotations

import argparse
import collections
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import requests
from serving import start_server, tree_env

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "nmt" / "sample_data"
BPE = ROOT / "tests" / "data" / "sample-bpe-1000.model"
ENV = tree_env(ROOT, NO_COLOR="1", PYTHONFAULTHANDLER="1")  # a crash shows its stacks


def make_model(workdir: Path) -> Path:
    """A checkpoint of the small preset after 2 updates (made once per workdir)."""
    checkpoint = workdir / "run" / "checkpoint_last.pt"
    if checkpoint.exists():
        return checkpoint
    from nmt.data.dataset import prepare
    from nmt.training.launch import train

    workdir.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "de"):
        shutil.copyfile(SAMPLE / f"train.{lang}", workdir / f"train.{lang}")
    shutil.copyfile(BPE, workdir / "bpe.model")
    prepare(workdir / "bpe.model", workdir / "data", "en", "de", workdir / "train")
    train(workdir / "data", workdir / "run", preset="small",
          train_overrides=dict(max_updates=2, save_interval=2, valid_interval=1000, log_interval=1))
    found = sorted((workdir / "run").glob("checkpoint_*.pt"))
    if not found:
        raise SystemExit(f"no checkpoint in {workdir / 'run'}")
    return found[-1]


def load(url: str, lines: list[str], clients: int, stop: threading.Event) -> list[threading.Thread]:
    """`clients` threads posting `lines` in a loop until `stop` (errors ignored: the server is going away)."""
    def client() -> None:
        with requests.Session() as session:
            while not stop.is_set():
                try:
                    session.post(url + "/v1/translate", json={"text": lines}, timeout=30)
                except requests.RequestException:
                    time.sleep(0.01)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    return threads


def one_try(model: Path, engine: str, lines: list[str], clients: int, delay: float, wait: float,
            stderr_path: Path, options: list[str]) -> tuple[str, str]:
    """("0" | exit code | "timeout", last stderr line) of one SIGTERM `delay` s after the load started."""
    proc, url = start_server(["-m", str(model), "--threads", "1", "--engine", engine, *options], ENV, stderr_path)
    stop = threading.Event()
    threads = load(url, lines, clients, stop)
    try:
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        try:
            code = str(proc.wait(timeout=wait))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = "timeout"
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=35)
    text = stderr_path.read_text(encoding="utf-8", errors="replace")
    last = (text.strip().splitlines() or [""])[-1]
    if code == "0" and ("stopped:" not in last or "Traceback" in text or "Segmentation fault" in text):
        code = "0, bad stderr"
    return code, last


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, help="a checkpoint (default: one made in --workdir)")
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "nmt-serve-sigterm")
    p.add_argument("--engine", default="ctranslate2", choices=["ctranslate2", "torch"])
    p.add_argument("--tries", type=int, default=50)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--lines", type=int, default=16, help="lines per request")
    p.add_argument("--max-delay", type=float, default=1.0, help="SIGTERM at a moment in [0.05, this] s of load")
    p.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the exit before SIGKILL")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--serve-option", action="append", default=[], help="passed to nmt serve (repeatable)")
    args = p.parse_args()
    model = args.model or make_model(args.workdir)
    with open(SAMPLE / "test.en", encoding="utf-8") as f:
        long_lines = sorted((line.strip() for line in f), key=len, reverse=True)[: args.lines]
    rng = random.Random(args.seed)
    counts: collections.Counter[str] = collections.Counter()
    stderr_path = args.workdir / "serve.stderr"
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"model {model}, engine {args.engine}, {args.clients} clients x {args.lines} lines, {args.tries} tries")
    for i in range(args.tries):
        delay = rng.uniform(0.05, args.max_delay)
        code, last = one_try(model, args.engine, long_lines, args.clients, delay, args.wait, stderr_path,
                             args.serve_option)
        counts["0" if code == "0" else "timeout" if code == "timeout" else "other"] += 1
        print(f"try {i + 1:3d}: SIGTERM after {delay:.3f}s -> exit {code}: {last}", flush=True)
        if code != "0":
            shutil.copyfile(stderr_path, args.workdir / f"serve.stderr.{i + 1}")
    print(f"\n| engine | tries | exit 0 | other exit codes | timeouts |\n|---|---|---|---|---|\n"
          f"| {args.engine} | {args.tries} | {counts['0']} | {counts['other']} | {counts['timeout']} |")


if __name__ == "__main__":
    main()
