"""Translation speed with and without a vocabulary shortlist (`nmt shortlist`), on CTranslate2 int8, one thread,
greedy and beam 4, for a student-sized model: --preset multi30k --encoder-layers 6 --decoder-layers 1 (d_model
128) with a vocabulary of --vocab-size joint BPE pieces. Prints a markdown table.

Run by hand (results go to docs/benchmarks-translate.md, "Vocabulary shortlist"):

    nice .venv/bin/python benchmarks/shortlist_speed.py --work WORK_FOLDER [--model MODEL.pt --data DATA]

Without --model the weights are random (seeded) and every output has the same fixed length (max_len_a 0,
max_len_b --length: a random model rarely ends earlier), so both runs do the same number of decoding steps;
the BPE model and the shortlist are learnt from --corpus (default: the bundled sample, 12,000 pairs, too small for
6,000 pieces: give Multi30k's folder). With --model and
--data (the model's prepared store) the model's own search and lengths are timed. Timed: encoding, search and
decoding of --lines test lines in nmt's batches, the median of --repeats rounds, model loading excluded.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import statistics
import subprocess
import time
from pathlib import Path

import torch

from nmt.config import SearchConfig, from_preset
from nmt.core.identity import DataIdentity
from nmt.core.vocab import EOS
from nmt.data.dataset import prepare
from nmt.distillation.shortlisting import attach_shortlist
from nmt.engines.ct2_engine import CTranslate2Engine
from nmt.engines.ct2_export import export_ctranslate2
from nmt.model import checkpoint
from nmt.model.transformer import Transformer
from nmt.text.tokenizer import digest, train_tokenizer

SAMPLE = Path(__file__).resolve().parents[1] / "nmt" / "sample_data"


def cpu_name() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")


def plain_corpus(corpus: Path, work: Path) -> Path:
    """CORPUS's train, valid (or val) and test (or test_2016_flickr) .en/.de files, plain or .gz, as WORK/text/SPLIT.*"""
    out = work / "text"
    out.mkdir(exist_ok=True)
    for split, names in (("train", ("train",)), ("valid", ("valid", "val")), ("test", ("test", "test_2016_flickr"))):
        for lang in ("en", "de"):
            found = [p for n in names for p in (corpus / f"{n}.{lang}", corpus / f"{n}.{lang}.gz") if p.exists()]
            opener = gzip.open if found[0].suffix == ".gz" else open
            with opener(found[0], "rt", encoding="utf-8") as f:
                (out / f"{split}.{lang}").write_text(f.read(), encoding="utf-8")
    return out


def random_model(work: Path, text: Path, vocab_size: int) -> tuple[Path, Path]:
    """A seeded random model of the student's shape, whose EOS is never likeliest (so that every output has the
    same length), and the corpus prepared with its BPE model."""
    tok = train_tokenizer("youtokentome", [text / "train.en", text / "train.de"], work / "bpe.model", vocab_size)
    data = work / "data"
    prepare(work / "bpe.model", data, "en", "de", text / "train", text / "valid")
    model_cfg, train_cfg = from_preset("multi30k", {"encoder_layers": 6, "decoder_layers": 1,
                                                    "vocab_size": tok.vocab_size})
    torch.manual_seed(1)
    weights = Transformer(model_cfg).eval().state_dict()
    weights["embed.weight"][EOS] = 0.0  # its logit 0, below the best of thousands of random ones
    identity = DataIdentity("en", "de", tok.vocab_size, tok.kind, digest(tok.to_data()))
    path = work / "model.pt"
    checkpoint.save(path, checkpoint.Checkpoint(model_cfg, train_cfg, identity, tok.to_data(), weights))
    return path, data


def timed(folder: Path, cfg: SearchConfig, lines: list[str], shortlist: bool, repeats: int,
          batch: int) -> tuple[float, float]:
    """Median seconds to translate `lines` in batches of at most `batch` and the mean output length in tokens.
    (The shortlist of a batch is the union of its sentences': the smaller the batch, the fewer outputs.)"""
    engine = CTranslate2Engine(folder, cfg, compute_type="int8", threads=1, shortlist=shortlist, max_sentences=batch,
                                   suppress_specials=True)  # a random model's PAD and BOS
    times, out = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        out = engine.translate_chunk(lines)
        times.append(time.perf_counter() - start)
    return statistics.median(times), statistics.mean(len(t.hypotheses[0][1].tokens) for t in out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="Folder for the model, data and exports.")
    ap.add_argument("--model", type=Path, help="A trained checkpoint (default: random weights).")
    ap.add_argument("--data", type=Path, help="The model's prepared store (with --model).")
    ap.add_argument("--corpus", type=Path, default=SAMPLE, help="Folder of train/valid/test .en/.de (plain or .gz; "
                    "Multi30k's val and test_2016_flickr too): BPE, shortlist and test lines (default: the sample).")
    ap.add_argument("--vocab-size", type=int, default=6000)
    ap.add_argument("--top", type=int, default=50)
    ap.add_argument("--frequent", type=int, default=100)
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--length", type=int, default=20, help="Output tokens of a random model (max_len_b).")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 8], help="Sentences per batch at most.")
    args = ap.parse_args()
    torch.set_num_threads(1)
    args.work.mkdir(parents=True, exist_ok=True)
    text = plain_corpus(args.corpus, args.work)
    model, data = (args.model, args.data) if args.model else random_model(args.work, text, args.vocab_size)
    report = attach_shortlist(model, data, args.work / "shortlisted.pt", args.top, args.frequent)
    folder = args.work / "ct2"
    export_ctranslate2(args.work / "shortlisted.pt", folder, force=True)
    lines = (text / "test.en").read_text(encoding="utf-8").splitlines()[: args.lines]
    fixed = {} if args.model else {"max_len_a": 0.0, "max_len_b": args.length}
    print(f"CPU: {cpu_name()}; CTranslate2 int8, 1 thread; {len(lines)} lines; weights: "
          f"{'trained' if args.model else f'random, every output {args.length} tokens'}; shortlist top "
          f"{args.top}, frequent {args.frequent}: coverage {report['coverage']}, "
          f"{report['candidates_per_sentence']} candidates per sentence\n")
    print("| search | batch | without (s) | with (s) | speed-up | tokens out |")
    print("|---|---:|---:|---:|---:|---:|")
    for batch in args.batch_sizes:
        for name, beam in (("greedy", 1), ("beam 4", 4)):
            cfg = dataclasses.replace(SearchConfig(beam=beam), **fixed).validate()
            (plain, length), (short, _) = (timed(folder, cfg, lines, s, args.repeats, batch) for s in (False, True))
            print(f"| {name} | {batch} | {plain:.2f} | {short:.2f} | {plain / short:.2f}x | {length:.1f} |")


if __name__ == "__main__":
    main()
