"""The shape of the package: imports flow one way (no cycles, in-function imports included), and the
lower layers stay free of what sits above them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nmt"
TOKENIZERS = {"nmt.tokenizer", "nmt.bpe", "nmt.spm"}


def imports_of(path: Path, type_checking: bool = True) -> set[str]:
    """Every module an nmt source file imports, wherever the import stands (module level, functions,
    and, with `type_checking`, `if TYPE_CHECKING:` blocks, which run for type checkers only), as dotted names."""
    tree = ast.parse(path.read_text(), str(path))
    if not type_checking:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
                node.body = []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from nmt import checkpoint` imports the module nmt.checkpoint
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def graph(type_checking: bool = True) -> dict[str, set[str]]:
    """nmt module -> the nmt modules it imports."""
    modules = {f"nmt.{p.stem}": p for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return {name: {m for m in imports_of(path, type_checking) if m in modules and m != name}
            for name, path in modules.items()}


def reachable(g: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for m in g[todo.pop()] - seen:
            seen.add(m)
            todo.append(m)
    return seen


def find_cycle(g: dict[str, set[str]]) -> list[str]:
    """One import cycle as a list of modules (first == last), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str]:
        state[m] = 1
        path.append(m)
        for n in sorted(g[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        state[m] = 2
        path.pop()
        return []

    for m in sorted(g):
        if m not in state and (cycle := visit(m)):
            return cycle
    return []


def test_the_graph_is_read_from_the_sources():
    g = graph()
    assert "nmt.model" in g["nmt.search"] or "nmt.vocab" in g["nmt.search"]  # the walker sees imports
    assert "nmt.trainer" in g["nmt.train"] and "nmt.errors" in g["nmt.cli"]  # cli's errors import is top-level
    assert "nmt.train" in g["nmt.cli"]  # ... and cli's are inside its command functions


@pytest.mark.parametrize("g, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"a2"}, "a2": set(), "b": {"c"}, "c": {"b"}}, ["b", "c", "b"]),
])
def test_find_cycle(g, cycle):
    assert find_cycle(g) == cycle


def test_no_import_cycles():
    assert find_cycle(graph()) == []


@pytest.mark.parametrize("module, forbidden", [
    # The model layer does not depend on the tokenizers.
    ("nmt.model", TOKENIZERS), ("nmt.search", TOKENIZERS | {"nmt.model"}), ("nmt.batching", TOKENIZERS),
    ("nmt.loss", TOKENIZERS | {"nmt.model"}),
    # The tokenizers know nothing of models, data stores and checkpoints; each kind knows nothing of the other.
    ("nmt.tokenizer", {"nmt.model", "nmt.dataset", "nmt.checkpoint", "nmt.translate"}),
    ("nmt.bpe", {"nmt.spm", "nmt.tokenizer"}), ("nmt.spm", {"nmt.bpe", "nmt.tokenizer"}),
    ("nmt.checkpoint", TOKENIZERS),  # a checkpoint holds the tokenizer as plain data
    # Process plumbing knows nothing of what the processes compute.
    ("nmt.distributed", {"nmt.train", "nmt.trainer", "nmt.model", "nmt.dataset", "nmt.checkpoint", "nmt.loss"}),
    ("nmt.trainer", {"nmt.train", "nmt.cli"}),
    ("nmt.translate", {"nmt.train", "nmt.trainer", "nmt.cli"}),
    ("nmt.config", {"nmt.model", "nmt.device"}),
])
def test_lower_layers_do_not_reach_up(module, forbidden):
    """What `module` needs at run time (batching names the dataset's type for type checkers only)."""
    assert not reachable(graph(type_checking=False), module) & forbidden


def test_type_checking_imports_are_seen_by_the_cycle_check_only():
    assert "nmt.dataset" in graph()["nmt.batching"]
    assert "nmt.dataset" not in graph(type_checking=False)["nmt.batching"]


@pytest.mark.parametrize("library, module", [("youtokentome", "bpe"), ("sentencepiece", "spm")])
def test_each_tokenizer_library_is_imported_by_one_module(library, module):
    users = {p.stem for p in PACKAGE.glob("*.py") if any(m.split(".")[0] == library for m in imports_of(p))}
    assert users == {module}
