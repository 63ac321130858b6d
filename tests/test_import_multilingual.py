"""`nmt import marian` of OPUS-MT's multilingual models (a target-language token such as `>>fra<<` first in every
source) and of the tc-big layout, and nmt's search with an imported model's defaults as transformers' generate with
the model's own generation config.

The models are small random Marian models that transformers builds here, as in test_import_marian.py. Checked:
- a multilingual model imports with its directions and target tags (the nmt id of each `>>xxx<<` piece); with a
  tag first, as MarianTokenizer puts it, the same pieces and every log-probability within 1e-5;
- the tc-big layout (eos not 0, `<s>` and `<unk>` first, relu, 1024 positions): the same;
- config.json's untied flags (share_encoder_decoder_embeddings, tie_word_embeddings false) with one table in
  the weights import and compute the same; an lm_head of its own (tie_word_embeddings false) imports as an untied
  output projection, the same on both engines; source and target tables that differ are refused in one line;
- 20 lines, greedy and beam 4: nmt, with the checkpoint's search defaults (no early stopping, the EOS forced at
  the limit scored 0), gives generate's outputs with the model's generation config (num_beams 4, max_length 32,
  early_stopping left at transformers' false), token for token, and its scores within 1e-5. A multilingual
  model is searched on ids built here (the tag first) and through the engine's `with_direction`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_import_marian import (
    LINES,
    SAMPLE_DIR,
    assert_same_log_probs,
    build_folder,
    hf_pieces,
    import_each,
    make_tokenizer_files,
    transformers_of,
)
from test_import_marian import stock_generation as stock

from nmt.config import InferenceConfig, Overrides, SearchConfig
from nmt.core.errors import NmtError
from nmt.core.vocab import BOS, EOS
from nmt.engines.torch_engine import TorchEngine
from nmt.importers.marian import import_marian
from nmt.model import checkpoint

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

MAX_LENGTH = 32  # the generation config's max_length: nmt's limit is 30 tokens + EOS
TAGS = (">>fra<<", ">>ita<<", ">>spa<<")
LINES20 = (SAMPLE_DIR / "test.en").read_text(encoding="utf-8").splitlines()[:20]
ENDING = dict(ends_at=8.0, slope=2.0)  # outputs that end on their own (test_import_marian's end_around)


def with_tags(files: dict) -> dict:
    """The tokenizer files with OPUS-MT's target-language tokens in vocab.json, after </s> and <unk>."""
    old = json.loads(files["vocab.json"])
    pieces = [p for p, _ in sorted(old.items(), key=lambda item: item[1])]
    return {**files, "vocab.json": json.dumps({p: i for i, p in enumerate(pieces[:2] + list(TAGS) + pieces[2:])})}


def tc_big_layout(files: dict) -> dict:
    """vocab.json as a tc-big model's may be: <s> and <unk> first, </s> among the pieces (eos not 0), <pad> last."""
    old = json.loads(files["vocab.json"])
    pieces = [p for p, _ in sorted(old.items(), key=lambda item: item[1]) if p not in ("</s>", "<unk>", "<pad>")]
    order = ["<s>", "<unk>", *pieces[:40], "</s>", *pieces[40:], "<pad>"]
    return {**files, "vocab.json": json.dumps({p: i for i, p in enumerate(order)})}


def untie(model) -> None:
    """tie_word_embeddings false: transformers keeps four tables; here all four the same one."""
    for module in (model.model.encoder.embed_tokens, model.model.decoder.embed_tokens, model.lm_head):
        module.weight.copy_(model.model.shared.weight)


def own_head(model) -> None:
    """tc-big's tie_word_embeddings false with an lm_head of its own: the input tables one, the output another."""
    for module in (model.model.encoder.embed_tokens, model.model.decoder.embed_tokens):
        module.weight.copy_(model.model.shared.weight)
    torch.nn.init.normal_(model.lm_head.weight, std=0.2)


def unshare(model) -> None:
    """share_encoder_decoder_embeddings false: the encoder's and the decoder's tables, here the same."""
    model.model.decoder.embed_tokens.weight.copy_(model.model.encoder.embed_tokens.weight)


