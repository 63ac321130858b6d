"""Hostile and careless uses of the `nmt` CLI, run against a source tree; prints a Markdown table of what
each did (exit code, traceback or not, the last stderr line), to compare two trees:

    python tools/probes.py --tree . --work /tmp/probes-new > new.md
    git worktree add /tmp/old OLD_COMMIT && python tools/probes.py --tree /tmp/old --work /tmp/probes-old > old.md

The fixtures (a tiny run on the bundled sample corpus, with the fixed BPE model of the tests) are built by
the tree under test. Each probe has a time limit: a hang shows as `timeout`. Needs root for the tmpfs probe.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "nmt" / "sample_data"
BPE = ROOT / "tests" / "data" / "sample-bpe-1000.model"
TINY = "--preset tiny --max-tokens 1024 --update-tokens 1024 --warmup 50 --valid-interval 1000 --threads 1"


def probes(w: Path) -> list[tuple[str, str]]:
    """(name, shell command); $NMT runs the tree's CLI; the fixtures are in `w`."""
    m = f"{w}/run/checkpoint_00000030.pt"
    return [
        ("translate -i a missing file", f"echo a | $NMT translate -m {m} -i {w}/nonexistent.txt"),
        ("bpe --out names a folder", f"$NMT bpe --train {w}/train.en --vocab-size 100 --out {w}"),
        ("train --out names a file", f"$NMT train --data {w}/data --out {w}/a_file {TINY}"),
        ("demo --out names a file", f"$NMT demo --out {w}/a_file"),
        ("translate > /dev/full", f"echo a man | $NMT translate -m {m} > /dev/full"),
        ("eval --save-hyp under a file", f"$NMT eval -m {m} --src {w}/valid.en --ref {w}/valid.de --save-hyp {w}/a_file/h"),
        ("translate <&- (closed stdin)", f"$NMT translate -m {m} <&-"),
        ("--max-len-a inf", f"echo a man is walking | $NMT translate -m {m} --max-len-a inf"),
        ("--max-len-a 1e30", f"echo a man is walking | $NMT translate -m {m} --max-len-a 1e30"),
        ("--lenpen nan", f"echo a man | $NMT translate -m {m} --lenpen nan"),
        ("--max-tokens 0", f"echo a man | $NMT translate -m {m} --max-tokens 0"),
        ("--batch-size 0", f"echo a man | $NMT translate -m {m} --batch-size 0"),
        ("--threads -1", f"echo a man | $NMT translate -m {m} --threads -1"),
        ("prepare --max-ratio nan", f"$NMT prepare --bpe {BPE} --train {w}/train --src en --tgt de --out {w}/p --max-ratio nan"),
        ("train --max-time -1", f"$NMT train --data {w}/data --out {w}/t1 --max-time -1 {TINY}"),
        ("translate | head -1 (exit of nmt)", f"yes a man is walking | head -3000 | $NMT translate -m {m} --beam 1 | head -1 >/dev/null; exit ${{PIPESTATUS[2]}}"),
        ("train with RLIMIT_FSIZE 64 kB", f"ulimit -f 62; $NMT train --data {w}/data --out {w}/t2 --max-updates 2 {TINY}"),
        ("average: tensors of another shape", f"$NMT average {m} {w}/shape.pt --out {w}/avg.pt"),
        ("translate with NaN weights", f"echo a man | $NMT translate -m {w}/nan.pt"),
        ("train on data whose bpe.model was swapped", f"$NMT train --data {w}/swapped --out {w}/t3 --max-updates 5 {TINY}"),
        ("train on data with an id beyond the vocabulary", f"$NMT train --data {w}/badid --out {w}/t4 --max-updates 5 {TINY}"),
        ("resume past a truncated newest checkpoint", f"$NMT train --data {w}/data --out {w}/trunc --max-updates 40 --save-interval 10 {TINY}"),
        ("two trains on one --out", f"$NMT train --data {w}/data --out {w}/two --max-updates 60 {TINY} 2>/dev/null & "
                                    f"sleep 4; $NMT train --data {w}/data --out {w}/two --max-updates 60 {TINY}; s=$?; wait; exit $s"),
        ("failing prepare over a good store (store kept?)",
         f"$NMT prepare --bpe {BPE} --train {w}/uneven --src en --tgt de --out {w}/store >/dev/null; s=$?; "
         f"test -f {w}/store/meta.json && echo 'store kept' >&2 || echo 'store LOST' >&2; exit $s"),
    ]


