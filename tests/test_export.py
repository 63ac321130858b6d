"""`nmt export --format ctranslate2`: the exported model computes what nmt computes and searches alike.

Also: int8 / precision options of translation, and the start-up promise that `nmt --help` never
imports torch. The CTranslate2 tests are skipped when ctranslate2 is not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import SAMPLE_DIR, torch_threads

from nmt.compute.precision import prepare_model
from nmt.config import ModelConfig, TrainConfig
from nmt.core.errors import ConfigError, InputError, OutputError
from nmt.core.vocab import BOS, EOS, PAD, UNK
from nmt.data.dataset import DataIdentity
from nmt.engines.search import Hypothesis, SearchConfig
from nmt.engines.torch_engine import TorchEngine
from nmt.model import checkpoint
from nmt.model.transformer import Transformer
from nmt.text.bpe import BpeTokenizer
from nmt.text.tokenizer import digest
from nmt.text.tokenizer import from_file as tokenizer_from_file

N_LINES = 50


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def sample_lines() -> list[str]:
    with open(SAMPLE_DIR / "test.en", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(N_LINES)]


def random_checkpoint(path: Path, bpe: Path, norm="pre", positions="sinusoidal", seed=0) -> Path:
    """A randomly initialised tiny model with the vocabulary of `bpe` (youtokentome or SentencePiece),
    saved as an nmt checkpoint."""
    tok = tokenizer_from_file(bpe)
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_heads=4, encoder_layers=2, decoder_layers=2, d_ff=64,
                      max_positions=128, norm=norm, positions=positions).validate()
    model = Transformer(cfg).eval()
    with torch.no_grad():  # LayerNorm weights/biases away from 1/0, so that a misplaced norm shows
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
    data = DataIdentity("en", "de", tok.vocab_size, tok.kind, digest(tok.to_data()))
    checkpoint.save(path, checkpoint.Checkpoint(cfg, TrainConfig(), data, tok.to_data(), model.state_dict()))
    return path


# -- CTranslate2 -----------------------------------------------------------------------------------



@pytest.fixture(scope="module")
def ctranslate2():
    return pytest.importorskip("ctranslate2")


def export_to(ckpt: Path, out: Path, **kw) -> Path:
    from nmt.engines.ct2_export import export_ctranslate2

    export_ctranslate2(ckpt, out, **kw)
    return out


def test_vocabulary_specials_and_ids(tiny_bpe, ctranslate2, tmp_path):
    from nmt.engines.ct2_export import SPECIAL_TOKENS, ctranslate2_vocabulary

    tok = BpeTokenizer.from_file(tiny_bpe)
    vocab = ctranslate2_vocabulary(tok)
    assert len(vocab) == tok.vocab_size == len(set(vocab))
    assert vocab[:4] == ["<blank>", "<unk>", "<s>", "</s>"]
    assert {PAD: "<blank>", UNK: "<unk>", BOS: "<s>", EOS: "</s>"} == SPECIAL_TOKENS
    assert vocab[4:] == tok.pieces(range(4, tok.vocab_size))
    out = export_to(random_checkpoint(tmp_path / "r.pt", tiny_bpe), tmp_path / "ct2")
    config = json.loads((out / "config.json").read_text())
    assert (config["unk_token"], config["bos_token"], config["eos_token"]) == ("<unk>", "<s>", "</s>")
    assert config["decoder_start_token"] == "<s>" and config["add_source_eos"] and not config["add_source_bos"]
    assert json.loads((out / "shared_vocabulary.json").read_text()) == vocab
    assert (out / "bpe.model").read_bytes() == tok.model_bytes
    assert json.loads((out / "nmt_export.json").read_text())["format"] == "nmt-ctranslate2"


def test_sentencepiece_vocabulary_and_files(tiny_spm, ctranslate2, tmp_path, sample_lines):
    """A SentencePiece model exports as youtokentome's does: its pieces are the vocabulary, its model file
    travels with the export, and the exported model translates with it."""
    from nmt.engines.ct2_engine import CTranslate2Engine
    from nmt.engines.ct2_export import ctranslate2_vocabulary

    tok = tokenizer_from_file(tiny_spm)
    vocab = ctranslate2_vocabulary(tok)
    assert vocab[:4] == ["<blank>", "<unk>", "<s>", "</s>"] and vocab[4:] == tok.vocab()[4:]
    assert len(set(vocab)) == len(vocab) == tok.vocab_size
    out = export_to(random_checkpoint(tmp_path / "r.pt", tiny_spm), tmp_path / "ct2")
    assert json.loads((out / "shared_vocabulary.json").read_text()) == vocab
    assert (out / "spm.model").read_bytes() == tiny_spm.read_bytes() and not (out / "bpe.model").exists()
    assert json.loads((out / "nmt_export.json").read_text())["tokenizer"]["kind"] == "sentencepiece"
    translator = CTranslate2Engine(out, SearchConfig(beam=2, lenpen=0.0, max_len_b=5), threads=1)
    assert translator.tokenizer.to_data() == tok.to_data()
    assert len(translator.translate_chunk(sample_lines[:3])) == 3


@pytest.mark.parametrize("norm, positions", [("pre", "sinusoidal"), ("post", "sinusoidal"), ("pre", "learned")])
def test_same_log_probabilities_as_nmt(tiny_bpe, ctranslate2, tmp_path, sample_lines, norm, positions):
    """Teacher-forced token log-probabilities of the exported model equal nmt's (random weights)."""
    from nmt.engines.ct2_export import ctranslate2_vocabulary

    ckpt = random_checkpoint(tmp_path / "r.pt", tiny_bpe, norm=norm, positions=positions)
    out = export_to(ckpt, tmp_path / "ct2")
    model = checkpoint.load(ckpt).build_model()
    tok = BpeTokenizer.from_file(tiny_bpe)
    vocab = ctranslate2_vocabulary(tok)
    engine = ctranslate2.Translator(str(out), intra_threads=1)
    sources = tok.encode(sample_lines[:8])
    targets = tok.encode(sample_lines[8:16])  # any token sequences will do
    scored = engine.score_batch([[vocab[i] for i in s] for s in sources], [[vocab[i] for i in t] for t in targets])
    for src, tgt, res in zip(sources, targets, scored):
        with torch.no_grad():
            lp = model(torch.tensor([src + [EOS]]), torch.tensor([[BOS] + tgt])).log_softmax(-1)[0]
        expected = [lp[i, t].item() for i, t in enumerate(tgt + [EOS])]
        assert res.tokens == [vocab[t] for t in tgt] + ["</s>"]
        assert res.log_probs == pytest.approx(expected, abs=2e-4)


