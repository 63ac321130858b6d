"""The engines behind translate, eval and serve: torch and CTranslate2 give the same translations (greedy,
beam, n-best, empty and long lines, -o), the CTranslate2 conversion cache (reuse, concurrent first use,
damaged entries), what auto falls back on and what --engine ctranslate2 refuses, and the precisions.

The CTranslate2 tests are skipped when ctranslate2 is not installed (it is in the test extra).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch
from conftest import SAMPLE_DIR

from nmt.config import InferenceConfig, ModelConfig, Overrides, Precision, SearchConfig
from nmt.core.errors import ConfigError
from nmt.core.progress import Progress
from nmt.core.vocab import BOS, EOS, PAD
from nmt.engines.torch_engine import TorchEngine
from nmt.model import checkpoint

ctranslate2 = pytest.importorskip("ctranslate2")

from nmt.engines import choice as engines  # noqa: E402  (ctranslate2's users, only where it exists)
from nmt.engines import conversions  # noqa: E402
from nmt.engines.choice import Needs, open_engine  # noqa: E402
from nmt.engines.ct2_engine import CTranslate2Engine  # noqa: E402

N_LINES = 40


@pytest.fixture(scope="module")
def lines() -> list[str]:
    """Sample sentences, with empty and blank lines and one longer than the model's positions among them."""
    with open(SAMPLE_DIR / "test.en", encoding="utf-8") as f:
        found = [next(f).rstrip("\n") for _ in range(N_LINES)]
    long_line = " ".join(["The little dog runs on the green grass."] * 60)
    return found[:10] + ["", "  "] + found[10:20] + [long_line] + found[20:] + [""]


@pytest.fixture(scope="module")
def ending_checkpoint(tiny_checkpoint, tmp_path_factory) -> Path:
    """The briefly trained tiny model with its EOS embedding scaled up, so that beam hypotheses end before the
    length limit (after 30 updates the model loops on most lines: those reach it)."""
    ckpt = checkpoint.load(tiny_checkpoint)
    ckpt.weights["embed.weight"][EOS] *= 3.0
    path = tmp_path_factory.mktemp("ending") / "model.pt"
    checkpoint.save(path, ckpt)
    return path


def opened(model, engine: str, events: list | None = None, needs: Needs = Needs(), **search):
    inference = Overrides(InferenceConfig, {"engine": engine, "threads": 1, **search.pop("inference", {})})
    return open_engine([model], Overrides(SearchConfig, search), inference,
                       progress=(events.append if events is not None else lambda e: None), needs=needs)


def messages(events: list[Progress]) -> list[str]:
    return [e.message for e in events if e.message]


def nbest_lists(translations) -> list[list[tuple[tuple[int, ...], float, float]]]:
    return [[(tuple(h.tokens), h.score, h.log_prob) for _, h in t.hypotheses] for t in translations]


# -- the same translations -------------------------------------------------------------------------


@pytest.mark.parametrize("which, search", [
    ("looping", dict(beam=1)),  # greedy: outputs cut at their own limit and scored again
    ("looping", dict(beam=4)),  # nmt's defaults (GNMT 0.6): every sentence reaches its limit, searched by nmt
    ("ending", dict(beam=1)),
    ("ending", dict(beam=4)),
    ("ending", dict(beam=4, nbest=4)),
    ("ending", dict(beam=5, nbest=3, lenpen=1.0, lenpen_type="power")),
    ("ending", dict(beam=3, lenpen=0.0)),
    ("ending", dict(beam=4, nbest=2, lenpen=-0.5)),
])
def test_identical_translations(tiny_checkpoint, ending_checkpoint, lines, which, search):
    """Texts, n-best lists, log-probabilities and scores: CTranslate2's equal torch's, line by line."""
    model = tiny_checkpoint if which == "looping" else ending_checkpoint
    ours = opened(model, "torch", **search).translate_chunk(lines)
    ct2 = opened(model, "ctranslate2", **search)
    theirs = ct2.translate_chunk(lines)
    assert [t.text for t in theirs] == [t.text for t in ours]
    assert [t.text for t in ours].count("") == 3  # the empty and blank lines, and only those
    a, b = nbest_lists(ours), nbest_lists(theirs)
    assert [[h[0] for h in x] for x in b] == [[h[0] for h in x] for x in a]
    for x, y in zip(a, b):  # float32 sums over up to ~60 tokens
        assert [v for h in y for v in h[1:]] == pytest.approx([v for h in x for v in h[1:]], abs=1e-3)
    searched_again = ct2.fallback.sentences if ct2.fallback else 0
    if which == "ending":  # most sentences are CTranslate2's own: this compares the engines, not torch with itself
        assert searched_again < len(lines) // 2
    if search["beam"] == 1:
        assert searched_again == 0  # greedy search never needs nmt's


