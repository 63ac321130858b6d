"""Training speed side by side: target tokens/s of real `nmt train` updates per preset, precision and
thread count, against an older nmt tree and fairseq on the same configuration, all in one run.

Run by hand (results go to docs/benchmarks.md):

    python benchmarks/train_speed.py --data DATA --presets multi30k small --threads 1 \\
        --baseline OLD_TREE --fairseq-python FAIRSEQ_VENV/bin/python --updates 12 --rounds 3

DATA is a folder written by `nmt prepare` (the tables in docs use Multi30k en-de with a 6,000-piece BPE).
Every measurement runs in its own subprocess and the measurements are interleaved, round after round
over all engines, so that noise from other work on the machine spreads over all of them alike; the
table reports the median over rounds. One measurement: `--warmup` updates, then `--updates` timed
updates of the Trainer (`nmt train`'s own update: batches of the preset's --max-tokens, one batch per
update, loss, backward, gradient clipping, Adam), reported as target tokens per second of wall time
and of the process's CPU time (the CPU figure is the steadier one on a shared machine).

Engines:
- `nmt` (this tree) in each `--precisions` (fp32, bf16; bf16 is reported even where the CPU only
  emulates it, which is what `--precision auto` avoids);
- `compiled` (`--compile`): nmt fp32 with the model under `torch.compile(dynamic=True)`; raise
  `--warmup` to cover the compilation, whose time is reported;
- `baseline`: the same with another nmt tree on PYTHONPATH (`--baseline`, e.g. a `git worktree` of an
  older commit), fp32;
- `fairseq`: `fairseq-train` (fairseq 0.12; not a dependency of nmt, installed in its own venv as
  docs/benchmarks.md describes) on the same data, converted to fairseq's binary format, with the
  same architecture, pre-norm, tied embeddings, dropout, label smoothing, Adam and --max-tokens; its
  per-update `wps` (target tokens/s) from `--log-format json --log-interval 1`.

The yardstick, measured in the same run: the fp32 rate of a 2048^3 matmul and the bf16 rate of a 512^3 one, and
the model FLOPs utilisation (MFU) of each result against the fp32 rate.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# -- one measurement (in a subprocess) -----------------------------------------------------------------


def measure_nmt(spec: dict) -> dict:
    """Time `spec['updates']` Trainer updates after `spec['warmup']`, in a fresh process."""
    import torch

    from nmt.config import from_preset
    from nmt.data.dataset import ParallelDataset
    from nmt.training.trainer import Trainer

    torch.set_num_threads(spec["threads"])
    data = Path(spec["data"])
    vocab = ParallelDataset(data, "train").meta["vocab_size"]
    model_cfg, train_cfg = from_preset(spec["preset"], {"vocab_size": vocab}, {"precision": spec["precision"]})
    train_cfg.update_tokens = train_cfg.max_tokens  # one batch per update, for every preset
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(data, Path(out), model_cfg, train_cfg, torch.device("cpu"))
        if spec.get("compile"):  # the whole model through torch.compile (inductor), shapes dynamic
            trainer.model = torch.compile(trainer.module, dynamic=True)
            trainer.sync_gradients = lambda sync: contextlib.nullcontext()  # one process: nothing to sync
        _, batches, groups = trainer.epoch_groups()
        per_update, start = [], time.perf_counter()
        for k in range(spec["warmup"] + spec["updates"]):
            if k == spec["warmup"]:
                warmup_seconds = time.perf_counter() - start
            wall, cpu = time.perf_counter(), time.process_time()
            stats = trainer.update([batches[i] for i in groups[k % len(groups)]])
            if k >= spec["warmup"]:
                per_update.append((stats.tokens, time.perf_counter() - wall, time.process_time() - cpu))
    tokens = sum(t for t, _, _ in per_update)
    return {"tok_s": tokens / sum(w for _, w, _ in per_update), "tok_s_cpu": tokens / sum(c for _, _, c in per_update),
            "precision": trainer.precision, "parameters": sum(p.numel() for p in trainer.module.parameters()),
            "d_model": model_cfg.d_model, "d_ff": model_cfg.d_ff, "layers": [model_cfg.encoder_layers, model_cfg.decoder_layers],
            "vocab": vocab, "tokens_per_update": tokens / len(per_update), "warmup_seconds": warmup_seconds}


def matmul_rates(threads: int) -> dict:
    """GFLOP/s of an n^3 matmul on `threads` threads: fp32 at n = 2048; bf16 at n = 512, because a CPU without
    native bf16 emulates it at a few hundred MFLOP/s (a 2048^3 product would take minutes)."""
    import torch

    torch.set_num_threads(threads)
    rates = {}
    for name, dtype, n, repeat in (("fp32", torch.float32, 2048, 5), ("bf16", torch.bfloat16, 512, 3)):
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        torch.mm(a, b)
        start = time.perf_counter()
        for _ in range(repeat):
            torch.mm(a, b)
        rates[name] = 2 * n ** 3 * repeat / (time.perf_counter() - start) / 1e9
    return rates


# -- fairseq --------------------------------------------------------------------------------------------


def fairseq_data(data: Path, work: Path, python: str) -> Path:
    """nmt's prepared store as fairseq binary data: token ids written as words t<id>, one joined dictionary
    holding every id, so both toolkits see the same sequences and vocabulary size."""
    dest = work / "fairseq-bin"
    if (dest / "train.src-tgt.src.bin").exists():
        return dest
    sys.path.insert(0, str(ROOT))
    from nmt.data.dataset import ParallelDataset

    text = work / "fairseq-text"
    text.mkdir(parents=True, exist_ok=True)
    vocab = 0
    for split in ("train", "valid"):
        ds = ParallelDataset(data, split)
        vocab = ds.meta["vocab_size"]
        with open(text / f"{split}.src", "w") as fs, open(text / f"{split}.tgt", "w") as ft:
            for i in range(len(ds)):
                src, tgt = ds[i]
                fs.write(" ".join(f"t{x}" for x in src) + "\n")
                ft.write(" ".join(f"t{x}" for x in tgt) + "\n")
    with open(text / "dict.txt", "w") as f:
        f.writelines(f"t{i} 1\n" for i in range(4, vocab))  # fairseq adds its own 4 specials
    subprocess.run([python, "-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt",
                    "--trainpref", str(text / "train"), "--validpref", str(text / "valid"), "--srcdict",
                    str(text / "dict.txt"), "--joined-dictionary", "--destdir", str(dest), "--workers", "1"],
                   check=True, capture_output=True)
    return dest


def measure_fairseq(spec: dict) -> dict:
    """fairseq-train on the preset's architecture and recipe; median per-update target tokens/s."""
    sys.path.insert(0, str(ROOT))
    from nmt.config import from_preset

    m, t = from_preset(spec["preset"], {}, {})
    lr = t.lr_factor * m.d_model ** -0.5 * t.warmup ** -0.5  # nmt's schedule at its peak: fairseq's --lr
    updates = spec["warmup"] + spec["updates"]
    with tempfile.TemporaryDirectory() as save:
        cmd = [spec["python"], "-m", "fairseq_cli.train", spec["fairseq_data"], "--arch", "transformer",
               "--share-all-embeddings", "--encoder-layers", str(m.encoder_layers), "--decoder-layers", str(m.decoder_layers),
               "--encoder-embed-dim", str(m.d_model), "--decoder-embed-dim", str(m.d_model),
               "--encoder-ffn-embed-dim", str(m.d_ff), "--decoder-ffn-embed-dim", str(m.d_ff),
               "--encoder-attention-heads", str(m.n_heads), "--decoder-attention-heads", str(m.n_heads),
               "--dropout", str(m.dropout), "--attention-dropout", str(m.attention_dropout),
               "--activation-dropout", str(m.activation_dropout),
               "--max-source-positions", str(m.max_positions), "--max-target-positions", str(m.max_positions),
               "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", str(t.label_smoothing),
               "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--adam-eps", str(t.adam_eps),
               "--lr", str(lr), "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(t.warmup),
               "--max-tokens", str(t.max_tokens), "--max-update", str(updates), "--seed", "1", "--cpu",
               "--log-format", "json", "--log-interval", "1", "--disable-validation", "--no-save",
               "--save-dir", save, "--num-workers", "0"]
        if m.norm == "pre":
            cmd += ["--encoder-normalize-before", "--decoder-normalize-before"]
        env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"]), "MKL_NUM_THREADS": str(spec["threads"])}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"fairseq-train failed: {out.stderr.strip().splitlines()[-1:]}")
    logs = [json.loads(line[line.index("{"):]) for line in (out.stdout + out.stderr).splitlines()
            if "train_inner" in line and "{" in line]
    timed = [r for r in logs if int(r["num_updates"]) > spec["warmup"]]
    if not timed:
        raise RuntimeError("fairseq-train logged no timed updates")
    return {"tok_s": statistics.median(float(r["wps"]) for r in timed), "tok_s_cpu": None, "precision": "fp32"}


