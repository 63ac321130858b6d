"""The `nmt` command: thin typer shells over the library. Results on stdout, progress and logs on stderr.

Heavy modules (torch) are imported inside the commands, so `nmt --help` starts fast.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sys
import traceback
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, List, Mapping, Optional

import typer
from typer.core import TyperCommand, TyperGroup
from typing_extensions import Annotated

from nmt import __version__
from nmt.config import FilterConfig, InferenceConfig, ModelConfig, Overrides, SearchConfig, ServeConfig, TrainConfig
from nmt.errors import NmtError, os_error_message
from nmt.options import with_config_options

if TYPE_CHECKING:  # the commands import the library where they run (a fast --help)
    from nmt.evaluate import PairedScore, Score


def is_torch_io_error(e: BaseException) -> bool:
    """torch's (de)serialiser reports failed reads and writes (a full disk, a truncated file) as
    RuntimeErrors; they are the user's to fix, not bugs."""
    if not isinstance(e, RuntimeError):
        return False
    text = str(e)
    return isinstance(e.__context__, OSError) or any(
        marker in text for marker in ("PytorchStreamWriter", "PytorchStreamReader", "file write failed",
                                      "unexpected pos", "failed finding central directory"))


def is_out_of_memory(e: BaseException) -> bool:
    """Python's MemoryError, or torch's (CPU allocator failures and CUDA's OutOfMemoryError)."""
    text = str(e)
    return isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text or type(e).__name__ == "OutOfMemoryError"))


def error_line(e: BaseException) -> tuple[str, int]:
    """The one line and exit code of an expected failure."""
    if isinstance(e, NmtError):
        return str(e), e.exit_code
    if is_out_of_memory(e):
        return ("out of memory; lower --max-tokens (or --batch-size, --beam), or use a machine with more "
                f"memory ({str(e).splitlines()[0][:120] if str(e) else 'MemoryError'})"), 1
    if isinstance(e, OSError):
        return os_error_message(e), 1
    cause = e.__context__ if isinstance(e.__context__, OSError) else None
    if cause is not None:
        return os_error_message(cause), 1
    return f"{str(e).splitlines()[0] if str(e) else type(e).__name__}; check the disk and the files named above", 1


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
    with contextlib.suppress(OSError):  # stderr itself may be gone
        from rich.text import Text

        from nmt.console import err

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
DEBUG = {"on": bool(os.environ.get("NMT_DEBUG"))}


def print_version(value: bool) -> None:
    if value:
        write_stdout(f"nmt {__version__}\n")
        raise typer.Exit()


@app.callback()
def main_options(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")] = False,
    version: Annotated[bool, typer.Option("--version", "-V", help="Print the version and exit.", is_eager=True,
                                          callback=print_version)] = False,
) -> None:
    if debug:
        DEBUG["on"] = True


# -- what each command reads and writes --------------------------------------------------------------
# The one place where outputs are marked. Every other path a command takes (each Path option or
# argument, and the files that its string options name) is an input; PathGuard checks them against
# each other (nmt.files.check_outputs) before the command does any work.


@dataclass(frozen=True)
class Writes:
    """An output parameter: a file, or a folder of which `owns(relative path, input option)` tells the
    paths the command writes over or deletes (None: the whole folder)."""

    folder: bool = False
    owns: Optional[Callable[[str, str], bool]] = None


FILE = Writes()


def run_folder_owns(relative: str, option: str) -> bool:
    """What `nmt train` writes or deletes in its run folder; its own config.toml may be the --config
    (a resume rewrites it with the settings read from it)."""
    from nmt.checkpoint import BEST_NAME, DAMAGED_SUFFIX, STEP_PATTERN
    from nmt.files import LOCK_NAME
    from nmt.trainer import CONFIG_NAME, LOG_NAME, TENSORBOARD_DIR

    if relative == CONFIG_NAME:
        return option != "--config"
    name = relative.removesuffix(DAMAGED_SUFFIX)
    return bool(STEP_PATTERN.match(name) or name == BEST_NAME or relative in (LOG_NAME, LOCK_NAME)
                or relative.startswith(TENSORBOARD_DIR + "/") or re.fullmatch(r"\.[^/]*\.tmp", relative))


def data_folder_owns(relative: str, option: str) -> bool:
    """A data folder is nmt prepare's own: it holds no inputs but the store's own bpe.model given as --bpe
    (written back, byte for byte)."""
    return not (relative == "bpe.model" and option == "--bpe")


def heatmaps_own(relative: str, option: str) -> bool:
    return re.fullmatch(r"line\d{5}\.layer\d+\.png", relative) is not None


def prefixed_files(params: Mapping[str, Any]) -> list[tuple[str, Path]]:
    """prepare's --train/--valid/--test PREFIX: the files PREFIX.SRC and PREFIX.TGT (or .gz) it reads."""
    from nmt.files import resolve_prefixed

    found = []
    for key in ("train", "valid", "test"):
        prefix = params.get(key)
        for lang in (params.get("src"), params.get("tgt")):
            if prefix and lang:
                with contextlib.suppress(NmtError):  # a missing file: the command itself says so
                    found.append((f"--{key}", resolve_prefixed(f"{prefix}.{lang}")))
    return found


