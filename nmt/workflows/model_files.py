"""The commands that write a checkpoint from others: `nmt average` (of a run's newest checkpoints, or of
files) and `nmt import marian` (a Hugging Face Marian folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from nmt.core.errors import OutputError, ref
from nmt.core.files import check_output_file, is_checkpoint_file, remove_dead_leftovers
from nmt.core.outputs import check_distinct, claim_file
from nmt.importers.marian import Imported, import_marian
from nmt.model import checkpoint


def average_into(out: Path, inputs: list[Path], last: Optional[int]) -> list[Path]:
    """Average the checkpoints `inputs` (or the newest `last` of a run folder) into `out`; the ones averaged."""
    check_output_file(out, ref("out"))
    claim_file(out, ref("out"), is_checkpoint_file, "a checkpoint")
    check_distinct("INPUTS", inputs)
    if checkpoint.STEP_PATTERN.match(out.name) or out.name == checkpoint.BEST_NAME:
        raise OutputError(f"{ref('out')} {out}: {out.name} is a name of training's own checkpoints (resuming and "
                          f"{ref('last')} would take the average for one); name it e.g. averaged.pt")
    paths = checkpoint.resolve_average_inputs(inputs, last)
    checkpoint.save(out, checkpoint.average(paths))
    return paths


def import_marian_into(out: Path, folder: Path, src: Optional[str], tgt: Optional[str]) -> Imported:
    """Import the Marian model of `folder` as the nmt checkpoint `out` (first removing the temporary files that
    imports into `out` which were killed left beside it: `.OUT.PID.RANDOM.tmp`, as large as the model)."""
    check_output_file(out, ref("out"))
    claim_file(out, ref("out"), is_checkpoint_file, "a checkpoint")
    remove_dead_leftovers(out.parent, out.name, ".tmp")
    imported = import_marian(folder, src, tgt)
    checkpoint.save(out, imported.checkpoint)
    return imported
