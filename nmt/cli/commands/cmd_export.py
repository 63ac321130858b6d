"""`nmt export`: a checkpoint for another inference engine (CTranslate2)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt.cli.options import with_config_options
from nmt.config import Overrides
from nmt.config.command_options import ExportOptions
from nmt.config.flags import as_flags

EPILOG = "Example: nmt export --format ctranslate2 run/averaged.pt run/ct2-model"


@with_config_options({"given": ExportOptions})
def export_command(
    model: Annotated[Path, typer.Argument(help="Checkpoint (.pt) from train or average.", show_default=False)],
    out_dir: Annotated[Path, typer.Argument(help="Folder to write the exported model to.", show_default=False)],
    given: Overrides[ExportOptions],
) -> None:
    """Export a checkpoint for another inference engine: a CTranslate2 model folder (needs
    `pip install ctranslate2`)."""
    from nmt.cli.console import say
    from nmt.engines.ct2_export import describe, export

    o = given.apply()
    result = export(o.format, model, out_dir, quantization=o.quantization, force=o.force)
    say(as_flags(describe(result)))