def build_fixtures(w: Path, env: dict) -> None:
    def nmt(cmd: str) -> None:
        subprocess.run(f"$NMT {cmd}", shell=True, check=True, env=env, executable="/bin/bash", cwd=w,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    import torch

    shutil.rmtree(w, ignore_errors=True)
    w.mkdir(parents=True)
    check = subprocess.run([sys.executable, "-c", "import nmt; print(nmt.__file__)"], env=env, cwd=w,
                           capture_output=True, text=True, check=True).stdout.strip()
    print(f"probing {check}", file=sys.stderr)
    for split, n in (("train", 2000), ("valid", 50)):
        for lang in ("en", "de"):
            lines = (SAMPLE / f"{split}.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)[:n]
            (w / f"{split}.{lang}").write_text("".join(lines), encoding="utf-8")
    (w / "uneven.en").write_text((w / "train.en").read_text())
    (w / "uneven.de").write_text("".join((w / "train.de").read_text().splitlines(keepends=True)[:-1]))
    (w / "a_file").write_text("a file\n")
    nmt(f"prepare --bpe {BPE} --train {w}/train --src en --tgt de --out {w}/data --threads 1")
    nmt(f"prepare --bpe {BPE} --train {w}/train --src en --tgt de --out {w}/store --threads 1")
    nmt(f"train --data {w}/data --out {w}/run --max-updates 30 --save-interval 10 {TINY}")
    ckpt = torch.load(w / "run" / "checkpoint_00000030.pt", weights_only=True)
    name = next(k for k, v in ckpt["model"].items() if v.dim() == 2)
    good = ckpt["model"][name]
    ckpt["model"][name] = good[:1]
    torch.save(ckpt, w / "shape.pt")
    ckpt["model"][name] = torch.full_like(good, float("nan"))
    torch.save(ckpt, w / "nan.pt")
    shutil.copytree(w / "data", w / "swapped")
    model = (w / "swapped" / "bpe.model").read_bytes()
    (w / "swapped" / "bpe.model").write_bytes(model.replace(b"\n", b"\n\n", 1))
    shutil.copytree(w / "data", w / "badid")
    raw = bytearray((w / "badid" / "train.bin").read_bytes())
    raw[2:4] = (60000).to_bytes(2, "little")
    (w / "badid" / "train.bin").write_bytes(bytes(raw))
    shutil.copytree(w / "run", w / "trunc")
    newest = w / "trunc" / "checkpoint_00000030.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=ROOT, help="source tree whose nmt to run")
    ap.add_argument("--work", type=Path, required=True, help="scratch folder (deleted first)")
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.tree.resolve()), "NMT": f"{sys.executable} -m nmt",
           "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}
    env.pop("NMT_DEBUG", None)
    build_fixtures(args.work, env)
    print("| probe | exit | traceback | last stderr line |\n|---|---|---|---|")
    for name, cmd in probes(args.work):
        try:
            # cwd: the scratch folder, since `python -m` puts the working directory before PYTHONPATH
            r = subprocess.run(cmd, shell=True, capture_output=True, text=True, env=env, executable="/bin/bash",
                               timeout=args.timeout, start_new_session=True, cwd=args.work)
            code, stderr = str(r.returncode), r.stderr
        except subprocess.TimeoutExpired as e:
            code, stderr = f"timeout ({args.timeout:.0f} s)", (e.stderr or b"").decode("utf-8", "replace")
            subprocess.run(["pkill", "-f", str(args.work)], check=False)
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        last = (lines[-1] if lines else "").replace("|", "\\|")[:150]
        print(f"| {name} | {code} | {'yes' if 'Traceback' in stderr else 'no'} | {last} |", flush=True)


if __name__ == "__main__":
    main()