MODELS = {  # name: (the tokenizer files' change, build_folder's arguments)
    "multilingual": (with_tags, dict(config=dict(activation_function="swish", scale_embedding=True, init_std=0.2),
                                     **ENDING)),
    "tc-big": (tc_big_layout, dict(config=dict(activation_function="relu", scale_embedding=True, init_std=0.08,
                                               max_position_embeddings=1024), **ENDING)),
    "flags-false": (None, dict(config=dict(activation_function="relu", scale_embedding=True, init_std=0.08,
                                           tie_word_embeddings=False), edit=untie)),
    "untied": (tc_big_layout, dict(config=dict(activation_function="relu", scale_embedding=True, init_std=0.08,
                                               tie_word_embeddings=False), edit=own_head, **ENDING)),
    "unshared": (None, dict(config=dict(activation_function="gelu", scale_embedding=False, init_std=0.2,
                                        share_encoder_decoder_embeddings=False), edit=unshare)),
    # OPUS-MT's usual layout, as test_import_marian.py's "peaky", "ending" and "relu"
    "peaky": (None, dict(config=dict(activation_function="swish", scale_embedding=True, init_std=0.5))),
    "ending": (None, dict(config=dict(activation_function="gelu", scale_embedding=False, init_std=0.2), **ENDING)),
    "relu": (None, dict(config=dict(activation_function="relu", scale_embedding=True, init_std=0.08),
                        weights="pytorch_model.bin", **ENDING)),
}
FOLDER_NAMES = {"multilingual": "opus-mt-en-romance", "tc-big": "opus-mt-tc-big-en-de", "untied": "opus-mt-tc-big-en-fr"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    files = make_tokenizer_files()
    root = tmp_path_factory.mktemp("multilingual")
    out = {}
    for name, (change, spec) in MODELS.items():
        out[name] = build_folder(root / FOLDER_NAMES.get(name, f"opus-mt-{name}"), change(files) if change else files,
                                 **spec)
        stock(out[name], MAX_LENGTH)
    (out["multilingual"] / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en",
                                                                           "target_lang": "ROMANCE"}))
    return out


@pytest.fixture(scope="module")
def imported(folders, tmp_path_factory) -> dict[str, Path]:
    return import_each(folders, tmp_path_factory.mktemp("imported"))


@pytest.fixture(scope="module")
def hf(folders):
    return transformers_of(folders)


# -- what the import records ---------------------------------------------------------------------------------


def test_a_multilingual_model_has_a_direction_and_a_tag_per_target(folders, imported):
    imported_model = import_marian(folders["multilingual"])
    data = imported_model.checkpoint.data
    assert (data.src, data.tgt) == ("en", "fra+ita+spa")
    assert data.pairs == (("en", "fra"), ("en", "ita"), ("en", "spa"))
    pieces = imported_model.checkpoint.tokenizer["pieces"]
    assert {lang: pieces[i] for lang, i in data.tags} == {"fra": ">>fra<<", "ita": ">>ita<<", "spa": ">>spa<<"}
    # Marian's ids 2, 3, 4, after nmt's PAD, UNK, BOS, EOS (Marian's pad, unk, pad, eos: ids 0 and 1 are in them)
    assert [data.tag(t) for t in ("fra", "ita", "spa")] == [4, 5, 6]
    assert any("choose one with nmt translate --tgt-lang" in note for note in imported_model.notes)
    assert checkpoint.load(imported["multilingual"]).data == data  # as stored


@pytest.mark.parametrize("tokenizer_config, name, given, expected", [
    ({"source_lang": "en", "target_lang": "ROMANCE"}, "model", {}, "en"),
    ({}, "opus-mt-en-ROMANCE", {}, "en"),
    ({}, "opus-mt-tc-big-gem-gem", {}, "gem"),  # OPUS-MT's group codes are language codes
    ({"source_lang": "en"}, "model", {"src": "MUL"}, "mul"),
])
def test_the_source_of_a_multilingual_model(tokenizer_config, name, given, expected, folders, tmp_path):
    folder = shutil.copytree(folders["multilingual"], tmp_path / name)
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    assert import_marian(folder, **given).checkpoint.data.src == expected


