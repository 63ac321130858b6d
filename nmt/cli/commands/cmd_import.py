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


# The download as nmt.importers.marian.get_one words it (huggingface_hub's `hf`; tests/test_import_marian.py checks)
DOWNLOAD = ("hf download Helsinki-NLP/opus-mt-en-de config.json model.safetensors source.spm target.spm vocab.json "
            "tokenizer_config.json generation_config.json --local-dir opus-mt-en-de")


@import_app.command("marian", cls=PathGuard,
                    epilog=f"Example: {DOWNLOAD} && nmt import marian opus-mt-en-de --out opus-mt-en-de.pt "
                           "(hf: pip install huggingface_hub). A multilingual model (>>fra<< tokens in vocab.json) "
                           "translates into each of its targets: nmt translate --tgt-lang fra.")
@with_config_options({"given": ImportMarianOptions})
def import_marian_command(
    folder: Annotated[Path, typer.Argument(help="A Hugging Face Marian (OPUS-MT) folder: config.json, the weights, "
                                           "source.spm, target.spm, vocab.json.", show_default=False)],
    given: Overrides[ImportMarianOptions],
) -> None:
    """Import a Marian model (Helsinki-NLP's OPUS-MT, one target or several) from a Hugging Face folder; needs no
    transformers."""
    from nmt.cli.console import say
    from nmt.importers.marian import describe
    from nmt.workflows.model_files import import_marian_into

    o = given.apply()
    imported = import_marian_into(o.out, folder, o.src, o.tgt)
    for note in imported.notes:
        say(as_flags(note))
    say(as_flags(describe(imported, o.out)))
