"""`nmt download`: fetch a dataset (or list them, or verify a download)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nmt.cli.options import with_config_options
from nmt.cli.render import datasets_table, rendered
from nmt.cli.stdio import write_stdout
from nmt.config import Overrides
from nmt.config.command_options import DownloadOptions
from nmt.config.flags import as_flags

EPILOG = ("Example: nmt download multi30k --out data/multi30k   or   "
          "nmt download wmt14 --pair en-fr --out data/wmt14-en-fr")
# The columns of a monolingual download's counts on stdout: (heading, key in DownloadResult.counts).
COUNTS = (("file", ""), ("read", "read"), ("empty", "empty"), ("held out", "held_out"),
          ("duplicates", "duplicates"), ("kept", "kept"))


@with_config_options({"given": DownloadOptions})
def download_command(
    given: Overrides[DownloadOptions],
    name: Annotated[Optional[str], typer.Argument(help="Dataset name (see --list): a family such as wmt14, "
                                                  "or a full name such as wmt14-en-fr.")] = None,
) -> None:
    """Download a dataset into OUT/{train,valid,test}.{src,tgt} (a monolingual one: OUT/mono.{src,tgt}) with a
    MANIFEST.json."""
    from nmt import download as dl
    from nmt.cli.console import progress_display, say
    from nmt.core.errors import InputError

    o = given.apply()
    if o.list_:
        rows = ([as_flags(cell) for cell in dl.describe(info)] for info in dl.list_datasets())
        write_stdout(datasets_table(rows))  # refuses a closed stdout
        groups = ", ".join(f"{family} ({', '.join(pairs)})" for family, pairs in dl.families().items())
        say(f"A family takes --pair (its first pair is the default): {groups}; "
            "e.g. `nmt download wmt14 --pair en-fr` is wmt14-en-fr.")
        return
    if name is None or o.out is None:
        raise InputError("name a dataset and --out FOLDER (e.g. nmt download multi30k --out data/multi30k), "
                         "or use --list")
    spec = dl.resolve(name, o.pair)  # an unknown name or pair is an error before anything is read or written
    if o.verify:
        verify_download(spec.name, o.out)
        return
    with progress_display(bytes_unit=True) as report:
        result = dl.download(spec, o.out, mirror=o.mirror, extra_tests=o.extra_tests, progress=report,
                             timeout=o.timeout)
    say(as_flags(dl.summary(result)))
    if result.counts:  # a monolingual dataset: what each file kept and dropped is the result
        write_stdout(counts_table(result.counts))


def counts_table(counts: dict[str, dict[str, int]]) -> str:
    """A monolingual download's lines per file: read, dropped (empty, held out, duplicates) and kept."""
    from rich.table import Table

    table = Table(*(heading for heading, _ in COUNTS), box=None)
    for name, count in counts.items():
        table.add_row(name, *(f"{count[key]:,}" for _, key in COUNTS[1:]))
    return rendered(table)


def verify_download(name: str, out: Path) -> None:
    """--verify: print each file that differs from the manifest; InputError if any does."""
    from nmt import download as dl
    from nmt.cli.console import say
    from nmt.core.errors import InputError

    good, problems = dl.verify_outputs(out)
    for problem in problems:
        write_stdout(problem + "\n")
    if problems:
        raise InputError(f"{out}: {len(problems)} of {len(good) + len(problems)} files differ from {dl.MANIFEST}; "
                         f"run `nmt download {name} --out {out}` again to rewrite them")
    say(f"{out}: all {len(good)} files match {dl.MANIFEST}")