def run_checkpoints(params: Mapping[str, Any]) -> list[tuple[str, Path]]:
    """average's run folder: the checkpoints in it that --last may read."""
    inputs = params.get("inputs") or []
    if len(inputs) != 1 or not Path(inputs[0]).is_dir():
        return []
    from nmt.checkpoint import BEST_NAME, step_checkpoints

    best = Path(inputs[0]) / BEST_NAME
    return [("INPUTS", p) for p in step_checkpoints(Path(inputs[0])) + ([best] if best.is_file() else [])]


def eval_reads_stdin(params: Mapping[str, Any]) -> bool:
    hyp = params.get("hyp") or []
    return "-" in hyp or (not hyp and not params.get("model"))


def marian_files(params: Mapping[str, Any]) -> list[tuple[str, Path]]:
    """The files of a Marian folder that `import marian` reads."""
    from nmt.importers.marian import FOLDER_FILES

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
    "demo": CommandPaths({"out": Writes(True)}, prints=lambda p: True),
    "download": CommandPaths({"out": Writes(True)}, prints=lambda p: bool(p.get("list_") or p.get("verify"))),
    "serve": CommandPaths({"access_log": FILE}),  # appended to: never an input (a checkpoint, --api-keys)
    "export": CommandPaths({"out_dir": Writes(True)}),
    "import marian": CommandPaths({"out": FILE}, named=marian_files),
}


def parameter_label(param: Any) -> str:
    """How the user names a parameter: an option's long name (--output), an argument's name (OUT_DIR)."""
    if param.param_type_name == "option":
        return next((o for o in param.opts if o.startswith("--")), param.opts[0])
    return param.metavar or param.name.upper()


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


def command_paths(name: str, command: Any, params: Mapping[str, Any]) -> tuple[list, list[tuple[str, Path]]]:
    """The outputs (nmt.files.Output) and inputs ((label, path)) of `command` (named `name`, as in
    COMMAND_PATHS) called with `params`."""
    from nmt.files import Output

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
                outputs.append(Output(parameter_label(param), path, role.folder, role.owns))
    return outputs, inputs + roles.named(params)


class PathGuard(TyperCommand):
    """Every nmt command: before it runs, a closed stdout where it prints results, and outputs that are
    inputs (files, folders holding them, redirections) are one-line errors."""

    def invoke(self, ctx: Any) -> Any:
        from nmt.files import check_outputs

        name = command_name(ctx)
        roles = COMMAND_PATHS[name]
        if roles.prints(ctx.params):
            require_stdout()
        outputs, inputs = command_paths(name, self, ctx.params)
        check_outputs(outputs, inputs, reads_stdin=roles.reads_stdin(ctx.params))
        return super().invoke(ctx)