def test_chunks_and_batches_do_not_change_ctranslate2s_translations(ending_checkpoint, lines):
    whole = opened(ending_checkpoint, "ctranslate2", beam=4, inference={"max_tokens": 64})
    reference = [t.text for t in opened(ending_checkpoint, "torch", beam=4).translate_chunk(lines)]
    streamed = [t.text for t in whole.translate(lines[i:i + 7] for i in range(0, len(lines), 7))]
    assert streamed == reference


def test_batches_at_once_give_the_same_translations_in_order(ending_checkpoint, lines):
    """--inter-threads 3: several batches of a chunk searched at once by CTranslate2's replicas, in order."""
    one = opened(ending_checkpoint, "ctranslate2", beam=4, nbest=2, inference={"max_tokens": 48})
    three = opened(ending_checkpoint, "ctranslate2", beam=4, nbest=2, inference={"max_tokens": 48, "inter_threads": 3})
    assert one.parallel == 1 and three.parallel == 3
    assert len(list(three.batches(three.encode(lines, 0)))) >= 6  # more batches than replicas
    assert nbest_lists(three.translate_chunk(lines)) == nbest_lists(one.translate_chunk(lines))
    streamed = [t.text for t in three.translate(lines[i:i + 9] for i in range(0, len(lines), 9))]
    assert streamed == [t.text for t in one.translate_chunk(lines)]


def test_batches_at_once_run_at_once(ending_checkpoint, lines, monkeypatch):
    """The first two batches wait for each other at a barrier: they pass only if they are searched at the same
    time."""
    engine = opened(ending_checkpoint, "ctranslate2", inference={"max_tokens": 48, "inter_threads": 2})
    barrier, search, calls = threading.Barrier(2, timeout=30), engine.search_batch, itertools.count()

    def meeting(encoded, keys):
        if next(calls) < 2:
            barrier.wait()  # BrokenBarrierError after 30 s alone
        return search(encoded, keys)

    monkeypatch.setattr(engine, "search_batch", meeting)
    chunk = [line for line in lines if line.strip()][:20]
    assert len(list(engine.batches(engine.encode(chunk, 0)))) > 2
    assert [t.text for t in engine.translate_chunk(chunk)] == [t.text for t in opened(
        ending_checkpoint, "ctranslate2", inference={"max_tokens": 48}).translate_chunk(chunk)]