@pytest.mark.parametrize("tokenizer", ["tiny_bpe", "tiny_spm"])
def test_greedy_identical_on_random_model(request, tokenizer, ctranslate2, tmp_path, sample_lines):
    from nmt.engines.ct2_engine import CTranslate2Engine

    ckpt = random_checkpoint(tmp_path / "r.pt", request.getfixturevalue(tokenizer), seed=3)
    out = export_to(ckpt, tmp_path / "ct2")
    cfg = SearchConfig(beam=1, lenpen=0.0, max_len_a=1.0, max_len_b=5)
    ours = TorchEngine(ckpt, cfg).translate_chunk(sample_lines)
    # random weights give PAD and BOS real probability: suppress them as nmt does (arg-max unchanged)
    theirs = CTranslate2Engine(out, cfg, threads=1, suppress_specials=True).translate_chunk(sample_lines)
    assert [t.hypotheses[0][1].tokens for t in ours] == [t.hypotheses[0][1].tokens for t in theirs]


def limit_of(translator, line: str, cfg: SearchConfig) -> int:
    n = len(translator.encode([line], 0)[0]) - 1
    return min(int(cfg.max_len_a * n) + cfg.max_len_b, translator.max_positions - 1)


@pytest.fixture(scope="module")
def ending_checkpoint(tiny_checkpoint, tmp_path_factory) -> Path:
    """The briefly trained tiny model with its EOS embedding scaled up (x3), so that beam hypotheses
    end before the length limit (after 30 updates the model still loops on most lines)."""
    ckpt = checkpoint.load(tiny_checkpoint)
    ckpt.weights["embed.weight"][EOS] *= 3.0
    path = tmp_path_factory.mktemp("ending") / "model.pt"
    checkpoint.save(path, ckpt)
    return path


