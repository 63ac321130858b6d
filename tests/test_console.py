"""nmt.cli.console and the habits of the command line: --version, -h, shell completion, progress that is drawn
on a terminal only and stays useful at 80 columns."""

from __future__ import annotations

import contextlib
import io
import re
import time
from pathlib import Path

import pytest
from rich.console import Console
from test_cli import SUBCOMMANDS
from typer.testing import CliRunner

from nmt import __version__
from nmt.cli import console
from nmt.core.progress import Progress


def run(*args: str, **kw):
    from nmt.cli.main import app

    return CliRunner().invoke(app, list(args), **kw)


def test_version():
    r = run("--version")
    assert r.exit_code == 0 and r.stdout == f"nmt {__version__}\n"


@pytest.mark.parametrize("command", [[]] + [[c] for c in SUBCOMMANDS], ids=["nmt"] + SUBCOMMANDS)
def test_h_is_help_everywhere(command):
    r = run(*command, "-h")
    assert r.exit_code == 0 and "Usage:" in r.stdout and "-h, --help" in r.stdout, r.stderr


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o default -F"), ("zsh", "compdef"), ("fish", "complete --command nmt")])
def test_show_completion_prints_a_script(shell, marker, monkeypatch):
    """`nmt --show-completion` prints the completion script of the shell it runs in."""
    shellingham = pytest.importorskip("shellingham")
    monkeypatch.setattr(shellingham, "detect_shell", lambda *args, **kwargs: (shell, f"/bin/{shell}"))
    r = run("--show-completion", prog_name="nmt")
    assert r.exit_code == 0 and marker in r.stdout and "_NMT_COMPLETE" in r.stdout, r.stdout + r.stderr


def terminal(width: int = 80) -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=width, color_system=None, highlight=False)


def test_training_progress_at_80_columns_starts_with_the_count_and_the_time_left(monkeypatch):
    """The line a training run redraws: `train 120/2,700 0:00:.. loss ...`, cut at the width, never wrapped."""
    screen = terminal(80)
    monkeypatch.setattr(console, "err", screen)
    info = {"loss": 5.123, "ppl": 167.9, "lr": 0.000123, "gnorm": 1.234, "tok/s": 12345.0, "epoch": 1,
            "batch": "10/250", "elapsed": 12.0}
    with console.progress_display() as report:
        for done in (100, 120):
            report(Progress("train", done=done, total=2700, unit="updates", info=info))
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.file.getvalue())  # the terminal's control sequences
    last = [line for line in drawn.replace("\r", "\n").splitlines() if line.strip()][-1]
    assert len(last) <= 80, last
    assert re.match(r"train\s+120/2700\s+(-:--:--|\d+:\d\d:\d\d)\s", last), last
    assert "loss 5.123" in last


def test_the_plain_log_line_gives_the_time_left(monkeypatch):
    screen = terminal(200)
    monkeypatch.setattr(console, "err", screen)
    times = iter([100.0, 110.0])
    monkeypatch.setattr(console.time, "monotonic", lambda: next(times))
    report = console.plain_logger(min_interval=0)
    report(Progress("train", done=100, total=1000, unit="updates", info={"loss": 5.0}))
    report(Progress("train", done=200, total=1000, unit="updates", info={"loss": 4.0}))
    lines = screen.file.getvalue().splitlines()
    assert lines[-1] == "train 200/1,000 updates | ETA 0:01:20 | loss 4.000"  # 100 updates per 10 s: 800 left


@pytest.mark.parametrize("done, total, rate, time_left, expected", [
    (200, 1000, 10.0, None, "0:01:20"),     # at the rate
    (200, 1000, 10.0, 30.0, "0:00:30"),     # a time budget that ends first
    (200, 1000, 10.0, 500.0, "0:01:20"),    # one that ends after the last update
    (200, 1000, None, 30.0, "0:00:30"),     # no rate yet
    (200, None, None, None, "?"),
    (200, 1000, 0.0, None, "?"),
])
def test_eta(done, total, rate, time_left, expected):
    assert console.eta(done, total, rate, time_left) == expected


def test_a_time_budget_bounds_the_time_left_on_both_displays(monkeypatch):
    """train --max-time 600 with --max-updates 100000: the line tells the budget's end, not the 100,000th update."""
    screen = terminal(200)
    monkeypatch.setattr(console, "err", screen)
    times, clock = iter([100.0, 110.0]), time.monotonic
    monkeypatch.setattr(console.time, "monotonic", lambda: next(times))
    report = console.plain_logger(min_interval=0)
    for done in (100, 200):
        report(Progress("train", done=done, total=100000, unit="updates", info={"loss": 4.0}, time_left=90.0))
    assert screen.file.getvalue().splitlines()[-1] == "train 200/100,000 updates | ETA 0:01:30 | loss 4.000"

    monkeypatch.setattr(console.time, "monotonic", clock)
    screen = terminal(120)
    monkeypatch.setattr(console, "err", screen)
    with console.progress_display() as report:  # one report: no rate yet, the budget alone tells
        report(Progress("train", done=120, total=100000, unit="updates", info={"loss": 4.0}, time_left=90.0))
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.file.getvalue())
    last = [line for line in drawn.replace("\r", "\n").splitlines() if line.strip()][-1]
    assert re.match(r"train\s+120/100000\s+0:01:(2\d|30)\s", last), last


