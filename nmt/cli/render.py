"""Results as the text a command prints on stdout: score tables, eval's JSON, the list of datasets.

rich is imported inside the functions: `nmt --help` renders none of this. Cells are text: a system's file
name, a signature or a description is printed as it is, never read as rich markup or emoji codes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the commands import the library where they run (a fast --help)
    from nmt.scoring import PairedScore, Score
    from nmt.workflows.evaluation import EvalResult


def rendered(*items: Any) -> str:
    """Rich renderables (tables, text) as the plain text of a 200-column console, for stdout."""
    from rich.console import Console

    console = Console(highlight=False, markup=False, emoji=False, width=200, color_system=None, file=io.StringIO())
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


def eval_report(result: EvalResult, as_json: bool) -> str:
    """What `nmt eval` prints: a table (or JSON) of each system's scores, or of the paired bootstrap test."""
    from nmt.scoring import to_json

    if result.paired is not None:
        if as_json:
            return json.dumps({"refs": result.ref_names, "lines": result.lines, "signatures": result.signatures,
                               "paired_bs": [asdict(r) for r in result.paired]}, indent=2) + "\n"
        return paired_table(result.paired, result.signatures)
    if as_json:
        ref = result.ref_names[0] if len(result.ref_names) == 1 else result.ref_names
        found = [to_json(scores, hyp=name, ref=ref, lines=result.lines) for name, scores in result.scored]
        return json.dumps(found[0] if len(found) == 1 else found, indent=2) + "\n"
    many = len(result.scored) > 1
    return "".join((f"{name}\n" if many else "") + scores_table(scores) for name, scores in result.scored)


def datasets_table(rows: Iterable[Iterable[str]]) -> str:
    """`nmt download --list`: one row per dataset."""
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "languages", "size", "licence", "description", box=None)
    for row in rows:
        table.add_row(*row)
    console = Console(highlight=False, markup=False, emoji=False, width=200)
    with console.capture() as listing:
        console.print(table)
    return listing.get()
