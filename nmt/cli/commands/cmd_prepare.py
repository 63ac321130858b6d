"""`nmt prepare`: binarize parallel text for training."""

from __future__ import annotations

import json
from dataclasses import asdict

from nmt.cli.options import with_config_options
from nmt.cli.stdio import write_stdout
from nmt.config import FilterConfig, Overrides
from nmt.config.command_options import PrepareOptions

EPILOG = ("Example: nmt prepare --bpe run/bpe.model --train data/train --valid data/valid "
          "--src en --tgt de --out run/data  |  a multilingual model: --pair en-de --pair en-fr instead of --src/--tgt")


@with_config_options({"given": PrepareOptions, "filters": FilterConfig})
def prepare_command(given: Overrides[PrepareOptions], filters: Overrides[FilterConfig]) -> None:
    """Encode parallel text into subwords, filter it, and write the binary training data; prints the filter
    report (JSON)."""
    from nmt.cli.console import progress_display
    from nmt.data.dataset import prepare
    from nmt.workflows.preparing import tokenizer_source

    o = given.apply()
    bpe = tokenizer_source(o.bpe_model)
    with progress_display() as report:
        reports = prepare(bpe, o.out, o.src, o.tgt, o.train, o.valid, o.test, filters=filters.apply(),
                          threads=o.threads or -1, chunk_size=o.chunk_size, progress=report, pairs=o.pair or (),
                          synthetic=o.synthetic or (), tag_synthetic=o.tag_synthetic, upsample=o.upsample)
    write_stdout(json.dumps({split: asdict(r) for split, r in reports.items()}, indent=2) + "\n")  # the result
