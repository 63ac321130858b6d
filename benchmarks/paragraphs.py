"""Sentences lost in paragraphs: 200 paragraphs of 2 to 5 consecutive Multi30k test lines (700 sentences), translated
whole (`--no-split`, what nmt did before) and sentence by sentence (the default); the sentences of each translation
are counted with the target language's segmenter, and a paragraph that comes back with fewer sentences than it had
has lost them.

    python benchmarks/paragraphs.py --model demo-run/averaged.pt --data ../shared/data/multi30k
"""

from __future__ import annotations

import argparse
import gzip
import platform
from pathlib import Path

import torch

from nmt.config import InferenceConfig, overrides
from nmt.documents.texts import Documents
from nmt.engines.choice import open_engine
from nmt.text.sentences import split_sentences


def paragraphs(path: Path, n: int = 200) -> list[list[str]]:
    """`n` paragraphs of 2 to 5 consecutive lines of `path`, each line ending in a period (as tests/test_documents.py
    builds them)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    lines = [line if line[-1] in ".!?" else line + "." for line in lines]
    out, at = [], 0
    for i in range(n):
        out.append(lines[at : at + 2 + i % 4])
        at += 2 + i % 4
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="a Multi30k folder (test_2016_flickr.SRC.gz)")
    parser.add_argument("--engine", default="auto", choices=("auto", "torch", "ctranslate2"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    engine = open_engine([args.model], None, overrides(InferenceConfig, {"engine": args.engine, "threads": 1}).apply())
    src, tgt = engine.languages
    paras = paragraphs(args.data / f"test_2016_flickr.{src}.gz")
    given = sum(len(p) for p in paras)
    print(f"# {len(paras)} paragraphs, {given} sentences, {src} -> {tgt}, {args.model.name}, engine {engine.name}; "
          f"{platform.machine()}")
    print("| variant | sentences out | paragraphs that lost sentences | sentences lost |")
    print("|---|---|---|---|")
    for name, split in (("--no-split", False), ("split (default)", True)):
        done = Documents(engine, split=split).translate_chunk([" ".join(p) for p in paras])
        counts = [len(split_sentences(t.text, tgt).sentences) for t in done]
        lost = [max(0, len(p) - c) for p, c in zip(paras, counts)]
        print(f"| {name} | {sum(counts)} | {sum(x > 0 for x in lost)} | {sum(lost)} |")


if __name__ == "__main__":
    main()
