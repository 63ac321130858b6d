"""`nmt bpe`: learn a joint subword vocabulary."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nmt.cli.options import with_config_options
from nmt.config import Overrides
from nmt.config.command_options import BpeOptions

EPILOG = "Example: nmt bpe --train data/train.en data/train.de --vocab-size 37000 --out run/bpe.model"


@with_config_options({"given": BpeOptions})
def bpe_command(
    given: Overrides[BpeOptions],
    more: Annotated[Optional[list[Path]], typer.Argument(help="More training files.", show_default=False,
                                                         metavar="FILES")] = None,
) -> None:
    """Learn a joint (source + target) subword vocabulary: BPE with youtokentome, or SentencePiece."""
    from nmt.cli.console import progress_display, say
    from nmt.core.files import check_input_file
    from nmt.text.tokenizer import describe_kind, train_tokenizer

    o = given.apply()
    files = [check_input_file(f, "--train") for f in list(o.train) + list(more or [])]  # x never means x.gz
    with progress_display() as report:
        tok = train_tokenizer(o.kind, files, o.out, vocab_size=o.vocab_size, model_type=o.model_type,
                              sample=o.sample, seed=1 if o.seed is None else o.seed, threads=o.threads or -1,
                              progress=report)
    say(f"{describe_kind(tok)} model with {tok.vocab_size:,} tokens written to {o.out}")
