"""`nmt serve` of multilingual checkpoints: every direction of one loaded model served (/v1/translate and
LibreTranslate's routes), beside bilingual checkpoints (a direction of both: the bilingual one's), a many-to-one
model's source picking the sentence rules. The models are untrained, made here in a moment (random weights,
scaled so that the output depends on the input and on the target tag): what matters is that the server answers
what `nmt translate` answers."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
pytest.importorskip("python_multipart")
pytest.importorskip("fastapi_offline")
import requests  # noqa: E402
import torch  # noqa: E402
from conftest import BPE_MODELS, SAMPLE_DIR  # noqa: E402
from test_cli import assert_user_error, nmt, ok  # noqa: E402
from test_serve import Server, StubDetector, on_uvicorn  # noqa: E402

from nmt.config import InferenceConfig, ModelConfig, ServeConfig, TrainConfig  # noqa: E402
from nmt.core.errors import ConfigError  # noqa: E402
from nmt.core.identity import DataIdentity  # noqa: E402
from nmt.engines.choice import open_engine  # noqa: E402
from nmt.model.checkpoint import Checkpoint, load, save  # noqa: E402
from nmt.model.transformer import Transformer  # noqa: E402
from nmt.serve.backend import open_directions, plan  # noqa: E402
from nmt.text.tokenizer import from_file, identity  # noqa: E402

SCALE = 6.0  # random weights this much larger: an untrained model whose output follows its input (and its tag)
TORCH = InferenceConfig(engine="torch", threads=1)
MODELS = {  # name: (directions, seed)
    "multi": ([("en", "de"), ("en", "fr")], 1),
    "twin": ([("en", "de"), ("en", "fr")], 2),  # the same languages: an ensemble with multi
    "other": ([("en", "fr"), ("en", "cs")], 3),  # shares en -> fr with multi, its tags differ
    "many": ([("de", "en"), ("fr", "en"), ("cs", "en")], 4),  # many-to-one: no tags
    "enfr": ([("en", "fr")], 5),  # bilingual
    "ende": ([("en", "de")], 6),  # bilingual
}


def build(path: Path, pairs: list[tuple[str, str]], seed: int) -> Path:
    """An untrained checkpoint of the sample BPE model (300 pieces) translating `pairs` (several: multilingual,
    with a target tag after the pieces for each target where there are several)."""
    tokenizer = from_file(BPE_MODELS[300])
    data, size = tokenizer.to_data(), tokenizer.vocab_size
    sources, targets = (list(dict.fromkeys(p[i] for p in pairs)) for i in (0, 1))
    tags = {tgt: size + i for i, tgt in enumerate(targets)} if len(targets) > 1 else {}
    record = {"src": "+".join(sources), "tgt": "+".join(targets), "vocab_size": size + len(tags), **identity(data)}
    if len(pairs) > 1:
        record.update(pairs=[list(p) for p in pairs], tags=tags)
    cfg = ModelConfig(vocab_size=size + len(tags), d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64,
                      max_positions=128)
    torch.manual_seed(seed)
    weights = {k: w * SCALE if w.dim() > 1 else w for k, w in Transformer(cfg).state_dict().items()}
    save(path, Checkpoint(cfg, TrainConfig(), DataIdentity.from_dict(record, str(path)), data, weights))
    return path


def data_of(path: Path) -> DataIdentity:
    """What the checkpoint says of its languages (as `nmt serve` reads it)."""
    return load(path, mmap=True).data


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("multilingual")
    return {name: build(folder / f"{name}.pt", pairs, seed) for name, (pairs, seed) in MODELS.items()}


@pytest.fixture(scope="module")
def sources() -> list[str]:
    return (SAMPLE_DIR / "test.en").read_text(encoding="utf-8").splitlines()[:5]


@pytest.fixture(scope="module")
def offline(ckpts, sources) -> dict[tuple[str, str], list[str]]:
    """`nmt translate` of `sources` on the torch engine: (model, target) -> lines."""
    runs = {("multi", "de"): ("--tgt-lang", "de"), ("multi", "fr"): ("--tgt-lang", "fr"), ("enfr", "fr"): ()}
    text = "".join(s + "\n" for s in sources)
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        done = {key: pool.submit(nmt, "translate", "-m", ckpts[key[0]], "--engine", "torch", "--threads", "1", *args,
                                 input=text) for key, args in runs.items()}
    return {key: ok(r.result()).stdout.splitlines() for key, r in done.items()}


@contextlib.contextmanager
def in_process(paths: list[Path]):
    """The server of `paths` in this process (torch engine, StubDetector): its URL, its engines and the groups of
    checkpoints opened (one list per engine loaded)."""
    from nmt.serve.app import create_app

    opened: list[list[Path]] = []

    def opener(group: list[Path]):
        opened.append(group)
        return open_engine(group, None, TORCH)

    engines, infos = open_directions(paths, opener, data_of)
    gate = create_app(engines, infos, ServeConfig(quiet_ms=0, max_wait_ms=0), detector=StubDetector)
    with on_uvicorn(gate) as url:
        yield url, engines, opened


def post(url: str, path: str, body: dict) -> requests.Response:
    return requests.post(url + path, json=body, timeout=60)


@pytest.fixture(scope="module")
def multi_server(ckpts):
    with in_process([ckpts["multi"]]) as served:
        yield served


# -- one multilingual checkpoint -------------------------------------------------------------------------


def test_every_direction_answers_as_translate_from_one_loaded_model(multi_server, ckpts, sources, offline):
    url, engines, opened = multi_server
    assert len(opened) == 1 and len(engines) == 2 and engines[0].model is engines[1].model  # loaded once
    assert [e.languages for e in engines] == [("en", "de"), ("en", "fr")]
    assert offline["multi", "de"] != offline["multi", "fr"]  # the tag matters: the test can tell them apart
    for target in ("de", "fr"):
        r = post(url, "/v1/translate", {"text": sources, "source": "en", "target": target})
        assert r.status_code == 200, r.text
        assert r.json()["translations"] == offline["multi", target]
        assert (r.json()["model"]["src"], r.json()["model"]["tgt"], r.json()["model"]["name"]) == (
            "en", target, f"{ckpts['multi'].parent.name}/multi.pt")
        r = post(url, "/translate", {"q": sources, "source": "en", "target": target})
        assert r.json() == {"translatedText": offline["multi", target]}
        r = post(url, "/translate", {"q": sources[0], "source": "auto", "target": target})
        assert r.json()["translatedText"] == offline["multi", target][0]
        assert r.json()["detectedLanguage"]["language"] == "en"
    r = post(url, "/v1/translate", {"text": sources[0], "target": "fr"})  # the source left out: the one there is
    assert r.json()["translations"] == offline["multi", "fr"][:1]


def test_languages_settings_health_and_files(multi_server, sources, offline):
    url, _, _ = multi_server
    assert requests.get(url + "/languages", timeout=10).json() == [
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "fr", "name": "French", "targets": []},
        {"code": "de", "name": "German", "targets": []}]
    settings = requests.get(url + "/frontend/settings", timeout=10).json()["language"]
    assert (settings["source"]["code"], settings["target"]["code"]) == ("en", "de")
    models = requests.get(url + "/health", timeout=10).json()["models"]
    assert [(m["src"], m["tgt"]) for m in models] == [("en", "de"), ("en", "fr")]
    assert len({m["sha256"] for m in models}) == 1
    r = requests.post(url + "/translate_file", data={"source": "en", "target": "fr"},
                      files={"file": ("notes.txt", "\n".join(sources[:2]).encode())}, timeout=60)
    assert r.status_code == 200, r.text
    assert requests.get(r.json()["translatedFileUrl"], timeout=30).text == "\n".join(offline["multi", "fr"][:2])


@pytest.mark.parametrize("path, body, status, words", [
    ("/v1/translate", {"text": "a", "source": "en", "target": "cs"}, 422,
     "does not translate en -> cs; it translates en -> de, fr"),
    ("/v1/translate", {"text": "a"}, 422, "give source and target: this server translates en -> de, fr"),
    ("/translate", {"q": "a", "source": "en", "target": "cs"}, 400,
     "cs is not supported: this server translates en to de, fr"),
    ("/translate", {"q": "a", "source": "auto", "target": "cs"}, 400, "this server translates en to de, fr"),
    ("/translate", {"q": "a", "source": "de", "target": "fr"}, 400, "de is not supported"),
])
def test_a_pair_not_served_is_a_json_error_naming_the_pairs_served(multi_server, path, body, status, words):
    url, _, _ = multi_server
    r = post(url, path, body)
    assert r.status_code == status and r.headers["content-type"] == "application/json", r.text
    assert words in r.json()["error"], r.json()


# -- many to one -----------------------------------------------------------------------------------------


def test_a_many_to_one_model_serves_each_source_with_its_sentence_rules(ckpts):
    """de, fr, cs -> en without tags: one engine; the source chosen cuts the text: German keeps "am 3. Mai"
    in one sentence, French cuts it after "3."."""
    text = "Er kam am 3. Mai an. Dann ging er."
    with in_process([ckpts["many"]]) as (url, engines, opened):
        assert len(opened) == 1 and [e.languages for e in engines] == [("de", "en"), ("fr", "en"), ("cs", "en")]
        assert all(e.model is engines[0].model for e in engines)

        def alone(sentences: list[str], src: str) -> str:  # each sentence a text of its own
            r = post(url, "/v1/translate", {"text": sentences, "source": src, "target": "en"})
            return " ".join(r.json()["translations"])

        got = {src: post(url, "/v1/translate", {"text": text, "source": src})
               .json()["translations"][0] for src in ("de", "fr")}
        assert got["de"] == alone(["Er kam am 3. Mai an.", "Dann ging er."], "de")
        assert got["fr"] == alone(["Er kam am 3.", "Mai an.", "Dann ging er."], "fr")
        assert got["de"] != got["fr"]
        assert requests.get(url + "/languages", timeout=10).json() == [
            {"code": "cs", "name": "Czech", "targets": ["en"]}, {"code": "en", "name": "English", "targets": []},
            {"code": "fr", "name": "French", "targets": ["en"]}, {"code": "de", "name": "German", "targets": ["en"]}]
        r = post(url, "/translate", {"q": "Bonjour [fr]", "source": "auto", "target": "en"})
        assert r.json()["detectedLanguage"] == {"confidence": 90.0, "language": "fr"}
        r = post(url, "/v1/translate", {"text": "a", "target": "en"})
        assert r.status_code == 422 and "de -> en, fr -> en, cs -> en" in r.json()["error"]


# -- several checkpoints ---------------------------------------------------------------------------------


def test_which_checkpoint_serves_a_direction_offered_twice(ckpts):
    """The same languages: an ensemble; a bilingual checkpoint takes its direction from a multilingual one (said);
    two multilingual checkpoints of other languages sharing a direction, or a multilingual one left nothing: one
    line naming both files."""
    multi, twin, other, enfr, ende = (ckpts[n] for n in ("multi", "twin", "other", "enfr", "ende"))
    assert [(g.paths, g.directions) for g in plan([multi, twin], data_of)] == [
        ([multi, twin], [("en", "de"), ("en", "fr")])]
    said: list[str] = []
    assert [(g.paths, g.directions) for g in plan([multi, enfr], data_of, said.append)] == [
        ([multi], [("en", "de")]), ([enfr], [("en", "fr")])]
    assert said == [f"en -> fr: served by {enfr}, not by the multilingual {multi} (a bilingual checkpoint is "
                    "preferred)"]
    with pytest.raises(ConfigError, match=f"^{multi} and {other} both translate en -> fr, and an ensemble needs"):
        plan([multi, other], data_of)
    assert [g.directions for g in plan([multi, other, enfr], data_of)] == [
        [("en", "de")], [("en", "cs")], [("en", "fr")]]
    assert [(g.paths, g.directions) for g in plan([ende, multi], data_of)] == [([ende], [("en", "de")]),
                                                                       ([multi], [("en", "fr")])]
    with pytest.raises(ConfigError, match=f"^{multi}: every direction it translates \\(en -> de, en -> fr\\) is"):
        plan([ende, multi, enfr], data_of)


def test_an_ensemble_of_multilingual_checkpoints(ckpts, sources):
    engines, infos = open_directions([ckpts["multi"], ckpts["twin"]], lambda group: open_engine(group, None, TORCH),
                                     data_of, names=["multi", "twin"])
    assert [(i.src, i.tgt, i.name) for i in infos] == [("en", "de", "multi + twin"), ("en", "fr", "multi + twin")]
    with pytest.raises(ConfigError, match=r"^`name`: 1 name\(s\) for 2 checkpoint\(s\) \(`model`\); give one per"):
        open_directions([ckpts["multi"], ckpts["twin"]], lambda group: open_engine(group, None, TORCH), data_of,
                        names=["multi"])
    assert engines[0].model is engines[1].model and len(engines[0].model.models) == 2
    de, fr = ([t.text for t in e.translate_chunk(sources[:2])] for e in engines)
    assert de != fr


def test_a_multilingual_and_bilingual_checkpoints_in_one_server(ckpts, sources, offline):
    """`nmt serve -m multi.pt -m enfr.pt -m many.pt` (the default engine): en -> de is multi's, en -> fr enfr's
    (said at start), de/fr/cs -> en many's; each model loaded once; libretranslatepy works against it."""
    libretranslatepy = pytest.importorskip("libretranslatepy")
    srv = Server(ckpts["multi"], "-m", str(ckpts["enfr"]), "-m", str(ckpts["many"]))
    try:
        models = requests.get(srv.url + "/health", timeout=10).json()["models"]
        # named by their folder and file where no --name is given (two runs' averaged.pt stay apart)
        multi, enfr, many = (f"{ckpts[k].parent.name}/{k}.pt" for k in ("multi", "enfr", "many"))
        assert [(m["src"], m["tgt"], m["name"]) for m in models] == [
            ("en", "de", multi), ("en", "fr", enfr), ("de", "en", many), ("fr", "en", many), ("cs", "en", many)]
        for target, model in (("de", "multi"), ("fr", "enfr")):
            r = srv.post("/v1/translate", {"text": sources, "source": "en", "target": target})
            assert r.json()["translations"] == offline[model, target], r.text
        lt = libretranslatepy.LibreTranslateAPI(srv.url)
        assert lt.languages() == [
            {"code": "cs", "name": "Czech", "targets": ["en"]},
            {"code": "en", "name": "English", "targets": ["de", "fr"]},
            {"code": "fr", "name": "French", "targets": ["en"]},
            {"code": "de", "name": "German", "targets": ["en"]}]
        assert lt.translate(sources[0], "en", "de") == offline["multi", "de"][0]
        assert lt.translate(sources[0], "auto", "fr") == offline["enfr", "fr"][0]
        r = srv.post("/translate", {"q": "Ein Mann mit einem roten Hut geht mit seinem Hund durch den Park.",
                                    "source": "auto", "target": "en"})
        assert r.json()["detectedLanguage"]["language"] == "de", r.text
        r = srv.post("/translate", {"q": "a", "source": "en", "target": "cs"})
        assert r.status_code == 400 and r.json()["error"].endswith("this server translates en to de, fr; de to en; "
                                                                   "fr to en; cs to en")
    finally:
        code, stderr = srv.stop()
    assert code == 0, stderr
    assert f"en -> fr: served by {ckpts['enfr']}, not by the multilingual {ckpts['multi']}" in stderr
    assert "multi.pt (en -> de, " in stderr and "many.pt (de -> en, fr -> en, cs -> en, " in stderr
    try:  # auto names the engine of each checkpoint it opens: one per checkpoint, not one per direction
        import ctranslate2  # noqa: F401
        assert stderr.count("engine: ctranslate2 (auto") == 3, stderr
    except ImportError:
        pass


def test_two_multilingual_checkpoints_sharing_a_direction_is_one_line(ckpts):
    r = nmt("serve", "-m", ckpts["multi"], "-m", ckpts["other"], "--port", "0")
    line = assert_user_error(r, str(ckpts["multi"]), str(ckpts["other"]), "en -> fr")
    assert line.startswith(f"error: {ckpts['multi']} and {ckpts['other']} both translate en -> fr")

