"""Validation during training: the loss (NLL per target token) and the BLEU of greedy (or beam)
translations of the validation split, with the run's model and tokenizer."""

from __future__ import annotations

import itertools
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from nmt.config import SearchConfig
from nmt.data.batches import collate, make_batches
from nmt.data.dataset import ParallelDataset
from nmt.engines.search import search
from nmt.model.loss import label_smoothed_loss
from nmt.model.transformer import Transformer
from nmt.scoring import bleu
from nmt.text.tokenizer import Tokenizer

# The trainer's mixed-precision context for the run's precision (`Trainer.autocast`).
Autocast = Callable[[], AbstractContextManager[None]]


def corpus_bleu(hyps: list[str], refs: list[str]) -> float:
    """sacreBLEU 13a cased, the first figure of `nmt eval`."""
    return bleu(hyps, refs, "validation translations", "validation references")


class Validator:
    """The validation split of a data folder, as the run's model sees it: the pairs that fit its positions,
    their loss, and the BLEU of their translations (the first `bleu_sentences` of them)."""

    def __init__(self, data_dir: Path, tokenizer: Tokenizer, max_positions: int, max_tokens: int,
                 bleu_sentences: int, beam: int):
        self.data = ParallelDataset(data_dir, "valid") if (data_dir / "valid.idx").exists() else None
        self.index = self.fitting_pairs(max_positions)
        self.tokenizer = tokenizer
        self.max_positions, self.max_tokens, self.beam = max_positions, max_tokens, beam
        self.bleu_index = self.bleu_pairs(bleu_sentences)
        self._references: Optional[list[str]] = None

    def __len__(self) -> int:
        return len(self.index)

    def fitting_pairs(self, max_positions: int) -> np.ndarray:
        """Validation pairs whose source and target (+ EOS/BOS) fit the model's positions."""
        if self.data is None:
            return np.zeros(0, dtype=np.int64)
        limit = max_positions - 1
        fits = (self.data.src_lengths <= limit) & (self.data.tgt_lengths <= limit)
        return np.flatnonzero(fits)

    def bleu_pairs(self, n: int) -> np.ndarray:
        """The first `n` fitting pairs; of a store of several language pairs, the first of each in turn (an equal
        share of each pair, as long as it has some)."""
        parts = self.data.parts if self.data is not None else []
        if len(parts) < 2:
            return self.index[:n]
        ends = np.cumsum([count for _, count in parts])
        own = [self.index[(self.index >= end - count) & (self.index < end)] for (_, count), end in zip(parts, ends)]
        turns = [i for pair in itertools.zip_longest(*own) for i in pair if i is not None][:n]
        return np.sort(np.asarray(turns, dtype=np.int64))

    @torch.inference_mode()
    def loss(self, model: Transformer, device: torch.device, autocast: Autocast) -> Optional[float]:
        """Mean NLL per target token (no label smoothing, no dropout); None without validation pairs."""
        if not len(self.index):
            return None
        model.eval()
        data, index = self.data, self.index
        assert data is not None
        nll_sum, tokens = 0.0, 0
        for positions in make_batches(data.src_lengths[index], data.tgt_lengths[index], self.max_tokens, shuffle=False):
            batch = collate(data, index[positions]).to(device)
            with autocast():
                logits = model(batch.src, batch.tgt_in)
            _, nll = label_smoothed_loss(logits.flatten(0, 1), batch.tgt_out.flatten(), 0.0)
            nll_sum, tokens = nll_sum + nll.item(), tokens + batch.tgt_tokens
        return nll_sum / max(tokens, 1)

    def references(self) -> list[str]:
        """The BLEU references: the valid split's target ids decoded with the run's tokenizer."""
        if self._references is None:
            assert self.data is not None
            self._references = self.tokenizer.decode([self.data[int(i)][1] for i in self.bleu_index])
        return self._references

    @torch.inference_mode()
    def translate(self, model: Transformer, device: torch.device, autocast: Autocast) -> list[str]:
        """Greedy (or `beam`) translations of the BLEU sentences."""
        model.eval()
        data, index = self.data, self.bleu_index
        assert data is not None
        search_cfg = SearchConfig(beam=self.beam, nbest=1)
        hyps = [""] * len(index)
        budget = max(1, self.max_tokens // self.beam)  # beams multiply the batch
        for positions in make_batches(data.src_lengths[index], data.tgt_lengths[index], budget, shuffle=False):
            batch = collate(data, index[positions]).to(device)
            with autocast():
                found = search(model, batch.src, search_cfg, self.max_positions)
            for j, text in zip(positions, self.tokenizer.decode([h[0].tokens if h else [] for h in found])):
                hyps[j] = text
        return hyps

    def bleu(self, model: Transformer, device: torch.device, autocast: Autocast) -> Optional[float]:
        """BLEU of the translations against the references; None without BLEU sentences."""
        if not len(self.bleu_index):
            return None
        return corpus_bleu(self.translate(model, device, autocast), self.references())
