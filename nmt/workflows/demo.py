"""`nmt demo`: the whole pipeline on the sample corpus that ships with nmt, on CPU, in a few minutes."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from nmt.config import SearchConfig
from nmt.core.errors import OutputError, ref
from nmt.core.files import atomic_write, check_output_dir, read_lines
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.data.dataset import prepare
from nmt.documents.streams import translate_file
from nmt.engines.torch_engine import TorchEngine
from nmt.model import checkpoint
from nmt.scoring import Score, score
from nmt.text.bpe import train_bpe
from nmt.training.launch import train

SAMPLE_DIR = Path(__file__).parent.parent / "sample_data"
SRC, TGT = "en", "de"
VOCAB_SIZE = 1000
TRAIN = dict(max_updates=400, save_interval=40, valid_interval=100, keep_last=5, log_interval=10)
AVERAGE_LAST = 5
# The file that makes a folder the demo's: written into `--out` before anything else, so that a later demo may
# write over that folder again, and no other folder that holds anything.
MARKER = ".nmt-demo"
MARKER_TEXT = "This folder is the output of `nmt demo`: a later `nmt demo --out` into it writes over its files.\n"


@dataclass
class DemoResult:
    samples: list[tuple[str, str, str]]  # (source, translation, reference)
    scores: list[Score]
    seconds: float


def run_demo(out: Path, max_updates: Optional[int] = None, progress: ProgressFn = ignore,
             sample_dir: Path = SAMPLE_DIR, n_samples: int = 5) -> DemoResult:
    """bpe -> prepare -> train (tiny preset) -> average -> translate (beam 4) -> eval, all under `out`."""
    start = time.monotonic()
    claim_folder(out)

    def step(message: str) -> None:
        progress(Progress("demo", message=f"[{time.monotonic() - start:5.0f}s] {message}"))

    step("bpe: learning a joint vocabulary")
    train_bpe([sample_dir / f"train.{SRC}", sample_dir / f"train.{TGT}"], out / "bpe.model", vocab_size=VOCAB_SIZE,
              progress=progress)
    step("prepare: encoding and binarizing")
    prepare(out / "bpe.model", out / "data", SRC, TGT, sample_dir / "train", sample_dir / "valid", sample_dir / "test",
            progress=progress)
    step("train: tiny preset on the CPU")
    overrides = {**TRAIN, **({"max_updates": max_updates} if max_updates else {})}
    train(out / "data", out / "run", preset="tiny", train_overrides=overrides, progress=progress)
    step(f"average: the last {AVERAGE_LAST} checkpoints")
    paths = checkpoint.step_checkpoints(out / "run")[-AVERAGE_LAST:]
    checkpoint.save(out / "averaged.pt", checkpoint.average(paths))
    step("translate: the test set, beam 4")
    sources = list(read_lines(sample_dir / f"test.{SRC}"))
    refs = list(read_lines(sample_dir / f"test.{TGT}"))
    translator = TorchEngine(out / "averaged.pt", SearchConfig(beam=4, lenpen=0.6), progress=progress)
    hyps = translate_file(translator, None, sources)
    with atomic_write(out / f"test.hyp.{TGT}", "w") as f:
        f.write("".join(h + "\n" for h in hyps))
    step("eval: sacreBLEU")
    scores = score(hyps, refs, f"{out}/test.hyp.{TGT}", f"test.{TGT}")
    samples = list(zip(sources, hyps, refs))[:n_samples]
    return DemoResult(samples, scores, time.monotonic() - start)


def claim_folder(out: Path) -> None:
    """Make `out` the demo's folder (MARKER in it) before the demo writes anything: a new or empty folder, or
    one an earlier demo marked. OutputError for a folder that holds anything else (a user's bpe.model and
    data/ would be written over), leaving it as it is."""
    check_output_dir(out, ref("out"))
    if out.is_dir() and not (out / MARKER).is_file() and any(out.iterdir()):
        raise OutputError(f"{ref('out')} {out}: holds files and is not an earlier demo's folder (no {MARKER} in it), "
                          "and the demo writes bpe.model, data/, run/ and more into it; choose a new or empty folder")
    with atomic_write(out / MARKER, "w") as f:  # (creates `out`)
        f.write(MARKER_TEXT)
