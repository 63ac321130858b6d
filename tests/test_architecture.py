"""The shape of the package: imports flow one way (no cycles, in-function imports included), and the
lower layers stay free of what sits above them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nmt"


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
    # The model layer does not depend on the tokenizer library.
    ("nmt.model", {"nmt.bpe"}), ("nmt.search", {"nmt.bpe", "nmt.model"}), ("nmt.batching", {"nmt.bpe"}),
    ("nmt.loss", {"nmt.bpe", "nmt.model"}),
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


def test_youtokentome_is_imported_by_bpe_alone():
    users = {p.stem for p in PACKAGE.glob("*.py") if any(m.split(".")[0] == "youtokentome" for m in imports_of(p))}
    assert users == {"bpe"}



DECODING = ("model", "kernels", "search", "ensemble", "translate")


def private_attributes(source: str) -> list[str]:
    """Uses of `x._name` (not dunders, not on self) and `getattr(x, "_name")` in Python source: a library's
    private API."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            name, on_self = node.attr, isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "getattr" and len(node.args) > 1 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            name, on_self = node.args[1].value, False
        else:
            continue
        if name.startswith("_") and not name.startswith("__") and not on_self:
            found.append(ast.unparse(node))
    return found


def test_private_attributes_are_found():
    source = ("op = torch.ops.mkldnn._linear_pointwise\nf = getattr(overload, '_op', overload)\n"
              "self._cache = None\nv = torch.__version__\ng = getattr(torch, 'ops')\n")
    assert private_attributes(source) == ["torch.ops.mkldnn._linear_pointwise", "getattr(overload, '_op', overload)"]


@pytest.mark.parametrize("module", DECODING)
def test_decoding_uses_no_private_torch_api(module):
    """Translation runs on torch's public API only (a private one can change or vanish in any release)."""
    assert private_attributes((PACKAGE / f"{module}.py").read_text()) == []
