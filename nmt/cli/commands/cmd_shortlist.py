"""`nmt shortlist`: a vocabulary shortlist attached to a checkpoint."""

from __future__ import annotations

import json

from nmt.cli.options import with_config_options
from nmt.cli.stdio import write_stdout
from nmt.config import Overrides
from nmt.config.command_options import ShortlistOptions

EPILOG = "Example: nmt shortlist --model run/averaged.pt --data data --out run/shortlisted.pt --top 50 --frequent 100"


@with_config_options({"given": ShortlistOptions})
def shortlist_command(given: Overrides[ShortlistOptions]) -> None:
    """Learn which target tokens each source token needs (from the data's train split) and write the model with
    that vocabulary shortlist: both engines then compute only those outputs (--no-shortlist: all)."""
    from nmt.distillation.shortlisting import attach_shortlist

    o = given.apply()
    report = attach_shortlist(o.model, o.data, o.out, o.top, o.frequent)
    write_stdout(json.dumps(report) + "\n")  # the result: one line of JSON