@pytest.mark.parametrize("beam, lenpen", [(1, 0.0), (4, 0.0), (4, 0.6), (4, 1.0), (5, 1.0)])
@pytest.mark.parametrize("which", ["trained", "ending"])
def test_identical_translations_trained_model(tiny_checkpoint, ending_checkpoint, ctranslate2, tmp_path, sample_lines,
                                              beam, lenpen, which):
    """A briefly trained model: nmt and CTranslate2 give the same tokens, greedy and beam (power penalty).

    Hypotheses that reach the length limit are compared only for greedy search: there nmt forces EOS
    and CTranslate2 stops without it, so beam search may rank them differently (documented).
    """
    from nmt.engines.ct2_engine import CTranslate2Engine

    model = tiny_checkpoint if which == "trained" else ending_checkpoint
    out = export_to(model, tmp_path / "ct2")
    cfg = SearchConfig(beam=beam, lenpen=lenpen, lenpen_type="power", max_len_a=1.5, max_len_b=10, nbest=beam)
    nmt_translator = TorchEngine(model, cfg)
    ours = nmt_translator.translate_chunk(sample_lines)
    theirs = CTranslate2Engine(out, cfg, threads=1).translate_chunk(sample_lines)
    compared = 0
    for line, a, b in zip(sample_lines, ours, theirs):
        limit = limit_of(nmt_translator, line, cfg)
        if beam > 1 and any(len(h.tokens) >= limit for _, h in a.hypotheses + b.hypotheses):
            continue
        compared += 1
        assert a.hypotheses[0][1].tokens == b.hypotheses[0][1].tokens, line
        assert a.text == b.text
        # the scores agree too: same log-probabilities, same length normalisation (EOS counted)
        theirs_by_tokens = {tuple(h.tokens): h for _, h in b.hypotheses}
        for _, h in a.hypotheses:
            g = theirs_by_tokens.get(tuple(h.tokens))
            if g is not None and beam > 1:
                assert g.score == pytest.approx(h.score, abs=2e-4)
                assert g.log_prob == pytest.approx(h.log_prob, abs=2e-3)
    if beam == 1:
        assert compared == N_LINES
    elif which == "ending":
        assert compared >= N_LINES // 2, "the EOS boost no longer makes hypotheses end: compare on another model"


@pytest.mark.parametrize("cfg, expected", [
    # beam search: the K likeliest by log-probability (a penalty of ~0 that is no early exit), ranked by nmt
    (SearchConfig(beam=5, lenpen=0.8, lenpen_type="power", nbest=2), dict(beam_size=5, num_hypotheses=5)),
    (SearchConfig(beam=4, lenpen=0.6, lenpen_type="gnmt"), dict(beam_size=4, num_hypotheses=4)),
    (SearchConfig(beam=1, lenpen=0.0), dict(beam_size=1, num_hypotheses=1)),
    (SearchConfig(sampling=True, nbest=3, topk=10, topp=0.9, temperature=0.7),
     dict(beam_size=1, num_hypotheses=3, sampling_topk=10, sampling_topp=0.9, sampling_temperature=0.7)),
])
def test_ctranslate2_options(ctranslate2, cfg, expected):
    from nmt.engines.ct2_engine import NO_PENALTY, ctranslate2_options

    opts = ctranslate2_options(cfg)
    assert {k: opts[k] for k in expected} == expected
    assert opts["length_penalty"] == NO_PENALTY < 1e-9 and opts["return_end_token"] and opts["return_scores"]
    assert opts["min_decoding_length"] == 0 and opts["max_input_length"] == 0


@pytest.mark.parametrize("lenpen, kind, lengths, order", [
    # log-probabilities -2 (1 token), -3 (3 tokens), -3.5 (6 tokens): the length penalty decides
    (0.0, "gnmt", (1, 3, 6), [0, 1, 2]),
    (1.0, "power", (1, 3, 6), [2, 1, 0]),
    (1.0, "gnmt", (1, 3, 6), [0, 2, 1]),  # where power and GNMT disagree
    (0.3, "gnmt", (1, 3, 6), [0, 1, 2]),
])
def test_rank_hypotheses_uses_nmts_length_penalty(lenpen, kind, lengths, order):
    from nmt.engines.ct2_engine import rank_hypotheses
    from nmt.engines.search import length_penalty

    hyps = [Hypothesis(list(range(4, 4 + n)), 0.0, lp) for n, lp in zip(lengths, (-2.0, -3.0, -3.5))]
    cfg = SearchConfig(beam=3, nbest=3, lenpen=lenpen, lenpen_type=kind)
    ranked = rank_hypotheses(hyps, cfg)
    assert [len(h.tokens) for h in ranked] == [lengths[i] for i in order]
    assert all(h.score == pytest.approx(h.log_prob / length_penalty(len(h.tokens) + 1, lenpen, kind)) for h in ranked)


