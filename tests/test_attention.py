"""Cross-attention maps: the weights plotted are the ones the decoder uses, and the heatmap files."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import nmt.model.transformer as model_module
from nmt.config import ModelConfig
from nmt.core.vocab import BOS, EOS, PAD
from nmt.engines.heatmaps import (
    AttentionMaps,
    alignments,
    pharaoh,
    word_alignment,
    word_of_each_piece,
    write_heatmaps,
)
from nmt.engines.search import SearchConfig
from nmt.engines.torch_engine import TorchEngine
from nmt.model.transformer import Transformer
from nmt.text.tokenizer import load_tokenizer

matplotlib = pytest.importorskip("matplotlib")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_cross_attention_weights_are_the_ones_the_decoder_uses(monkeypatch, norm):
    """Record the softmax weights of every cross-attention call of a real forward; compare."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=40, d_model=16, n_heads=4, encoder_layers=2, decoder_layers=3,
                                    d_ff=32, norm=norm)).eval()
    src = torch.tensor([[5, 6, 7, 8, EOS], [9, 10, EOS, PAD, PAD]])
    tgt_in = torch.tensor([[BOS, 11, 12, 13], [BOS, 14, 15, 16]])
    seen = []
    real_sdpa = F.scaled_dot_product_attention

    def recording_sdpa(q, k, v, attn_mask=None, is_causal=False, dropout_p=0.0):
        if not is_causal and q.size(2) == tgt_in.size(1) and k.size(2) == src.size(1):
            scores = (q @ k.transpose(-1, -2)) / q.size(-1) ** 0.5
            seen.append(scores.masked_fill(~attn_mask, float("-inf")).softmax(-1))
        return real_sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout_p)

    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", recording_sdpa)
    with torch.no_grad():
        model(src, tgt_in)
    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", real_sdpa)
    plotted = model.cross_attention_weights(src, tgt_in)
    assert len(seen) == len(plotted) == 3
    for used, shown in zip(seen, plotted):
        assert shown.shape == (2, 4, 4, 5)
        torch.testing.assert_close(shown, used)
    assert plotted[0][1, :, :, 3:].abs().max() == 0  # no weight on source padding


def test_attention_maps_labels_and_shapes(tiny_checkpoint):
    translator = TorchEngine(tiny_checkpoint, SearchConfig(beam=2))
    line = "a man is riding a bicycle ."
    hyp = translator.translate_chunk([line])[0].hypotheses[0][1]
    maps = translator.attention(line, hyp)
    src_ids = translator.encode([line], 0)[0]
    L, H = translator.model.cfg.decoder_layers, translator.model.cfg.n_heads
    assert isinstance(maps, AttentionMaps)
    assert maps.weights.shape == (L, H, len(hyp.tokens) + 1, len(src_ids))
    assert maps.source[-1] == maps.target[-1] == "</s>"
    assert "".join(maps.source[:-1]).replace("▁", " ").strip() == load_tokenizer(
        torch.load(tiny_checkpoint, weights_only=True)["tokenizer"]).decode([src_ids], side="source")[0]
    torch.testing.assert_close(maps.weights.sum(-1), torch.ones(L, H, len(hyp.tokens) + 1))


def test_write_heatmaps_one_png_per_layer(tmp_path):
    weights = torch.softmax(torch.randn(2, 3, 4, 5), -1)
    maps = AttentionMaps(["▁a", "▁b", "c", "▁d", "</s>"], ["▁w", "x", "▁y", "</s>"], weights)
    paths = write_heatmaps(maps, tmp_path / "att", line=6)
    assert [p.name for p in paths] == ["line00007.layer1.png", "line00007.layer2.png"]
    for p in paths:
        assert p.read_bytes()[:8] == PNG_MAGIC
    assert not [p for p in (tmp_path / "att").iterdir() if p.name.startswith(".")]  # no temp files left


def test_cli_attention_writes_heatmaps_and_keeps_stdout(tiny_checkpoint, tmp_path):
    lines = "a man is riding a bicycle .\n\ntwo dogs play in the snow .\n"
    plain = subprocess.run([sys.executable, "-m", "nmt", "translate", "-m", str(tiny_checkpoint), "--beam", "2"],
                           input=lines, capture_output=True, text=True, timeout=120)
    out = tmp_path / "att"
    with_att = subprocess.run([sys.executable, "-m", "nmt", "translate", "-m", str(tiny_checkpoint), "--beam", "2",
                               "--attention", str(out)], input=lines, capture_output=True, text=True, timeout=120)
    assert plain.returncode == with_att.returncode == 0, with_att.stderr
    assert with_att.stdout == plain.stdout and len(with_att.stdout.splitlines()) == 3
    layers = torch.load(tiny_checkpoint, weights_only=True)["model_config"]["decoder_layers"]
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([f"line00001.layer{k}.png" for k in range(1, layers + 1)]
                           + [f"line00003.layer{k}.png" for k in range(1, layers + 1)])  # the empty line 2 has none