def command_name(ctx: Any) -> str:
    """A command's name below the program's: "translate", "import marian" (whatever the program is called)."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(reversed(names))


def command(name: str, **kwargs: Any) -> Callable:
    """`app.command`, guarded: every nmt command is a PathGuard."""
    return app.command(name, cls=PathGuard, **kwargs)


# -- shared options ------------------------------------------------------------------------------
# The options of the config classes (nmt.config) are generated from their declarations by
# nmt.options; these are the few that set no config field.

EncodeThreads = Annotated[int, typer.Option("--threads", help="Tokenizer threads (0: all cores).")]
ModelPaths = Annotated[List[Path], typer.Option("--model", "-m", help="Checkpoint (.pt) from train or average; "
                                                "repeat for an ensemble (models of one BPE vocabulary).")]


def set_threads(threads: int) -> None:
    import torch

    from nmt.config import MAX_THREADS, check_range

    check_range("--threads", threads, 0, MAX_THREADS)
    if threads > 0:
        torch.set_num_threads(threads)


def check_encode_threads(threads: int) -> None:
    from nmt.config import MAX_THREADS, check_range

    check_range("--threads", threads, 0, MAX_THREADS)


def check_distinct(option: str, paths: List[Path]) -> None:
    """ConfigError when a file is given twice (an ensemble of a model with itself, an average of a
    checkpoint with itself: the same result as once, at twice the cost, and most likely a slip)."""
    from nmt.errors import ConfigError
    from nmt.files import same_file

    for i, path in enumerate(paths):
        for earlier in paths[:i]:
            if same_file(path, earlier):
                raise ConfigError(f"{option} {path} is given twice (also as {earlier}); give each file once")


def stdin_bytes() -> IO[bytes]:
    """stdin as a byte stream; InputError when the shell closed it (`<&-`)."""
    from nmt.errors import InputError

    if sys.stdin is None:
        raise InputError("stdin is closed; pipe text in (... | nmt COMMAND) or name a file")
    return sys.stdin.buffer


def require_stdout() -> None:
    """OutputError when the shell closed stdout (`>&-`): the results would vanish."""
    from nmt.errors import OutputError

    if sys.stdout is None:
        raise OutputError("stdout is closed; the results have nowhere to go: send them to a file (> FILE) or a pipe")


def write_stdout(text: str) -> None:
    """Write results to stdout now (a pipeline reads them as they come); a failed write (a full disk
    under `> FILE`) names stdout. A closed pipe stays a BrokenPipeError: ErrorBoundary exits 141."""
    from nmt.errors import OutputError

    require_stdout()
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OutputError(os_error_message(e, "stdout", "cannot write the results")) from None


# -- commands ------------------------------------------------------------------------------------


@command("bpe", epilog="Example: nmt bpe --train data/train.en data/train.de --vocab-size 37000 --out run/bpe.model")
def bpe_command(
    train: Annotated[List[Path], typer.Option("--train", help="Text files (plain, gzip, bzip2 or xz); list several "
                                              "after one --train.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the BPE model.")],
    more: Annotated[Optional[List[Path]], typer.Argument(help="More training files.", show_default=False,
                                                         metavar="FILES")] = None,
    vocab_size: Annotated[int, typer.Option("--vocab-size", help="Joint vocabulary size.")] = 37000,
    sample: Annotated[Optional[int], typer.Option("--sample", help="Train on a seeded random sample of N "
                                                  "lines.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Seed of --sample (default 1).",
                                                show_default=False)] = None,
    threads: EncodeThreads = 0,
    kind: Annotated[str, typer.Option("--kind", help="youtokentome (BPE) or sentencepiece.")] = "youtokentome",
    model_type: Annotated[Optional[str], typer.Option("--model-type", help="sentencepiece only: unigram (default) "
                                                      "or bpe.")] = None,
) -> None:
    """Learn a joint (source + target) subword vocabulary: BPE with youtokentome, or SentencePiece."""
    from nmt.console import err, progress_display
    from nmt.errors import ConfigError
    from nmt.files import check_input_file
    from nmt.tokenizer import describe_kind, train_tokenizer

    if seed is not None and sample is None:
        raise ConfigError("--seed only applies with --sample; add --sample N or drop --seed")
    check_encode_threads(threads)
    files = [check_input_file(f, "--train") for f in list(train) + list(more or [])]  # x never means x.gz
    with progress_display() as report:
        tok = train_tokenizer(kind, files, out, vocab_size=vocab_size, model_type=model_type, sample=sample,
                              seed=1 if seed is None else seed, threads=threads or -1, progress=report)
    err.print(f"{describe_kind(tok)} model with {tok.vocab_size:,} tokens written to {out}")


@command("prepare", epilog="Example: nmt prepare --bpe run/bpe.model --train data/train --valid data/valid "
                                "--src en --tgt de --out run/data")
@with_config_options({"filters": FilterConfig})
def prepare_command(
    bpe_model: Annotated[Path, typer.Option("--bpe", help="Model from `nmt bpe` (youtokentome or SentencePiece), or a "
                         "checkpoint (.pt) whose tokenizer to use (to fine-tune it on this data).")],
    train: Annotated[str, typer.Option("--train", help="Path prefix: PREFIX.SRC and PREFIX.TGT (or .gz, .bz2, .xz).")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the binarized data.")],
    src: Annotated[str, typer.Option("--src", help="Source language suffix.")],
    tgt: Annotated[str, typer.Option("--tgt", help="Target language suffix.")],
    filters: Overrides[FilterConfig],
    valid: Annotated[Optional[str], typer.Option("--valid", help="Validation path prefix.")] = None,
    test: Annotated[Optional[str], typer.Option("--test", help="Test path prefix.")] = None,
    chunk_size: Annotated[int, typer.Option("--chunk-size", help="Pairs encoded per chunk.")] = 100_000,
    threads: EncodeThreads = 0,
) -> None:
    """Encode parallel text into subwords, filter it, and write the binary training data; prints the filter
    report (JSON)."""
    from nmt.console import progress_display
    from nmt.dataset import prepare
    from nmt.files import is_checkpoint_file
    from nmt.tokenizer import Tokenizer, load_tokenizer

    check_encode_threads(threads)
    bpe: Path | Tokenizer = bpe_model
    if is_checkpoint_file(bpe_model):
        from nmt.checkpoint import tokenizer_data  # imports torch: only for a checkpoint

        bpe = load_tokenizer(tokenizer_data(bpe_model), str(bpe_model))
    with progress_display() as report:
        reports = prepare(bpe, out, src, tgt, train, valid, test, filters=filters.apply(),
                          threads=threads or -1, chunk_size=chunk_size, progress=report)
    write_stdout(json.dumps({split: asdict(r) for split, r in reports.items()}, indent=2) + "\n")  # the result


@command("train", epilog="Example: nmt train --data run/data --out run --preset base --gpus 8   "
                              "(multi-node: torchrun ... -m nmt train ..., see docs/training.md)")
@with_config_options({"model": ModelConfig, "train": TrainConfig})
def train_command(
    data: Annotated[Path, typer.Option("--data", help="Folder from `nmt prepare`.")],
    out: Annotated[Path, typer.Option("--out", help="Run folder: checkpoints and log; rerun to resume.")],
    model: Overrides[ModelConfig],
    train: Overrides[TrainConfig],
    preset: Annotated[Optional[str], typer.Option("--preset", help="tiny, small, multi30k, base or big (default base; "
                                                  "on resume: the run's).")] = None,
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs of this machine, one worker process each (0: CPU). "
                                      "Under torchrun: >0 puts each process on GPU LOCAL_RANK.")] = 0,
    nproc: Annotated[int, typer.Option("--nproc", help="CPU worker processes (gloo), for CPU training and tests.")] = 1,
    threads: Annotated[int, typer.Option("--threads", help="CPU threads per process (0: torch's default; "
                                         "with --nproc N: cores / N).")] = 0,
    layers: Annotated[Optional[int], typer.Option("--layers", help="Encoder and decoder layers (--encoder-layers "
                                                  "and --decoder-layers win over it).",
                                                  rich_help_panel="Model")] = None,
    config: Annotated[Optional[Path], typer.Option("--config", help="TOML file of [model] and [train] fields (and "
                      "preset); the options given here override it. RUN/config.toml of a run is one.")] = None,
    print_config: Annotated[bool, typer.Option("--print-config", help="Print the resolved configuration (TOML) "
                            "and exit without training.")] = False,
) -> None:
    """Train a Transformer (or resume the run in --out), on the CPU, GPUs or several machines."""
    from nmt.config import ConfigFile, flag_of, read_config_file, to_toml
    from nmt.console import err, progress_display
    from nmt.errors import ConfigError
    from nmt.train import plan
    from nmt.train import train as run

    if layers is not None and "encoder_layers" in model and "decoder_layers" in model:
        raise ConfigError("--layers does nothing next to --encoder-layers and --decoder-layers; drop one of them")
    # What only a validation split gives meaning to (--valid-interval and --valid-bleu-sentences also turn
    # validation down, so they pass)
    validating = [f"{flag_of(TrainConfig, k)} {train.get(k)}" for k in ("valid_beam", "patience")
                  if train.get(k, 0) > TrainConfig.__dataclass_fields__[k].default]
    if validating and not print_config and not has_split(data, "valid"):
        raise ConfigError(f"{', '.join(validating)}: {data} has no validation split, so nothing is validated; "
                          "prepare the data with --valid PREFIX, or drop it")
    set_threads(threads)
    file = read_config_file(config) if config else ConfigFile.EMPTY
    chosen = preset or file.preset
    stacks = Overrides(ModelConfig, {"encoder_layers": layers, "decoder_layers": layers})
    model = file.model | stacks | model  # the command line over the file; --encoder-layers over --layers
    train = file.train | train
    if print_config:
        model_cfg, train_cfg, _ = plan(data, out, chosen, model, train)
        write_stdout(to_toml(model_cfg, train_cfg))
        return
    with progress_display() as report:
        result = run(data, out, chosen, model, train, gpus=gpus, progress=report, nproc=nproc, threads=threads)
    if result.rank != 0:  # under torchrun every process returns here; rank 0 speaks for the run
        return
    if result.new_updates == 0 and result.stopped:  # a stop reason is named after its option
        err.print(f"nothing to train: {out} had already ended at update {result.updates} (stopped by "
                  f"{result.stopped}); raise --{result.stopped} to train on; last checkpoint {result.checkpoint}")
        return
    valid = f", valid loss {result.valid_loss:.3f}" if result.valid_loss is not None else ""
    valid += f", BLEU {result.valid_bleu:.2f} (best: {result.best_checkpoint})" if result.valid_bleu is not None else ""
    err.print(f"trained to update {result.updates} in {result.seconds:.0f}s "
              f"({result.tokens_per_second:,.0f} target tokens/s)"
              f"{valid}; stopped by {result.stopped or 'request'}; last checkpoint {result.checkpoint}")


def has_split(data: Path, split: str) -> bool:
    """Whether the data folder holds `split` (True when it cannot be read: training will say why)."""
    from nmt.dataset import load_meta

    try:
        return split in load_meta(data)["splits"]
    except NmtError:
        return True


@command("average", epilog="Example: nmt average run --last 5 --out run/averaged.pt")
def average_command(
    inputs: Annotated[List[Path], typer.Argument(help="A run folder (with --last N) or checkpoint files.")],
    out: Annotated[Path, typer.Option("--out", help="Averaged checkpoint to write.")],
    last: Annotated[Optional[int], typer.Option("--last", help="Average the newest N step checkpoints of the run "
                                                "folder.")] = None,
) -> None:
    """Average the parameters of several checkpoints into one."""
    from nmt import checkpoint
    from nmt.console import err
    from nmt.errors import OutputError
    from nmt.files import check_output_file

    check_output_file(out, "--out")
    check_distinct("INPUTS", inputs)
    if checkpoint.STEP_PATTERN.match(out.name) or out.name == checkpoint.BEST_NAME:
        raise OutputError(f"--out {out}: {out.name} is a name of training's own checkpoints (resuming and --last "
                          "would take the average for one); name it e.g. averaged.pt")
    paths = checkpoint.resolve_average_inputs(inputs, last)
    checkpoint.save(out, checkpoint.average(paths))
    err.print(f"averaged {len(paths)} checkpoints ({paths[0].name} .. {paths[-1].name}) into {out}")


@command("translate", epilog="Example: cat news.en | nmt translate --model run/averaged.pt --beam 4 > news.de")
@with_config_options({"search": SearchConfig, "inference": InferenceConfig})
def translate_command(
    model: ModelPaths,
    search: Overrides[SearchConfig],
    inference: Overrides[InferenceConfig],
    input: Annotated[Optional[Path], typer.Option("--input", "-i", help="Read this file instead of stdin.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write this file instead of stdout; it "
                                                   "appears, whole, when the last line is translated.")] = None,
    attention: Annotated[Optional[Path], typer.Option("--attention", help="Also write cross-attention heatmaps "
                         "(PNG, one per line and layer, a panel per head) to this folder; needs matplotlib.")] = None,
    alignments: Annotated[bool, typer.Option("--alignments", help="Also print word alignments from the last layer's "
                          "cross-attention, Pharaoh format: TEXT ||| 0-0 1-2 ... (n-best: an extra column).")] = False,
) -> None:
    """Translate stdin to stdout, one output line per input line, streaming (plain or compressed text:
    gzip, bzip2, xz; -o NAME.gz writes gzip)."""
    from nmt.attention import pharaoh
    from nmt.console import message_logger, progress_wanted, translation_progress
    from nmt.engine import Needs, open_engine
    from nmt.errors import ConfigError
    from nmt.files import atomic_write, check_input_file, check_output_file, count_lines, open_input
    from nmt.translate import format_nbest, read_chunks

    check_distinct("--model", model)
    if output:
        check_output_file(output, "--output", text=True)
    if input:
        check_input_file(input, "--input")
    options = inference.apply()
    set_threads(options.threads)
    log = message_logger()
    if attention:
        from nmt.attention import require_matplotlib, write_heatmaps
        from nmt.progress import Progress
        require_matplotlib()  # fail before translating anything
    if (attention or alignments) and len(model) > 1:
        raise ConfigError("--attention and --alignments read one model's attention; give one --model, not an ensemble")
    # A bar (sentences/s, time left) for a file on a terminal; a pipe or a log gets only warnings.
    total = count_lines(input) if input and input.is_file() and progress_wanted() else None
    stream = open_input(input) if input else stdin_bytes()  # a missing input fails before the model loads
    try:
        translator = open_engine(model, search, options, progress=log, needs=Needs(alignments, attention is not None))
        nbest = translator.search_cfg.nbest
        with atomic_write(output, "w") if output else contextlib.nullcontext() as out_file, \
                translation_progress(total) as report:
            write = out_file.write if out_file is not None else write_stdout
            translator.progress = log = report
            for i, t in enumerate(translator.translate(read_chunks(stream, progress=log))):
                lines = format_nbest(i, t) if nbest > 1 else [t.text]
                if alignments:
                    aligned = [pharaoh(translator.alignment(t.source, h, i)) for _, h in t.hypotheses[: len(lines)]]
                    lines = [f"{line}\t{a}" if nbest > 1 else f"{line} ||| {a}" for line, a in zip(lines, aligned)]
                write("\n".join(lines) + "\n")
                if attention and t.hypotheses and t.source:
                    paths = write_heatmaps(translator.attention(t.source, t.hypotheses[0][1], i), attention, i)
                    log(Progress("translate", message=f"wrote {len(paths)} attention heatmap(s) of line {i + 1} "
                                                      f"to {attention}"))
    finally:
        if input:
            stream.close()


@command("eval", epilog="Example: nmt eval --model run/averaged.pt --src test.en --ref test.de --json   "
                            "|   nmt eval --ref test.de --hyp base.de --hyp new.de --paired-bs")
@with_config_options({"search": SearchConfig, "inference": InferenceConfig})
def eval_command(
    ref: Annotated[List[Path], typer.Option("--ref", help="Reference translations, one per line; repeat for "
                                            "several references per line.")],
    search: Overrides[SearchConfig],
    inference: Overrides[InferenceConfig],
    model: Annotated[Optional[List[Path]], typer.Option("--model", "-m", help="Checkpoint to translate --src with; "
                                                        "repeat for an ensemble.")] = None,
    src: Annotated[Optional[Path], typer.Option("--src", help="Source file to translate.")] = None,
    hyp: Annotated[Optional[List[str]], typer.Option("--hyp", help="Translations to score ('-': stdin, the default "
                                                     "without --model); repeat to score several systems.")] = None,
    save_hyp: Annotated[Optional[Path], typer.Option("--save-hyp", help="Also write the translations here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON.")] = False,
    paired_bs: Annotated[bool, typer.Option("--paired-bs", help="Paired bootstrap resampling (sacreBLEU's) of every "
                         "system against the first --hyp, the baseline: BLEU, chrF, TER with p-values.")] = False,
    paired_bs_n: Annotated[Optional[int], typer.Option("--paired-bs-n", help="Bootstrap resamples (default 1000).",
                                                       show_default=False)] = None,
) -> None:
    """Score translations with sacreBLEU (BLEU 13a/intl, cased/uncased, chrF, TER), against one or more references;
    compare systems with paired bootstrap resampling. Text may be gzip, bzip2 or xz; --save-hyp NAME.gz writes gzip."""
    from nmt.config import INT_MAX, check_range, flag_of
    from nmt.console import message_logger, translation_progress
    from nmt.engine import open_engine
    from nmt.errors import ConfigError, InputError
    from nmt.evaluate import check_parallel, paired_bootstrap, reference_sets, score, ter_left_out, to_json
    from nmt.files import atomic_write, check_output_file, read_lines
    from nmt.progress import Progress
    from nmt.translate import translate_file

    if paired_bs_n is not None and not paired_bs:
        raise ConfigError("--paired-bs-n only applies with --paired-bs; add --paired-bs or drop --paired-bs-n")
    paired_bs_n = 1000 if paired_bs_n is None else paired_bs_n
    check_range("--paired-bs-n", paired_bs_n, 1, INT_MAX)
    if not model:  # what only translating uses would do nothing
        unused = [f"--src {src}"] if src else []
        unused += [f"--save-hyp {save_hyp}"] if save_hyp else []
        unused += [flag_of(cls, name) for cls, given in ((SearchConfig, search), (InferenceConfig, inference))
                   for name in given.values]
        if unused:
            raise ConfigError(f"{', '.join(unused)}: only {'applies' if len(unused) == 1 else 'apply'} with --model "
                              f"(translating --src); add --model CHECKPOINT or drop "
                              f"{'it' if len(unused) == 1 else 'them'}")
    elif src is None:
        raise InputError("--model needs --src: the source file to translate")
    else:
        check_distinct("--model", model)
        search_cfg, options = search.apply(), inference.apply()  # contradictions now, before reading anything
        if search_cfg.nbest > 1 and not search_cfg.sampling:  # eval scores each line's best hypothesis
            raise ConfigError(f"--nbest {search_cfg.nbest} does nothing here: eval scores the best translation of "
                              "each line, which the n-best list does not change (with --sampling it scores the best "
                              "of N draws); drop --nbest")
    if save_hyp:
        check_output_file(save_hyp, "--save-hyp", text=True)  # now, not after translating everything
    refs = [list(read_lines(r)) for r in ref]
    ref_names = [str(r) for r in ref]
    systems = [read_system(h) for h in (hyp or ([] if model else ["-"]))]
    if model:
        assert src is not None  # refused above without it
        sources = list(read_lines(src))
        check_parallel(sources, refs[0], str(src), ref_names[0])
        set_threads(options.threads)
        translator = open_engine(model, search, options, progress=message_logger())
        with translation_progress(len(sources)) as report:
            translator.progress = report
            translations = translate_file(translator, None, sources)
        systems.append((f"translations of {src}", translations))
        if save_hyp:
            with atomic_write(save_hyp, "w") as f:
                f.write("".join(h + "\n" for h in translations))
    left_out = ter_left_out(systems, reference_sets(refs), ref_names)
    if left_out:
        message_logger()(Progress("eval", message=f"warning: {left_out}"))
    if paired_bs:
        results, signatures = paired_bootstrap(systems, refs, paired_bs_n)
        if as_json:
            write_stdout(json.dumps({"refs": ref_names, "lines": len(refs[0]), "signatures": signatures,
                                     "paired_bs": [asdict(r) for r in results]}, indent=2) + "\n")
        else:
            write_stdout(paired_table(results, signatures))
        return
    scored = [(name, score(hyps, refs, name, ref_names)) for name, hyps in systems]
    if as_json:
        found = [to_json(scores, hyp=name, ref=ref_names[0] if len(ref_names) == 1 else ref_names, lines=len(refs[0]))
                 for name, scores in scored]
        write_stdout(json.dumps(found[0] if len(found) == 1 else found, indent=2) + "\n")
        return
    write_stdout("".join((f"{name}\n" if len(scored) > 1 else "") + scores_table(scores) for name, scores in scored))


def read_system(name: str) -> tuple[str, list[str]]:
    """A system's translations: a file, or stdin for '-' (plain or compressed text, either)."""
    from nmt.errors import InputError
    from nmt.files import decompressed, read_lines, stream_lines

    if name != "-":
        return name, list(read_lines(Path(name)))
    stream = stdin_bytes()
    if stream.isatty():
        raise InputError("no translations to score: pipe them in (... | nmt eval --ref REF), or give --hyp FILE "
                         "or --model and --src")
    return "stdin", list(stream_lines(decompressed(stream, "stdin"), "stdin"))


