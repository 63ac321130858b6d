"""The shape of the package: imports flow one way (no cycles, in-function imports included), and the
lower layers stay free of what sits above them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nmt"
TOKENIZERS = {"nmt.tokenizer", "nmt.bpe", "nmt.spm"}


def module_name(path: Path) -> str:
    """The dotted name of a source file of the package: nmt/download/fetch.py is nmt.download.fetch,
    nmt/download/__init__.py is nmt.download."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> dict[str, Path]:
    """Every module of the package, its subpackages' included, by dotted name (not nmt itself, which
    imports nothing, nor __main__)."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))
            if p.stem != "__main__" and p != PACKAGE / "__init__.py"}


def imports_of(path: Path, type_checking: bool = True) -> set[str]:
    """Every module an nmt source file imports, wherever the import stands (module level, functions,
    and, with `type_checking`, `if TYPE_CHECKING:` blocks, which run for type checkers only), as dotted names;
    relative imports are resolved against the file's package."""
    tree = ast.parse(path.read_text(), str(path))
    if not type_checking:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
                node.body = []
    name = module_name(path)
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # `from . import x` in nmt/download/fetch.py: nmt.download.x
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                module = f"{base}.{module}" if module else base
            found.add(module)
            # `from nmt import checkpoint` imports the module nmt.checkpoint
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def graph(type_checking: bool = True) -> dict[str, set[str]]:
    """nmt module -> the nmt modules it imports (subpackages' modules included)."""
    modules = sources()
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
    assert "nmt.download" in g["nmt.cli"] and "nmt.download.fetch" in g["nmt.download.cache"]  # subpackages
    assert "nmt.download.spec" in g["nmt.download.datasets.wmt14"]


@pytest.mark.parametrize("path, name, imports", [
    ("fetch.py", "nmt.download.fetch", {"nmt.download.spec", "nmt.download.spec.GB"}),
    ("__init__.py", "nmt.download", {"nmt.download.spec", "nmt.download.spec.GB"}),
    ("datasets/x.py", "nmt.download.datasets.x", {"nmt.download.spec", "nmt.download.spec.GB"}),
])
def test_relative_imports_are_resolved(tmp_path, monkeypatch, path, name, imports):
    """A relative import names the same module as its absolute spelling."""
    root = tmp_path / "nmt"
    file = root / "download" / path
    file.parent.mkdir(parents=True)
    dots = "." * (2 if path.startswith("datasets/") else 1)
    file.write_text(f"from {dots}spec import GB\n")
    monkeypatch.setitem(globals(), "PACKAGE", root)
    assert module_name(file) == name and imports_of(file) == imports


@pytest.mark.parametrize("g, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"a2"}, "a2": set(), "b": {"c"}, "c": {"b"}}, ["b", "c", "b"]),
])
def test_find_cycle(g, cycle):
    assert find_cycle(g) == cycle


def test_subpackages_are_in_the_graph():
    g = graph()
    assert "nmt.serve.batching" in g["nmt.serve.app"] and "nmt.serve.config" in g["nmt.serve"]
    assert module_name(PACKAGE / "serve" / "__init__.py") == "nmt.serve"


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
    # The user's cache is a base layer; the device layer times shapes, not models.
    ("nmt.cache", {"nmt.config", "nmt.files", "nmt.device", "nmt.model", "nmt.checkpoint"}),
    ("nmt.device", {"nmt.model", "nmt.kernels", "nmt.translate", "nmt.checkpoint", "nmt.timing"}),
    ("nmt.timing", {"nmt.translate", "nmt.engine", "nmt.train", "nmt.trainer", "nmt.checkpoint"}),
    # Each engine knows nothing of the choice between them; the choice knows nothing of the commands.
    ("nmt.translate", {"nmt.export", "nmt.conversions", "nmt.engine"}),
    ("nmt.export", {"nmt.conversions", "nmt.engine"}),
    ("nmt.conversions", {"nmt.engine", "nmt.serve", "nmt.cli"}),
    ("nmt.engine", {"nmt.serve", "nmt.cli", "nmt.train", "nmt.trainer"}),
])
def test_lower_layers_do_not_reach_up(module, forbidden):
    """What `module` needs at run time (batching names the dataset's type for type checkers only)."""
    assert not reachable(graph(type_checking=False), module) & forbidden


