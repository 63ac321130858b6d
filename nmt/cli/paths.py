"""What each command reads and writes: the one place where outputs are marked.

Every other path a command takes (each Path option or argument, and the files that its string options
name) is an input; the command line (nmt.cli.guard) checks them against each other
(nmt.core.outputs.check_outputs) before the command does any work. The library modules these rules ask
(checkpoint names, the trainer's files) are imported inside them: the command line reads this table
before any command runs, and `nmt --help` must not wait for torch.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from nmt.core.errors import NmtError
from nmt.core.files import LOCK_NAME, resolve_prefixed


@dataclass(frozen=True)
class Writes:
    """An output parameter: a file, or a folder of which `owns(relative path, input option)` tells the
    paths the command writes over or deletes (None: the whole folder)."""

    folder: bool = False
    owns: Optional[Callable[[str, str], bool]] = None
    appends: bool = False  # a file the command appends to (a log), never replaces


FILE = Writes()
APPENDED = Writes(appends=True)


def run_folder_owns(relative: str, option: str) -> bool:
    """What `nmt train` writes or deletes in its run folder; its own config.toml may be the --config
    (a resume rewrites it with the settings read from it)."""
    from nmt.model.checkpoint import BEST_NAME, DAMAGED_SUFFIX, STEP_PATTERN  # torch: only when train runs
    from nmt.training.runlog import CONFIG_NAME, LOG_NAME, TENSORBOARD_DIR

    if relative == CONFIG_NAME:
        return option != "--config"
    name = relative.removesuffix(DAMAGED_SUFFIX)
    return bool(STEP_PATTERN.match(name) or name == BEST_NAME or relative in (LOG_NAME, LOCK_NAME)
                or relative.startswith(TENSORBOARD_DIR + "/") or re.fullmatch(r"\.[^/]*\.tmp", relative))


def data_folder_owns(relative: str, option: str) -> bool:
    """A data folder is nmt prepare's own: it holds no inputs but the store's own tokenizer model given as --bpe,
    which prepare writes back byte for byte under its name: a joint model of any kind (bpe.model, spm.model),
    not a side of a SentencePiece pair (source.spm, which a joint model would replace)."""
    from nmt.text.tokenizer import TOKENIZER_KINDS  # the tokenizer libraries: only when prepare runs

    return not (option == "--bpe" and relative in {kind.joint_file for kind in TOKENIZER_KINDS.values()})


def heatmaps_own(relative: str, option: str) -> bool:
    return re.fullmatch(r"line\d{5}\.layer\d+\.png", relative) is not None


def prefixed_files(params: Mapping[str, Any]) -> list[tuple[str, Path]]:
    """prepare's --train/--valid/--test/--synthetic PREFIX: the files PREFIX.SRC and PREFIX.TGT (or .gz) it reads."""
    found = []
    for key in ("train", "valid", "test", "synthetic"):
        given = params.get(key)
        for prefix in given if isinstance(given, (list, tuple)) else [given]:
            for lang in (params.get("src"), params.get("tgt")):
                if prefix and lang:
                    with contextlib.suppress(NmtError):  # a missing file: the command itself says so
                        found.append((f"--{key}", resolve_prefixed(f"{prefix}.{lang}")))
    return found


def glossary_files(params: Mapping[str, Any]) -> list[tuple[str, Path]]:
    """serve's --glossary [SRC-TGT=]FILE: the files it reads."""
    from nmt.serve.backend import GLOSSARY_SPEC  # only when serve runs

    return [("--glossary", Path(spec.group(3) if (spec := GLOSSARY_SPEC.fullmatch(value)) else value))
            for value in params.get("glossary") or [] if value]


def run_checkpoints(params: Mapping[str, Any]) -> list[tuple[str, Path]]:
    """average's run folder: the checkpoints in it that --last may read."""
    inputs = params.get("inputs") or []
    if len(inputs) != 1 or not Path(inputs[0]).is_dir():
        return []
    from nmt.model.checkpoint import BEST_NAME, step_checkpoints  # torch: only when average runs

    best = Path(inputs[0]) / BEST_NAME
    return [("INPUTS", p) for p in step_checkpoints(Path(inputs[0])) + ([best] if best.is_file() else [])]


def eval_reads_stdin(params: Mapping[str, Any]) -> bool:
    hyp = params.get("hyp") or []
    return "-" in hyp or (not hyp and not params.get("model"))


def marian_files(params: Mapping[str, Any]) -> list[tuple[str, Path]]:
    """The files of a Marian folder that `import marian` reads."""
    from nmt.importers.marian import FOLDER_FILES  # torch: only when import runs

    folder = params.get("folder")
    return [("FOLDER", Path(folder) / name) for name in FOLDER_FILES] if folder else []


@dataclass(frozen=True)
class CommandPaths:
    """A command's outputs (parameter -> Writes), the files its string options name (`named`), and
    whether it reads stdin and prints results on stdout, for given parameter values."""

    outputs: Mapping[str, Writes] = field(default_factory=dict)
    named: Callable[[Mapping[str, Any]], list[tuple[str, Path]]] = lambda params: []
    reads_stdin: Callable[[Mapping[str, Any]], bool] = lambda params: False
    prints: Callable[[Mapping[str, Any]], bool] = lambda params: False


COMMAND_PATHS: dict[str, CommandPaths] = {
    "bpe": CommandPaths({"out": FILE}),
    "prepare": CommandPaths({"out": Writes(True, data_folder_owns)}, named=prefixed_files, prints=lambda p: True),
    "train": CommandPaths({"out": Writes(True, run_folder_owns)},
                          named=lambda p: [("--init-from", Path(p["init_from"]))] if p.get("init_from") else [],
                          prints=lambda p: bool(p.get("print_config"))),
    "average": CommandPaths({"out": FILE}, named=run_checkpoints),
    "translate": CommandPaths({"output": FILE, "attention": Writes(True, heatmaps_own)},
                              reads_stdin=lambda p: p.get("input") is None, prints=lambda p: p.get("output") is None),
    "eval": CommandPaths({"save_hyp": FILE},
                         named=lambda p: [("--hyp", Path(h)) for h in p.get("hyp") or [] if h != "-"],
                         reads_stdin=eval_reads_stdin, prints=lambda p: True),
    "distill": CommandPaths({"out": Writes(True)}, named=prefixed_files, prints=lambda p: True),
    "demo": CommandPaths({"out": Writes(True)}, prints=lambda p: True),
    "download": CommandPaths({"out": Writes(True)}, prints=lambda p: bool(p.get("list_") or p.get("verify"))),
    # appended to: never an input (a checkpoint, --api-keys, a --glossary)
    "serve": CommandPaths({"access_log": APPENDED}, named=glossary_files),
    "export": CommandPaths({"out_dir": Writes(True)}),
    "shortlist": CommandPaths({"out": FILE}),
    "import marian": CommandPaths({"out": FILE}, named=marian_files),
}
