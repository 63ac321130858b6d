"""Ensembles: several models of one vocabulary decoding together, each with its own decoding state
(and KV cache); at each step the next-token log-probabilities are the mean of the models'."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from torch import Tensor


@dataclass
class EnsembleState:
    """One decoding state per model, holding the same N hypotheses."""

    states: list[Any]

    def select(self, index: Tensor) -> EnsembleState:
        return EnsembleState([s.select(index) for s in self.states])

    def expand(self, k: int) -> EnsembleState:
        return EnsembleState([s.expand(k) for s in self.states])


class Ensemble:
    """A decoder (see `nmt.engines.search.Decoder`) over several models with one vocabulary.

    The log-probabilities are averaged, as Marian and OpenNMT-py do (fairseq averages the
    probabilities instead); the result is not renormalised, so a hypothesis' score is the mean of the
    models' scores of it, and `--nbest` scores compare between hypotheses but are not probabilities.
    """

    def __init__(self, models: Sequence[Any]):
        if not models:
            raise ValueError("an ensemble needs at least one model")
        self.models = list(models)

    def start_decoding(self, src: Tensor) -> EnsembleState:
        return EnsembleState([m.start_decoding(src) for m in self.models])

    def step(self, tokens: Tensor, state: EnsembleState) -> Tensor:
        """Each model steps its own state; (N, V) mean of their log-probabilities."""
        total: Optional[Tensor] = None
        for model, s in zip(self.models, state.states):
            lp = model.step(tokens, s)
            total = lp if total is None else total.add_(lp)  # step hands back a tensor of its own
        assert total is not None  # an ensemble has at least one model
        return total.div_(len(self.models))

    def __len__(self) -> int:
        return len(self.models)
