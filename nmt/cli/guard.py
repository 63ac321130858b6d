"""The path rule at the command line: before a command runs, its outputs are checked against its inputs
(nmt.core.outputs.check_outputs) and a closed stdout where it prints results is an error. Which parameter
is an output, and what each command reads besides, is data: nmt.cli.paths.COMMAND_PATHS.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typer.core import TyperCommand

from nmt.cli.stdio import require_stdout

if TYPE_CHECKING:  # the commands import the library where they run (a fast --help)
    from nmt.core.outputs import Output


def parameter_label(param: Any) -> str:
    """How the user names a parameter: an option's long name (--output), an argument's name (OUT_DIR)."""
    if param.param_type_name == "option":
        return str(next((o for o in param.opts if o.startswith("--")), param.opts[0]))
    return str(param.metavar or param.name.upper())


def is_path_parameter(param: Any) -> bool:
    """Whether a parameter of a typer command takes paths (typer's own parameters, or click's before typer 0.20)."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:
        return type(getattr(param, "type", None)).__name__ == "Path"
    kind = descriptor.annotation  # Path, or List[Path] for a repeated option
    listed = typing.get_origin(kind) in (list, tuple) and typing.get_args(kind)[:1] == (Path,)
    return bool(descriptor.is_path) or listed


def path_values(value: Any) -> list[Path]:
    if value is None:
        return []
    return [Path(v) for v in value] if isinstance(value, (list, tuple)) else [Path(value)]


def command_paths(name: str, command: Any, params: Mapping[str, Any]) -> tuple[list[Output], list[tuple[str, Path]]]:
    """The outputs (nmt.core.files.Output) and inputs ((label, path)) of `command` (named `name`, as in
    COMMAND_PATHS) called with `params`."""
    # imported here, as in PathGuard.invoke: `nmt --help` needs neither
    from nmt.cli.paths import COMMAND_PATHS
    from nmt.core.outputs import Output

    roles = COMMAND_PATHS[name]
    outputs, inputs = [], []
    for param in command.params:
        if not is_path_parameter(param):
            continue
        for path in path_values(params.get(param.name)):
            role = roles.outputs.get(param.name)
            if role is None:
                inputs.append((parameter_label(param), path))
            else:
                outputs.append(Output(parameter_label(param), path, role.folder, role.owns, role.appends))
    return outputs, inputs + roles.named(params)


def command_name(ctx: Any) -> str:
    """A command's name below the program's: "translate", "import marian" (whatever the program is called)."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(reversed(names))


class PathGuard(TyperCommand):
    """Every nmt command: before it runs, a closed stdout where it prints results, and outputs that are
    inputs (files, folders holding them, redirections) are one-line errors."""

    def invoke(self, ctx: Any) -> Any:
        # the rules (and nmt.core.files) are read when a command runs: `nmt --help` needs none of them
        from nmt.cli.paths import COMMAND_PATHS
        from nmt.core.outputs import check_outputs

        name = command_name(ctx)
        roles = COMMAND_PATHS[name]
        if roles.prints(ctx.params):
            require_stdout()
        outputs, inputs = command_paths(name, self, ctx.params)
        check_outputs(outputs, inputs, reads_stdin=roles.reads_stdin(ctx.params))
        return super().invoke(ctx)
