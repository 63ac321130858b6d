"""Teachers and their distilled students side by side, in one run on one thread: BLEU and chrF, the size of the
int8 CTranslate2 export, and sentences/s on the whole test file and on batches of one line, each system through
nmt's CTranslate2 engine in int8 with its own search.

Run by hand (results go to docs/benchmarks-translate.md, "Distilled students"):

    .venv/bin/python benchmarks/students.py --src test.en --ref test.de \\
        --system teacher=teacher/averaged.pt:beam=6,lenpen=1.2 --system student=student/averaged.pt:beam=1 \\
        --json students.json
    .venv/bin/python benchmarks/students.py --serve --src test.en \\
        --system teacher=teacher/averaged.pt:beam=6,lenpen=1.2 --system student=student/averaged.pt:beam=1

A system is NAME=CHECKPOINT[:FIELD=VALUE,...]: the FIELDs are nmt's search options (nmt.config.SearchConfig:
beam, lenpen, lenpen_type, max_len_a, ...; `max-len-a` is the same), set over the search the checkpoint
carries, as `nmt translate --beam 6 --lenpen 1.2` would. The first system is the one the speed ratios divide by.

Every system is loaded once (open_engine, engine ctranslate2, int8, --threads threads) and kept; after one
untimed pass over the whole file each, the rounds take the systems in turns (in reverse order every other
round), so that the load of a shared machine weighs on all alike; the figures are medians over the rounds.
"file": one translate_chunk call over all lines (the engine's own length-sorted batches, as `nmt translate`);
"batch 1": one translate_chunk call per line over the first --batch1-lines lines (as a server with one client
translates), in every round too. Rates are per CPU-second of the process by default (--clock wall: per
second of wall clock); with one thread both agree on an idle machine. MB: the folder that `nmt export
--format ctranslate2 --quantization int8` writes (weights, vocabulary, the tokenizer's files), exported into a
temporary folder. BLEU: sacreBLEU 13a, cased, and chrF, the scores and signatures of `nmt eval`, of the
untimed pass.

--serve: instead of the table, `nmt serve` of every system (engine ctranslate2, --int8, its search) under
--clients closed-loop clients, one sentence per request, with benchmarks/serve_load.py's load generator;
the servers run at once and take turns, a summary side by side.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shlex
import statistics
import sys
import tempfile
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from nmt.config import SearchConfig
    from nmt.engines.base import Engine

CLOCKS = ("cpu", "wall")
TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


# -- the systems ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class System:
    """One row of the table: a checkpoint and the search options set over the checkpoint's own."""

    name: str
    path: Path
    search: dict[str, Any] = field(default_factory=dict)  # SearchConfig fields as given

    @property
    def given(self) -> str:
        """The search options as written on the command line (empty: the checkpoint's search)."""
        return ",".join(f"{k}={v}" for k, v in self.search.items())


def search_value(name: str, text: str) -> Any:
    """`text` as a value of SearchConfig field `name` (int, float, bool or a word), checked against the field's
    declaration; ValueError with a one-line message otherwise."""
    from nmt.config import SearchConfig
    from nmt.config.fields import check_field, did_you_mean, field_types, fields_of
    from nmt.core.errors import ConfigError

    known = fields_of(SearchConfig)
    if name not in known:
        hint = did_you_mean(name, known) or f"; use one of {', '.join(known)}"
        raise ValueError(f"no search option {name!r}{hint}")
    kind = field_types(SearchConfig)[name]
    try:
        if kind is bool:
            if text.lower() not in TRUE + FALSE:
                raise ValueError(f"{name}={text}: should be true or false")
            value: Any = text.lower() in TRUE
        elif kind is int:
            value = int(text)
        elif kind is float:
            value = float(text)
        else:
            value = text
        check_field(SearchConfig, name, value)
    except ConfigError as e:
        raise ValueError(plain(e)) from None
    except ValueError as e:
        if str(e).startswith(name):
            raise
        raise ValueError(f"{name}={text}: should be {'a whole number' if kind is int else 'a number'}") from None
    return value


def plain(error: Exception) -> str:
    """A library message with its references to fields written as the fields (`beam`: beam), as --system takes them."""
    from nmt.core.errors import render_refs

    return render_refs(str(error), lambda name, off: name)


