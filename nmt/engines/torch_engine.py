"""The torch engine (`TorchEngine`): a checkpoint, or an ensemble of checkpoints, searched with nmt's own search
(`nmt.engines.search`) in any number format torch runs (`nmt.compute`)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor

from nmt.compute.device import resolve_precision
from nmt.compute.precision import prepare_model
from nmt.compute.timing import translation_timing
from nmt.config import INT_MAX, Overrides, Precision, SearchConfig, check_range
from nmt.core.errors import CheckpointError, ConfigError, ref
from nmt.core.progress import ProgressFn, ignore
from nmt.core.vocab import PAD, UNK
from nmt.engines.base import BatchEngine, search_apart
from nmt.engines.constrained import Constraint, constrained_beam_search
from nmt.engines.ensemble import Ensemble
from nmt.engines.heatmaps import AttentionMaps, alignments, attention_maps
from nmt.engines.search import Decoder, Hypothesis, Restricted, search
from nmt.model import checkpoint
from nmt.text.tags import with_tags
from nmt.text.tokenizer import load_tokenizer

# a sentence's search holds at most this many terms, of this many tokens in all: its cost grows with both (each step
# weighs every beam's next token of each term), and a request may bring 1,000 terms
MAX_TERMS, MAX_TERM_TOKENS = 32, 256


class TorchEngine(BatchEngine):
    """The torch engine: a checkpoint (or an ensemble of checkpoints) made ready to translate: model,
    tokenizer and search settings.

    `precision`: fp32; fp16 or bf16 on CUDA; int8 on the CPU (see `prepare_model`). Several `model_path`s
    decode as an `Ensemble`; they must share the tokenizer (and so the vocabulary) and the direction.
    """

    name = "torch"

    def __init__(self, model_path: Path | Sequence[Path],
                 search_cfg: SearchConfig | Overrides[SearchConfig] = Overrides(SearchConfig), device: str = "cpu",
                 max_tokens: int = 4096, max_sentences: int = 128, progress: ProgressFn = ignore,
                 precision: Precision | str = Precision.FP32, shortlist: bool = True):
        """`search_cfg`: the search, or the options given (Overrides; default: none) over the model's own
        defaults (an imported model brings some) and nmt's. `shortlist`: restrict each batch's output to the
        first checkpoint's vocabulary shortlist, where it has one (`nmt shortlist`)."""
        check_range(ref("max_tokens"), max_tokens, 1, INT_MAX)
        check_range(ref("batch_size"), max_sentences, 1, INT_MAX)
        self.device = torch.device(device)
        paths = [Path(model_path)] if isinstance(model_path, (str, Path)) else [Path(p) for p in model_path]
        ckpts = [checkpoint.load(p) for p in paths]
        check_models_fit(ckpts, paths)
        precision = resolve_precision(precision, self.device, timing=translation_timing(ckpts[0].model_config))
        self.search_cfg = (search_cfg.validate() if isinstance(search_cfg, SearchConfig)
                           else search_cfg.apply(ckpts[0].search.apply()))
        models = [prepare_model(c.build_model(p), precision, self.device) for c, p in zip(ckpts, paths)]
        self.model = models[0] if len(models) == 1 else Ensemble(models)
        self.precision = precision
        self.data = ckpts[0].data
        self.tokenizer = with_tags(load_tokenizer(ckpts[0].tokenizer, str(paths[0])), self.data)
        for model, path in zip(models, paths):
            if model.cfg.vocab_size != self.tokenizer.vocab_size:  # ids beyond one of them would be garbage
                raise CheckpointError(f"{path}: its model has {model.cfg.vocab_size} tokens but its tokenizer "
                                      f"{self.tokenizer.vocab_size}; the checkpoint is damaged")
        self.languages = ckpts[0].languages
        self.shortlist = ckpts[0].shortlist if shortlist else None
        self.shortlist_of: Optional[list[list[int]]] = None  # the sources of the shortlist (None: each batch's)
        self.constraints: dict[int, list[Constraint]] = {}  # by line number: the target ids its translation holds
        self.joins: Optional[Tensor] = None  # (V,) the pieces that continue a word (`joining_tokens`)
        self.max_positions = min(m.cfg.max_positions for m in models)
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.progress = progress

    def search_batch(self, encoded: list[list[int]], keys: list[int]) -> list[list[Hypothesis]]:
        width = max(len(ids) for ids in encoded)
        src = torch.full((len(encoded), width), PAD, dtype=torch.long)
        for row, ids in enumerate(encoded):
            src[row, : len(ids)] = torch.tensor(ids)
        model: Decoder[Any] = self.model  # one model or an ensemble: each its own state type
        constraints = [self.constraints.get(key, []) for key in keys]
        if self.shortlist is not None:  # the union over the batch, as CTranslate2 takes it
            sources = src if self.shortlist_of is None else torch.tensor([t for ids in self.shortlist_of for t in ids])
            allowed = self.shortlist.candidates(sources)
            terms = [t for line in constraints for ids in line for t in ids]
            if terms:  # a term's pieces are always allowed: a constraint outside the list could never be met
                allowed = torch.unique(torch.cat([allowed, torch.tensor(terms, dtype=allowed.dtype)]))
            model = Restricted(model, allowed)
        src = src.to(self.device)
        held = [i for i, line in enumerate(constraints) if line]
        if not held:
            return search(model, src, self.search_cfg, self.max_positions, keys=keys)
        # the lines without terms searched as ever; the others by the constrained search (slower: Python per step)
        return search_apart(
            len(keys), held,
            lambda rows: search(model, src[rows], self.search_cfg, self.max_positions, keys=[keys[i] for i in rows]),
            lambda rows: constrained_beam_search(model, src[rows], self.search_cfg, self.max_positions,
                                                 [constraints[i] for i in rows], self.joining_tokens()))

    def check_search(self, search_cfg: SearchConfig) -> SearchConfig:
        search_cfg = search_cfg.validate()
        if self.constraints and search_cfg.sampling:
            raise ConfigError(constrained_sampling())
        return search_cfg

    def joining_tokens(self) -> Tensor:
        """(V,) bool: the pieces that continue a word (no word-start mark, a letter or digit first)."""
        if self.joins is None:
            pieces = self.tokenizer.vocab()
            self.joins = torch.tensor([bool(p) and not p.startswith("▁") and p[0].isalnum() for p in pieces])
        return self.joins

    def with_constraints(self, terms: dict[int, list[str]]) -> TorchEngine:
        """See `Engine.with_constraints`; a term with a character the vocabulary lacks (UNK) constrains nothing (the
        search could only write UNK), nor do a sentence's terms past MAX_TERMS or MAX_TERM_TOKENS: the caller places
        what the search did not write (`nmt.documents.terms.searched_terms`)."""
        if self.search_cfg.sampling and any(terms.values()):
            raise ConfigError(constrained_sampling())
        other = copy.copy(self)
        lines = [(n, term) for n, line in terms.items() for term in line]
        ids = self.tokenizer.encode([term for _, term in lines], side="target") if lines else []
        other.constraints = {}
        for (n, _), term_ids in zip(lines, ids):
            held = other.constraints.setdefault(n, [])
            # (what the vocabulary cannot write, and terms past the bound, are left to the caller)
            if term_ids and UNK not in term_ids and len(held) < MAX_TERMS and \
                    sum(map(len, held)) + len(term_ids) <= MAX_TERM_TOKENS:
                held.append(tuple(term_ids))
        other.constraints = {n: held for n, held in other.constraints.items() if held}
        return other

    def with_shortlist_of(self, sources: Optional[list[list[int]]]) -> TorchEngine:
        other = copy.copy(self)
        other.shortlist, other.shortlist_of = (None, None) if sources is None else (self.shortlist, sources)
        return other

    def attention(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> AttentionMaps:
        """Cross-attention maps of `line` and one of its hypotheses (of one model, not an ensemble)."""
        if isinstance(self.model, Ensemble):
            raise ConfigError(f"{ref('attention')} plots one model's attention; give one {ref('model')}")
        src_ids = self.encode([line], line_index)[0]
        return attention_maps(self.model, self.tokenizer, src_ids, hypothesis.tokens)

    def alignment(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> list[tuple[int, int]]:
        if not hypothesis.tokens:
            return []
        return alignments(self.attention(line, hypothesis, line_index))

def check_models_fit(ckpts: list[checkpoint.Checkpoint], paths: list[Path]) -> None:
    """An ensemble's models must share the tokenizer (the same ids must mean the same pieces) and the
    direction (the same source and target languages)."""
    for ckpt, path in zip(ckpts[1:], paths[1:]):
        if ckpt.tokenizer != ckpts[0].tokenizer:
            raise ConfigError(f"{path} and {paths[0]} use different tokenizers (vocabularies); an ensemble needs "
                              "models trained on data prepared with the same `nmt bpe` model")
        if ckpt.data.synthetic != ckpts[0].data.synthetic:
            raise ConfigError(f"{path} and {paths[0]} differ in their synthetic tag (one was trained on tagged "
                              "synthetic pairs, the other not); an ensemble needs models of one vocabulary")
        if (ckpt.languages, ckpt.data.pairs, ckpt.data.tags) != (ckpts[0].languages, ckpts[0].data.pairs,
                                                                 ckpts[0].data.tags):
            (src, tgt), (first_src, first_tgt) = ckpt.languages, ckpts[0].languages
            raise ConfigError(f"{path} translates {src} -> {tgt} but {paths[0]} {first_src} -> {first_tgt}; "
                              "an ensemble needs models of one direction")


def constrained_sampling() -> str:
    return (f"{ref('glossary_method')} constrain with {ref('sampling')}: the constrained search is a beam search; "
            f"leave {ref('sampling')} out, or use {ref('glossary_method')} place")