def test_cli_attention_without_matplotlib_is_one_line_error(tiny_checkpoint, tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None; from nmt.cli.main import main; "
            f"sys.argv = ['nmt', 'translate', '-m', {str(tiny_checkpoint)!r}, '--attention', {str(tmp_path)!r}]; main()")
    r = subprocess.run([sys.executable, "-c", code], input="a man .\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "pip install 'nmt-toolkit[plot]'" in r.stderr
    assert "Traceback" not in r.stderr


# -- word alignments -------------------------------------------------------------------------------------

W = "\u2581"


@pytest.mark.parametrize("pieces, words", [
    ([W + "a", W + "man", "</s>"], [0, 1, -1]),
    ([W + "bi", "cy", "cle", W + ".", "</s>"], [0, 0, 0, 1, -1]),
    (["x", W + "y"], [0, 1]),  # a first piece without the mark still starts a word
    (["</s>"], [-1]),
])
def test_word_of_each_piece(pieces, words):
    assert word_of_each_piece(pieces) == words


def test_word_alignment_hand_built():
    source = [W + "the", W + "bi", "cycle", W + ".", "</s>"]  # words: the=0 bicycle=1 .=2
    target = [W + "das", W + "Fahr", "rad", W + ".", "</s>"]  # words: das=0 Fahrrad=1 .=2
    weights = torch.tensor([  # (T, S): each output piece's attention over the source pieces
        [0.7, 0.1, 0.1, 0.0, 0.1],   # das -> the
        [0.0, 0.2, 0.6, 0.0, 0.2],   # Fahr -> cycle (word 1)
        [0.0, 0.5, 0.1, 0.0, 0.4],   # rad -> bi (word 1): the same pair again
        [0.1, 0.0, 0.0, 0.3, 0.6],   # . -> EOS is most attended, but EOS never aligns: "." (word 2)
        [0.0, 0.0, 0.0, 0.0, 1.0],   # EOS: not aligned
    ])
    pairs = word_alignment(weights, source, target)
    assert pairs == [(0, 0), (1, 1), (2, 2)]
    assert pharaoh(pairs) == "0-0 1-1 2-2"


def test_alignments_average_the_heads_of_the_last_layer():
    source, target = [W + "a", W + "b", "</s>"], [W + "x", "</s>"]
    weights = torch.zeros(2, 2, 2, 3)  # (L, H, T, S)
    weights[0, :, 0, 0] = 1.0  # the first layer says a
    weights[1, 0, 0] = torch.tensor([0.6, 0.4, 0.0])
    weights[1, 1, 0] = torch.tensor([0.0, 1.0, 0.0])  # mean over heads: a 0.3, b 0.7
    maps = AttentionMaps(source, target, weights)
    assert alignments(maps) == [(1, 0)] and alignments(maps, layer=0) == [(0, 0)]


def test_translator_alignments_stay_within_the_words(tiny_checkpoint):
    translator = TorchEngine(tiny_checkpoint, SearchConfig(beam=2))
    lines = ["a man is riding a bicycle .", "two dogs play in the snow ."]
    for i, t in enumerate(translator.translate_chunk(lines)):
        pairs = translator.alignment(t.source, t.hypotheses[0][1], i)
        assert pairs and all(0 <= s < len(t.source.split()) and 0 <= w < len(t.text.split()) for s, w in pairs)
        assert {w for _, w in pairs} == set(range(len(t.text.split())))  # every output word is aligned


def test_cli_alignments(tiny_checkpoint):
    def run(*extra):
        return subprocess.run([sys.executable, "-m", "nmt", "translate", "-m", str(tiny_checkpoint), "--alignments",
                               "--threads", "1", *extra], input="a man is riding a bicycle .\n\n", capture_output=True,
                              text=True, timeout=120)

    one = run()
    assert one.returncode == 0, one.stderr
    first, empty = one.stdout.splitlines()
    text, align = first.split(" ||| ")
    assert text and all(p.count("-") == 1 for p in align.split()) and empty == " ||| "
    nbest = run("--nbest", "2")
    assert [len(row.split("\t")) for row in nbest.stdout.splitlines()] == [6, 6, 6, 6]
    ensemble = run("-m", str(tiny_checkpoint.parent / "checkpoint_00000020.pt"))  # one file twice: refused first
    assert ensemble.returncode == 1 and "give one --model" in ensemble.stderr
