"""`nmt import`: a model trained elsewhere as an nmt checkpoint (`nmt import marian`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt.cli.guard import PathGuard
from nmt.cli.options import with_config_options
from nmt.config import Overrides
from nmt.config.command_options import ImportMarianOptions
from nmt.config.flags import as_flags

import_app = typer.Typer(name="import", help="Import a model trained elsewhere as an nmt checkpoint: translate, "
                         "score, serve, export and fine-tune it like one of nmt's own.", no_args_is_help=True,
                         rich_markup_mode=None,
                         epilog="Example: nmt import marian opus-mt-en-de --out opus-mt-en-de.pt")


@import_app.command("marian", cls=PathGuard,
                    epilog="Example: huggingface-cli download Helsinki-NLP/opus-mt-en-de --local-dir opus-mt-en-de "
                           "&& nmt import marian opus-mt-en-de --out opus-mt-en-de.pt")
@with_config_options({"given": ImportMarianOptions})
def import_marian_command(
    folder: Annotated[Path, typer.Argument(help="A Hugging Face Marian (OPUS-MT) folder: config.json, the weights, "
                                           "source.spm, target.spm, vocab.json.", show_default=False)],
    given: Overrides[ImportMarianOptions],
) -> None:
    """Import a Marian model (Helsinki-NLP's OPUS-MT) from a Hugging Face folder; needs no transformers."""
    from nmt.cli.console import say
    from nmt.importers.marian import describe
    from nmt.workflows.model_files import import_marian_into

    o = given.apply()
    imported = import_marian_into(o.out, folder, o.src, o.tgt)
    for note in imported.notes:
        say(as_flags(note))
    say(as_flags(describe(imported, o.out)))
