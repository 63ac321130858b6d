"""How `nmt bpe`, `nmt prepare` and the training data path scale with the corpus (issue 5).

Run by hand (results go to docs/benchmarks-data.md):

    .venv/bin/python benchmarks/data_scale.py --sizes 100000 300000 1000000 --threads 2

For each size N it builds a synthetic parallel corpus of N pairs under --work (default
/tmp/nmt-data-scale) by recombining Multi30k training pairs: each synthetic pair joins 1-3
randomly chosen pairs (seeded), so it is still a translation, and most pairs are distinct
(10% are single pairs, which repeat, so dedup has work to do).  Then it runs, as subprocesses:

    nmt bpe --train N/train.en N/train.de --sample 1000000 --vocab-size 8000 --threads 2 --out N/bpe.model
    nmt prepare --bpe N/bpe.model --train N/train --src en --tgt de --out N/data --threads 2

and reports wall time, CPU time (user + sys), pairs per second and peak RSS (from wait4(), the
figures `/usr/bin/time -v` prints), and the size on disk.  On the prepared store it times one
epoch's batch order (make_batches + group_updates on the length index) and, for the tiny and
small presets, the data wait per update (collate of the update's batches from the memory map)
against the compute per update (forward, backward, Adam), with the old pair-by-pair collate as
a reference.  `--hashset` times the dedup hash set alone at larger sizes (e.g. 45M).

`--prepare-only` keeps just the corpus, `bpe` and `prepare` of each size (no batch order, data wait
or hash set), for the large sizes of issue 16 (WMT14 en-fr, about 36M pairs):

    nice -n 10 .venv/bin/python benchmarks/data_scale.py --sizes 1000000 3000000 10000000 --prepare-only

Everything generated lives under --work and is deleted at the end unless --keep.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NMT = [sys.executable, "-m", "nmt"]


# ---------------------------------------------------------------------------- corpus


def read_gz_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def synth_corpus(multi30k: Path, n: int, prefix: Path, seed: int = 1) -> dict:
    """Write `prefix.en` / `prefix.de` with n pairs, each 1-3 Multi30k pairs joined (p = .1, .45, .45)."""
    en, de = read_gz_lines(multi30k / "train.en.gz"), read_gz_lines(multi30k / "train.de.gz")
    assert len(en) == len(de), "Multi30k train.en/.de differ in length"
    rng = np.random.default_rng(seed)
    k = rng.choice([1, 2, 3], size=n, p=[0.1, 0.45, 0.45])
    idx = rng.integers(0, len(en), size=(n, 3))
    prefix.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(f"{prefix}.en", "w", encoding="utf-8") as fe, open(f"{prefix}.de", "w", encoding="utf-8") as fd:
        for a in range(0, n, 100_000):
            rows = zip(k[a : a + 100_000].tolist(), idx[a : a + 100_000].tolist())
            pairs = [(" ".join([en[i] for i in r[:kk]]), " ".join([de[i] for i in r[:kk]])) for kk, r in rows]
            fe.write("".join(s + "\n" for s, _ in pairs))
            fd.write("".join(t + "\n" for _, t in pairs))
    size = os.path.getsize(f"{prefix}.en") + os.path.getsize(f"{prefix}.de")
    return {"pairs": n, "text_mb": round(size / 1e6, 1), "seconds": round(time.perf_counter() - start, 1)}


# ---------------------------------------------------------------------------- subprocess timing


GNU_TIME = "/usr/bin/time"
# Fallback when GNU time is missing: a small Python that runs the command and reports its wait4()
# rusage.  The child must not be started from this (large) process directly: Linux carries the
# parent's peak RSS over fork + exec into the child's ru_maxrss.
_RUSAGE_HELPER = (
    "import json, os, subprocess, sys, time\n"
    "t = time.perf_counter(); p = subprocess.Popen(sys.argv[2:]); _, st, ru = os.wait4(p.pid, 0)\n"
    "p.returncode = os.waitstatus_to_exitcode(st)\n"
    "open(sys.argv[1], 'w').write(json.dumps([time.perf_counter() - t, ru.ru_utime, ru.ru_stime, ru.ru_maxrss]))\n"
    "sys.exit(p.returncode)\n"
)


def timed(cmd: list[str], scratch: Path) -> dict:
    """Run cmd; wall seconds, CPU seconds (user + sys), peak RSS (MB) and stdout of the command.

    Measured by `/usr/bin/time` (GNU time: its wait4() rusage, as `time -v` prints it) when present.
    """
    stats = scratch / ".rusage"
    if os.access(GNU_TIME, os.X_OK):
        wrapped = [GNU_TIME, "-o", str(stats), "-f", "%e %U %S %M"] + cmd
    else:
        wrapped = [sys.executable, "-c", _RUSAGE_HELPER, str(stats)] + cmd
    run = subprocess.run(wrapped, capture_output=True, cwd=ROOT)
    if run.returncode != 0:
        sys.stderr.write(run.stderr.decode(errors="replace")[-3000:])
        raise SystemExit(f"failed ({run.returncode}): {' '.join(cmd)}")
    text = stats.read_text()
    wall, user, system, rss_kb = (json.loads(text) if text.startswith("[") else
                                  [float(x) for x in text.strip().splitlines()[-1].split()])
    stats.unlink()
    return {"wall_s": round(wall, 2), "cpu_s": round(user + system, 2), "peak_rss_mb": round(rss_kb / 1024, 1),
            "stdout": run.stdout.decode()}


def dir_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.iterdir() if p.is_file()) / 1e6, 1)


# ---------------------------------------------------------------------------- training data path


def batch_order(data: Path, presets: list[str], repeat: int = 3) -> list[dict]:
    """Seconds to build one epoch's batch order from the length index, and its peak memory."""
    from nmt.config import from_preset
    from nmt.data.batches import group_updates, make_batches
    from nmt.data.dataset import ParallelDataset

    ds = ParallelDataset(data, "train")
    rows = []
    for preset in presets:
        _, cfg = from_preset(preset, {}, {})
        t_batches, t_groups = [], []
        for epoch in range(repeat):
            start = time.perf_counter()
            batches = make_batches(ds.src_lengths, ds.tgt_lengths, cfg.max_tokens, seed=cfg.seed, epoch=epoch)
            mid = time.perf_counter()
            groups = group_updates(batches, ds.tgt_lengths, cfg.update_tokens)
            t_batches.append(mid - start)
            t_groups.append(time.perf_counter() - mid)
        tracemalloc.start()
        batches = make_batches(ds.src_lengths, ds.tgt_lengths, cfg.max_tokens, seed=cfg.seed, epoch=0)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rows.append({"preset": preset, "pairs": len(ds), "max_tokens": cfg.max_tokens, "batches": len(batches),
                     "updates": len(groups), "make_batches_s": round(statistics.median(t_batches), 3),
                     "group_updates_s": round(statistics.median(t_groups), 3),
                     "make_batches_peak_mb": round(peak / 1e6, 1)})
        del batches, groups
    return rows


