"""Translation speed on the CPU, both engines side by side in one run: nmt's torch engine (fp32, bf16, int8),
nmt's CTranslate2 engine (`--engine ctranslate2`, float32 and int8) and CTranslate2 used directly (its own
`translate_batch` and batching on BPE tokens, no nmt), offline (the whole test set in length-sorted
batches) and in the small batches a server sees.

Run by hand (results go to docs/benchmarks-translate.md):

    .venv/bin/python benchmarks/translate_speed.py --model run/averaged.pt --src test.en --ref test.de \\
        --threads 1 --repeats 3 --batch-sizes 1 8 32 --sweep-lines 300 --baseline /tmp/nmt-before

Every (engine, beam, batch size) measurement runs in its own subprocess, so that its peak RSS is its own;
the measurements are interleaved (round after round over all engines), so that noise from other work on
the machine spreads over all engines alike; the table reports the median time of the rounds.
The nmt engines run nmt's search (beam K, nmt's length penalty, GNMT 0.6 by default; the per-sentence
output limit 1.5 |x| + 10; length-sorted batches of <= --max-tokens source tokens and <= --batch-size
sentences); CTranslate2 used directly runs its own (beam K, its length penalty alpha / len^alpha with
the same alpha, the chunk's largest limit, its own batches of <= --batch-size sentences): the same work,
slightly different rankings. Timed: BPE encoding + search + decoding of the whole test set, model loading
excluded (reported separately, as is the time to the first translated line of `nmt translate`). BLEU:
sacreBLEU 13a, cased, against the reference.

`--batch-sizes 1 8 32`: beam --sweep-beam on chunks of that many consecutive lines (one `translate_chunk`
call each, as `nmt serve` translates the requests it merged; one `translate_batch` call directly), for the
`--sweep-engines`. `--baseline DIR`: the torch engines also run from the `nmt` package in DIR (e.g.
`git archive OLD_COMMIT nmt | tar -x -C DIR`), as ENGINE@base, in the same interleaved rounds, for
before/after ratios measured under the same load.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
ENGINES = {
    "nmt-fp32": "nmt --engine torch, fp32",
    "nmt-bf16": "nmt --engine torch --precision bf16",
    "nmt-int8": "nmt --engine torch --int8",
    "nmt-ct2-fp32": "nmt --engine ctranslate2 (float32)",
    "nmt-ct2-int8": "nmt --engine ctranslate2 --int8",
    "ct2-fp32": "CTranslate2 used directly, float32",
    "ct2-int8": "CTranslate2 used directly, int8",
    "nmt-nocache": "nmt fp32, no KV cache (prefix recomputed each step)",
}
DEFAULT_ENGINES = ["nmt-fp32", "nmt-bf16", "nmt-int8", "nmt-ct2-fp32", "nmt-ct2-int8", "ct2-fp32", "ct2-int8"]
BASE = "@base"  # suffix of an engine run from the --baseline source tree


def read_text(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


# -- one measurement (a subprocess) ------------------------------------------------------------------


class NoCache:
    """The model, decoding without its KV cache: each step recomputes the whole target prefix."""

    def __init__(self, model):
        self.model = model

    def start_decoding(self, src):
        return self.model.start_decoding(src, use_cache=False)

    def step(self, tokens, state):
        return self.model.step(tokens, state)


class Direct:
    """CTranslate2 used directly: youtokentome/SentencePiece pieces in, `translate_batch` with its own batching,
    pieces out (what a user of CTranslate2's API writes); the same `translate_chunk` as nmt's engines."""

    def __init__(self, folder: Path, compute_type: str, threads: int, beam: int, lenpen: float, batch_size: int,
                 max_len_a: float = 1.5, max_len_b: int = 10):
        import ctranslate2

        from nmt.engines.ct2_export import ctranslate2_vocabulary, read_meta
        from nmt.text.tokenizer import load_tokenizer, read_files

        self.tokenizer = load_tokenizer(read_files(folder, read_meta(folder).get("tokenizer")), str(folder))
        self.vocab = ctranslate2_vocabulary(self.tokenizer)
        self.ids = {t: i for i, t in enumerate(self.vocab)}
        self.translator = ctranslate2.Translator(str(folder), compute_type=compute_type, intra_threads=threads)
        self.options = dict(beam_size=beam, length_penalty=lenpen, max_batch_size=batch_size, return_end_token=True,
                            min_decoding_length=0, max_input_length=0)
        self.a, self.b = max_len_a, max_len_b

    def translate_chunk(self, lines: list[str]) -> list:
        from nmt.engines.base import Translation
        from nmt.engines.search import Hypothesis

        pieces = [[self.vocab[i] for i in ids] for ids in self.tokenizer.encode(lines, side="source")]
        limit = int(self.a * max(len(p) for p in pieces)) + self.b
        out = self.translator.translate_batch(pieces, max_decoding_length=limit + 1, **self.options)
        hyps = [[self.ids[t] for t in r.hypotheses[0] if t != "</s>"] for r in out]
        return [Translation(text, [(text, Hypothesis(ids, 0.0, 0.0))]) for text, ids in
                zip(self.tokenizer.decode(hyps), hyps)]


def measure(args) -> dict:
    import torch

    from nmt.config import InferenceConfig, Overrides, SearchConfig

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    lines = read_text(Path(args.src))[: args.lines or None]
    search = dict(beam=args.beam, lenpen=args.lenpen, lenpen_type=args.lenpen_type, max_len_a=1.5, max_len_b=10)
    engine = args.worker.removesuffix(BASE)
    t0 = time.perf_counter()
    if engine.startswith("ct2"):
        translator = Direct(Path(args.ct2), "int8" if engine == "ct2-int8" else "float32", args.threads, args.beam,
                            args.lenpen, args.batch_size)
    elif engine.startswith("nmt-ct2") or (engine in ("nmt-fp32", "nmt-bf16", "nmt-int8") and not args.worker.endswith(BASE)):
        from nmt.engines.choice import open_engine

        inference = {"engine": "ctranslate2" if engine.startswith("nmt-ct2") else "torch", "threads": args.threads,
                     "max_tokens": args.max_tokens, "batch_size": args.batch_size,
                     "precision": {"nmt-bf16": "bf16"}.get(engine, "fp32"), "int8": engine.endswith("int8")}
        translator = open_engine([Path(args.model)], Overrides(SearchConfig, search), Overrides(InferenceConfig, inference))
    else:  # the baseline tree (an nmt before `open_engine`), or an engine nmt does not offer
        from nmt.engines.torch_engine import TorchEngine

        precision = {"nmt-bf16": "bf16", "nmt-int8": "int8"}.get(engine, "fp32")
        translator = TorchEngine(Path(args.model), SearchConfig(**search), max_tokens=args.max_tokens,
                                max_sentences=args.batch_size, precision=precision)
        if engine == "nmt-nocache":
            translator.model = NoCache(translator.model)
    load = time.perf_counter() - t0
    translator.translate_chunk(lines[:8])  # warm-up: first-call allocations, lazy initialisation
    chunk = args.chunk or len(lines)
    out = []
    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, len(lines), chunk):  # offline: one chunk; a sweep: one chunk per batch
        out += translator.translate_chunk(lines[start : start + chunk])
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    tokens = sum(len(t.hypotheses[0][1].tokens) + 1 for t in out if t.hypotheses)  # + EOS: a decoding step each
    fallback = getattr(getattr(translator, "fallback", None), "sentences", None)
    return {"engine": engine, "beam": args.beam, "chunk": args.chunk, "seconds": seconds, "cpu_seconds": cpu_seconds,
            "load_seconds": load, "sentences": len(lines), "searched_by_torch": fallback,
            "target_tokens": tokens, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "hyps": [t.text for t in out]}


def time_to_first_line(model: Path, extra: list[str], threads: int) -> float:
    """Seconds from starting `nmt translate` to reading its first output line (one input line on a pipe)."""
    nmt = Path(sys.executable).with_name("nmt")
    cmd = [str(nmt), "translate", "-m", str(model), "--threads", str(threads), "--engine", "torch", *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    proc.stdin.write("A man is riding a bicycle down the street.\n")
    proc.stdin.flush()
    proc.stdout.readline()
    seconds = time.perf_counter() - t0
    proc.stdin.close()
    proc.wait()
    return seconds


def help_seconds() -> float:
    nmt = Path(sys.executable).with_name("nmt")
    t0 = time.perf_counter()
    subprocess.run([str(nmt), "--help"], check=True, capture_output=True)
    return time.perf_counter() - t0


# -- the driver --------------------------------------------------------------------------------------


def run_worker(args, engine: str, beam: int, chunk: int = 0) -> dict:
    """One measurement in a fresh process; `chunk`: lines per translate_chunk call (0: all at once)."""
    lines = args.sweep_lines if chunk and args.sweep_lines else args.lines
    cmd = [sys.executable, __file__, "--worker", engine, "--beam", str(beam), "--model", str(args.model),
           "--ct2", str(args.ct2), "--src", str(args.src), "--threads", str(args.threads), "--lines", str(lines),
           "--lenpen", str(args.lenpen), "--lenpen-type", args.lenpen_type, "--max-tokens", str(args.max_tokens),
           "--batch-size", str(chunk or args.batch_size), "--chunk", str(chunk)]
    env = dict(os.environ)
    if args.threads > 0:
        env["OMP_NUM_THREADS"] = str(args.threads)
    if engine.endswith(BASE):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(args.baseline), env.get("PYTHONPATH")) if p)
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(done.stdout.splitlines()[-1])


def bleu(hyps: list[str], refs: list[str]) -> float:
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize="13a").corpus_score(hyps, [refs[: len(hyps)]]).score


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, help="nmt checkpoint (averaged.pt)")
    p.add_argument("--ct2", type=Path, help="CTranslate2 export of --model for the direct runs (default: nmt's "
                   "conversion of it in the user's cache)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with the Multi30k test set")
    p.add_argument("--src", type=Path, help="source file (default DATA/test_2016_flickr.en.gz)")
    p.add_argument("--ref", type=Path, help="reference file (default DATA/test_2016_flickr.de.gz)")
    p.add_argument("--engines", nargs="+", default=DEFAULT_ENGINES, choices=list(ENGINES))
    p.add_argument("--beams", nargs="+", type=int, default=[4])
    p.add_argument("--lenpen", type=float, default=0.6, help="length penalty alpha (nmt's default)")
    p.add_argument("--lenpen-type", default="gnmt", choices=["gnmt", "power"], help="nmt's length penalty")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of every engine")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds; the median is reported")
    p.add_argument("--lines", type=int, default=0, help="translate only the first N lines (0: all)")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=128, help="sentences per batch, offline")
    p.add_argument("--batch-sizes", nargs="*", type=int, default=[],
                   help="also translate chunks of this many lines each (beam --sweep-beam), as a server does")
    p.add_argument("--sweep-engines", nargs="+", default=["nmt-fp32", "nmt-bf16", "nmt-int8", "nmt-ct2-fp32",
                                                          "nmt-ct2-int8", "ct2-int8"], choices=list(ENGINES))
    p.add_argument("--sweep-beam", type=int, default=4)
    p.add_argument("--sweep-lines", type=int, default=0, help="lines of the batch-size sweep (0: as --lines)")
    p.add_argument("--baseline", type=Path, help="folder holding an older `nmt` package: its engines run too, as ENGINE@base")
    p.add_argument("--baseline-engines", nargs="+", default=["nmt-fp32", "nmt-int8"], choices=list(ENGINES))
    p.add_argument("--no-startup", action="store_true", help="skip the start-up measurements")
    p.add_argument("--json", type=Path, help="write all measurements here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--beam", type=int, default=4, help=argparse.SUPPRESS)
    p.add_argument("--chunk", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.src = args.src or args.data / "test_2016_flickr.en.gz"
    args.ref = args.ref or args.data / "test_2016_flickr.de.gz"
    if args.worker:
        print(json.dumps(measure(args)))
        return
    if args.model is None:
        p.error("--model is required")
    engines = with_baseline(args.engines, args)
    sweep_engines = with_baseline(args.sweep_engines, args) if args.batch_sizes else []
    from nmt.engines.conversions import converted

    entry = converted(args.model)  # before the rounds: the nmt-ct2 runs find it made, as a second use does
    args.ct2 = args.ct2 or entry
    refs = read_text(args.ref)
    plan = [(engine, beam, 0) for beam in args.beams for engine in engines]
    plan += [(engine, args.sweep_beam, chunk) for chunk in args.batch_sizes for engine in sweep_engines]
    runs: dict[tuple[str, int, int], list[dict]] = {}
    for r in range(args.repeats):  # interleaved: every measurement once per round
        for engine, beam, chunk in plan:
            m = run_worker(args, engine, beam, chunk)
            runs.setdefault((engine, beam, chunk), []).append(m)
            print(f"round {r + 1} beam {beam} {'batches of ' + str(chunk) if chunk else 'offline':15s} {engine:20s} "
                  f"{m['cpu_seconds']:7.2f} CPU s {m['peak_rss_mb']:6.0f} MB", file=sys.stderr, flush=True)
    rows = [summary(key, ms, refs) for key, ms in runs.items()]
    offline = {(r["engine"], r["beam"]): runs[(r["engine"], r["beam"], 0)][-1]["hyps"] for r in rows if not r["chunk"]}
    for r in rows:
        hyps = runs[(r["engine"], r["beam"], r["chunk"])][-1]["hyps"]
        reference = offline.get(("nmt-fp32", r["beam"]))
        r["same_as_nmt_fp32"] = same_share(hyps, reference) if reference else None
        r["same_as_offline"] = same_share(hyps, offline[(r["engine"], r["beam"])]) if r["chunk"] and (
            r["engine"], r["beam"]) in offline else None
    startup = {} if args.no_startup else {
        "help_s": help_seconds(), "first_line_fp32_s": time_to_first_line(args.model, ["--beam", "4"], args.threads),
        "first_line_int8_s": time_to_first_line(args.model, ["--beam", "4", "--int8"], args.threads),
        "first_line_ct2_s": time_to_first_line(args.model, ["--beam", "4", "--engine", "ctranslate2"], args.threads),
        "first_line_ct2_int8_s": time_to_first_line(args.model, ["--beam", "4", "--engine", "ctranslate2", "--int8"],
                                                    args.threads)}
    import ctranslate2
    import torch

    info = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "threads": args.threads,
            "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "ctranslate2": ctranslate2.__version__, "lines": args.lines or len(refs),
            "sweep_lines": args.sweep_lines or args.lines or len(refs), "lenpen": f"{args.lenpen_type} {args.lenpen}",
            "repeats": args.repeats, "cpu": cpu_name(),
            "baseline": str(args.baseline) if args.baseline else None}
    print_table([r for r in rows if not r["chunk"]], startup, info)
    print_sweep([r for r in rows if r["chunk"]], info)
    if args.json:
        args.json.write_text(json.dumps({"info": info, "startup": startup, "rows": rows}, indent=2) + "\n")


def with_baseline(engines: list[str], args) -> list[str]:
    """The engines, and with --baseline each of --baseline-engines that one of them does the work of (`now`)
    as ENGINE@base."""
    if not args.baseline:
        return list(engines)
    return list(engines) + [e + BASE for e in args.baseline_engines if now(e) in engines]


def summary(key: tuple[str, int, int], ms: list[dict], refs: list[str]) -> dict:
    """One table row: the median of the rounds, BLEU of the last round."""
    engine, beam, chunk = key
    cpu = statistics.median(m["cpu_seconds"] for m in ms)
    last = ms[-1]
    return {"engine": engine, "beam": beam, "chunk": chunk, "cpu_seconds": cpu,
            "all_cpu_seconds": [m["cpu_seconds"] for m in ms], "wall_seconds": statistics.median(m["seconds"] for m in ms),
            "sentences": last["sentences"], "sentences_per_s": last["sentences"] / cpu,
            "tokens_per_s": last["target_tokens"] / cpu, "target_tokens": last["target_tokens"],
            "peak_rss_mb": max(m["peak_rss_mb"] for m in ms),
            "load_seconds": statistics.median(m["load_seconds"] for m in ms), "bleu": bleu(last["hyps"], refs),
            "searched_by_torch": last.get("searched_by_torch")}


def same_share(hyps: list[str], reference: list[str]) -> float:
    """Share of `hyps` equal to the line of `reference` at the same position."""
    return sum(a == b for a, b in zip(hyps, reference)) / len(hyps)


def now(engine: str) -> str:
    """The engine of this tree that an engine of the code before does the work of (nmt-fp32-mkl: nmt-fp32)."""
    return "nmt-fp32" if engine == "nmt-fp32-mkl" else engine


def engine_order(name: str) -> tuple[int, bool]:
    return list(ENGINES).index(name.removesuffix(BASE)), name.endswith(BASE)


def cpu_name() -> str:
    from nmt.compute.device import cpu_name as name

    return name()


def print_table(rows: list[dict], startup: dict, info: dict) -> None:
    print(f"{info['lines']} sentences, {info['threads']} thread(s) per engine, median of {info['repeats']} interleaved "
          f"rounds; rates per CPU-second of the process; nmt's search {info['lenpen']}; torch {info['torch']} "
          f"({info['cpu_capability']}), ctranslate2 {info['ctranslate2']}, {info['cpus']} CPUs ({info['cpu']})")
    print()
    print("| engine | beam | sentences/s | target tokens/s | CPU s (rounds) | wall s | load s | peak RSS MB | BLEU "
          "| = nmt fp32 | searched by torch |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in sorted(rows, key=lambda r: (-r["beam"], engine_order(r["engine"]))):
        rounds = ", ".join(f"{s:.1f}" for s in r["all_cpu_seconds"])
        same = f"{100 * r['same_as_nmt_fp32']:.1f}%" if r["same_as_nmt_fp32"] is not None else ""
        fallback = "" if r["searched_by_torch"] is None else str(r["searched_by_torch"])
        print(f"| {r['engine']} | {r['beam']} | {r['sentences_per_s']:.1f} | {r['tokens_per_s']:.0f} | "
              f"{r['cpu_seconds']:.2f} ({rounds}) | {r['wall_seconds']:.2f} | {r['load_seconds']:.2f} | "
              f"{r['peak_rss_mb']:.0f} | {r['bleu']:.2f} | {same} | {fallback} |")
    by = {(r["engine"], r["beam"]): r["cpu_seconds"] for r in rows}
    print()
    for beam in sorted({r["beam"] for r in rows}, reverse=True):
        def ratio(a, b):
            return f"{by[(a, beam)] / by[(b, beam)]:.2f}x" if (a, beam) in by and (b, beam) in by else "n/a"
        print(f"- beam {beam}, time ratios: nmt --engine ctranslate2 --int8 / CTranslate2 int8 used directly "
              f"{ratio('nmt-ct2-int8', 'ct2-int8')}; float32 {ratio('nmt-ct2-fp32', 'ct2-fp32')}; torch fp32 / "
              f"nmt-ct2 float32 {ratio('nmt-fp32', 'nmt-ct2-fp32')}; torch int8 / nmt-ct2 int8 "
              f"{ratio('nmt-int8', 'nmt-ct2-int8')}; torch fp32 / bf16 {ratio('nmt-fp32', 'nmt-bf16')}; torch fp32 / "
              f"int8 {ratio('nmt-fp32', 'nmt-int8')}")
        if info["baseline"]:
            print(f"- beam {beam}, against {info['baseline']} (time before / after): fp32 "
                  f"{ratio('nmt-fp32' + BASE, 'nmt-fp32')} (unpacked before: {ratio('nmt-fp32-mkl' + BASE, 'nmt-fp32')}), "
                  f"int8 {ratio('nmt-int8' + BASE, 'nmt-int8')}")
    if startup:
        print(f"- start-up: `nmt --help` {startup['help_s']:.2f}s; `nmt translate` to the first translated line "
              f"(wall clock): torch {startup['first_line_fp32_s']:.2f}s (fp32), {startup['first_line_int8_s']:.2f}s "
              f"(--int8); ctranslate2 {startup['first_line_ct2_s']:.2f}s (float32), "
              f"{startup['first_line_ct2_int8_s']:.2f}s (--int8)")


def print_sweep(rows: list[dict], info: dict) -> None:
    """Sentences/s on chunks of C lines, and the share of lines translated as offline."""
    if not rows:
        return
    print()
    print(f"Batches of C lines (one translate_chunk call each, as `nmt serve` makes them), beam {rows[0]['beam']}, "
          f"first {rows[0]['sentences']} lines, median of {info['repeats']} interleaved rounds, per CPU-second:")
    print()
    print("| engine | C | sentences/s | CPU s (rounds) | BLEU | = offline | = nmt fp32 offline |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for r in sorted(rows, key=lambda r: (r["chunk"], engine_order(r["engine"]))):
        rounds = ", ".join(f"{s:.1f}" for s in r["all_cpu_seconds"])
        same = [f"{100 * r[k]:.1f}%" if r[k] is not None else "" for k in ("same_as_offline", "same_as_nmt_fp32")]
        print(f"| {r['engine']} | {r['chunk']} | {r['sentences_per_s']:.1f} | {r['cpu_seconds']:.2f} ({rounds}) | "
              f"{r['bleu']:.2f} | {same[0]} | {same[1]} |")
    by = {(r["engine"], r["chunk"]): r["cpu_seconds"] for r in rows}
    print()
    for chunk in sorted({r["chunk"] for r in rows}):
        parts = [f"{e} {by[(e + BASE, chunk)] / by[(e, chunk)]:.2f}x" for e in ENGINES if (e, chunk) in by and
                 (e + BASE, chunk) in by]
        versus = [f"{e} / ct2-int8 time {by[(e, chunk)] / by[('ct2-int8', chunk)]:.2f}x"
                  for e in ("nmt-ct2-int8", "nmt-ct2-fp32", "nmt-int8", "nmt-bf16", "nmt-fp32")
                  if (e, chunk) in by and ("ct2-int8", chunk) in by]
        print(f"- batches of {chunk}: {', '.join(versus)}; time before / after: {', '.join(parts) or 'n/a'}")


if __name__ == "__main__":
    main()