@pytest.mark.parametrize("is_terminal", [True, False])
def test_translate_draws_progress_on_a_terminal_only(is_terminal, monkeypatch, tiny_checkpoint, tmp_path):
    """A file translated on a terminal gets a bar with sentences/s and the time left; a pipe or a log
    nothing but the translations' warnings."""
    screen = Console(file=io.StringIO(), force_terminal=is_terminal, width=120, color_system=None)
    monkeypatch.setattr(console, "err", screen)
    (tmp_path / "in.en").write_text("".join(f"a man number {i} .\n" for i in range(30)))
    r = run("translate", "-m", str(tiny_checkpoint), "-i", str(tmp_path / "in.en"), "--beam", "1", "--batch-size", "4",
            "--engine", "torch")  # (auto says which engine it took: tests/test_engine.py)
    assert r.exit_code == 0 and r.stdout.count("\n") == 30, r.stderr
    drawn = screen.file.getvalue()
    if is_terminal:
        assert "sentences/s" in drawn and "30/30" in drawn
    else:
        assert drawn == "", drawn


def test_the_distribution_name_is_free_of_the_other_nmt():
    """`nmt` on the package index is another project: the distribution is nmt-toolkit, and no install
    hint asks for `nmt[...]`."""
    root = Path(__file__).resolve().parent.parent
    assert re.search(r"^name = nmt-toolkit$", (root / "setup.cfg").read_text(), re.M)
    texts = [root / "README.md", *(root / "docs").rglob("*.md"), *(root / "nmt").rglob("*.py")]
    hints = [f"{p.name}: {m.group(0)}" for p in texts for m in re.finditer(r"pip install [\"']?nmt\b(?!-toolkit)[^\s`]*",
                                                                            p.read_text(encoding="utf-8"))]
    assert hints == []


# Messages are text: what the user gives (paths, config values, translations, file names) is printed as it is,
# never read as rich markup (`[model]` would vanish, `[/]` would raise) nor as an emoji code (`:smile:`).
HOSTILE = ["[model]", "[bold]x[/bold]", "a\\[b", "run/avg[best].pt", "back\\\\slash\\\\", ":smile:", "run:smile:.pt",
           "🙂", "[/]", "[link=http://x]y[/link]", "[red]error[/red] [b]"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\]8;[^\x1b]*\x1b\\")  # colors and cursor moves; links (OSC 8)


def rich_defaults(monkeypatch, is_terminal: bool = False) -> Console:
    """console.err replaced by a Console with rich's defaults (markup, emoji and highlighting on): the code must
    hand text to rich as text, not rely on how err is set up."""
    screen = Console(file=io.StringIO(), force_terminal=is_terminal, color_system="truecolor", width=200)
    monkeypatch.setattr(console, "err", screen)
    return screen


def shown(screen: Console) -> str:
    return ANSI.sub("", screen.file.getvalue()).replace("\r", "\n")


@pytest.mark.parametrize("text", HOSTILE)
def test_an_error_line_is_its_text(text, monkeypatch):
    from nmt.cli.main import report_error
    from nmt.core.errors import InputError

    screen = rich_defaults(monkeypatch, is_terminal=True)
    assert report_error(InputError(text)) == 1
    assert shown(screen) == f"error: {text}\n"
    assert "\x1b[31merror: " in screen.file.getvalue()  # our own style stays: a red "error:"


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize("logger", ["message_logger", "plain_logger"])
def test_a_logged_message_is_its_text(text, logger, monkeypatch):
    screen = rich_defaults(monkeypatch)
    getattr(console, logger)()(Progress("train", message=f"saved {text}"))
    assert shown(screen) == f"saved {text}\n"


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize("display", ["progress_display", "translation_progress"])
def test_a_message_above_a_bar_is_its_text(text, display, monkeypatch):
    screen = rich_defaults(monkeypatch, is_terminal=True)
    bar = console.progress_display() if display == "progress_display" else console.translation_progress(10)
    with bar as report:
        report(Progress("translate", message=f"saved {text}"))
    assert f"saved {text}" in shown(screen).splitlines()