def rendered(*items: Any) -> str:
    """Rich renderables (tables, text) as the plain text of a 200-column console, for stdout."""
    import io

    from rich.console import Console

    console = Console(highlight=False, width=200, color_system=None, file=io.StringIO())
    with console.capture() as captured:
        for item in items:
            console.print(item)
    return captured.get()


def paired_table(results: list[PairedScore], signatures: dict[str, str]) -> str:
    from rich.table import Table

    table = Table("system", "metric", "score", "mean ± 95% CI", "p-value", box=None)
    for r in results:
        p_value = "(baseline)" if r.p_value is None else f"{r.p_value:.4f}"
        table.add_row(r.system, r.metric, f"{r.score:.2f}", f"{r.mean:.2f} ± {r.ci:.2f}", p_value)
    return rendered(table, *(f"{metric}: {signature}" for metric, signature in signatures.items()))


def scores_table(scores: list[Score]) -> str:
    from rich.table import Table

    table = Table("metric", "score", "signature", box=None)
    for s in scores:
        table.add_row(s.metric, f"{s.score:.2f}", s.signature)
    return rendered(table)


@command("demo", epilog="Example: nmt demo --out nmt-demo")
def demo_command(
    out: Annotated[Path, typer.Option("--out", help="Folder for the whole run (data, checkpoints, averaged model).")],
    max_updates: Annotated[Optional[int], typer.Option("--max-updates", help="Training updates (default: the "
                                                       "demo's).")] = None,
    threads: Annotated[int, typer.Option("--threads", help="CPU threads for torch; the tiny model is fastest on "
                                         "one.")] = 1,
) -> None:
    """Run the whole pipeline on the bundled sample corpus: bpe, prepare, train, average, translate, eval."""
    from nmt.config import INT_MAX, check_range
    from nmt.console import err, progress_display
    from nmt.demo import run_demo

    if max_updates is not None:
        check_range("--max-updates", max_updates, 1, INT_MAX)
    set_threads(threads)
    with progress_display() as report:
        result = run_demo(out, max_updates=max_updates, progress=report)
    err.print("\nSample translations (test set):")
    write_stdout("".join(f"SRC  {src}\nHYP  {hyp}\nREF  {ref}\n\n" for src, hyp, ref in result.samples)
                 + scores_table(result.scores))
    err.print(f"demo finished in {result.seconds:.0f}s; everything is in {out}")


