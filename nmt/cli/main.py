"""The `nmt` program: the typer app, its global options (--debug, --version), the commands (one module
each, in nmt.cli.commands) and the error boundary where failures meet the user. Results go to stdout,
progress and logs to stderr.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import traceback
from typing import Any, Callable

import typer
from typer.core import TyperGroup

from nmt import __version__
from nmt.cli.commands import (
    cmd_average,
    cmd_bpe,
    cmd_demo,
    cmd_distill,
    cmd_download,
    cmd_eval,
    cmd_export,
    cmd_import,
    cmd_prepare,
    cmd_serve,
    cmd_shortlist,
    cmd_train,
    cmd_translate,
)
from nmt.cli.guard import PathGuard
from nmt.cli.options import with_config_options
from nmt.cli.stdio import write_stdout
from nmt.config import Overrides
from nmt.config.command_options import ProgramOptions
from nmt.config.flags import as_flags
from nmt.core.errors import NmtError, StderrIsInput
from nmt.core.failures import error_line, is_out_of_memory, is_torch_io_error

DEBUG = {"on": bool(os.environ.get("NMT_DEBUG"))}


def report_error(e: BaseException) -> int:
    """Render an expected failure as one red line on stderr (the traceback too with --debug); its exit code.

    A reader that went away (`nmt translate ... | head -1`) is no error: exit 141 (128 + SIGPIPE) quietly,
    as a program killed by SIGPIPE would.
    """
    if isinstance(e, BrokenPipeError) or (isinstance(e, OSError) and e.errno == errno.EPIPE):
        with contextlib.suppress(OSError):  # silence the flush of stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    if isinstance(e, KeyboardInterrupt):
        with contextlib.suppress(OSError):
            sys.stderr.write("interrupted\n")
        return 130
    if DEBUG["on"]:
        traceback.print_exc()
    message, code = error_line(e)
    message = as_flags(message)  # the library names config fields; the user typed their options
    if isinstance(e, StderrIsInput):  # said on stderr, the line would go into the file it protects
        with contextlib.suppress(OSError):
            if not os.path.sameopenfile(1, 2):
                write_stdout(f"error: {message}\n")
        return code
    with contextlib.suppress(OSError):  # stderr itself may be gone
        from rich.text import Text  # rich (and the console) only once there is something to render

        from nmt.cli.console import err

        err.print(Text("error: ", style="red") + Text(message), soft_wrap=True)
    return code


class ErrorBoundary(TyperGroup):
    """The one place where failures meet the user: every expected one (NmtError, the OSError family,
    torch's failed reads and writes, Ctrl-C, a closed pipe) becomes one line and an exit code. Anything
    else is a bug and keeps its traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (NmtError, OSError, KeyboardInterrupt, MemoryError) as e:
            sys.exit(report_error(e))
        except RuntimeError as e:
            if not (is_torch_io_error(e) or is_out_of_memory(e)):
                raise  # a bug (or click's own Exit, a RuntimeError too)
            sys.exit(report_error(e))


app = typer.Typer(
    cls=ErrorBoundary,
    name="nmt",
    help="Neural machine translation with the Transformer: download, bpe, prepare, train, average, translate, eval.\n\n"
         "Example: nmt demo --out nmt-demo",
    no_args_is_help=True,
    add_completion=True,  # --install-completion and --show-completion (bash, zsh, fish, PowerShell)
    context_settings={"help_option_names": ["-h", "--help"]},  # every command inherits -h
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def print_version(value: bool) -> None:
    if value:
        write_stdout(f"nmt {__version__}\n")
        raise typer.Exit()


@app.callback()
@with_config_options({"given": ProgramOptions}, callbacks={"version": print_version})
def main_options(given: Overrides[ProgramOptions]) -> None:
    if given.apply().debug:
        DEBUG["on"] = True


# The commands, in the order --help lists them; every one is a PathGuard (the path rule, nmt.cli.guard).
COMMANDS: list[tuple[str, str, Callable[..., Any]]] = [
    ("bpe", cmd_bpe.EPILOG, cmd_bpe.bpe_command),
    ("prepare", cmd_prepare.EPILOG, cmd_prepare.prepare_command),
    ("train", cmd_train.EPILOG, cmd_train.train_command),
    ("average", cmd_average.EPILOG, cmd_average.average_command),
    ("translate", cmd_translate.EPILOG, cmd_translate.translate_command),
    ("eval", cmd_eval.EPILOG, cmd_eval.eval_command),
    ("distill", cmd_distill.EPILOG, cmd_distill.distill_command),
    ("demo", cmd_demo.EPILOG, cmd_demo.demo_command),
    ("download", cmd_download.EPILOG, cmd_download.download_command),
    ("serve", cmd_serve.EPILOG, cmd_serve.serve_command),
    ("shortlist", cmd_shortlist.EPILOG, cmd_shortlist.shortlist_command),
    ("export", cmd_export.EPILOG, cmd_export.export_command),
]
for name, epilog, function in COMMANDS:
    app.command(name, cls=PathGuard, epilog=epilog)(function)
app.add_typer(cmd_import.import_app)


def main() -> None:
    """Entry point: run the app (its errors are rendered by ErrorBoundary)."""
    try:
        app()
    except (NmtError, OSError, KeyboardInterrupt) as e:  # raised outside a command (e.g. while parsing)
        sys.exit(report_error(e))