@pytest.mark.parametrize("text", HOSTILE)
def test_a_task_and_its_figures_are_text(text, monkeypatch):
    """A task's name and a figure of its line (the logged line; the bar's description and info columns)."""
    screen = rich_defaults(monkeypatch)
    console.plain_logger(min_interval=0)(Progress(text, done=2, total=2, unit="files", info={"file": text}))
    assert shown(screen) == f"{text} 2/2 files | file {text}\n"

    screen = rich_defaults(monkeypatch, is_terminal=True)
    with console.progress_display() as report:
        report(Progress(text, done=1, total=2, unit="files", info={"file": text}))
    last = [line for line in shown(screen).splitlines() if line.strip()][-1]
    assert last.startswith(f"{text} ") and last.rstrip().endswith(f"file {text}"), last
    assert f"\x1b[1m{text}" in screen.file.getvalue()  # our own style stays: a bold task name


@pytest.mark.parametrize("text", HOSTILE)
def test_say_and_err_print_text_as_it_is(text, capsys):
    """The real console: say() (every command's message) and a plain err.print of a str alike."""
    console.say(text)
    console.err.print(text)
    assert capsys.readouterr().err == f"{text}\n{text}\n"


@pytest.mark.parametrize("logger", ["message_logger", "plain_logger", "progress_display"])
def test_the_logged_training_configuration_keeps_its_sections(logger, monkeypatch):
    """`nmt train` logs its resolved configuration (a TOML file): `[model]` and `[train]` are section headers."""
    from nmt.config import ModelConfig, TrainConfig, to_toml

    screen = rich_defaults(monkeypatch, is_terminal=logger == "progress_display")
    message = f"configuration (run[best]/config.toml):\n{to_toml(ModelConfig(), TrainConfig()).rstrip()}"
    display = console.progress_display() if logger == "progress_display" else contextlib.nullcontext(
        getattr(console, logger)())
    with display as report:
        report(Progress("train", message=message))
    lines = shown(screen).splitlines()
    assert "[model]" in lines and "[train]" in lines and "configuration (run[best]/config.toml):" in lines
    assert message in shown(screen)


@pytest.mark.parametrize("text", HOSTILE)
def test_a_table_cell_is_its_text(text):
    """The tables on stdout: a system (a file's name), a signature, a dataset's description."""
    from nmt.cli import render
    from nmt.scoring import PairedScore, Score

    paired = render.paired_table([PairedScore(text, "BLEU", 1.0, 1.0, 0.5, None)], {"BLEU": text})
    assert paired.splitlines()[1].lstrip().startswith(f"{text} ") and f"BLEU: {text}" in paired.splitlines()
    assert text in render.scores_table([Score("BLEU", 1.0, text, "")])
    assert text in render.datasets_table([[text, "en-de", "1 MB", "CC", text]])
    assert render.rendered(text) == f"{text}\n"


@pytest.mark.parametrize("name", HOSTILE)
def test_average_names_the_file_it_wrote(name, tiny_run, tmp_path):
    """`nmt average ... --out 'x/avg[best].pt'` says `into x/avg[best].pt`, the file it wrote."""
    out = tmp_path / "x" / f"avg{name}.pt"
    r = run("average", str(tiny_run), "--last", "2", "--out", str(out))
    assert r.exit_code == 0, r.stderr
    assert out.is_file()
    assert r.stderr == (f"averaged 2 checkpoints (checkpoint_00000020.pt .. checkpoint_00000030.pt) into {out}\n")


@pytest.mark.parametrize("name", ["in[model].en", "[bold]x[/bold].en", "in:smile:.en", "[/]"])
def test_translate_names_a_missing_input_as_it_is(name, tiny_checkpoint, tmp_path):
    missing = tmp_path / name
    r = run("translate", "-m", str(tiny_checkpoint), "-i", str(missing))
    assert r.exit_code != 0 and r.stderr.startswith("error: ") and f"{missing}: no such file" in r.stderr, r.stderr


def test_train_logs_its_configuration_as_written(tiny_data, tmp_path):
    """`nmt train` logs its config.toml on stderr as the file holds it: `[model]` and `[train]` included,
    and its run folder's name (here with brackets) as it is."""
    out = tmp_path / "run[best]:smile:"
    r = run("train", "--data", str(tiny_data), "--out", str(out), "--preset", "tiny", "--max-updates", "1",
            "--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff", "64", "--threads", "1")
    assert r.exit_code == 0, r.stderr
    written = (out / "config.toml").read_text()
    assert f"configuration ({out / 'config.toml'}):\n{written.rstrip()}\n" in r.stderr
    assert "\n[model]\n" in r.stderr and "\n[train]\n" in r.stderr
    assert f"last checkpoint {out}" in r.stderr.splitlines()[-1]