def test_batches_at_once_need_ctranslate2(tiny_checkpoint, tmp_path):
    with pytest.raises(ConfigError, match=r"^`inter_threads` 2: the torch engine translates one batch at a time; "):
        opened(tiny_checkpoint, "torch", inference={"inter_threads": 2})
    with pytest.raises(ConfigError, match=r"^`inter_threads` 2 needs the CTranslate2 engine, and an ensemble "):
        open_engine([tiny_checkpoint] * 2, Overrides(SearchConfig), Overrides(InferenceConfig, {"inter_threads": 2}))
    with pytest.raises(ConfigError, match=r"^`inter_threads` 2 with `sampling`: which replica draws "):
        opened(tiny_checkpoint, "ctranslate2", sampling=True, inference={"inter_threads": 2})
    src = tmp_path / "in.en"
    src.write_text("A dog.\n")
    r = subprocess.run([sys.executable, "-m", "nmt", "translate", "-m", str(tiny_checkpoint), "--engine", "torch",
                        "--inter-threads", "2", "-i", str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["error: --inter-threads 2: the torch engine translates one batch at a "
                                             "time; use --engine ctranslate2, or leave --inter-threads out"]


def test_translate_cli_output_file_identical_on_both_engines(ending_checkpoint, lines, tmp_path):
    """`nmt translate -o` and --nbest: the same files from both engines; auto says which it took, once."""
    from typer.testing import CliRunner

    from nmt.cli.main import app

    src = tmp_path / "in.en"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    outputs = {}
    for engine in ("torch", "ctranslate2", "auto"):
        for extra in ([], ["--nbest", "3"]):
            out = tmp_path / f"{engine}{len(extra)}.de"
            r = CliRunner().invoke(app, ["translate", "-m", str(ending_checkpoint), "-i", str(src), "-o", str(out),
                                         "--engine", engine, "--threads", "1", *extra])
            assert r.exit_code == 0, r.output
            outputs[engine, len(extra)] = out.read_text(encoding="utf-8")
            if engine == "auto":
                assert r.stderr.count("engine: ctranslate2") == 1
    assert outputs["torch", 0] == outputs["ctranslate2", 0] == outputs["auto", 0]
    assert len(outputs["torch", 0].splitlines()) == len(lines)
    rows = {engine: [line.split("\t") for line in outputs[engine, 2].splitlines()] for engine in ("torch", "ctranslate2")}
    assert len(rows["torch"]) == len(rows["ctranslate2"]) == 3 * len(lines)
    for a, b in zip(rows["torch"], rows["ctranslate2"]):  # LINE RANK SCORE LOGPROB TEXT
        assert (a[0], a[1], a[4]) == (b[0], b[1], b[4])
        assert [float(x) for x in a[2:4]] == pytest.approx([float(x) for x in b[2:4]], abs=1e-3)  # float32 sums


def test_alignments_identical_on_both_engines(ending_checkpoint, lines):
    ours, theirs = opened(ending_checkpoint, "torch", beam=2), opened(ending_checkpoint, "ctranslate2", beam=2)
    found = 0
    for i, line in enumerate(lines[:15]):
        t = ours.translate_chunk([line], i)[0]
        for _, h in t.hypotheses:
            a, b = ours.alignment(line, h, i), theirs.alignment(line, h, i)
            assert a == b
            found += len(a)
    assert found > 20


def test_sampling_on_ctranslate2_is_deterministic_per_seed_with_nmts_scores(ending_checkpoint, lines):
    """Other draws than torch's (CTranslate2's random numbers), the same ones for the same seed; the scores
    are the model's log-probabilities of the drawn tokens (PAD and BOS out), whatever the temperature."""
    search = dict(sampling=True, nbest=2, topk=20, temperature=0.7, seed=3)
    first = opened(ending_checkpoint, "ctranslate2", **search).translate_chunk(lines[:12])
    again = opened(ending_checkpoint, "ctranslate2", **search).translate_chunk(lines[:12])
    assert nbest_lists(first) == nbest_lists(again)
    scorer = TorchEngine(ending_checkpoint)
    for line, t in zip(lines[:12], first):
        if not line.strip():
            continue
        src = torch.tensor([scorer.encode([line], 0)[0]])
        for _, h in t.hypotheses:
            tgt = torch.tensor([[2] + h.tokens])
            with torch.inference_mode():
                logits = scorer.model(src, tgt)[0]
                logits[:, [PAD, BOS]] = float("-inf")  # never drawn, out of the distribution as in nmt's search
                lp = logits.log_softmax(-1)
            expected = sum(lp[i, tok].item() for i, tok in enumerate(h.tokens + [EOS]))
            assert h.log_prob == pytest.approx(expected, abs=2e-3)


def test_int8_compute_type(ending_checkpoint, lines):
    ct2 = opened(ending_checkpoint, "ctranslate2", beam=2, inference={"int8": True})
    assert ct2.compute_type == "int8" and ct2.engine.compute_type == "int8_float32"
    out = ct2.translate_chunk(lines)
    assert len(out) == len(lines) and sum(bool(t.text) for t in out) == len(lines) - 3


# -- the conversion cache --------------------------------------------------------------------------


def cache_root() -> Path:
    return Path(os.environ["NMT_CACHE_DIR"]) / conversions.FOLDER


def converting(events: list[Progress]) -> list[str]:
    return [m for m in messages(events) if m.startswith("converted ")]


def test_conversion_is_made_once_and_reused(tiny_checkpoint, tmp_path):
    copy = tmp_path / "copy.pt"
    copy.write_bytes(tiny_checkpoint.read_bytes())
    first: list[Progress] = []
    entry = conversions.converted(copy, first.append)
    assert entry == cache_root() / conversions.checkpoint_digest(tiny_checkpoint)
    second: list[Progress] = []
    assert conversions.converted(tiny_checkpoint, second.append) == entry  # the content, not the path
    assert len(converting(first)) <= 1 and converting(second) == []
    assert conversions.problem(entry, entry.name) is None
    assert not [p for p in cache_root().iterdir() if p.name.startswith(".")]  # no staging folder left


@pytest.mark.parametrize("damage, why", [
    (lambda e: (e / "model.bin").write_bytes((e / "model.bin").read_bytes()[:-100]), "model.bin differs"),
    (lambda e: (e / "model.bin").write_bytes(b"\0" * (e / "model.bin").stat().st_size), "model.bin differs"),
    (lambda e: (e / "shared_vocabulary.json").unlink(), "shared_vocabulary.json is missing"),
    (lambda e: (e / "nmt_export.json").write_text("{"), "nmt_export.json is missing or damaged"),
])
def test_a_damaged_entry_is_converted_again(ending_checkpoint, lines, damage, why):
    entry = conversions.converted(ending_checkpoint)
    damage(entry)
    events: list[Progress] = []
    ct2 = opened(ending_checkpoint, "ctranslate2", events, beam=4)
    warning = [m for m in messages(events) if m.startswith("warning")]
    assert len(warning) == 1 and why in warning[0] and len(converting(events)) == 1
    assert conversions.problem(entry, entry.name) is None
    reference = opened(ending_checkpoint, "torch", beam=4).translate_chunk(lines[:10])
    assert [t.text for t in ct2.translate_chunk(lines[:10])] == [t.text for t in reference]


CONVERT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from nmt.engines.conversions import converted
    print("calling", flush=True)
    entry = converted(Path(sys.argv[1]), lambda e: print(e.message, flush=True))
    print("entry", entry, flush=True)
""")


@pytest.mark.slow
def test_concurrent_first_use_converts_once(tiny_checkpoint, tmp_path):
    """Two processes asking at once: one converts, the other waits for the lock and finds the entry."""
    from nmt.core.usercache import locked

    env = {**os.environ, "NMT_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    sha = conversions.checkpoint_digest(tiny_checkpoint)
    root = tmp_path / "cache" / conversions.FOLDER
    root.mkdir(parents=True)
    with locked(root / f"{sha}.lock"):  # both block on it, then race for it
        procs = [subprocess.Popen([sys.executable, "-c", CONVERT, str(tiny_checkpoint)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
        for p in procs:
            assert p.stdout.readline().strip() == "calling"
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(out)
    assert sum(out.count("converted ") for out in outs) == 1
    assert all(f"entry {root / sha}" in out for out in outs)
    assert conversions.problem(root / sha, sha) is None
    assert sorted(p.name for p in root.iterdir()) == [sha, f"{sha}.lock"]


def test_an_unwritable_cache(tiny_checkpoint, tmp_path, monkeypatch):
    """--engine ctranslate2: one line naming the folder and NMT_CACHE_DIR; auto: torch, saying why."""
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "file"))
    with pytest.raises(Exception, match="NMT_CACHE_DIR") as e:
        opened(tiny_checkpoint, "ctranslate2")
    assert "\n" not in str(e.value)
    events: list[Progress] = []
    assert opened(tiny_checkpoint, "auto", events).name == "torch"
    assert any(m.startswith("engine: torch (auto: the CTranslate2 conversion cannot be written") for m in messages(events))


# -- auto and what CTranslate2 cannot do -----------------------------------------------------------


def unexportable(monkeypatch):
    import nmt.engines.ct2_export as export

    monkeypatch.setitem(export.EXPORTABLE, "norm", ("post",))


def no_ctranslate2_equivalent(monkeypatch, field: str):
    import dataclasses

    import nmt.engines.decoding as decoding

    monkeypatch.setattr(decoding, "OPTIONS", tuple(dataclasses.replace(o, ct2="", ct2_engine="") if o.field == field
                                                   else o for o in decoding.OPTIONS))


def not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)


@pytest.mark.parametrize("case, search, inference, needs, why", [
    ("ensemble", {}, {}, Needs(), "an ensemble (2 `model`) runs on torch only"),
    ("one", {"sampling": True}, {}, Needs(), "`sampling`: CTranslate2 draws other samples"),
    ("one", {}, {}, Needs(attention=True), "`attention` heatmaps need every layer's and head's attention"),
    ("one", {}, {"precision": Precision.BF16}, Needs(), "`precision` bf16: CTranslate2 has no bfloat16 on this cpu"),
    ("not installed", {}, {}, Needs(), "CTranslate2 is not installed (pip install 'nmt-toolkit[ct2]')"),
    ("unexportable", {}, {}, Needs(), "cannot be exported to CTranslate2 (no CTranslate2 equivalent for norm 'pre')"),
    ("no keyword", {"lenpen": 0.3}, {}, Needs(), "`lenpen`: CTranslate2 has no such option"),
])
def test_auto_falls_back_on_torch_and_says_why(tiny_checkpoint, monkeypatch, tmp_path, case, search, inference, needs,
                                               why):
    if "bf16" in why and "bfloat16" in ctranslate2.get_supported_compute_types("cpu"):
        pytest.skip("this CTranslate2 computes in bfloat16 on the CPU")
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))  # not converted yet
    if case == "not installed":
        not_installed(monkeypatch)
    if case == "unexportable":
        unexportable(monkeypatch)
    if case == "no keyword":  # a decoding option the table gives no CTranslate2 equivalent: torch's alone
        no_ctranslate2_equivalent(monkeypatch, "lenpen")
    models = [tiny_checkpoint] * (2 if case == "ensemble" else 1)
    events: list[Progress] = []
    inference = Overrides(InferenceConfig, {"engine": "auto", "threads": 1, **inference})
    engine = open_engine(models, Overrides(SearchConfig, search), inference, events.append, needs)
    assert engine.name == "torch"
    said = [m for m in messages(events) if m.startswith("engine:")]
    assert len(said) == 1 and said[0].startswith("engine: torch (auto: ") and why in said[0], said
    if search.get("sampling"):
        return  # CTranslate2's to do when asked, with its own draws (test_sampling_on_ctranslate2_...)
    with pytest.raises(ConfigError) as e:
        open_engine(models, Overrides(SearchConfig, search), inference | Overrides(InferenceConfig, {"engine": "ctranslate2"}),
                    lambda e: None, needs)
    assert str(e.value).startswith("`engine` ctranslate2: ") and why in str(e.value), str(e.value)
    assert str(e.value).endswith("use `engine` torch") and "\n" not in str(e.value)


def test_sampling_runs_on_ctranslate2_when_asked_and_says_its_samples_are_its_own(tiny_checkpoint):
    events: list[Progress] = []
    assert opened(tiny_checkpoint, "ctranslate2", events, sampling=True).name == "ctranslate2"
    assert any(m.startswith("note: `engine` ctranslate2 draws its own samples") for m in messages(events))
    events.clear()
    opened(tiny_checkpoint, "ctranslate2", events)
    assert not any("samples" in m for m in messages(events))


def test_torch_is_quiet_and_auto_names_ctranslate2_once(tiny_checkpoint):
    events: list[Progress] = []
    assert opened(tiny_checkpoint, "torch", events).name == "torch" and messages(events) == []
    engine = opened(tiny_checkpoint, "auto", events)
    assert engine.name == "ctranslate2" and isinstance(engine, CTranslate2Engine)
    assert [m for m in messages(events) if m.startswith("engine:")] == ["engine: ctranslate2 (auto; compute type float32)"]


def test_the_cli_says_one_line_for_what_ctranslate2_cannot_do(tiny_checkpoint, tmp_path):
    src = tmp_path / "in.en"
    src.write_text("A dog.\n")
    other = tiny_checkpoint.parent / "checkpoint_00000020.pt"  # a file given twice is refused before this
    r = subprocess.run([sys.executable, "-m", "nmt", "translate", "-m", str(tiny_checkpoint), "-m", str(other),
                        "--engine", "ctranslate2", "-i", str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["error: --engine ctranslate2: an ensemble (2 --model) runs on torch only; "
                                             "use --engine torch"]


# -- precision -------------------------------------------------------------------------------------


CPU_TYPES = {"float32", "int8", "int8_float32", "int16"}


@pytest.mark.parametrize("precision, supported, expected", [
    (Precision.FP32, CPU_TYPES, "float32"),
    (Precision.INT8, CPU_TYPES, "int8"),
    (Precision.BF16, CPU_TYPES | {"bfloat16"}, "bfloat16"),
    (Precision.BF16, CPU_TYPES, None),  # not in this CTranslate2 on this CPU
])
def test_compute_types(precision, supported, expected):
    if expected is None:
        with pytest.raises(engines.Unsupported, match="no bfloat16 on this cpu .it has float32, int16, int8"):
            engines.compute_type_of(precision, torch.device("cpu"), supported)
    else:
        assert engines.compute_type_of(precision, torch.device("cpu"), supported) == expected


@pytest.mark.parametrize("supported, timed, expected", [
    (CPU_TYPES, "bf16", "float32"),  # no bfloat16 here: float32, untimed
    (CPU_TYPES | {"bfloat16"}, "bf16", "bfloat16"),
    (CPU_TYPES | {"bfloat16"}, "fp32", "float32"),
])
def test_auto_compute_type_follows_the_timing(monkeypatch, supported, timed, expected):
    calls = []

    def resolve(requested, device, training=False, timing=None):
        calls.append(requested)
        return Precision(timed)

    monkeypatch.setattr(engines, "resolve_precision", resolve)
    assert engines.auto_compute_type(torch.device("cpu"), supported, ModelConfig(vocab_size=100)) == expected
    assert calls == ([Precision.AUTO] if "bfloat16" in supported else [])


# -- degenerate models: the same lines on both engines -----------------------------------------------


def degenerate(tiny_checkpoint: Path, folder: Path, eos_shift: float) -> Path:
    """The tiny model with EOS's logit moved by `eos_shift` x |e_EOS|^2 at every step (the final norm's bias
    moved along EOS's tied embedding): large and positive, it ends at once; negative, it never ends."""
    ckpt = checkpoint.load(tiny_checkpoint)
    ckpt.weights["decoder_norm.bias"] += eos_shift * ckpt.weights["embed.weight"][EOS]
    path = folder / f"eos{eos_shift}.pt"
    checkpoint.save(path, ckpt)
    return path


@pytest.mark.parametrize("eos_shift, beam, lengths", [
    (10.0, 4, "empty"),  # immediately ending: EOS first, on every line
    (10.0, 1, "empty"),
    (-10.0, 4, "at the limit"),  # never ending: every beam search reaches its limit, which CTranslate2 stops at
    (-10.0, 1, "at the limit"),
    (0.0, 4, "any"),  # the looping tiny model, repeating words (most lines reach the limit)
    (0.0, 5, "any"),
])
def test_degenerate_models_give_the_same_lines_on_both_engines(tiny_checkpoint, lines, tmp_path, eos_shift, beam,
                                                               lengths):
    """Hypotheses and n-best lists line by line, and the note that says where torch searched for CTranslate2."""
    model = degenerate(tiny_checkpoint, tmp_path, eos_shift) if eos_shift else tiny_checkpoint
    ours = opened(model, "torch", beam=beam, nbest=min(beam, 3)).translate_chunk(lines)
    events: list[Progress] = []
    ct2 = opened(model, "ctranslate2", events, beam=beam, nbest=min(beam, 3))
    theirs = ct2.translate_chunk(lines)
    a, b = nbest_lists(ours), nbest_lists(theirs)
    assert [[h[0] for h in x] for x in b] == [[h[0] for h in x] for x in a]
    for x, y in zip(a, b):  # float32 sums over up to ~60 tokens
        assert [v for h in y for v in h[1:]] == pytest.approx([v for h in x for v in h[1:]], abs=1e-3)
    best = [len(t.hypotheses[0][1].tokens) if t.hypotheses else 0 for t in ours]
    limits = [len(ct2.encode([line], 0)[0]) for line in lines]  # not the limit itself: 0 only for empty lines
    if lengths == "empty":
        assert best == [0] * len(lines)
    elif lengths == "at the limit":
        assert all(n > 0 for n, line in zip(best, lines) if line.strip()) and max(best) > 2 * max(limits) // 3
    notes = [m for m in messages(events) if m.startswith("note: a beam search reached")]
    searched_again = ct2.fallback.sentences if ct2.fallback else 0
    assert len(notes) == (1 if searched_again else 0)  # said once, when torch searches for CTranslate2
    if beam == 1 or lengths == "empty":
        assert searched_again == 0  # greedy search and ended searches are CTranslate2's own
    elif lengths == "at the limit":
        assert searched_again == sum(bool(line.strip()) for line in lines)


@pytest.mark.parametrize("beam", [2, 4])
def test_a_model_that_would_emit_bos_searches_alike_on_both_engines(tiny_checkpoint, lines, tmp_path, beam):
    """BOS's output row made as likely as the likeliest words' (its tied embedding moved onto EOS's and a word's):
    both engines take PAD and BOS out of each step's distribution and renormalise the rest (torch's
    restrict_tokens, CTranslate2's suppress_sequences), so their beams are the same. A CTranslate2 search that
    only drops them afterwards keeps other beams (one ending in BOS among its K) and ends elsewhere: the model is
    one where that happens."""
    ckpt = checkpoint.load(tiny_checkpoint)
    embed = ckpt.weights["embed.weight"]
    embed[BOS] = 0.5 * embed[EOS] + 0.5 * embed[embed[4:].norm(dim=1).argmax() + 4]
    model = tmp_path / "bos.pt"
    checkpoint.save(model, ckpt)
    ours = [t.text for t in opened(model, "torch", beam=beam).translate_chunk(lines)]
    ct2 = opened(model, "ctranslate2", beam=beam)
    assert [t.text for t in ct2.translate_chunk(lines)] == ours
    unsuppressed = ct2.with_search(ct2.search_cfg)
    unsuppressed.suppress_specials = False
    unsuppressed = unsuppressed.with_search(ct2.search_cfg)  # its options made again without suppress_sequences
    unsuppressed.fallback = None  # CTranslate2's own output: no torch search of what holds BOS
    theirs = [t.text for t in unsuppressed.translate_chunk(lines)]
    assert sum(a != b for a, b in zip(theirs, ours)) > 0  # the case is there: without the rule, lines differ
