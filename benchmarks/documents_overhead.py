"""What sentence splitting and markup cost `nmt translate` on plain sentences (issue 37's goal: at most 10%).

Translates the same lines, one run after another in turns (so that a busy machine slows every variant alike), with
one engine and one thread:
  no-split   each line given to the engine whole (`--no-split`: what nmt did before)
  split      each line cut into sentences and put back (the default)
  html       the same lines as one HTML document of <p> paragraphs (`--format html`)
and prints the median seconds of each and its ratio to no-split.

    python benchmarks/documents_overhead.py --model demo-run/averaged.pt \
        --src ../shared/data/multi30k/test_2016_flickr.en.gz --engine torch
"""

from __future__ import annotations

import argparse
import html
import platform
import statistics
import time
from pathlib import Path

import torch

from nmt.config import InferenceConfig, overrides
from nmt.core.files import read_lines
from nmt.documents.texts import Documents
from nmt.engines.choice import open_engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--src", type=Path, required=True, help="plain sentences, one per line (gzip is fine)")
    parser.add_argument("--engine", default="torch", choices=("torch", "ctranslate2"))
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    lines = list(read_lines(args.src))[: args.lines]
    engine = open_engine([args.model], None, overrides(InferenceConfig, {"engine": args.engine, "threads": 1}).apply())
    page = "\n".join(f"<p>{html.escape(line)}</p>" for line in lines)
    variants = {
        "no-split": lambda: Documents(engine, split=False).translate_chunk(lines),
        "split": lambda: Documents(engine).translate_chunk(lines),
        "html": lambda: Documents(engine, format="html").translate_chunk([page]),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    variants["split"]()  # warm-up: the segmenter loads, the first batches allocate
    for _ in range(args.repeats):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["no-split"])
    print(f"# {len(lines)} lines of {args.src.name}, {args.model.name}, engine {engine.name}, 1 thread, "
          f"median of {args.repeats} runs in turns; {platform.processor() or platform.machine()}")
    print("| variant | seconds | lines/s | vs no-split |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        median = statistics.median(ts)
        print(f"| {name} | {median:.3f} | {len(lines) / median:.0f} | {median / base - 1:+.1%} |")


if __name__ == "__main__":
    main()