def parse_system(text: str) -> System:
    """NAME=CHECKPOINT[:FIELD=VALUE,...] (see the module's docstring); argparse.ArgumentTypeError, one line,
    for anything else. The checkpoint is not opened here."""
    from nmt.config import Overrides, SearchConfig
    from nmt.core.errors import ConfigError

    name, eq, rest = text.partition("=")
    if not eq or not name or not rest or ":" in name or "," in name:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=CHECKPOINT[:FIELD=VALUE,...], e.g. "
                                         "student=run/averaged.pt:beam=1")
    path, colon, options = rest.rpartition(":")
    if not colon or "=" not in options:  # no search options: a colon belongs to the path
        path, options = rest, ""
    search: dict[str, Any] = {}
    for item in filter(None, options.split(",")):
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not value.strip():
            raise argparse.ArgumentTypeError(f"{name}: search option {item!r}: give FIELD=VALUE, e.g. beam=4")
        if key in search:
            raise argparse.ArgumentTypeError(f"{name}: search option {key} given twice")
        try:
            search[key] = search_value(key, value.strip())
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{name}: {e}") from None
    try:
        Overrides(SearchConfig, search).apply()  # options that do nothing together (topk without sampling)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(f"{name}: {plain(e)}") from None
    return System(name, Path(path), search)


def serve_flags(search: dict[str, Any]) -> list[str]:
    """The search options as `nmt serve` flags: beam=6 -> --beam 6, early_stopping=False -> --no-early-stopping."""
    from nmt.config import SearchConfig
    from nmt.config.fields import fields_of, option_name, spec_of

    flags = []
    for name, value in search.items():
        flag = spec_of(fields_of(SearchConfig)[name]).flag or option_name(name)
        if isinstance(value, bool):
            on, _, off = flag.partition("/")
            flags.append(on.strip() if value else (off.strip() or "--no-" + on.strip().removeprefix("--")))
        else:
            flags += [flag.split("/")[0].strip(), str(value)]
    return flags


def describe_search(cfg: SearchConfig) -> str:
    """The search a system ran, in a table cell: `beam 6, lenpen 1.2`; sampling or greedy said so."""
    if cfg.sampling:
        return f"sampling, topk {cfg.topk}, topp {cfg.topp:g}, temperature {cfg.temperature:g}"
    if cfg.beam == 1:  # one hypothesis: no length penalty to rank with
        return "greedy"
    return f"beam {cfg.beam}, lenpen {cfg.lenpen:g}" + ("" if cfg.lenpen_type == "gnmt" else f" ({cfg.lenpen_type})")


def check_systems(systems: list[System]) -> Optional[str]:
    """Why these systems cannot run (a repeated name, a checkpoint that is not a file), or None."""
    names = [s.name for s in systems]
    for s in systems:
        if names.count(s.name) > 1:
            return f"--system: the name {s.name!r} is given twice; give each system a name of its own"
        if not s.path.is_file():
            return f"--system {s.name}: no checkpoint file {s.path}; give NAME=CHECKPOINT[:FIELD=VALUE,...]"
    return None


# -- measuring --------------------------------------------------------------------------------------


def read_lines(path: Path) -> list[str]:
    opener: Callable[..., typing.IO[str]] = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def open_system(system: System, threads: int) -> Engine:
    """The system's checkpoint on nmt's CTranslate2 engine, int8, `threads` threads, its search."""
    from nmt.config import InferenceConfig, Overrides, SearchConfig
    from nmt.engines.choice import open_engine

    return open_engine([system.path], Overrides(SearchConfig, system.search),
                       Overrides(InferenceConfig, {"engine": "ctranslate2", "int8": True, "threads": threads}))


def int8_megabytes(path: Path, folder: Path) -> float:
    """MB of the folder `nmt export --format ctranslate2 --quantization int8` writes for the checkpoint (into
    `folder`, which must not hold anything yet)."""
    from nmt.engines.ct2_export import export_ctranslate2

    return export_ctranslate2(path, folder, quantization="int8").megabytes


