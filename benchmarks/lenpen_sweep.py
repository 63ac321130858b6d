"""Length penalties on a validation set: BLEU of GNMT's ((5 + len) / 6)^alpha and of len^alpha at several alphas.

Run by hand (results go to docs/benchmarks-translate.md):

    .venv/bin/python benchmarks/lenpen_sweep.py --model run/averaged.pt --src valid.en --ref valid.de

One beam search gives every answer: the finished hypotheses a beam search keeps (the K likeliest) do not
depend on the length penalty, which only ranks them (nmt.engines.search.best_hypotheses), so the search runs once
with --nbest K and each (penalty, alpha) picks its best among the same K hypotheses: exactly what
`nmt translate --lenpen-type TYPE --lenpen ALPHA` outputs. BLEU: sacreBLEU 13a, cased.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ALPHAS = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.5]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--src", type=Path, required=True)
    p.add_argument("--ref", type=Path, required=True)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--alphas", type=float, nargs="+", default=ALPHAS)
    p.add_argument("--engine", default="auto", choices=["auto", "torch", "ctranslate2"])
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()

    import torch
    from sacrebleu.metrics import BLEU

    from nmt.config import InferenceConfig, Overrides, SearchConfig
    from nmt.engines.choice import open_engine
    from nmt.engines.search import length_penalty

    torch.set_num_threads(args.threads)
    lines = args.src.read_text(encoding="utf-8").splitlines()
    refs = args.ref.read_text(encoding="utf-8").splitlines()
    engine = open_engine([args.model], Overrides(SearchConfig, {"beam": args.beam, "nbest": args.beam}),
                         Overrides(InferenceConfig, {"engine": args.engine, "threads": args.threads}))
    start = time.perf_counter()
    found = engine.translate_chunk(lines)
    print(f"{len(lines)} lines, beam {args.beam}, {engine.name} engine: {time.perf_counter() - start:.1f} s")
    scores: dict[tuple[str, float], float] = {}
    for kind in ("gnmt", "power"):
        for alpha in args.alphas:
            best = [max(t.hypotheses, key=lambda th: th[1].log_prob / length_penalty(len(th[1].tokens) + 1, alpha, kind))[0]
                    if t.hypotheses else "" for t in found]
            scores[kind, alpha] = BLEU().corpus_score(best, [refs]).score
    print()
    print("| alpha | " + " | ".join(f"{a:g}" for a in args.alphas) + " |")
    print("|---|" + "---:|" * len(args.alphas))
    for kind in ("gnmt", "power"):
        cells = []
        for alpha in args.alphas:
            value = scores[kind, alpha]
            cells.append(f"**{value:.2f}**" if value == max(scores.values()) else f"{value:.2f}")
        print(f"| {kind} | " + " | ".join(cells) + " |")
    for kind in ("gnmt", "power"):
        alpha = max(args.alphas, key=lambda a: scores[kind, a])
        print(f"- best {kind}: alpha {alpha:g}, BLEU {scores[kind, alpha]:.2f}")


if __name__ == "__main__":
    main()