def collate_pair_by_pair(dataset, indices):
    """The collate nmt had before issue 5 (one dataset[i] per pair), kept here as the reference."""
    import torch

    from nmt.core.vocab import BOS, EOS, PAD
    from nmt.data.batches import Batch

    def pad(seqs, eos, bos):
        lengths = np.array([len(s) for s in seqs], dtype=np.int64)
        out = np.full((len(seqs), int(lengths.max(initial=0)) + 1), PAD, dtype=np.int64)
        start = 1 if bos else 0
        cols = np.arange(out.shape[1] - 1)
        mask = np.zeros(out.shape, dtype=bool)
        mask[:, start : start + out.shape[1] - 1] = cols < lengths[:, None]
        if len(seqs):
            out[mask] = np.concatenate(seqs).astype(np.int64)
        if bos:
            out[:, 0] = BOS
        if eos:
            out[np.arange(len(seqs)), lengths] = EOS
        return out

    indices = np.asarray(indices, dtype=np.int64)
    pairs = [dataset[int(i)] for i in indices]
    return Batch(src=torch.from_numpy(pad([s for s, _ in pairs], True, False)),
                 tgt_in=torch.from_numpy(pad([t for _, t in pairs], False, True)),
                 tgt_out=torch.from_numpy(pad([t for _, t in pairs], True, False)),
                 src_tokens=int(sum(len(s) for s, _ in pairs) + len(pairs)),
                 tgt_tokens=int(sum(len(t) for _, t in pairs) + len(pairs)), indices=indices)


