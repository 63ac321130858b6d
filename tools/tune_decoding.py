"""Validation BLEU of a finished run over checkpoint averaging and search settings.

Only the validation set is used: the test set is scored once, with the setting chosen here.

    python tools/tune_decoding.py RUN_DIR --src raw/valid.en --ref raw/valid.de \
        --average 1 3 5 10 --beam 1 4 --lenpen 0.6 1.0

Prints a Markdown table (stdout): checkpoints averaged, beam, length penalty, BLEU 13a cased, seconds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from nmt.core.files import read_lines
from nmt.documents.streams import translate_file
from nmt.engines.search import SearchConfig
from nmt.engines.torch_engine import TorchEngine
from nmt.model import checkpoint
from nmt.scoring import score


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--src", type=Path, required=True)
    ap.add_argument("--ref", type=Path, required=True)
    ap.add_argument("--average", type=int, nargs="+", default=[1, 5, 10])
    ap.add_argument("--beam", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--lenpen", type=float, nargs="+", default=[0.6])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sources, refs = list(read_lines(args.src)), list(read_lines(args.ref))
    steps = checkpoint.step_checkpoints(args.run)
    last_update = int(checkpoint.STEP_PATTERN.match(steps[-1].name)[1]) if steps else 0
    print("| averaged | last update | beam | lenpen | valid BLEU | seconds |")
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for k in args.average:
            if k > len(steps):
                print(f"skip --average {k}: the run keeps {len(steps)} step checkpoints", file=sys.stderr)
                continue
            path = Path(tmp) / f"avg{k}.pt"
            checkpoint.save(path, checkpoint.average(steps[-k:]))
            for beam in args.beam:
                for lenpen in args.lenpen if beam > 1 else [0.0]:
                    start = time.monotonic()
                    translator = TorchEngine(path, SearchConfig(beam=beam, lenpen=lenpen))
                    hyps = translate_file(translator, None, sources)
                    bleu = score(hyps, refs)[0]
                    print(f"| {k} | {last_update} | {beam} | {lenpen} | "
                          f"{bleu.score:.2f} | {time.monotonic() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
