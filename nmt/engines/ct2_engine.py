"""The CTranslate2 engine: translation with an exported model (a folder from `nmt.engines.ct2_export`),
like the torch engine (`nmt.engines.torch_engine.TorchEngine`) and with the same translations.

Tokenisation, length-sorted batching, length limits, ranking and output order are nmt's (`BatchEngine`);
the network and the search run in CTranslate2. `ctranslate2_options` gives the `translate_batch` options under
which CTranslate2 searches as nmt does, read from the table of decoding options (`nmt.engines.decoding`),
and `CTranslate2Engine` ranks what it returns with nmt's own length penalty (GNMT or power), so that
both engines give the same translations (see `ctranslate2_options` for the one case where CTranslate2
cannot: a beam search that reaches its sentence's length limit, searched again by torch).
"""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from nmt.config import Overrides, SearchConfig
from nmt.core.errors import ConfigError, InputError, ref
from nmt.core.identity import DataIdentity
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.core.vocab import BOS, EOS, PAD
from nmt.engines.base import BatchEngine, search_apart
from nmt.engines.ct2_export import (
    META_FILE,
    SPECIAL_TOKENS,
    VMAP_FILE,
    ctranslate2_vocabulary,
    read_meta,
    require_ctranslate2,
)
from nmt.engines.decoding import OPTIONS
from nmt.engines.heatmaps import EOS_LABEL, word_alignment
from nmt.engines.search import Hypothesis, best_hypotheses, length_penalty, max_lengths
from nmt.text.tags import with_tags
from nmt.text.tokenizer import load_tokenizer, read_files

# CTranslate2 stops a sentence as soon as its best beam ends when length_penalty is exactly 0; nmt (like
# fairseq) waits for `beam` finished hypotheses. A penalty this small changes no float32 score
# (len^1e-12 rounds to 1.0) but switches CTranslate2 to waiting, so "no normalisation" searches alike.
NO_PENALTY = 1e-12
# Said on stderr the first time a beam search meets what CTranslate2 cannot search as torch does
FALLBACK_NOTE = ("a beam search reached a sentence's length limit, where "
                 "CTranslate2 stops without EOS and torch ends every beam with it")


def ctranslate2_options(cfg: SearchConfig, suppress_specials: bool = False) -> dict[str, Any]:
    """`Translator.translate_batch` options under which CTranslate2 searches as nmt does with `cfg`; add
    max_decoding_length (a sentence's limit + 1) and rank the hypotheses it returns as `rank_hypotheses` does.

    - Ranking: both keep the K likeliest finished hypotheses of a beam search (num_hypotheses=K; the
      length penalty 1e-12 (NO_PENALTY) ranks by log-probability and is no early exit: CTranslate2 stops a
      sentence at its first finished beam when length_penalty is exactly 0, nmt waits for K), then rank them
      by nmt's length penalty, GNMT's ((5 + len) / 6)^alpha or len^alpha, where len counts EOS
      (return_end_token=True: the "</s>" that CTranslate2 then returns is dropped).
    - min_decoding_length=0: nmt allows an empty output; max_input_length=0: nmt cuts long sources itself.
    - PAD and BOS: neither engine generates them; both take them out of each step's distribution and renormalise
      the rest (nmt's `restrict_tokens`, CTranslate2's suppress_sequences, `suppress_specials`), so that the
      beams are the same: a beam search that may keep a beam ending in BOS among its K (it had one in 3 of 300
      lines of a demo model, at beam 4) keeps other beams than one that may not, and ends elsewhere. Without
      `suppress_specials`, a hypothesis holding one is searched again by nmt (CTranslate2Engine's `fallback`).
    - The length limit: nmt's is per sentence (a * |x| + b) and forces EOS there; CTranslate2's is per
      batch and stops without EOS. Greedy search and sampling: each output is cut to its own limit and
      scored again (forced as a prefix, from CTranslate2's logits with PAD and BOS out: score_batch would
      leave them in): the same as nmt's. Beam search: a sentence whose search reaches its
      limit can end otherwise, so CTranslate2Engine searches such sentences again with nmt.
    - A vocabulary shortlist: use_vmap (`CTranslate2Engine.use_vmap`) restricts the output to the union of
      the batch's candidates, as torch does; scoring again cannot, so an output it would score again is searched
      again by nmt (float32: under other compute types, CTranslate2's output with its whole-vocabulary score).
    - Sampling: sampling_topk, sampling_topp and sampling_temperature mean what --topk, --topp and
      --temperature mean, but CTranslate2 draws other random numbers: other samples than nmt's.
    - The keywords of the decoding options (beam_size, num_hypotheses, sampling_*) come from
      `nmt.engines.decoding.OPTIONS`.
    """
    options: dict[str, Any] = dict(return_end_token=True, min_decoding_length=0, return_scores=True,
                                   max_input_length=0, length_penalty=NO_PENALTY)
    for option in OPTIONS:  # beam_size, num_hypotheses, sampling_topk, ...: see nmt.engines.decoding
        options.update(option.ct2_options(cfg))
    if suppress_specials and not cfg.sampling:
        options["suppress_sequences"] = [[SPECIAL_TOKENS[PAD]], [SPECIAL_TOKENS[BOS]]]
    return options