def data_wait(data: Path, preset: str, updates: int, threads: int) -> dict:
    """Per update: collate of its batches from the memory map (data wait) vs forward+backward+Adam."""
    import torch

    from nmt.config import from_preset
    from nmt.data.batches import collate, group_updates, make_batches
    from nmt.data.dataset import ParallelDataset
    from nmt.model.loss import label_smoothed_loss
    from nmt.model.transformer import Transformer

    torch.set_num_threads(threads)
    ds = ParallelDataset(data, "train")
    model_cfg, cfg = from_preset(preset, {"vocab_size": ds.meta["vocab_size"]}, {})
    torch.manual_seed(0)
    model = Transformer(model_cfg).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=cfg.adam_betas, eps=cfg.adam_eps)
    batches = make_batches(ds.src_lengths, ds.tgt_lengths, cfg.max_tokens, seed=cfg.seed, epoch=0)
    groups = group_updates(batches, ds.tgt_lengths, cfg.update_tokens)
    wait, old_wait, compute, tokens = [], [], [], []
    for n, group in enumerate(groups[: updates + 1]):
        for i in group:  # page the update's pairs in first, so neither timing pays for the first read
            collate(ds, batches[i])
        start = time.perf_counter()
        for i in group:
            collate_pair_by_pair(ds, batches[i])
        t_old = time.perf_counter() - start
        start = time.perf_counter()
        ready = [collate(ds, batches[i]) for i in group]
        t_data = time.perf_counter() - start
        start = time.perf_counter()  # what Trainer.update does besides collate
        for batch in ready:
            logits = model(batch.src, batch.tgt_in)
            loss, _ = label_smoothed_loss(logits.flatten(0, 1), batch.tgt_out.flatten(), cfg.label_smoothing)
            loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                p.grad.div_(max(sum(b.tgt_tokens for b in ready), 1))
        if cfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t_compute = time.perf_counter() - start
        if n:  # the first update warms up
            wait.append(t_data)
            old_wait.append(t_old)
            compute.append(t_compute)
            tokens.append(sum(b.tgt_tokens for b in ready))
    med = statistics.median
    return {"preset": preset, "updates": len(wait), "tgt_tokens_per_update": int(med(tokens)),
            "batches_per_update": round(statistics.mean(len(g) for g in groups[1 : updates + 1]), 1),
            "data_ms": round(1000 * med(wait), 2), "old_collate_ms": round(1000 * med(old_wait), 2),
            "compute_ms": round(1000 * med(compute), 1),
            "data_share": f"{100 * med(wait) / (med(wait) + med(compute)):.2f}%"}


# ---------------------------------------------------------------------------- dedup hash set


def hashset_scale(n: int, chunk: int = 100_000) -> dict:
    """The dedup hash set as `prepare` drives it: sorted chunks of new hashes, lookup then insert."""
    from nmt.data.dedup import HashSet

    rng = np.random.default_rng(0)
    hs = HashSet()
    spent = 0.0
    tracemalloc.start()
    for _ in range(0, n, chunk):
        h = np.sort(rng.integers(0, 2**64, chunk, dtype=np.uint64))
        start = time.perf_counter()
        dup = hs.contains_sorted(h)
        hs.add_run(h[~dup])
        spent += time.perf_counter() - start
        del h, dup
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"hashes": len(hs), "seconds": round(spent, 1), "us_per_pair": round(1e6 * spent / n, 2),
            "held_mb": round(hs.nbytes / 1e6), "bytes_per_hash": hs.nbytes / len(hs),
            "peak_mb": round(peak / 1e6), "runs": len(hs.runs)}


# ---------------------------------------------------------------------------- report