def test_tgt_is_refused_for_a_multilingual_model(folders):
    with pytest.raises(NmtError) as error:
        import_marian(folders["multilingual"], tgt="fra")
    message = str(error.value)
    assert "\n" not in message and "`tgt` 'fra'" in message and "multilingual" in message
    assert "--tgt-lang" in message and "leave `tgt` out" in message


def retag(*tags: str):
    def edit(folder: Path) -> None:
        vocab = json.loads((folder / "vocab.json").read_text())
        for old, new in zip(TAGS, tags):
            vocab[new] = vocab.pop(old)
        (folder / "vocab.json").write_text(json.dumps(vocab))
    return edit


@pytest.mark.parametrize("tags, targets, left", [
    ((">>fra<<", ">>ITA<<", ">>eng_Latn<<"), "fra+ita+eng_latn", None),  # codes lower-cased, subtags kept
    ((">>fra<<", ">>ita<<", ">>en<<"), "fra+ita", ">>en<<"),  # the source's own language
    ((">>fra<<", ">>FRA<<", ">>ita<<"), "fra+ita", ">>FRA<<"),  # twice
    ((">>fra<<", ">>1<<", ">>ita<<"), "fra+ita", ">>1<<"),  # no language code
])
def test_tags_that_name_no_other_target_are_left_out(tags, targets, left, folders, tmp_path):
    folder = shutil.copytree(folders["multilingual"], tmp_path / "model")
    retag(*tags)(folder)
    found = import_marian(folder)
    assert found.checkpoint.data.tgt == targets
    notes = [n for n in found.notes if "left out" in n]
    assert notes == ([] if left is None else [f"note: vocab.json's {left} left out of the target languages (not a "
                                                "language code, twice, or the source's)"])


def test_a_many_to_one_model_stays_bilingual(folders, tmp_path):
    """opus-mt-mul-en: no >>xxx<< tokens (its source needs none), the source a group code."""
    folder = shutil.copytree(folders["relu"], tmp_path / "opus-mt-mul-en")
    (folder / "tokenizer_config.json").write_text("{}")
    data = import_marian(folder).checkpoint.data
    assert (data.src, data.tgt, data.pairs, data.tags) == ("mul", "en", (), ())


def test_an_output_projection_of_its_own_is_kept(imported):
    """tc-big's lm_head, not the embedding table: nmt's model then projects with a matrix of its own."""
    ckpt = checkpoint.load(imported["untied"])
    assert ckpt.model_config.tied_output is False
    assert not torch.equal(ckpt.weights["output_weight"], ckpt.weights["embed.weight"])
    assert checkpoint.load(imported["relu"]).model_config.tied_output is True


def test_the_engines_agree_on_an_untied_model(imported, tmp_path):
    """The CTranslate2 export takes the untied projection too: both engines give the same lines."""
    from nmt.engines.choice import open_engine

    outputs = []
    for engine in ("torch", "ctranslate2"):
        opened = open_engine([imported["untied"]], Overrides(SearchConfig, {"beam": 1}),
                             Overrides(InferenceConfig, {"engine": engine}))
        outputs.append([t.text for t in opened.translate_chunk(LINES20)])
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize("name, words", [
    ("separate", ["decoder.embed_tokens.weight differs from encoder.embed_tokens.weight",
                  "(share_encoder_decoder_embeddings false)", "cannot express"]),
])
def test_untied_tables_are_refused_in_one_line(name, words, tmp_path):
    """Separate source and target embeddings: nmt's model has one input table for the source and the target."""
    files = make_tokenizer_files()
    config, edit = dict(activation_function="relu", share_encoder_decoder_embeddings=False), None
    folder = build_folder(tmp_path / "opus-mt-tc-big-en-de", files, config=config, edit=edit)
    with pytest.raises(NmtError) as error:
        import_marian(folder)
    message = str(error.value)
    assert "\n" not in message and message.startswith(str(folder / "model.safetensors")), message
    for word in words:
        assert word in message, message


