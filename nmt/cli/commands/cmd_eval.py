"""`nmt eval`: score translations with sacreBLEU, or compare systems."""

from __future__ import annotations

from nmt.cli.options import with_config_options
from nmt.cli.render import eval_report
from nmt.cli.stdio import stdin_bytes, write_stdout
from nmt.config import InferenceConfig, Overrides, SearchConfig, TextConfig
from nmt.config.command_options import EvalOptions

EPILOG = ("Example: nmt eval --model run/averaged.pt --src test.en --ref test.de --json   "
          "|   nmt eval --ref test.de --hyp base.de --hyp new.de --paired-bs")


@with_config_options({"given": EvalOptions, "search": SearchConfig, "inference": InferenceConfig,
                      "text": TextConfig})
def eval_command(given: Overrides[EvalOptions], search: Overrides[SearchConfig],
                 inference: Overrides[InferenceConfig], text: Overrides[TextConfig]) -> None:
    """Score translations with sacreBLEU (BLEU 13a/intl, cased/uncased, chrF, TER), against one or more references;
    compare systems with paired bootstrap resampling. Text may be gzip, bzip2 or xz; --save-hyp NAME.gz writes gzip."""
    from nmt.cli.console import message_logger, translation_progress
    from nmt.workflows.evaluation import evaluate

    o = given.apply()
    result = evaluate(o, search, inference, stdin=stdin_bytes, log=message_logger(), bar=translation_progress,
                      text=text.apply())
    write_stdout(eval_report(result, o.as_json))
