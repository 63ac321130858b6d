"""`nmt average`: average checkpoints into one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nmt.cli.options import with_config_options
from nmt.config import Overrides
from nmt.config.command_options import AverageOptions

EPILOG = "Example: nmt average run --last 5 --out run/averaged.pt"


@with_config_options({"given": AverageOptions})
def average_command(
    inputs: Annotated[list[Path], typer.Argument(help="A run folder (with --last N) or checkpoint files.")],
    given: Overrides[AverageOptions],
) -> None:
    """Average the parameters of several checkpoints into one."""
    from nmt.cli.console import say
    from nmt.workflows.model_files import average_into

    o = given.apply()
    paths = average_into(o.out, inputs, o.last)
    say(f"averaged {len(paths)} checkpoints ({paths[0].name} .. {paths[-1].name}) into {o.out}")