# -- the same as transformers -------------------------------------------------------------------------------


@pytest.mark.parametrize("name, tag", [("multilingual", ">>ita<<"), ("multilingual", ">>spa<<"), ("tc-big", ""),
                                       ("flags-false", ""), ("unshared", ""), ("untied", "")])
def test_log_probs_equal_transformers(name, tag, hf, imported):
    assert_same_log_probs(*hf[name], imported[name], tag)


def test_the_tc_big_layout_is_recorded(imported, folders):
    ckpt = checkpoint.load(imported["tc-big"])
    vocab = json.loads((folders["tc-big"] / "vocab.json").read_text())
    assert vocab["</s>"] != 0 and ckpt.tokenizer["pieces"][EOS] == "</s>"
    assert ckpt.model_config.max_positions == 1024 and ckpt.languages == ("en", "de")


def generate(hf_model, tok, lines: list[str], beam: int):
    """transformers' generate with the model's generation config (greedy: num_beams 1)."""
    batch = tok(lines, return_tensors="pt", padding=True)
    return hf_model.generate(**batch, num_beams=beam, output_scores=True, return_dict_in_generate=True)


def nmt_search(path: Path, lines: list[str], beam: int, tag: str = ""):
    """nmt's hypotheses with the checkpoint's search defaults (--beam given), on ids built here: the tag's id
    first, as MarianTokenizer puts it, then the pieces and EOS."""
    translator = TorchEngine(path, Overrides(SearchConfig, {"beam": beam}))
    first = [translator.data.tag(tag[2:-2])] if tag else []
    encoded = [first + ids + [EOS] for ids in translator.tokenizer.encode(lines)]
    return translator, [hyps[0] for hyps in translator.search_batch(encoded, list(range(len(lines))))]


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("name, tag", [("peaky", ""), ("ending", ""), ("relu", ""), ("tc-big", ""),
                                       ("flags-false", ""), ("unshared", ""), ("untied", ""), ("multilingual", ">>fra<<"),
                                       ("multilingual", ">>spa<<")])
def test_20_lines_as_generate_with_the_models_generation_config(name, tag, beam, hf, imported):
    """Token for token; beam search's scores within 1e-5 (transformers' length-normalised ones)."""
    model, tok = hf[name]
    out = generate(model, tok, [f"{tag} {line}" if tag else line for line in LINES20], beam)
    translator, hyps = nmt_search(imported[name], LINES20, beam, tag)
    assert translator.search_cfg.early_stopping is False
    same = [hf_pieces(tok, row.tolist()[1:]) == translator.tokenizer.pieces(h.tokens)
            for row, h in zip(out.sequences, hyps)]
    assert sum(same) == len(LINES20), same
    if beam > 1:
        for i, h in enumerate(hyps):
            assert abs(out.sequences_scores[i].item() - h.score) < 1e-5, i


def test_with_early_stopping_beam_search_differs_from_generate(hf, imported):
    """nmt's own rule (--early-stopping) on the same model: some lines differ (which is what the default fixes)."""
    model, tok = hf["ending"]
    out = generate(model, tok, LINES20, 4)
    translator = TorchEngine(imported["ending"], Overrides(SearchConfig, {"early_stopping": True}))
    ours = [translator.tokenizer.pieces(t.hypotheses[0][1].tokens) for t in translator.translate_chunk(LINES20)]
    assert sum(hf_pieces(tok, row.tolist()[1:]) == o for row, o in zip(out.sequences, ours)) < len(LINES20)


def test_the_engine_puts_the_tag_first(hf, imported):
    """`with_direction(src, tgt)`: the engine's own translations are those of the ids built here (tag first)."""
    translator, hyps = nmt_search(imported["multilingual"], LINES, 4, ">>ita<<")
    engine = translator.with_direction("en", "ita")
    assert [t.hypotheses[0][1].tokens for t in engine.translate_chunk(LINES)] == [h.tokens for h in hyps]
    with pytest.raises(NmtError, match="fra, ita, spa"):
        translator.translate_chunk(LINES[:1])  # no target chosen


