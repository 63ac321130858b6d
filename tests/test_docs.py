"""The documentation tells the truth: every option of every command is in its page's tables and every option a
table names is one of the command's (the declarations are the one source: a page cannot drift from them), and the
pages speak to a user on their own machine (no paths of the machine they were written on, no development
discussion)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_cli import SUBCOMMANDS

ROOT = Path(__file__).resolve().parent.parent
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def options_of(name: str) -> list[str]:
    """Every option string of `nmt NAME` (aliases and --no- forms included), but -h/--help."""
    import typer.main

    from nmt.cli.main import app

    command = typer.main.get_command(app).commands[name]
    if name == "import":  # a group: its one command's options (`nmt import marian`)
        command = command.commands["marian"]
    found = []
    for param in command.params:
        if param.param_type_name == "option":
            found += [o for o in [*param.opts, *param.secondary_opts] if o.startswith("--")]
    return [o for o in found if o != "--help"]


def table_rows(page: Path) -> str:
    return "\n".join(line for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("|"))


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_option_is_in_the_command_page(name):
    rows = table_rows(ROOT / "docs" / "commands" / f"{name}.md")
    missing = [o for o in options_of(name) if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", rows)]
    assert missing == [], f"docs/commands/{name}.md lacks table rows for {missing}"


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_no_table_row_names_an_option_the_command_lacks(name):
    """An option row (its first cell starts with an option) names only options the command has: a renamed or
    removed option leaves no row behind."""
    known = set(options_of(name))
    named = [option for line in table_rows(ROOT / "docs" / "commands" / f"{name}.md").splitlines()
             if line.startswith("| `-") for option in re.findall(r"(?<![\w-])--[a-z][\w-]*", line.split("|")[1])]
    assert named and sorted(set(named) - known) == [], f"docs/commands/{name}.md names options nmt {name} lacks"


def test_the_python_api_page_lists_every_search_option():
    """docs/python-api.md's `**search` row names the search options a call takes: SearchConfig's fields, all and
    only them."""
    from nmt.config import SearchConfig, fields_of

    row = next(line for line in table_rows(ROOT / "docs" / "python-api.md").splitlines()
               if line.startswith("| `**search`"))
    named = set(re.findall(r"`([a-z_]+)`", row.split("|")[2].split("(")[0]))
    assert named == set(fields_of(SearchConfig))


@pytest.mark.parametrize("page", USER_DOCS, ids=[str(p.relative_to(ROOT)) for p in USER_DOCS])
def test_docs_name_no_paths_of_this_machine(page):
    text = page.read_text(encoding="utf-8")
    found = re.findall(r"(?<![\w.~-])(?:/work/|/root\b|/tmp/|\.\./shared\b)\S*", text)
    assert found == [], f"{page.name}: {found}"


@pytest.mark.parametrize("page", USER_DOCS, ids=[str(p.relative_to(ROOT)) for p in USER_DOCS])
def test_docs_hold_no_development_discussion(page):
    text = re.sub(r"https?://\S+", "", page.read_text(encoding="utf-8"))  # links may name an upstream issue
    found = re.findall(r"\b(?:the issue|issues? \d+|issue-\d+|sessions?|helpers?)\b", text, re.IGNORECASE)
    assert found == [], f"{page.name}: {found}"


def test_the_eval_table_in_the_docs_is_what_eval_prints(tmp_path):
    """docs/commands/eval.md shows `nmt eval`'s table: its rows are the metrics and signature shapes eval prints."""
    from typer.testing import CliRunner

    from nmt.cli.main import app

    (tmp_path / "ref.de").write_text("ein Mann fährt Rad .\nzwei Hunde spielen im Schnee .\n")
    (tmp_path / "hyp.de").write_text("ein Mann fährt ein Rad .\nzwei Hunde spielen im Schnee .\n")
    printed = CliRunner().invoke(app, ["eval", "--ref", str(tmp_path / "ref.de"), "--hyp", str(tmp_path / "hyp.de")])
    assert printed.exit_code == 0, printed.stderr
    shape = lambda line: re.sub(r"\d+(\.\d+)?", "N", " ".join(line.split()))  # noqa: E731
    printed_rows = [shape(line) for line in printed.stdout.splitlines() if line.strip()]
    page = (ROOT / "docs" / "commands" / "eval.md").read_text(encoding="utf-8")
    block = re.search(r"```text\n( *metric +score +signature\n.*?)```", page, re.S)
    assert block, "docs/commands/eval.md shows no `nmt eval` table in a ```text block"
    shown_rows = [shape(line) for line in block.group(1).splitlines() if line.strip()]
    assert shown_rows == printed_rows
