"""Fingerprints of a run's results, to show that a refactoring changed no number.

    python tools/fingerprint.py RUN_DIR [FILE ...] > before.txt   # at one commit
    python tools/fingerprint.py RUN_DIR [FILE ...] > after.txt    # at another
    diff before.txt after.txt                                      # empty: bit-identical

For every checkpoint under RUN_DIR: a sha256 of each model tensor and each optimizer-state tensor
(the bytes, not the pickle, so a change of the checkpoint's layout does not count). For log.jsonl:
every logged number but the timings. For each FILE (translations, say): a sha256 of its bytes.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

TIMING_KEYS = {"tok/s", "time", "seconds", "elapsed", "wall", "tokens_per_second", "tok_s", "wps", "ups", "sentences_per_second"}


def tensor_digest(t: torch.Tensor) -> str:
    t = t.detach().cpu().contiguous()
    return hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()[:16] + f" {tuple(t.shape)} {t.dtype}"


def walk(prefix: str, obj) -> list[str]:
    if isinstance(obj, torch.Tensor):
        return [f"{prefix} {tensor_digest(obj)}"]
    if isinstance(obj, dict):
        return [line for k in sorted(obj, key=str) for line in walk(f"{prefix}.{k}", obj[k])]
    if isinstance(obj, (list, tuple)):
        return [line for i, v in enumerate(obj) for line in walk(f"{prefix}[{i}]", v)]
    if isinstance(obj, (int, float)):
        return [f"{prefix} {obj!r}"]
    return []


def checkpoint_lines(path: Path, name: str) -> list[str]:
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    lines = walk(f"{name}:model", ckpt["model"])
    if ckpt.get("optimizer"):
        lines += walk(f"{name}:optimizer.state", ckpt["optimizer"].get("state", {}))
    return lines


def log_lines(path: Path, name: str) -> list[str]:
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        record = json.loads(line)
        kept = {k: v for k, v in sorted(record.items()) if k not in TIMING_KEYS and isinstance(v, (int, float, str))}
        out.append(f"{name}[{i}] {json.dumps(kept, sort_keys=True)}")
    return out


def main(run: Path, files: list[Path]) -> None:
    lines = []
    for path in sorted(run.rglob("*.pt")):
        lines += checkpoint_lines(path, str(path.relative_to(run)))
    for path in sorted(run.rglob("log.jsonl")):
        lines += log_lines(path, str(path.relative_to(run)))
    for path in files:
        lines.append(f"{path} {hashlib.sha256(path.read_bytes()).hexdigest()}")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