@command("download", epilog="Example: nmt download multi30k --out data/multi30k   or   "
                     "nmt download wmt14 --pair en-fr --out data/wmt14-en-fr")
def download_command(
    name: Annotated[Optional[str], typer.Argument(help="Dataset name (see --list): a family such as wmt14, "
                                                  "or a full name such as wmt14-en-fr.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Output folder.")] = None,
    pair: Annotated[Optional[str], typer.Option("--pair", help="Language pair, source first (en-de, de-en, en-fr, "
                                                "fr-en; see --list); default: the family's first.")] = None,
    mirror: Annotated[Optional[str], typer.Option("--mirror", help="Base URL or local folder that replaces the "
                                                  "dataset's source.")] = None,
    extra_tests: Annotated[bool, typer.Option("--extra-tests", help="Also fetch the dataset's extra test "
                                              "sets.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the known datasets.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the server's next bytes (connect: "
                       "10 at most); a transfer that brings under 1 KiB in this time has stalled and is "
                       "resumed.")] = 30.0,
    verify: Annotated[bool, typer.Option("--verify", help="Check the files in --out against MANIFEST.json's sizes "
                      "and sha256, download nothing; exit 1 if any differs.")] = False,
) -> None:
    """Download a parallel dataset into OUT/{train,valid,test}.{src,tgt} with a MANIFEST.json."""
    from nmt import download as dl
    from nmt.console import err, progress_display
    from nmt.errors import InputError

    if list_:
        from rich.console import Console
        from rich.table import Table

        table = Table("name", "languages", "size", "licence", "description", box=None)
        for info in dl.list_datasets():
            table.add_row(*dl.describe(info))
        console = Console(highlight=False, width=200)
        with console.capture() as listing:  # through write_stdout, which refuses a closed stdout
            console.print(table)
        write_stdout(listing.get())
        groups = ", ".join(f"{family} ({', '.join(pairs)})" for family, pairs in dl.families().items())
        err.print(f"A family takes --pair (its first pair is the default): {groups}; "
                  "e.g. `nmt download wmt14 --pair en-fr` is wmt14-en-fr.")
        return
    if name is None or out is None:
        raise InputError("name a dataset and --out FOLDER (e.g. nmt download multi30k --out data/multi30k), "
                         "or use --list")
    spec = dl.resolve(name, pair)  # an unknown name or pair is an error before anything is read or written
    if verify:
        good, problems = dl.verify_outputs(out)
        for problem in problems:
            write_stdout(problem + "\n")
        if problems:
            raise InputError(f"{out}: {len(problems)} of {len(good) + len(problems)} files differ from {dl.MANIFEST}; "
                             f"run `nmt download {spec.name} --out {out}` again to rewrite them")
        err.print(f"{out}: all {len(good)} files match {dl.MANIFEST}")
        return
    with progress_display(bytes_unit=True) as report:
        result = dl.download(spec, out, mirror=mirror, extra_tests=extra_tests, progress=report, timeout=timeout)
    err.print(dl.summary(result))