def timed(work: Callable[[], list[str]]) -> tuple[dict[str, float], list[str]]:
    """({"cpu": CPU seconds of the process, "wall": seconds}, what `work` returned)."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = work()
    return {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}, out


def whole_file(engine: Engine, lines: list[str]) -> list[str]:
    return [t.text for t in engine.translate_chunk(lines)]


def one_by_one(engine: Engine, lines: list[str]) -> list[str]:
    return [engine.translate_chunk([line], i)[0].text for i, line in enumerate(lines)]


def measure(engines: dict[str, Engine], lines: list[str], sample: list[str], repeats: int) -> dict[str, dict[str, Any]]:
    """The untimed pass (its output: "hyps"), then `repeats` rounds over the systems in turns (reversed every
    other round): seconds of the whole file ("file") and of `sample` one line per call ("batch1"), per round."""
    runs: dict[str, dict[str, Any]] = {name: {"file": [], "batch1": [], "same_every_round": True} for name in engines}
    for name, engine in engines.items():
        engine.translate_chunk(lines[:1])  # first-call allocations
        runs[name]["hyps"] = whole_file(engine, lines)
        print(f"warm-up {name}: {len(lines)} lines", file=sys.stderr, flush=True)
    for r in range(repeats):
        for name in list(engines) if r % 2 == 0 else list(engines)[::-1]:
            run, engine = runs[name], engines[name]
            seconds, hyps = timed(lambda: whole_file(engine, lines))
            run["file"].append(seconds)
            run["same_every_round"] &= hyps == run["hyps"]
            seconds, single = timed(lambda: one_by_one(engine, sample))
            run["batch1"].append(seconds)
            run["batch1_same_as_file"] = sum(a == b for a, b in zip(single, run["hyps"])) / max(len(sample), 1)
            print(f"round {r + 1} {name}: file {seconds_text(run['file'][-1])}, batch 1 "
                  f"{seconds_text(seconds)}", file=sys.stderr, flush=True)
    return runs


def seconds_text(seconds: dict[str, float]) -> str:
    return f"{seconds['cpu']:.2f} CPU s ({seconds['wall']:.2f} s wall)"


def scores(hyps: list[str], refs: list[str]) -> dict[str, Any]:
    """BLEU (13a, cased) and chrF as `nmt eval` computes them, with their sacreBLEU signatures."""
    from nmt.scoring import score

    found = {s.metric: s for s in score(hyps, refs, "the translations", "--ref")}
    return {"bleu": found["BLEU 13a cased"].score, "chrf": found["chrF"].score,
            "bleu_signature": found["BLEU 13a cased"].signature, "chrf_signature": found["chrF"].signature}


def row_of(system: System, engine: Engine, run: dict[str, Any], lines: int, sample: int, clock: str) -> dict[str, Any]:
    """One system's figures: medians over the rounds, rates in sentences per `clock` second."""
    file_s = statistics.median(s[clock] for s in run["file"])
    one_s = statistics.median(s[clock] for s in run["batch1"])
    return {"system": system.name, "checkpoint": str(system.path), "search_given": system.given,
            "search": describe_search(engine.search_cfg), "file_seconds": run["file"],
            "batch1_seconds": run["batch1"], "sentences_per_s_file": lines / file_s,
            "sentences_per_s_batch1": sample / one_s, "batch1_ms_per_line": 1000 * one_s / max(sample, 1),
            "same_every_round": run["same_every_round"], "batch1_same_as_file": run.get("batch1_same_as_file")}


# -- the table --------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import os

    import ctranslate2
    import torch

    from nmt.compute.device import cpu_name

    return {"cpu": cpu_name(), "cpus": os.cpu_count(), "torch": torch.__version__,
            "ctranslate2": ctranslate2.__version__, "python": sys.version.split()[0]}


def command_line(argv: list[str]) -> str:
    return shlex.join([Path(sys.executable).name, "benchmarks/students.py", *argv])


