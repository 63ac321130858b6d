"""The shape of the package: imports flow one way (no cycles, in-function imports included), and the
lower layers stay free of what sits above them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nmt"
TOKENIZERS = {"nmt.text.tokenizer", "nmt.text.bpe", "nmt.text.spm"}


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
            # `from nmt import checkpoint` imports the module nmt.model.checkpoint
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
    assert "nmt.model.transformer" in g["nmt.engines.search"] or "nmt.core.vocab" in g["nmt.engines.search"]  # the walker sees imports
    assert "nmt.training.trainer" in g["nmt.training.launch"] and "nmt.core.errors" in g["nmt.cli.main"]  # cli's errors import is top-level
    assert "nmt.training.launch" in g["nmt.cli.commands.cmd_train"]  # ... and cli's are inside its command functions
    assert "nmt.download" in g["nmt.cli.commands.cmd_download"] and "nmt.download.fetch" in g["nmt.download.store"]  # subpackages
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
    assert "nmt.serve.batcher" in g["nmt.serve.app"] and "nmt.serve.service" in g["nmt.serve"]
    assert module_name(PACKAGE / "serve" / "__init__.py") == "nmt.serve"


def test_no_import_cycles():
    assert find_cycle(graph()) == []


# The layers, bottom up, as data: each package of nmt and the packages it may import (its own modules
# always). A package not listed here fails test_every_package_has_a_layer; an import outside the set
# (an upward one, or a sideways one the design does not allow) fails test_packages_import_only_below.
LAYERS: dict[str, set[str]] = {
    "nmt.core": set(),
    "nmt.config": {"nmt.core"},
    "nmt.scoring": {"nmt.core"},
    "nmt.text": {"nmt.core", "nmt.config"},
    "nmt.download": {"nmt.core", "nmt.config"},
    "nmt.data": {"nmt.core", "nmt.config", "nmt.text"},
    "nmt.model": {"nmt.core", "nmt.config"},
    "nmt.compute": {"nmt.core", "nmt.config", "nmt.model"},
    "nmt.engines": {"nmt.core", "nmt.config", "nmt.text", "nmt.model", "nmt.compute"},
    "nmt.documents": {"nmt.core", "nmt.config", "nmt.text", "nmt.engines"},
    "nmt.training": {"nmt.core", "nmt.config", "nmt.scoring", "nmt.text", "nmt.data", "nmt.model", "nmt.compute",
                     "nmt.engines"},
    "nmt.importers": {"nmt.core", "nmt.config", "nmt.text", "nmt.model"},
    "nmt.serve": {"nmt.core", "nmt.config", "nmt.text", "nmt.engines", "nmt.documents"},
    "nmt.distillation": {"nmt.core", "nmt.config", "nmt.scoring", "nmt.text", "nmt.data", "nmt.model", "nmt.compute",
                         "nmt.engines", "nmt.documents", "nmt.training"},
    "nmt.workflows": {"nmt.core", "nmt.config", "nmt.scoring", "nmt.text", "nmt.data", "nmt.download", "nmt.model",
                      "nmt.compute", "nmt.engines", "nmt.documents", "nmt.training", "nmt.importers"},
    "nmt.api": {"nmt.core", "nmt.config", "nmt.text", "nmt.model", "nmt.compute", "nmt.engines", "nmt.documents",
                "nmt.workflows"},
    "nmt.cli": {"nmt", "nmt.core", "nmt.config", "nmt.scoring", "nmt.text", "nmt.data", "nmt.download", "nmt.model",
                "nmt.compute", "nmt.engines", "nmt.documents", "nmt.training", "nmt.importers", "nmt.serve",
                "nmt.distillation", "nmt.workflows"},
}


def package_of(module: str) -> str:
    """nmt.engines.search -> nmt.engines; nmt.download.datasets.wmt14 -> nmt.download; nmt -> nmt."""
    return ".".join(module.split(".")[:2])


def test_every_package_has_a_layer():
    assert {package_of(m) for m in sources()} == set(LAYERS)


def test_packages_import_only_below():
    """The layers, checked on every import (in functions and TYPE_CHECKING blocks too)."""
    wrong = [f"{m} imports {n}" for m, imports in graph().items() for n in sorted(imports)
             if package_of(n) != package_of(m) and package_of(n) not in LAYERS[package_of(m)]]
    assert wrong == []


def test_an_upward_import_is_caught(tmp_path, monkeypatch):
    """The layer check fails on a core module that imports the model (a test of the test)."""
    root = tmp_path / "nmt"
    for name, text in [("core/errors.py", "from nmt.model.transformer import Transformer\n"),
                       ("model/transformer.py", "from nmt.core.errors import NmtError\n")]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    monkeypatch.setitem(globals(), "PACKAGE", root)
    g = graph()
    assert "nmt.model.transformer" in g["nmt.core.errors"]
    assert package_of("nmt.model.transformer") not in LAYERS[package_of("nmt.core.errors")]


def test_no_two_modules_share_a_name():
    """A module's file name says what it is, once: no `errors.py` in two packages."""
    names = [p.stem for p in PACKAGE.rglob("*.py") if p.stem not in ("__init__", "__main__")]
    packages = [p.name for p in PACKAGE.rglob("*") if p.is_dir() and (p / "__init__.py").exists()]
    assert sorted({n for n in names + packages if (names + packages).count(n) > 1}) == []