# -- the run --------------------------------------------------------------------------------------------


def run_worker(spec: dict, pythonpath: Path | None) -> dict:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"{spec}: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def flops_per_target_token(r: dict, src_per_tgt: float = 1.0) -> float:
    """Matmul FLOPs of one training update (3x forward) per target token, for sentences of ~15 tokens
    (the attention terms are small then) and about one source token per target token."""
    d, f, (enc, dec), v = r["d_model"], r["d_ff"], r["layers"], r["vocab"]
    encoder = enc * 2 * (4 * d * d + 2 * d * f) + dec * 2 * 2 * d * d  # + cross-attention keys/values
    decoder = dec * 2 * (6 * d * d + 2 * d * f) + 2 * d * v
    return 3 * (src_per_tgt * encoder + decoder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path)
    parser.add_argument("--presets", nargs="+", default=["multi30k", "small"])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1])
    parser.add_argument("--updates", type=int, default=12, help="timed updates per measurement")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="also nmt with torch.compile (its compile time: the warm-up)")
    parser.add_argument("--baseline", type=Path, help="an older nmt tree (e.g. a git worktree) to compare with")
    parser.add_argument("--fairseq-python", help="python of an environment with fairseq installed")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "nmt-train-speed")
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        result = measure_fairseq(spec) if spec["engine"] == "fairseq" else measure_nmt(spec)
        print(json.dumps(result))
        return
    if args.data is None:
        parser.error("--data is required")

    base = {"data": str(args.data.resolve()), "updates": args.updates, "warmup": args.warmup}
    jobs = []  # (label, spec, PYTHONPATH)
    for preset in args.presets:
        for threads in args.threads:
            common = {**base, "preset": preset, "threads": threads}
            for precision in args.precisions:
                jobs.append((f"nmt {precision}", {**common, "engine": "nmt", "precision": precision}, ROOT))
            if args.compile:
                jobs.append(("compiled fp32", {**common, "engine": "nmt", "precision": "fp32", "compile": True}, ROOT))
            if args.baseline:
                jobs.append(("baseline fp32", {**common, "engine": "nmt", "precision": "fp32"}, args.baseline.resolve()))
            if args.fairseq_python:
                fs_data = fairseq_data(args.data.resolve(), args.work, args.fairseq_python)
                jobs.append(("fairseq fp32", {**common, "engine": "fairseq", "python": args.fairseq_python,
                                              "fairseq_data": str(fs_data)}, None))
    rates = {t: [] for t in args.threads}
    results: dict[int, list[dict]] = {i: [] for i in range(len(jobs))}
    for r in range(args.rounds):
        for t in args.threads:
            rates[t].append(matmul_rates(t))
        for i, (label, spec, path) in enumerate(jobs):
            results[i].append(run_worker(spec, path))
            print(f"round {r + 1}: {spec['preset']} {label} {spec['threads']}t: {results[i][-1]['tok_s']:,.0f} tok/s",
                  file=sys.stderr)

    print(f"# {platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}, median of {args.rounds} interleaved rounds, "
          f"{args.updates} timed updates each")
    for t in args.threads:
        fp32 = statistics.median(x["fp32"] for x in rates[t])
        bf16 = statistics.median(x["bf16"] for x in rates[t])
        print(f"# matmul, {t} thread(s): fp32 (2048^3) {fp32:.1f} GFLOP/s, bf16 (512^3) {bf16:.2f} GFLOP/s")
    print("| preset | threads | engine | precision used | target tok/s (wall) | tok/s (CPU time) | vs baseline | vs fairseq | MFU |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|")
    nmt_shape = {}
    for i, (_label, spec, _) in enumerate(jobs):
        if spec["engine"] == "nmt":
            nmt_shape[spec["preset"]] = results[i][0]
    for i, (label, spec, _) in enumerate(jobs):
        runs = results[i]
        tok_s = statistics.median(x["tok_s"] for x in runs)
        cpu = [x["tok_s_cpu"] for x in runs if x.get("tok_s_cpu")]
        same = [j for j, (_, s, _) in enumerate(jobs) if s["preset"] == spec["preset"] and s["threads"] == spec["threads"]]
        ref = {jobs[j][0]: statistics.median(x["tok_s"] for x in results[j]) for j in same}
        vs_base = f"{tok_s / ref['baseline fp32']:.2f}x" if "baseline fp32" in ref else ""
        vs_fs = f"{tok_s / ref['fairseq fp32']:.2f}x" if "fairseq fp32" in ref else ""
        fp32_rate = statistics.median(x["fp32"] for x in rates[spec["threads"]]) * 1e9
        mfu = tok_s * flops_per_target_token(nmt_shape[spec["preset"]]) / fp32_rate
        print(f"| {spec['preset']} | {spec['threads']} | {label.split()[0]} | {runs[0]['precision']} | {tok_s:,.0f} | "
              f"{statistics.median(cpu):,.0f} | {vs_base} | {vs_fs} | {mfu:.0%} |" if cpu else
              f"| {spec['preset']} | {spec['threads']} | {label.split()[0]} | {runs[0]['precision']} | {tok_s:,.0f} | "
              f" | {vs_base} | {vs_fs} | {mfu:.0%} |")
    for i, (_label, spec, _) in enumerate(jobs):
        if spec.get("compile"):
            warm = statistics.median(x["warmup_seconds"] for x in results[i])
            print(f"# {spec['preset']} compiled: {spec['warmup']} warm-up updates incl. compilation took {warm:.0f} s")


if __name__ == "__main__":
    main()
