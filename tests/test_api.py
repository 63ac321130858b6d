"""nmt.load and nmt.api.Translator: texts in, strings out (the CLI's translations), results with scores and n-best,
type checks and one-line errors naming the keyword arguments, threads, a cheap `import nmt`, and the example of
docs/python-api.md, run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import nmt
from nmt.core.errors import CheckpointError, ConfigError, InputError, NmtError
from nmt.core.progress import Progress

ROOT = Path(__file__).resolve().parent.parent
ENV = {k: v for k, v in os.environ.items() if k not in ("NMT_DEBUG", "FORCE_COLOR", "PYTHONWARNINGS")}
ENV.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NO_COLOR="1")


def run_python(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, *args], input=input, capture_output=True, text=True, env=env or ENV,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def sources(tiny_corpus) -> list[str]:
    return (tiny_corpus / "test.en").read_text(encoding="utf-8").splitlines()[:24]


@pytest.fixture(scope="module")
def translator(tiny_checkpoint) -> nmt.Translator:
    return nmt.load(tiny_checkpoint, engine="torch", beam=2)


@pytest.fixture(scope="module")
def ct2_translator(tiny_checkpoint) -> nmt.Translator:
    pytest.importorskip("ctranslate2")
    return nmt.load(tiny_checkpoint, engine="ctranslate2", beam=2)


# -- import nmt ------------------------------------------------------------------------------------


def test_import_nmt_imports_nothing_else():
    r = run_python("-c", "import nmt, sys; print(nmt.__version__); "
                         "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith(('nmt.', 'torch.'))))")
    assert r.stdout.splitlines() == [nmt.__version__, "[]"]


def test_the_lazy_names_are_the_api():
    from nmt import api
    from nmt.core import errors

    assert (nmt.load, nmt.Translator, nmt.Result, nmt.Candidate) == (api.load, api.Translator, api.Result,
                                                                      api.Candidate)
    assert (nmt.NmtError, nmt.ConfigError) == (errors.NmtError, errors.ConfigError)
    assert {"load", "Translator", "__version__"} <= set(dir(nmt))
    assert set(nmt.__all__) == {"__version__", *nmt.LAZY}
    with pytest.raises(AttributeError, match="no attribute 'lode'"):
        nmt.lode  # noqa: B018


def test_search_options_are_the_search_config():
    from nmt.api import SearchOptions
    from nmt.config import SearchConfig, fields_of

    assert set(SearchOptions.__annotations__) == set(fields_of(SearchConfig))


# -- what it translates ----------------------------------------------------------------------------


def test_translations_are_the_clis(translator, tiny_checkpoint, sources):
    r = run_python("-m", "nmt", "translate", "--model", str(tiny_checkpoint), "--engine", "torch", "--beam", "2",
                   "--threads", "1", "--scores", input="".join(s + "\n" for s in sources))
    cli = [line.split("\t") for line in r.stdout.splitlines()]
    results = translator.translate_results(sources)
    assert [[t.text, f"{t.score:.4f}"] for t in results] == cli
    assert translator.translate(sources) == [text for text, _ in cli]
    assert len({text for text, _ in cli}) > 5, "varied translations, or the comparison proves little"


def test_nbest_candidates_are_the_clis(translator, tiny_checkpoint, sources):
    r = run_python("-m", "nmt", "translate", "--model", str(tiny_checkpoint), "--engine", "torch", "--beam", "3",
                   "--nbest", "3", "--threads", "1", input="".join(s + "\n" for s in sources[:8]))
    results = translator.translate_results(sources[:8], beam=3, nbest=3)
    ours = [f"{i}\t{rank}\t{c.score:.4f}\t{c.log_prob:.4f}\t{c.text}"
            for i, t in enumerate(results) for rank, c in enumerate(t.candidates)]
    assert ours == r.stdout.splitlines()
    for t in results:
        assert t.candidates[0].text == t.text and len(t.candidates) == 3
        assert [c.score for c in t.candidates] == sorted((c.score for c in t.candidates), reverse=True)
        assert t.score <= 0


def test_empty_list_and_empty_texts(translator):
    assert translator.translate([]) == []
    assert translator.translate_results([]) == []
    assert translator.translate(["", "  "]) == ["", "  "]
    [empty] = translator.translate_results([""], nbest=2)
    assert (empty.text, empty.score, len(empty.candidates)) == ("", 0.0, 2)


def test_texts_are_split_into_sentences(translator):
    one, two = translator.translate(["A dog runs.", "A man is sitting on a bench."])
    assert translator.translate(["A dog runs. A man is sitting on a bench."]) == [f"{one} {two}"]
    assert translator.translate_one("A dog runs.\nA man is sitting on a bench.") == f"{one}\n{two}"


def test_any_iterable_of_strings(translator, sources):
    expected = translator.translate(sources[:3])
    assert translator.translate(tuple(sources[:3])) == expected
    assert translator.translate(s for s in sources[:3]) == expected  # type: ignore[arg-type]
    assert translator.translate_one(sources[0]) == expected[0]


def test_options_per_call_hold_for_that_call(translator, tiny_checkpoint, sources):
    greedy = nmt.load(tiny_checkpoint, engine="torch", beam=1)
    assert translator.translate(sources, beam=1) == greedy.translate(sources)
    assert translator.search.beam == 2
    assert translator.translate(sources, batch_size=3, max_tokens=64) == translator.translate(sources)
    assert translator.translate(sources, split=False) == translator.translate(sources)  # one sentence each


def test_an_ensemble_runs_on_torch(tiny_checkpoint, translator, sources):
    ensemble = nmt.load([tiny_checkpoint, tiny_checkpoint], beam=2)
    assert ensemble.engine == "torch"
    assert ensemble.translate(sources[:6]) == translator.translate(sources[:6])  # the mean of one model twice


def test_ctranslate2_gives_torchs_translations(ct2_translator, translator, sources):
    assert ct2_translator.engine == "ctranslate2"
    assert ct2_translator.translate(sources) == translator.translate(sources)


def test_auto_says_which_engine_on_progress(tiny_checkpoint):
    events: list[Progress] = []
    t = nmt.load(tiny_checkpoint, progress=events.append)
    assert any(e.message and e.message.startswith(f"engine: {t.engine}") for e in events)
    assert repr(t) == f"<nmt.Translator en->de on {t.engine}, beam 4>"
    assert t.languages == ("en", "de")


def test_html_keeps_tags(translator):
    [page] = translator.translate(["<p>A dog <b>runs</b> in the park.</p>"], format="html")
    assert page.startswith("<p>") and page.endswith("</p>") and "<b>" in page and "</b>" in page


# -- warnings --------------------------------------------------------------------------------------


def test_warnings_go_to_python_warnings_or_progress(tiny_checkpoint):
    long = " ".join(["dog"] * 1200)  # more BPE tokens than the tiny model's positions
    quiet = nmt.load(tiny_checkpoint, engine="torch", beam=1, max_len_a=0, max_len_b=3)
    with pytest.warns(nmt.NmtWarning, match="line 1 has .* BPE tokens"):
        quiet.translate([long], split=False)
    events: list[Progress] = []
    told = nmt.load(tiny_checkpoint, engine="torch", beam=1, max_len_a=0, max_len_b=3, progress=events.append)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        told.translate([long], split=False)
    assert any(e.message and "BPE tokens" in e.message for e in events)


# -- misuse ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "message"), [
    (lambda t: t.translate("A man is riding a bike."), "takes a list of strings, got a str; for one text use "
                                                       "translate_one"),
    (lambda t: t.translate([["A man.", "A dog."]]), r"texts\[0\] is a list, not a str; pass one string per text"),
    (lambda t: t.translate(["A man.", None]), r"texts\[1\] is NoneType, not a str"),
    (lambda t: t.translate(["A man.", "A dog.", 3]), r"texts\[2\] is int, not a str"),
    (lambda t: t.translate([b"A man."]), r"texts\[0\] is bytes, not a str; decode it"),
    (lambda t: t.translate({"A man.": 1}), "got dict"),
    (lambda t: t.translate(None), "got NoneType"),
    (lambda t: t.translate_results("A man."), r"translate_results\(\) takes a list of strings, got a str"),
    (lambda t: t.translate_one(["A man."]), r"translate_one\(\) takes one str, got list; for several texts"),
    (lambda t: t.translate(["A man."], bem=4), "unexpected keyword argument 'bem'; did you mean 'beam'"),
], ids=["str", "list-of-lists", "none-item", "int-item", "bytes-item", "dict", "none", "results-str", "one-list",
        "misspelt"])
def test_misuse_is_a_clear_type_error(translator, call, message):
    with pytest.raises(TypeError, match=message):
        call(translator)


@pytest.mark.parametrize(("options", "message"), [
    (dict(beam=0), "^beam must be at least 1, got 0$"),
    (dict(beam=2, nbest=3), "^nbest 3 must be between 1 and beam 2$"),
    (dict(topk=5), "^topk only applies with sampling"),
    (dict(lenpen_type="square"), "^lenpen_type square: use one of gnmt, power$"),
    (dict(batch_size=0), "^batch_size must be at least 1, got 0$"),
    (dict(max_tokens=-1), "^max_tokens must be at least 1"),
    (dict(format="xml"), "^format 'xml': give one of text, html$"),
    (dict(format="html", nbest=2, beam=2), "^format html gives one translation of each document"),
    (dict(split="no"), "^split 'no': should be true or false$"),  # a string is no bool, as "4" is no beam
    (dict(split=1), "^split 1: should be true or false$"),
])
def test_bad_options_are_config_errors_naming_the_keyword(translator, options, message):
    with pytest.raises(ConfigError, match=message) as e:
        translator.translate_results(["A man."], **options)
    assert "--" not in str(e.value) and "`" not in str(e.value) and "\n" not in str(e.value)


def test_a_lone_surrogate_is_an_input_error(translator):
    with pytest.raises(InputError, match=r"^texts\[1\] holds a lone surrogate \('\\ud800' at character 2\)"):
        translator.translate(["A man.", "a \ud800 b"])


def test_translate_refuses_nbest(translator):
    with pytest.raises(ConfigError, match="use translate_results"):
        translator.translate(["A man."], beam=2, nbest=2)


def test_ctranslate2_refuses_sampling_per_call(ct2_translator):
    with pytest.raises(ConfigError, match="^sampling and seed per call on the ctranslate2 engine"):
        ct2_translator.translate(["A man."], sampling=True)


def test_load_errors(tmp_path, tiny_checkpoint):
    with pytest.raises(InputError, match="no such file"):
        nmt.load(tmp_path / "missing.pt")
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(tiny_checkpoint.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match="damaged.pt") as e:
        nmt.load(damaged, engine="torch")
    assert "\n" not in str(e.value)
    for bad, message in [(3, "got int"), ([], r"got list \(empty\)"), ([tiny_checkpoint, 3], r"model\[1\] is int")]:
        with pytest.raises(TypeError, match=message):
            nmt.load(bad)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bem'"):
        nmt.load(tiny_checkpoint, bem=2)
    for options, message in [(dict(device="tpu"), "^device 'tpu': give one of cpu, cuda$"),
                             (dict(engine="onnx"), "^engine onnx: use one of auto, torch, ctranslate2$"), (dict(beam=0), "^beam must be at least 1"),
                             (dict(threads=-1), "^threads must be at least 0")]:
        with pytest.raises(NmtError, match=message):
            nmt.load(tiny_checkpoint, **options)


# -- threads ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_threads_get_the_sequential_results(engine, translator, ct2_translator, sources):
    shared = translator if engine == "torch" else ct2_translator
    calls = [dict(beam=b, batch_size=s) for b in (1, 2, 3) for s in (2, 5)] * 2
    expected = [shared.translate(sources, **c) for c in calls]
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda c: shared.translate(sources, **c), calls))
    assert found == expected
    assert len({tuple(e) for e in expected}) > 1, "the calls should differ, or the test proves little"


# -- the documentation -----------------------------------------------------------------------------


def test_the_documented_example_runs(tiny_checkpoint):
    page = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", page, re.S)
    assert code, "docs/python-api.md has a python example"
    r = run_python("-c", code.group(1), env={**ENV, "NMT_MODEL": str(tiny_checkpoint)})
    lines = r.stdout.splitlines()
    assert len(lines) == 6 and re.match(r"(torch|ctranslate2) \('en', 'de'\)$", lines[0])
    assert all(re.match(r"-?\d+\.\d{3} ", line) for line in lines[3:5])
    assert r.stderr == ""  # the library never prints


def test_a_glossary_per_call(translator):
    """glossary= as a dict or a file gives what the command gives; bad terms are InputErrors, html a ConfigError."""
    import nmt
    from nmt.core.errors import ConfigError, InputError

    # every source word a term: each target word is aligned to one of them, so at least one is placed
    forced = translator.translate(["A dog runs."], glossary={"a": "Xa", "dog": "Xdog", "runs": "Xruns"})[0]
    assert any(term in forced for term in ("Xa", "Xdog", "Xruns")), forced
    assert translator.translate(["Two cats."], glossary={"dog": "Köter"}) == translator.translate(["Two cats."])
    with pytest.raises(InputError, match="give non-empty str terms"):
        translator.translate(["x"], glossary={"dog": " "})
    with pytest.raises(ConfigError, match="^glossary with format html"):
        translator.translate(["<p>A dog.</p>"], format="html", glossary={"dog": "Köter"})
    with pytest.raises(TypeError, match="glossary takes"):
        translator.translate(["x"], glossary=["dog"])
    # the methods of --glossary-method: a constrained search writes the term (the tiny model knows no German)
    for method in ("auto", "constrain"):
        assert "Köter" in translator.translate(["A dog runs."], glossary={"dog": "Köter"}, glossary_method=method)[0]
    with pytest.raises(ConfigError, match="glossary_method constrain with sampling"):
        translator.translate(["A dog."], glossary={"dog": "Köter"}, glossary_method="constrain", sampling=True)
    with pytest.raises(ConfigError, match="glossary_method"):
        translator.translate(["A dog."], glossary={"dog": "Köter"}, glossary_method="force")
    assert isinstance(nmt.Translator, type)
