"""Shared session fixtures: a tiny corpus, BPE model, prepared data and a short training run.

Built once per test session (a few seconds on one CPU thread) from the bundled sample corpus.
The BPE models are fixed files (tests/data, learned by `nmt bpe` from the first 2,000 and 400
training pairs): youtokentome does not learn the same merge table twice, so a model learned per
session would make every trained fixture, and every test with a threshold on it, vary by chance.
"""

from __future__ import annotations

import atexit
import contextlib
import gzip
import importlib.util
import os
import random
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "nmt" / "sample_data"
BPE_MODELS = {size: Path(__file__).resolve().parent / "data" / f"sample-bpe-{size}.model" for size in (300, 1000)}
TINY_PAIRS = {"train": 2000, "valid": 100, "test": 200}
TINY_VOCAB = 1000  # 300 also works, but 1000 learns faster: diverse outputs after 30 updates
TINY_TRAIN = dict(max_updates=30, save_interval=10, keep_last=5, valid_interval=1000, log_interval=10,
                  update_tokens=1024, max_tokens=1024, warmup=50)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Tiny tensors: one thread is fastest, and immune to other processes competing for cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# The user's cache (CTranslate2 conversions, precision timings) in a folder of the session, for this process
# and the subprocesses it starts (set now, before the test modules copy the environment for theirs): tests
# leave nothing in the real one and find nothing there.
CACHE = tempfile.mkdtemp(prefix="nmt-test-cache-")
os.environ["NMT_CACHE_DIR"] = CACHE
atexit.register(shutil.rmtree, CACHE, ignore_errors=True)  # also when the session never starts


try:  # property tests draw the same examples on every run: a test that fails by chance would block every landing
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("nmt", derandomize=True, database=None)
    _hypothesis_settings.load_profile("nmt")
except ImportError:
    pass


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread() -> Iterator[None]:
    """Every test and every fixture runs torch on one thread (the session's fixtures, trained models among them,
    are built under it); subprocesses get --threads 1 where it matters."""
    with torch_threads(1):
        yield


@pytest.fixture(autouse=True)
def one_torch_thread_again() -> Iterator[None]:
    """A command run in this process sets its --threads: one thread again after each test, so that the next
    test and the module fixtures built for it do not depend on what ran before (not even on a fixture that ran
    a command before this one started)."""
    import torch

    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)


@contextlib.contextmanager
def benchmark_script(name: str) -> Iterator[types.ModuleType]:
    """benchmarks/NAME.py imported as a module (benchmarks/ is not a package), named NAME while the body runs."""
    spec = importlib.util.spec_from_file_location(name, SAMPLE_DIR.parent.parent / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def prepare_sample(root: Path, n_train: int, n_valid: int, vocab_size: int = 300) -> Path:
    """A prepared store (the fixed BPE model of `vocab_size` + binarized data) from the first pairs of the
    sample corpus; returns root/data."""
    from nmt.data.dataset import prepare

    for split, n in (("train", n_train), ("valid", n_valid)):
        for lang in ("en", "de"):
            lines = (SAMPLE_DIR / f"{split}.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)[:n]
            (root / f"{split}.{lang}").write_text("".join(lines), encoding="utf-8")
    shutil.copyfile(BPE_MODELS[vocab_size], root / "bpe.model")
    prepare(root / "bpe.model", root / "data", "en", "de", root / "train", root / "valid")
    return root / "data"


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """Folder with {train,valid,test}.{en,de}: the first lines of the bundled sample corpus."""
    out = tmp_path_factory.mktemp("tiny_corpus")
    for split, n in TINY_PAIRS.items():
        for lang in ("en", "de"):
            with open(SAMPLE_DIR / f"{split}.{lang}", encoding="utf-8") as f:
                lines = [next(f) for _ in range(n)]
            (out / f"{split}.{lang}").write_text("".join(lines), encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def tiny_bpe(tiny_corpus) -> Path:
    path = tiny_corpus.parent / "tiny_bpe" / "bpe.model"
    path.parent.mkdir()
    shutil.copyfile(BPE_MODELS[TINY_VOCAB], path)
    return path


@pytest.fixture(scope="session")
def tiny_spm(tiny_corpus) -> Path:
    """A SentencePiece unigram model of the tiny corpus (learned per session: on one thread SentencePiece
    learns the same model from the same text every time)."""
    from nmt.text.spm import train_sentencepiece

    path = tiny_corpus.parent / "tiny_spm" / "spm.model"
    train_sentencepiece([tiny_corpus / "train.en", tiny_corpus / "train.de"], path, vocab_size=TINY_VOCAB, threads=1)
    return path


@pytest.fixture(scope="session")
def tiny_data(tiny_corpus, tiny_bpe) -> Path:
    """A prepared (binarized) dataset with a train split only (no validation: faster training)."""
    from nmt.data.dataset import prepare

    out = tiny_corpus.parent / "tiny_data"
    prepare(tiny_bpe, out, "en", "de", tiny_corpus / "train")
    return out


@pytest.fixture(scope="session")
def tiny_run(tiny_data) -> Path:
    """A tiny-preset run folder with step checkpoints at updates 10, 20 and 30 (treat as read-only)."""
    from nmt.training.launch import train

    out = tiny_data.parent / "tiny_run"
    train(tiny_data, out, preset="tiny", train_overrides=dict(TINY_TRAIN))
    return out


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_run) -> Path:
    """The newest step checkpoint of `tiny_run` (read-only)."""
    return tiny_run / "checkpoint_00000030.pt"


TOY_WORDS = ["the", "cat", "dog", "sat", "ran", "on", "under", "mat", "house", "big", "small", "red", "green", "quick", "slow", "bird", "tree", "river", "stone", "light", "dark", "water", "fire", "earth", "wind", "over", "into"]


def toy_sentences(n: int, seed: int) -> list[str]:
    """`n` single-spaced sentences of 2..10 words, reproducible for `seed`."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(TOY_WORDS) for _ in range(rng.randint(2, 10))) for _ in range(n)]


def toy_corpus(folder: Path) -> tuple[Path, Path, list[str], list[str]]:
    """A plain train.en and a gzipped train.de.gz (given as train.de: found by its .gz) of 300 toy sentences
    each, the German side upper case, and their lines: what a subword trainer learns from in the tests."""
    a, b = toy_sentences(300, 1), [s.upper() for s in toy_sentences(300, 2)]
    (folder / "train.en").write_text("\n".join(a) + "\n", encoding="utf-8")
    with gzip.open(folder / "train.de.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(b) + "\n")
    return folder / "train.en", folder / "train.de", a, b