def test_the_tags_differ(imported):
    """Each tag gives the same source another distribution of the first target token (the tags reach the model)."""
    translator = TorchEngine(imported["multilingual"])
    ids = translator.tokenizer.encode(LINES[:1])[0] + [EOS]
    src = torch.tensor([[translator.data.tag(tag[2:-2]), *ids] for tag in TAGS])
    with torch.no_grad():
        first = translator.model.step(torch.full((3,), BOS), translator.model.start_decoding(src))  # (3, V)
    assert all((first[i] - first[j]).abs().max() > 1e-3 for i, j in ((0, 1), (0, 2), (1, 2)))


def test_the_search_defaults_of_an_imported_model(imported):
    cfg = TorchEngine(imported["tc-big"]).search_cfg
    assert (cfg.beam, cfg.lenpen, cfg.lenpen_type, cfg.max_len_a, cfg.max_len_b, cfg.early_stopping) == (
        4, 1.0, "power", 0.0, MAX_LENGTH - 2, False)


def test_ctranslate2_cannot_search_without_early_stopping(imported, tmp_path, monkeypatch):
    """Under --engine auto, an imported model's beam search (no early stopping) runs on torch, which says why; its
    greedy search on CTranslate2 (no early stopping to do). --engine ctranslate2: its own rule, with a note."""
    pytest.importorskip("ctranslate2")
    from nmt.config import InferenceConfig
    from nmt.engines.choice import open_engine

    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))

    def opened(engine: str, beam: int) -> tuple[str, list[str]]:
        said: list[str] = []
        found = open_engine([imported["relu"]], Overrides(SearchConfig, {"beam": beam}),
                            Overrides(InferenceConfig, {"engine": engine, "threads": 1}),
                            progress=lambda p: said.append(p.message or ""))
        return found.name, said

    name, said = opened("auto", 4)
    assert name == "torch" and any("always stops early" in s and "`-early_stopping`" in s for s in said), said
    name, said = opened("auto", 1)
    assert name == "ctranslate2", said
    name, said = opened("ctranslate2", 4)
    assert name == "ctranslate2" and any("whatever `-early_stopping` asks" in s for s in said), said


@settings(derandomize=True, max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["ending", "relu", "multilingual", "unshared"]), beam=st.integers(2, 6),
       lenpen=st.sampled_from([-0.5, 0.0, 0.6, 1.0, 1.5, 2.5]), max_length=st.integers(4, 40))
def test_beam_search_as_generate_for_any_beam_length_penalty_and_limit(name, beam, lenpen, max_length, hf, imported):
    """Beyond the models' own settings: other beams, length penalties (a large one favours length, where
    transformers' rule goes on searching) and length limits. At most one line of 8 may differ: a random model's
    near-ties (log-probabilities within 1e-6 of each other) fall either way on another CPU's last bits."""
    model, tok = hf[name]
    tag = ">>ita<<" if name == "multilingual" else ""
    lines = LINES20[:8]
    batch = tok([f"{tag} {line}" if tag else line for line in lines], return_tensors="pt", padding=True)
    out = model.generate(**batch, num_beams=beam, length_penalty=lenpen, max_length=max_length, output_scores=True,
                         return_dict_in_generate=True)
    translator = TorchEngine(imported[name], Overrides(SearchConfig, {"beam": beam, "lenpen": lenpen,
                                                                     "max_len_b": max_length - 2}))
    first = [translator.data.tag(tag[2:-2])] if tag else []
    encoded = [first + ids + [EOS] for ids in translator.tokenizer.encode(lines)]
    hyps = [h[0] for h in translator.search_batch(encoded, list(range(len(lines))))]
    # scores within 1e-5, relative where a negative length penalty multiplies them (-41.47412 and -41.47411)
    same = [hf_pieces(tok, row.tolist()[1:]) == translator.tokenizer.pieces(h.tokens)
            and abs(out.sequences_scores[i].item() - h.score) < 1e-5 * max(1.0, abs(h.score))
            for i, (row, h) in enumerate(zip(out.sequences, hyps))]
    assert sum(same) >= len(lines) - 1, same