def rank_hypotheses(hyps: list[Hypothesis], cfg: SearchConfig) -> list[Hypothesis]:
    """A sentence's hypotheses (log-probabilities, EOS included; score unset) scored and ranked as nmt's
    search ranks them: scores with nmt's length penalty; beam search keeps the K likeliest, then the
    nbest best by score."""
    scored = [Hypothesis(h.tokens, h.log_prob / float(length_penalty(len(h.tokens) + 1, cfg.lenpen, cfg.lenpen_type)),
                         h.log_prob) for h in hyps]
    if cfg.sampling:
        return sorted(scored, key=lambda h: -h.score)
    return best_hypotheses(scored, cfg.beam, cfg.nbest)


class Fallback:
    """The torch engine of the same checkpoint, loaded on first use (shared by the copies `with_search`
    makes): it searches the sentences that CTranslate2 cannot search as nmt does."""

    def __init__(self, make: Callable[[], BatchEngine]):
        self.make, self.sentences = make, 0
        self.searched = False  # sentences searched for their terms: said once
        self.engine: Optional[BatchEngine] = None
        self.lock = threading.Lock()  # batches searched at once (--inter-threads) share it
        self.threads = torch.get_num_threads()

    def search_batch(self, encoded: list[list[int]], keys: list[int], cfg: SearchConfig, progress: ProgressFn = ignore,
                     shortlist_of: Optional[list[list[int]]] = None,
                     terms: Optional[dict[int, list[str]]] = None) -> list[list[Hypothesis]]:
        """Torch's search of `encoded`, its output restricted to the shortlist of `shortlist_of` (CTranslate2's
        whole batch, whose candidates it searched with) or to none (None); with `terms` (by key), constrained to
        them (`TorchEngine.with_constraints`)."""
        with self.lock:
            if not self.sentences and terms is None:  # said once: the one place where the engines' searches differ
                progress(Progress("engine", message=f"note: {FALLBACK_NOTE}; the torch engine searches those"))
            if terms is not None and not self.searched:
                self.searched = True
                progress(Progress("engine", message="note: CTranslate2 has no search constrained to terms; the torch "
                                                    "engine (fp32) searches the sentences that must hold them"))
            # a batch's own thread starts with OpenMP's default (every core), whatever this thread was given
            torch.set_num_threads(self.threads)
            if self.engine is None:
                self.engine = self.make()
            self.sentences += len(encoded) if terms is None else 0
            engine = self.engine.with_search(cfg).with_shortlist_of(shortlist_of)
            return (engine if terms is None else engine.with_constraints(terms)).search_batch(encoded, keys)


