"""nmt.cli.console and the habits of the command line: --version, -h, shell completion, progress that is drawn
on a terminal only and stays useful at 80 columns."""

from __future__ import annotations

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
