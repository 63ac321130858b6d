"""`nmt distill`: a teacher's translations of a corpus, the training data of a student."""

from __future__ import annotations

import json

from nmt.cli.options import with_config_options
from nmt.cli.stdio import write_stdout
from nmt.config import InferenceConfig, Overrides, SearchConfig
from nmt.config.command_options import DistillOptions

EPILOG = ("Example: nmt distill -m teacher.pt --train data/train --src en --tgt de --out distilled --beam 4  "
          "then: nmt prepare --train distilled/train --src en --tgt de ...  Back-translation: nmt distill -m de-en.pt "
          "--train mono/mono --src de --tgt en --out bt --sampling --topk 10  then: nmt prepare --train data/train "
          "--synthetic bt/train --src en --tgt de ...")


@with_config_options({"given": DistillOptions, "search": SearchConfig, "inference": InferenceConfig})
def distill_command(given: Overrides[DistillOptions], search: Overrides[SearchConfig],
                    inference: Overrides[InferenceConfig]) -> None:
    """Translate the source side of a training corpus with a teacher (a checkpoint, an ensemble, an imported
    OPUS-MT model) into a distilled corpus for a student: CTranslate2 int8 where it can, resumable by chunk,
    the n-best closest to the reference with --interpolate, the teacher's failures dropped and counted; prints
    the report (JSON). Under torchrun each process translates its share of the chunks; the first prints the report.
    A monolingual corpus (PREFIX.SRC alone) gives back-translations (a TGT-SRC teacher translating TGT text) or
    forward translations."""
    from nmt.cli.console import translation_progress
    from nmt.core.files import count_lines, resolve_prefixed
    from nmt.distillation.distill import distill
    from nmt.training.distributed import torchrun_env
    from nmt.workflows.threads import set_threads

    o = given.apply()
    set_threads(inference.get("threads", 0))
    total = count_lines(resolve_prefixed(f"{o.train}.{o.src}"))  # a missing corpus fails before the model loads
    with translation_progress(total) as report:
        result = distill(o, search, inference, progress=report, total=total)
    rank = (torchrun_env() or (0,))[0]
    if rank == 0:  # every process of a job has the report: one prints it
        write_stdout(json.dumps(result, indent=2) + "\n")