def test_export_refuses_non_empty_folder_without_force(tiny_bpe, ctranslate2, tmp_path):
    from nmt.engines.ct2_export import export_ctranslate2

    ckpt = random_checkpoint(tmp_path / "r.pt", tiny_bpe)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("x")
    with pytest.raises(InputError, match="`force`"):
        export_ctranslate2(ckpt, tmp_path / "busy")
    assert (tmp_path / "busy" / "keep.txt").exists()
    export_ctranslate2(ckpt, tmp_path / "busy", force=True)
    assert not (tmp_path / "busy" / "keep.txt").exists() and (tmp_path / "busy" / "model.bin").exists()
    with pytest.raises(ConfigError, match="`quantization`"):
        export_ctranslate2(ckpt, tmp_path / "q", quantization="int3")


def folder_digest(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def leftovers(parent: Path) -> list[str]:
    """Staging folders (`.NAME.*`) an export left beside its output."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_export_output_folder_rules(tiny_bpe, ctranslate2, tmp_path):
    """An empty folder is written into without --force; a file in the way is refused even with it."""
    from nmt.engines.ct2_export import export_ctranslate2

    ckpt = random_checkpoint(tmp_path / "r.pt", tiny_bpe)
    (tmp_path / "empty").mkdir()
    result = export_ctranslate2(ckpt, tmp_path / "empty")
    assert (tmp_path / "empty" / "model.bin").exists() and result.vocab_size == BpeTokenizer.from_file(tiny_bpe).vocab_size
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        export_ctranslate2(ckpt, tmp_path / "file", force=True)
    assert (tmp_path / "file").read_text() == "x" and leftovers(tmp_path) == []


def test_failed_export_leaves_the_previous_export_whole(tiny_bpe, ctranslate2, tmp_path, monkeypatch):
    """--force replaces OUT only once the new folder is complete: a failure at any stage leaves the old one."""
    import errno

    import nmt.engines.ct2_export as export

    ckpt = random_checkpoint(tmp_path / "r.pt", tiny_bpe, norm="post")
    out = export_to(ckpt, tmp_path / "ct2")
    before = folder_digest(out)

    def disk_full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:  # writing nmt's files, after CTranslate2 saved the model
        m.setattr(export, "_write_nmt_files", disk_full)
        with pytest.raises(OutputError, match="ct2: cannot write the export .No space left"):
            export.export_ctranslate2(ckpt, out, force=True)
    with monkeypatch.context() as m:  # an architecture option the converter cannot express
        m.setitem(export.EXPORTABLE, "norm", ("pre",))
        with pytest.raises(ConfigError, match="cannot be exported to CTranslate2 .no CTranslate2 equivalent for norm 'post'"):
            export.export_ctranslate2(ckpt, out, force=True)
    with monkeypatch.context() as m:  # a spec left incomplete: Converter.convert's validate raises ValueError
        m.setattr(export, "_ffn", lambda spec, layer: None)
        with pytest.raises(ConfigError, match="CTranslate2 rejected the converted model"):
            export.export_ctranslate2(ckpt, out, force=True)
    assert folder_digest(out) == before and leftovers(tmp_path) == []


def nmt_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nmt", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_export_cli_errors_are_one_line(tiny_checkpoint, ctranslate2, tmp_path):
    """Exit code 1, one `error:` line naming the path or option and the fix, and OUT as it was."""
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x")
    cases = [(["export", tiny_checkpoint, busy], [str(busy), "--force"]),
             (["export", "--quantization", "int3", tiny_checkpoint, tmp_path / "q"], ["--quantization 'int3'", "int8"])]
    for args, words in cases:
        r = nmt_cli(*args)
        lines = r.stderr.strip("\n").splitlines()
        assert r.returncode == 1 and "Traceback" not in r.stderr and len(lines) == 1, r.stderr
        assert lines[0].startswith("error: ") and all(w in lines[0] for w in words), lines[0]
    assert folder_digest(busy) == {"keep.txt": b"x"} and not (tmp_path / "q").exists() and leftovers(tmp_path) == []


def test_export_int8_weights_load_and_translate(tiny_checkpoint, ctranslate2, tmp_path, sample_lines):
    from nmt.engines.ct2_engine import CTranslate2Engine

    fp32 = export_to(tiny_checkpoint, tmp_path / "fp32")
    int8 = export_to(tiny_checkpoint, tmp_path / "int8", quantization="int8")
    assert (int8 / "model.bin").stat().st_size < 0.5 * (fp32 / "model.bin").stat().st_size
    out = CTranslate2Engine(int8, SearchConfig(beam=2, lenpen=1.0, lenpen_type="power"), threads=1).translate_chunk(sample_lines[:5])
    assert len(out) == 5 and all(t.text for t in out)


def test_export_cli(tiny_checkpoint, ctranslate2, tmp_path):
    from typer.testing import CliRunner

    from nmt.cli.main import app

    result = CliRunner().invoke(app, ["export", "--format", "ctranslate2", str(tiny_checkpoint), str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m" / "model.bin").exists()
    result = CliRunner().invoke(app, ["export", "--format", "onnx", str(tiny_checkpoint), str(tmp_path / "o")])
    assert result.exit_code != 0 and not (tmp_path / "o").exists()


def test_missing_ctranslate2_is_a_clear_error(monkeypatch, tmp_path):
    from nmt.engines.ct2_export import export_ctranslate2

    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` now raises ImportError
    with pytest.raises(ConfigError, match="pip install ctranslate2"):
        export_ctranslate2(tmp_path / "missing.pt", tmp_path / "out")


# -- precision and int8 ----------------------------------------------------------------------------


def test_int8_quantises_every_linear_and_the_output_projection(tiny_checkpoint):
    from nmt.compute.precision import Int8Linear

    model = checkpoint.load(tiny_checkpoint).build_model()
    n_linear = sum(type(m) is torch.nn.Linear for m in model.modules())
    q = prepare_model(model, "int8")
    assert not [m for m in q.modules() if "Linear" in type(m).__name__ and not isinstance(m, Int8Linear)]
    # + the output projection, + each decoder layer's fused q|k|v projection (MultiHeadAttention.fuse_qkv)
    assert sum(isinstance(m, Int8Linear) for m in q.modules()) == n_linear + 1 + len(q.decoder)
    assert all(isinstance(layer.self_attn.qkv, Int8Linear) for layer in q.decoder)
    assert isinstance(q.output_proj, Int8Linear)
    plain = prepare_model(checkpoint.load(tiny_checkpoint).build_model(), "int8", int8_output=False)
    assert plain.output_proj is None


def test_int8_translations_close_to_fp32(tiny_checkpoint, sample_lines):
    """int8 changes the numbers a little: log-probabilities stay close, many outputs stay the same
    (the benchmark measures the BLEU cost on a real model: docs/benchmarks-translate.md)."""
    cfg = SearchConfig(beam=1, lenpen=0.0, max_len_a=1.0, max_len_b=5)
    fp32 = TorchEngine(tiny_checkpoint, cfg)
    int8 = TorchEngine(tiny_checkpoint, cfg, precision="int8")
    diffs = []
    for i in range(10):
        src = torch.tensor([fp32.encode(sample_lines[i:i + 1], 0)[0]])
        tgt = torch.tensor([[BOS] + fp32.encode(sample_lines[i + 1:i + 2], 0)[0][:-1]])
        with torch.inference_mode():
            diffs.append((fp32.model(src, tgt).log_softmax(-1) - int8.model(src, tgt).log_softmax(-1)).abs())
    diffs = torch.cat([d.flatten() for d in diffs])
    assert diffs.mean().item() < 0.05 and diffs.max().item() < 1.0
    ours, theirs = fp32.translate_chunk(sample_lines), int8.translate_chunk(sample_lines)
    assert sum(a.text == b.text for a, b in zip(ours, theirs)) >= N_LINES // 5


def test_output_projection_module_computes_the_same_logits(tiny_checkpoint):
    model = checkpoint.load(tiny_checkpoint).build_model()
    src, tgt = torch.tensor([[5, 6, 7, EOS]]), torch.tensor([[BOS, 8, 9]])
    with torch.no_grad():
        before = model(src, tgt)
        model.use_output_projection()
        after = model(src, tgt)
    assert model.output_proj.weight is model.embed.weight
    torch.testing.assert_close(before, after)


@pytest.mark.parametrize("precision, device, message", [
    ("fp16", "cpu", "needs a GPU"), ("fp64", "cpu", "use one of"),
])
def test_precision_errors(tiny_checkpoint, precision, device, message):
    with pytest.raises(ConfigError, match=message):
        TorchEngine(tiny_checkpoint, SearchConfig(), device=device, precision=precision)


def test_translate_cli_int8(tiny_checkpoint, tmp_path, sample_lines):
    from typer.testing import CliRunner

    from nmt.cli.main import app

    src = tmp_path / "in.en"
    src.write_text("\n".join(sample_lines[:3]) + "\n\n")
    result = CliRunner().invoke(app, ["translate", "-m", str(tiny_checkpoint), "-i", str(src), "--int8", "--beam", "2",
                                      "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.split("\n")) == 4 + 1  # 4 lines (one empty) and the final newline
    result = CliRunner().invoke(app, ["translate", "-m", str(tiny_checkpoint), "-i", str(src), "--int8",
                                      "--precision", "fp16"])
    assert result.exit_code != 0


# -- the fast paths compute the same thing --------------------------------------------------------


def test_prepared_model_computes_the_same_log_probs(tiny_checkpoint, sample_lines):
    """fp32 inference (fused q|k|v, the cached step) computes what the model as trained computes."""
    from nmt.engines.search import search

    plain = checkpoint.load(tiny_checkpoint).build_model()
    prepared = prepare_model(checkpoint.load(tiny_checkpoint).build_model(), "fp32")
    src, tgt = torch.tensor([[5, 6, 7, 8, EOS]]), torch.tensor([[BOS, 9, 10, 11]])
    with torch.inference_mode():
        torch.testing.assert_close(prepared(src, tgt), plain(src, tgt), atol=1e-5, rtol=1e-5)
    cfg = SearchConfig(beam=4, lenpen=0.6)
    translator = TorchEngine(tiny_checkpoint, cfg)
    ours = translator.translate_chunk(sample_lines[:20])
    for line, translation in zip(sample_lines[:20], ours):
        src = torch.tensor([translator.encode([line], 0)[0]])
        best = search(plain, src, cfg, translator.max_positions)[0][0]
        assert translation.hypotheses[0][1].tokens == best.tokens
        assert translation.hypotheses[0][1].score == pytest.approx(best.score, abs=1e-5)


# -- start-up ----------------------------------------------------------------------------------------


def test_cli_import_does_not_import_torch():
    """`nmt --help` starts fast: importing the CLI must not import torch (or ctranslate2)."""
    code = "import nmt.cli.main, sys; assert 'torch' not in sys.modules and 'ctranslate2' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_help_lists_export_without_torch():
    code = ("import sys, nmt.cli.main\n"
            "try:\n    nmt.cli.main.app(['--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True, text=True)
    assert "export" in out.stdout


@pytest.mark.parametrize("quantization", [None, "int8"])
def test_export_manifest_lists_every_file_and_what_it_converts(tiny_checkpoint, ctranslate2, tmp_path, quantization):
    """nmt_manifest.json: the size and sha256 of every other file, the checkpoint's sha256 and the options; one
    spelling, so that any byte changed in it is seen."""
    from nmt.engines.ct2_export import MANIFEST_FILE, file_sha256, manifest_bytes, read_manifest

    out = export_to(tiny_checkpoint, tmp_path / "ct2", quantization=quantization)
    manifest = read_manifest(out)
    assert manifest is not None and (out / MANIFEST_FILE).read_bytes() == manifest_bytes(manifest)
    assert sorted(manifest["files"]) == sorted(p.name for p in out.iterdir() if p.name != MANIFEST_FILE)
    assert all(r == {"bytes": (out / n).stat().st_size, "sha256": file_sha256(out / n)}
               for n, r in manifest["files"].items())
    assert manifest["identity"] == {"checkpoint_sha256": file_sha256(tiny_checkpoint), "quantization": quantization,
                                    "export_version": 2}
    (out / MANIFEST_FILE).write_bytes(b" " + (out / MANIFEST_FILE).read_bytes())  # still JSON, same values
    assert read_manifest(out) is None and leftovers(tmp_path) == []