def print_table(rows: list[dict[str, Any]], info: dict[str, Any]) -> None:
    per = "CPU-second of the process" if info["clock"] == "cpu" else "second of wall clock"
    print(f"Command: `{info['command']}`")
    print()
    print(f"{info['cpu']} ({info['cpus']} CPUs), {info['threads']} thread(s); torch {info['torch']}, ctranslate2 "
          f"{info['ctranslate2']}, Python {info['python']}. nmt's CTranslate2 engine, int8. {info['lines']} lines of "
          f"{info['src']}; sentences per {per}, median of {info['repeats']} interleaved rounds after one untimed pass; "
          f"batch 1: the first {info['sample']} lines, one call each, every round. MB: the int8 CTranslate2 export "
          f"(`nmt export --format ctranslate2 --quantization int8`). BLEU: {info['bleu_signature']}; chrF: "
          f"{info['chrf_signature']}.")
    print()
    print("| system | search | BLEU | chrF | MB (int8) | sent/s file | sent/s batch 1 | speed vs "
          f"{rows[0]['system']} (file, batch 1) |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    first = rows[0]
    for r in rows:
        ratio = (f"{r['sentences_per_s_file'] / first['sentences_per_s_file']:.2f}x, "
                 f"{r['sentences_per_s_batch1'] / first['sentences_per_s_batch1']:.2f}x")
        mb = f"{r['megabytes']:.{1 if r['megabytes'] >= 10 else 2}f}"
        print(f"| {r['system']} | {r['search']} | {r['bleu']:.2f} | {r['chrf']:.2f} | {mb} | "
              f"{r['sentences_per_s_file']:.1f} | {r['sentences_per_s_batch1']:.1f} | {ratio} |")
    for r in rows:
        rounds = ", ".join(f"{s[info['clock']]:.2f}" for s in r["file_seconds"])
        notes = [f"file: {'CPU ' if info['clock'] == 'cpu' else ''}seconds per round {rounds}",
                 f"batch 1: {r['batch1_ms_per_line']:.1f} ms a line"]
        if not r["same_every_round"]:
            notes.append("the output changed between rounds")
        if r["batch1_same_as_file"] is not None and r["batch1_same_as_file"] < 1:
            notes.append(f"batch 1 output = file output on {100 * r['batch1_same_as_file']:.1f}% of the lines")
        print(f"- {r['system']} ({r['checkpoint']}" + (f", {r['search_given']}" if r["search_given"] else "")
              + f"): {'; '.join(notes)}")


def run_table(args: argparse.Namespace, info: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(args.threads)
    lines, refs = read_lines(args.src), read_lines(args.ref)
    if len(lines) != len(refs):
        raise SystemExit(f"--ref {args.ref} has {len(refs)} lines but --src {args.src} has {len(lines)}; give the "
                         "reference of the source, line by line")
    sample = lines[: args.batch1_lines or None]
    with tempfile.TemporaryDirectory(prefix="students-export-") as work:
        sizes: dict[Path, float] = {}
        for s in args.system:
            if s.path.resolve() not in sizes:
                sizes[s.path.resolve()] = int8_megabytes(s.path, Path(work) / f"export-{len(sizes)}")
    engines = {s.name: open_system(s, args.threads) for s in args.system}
    runs = measure(engines, lines, sample, args.repeats)
    rows = []
    for s in args.system:
        row = row_of(s, engines[s.name], runs[s.name], len(lines), len(sample), args.clock)
        row.update(scores(runs[s.name]["hyps"], refs), megabytes=sizes[s.path.resolve()])
        rows.append(row)
    info.update(lines=len(lines), sample=len(sample), bleu_signature=rows[0]["bleu_signature"],
                chrf_signature=rows[0]["chrf_signature"])
    print_table(rows, info)
    return {"info": info, "rows": rows}


# -- --serve ----------------------------------------------------------------------------------------


def start_servers(args: argparse.Namespace, logs: Path) -> dict[str, tuple[Any, str]]:
    """`nmt serve` of every system (ctranslate2, --int8, --threads, its search) on a free port each."""
    from serving import start_server, tree_env

    servers: dict[str, tuple[Any, str]] = {}
    try:
        for s in args.system:
            options = ["-m", str(s.path), "--engine", "ctranslate2", "--int8", "--threads", str(args.threads),
                       *serve_flags(s.search)]
            servers[s.name] = start_server(options, tree_env(None), stderr_path=logs / f"{len(servers)}.log")
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def stop_servers(servers: dict[str, tuple[Any, str]]) -> None:
    for proc, _ in servers.values():
        proc.terminate()
        proc.wait(timeout=120)


def run_serve(args: argparse.Namespace, info: dict[str, Any]) -> dict[str, Any]:
    """serve_load's closed-loop clients against each system's server in turns; medians over the rounds."""
    from serve_load import batch_stats, load

    sentences = read_lines(args.src)[: args.sentences or None]
    names = [s.name for s in args.system]
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="students-serve-") as logs:
        servers = start_servers(args, Path(logs))
        try:
            for name in names:  # warm-up: the first batches of each server
                load(servers[name][1] + "/v1/translate", sentences[: 2 * args.clients], args.clients)
            for r in range(args.repeats):
                for name in names if r % 2 == 0 else names[::-1]:
                    url = servers[name][1]
                    before = batch_stats(url)
                    result = load(url + "/v1/translate", sentences, args.clients)
                    after = batch_stats(url)
                    result.pop("outputs")
                    result["mean_batch"] = (after[0] - before[0]) / max(after[1] - before[1], 1)
                    found[name].append(result)
                    print(f"round {r + 1} {name}: {result['sentences_per_s']:.1f} sentences/s", file=sys.stderr,
                          flush=True)
        finally:
            stop_servers(servers)
    summary = {name: {key: statistics.median(x[key] for x in runs) for key in
                      ("sentences_per_s", "p50", "p95", "p99", "mean_batch", "seconds")} | {
                          "errors": sum(x["errors"] for x in runs)} for name, runs in found.items()}
    info.update(sentences=len(sentences), clients=args.clients)
    print_serve(summary, info, {s.name: s for s in args.system})
    return {"info": info, "serve": summary, "rounds": found}


def print_serve(summary: dict[str, dict[str, float]], info: dict[str, Any], systems: dict[str, System]) -> None:
    print(f"Command: `{info['command']}`")
    print()
    print(f"{info['cpu']} ({info['cpus']} CPUs); torch {info['torch']}, ctranslate2 {info['ctranslate2']}. `nmt serve "
          f"--engine ctranslate2 --int8 --threads {info['threads']}` and each system's search, {info['clients']} "
          f"closed-loop clients (benchmarks/serve_load.py), one sentence per request, the first {info['sentences']} "
          f"lines of {info['src']}; median of {info['repeats']} rounds, the servers in turns.")
    print()
    names = list(summary)
    print("| | " + " | ".join(f"{n} ({systems[n].given or 'its search'})" for n in names) + " |")
    print("|---|" + "---:|" * len(names))
    cells: dict[str, Callable[[dict[str, float]], str]] = {"sentences/s": lambda m: f"{m['sentences_per_s']:.1f}",
             f"vs {names[0]}": lambda m: f"{m['sentences_per_s'] / summary[names[0]]['sentences_per_s']:.2f}x",
             "p50 ms": lambda m: f"{1000 * m['p50']:.0f}", "p95 ms": lambda m: f"{1000 * m['p95']:.0f}",
             "p99 ms": lambda m: f"{1000 * m['p99']:.0f}", "mean batch": lambda m: f"{m['mean_batch']:.1f}",
             "errors": lambda m: f"{m['errors']:.0f}"}
    for label, cell in cells.items():
        print(f"| {label} | " + " | ".join(cell(summary[n]) for n in names) + " |")


# -- the command line -------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", type=parse_system, action="append", required=True, metavar="NAME=CKPT[:K=V,...]",
                   help="a system: its name, checkpoint and search options (repeat; the first is the baseline)")
    p.add_argument("--src", type=Path, required=True, help="source lines (plain or .gz)")
    p.add_argument("--ref", type=Path, help="their reference translations, line by line (required without --serve)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds; the median is reported")
    p.add_argument("--batch1-lines", type=int, default=300, help="lines timed one per call (0: all)")
    p.add_argument("--clock", choices=CLOCKS, default="cpu", help="rates per CPU-second (default) or wall second")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of every engine and server")
    p.add_argument("--serve", action="store_true", help="compare the systems behind `nmt serve` instead")
    p.add_argument("--clients", type=int, default=32, help="--serve: closed-loop clients")
    p.add_argument("--sentences", type=int, default=1000, help="--serve: the first N lines of --src (0: all)")
    p.add_argument("--json", type=Path, help="also write every measurement here")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    args = p.parse_args(argv)
    problem = check_systems(args.system)
    if problem:
        p.error(problem)
    if not args.serve and args.ref is None:
        p.error("--ref is required (the reference of --src), except with --serve")
    for option, path in (("--src", args.src), ("--ref", args.ref)):
        if path is not None and not path.is_file():
            p.error(f"{option}: no file {path}; give a text file, one sentence a line")
    for name in ("repeats", "threads", "clients"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # serve_load and serving, imported as the others do
    info = {**machine(), "command": command_line(argv), "threads": args.threads, "repeats": args.repeats,
            "clock": args.clock, "src": str(args.src)}
    result = run_serve(args, info) if args.serve else run_table(args, info)
    if args.json:
        from nmt.core.files import atomic_write

        with atomic_write(args.json, "w") as f:
            f.write(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