def test_the_server_reaches_neither_training_nor_the_command_line():
    g = graph(type_checking=False)
    serve = [m for m in g if m == "nmt.serve" or m.startswith("nmt.serve.")]
    assert len(serve) > 5
    for module in serve:
        assert not reachable(g, module) & {"nmt.train", "nmt.trainer", "nmt.cli"}, module


def test_the_server_knows_engines_by_their_protocol_only():
    """Any engine with translate_chunk, with_search, search_cfg and languages can serve (torch's, CTranslate2's):
    the serve package never names an engine's class, only nmt.engine's protocol."""
    for path in (PACKAGE / "serve").glob("*.py"):
        names = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
        names |= {a.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)
                  for a in n.names}
        assert not names & {"Translator", "CTranslate2Translator", "BatchTranslator", "open_engine"}, path


def test_type_checking_imports_are_seen_by_the_cycle_check_only():
    assert "nmt.dataset" in graph()["nmt.batching"]
    assert "nmt.dataset" not in graph(type_checking=False)["nmt.batching"]


@pytest.mark.parametrize("library, module", [("youtokentome", "nmt.bpe"), ("sentencepiece", "nmt.spm"),
                                             ("safetensors", "nmt.importers.marian")])
def test_each_tokenizer_library_is_imported_by_one_module(library, module):
    users = {name for name, p in sources().items() if any(m.split(".")[0] == library for m in imports_of(p))}
    assert users == {module}


def test_no_module_needs_transformers():
    """An imported model is read with plain libraries; transformers is for the tests and benchmarks only."""
    assert not [name for name, p in sources().items() if any(m.split(".")[0] == "transformers" for m in imports_of(p))]


def test_importers_reach_neither_training_nor_translation_nor_the_command_line():
    """An importer turns files into a Checkpoint: it needs the model, the tokenizer and the checkpoint only."""
    g = graph(type_checking=False)
    importers = [m for m in g if m == "nmt.importers" or m.startswith("nmt.importers.")]
    assert "nmt.importers.marian" in importers
    for module in importers:
        assert not reachable(g, module) & {"nmt.train", "nmt.trainer", "nmt.translate", "nmt.search", "nmt.cli",
                                           "nmt.serve", "nmt.dataset", "nmt.export"}, module


def download_package() -> list[str]:
    return [m for m in graph() if m == "nmt.download" or m.startswith("nmt.download.")]


def test_the_download_package_needs_only_the_base_layer():
    """Downloading knows nothing of training, models or the CLI: outside its own package it reaches only
    errors, files (and the compression they read), progress and config (for check_range)."""
    g = graph(type_checking=False)
    assert len(download_package()) > 10
    for module in download_package():
        outside = {m for m in reachable(g, module) if not m.startswith("nmt.download")}
        assert outside <= {"nmt.errors", "nmt.files", "nmt.compression", "nmt.progress", "nmt.config"}, module


def test_files_and_compression_are_the_base_layer():
    """Every module reads and writes through nmt.files: it needs nothing of nmt but errors and compression."""
    g = graph()
    assert g["nmt.compression"] == {"nmt.errors"}
    assert reachable(g, "nmt.files") == {"nmt.errors", "nmt.compression"}


def test_the_dataset_registry_is_data():
    """A dataset module declares specs: it imports the spec types and nothing else of nmt."""
    g = graph()
    datasets = [m for m in g if m.startswith("nmt.download.datasets.")]
    assert {"nmt.download.datasets.multi30k", "nmt.download.datasets.wmt14"} <= set(datasets)
    for module in datasets:
        assert g[module] <= {"nmt.download.spec"}, module
    # and only the registry reads them
    assert {m for m in g if "nmt.download.datasets" in g[m]} == {"nmt.download.registry"}


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


def test_only_the_checkpoint_module_reads_and_writes_checkpoints():
    """torch.load/torch.save in nmt.checkpoint only: every other module gets a typed `Checkpoint`, never the
    string-keyed file (the importer reads a foreign pytorch_model.bin, which is not nmt's)."""
    users = set()
    for name, path in sources().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("load", "save")
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
                users.add(name)
    assert users == {"nmt.checkpoint", "nmt.importers.marian"}
