"""Ensembles: the mean of the models' log-probabilities, hand-computed on fixed tables; the real model
with itself and with another checkpoint of its run; the CLI's repeated --model."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from nmt.core.vocab import BOS, EOS, PAD
from nmt.engines.ensemble import Ensemble
from nmt.engines.search import SearchConfig, beam_search, greedy_search
from nmt.engines.torch_engine import TorchEngine
from nmt.model import checkpoint

A = 4  # the token "a"; vocabulary PAD UNK BOS EOS a
V = 5


@dataclass
class Prefix:
    prefix: torch.Tensor  # (N, t)

    def select(self, index):
        return Prefix(self.prefix[index])

    def expand(self, k):
        return self.select(torch.arange(self.prefix.size(0)).repeat_interleave(k))


class Fixed:
    """P(a) = p_a, P(EOS) = 1 - p_a at the first step; EOS only after that."""

    def __init__(self, p_a: float):
        self.p_a = p_a

    def start_decoding(self, src):
        return Prefix(src.new_zeros(src.size(0), 0))

    def step(self, tokens, state):
        state.prefix = torch.cat([state.prefix, tokens[:, None]], dim=1)
        out = torch.full((tokens.size(0), V), float("-inf"))
        first = state.prefix.size(1) == 1
        out[:, A] = math.log(self.p_a) if first else float("-inf")
        out[:, EOS] = math.log(1 - self.p_a) if first else 0.0
        return out


SRC = torch.tensor([[A, EOS]])
SAMPLE_TEST = Path(__file__).resolve().parent.parent / "nmt" / "sample_data" / "test.en"


@pytest.fixture(scope="module")
def sample_lines() -> list[str]:
    return SAMPLE_TEST.read_text(encoding="utf-8").splitlines()[:20]
CFG = SearchConfig(beam=2, lenpen=0.0, nbest=2)


def test_one_model_alone_prefers_a():
    [[best]] = greedy_search(Fixed(0.6), SRC, SearchConfig(beam=1, lenpen=0.0), 16)
    assert best.tokens == [A] and best.log_prob == pytest.approx(math.log(0.6))


def test_ensemble_averages_log_probabilities():
    # mean log P(a) = (ln 0.6 + ln 0.2) / 2 = ln sqrt(0.12) = ln 0.3464; mean log P(EOS) = ln sqrt(0.32) = ln 0.5657:
    # the ensemble ends at once, where either model's greedy choice differs or agrees with it by chance. The search
    # renormalises each step's distribution (PAD and BOS out): over Z = sqrt(0.12) + sqrt(0.32).
    ensemble = Ensemble([Fixed(0.6), Fixed(0.2)])
    z = math.sqrt(0.12) + math.sqrt(0.32)
    [[best]] = greedy_search(ensemble, SRC, SearchConfig(beam=1, lenpen=0.0), 16)
    assert best.tokens == [] and best.log_prob == pytest.approx(math.log(math.sqrt(0.32) / z))
    [hyps] = beam_search(ensemble, SRC, CFG, 16)
    assert [h.tokens for h in hyps] == [[], [A]]
    # "a" then EOS: ln (sqrt(0.12) / Z) + (0 + 0) / 2
    assert [h.log_prob for h in hyps] == pytest.approx([math.log(math.sqrt(0.32) / z), math.log(math.sqrt(0.12) / z)])


def test_ensemble_of_one_model_is_the_model(tiny_checkpoint, sample_lines):
    cfg = SearchConfig(beam=4, nbest=2)
    alone = TorchEngine(tiny_checkpoint, cfg).translate_chunk(sample_lines[:20])
    twice = TorchEngine([tiny_checkpoint, tiny_checkpoint], cfg).translate_chunk(sample_lines[:20])
    assert [t.text for t in twice] == [t.text for t in alone]
    for a, b in zip(alone, twice):
        assert [h.log_prob for _, h in b.hypotheses] == pytest.approx([h.log_prob for _, h in a.hypotheses], abs=1e-4)


def teacher_forced(model, src_ids, tokens):
    """log P(. | src, prefix) at each position of tokens + EOS, (T, V), from a full forward pass."""
    src, tgt = torch.tensor([src_ids]), torch.tensor([[BOS] + tokens])
    with torch.no_grad():
        return model(src, tgt).log_softmax(-1)[0]


def test_ensemble_score_is_the_mean_of_the_models_scores(tiny_run, sample_lines):
    paths = [tiny_run / "checkpoint_00000020.pt", tiny_run / "checkpoint_00000030.pt"]
    translator = TorchEngine(paths, SearchConfig(beam=3, lenpen=0.0))
    models = [checkpoint.load(p).build_model() for p in paths]
    for line, t in zip(sample_lines[:6], translator.translate_chunk(sample_lines[:6])):
        src_ids = translator.encode([line], 0)[0]
        hyp = t.hypotheses[0][1]
        mean = sum(teacher_forced(m, src_ids, hyp.tokens) for m in models) / len(models)  # (T, V)
        mean[:, [PAD, BOS]] = float("-inf")  # the search's distribution: PAD and BOS out, the rest renormalised
        mean = mean - mean.logsumexp(-1, keepdim=True)
        assert hyp.log_prob == pytest.approx(sum(mean[i, t].item() for i, t in enumerate(hyp.tokens + [EOS])), abs=1e-3)


def nmt(*args, input: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nmt", *map(str, args)], input=input, capture_output=True, text=True,
                          timeout=120)


def test_cli_repeated_model_is_an_ensemble(tiny_run, tiny_checkpoint, sample_lines):
    lines = "\n".join(sample_lines[:3]) + "\n"
    one = nmt("translate", "-m", tiny_checkpoint, "--threads", "1", "--nbest", "2", input=lines)
    two = nmt("translate", "-m", tiny_checkpoint, "-m", tiny_run / "checkpoint_00000020.pt", "--threads", "1",
              "--nbest", "2", input=lines)
    assert one.returncode == two.returncode == 0, two.stderr
    assert len(two.stdout.splitlines()) == 6
    assert two.stdout != one.stdout  # the second model took part (scores differ at least)


def test_cli_ensemble_errors(tiny_checkpoint, tmp_path):
    other = tmp_path / "other.pt"
    ckpt = checkpoint.load(tiny_checkpoint)
    ckpt.tokenizer = {"kind": "youtokentome", "version": 1, "source": b"1 0\n97 4\n1 0 2 3\n"}  # another vocabulary
    checkpoint.save(other, ckpt)
    r = nmt("translate", "-m", tiny_checkpoint, "-m", other, input="a man\n")
    assert r.returncode == 1 and "use different tokenizers" in r.stderr and "Traceback" not in r.stderr
    second = tiny_checkpoint.parent / "checkpoint_00000020.pt"  # another checkpoint: one given twice is refused
    r = nmt("translate", "-m", tiny_checkpoint, "-m", second, "--attention", tmp_path / "att", input="a\n")
    assert r.returncode == 1 and "give one --model" in r.stderr and not (tmp_path / "att").exists()