def table(rows: list[dict], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    slope, intercept = np.polyfit(np.array(xs, dtype=float), np.array(ys, dtype=float), 1)
    return float(slope), float(intercept)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    ap.add_argument("--multi30k", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/multi30k")
    ap.add_argument("--work", type=Path, default=Path("/tmp/nmt-data-scale"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--sample", type=int, default=1_000_000)
    ap.add_argument("--presets", nargs="+", default=["tiny", "small"])
    ap.add_argument("--updates", type=int, default=10, help="Timed updates per preset for the data wait.")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch threads for the compute timing (on a shared 2-core machine 2 is slower than 1).")
    ap.add_argument("--train-size", type=int, default=None, help="Corpus size for the data wait (default: largest).")
    ap.add_argument("--hashset", type=int, nargs="*", default=[4_500_000], help="Hash set sizes to time alone.")
    ap.add_argument("--extrapolate", type=int, default=4_500_000)
    ap.add_argument("--json", type=Path, default=None, help="Also write all results here.")
    ap.add_argument("--keep", action="store_true", help="Keep the corpora and stores under --work.")
    ap.add_argument("--prepare-only", action="store_true",
                    help="Only the corpus, bpe and prepare of each size: no batch order, data wait or hash set.")
    args = ap.parse_args()
    if not (args.multi30k / "train.en.gz").is_file():
        raise SystemExit(f"{args.multi30k}: no Multi30k train.en.gz/train.de.gz; pass --multi30k")

    results: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "load_avg_start": os.getloadavg()}, "runs": [], "order": [], "wait": []}
    train_size = args.train_size or max(args.sizes)
    try:
        for n in sorted(args.sizes):
            d = args.work / str(n)
            corpus = synth_corpus(args.multi30k, n, d / "train")
            print(f"[{n}] corpus: {corpus}", file=sys.stderr)
            bpe = timed(NMT + ["bpe", "--train", str(d / "train.en"), str(d / "train.de"), "--sample", str(args.sample),
                               "--vocab-size", str(args.vocab_size), "--threads", str(args.threads),
                               "--out", str(d / "bpe.model")], d)
            print(f"[{n}] bpe: {bpe['wall_s']}s, {bpe['peak_rss_mb']} MB", file=sys.stderr)
            prep = timed(NMT + ["prepare", "--bpe", str(d / "bpe.model"), "--train", str(d / "train"), "--src", "en",
                                "--tgt", "de", "--out", str(d / "data"), "--threads", str(args.threads)], d)
            report = json.loads(prep.pop("stdout"))["train"]
            bpe.pop("stdout")
            print(f"[{n}] prepare: {prep['wall_s']}s, {prep['peak_rss_mb']} MB", file=sys.stderr)
            results["runs"].append({
                "pairs": n, "text_mb": corpus["text_mb"],
                "bpe_wall_s": bpe["wall_s"], "bpe_cpu_s": bpe["cpu_s"], "bpe_rss_mb": bpe["peak_rss_mb"],
                "prepare_wall_s": prep["wall_s"], "prepare_cpu_s": prep["cpu_s"],
                "pairs_per_s": round(n / prep["wall_s"]), "pairs_per_cpu_s": round(n / prep["cpu_s"]),
                "us_per_pair_cpu": round(1e6 * prep["cpu_s"] / n, 1),
                "prepare_rss_mb": prep["peak_rss_mb"], "store_mb": dir_mb(d / "data"),
                "kept": report["kept"], "duplicate": report["duplicate"],
                "dropped_len": report["too_short"] + report["too_long"] + report["ratio"] + report["empty"],
            })
            print(f"[{n}] {json.dumps(results['runs'][-1])}", file=sys.stderr, flush=True)
            if args.prepare_only:
                if not args.keep:
                    shutil.rmtree(d)
                continue
            results["order"] += batch_order(d / "data", args.presets)
            if n == train_size:
                for preset in args.presets:
                    results["wait"].append(data_wait(d / "data", preset, args.updates, args.torch_threads))
                    print(f"[{n}] data wait {results['wait'][-1]}", file=sys.stderr)
            if not args.keep:
                shutil.rmtree(d)
        results["hashset"] = [] if args.prepare_only else [hashset_scale(n) for n in args.hashset]
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    results["machine"]["load_avg_end"] = os.getloadavg()

    runs = results["runs"]
    print(f"machine: {results['machine']}\n")
    print(table(runs, ["pairs", "text_mb", "bpe_wall_s", "bpe_cpu_s", "bpe_rss_mb", "prepare_wall_s", "prepare_cpu_s",
                       "pairs_per_s", "pairs_per_cpu_s", "us_per_pair_cpu", "prepare_rss_mb", "store_mb", "kept", "duplicate",
                       "dropped_len"]))
    for key, cols in (
        ("order", ["preset", "pairs", "max_tokens", "batches", "updates", "make_batches_s", "group_updates_s",
                   "make_batches_peak_mb"]),
        ("wait", ["preset", "updates", "tgt_tokens_per_update", "batches_per_update", "data_ms", "old_collate_ms",
                  "compute_ms", "data_share"]),
        ("hashset", ["hashes", "seconds", "us_per_pair", "held_mb", "bytes_per_hash", "peak_mb", "runs"]),
    ):
        if results[key]:  # empty with --prepare-only
            print()
            print(table(results[key], cols))
    if len(runs) >= 2:
        xs = [r["pairs"] for r in runs]
        n = args.extrapolate
        extra = {}
        for key in ("prepare_wall_s", "prepare_cpu_s", "bpe_wall_s"):
            slope, icpt = linear_fit(xs, [r[key] for r in runs])
            extra[key] = round(slope * n + icpt, 1)
        slope, icpt = linear_fit(xs, [r["prepare_rss_mb"] for r in runs])
        extra["prepare_rss_mb"] = round(slope * n + icpt)
        extra["rss_mb_per_million_pairs"] = round(slope * 1e6, 1)
        results["extrapolation"] = {"pairs": n, **extra}
        print(f"\nEXTRAPOLATION (linear fit over {xs}) to {n:,} pairs: {extra}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
