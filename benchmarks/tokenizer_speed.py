"""Encode throughput of nmt's tokenizers, plain and with subword regularisation, on one thread (issue 24 item 5).

Run by hand (results go to docs/benchmarks-data.md):

    .venv/bin/python benchmarks/tokenizer_speed.py --train data/multi30k/train.en.gz data/multi30k/train.de.gz \
        --text data/multi30k/train.en.gz --vocab-size 8000

It learns a joint model of each kind from --train (youtokentome BPE, SentencePiece unigram and bpe, one
thread each, in a temporary folder), then encodes every line of --text with each, in calls of --batch lines
(as `nmt prepare` does), `threads=1`, at dropout 0 and --dropout; --rounds times, reporting the median and
the best lines per second and the tokens per line. The libraries' own samplers are timed too, for reference:
youtokentome's `dropout_prob` and SentencePiece's `enable_sampling`. nmt does not use them: the first cannot
be seeded, the second gives another sample in another process (see nmt/text/bpe.py, nmt/text/spm.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nmt.core.files import read_lines  # noqa: E402
from nmt.text.bpe import BpeTokenizer  # noqa: E402
from nmt.text.spm import SentencePieceTokenizer  # noqa: E402
from nmt.text.tokenizer import train_tokenizer  # noqa: E402


def timed(encode, lines: list[str], batch: int, rounds: int) -> tuple[list[float], float]:
    """Lines per second of each round, and tokens per line."""
    speeds, tokens = [], 0
    for r in range(rounds):
        start = time.perf_counter()
        tokens = 0
        for i, a in enumerate(range(0, len(lines), batch)):
            tokens += sum(map(len, encode(lines[a : a + batch], (r, i))))
        speeds.append(len(lines) / (time.perf_counter() - start))
    return speeds, tokens / len(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", type=Path, nargs="+", required=True, help="text to learn the models from")
    ap.add_argument("--text", type=Path, required=True, help="text to encode")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=16384, help="lines per encode call")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args()

    lines = list(read_lines(args.text))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            "youtokentome": train_tokenizer("youtokentome", args.train, Path(tmp) / "bpe.model", args.vocab_size, threads=1),
            "sentencepiece unigram": train_tokenizer("sentencepiece", args.train, Path(tmp) / "u.model", args.vocab_size,
                                                     model_type="unigram", threads=1),
            "sentencepiece bpe": train_tokenizer("sentencepiece", args.train, Path(tmp) / "b.model", args.vocab_size,
                                                 model_type="bpe", threads=1),
        }
        for name, tok in models.items():
            for p in (0.0, args.dropout):
                speeds, per_line = timed(lambda b, s: tok.encode(b, threads=1, dropout=p, seed=s), lines, args.batch,
                                         args.rounds)
                results.append({"tokenizer": name, "dropout": p, "median": statistics.median(speeds),
                                "best": max(speeds), "tokens_per_line": per_line})
        yttm = models["youtokentome"]
        assert isinstance(yttm, BpeTokenizer)
        speeds, per_line = timed(lambda b, s: yttm._model(1).encode(b, dropout_prob=args.dropout), lines, args.batch,
                                 args.rounds)
        results.append({"tokenizer": "youtokentome's own dropout_prob (unseeded)", "dropout": args.dropout,
                        "median": statistics.median(speeds), "best": max(speeds), "tokens_per_line": per_line})
        for kind in ("unigram", "bpe"):
            sp = models[f"sentencepiece {kind}"]
            assert isinstance(sp, SentencePieceTokenizer)
            model = sp._models["source"]
            speeds, per_line = timed(lambda b, s: model.encode(b, enable_sampling=True, alpha=args.dropout,
                                                               nbest_size=-1, num_threads=1), lines, args.batch,
                                     args.rounds)
            results.append({"tokenizer": f"SentencePiece {kind}'s own sampling (salted per process)",
                            "dropout": args.dropout, "median": statistics.median(speeds), "best": max(speeds),
                            "tokens_per_line": per_line})

    print(f"{len(lines):,} lines of {args.text.name}, vocabulary {args.vocab_size}, one thread, "
          f"{args.rounds} rounds; {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print("| tokenizer | dropout | lines/s (median) | lines/s (best) | tokens/line |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['tokenizer']} | {r['dropout']} | {r['median']:,.0f} | {r['best']:,.0f} | {r['tokens_per_line']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