class CTranslate2Engine(BatchEngine):
    """The CTranslate2 engine: an exported model (a folder from `export_ctranslate2`) made ready to translate,
    like `nmt.engines.torch_engine.TorchEngine` and with the same results (see `ctranslate2_options`).

    Tokenisation, length-sorted batching, length limits, ranking and output order are nmt's; the network
    and the search run in CTranslate2. `compute_type`: CTranslate2's (float32, int8, bfloat16, ...);
    `threads`: its intra_threads; `inter_threads`: batches translated at once (each by a replica of the model
    with `threads` threads); `fallback`: the torch engine of the same model (loaded on first use), which
    searches the few sentences CTranslate2 cannot search exactly as nmt (float32 only: other number formats
    round differently anyway); `suppress_specials`: see `ctranslate2_options`.
    """

    name = "ctranslate2"

    def __init__(self, model_dir: Path, search_cfg: SearchConfig | Overrides[SearchConfig] = SearchConfig(),
                 device: str = "cpu", compute_type: str = "default", threads: int = 0, max_tokens: int = 4096,
                 max_sentences: int = 128, progress: ProgressFn = ignore, suppress_specials: bool = True,
                 fallback: Optional[Callable[[], BatchEngine]] = None, inter_threads: int = 1,
                 shortlist: bool = True):
        ct2 = require_ctranslate2()
        self.model_dir = model_dir = Path(model_dir)
        self.meta = meta = read_meta(model_dir)
        defaults = Overrides(SearchConfig, meta.get("search") or {})
        self.suppress_specials = suppress_specials
        self.search_cfg = self.check_search(search_cfg if isinstance(search_cfg, SearchConfig)
                                            else search_cfg.apply(defaults.apply()))
        try:
            tokenizer = load_tokenizer(read_files(model_dir, meta.get("tokenizer")), str(model_dir))
        except OSError as e:
            raise InputError(f"{model_dir}: cannot read the tokenizer ({e.strerror or e}); export the model "
                             "again") from None
        self.data = DataIdentity.from_dict(meta.get("data"), str(model_dir / META_FILE))
        self.tokenizer = with_tags(tokenizer, self.data)
        self.vocab = ctranslate2_vocabulary(self.tokenizer)
        self.ids = {tok: i for i, tok in enumerate(self.vocab)}
        self.languages = (self.data.src, self.data.tgt)
        self.max_positions = int(meta["model_config"]["max_positions"])
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.progress = progress
        self.compute_type = compute_type
        self.use_vmap = shortlist and (model_dir / VMAP_FILE).is_file()  # the checkpoint's shortlist, exported
        self.fallback = Fallback(fallback) if fallback is not None else None
        self.terms: dict[int, list[str]] = {}  # by line number: the terms its translation holds (`with_constraints`)
        self.told = False  # FALLBACK_NOTE said where there is no fallback
        if self.search_cfg.sampling:
            # CTranslate2 seeds each of its threads' generators once, at their first draw: the same seed, input
            # and batches give the same draws (per process; `with_search` cannot seed again)
            ct2.set_random_seed(self.search_cfg.seed)
        try:
            # on CUDA, torch's current device: the one a process of a job was given (torch.cuda.set_device)
            index = torch.cuda.current_device() if device == "cuda" else 0
            self.engine = ct2.Translator(str(model_dir), device=device, device_index=index, compute_type=compute_type,
                                         inter_threads=inter_threads, intra_threads=threads)
            self.parallel = inter_threads  # its translate_batch releases the GIL: one Python thread per replica
        except (RuntimeError, ValueError) as e:
            raise InputError(f"{model_dir}: CTranslate2 cannot load it ({str(e).splitlines()[0]})") from None

    def check_search(self, search_cfg: SearchConfig) -> SearchConfig:
        search_cfg = search_cfg.validate()
        self.options = ctranslate2_options(search_cfg, self.suppress_specials)
        return search_cfg

    def with_search(self, search_cfg: SearchConfig) -> CTranslate2Engine:
        other = copy.copy(self)
        other.search_cfg = other.check_search(search_cfg)  # options of its own: this one's stay
        return other

    def with_constraints(self, terms: dict[int, list[str]]) -> CTranslate2Engine:
        """See `Engine.with_constraints`: CTranslate2 has no constrained search, so the lines with terms are searched
        by the torch engine of the same checkpoint (fp32; the fallback's), the others by CTranslate2."""
        if self.fallback is None:
            super().with_constraints(terms)  # (refuses)
        other = copy.copy(self)
        other.terms = {n: line for n, line in terms.items() if line}
        return other

    def search_batch(self, encoded: list[list[int]], keys: list[int]) -> list[list[Hypothesis]]:
        held = [i for i, key in enumerate(keys) if key in self.terms]
        if not held:
            return self.search_here(encoded, keys)
        fallback = self.fallback
        assert fallback is not None  # (with_constraints refuses without one)
        return search_apart(
            len(keys), held, lambda rows: self.search_here([encoded[i] for i in rows], [keys[i] for i in rows]),
            lambda rows: fallback.search_batch([encoded[i] for i in rows], [keys[i] for i in rows], self.search_cfg,
                                               self.progress, terms={keys[i]: self.terms[keys[i]] for i in rows}))

    def search_here(self, encoded: list[list[int]], keys: list[int]) -> list[list[Hypothesis]]:
        """CTranslate2's search of one batch (see `search_batch`), with nmt's where they would differ."""
        cfg = self.search_cfg
        src = torch_lengths(encoded)
        limits = max_lengths(src, cfg.max_len_a, cfg.max_len_b, self.max_positions).tolist()
        sources = [[self.vocab[t] for t in ids[:-1]] for ids in encoded]  # CTranslate2 adds </s>
        out = self.engine.translate_batch(sources, max_decoding_length=max(limits) + 1, use_vmap=self.use_vmap,
                                          **self.options)
        results: list[list[Hypothesis]] = []
        again: set[int] = set()  # sentences whose search differs from nmt's: searched with nmt
        rescore: list[tuple[int, int]] = []  # (sentence, hypothesis) to score with nmt's forced EOS
        beam = not cfg.sampling and cfg.beam > 1
        for row, (limit, res) in enumerate(zip(limits, out)):
            hyps: list[Hypothesis] = []
            for tokens, log_prob in zip(res.hypotheses, res.scores):
                ids = [self.ids[t] for t in tokens]
                ended = bool(ids) and ids[-1] == EOS
                if ended:
                    ids.pop()
                specials = any(t in (PAD, BOS) for t in ids)  # never generated by nmt
                if (specials and not cfg.sampling) or (beam and (not ended or len(ids) >= limit)):
                    # nmt would have chosen another token, or ended every beam at the limit with EOS
                    again.add(row)
                if specials or not ended or len(ids) > limit:  # nmt ends this output at its limit, with EOS
                    ids = [t for t in ids if t not in (PAD, BOS)][:limit]
                    rescore.append((row, len(hyps)))
                hyps.append(Hypothesis(ids, 0.0, log_prob))
            results.append(hyps)
        if self.use_vmap and not cfg.sampling:  # scored again over the whole vocabulary, not the shortlist's
            again.update(row for row, _ in rescore)
        if cfg.sampling and cfg.temperature != 1.0:  # CTranslate2 scores the tempered distribution
            rescore = [(row, j) for row, hyps in enumerate(results) for j in range(len(hyps))]
        if self.fallback is None or self.compute_type not in ("float32", "default") or cfg.sampling:
            if again and not cfg.sampling and not self.told:  # other number formats round otherwise anyway
                self.told = True
                self.progress(Progress("engine", message=f"note: {FALLBACK_NOTE}; their output is CTranslate2's, cut "
                                                         f"at the limit (other than {ref('engine')} torch's)"))
            again = set()  # CTranslate2's output, cut at the limit
        rescore = [(row, j) for row, j in rescore if row not in again]
        if rescore:
            scored = self.forced_log_probs([sources[row] for row, _ in rescore],
                                           [results[row][j].tokens for row, j in rescore])
            for (row, j), log_prob in zip(rescore, scored):
                results[row][j] = Hypothesis(results[row][j].tokens, 0.0, log_prob)
        ranked = [rank_hypotheses(dedupe(hyps), cfg) for hyps in results]
        if again and self.fallback is not None:
            rows = sorted(again)
            redone = self.fallback.search_batch([encoded[row] for row in rows], [keys[row] for row in rows], cfg,
                                                self.progress, encoded if self.use_vmap else None)
            for row, hyps in zip(rows, redone):
                ranked[row] = hyps
        return ranked

    def forced_log_probs(self, sources: list[list[str]], targets: list[list[int]]) -> list[float]:
        """nmt's log-probability of each target followed by EOS: the target forced as CTranslate2's prefix, and
        its logits at each step with PAD and BOS taken out (score_batch would leave them in)."""
        out = self.engine.translate_batch(sources, [[self.vocab[t] for t in ids] for ids in targets], beam_size=1,
                                          max_decoding_length=max(map(len, targets)) + 1, min_decoding_length=0,
                                          max_input_length=0, return_logits_vocab=True, return_end_token=True)
        scores = []
        for ids, res in zip(targets, out):
            steps = res.logits[0][:len(ids) + 1]
            logits = torch.stack([torch.as_tensor(np.asarray(step)) for step in steps]).float()  # (T + 1, V)
            logits[:, [PAD, BOS]] = float("-inf")
            log_probs = logits.log_softmax(-1)
            chosen = log_probs[torch.arange(len(ids)), torch.tensor(ids, dtype=torch.long)].sum()
            scores.append(float(chosen + log_probs[len(ids), EOS]))
        return scores

    def alignment(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> list[tuple[int, int]]:
        """From CTranslate2's cross-attention of the last layer, every head averaged, over the hypothesis
        forced as the output (the same weights as nmt's teacher-forced pass)."""
        if not hypothesis.tokens:
            return []
        if self.meta.get("version", 1) < 2:
            raise ConfigError(f"{self.model_dir}: exported by an older nmt, whose model gives one head's attention; "
                              f"export it again for {ref('alignments')}")
        src_ids = self.encode([line], line_index)[0]
        source = [self.vocab[t] for t in src_ids[:-1]]
        prefix = [self.vocab[t] for t in hypothesis.tokens]
        res = self.engine.translate_batch([source], [prefix], beam_size=1, return_attention=True,
                                          return_end_token=True, max_decoding_length=len(prefix) + 1,
                                          min_decoding_length=0, max_input_length=0)[0]
        # (T, S - 1): a row per output piece and EOS; CTranslate2 leaves out the column of the source's EOS,
        # which no alignment takes (a column of zeros stands for it)
        weights = torch.tensor(res.attention[0])[: len(prefix) + 1]
        weights = torch.cat([weights, weights.new_zeros(weights.size(0), 1)], dim=1)
        labels = self.tokenizer.pieces
        return word_alignment(weights, labels(src_ids[:-1]) + [EOS_LABEL],
                              labels(list(hypothesis.tokens)) + [EOS_LABEL])


def torch_lengths(encoded: list[list[int]]) -> torch.Tensor:
    """A (B, S) tensor whose non-PAD positions are the sources' (for `max_lengths`, which counts them)."""
    src = torch.full((len(encoded), max(len(ids) for ids in encoded)), PAD, dtype=torch.long)
    for row, ids in enumerate(encoded):
        src[row, : len(ids)] = EOS
    return src


def dedupe(hyps: list[Hypothesis]) -> list[Hypothesis]:
    """Hypotheses with the same tokens once (the likeliest): outputs cut at their limit can coincide."""
    seen: dict[tuple[int, ...], Hypothesis] = {}
    for h in hyps:
        if tuple(h.tokens) not in seen or h.log_prob > seen[tuple(h.tokens)].log_prob:
            seen[tuple(h.tokens)] = h
    return list(seen.values()) if len(seen) < len(hyps) else hyps