# One module per command (`cmd_<name>.py`): the folder lists the commands, each one concept, and grows with them.
ONE_PER_COMMAND = PACKAGE / "cli" / "commands"


def test_packages_stay_small():
    """A package a newcomer can take in: at most 12 modules (its __init__ and subpackages not counted)."""
    for init in PACKAGE.rglob("__init__.py"):
        if init.parent == ONE_PER_COMMAND:
            assert all(p.stem.startswith("cmd_") for p in init.parent.glob("*.py") if p.stem != "__init__")
            continue
        modules = [p for p in init.parent.glob("*.py") if p.stem != "__init__"]
        assert len(modules) <= 12, f"{init.parent}: {len(modules)} modules"


def test_each_package_has_a_map():
    """Each package opens with a docstring that says what is in it."""
    for init in PACKAGE.rglob("__init__.py"):
        assert len(ast.get_docstring(ast.parse(init.read_text())) or "") > 40, init


@pytest.mark.parametrize("module, forbidden", [
    # The model layer does not depend on the tokenizers.
    ("nmt.model.transformer", TOKENIZERS), ("nmt.engines.search", TOKENIZERS | {"nmt.model.transformer", "nmt.model.layers"}), ("nmt.data.batches", TOKENIZERS),
    ("nmt.model.loss", TOKENIZERS | {"nmt.model.transformer", "nmt.model.layers"}),
    # The tokenizers know nothing of models, data stores and checkpoints; each kind knows nothing of the other.
    ("nmt.text.tokenizer", {"nmt.model.transformer", "nmt.data.dataset", "nmt.data.binarize", "nmt.model.checkpoint", "nmt.engines.torch_engine"}),
    ("nmt.text.bpe", {"nmt.text.spm", "nmt.text.tokenizer"}), ("nmt.text.spm", {"nmt.text.bpe", "nmt.text.tokenizer"}),
    ("nmt.model.checkpoint", TOKENIZERS),  # a checkpoint holds the tokenizer as plain data
    # Process plumbing knows nothing of what the processes compute.
    ("nmt.training.distributed", {"nmt.training.launch", "nmt.training.trainer", "nmt.training.resume", "nmt.model.transformer", "nmt.model.layers", "nmt.data.dataset", "nmt.data.binarize", "nmt.model.checkpoint", "nmt.model.loss"}),
    ("nmt.training.trainer", {"nmt.training.launch", "nmt.cli.main"}),
    ("nmt.training.resume", {"nmt.training.launch", "nmt.training.trainer", "nmt.cli.main"}),
    ("nmt.engines.torch_engine", {"nmt.training.launch", "nmt.training.trainer", "nmt.cli.main"}),
    ("nmt.config", {"nmt.model.transformer", "nmt.model.layers", "nmt.compute.device"}),
    # The user's cache is a base layer; the device layer times shapes, not models.
    ("nmt.core.usercache", {"nmt.config", "nmt.core.files", "nmt.compute.device", "nmt.model.transformer", "nmt.model.layers", "nmt.model.checkpoint"}),
    ("nmt.compute.device", {"nmt.model.transformer", "nmt.model.layers", "nmt.compute.precision", "nmt.engines.torch_engine", "nmt.model.checkpoint", "nmt.compute.timing"}),
    ("nmt.compute.timing", {"nmt.engines.torch_engine", "nmt.engines.choice", "nmt.training.launch", "nmt.training.trainer", "nmt.training.resume", "nmt.model.checkpoint"}),
    # Each engine knows nothing of the choice between them; the choice knows nothing of the commands.
    ("nmt.engines.torch_engine", {"nmt.engines.ct2_engine", "nmt.engines.ct2_export", "nmt.engines.conversions", "nmt.engines.choice"}),
    ("nmt.engines.ct2_engine", {"nmt.engines.conversions", "nmt.engines.choice"}),
    ("nmt.engines.ct2_export", {"nmt.engines.ct2_engine", "nmt.engines.torch_engine", "nmt.engines.search", "nmt.engines.conversions", "nmt.engines.choice"}),
    # The table of decoding options is read by both engines and the server: it reads only the config.
    ("nmt.engines.decoding", {"nmt.engines.search", "nmt.engines.torch_engine", "nmt.engines.ct2_engine", "nmt.engines.ct2_export", "nmt.model.transformer"}),
    ("nmt.engines.conversions", {"nmt.engines.choice", "nmt.serve", "nmt.cli.main"}),
    ("nmt.engines.choice", {"nmt.serve", "nmt.cli.main", "nmt.training.launch", "nmt.training.trainer"}),
])
def test_lower_layers_do_not_reach_up(module, forbidden):
    """What `module` needs at run time (batching names the dataset's type for type checkers only)."""
    assert not reachable(graph(type_checking=False), module) & forbidden