@command("serve", epilog="Example: nmt serve -m run/averaged.pt --port 8080   then   curl -s "
                              "localhost:8080/v1/translate -H 'Content-Type: application/json' "
                              "-d '{\"text\": \"A man is walking.\"}'")
@with_config_options({"search": SearchConfig, "inference": InferenceConfig, "server": ServeConfig})
def serve_command(
    model: ModelPaths,
    search: Overrides[SearchConfig],
    inference: Overrides[InferenceConfig],
    server: Overrides[ServeConfig],
    host: Annotated[str, typer.Option("--host", help="Address to listen on (127.0.0.1: this machine only; "
                                      "0.0.0.0: every interface, e.g. behind a reverse proxy).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8080,
) -> None:
    """Serve a checkpoint over HTTP: POST /v1/translate, LibreTranslate's API (POST /translate, /detect,
    /languages, /frontend/settings), /health, /metrics, /docs; concurrent requests are batched together.
    Needs the web stack: pip install "nmt-toolkit[serve]"."""
    from nmt.config import check_range
    from nmt.console import message_logger
    from nmt.engine import open_engine
    from nmt.progress import Progress
    from nmt.serve import check_files, listen, model_info, require_web_stack, serve

    require_web_stack()
    check_distinct("--model", model)
    check_range("--port", port, 0, 65535)
    options = inference.apply()
    cfg = (server | Overrides(ServeConfig, {"max_batch_sentences": options.batch_size})).apply()
    check_files(cfg)  # now, not once the model is loaded
    set_threads(options.threads)
    sock = listen(host, port)
    log = message_logger()  # the server's log: messages, not each batch's progress
    engine = open_engine(model, search, options, progress=log)
    serve(engine, model_info(model, engine), cfg, sock, log=lambda message: log(Progress("serve", message=message)))


@command("export", epilog="Example: nmt export --format ctranslate2 run/averaged.pt run/ct2-model")
def export_command(
    model: Annotated[Path, typer.Argument(help="Checkpoint (.pt) from train or average.", show_default=False)],
    out_dir: Annotated[Path, typer.Argument(help="Folder to write the exported model to.", show_default=False)],
    format: Annotated[str, typer.Option("--format", help="Target engine: ctranslate2.")] = "ctranslate2",
    quantization: Annotated[Optional[str], typer.Option(
        "--quantization", help="Store weights as int8, int8_float16, int16, float16, bfloat16 (default: float32; "
                               "CTranslate2 can also quantise at load time).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace OUT_DIR if it exists.")] = False,
) -> None:
    """Export a checkpoint for another inference engine: a CTranslate2 model folder (needs
    `pip install ctranslate2`)."""
    from nmt.console import err
    from nmt.export import describe, export

    result = export(format, model, out_dir, quantization=quantization, force=force)
    err.print(describe(result))


import_app = typer.Typer(name="import", help="Import a model trained elsewhere as an nmt checkpoint: translate, "
                         "score, serve, export and fine-tune it like one of nmt's own.", no_args_is_help=True,
                         rich_markup_mode=None,
                         epilog="Example: nmt import marian opus-mt-en-de --out opus-mt-en-de.pt")
app.add_typer(import_app)


@import_app.command("marian", cls=PathGuard,
                    epilog="Example: huggingface-cli download Helsinki-NLP/opus-mt-en-de --local-dir opus-mt-en-de "
                           "&& nmt import marian opus-mt-en-de --out opus-mt-en-de.pt")
def import_marian_command(
    folder: Annotated[Path, typer.Argument(help="A Hugging Face Marian (OPUS-MT) folder: config.json, the weights, "
                                           "source.spm, target.spm, vocab.json.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="Checkpoint (.pt) to write.")],
    src: Annotated[Optional[str], typer.Option("--src", help="Source language (default: the folder's "
                                               "tokenizer_config.json, else its name, opus-mt-SRC-TGT).")] = None,
    tgt: Annotated[Optional[str], typer.Option("--tgt", help="Target language (as --src).")] = None,
) -> None:
    """Import a Marian model (Helsinki-NLP's OPUS-MT) from a Hugging Face folder; needs no transformers."""
    from nmt import checkpoint
    from nmt.console import err
    from nmt.files import check_output_file
    from nmt.importers.marian import describe, import_marian

    check_output_file(out, "--out")
    imported = import_marian(folder, src, tgt)
    checkpoint.save(out, imported.checkpoint)
    for note in imported.notes:
        err.print(note)
    err.print(describe(imported, out))


def main() -> None:
    """Entry point: run the app (its errors are rendered by ErrorBoundary)."""
    try:
        app()
    except (NmtError, OSError, KeyboardInterrupt) as e:  # raised outside a command (e.g. while parsing)
        sys.exit(report_error(e))