def test_the_server_reaches_neither_training_nor_the_command_line():
    g = graph(type_checking=False)
    serve = [m for m in g if m == "nmt.serve" or m.startswith("nmt.serve.")]
    assert len(serve) > 5
    for module in serve:
        assert not reachable(g, module) & {"nmt.training.launch", "nmt.training.trainer", "nmt.cli.main"}, module


def test_the_server_knows_engines_by_their_protocol_only():
    """Any engine with translate_chunk, with_search, search_cfg and languages can serve (torch's, CTranslate2's):
    the serve package never names an engine's class, only nmt.engines.base's protocol."""
    for path in (PACKAGE / "serve").glob("*.py"):
        names = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
        names |= {a.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)
                  for a in n.names}
        assert not names & {"TorchEngine", "CTranslate2Engine", "BatchEngine", "open_engine"}, path


def test_type_checking_imports_are_seen_by_the_cycle_check_only():
    assert "nmt.data.dataset" in graph()["nmt.data.batches"]
    assert "nmt.data.dataset" not in graph(type_checking=False)["nmt.data.batches"]


@pytest.mark.parametrize("library, module", [("youtokentome", "nmt.text.bpe"), ("sentencepiece", "nmt.text.spm"),
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
        assert not reachable(g, module) & {"nmt.training.launch", "nmt.training.trainer", "nmt.engines.torch_engine", "nmt.engines.search", "nmt.cli.main",
                                           "nmt.serve", "nmt.data.dataset", "nmt.data.binarize", "nmt.engines.ct2_export", "nmt.engines.ct2_engine"}, module


def download_package() -> list[str]:
    return [m for m in graph() if m == "nmt.download" or m.startswith("nmt.download.")]


def test_the_download_package_needs_only_the_base_layer():
    """Downloading knows nothing of training, models or the CLI: outside its own package it reaches only
    errors, files (and the compression they read), progress and config (for check_range)."""
    g = graph(type_checking=False)
    assert len(download_package()) > 10
    for module in download_package():
        outside = {m for m in reachable(g, module) if not m.startswith(("nmt.download", "nmt.config"))}
        assert outside <= {"nmt.core.errors", "nmt.core.files", "nmt.core.compression", "nmt.core.progress"}, module


def test_files_and_compression_are_the_base_layer():
    """Every module reads and writes through nmt.core.files: it needs nothing of nmt but errors and compression."""
    g = graph()
    assert g["nmt.core.compression"] == {"nmt.core.errors"}
    assert reachable(g, "nmt.core.files") == {"nmt.core.errors", "nmt.core.compression"}


def test_the_dataset_registry_is_data():
    """A dataset module declares specs: it imports the spec types and nothing else of nmt."""
    g = graph()
    datasets = [m for m in g if m.startswith("nmt.download.datasets.")]
    assert {"nmt.download.datasets.multi30k", "nmt.download.datasets.wmt14"} <= set(datasets)
    for module in datasets:
        assert g[module] <= {"nmt.download.spec"}, module
    # and only the registry reads them
    assert {m for m in g if "nmt.download.datasets" in g[m]} == {"nmt.download.registry"}


DECODING = ("model/layers", "model/transformer", "compute/precision", "engines/search", "engines/ensemble",
            "engines/base", "engines/torch_engine")


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
    """torch.load/torch.save in nmt.model.checkpoint only: every other module gets a typed `Checkpoint`, never the
    string-keyed file (the importer reads a foreign pytorch_model.bin, which is not nmt's)."""
    users = set()
    for name, path in sources().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("load", "save")
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
                users.add(name)
    assert users == {"nmt.model.checkpoint", "nmt.importers.marian"}


ARCHITECTURE_PAGE = PACKAGE.parent / "docs" / "architecture.md"


def test_the_architecture_page_names_real_files():
    """Every path docs/architecture.md names exists (a template such as cmd_<name>.py aside)."""
    text = ARCHITECTURE_PAGE.read_text()
    paths = {p for p in re.findall(r"`((?:nmt|tests|docs)/[\w/.<>-]*)`", text) if "<" not in p}
    assert len(paths) > 20
    assert sorted(p for p in paths if not (PACKAGE.parent / p).exists()) == []


def test_the_architecture_page_maps_every_package():
    """Its table has a row per layer, and each row names every module of its package (and its subpackages), and no
    other: a newcomer finds every module there."""
    rows = re.findall(r"^\| `nmt/(\w+)(?:/|\.py)` \| (.*?) \|", ARCHITECTURE_PAGE.read_text(), re.M)
    assert {f"nmt.{name}" for name, _ in rows} == set(LAYERS)
    for package, described in rows:
        if not (PACKAGE / package).is_dir():  # a module of its own (nmt/api.py)
            continue
        named = set(re.findall(r"\(`([a-z_0-9]+/?)`", described) + re.findall(r", `([a-z_0-9]+/?)`", described))
        modules = {p.stem for p in (PACKAGE / package).glob("*.py") if p.stem != "__init__"}
        folders = {f"{p.name}/" for p in (PACKAGE / package).iterdir() if (p / "__init__.py").is_file()}
        assert named == modules | folders, f"nmt/{package}: not named {sorted((modules | folders) - named)}, " \
                                           f"no such module {sorted(named - (modules | folders))}"


def test_the_architecture_page_states_the_layers_of_the_test():
    """Its "may import" column is LAYERS (where it lists the packages rather than saying "everything")."""
    for package, allowed in re.findall(r"^\| `nmt/(\w+)(?:/|\.py)` \| .*? \| ([\w ,]+) \|$", ARCHITECTURE_PAGE.read_text(), re.M):
        if allowed.startswith("everything"):
            continue
        listed = set() if allowed == "nothing of nmt" else {f"nmt.{name.strip()}" for name in allowed.split(",")}
        assert listed == LAYERS[f"nmt.{package}"], package


def test_modules_and_functions_stay_short():
    """At most 500 lines a module and 60 a function: a module is one concept, a function one step."""
    long_modules, long_functions = [], []
    for name, path in sources().items():
        text = path.read_text()
        if len(text.splitlines()) > 500:
            long_modules.append(name)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long_functions.append(f"{name}.{node.name}")
    assert (long_modules, long_functions) == ([], [])
