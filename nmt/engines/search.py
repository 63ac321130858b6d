"""Greedy and beam search over a batch of sources, with the model's incremental (KV-cached) state.

The model is anything with `start_decoding(src) -> state` and `step(tokens, state) -> log_probs`, which
advances the state (see `nmt.model.transformer.Transformer` and `Decoder` below); search changes the hypotheses a
state holds only through its `select(index)` and `expand(k)`, which return new states. Beam search
runs its first step once per sentence and then expands each sentence to K beams, so that a state may
share per-sentence parts (the source's keys and values) between a sentence's beams.

Conventions: hypotheses are scored by their total log-probability including EOS; the length used
by the length penalty counts the generated tokens including EOS; beam search keeps the K likeliest
finished hypotheses and ranks them by score (as CTranslate2 does, so that the two engines agree).
Sentences whose search is over
leave the batch, so the work shrinks as they finish.

Beam search without early stopping (`SearchConfig.early_stopping` False, imported models' default) is
transformers' generate with early_stopping=False, rule for rule: a sentence's search goes on while its best
running beam, ended now, would score better than the worst of the K best finished hypotheses; those K best
by score are kept (`keep_best`), not the K likeliest; and the EOS forced at the length limit scores 0, as
transformers' ForcedEOSTokenLogitsProcessor sets it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, TypeVar, cast, overload

import torch
from torch import Tensor

from nmt.config import SearchConfig, choices_of
from nmt.core.vocab import BOS, EOS, PAD

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self needs Python 3.11; read by type checkers only

LENPEN_TYPES = choices_of(SearchConfig, "lenpen_type")


class State(Protocol):
    """A model's decoding state for N hypotheses."""

    def select(self, index: Tensor) -> Self:
        """Keep hypotheses `index` (N',): reorder, drop or repeat them (after `expand(k)`, whole groups
        of k consecutive hypotheses, as beam search selects them)."""

    def expand(self, k: int) -> Self:
        """Each hypothesis becomes k consecutive ones."""


StateT = TypeVar("StateT", bound=State)  # a model's own state type


class Decoder(Protocol[StateT]):
    def start_decoding(self, src: Tensor) -> StateT:
        """The state before the first token, one hypothesis per sentence of src (B, S)."""

    def step(self, tokens: Tensor, state: StateT) -> Tensor:
        """Feed tokens (N,): log-probabilities of the next token (N, V); advances `state` in place."""


class Restricted:
    """A decoder (see `Decoder`) whose next token is one of `allowed` (C,) ids, a vocabulary shortlist's: the others'
    log-probabilities are -inf and the allowed ones renormalised among themselves, the log_softmax of the allowed
    logits (as CTranslate2 computes only their rows of the output projection)."""

    def __init__(self, model: Decoder[Any], allowed: Tensor):
        self.model, self.allowed = model, allowed
        self.outside: Optional[Tensor] = None  # (V,) bool, made at the first step (V is the model's)

    def start_decoding(self, src: Tensor) -> Any:
        return self.model.start_decoding(src)

    def step(self, tokens: Tensor, state: Any) -> Tensor:
        log_probs = self.model.step(tokens, state)  # (N, V), a tensor of its own
        if self.outside is None:
            self.outside = torch.ones(log_probs.size(-1), dtype=torch.bool, device=log_probs.device)
            self.outside[self.allowed.to(log_probs.device)] = False
        log_probs.masked_fill_(self.outside, float("-inf"))
        return log_probs.sub_(log_probs.logsumexp(-1, keepdim=True))


@dataclass
class Hypothesis:
    tokens: list[int]  # generated ids, without BOS and EOS
    score: float  # log_prob / length_penalty: what beam search ranks by
    log_prob: float  # sum of token log-probabilities, EOS included


@overload
def length_penalty(length: Tensor, alpha: float, kind: str = ...) -> Tensor: ...


@overload
def length_penalty(length: float, alpha: float, kind: str = ...) -> float: ...


def length_penalty(length: Tensor | float, alpha: float, kind: str = "gnmt") -> Tensor | float:
    """The divisor of a hypothesis' log-probability: GNMT ((5+len)/6)^alpha or len^alpha."""
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if kind == "power":
        return length ** alpha
    raise ValueError(f"unknown length penalty {kind!r}; use one of {LENPEN_TYPES}")


def max_lengths(src: Tensor, a: float, b: int, max_positions: int) -> Tensor:
    """Per-sentence output limits a * |x| + b, capped so BOS + output fits the model's positions. (B,)"""
    src_len = (src != PAD).sum(1) - 1  # the source ends in EOS, which |x| does not count
    # Clamped in float64 before the cast: a huge a or b must mean "as long as the model allows", not
    # wrap around int64 to a negative limit (which the clamp would turn into one token).
    limit = (src_len.double() * float(a) + float(b)).clamp(min=1, max=max_positions - 1)
    return limit.long()


def beam_step(scores: Tensor, log_probs: Tensor, n: int | None = None,
              chunk: int = 64) -> tuple[Tensor, Tensor, Tensor]:
    """Best 2K (or `n`) continuations of each sentence's K beams.

    scores (B, K) running totals; log_probs (B, K, V) of the next token.
    Returns candidate scores, source beams and tokens, each (B, 2K), best first.
    Twice the beam, so that K candidates remain after the ones ending in EOS are set aside.
    Without `n`, at most K*V candidates; with `n`, exactly n (the missing ones -inf).
    Over a large vocabulary the candidates are found in two passes (`top_totals_by_chunks`, tokens in
    chunks of `chunk`), otherwise with one top-k over all K*V totals: the same candidates.
    """
    B, K, V = log_probs.shape
    pad_to = n
    n = 2 * K if n is None else n
    m = min(n, K * V)
    if 4 * m * chunk <= K * V:
        cand_scores, flat = top_totals_by_chunks(scores, log_probs, m, chunk)  # (B, m)
    else:
        cand_scores, flat = (scores[:, :, None] + log_probs).view(B, K * V).topk(m, dim=1)  # (B, m)
    if pad_to is not None and m < n:
        pad = n - m
        cand_scores = torch.cat([cand_scores, cand_scores.new_full((B, pad), float("-inf"))], dim=1)
        flat = torch.cat([flat, flat.new_zeros(B, pad)], dim=1)
    return cand_scores, torch.div(flat, V, rounding_mode="floor"), flat % V


def top_totals_by_chunks(scores: Tensor, log_probs: Tensor, n: int, chunk: int) -> tuple[Tensor, Tensor]:
    """The n best totals scores[b, k] + log_probs[b, k, v] of each sentence b, best first, and their
    indices k * V + v: each (B, n). scores (B, K), log_probs (B, K, V).

    First the maximum of each chunk of `chunk` tokens of a beam (a vectorised max, ~15x cheaper per
    number than a top-k over them all on the CPUs we measured), then the best n chunks of each
    sentence, then the best n of their tokens. The n best totals lie in the n best chunks: a chunk's
    best total is its maximum plus its beam's score (float addition is monotonic), and is at least
    each of its tokens' totals. The totals are the same sums as a top-k over all of them would see.
    """
    B, K, V = log_probs.shape
    whole = V // chunk * chunk
    maxima = log_probs[:, :, :whole].view(B, K, -1, chunk).amax(-1)  # (B, K, V // chunk)
    if whole < V:  # the last, shorter chunk
        maxima = torch.cat([maxima, log_probs[:, :, whole:].amax(-1, keepdim=True)], dim=2)
    n_chunks = maxima.size(2)
    best = (maxima + scores[:, :, None]).view(B, K * n_chunks).topk(n, dim=1).indices  # (B, n) chunks
    beams, starts = best // n_chunks, best % n_chunks * chunk  # (B, n)
    tokens = starts[:, :, None] + torch.arange(chunk, device=best.device)  # (B, n, chunk)
    outside = tokens >= V  # past the end of the last chunk
    tokens = tokens.masked_fill(outside, 0)
    index = (beams[:, :, None] * V + tokens).view(B, n * chunk)  # (B, n * chunk)
    totals = log_probs.view(B, K * V).gather(1, index).view(B, n, chunk) + scores.gather(1, beams)[:, :, None]
    cand_scores, pick = totals.masked_fill_(outside, float("-inf")).view(B, n * chunk).topk(n, dim=1)
    return cand_scores, index.gather(1, pick)


def restrict_tokens(log_probs: Tensor, at_limit: Tensor, free_eos: bool = False) -> Tensor:
    """Never emit PAD or BOS: the distribution over the other tokens, renormalised (as CTranslate2's
    suppress_sequences takes them out before its softmax, so that both engines search with the same numbers); force
    EOS for sentences at their length limit, with its log-probability (`free_eos`: with 0, as transformers' forced
    EOS). log_probs (B, K, V)"""
    log_probs[:, :, PAD] = float("-inf")
    log_probs[:, :, BOS] = float("-inf")
    total = log_probs.logsumexp(-1, keepdim=True)  # -inf where nothing else is possible: left as it is, not NaN
    log_probs -= torch.where(torch.isfinite(total), total, torch.zeros_like(total))
    if at_limit.any():
        eos_lp = log_probs[at_limit, :, EOS].clone()
        log_probs[at_limit] = float("-inf")
        log_probs[at_limit, :, EOS] = 0.0 if free_eos else eos_lp
    return log_probs


@torch.inference_mode()
def beam_search(model: Decoder[StateT], src: Tensor, cfg: SearchConfig, max_positions: int) -> list[list[Hypothesis]]:
    """Beam search of src (B, S); up to `cfg.nbest` hypotheses per sentence, best first.

    A sentence's search ends at its length limit, or as `beam_done` says (`cfg.early_stopping`: once K hypotheses
    have ended in EOS, as in fairseq).
    """
    B, K = src.size(0), cfg.beam
    device = src.device
    # All beams start identical: the first step runs once per sentence, whose state is expanded to
    # K beams after it.
    state = model.start_decoding(src)
    width = 1  # hypotheses per sentence in the state
    limits = max_lengths(src, cfg.max_len_a, cfg.max_len_b, max_positions)  # (b,) of the active sentences
    rows = torch.arange(B, device=device)  # sentence of each active sentence slot
    first_rows = rows[:, None] * K  # (b, 1): each active sentence's first row in the state, after the first step
    tokens = torch.full((B,), BOS, dtype=torch.long, device=device)
    history = src.new_zeros(B, K, 0)
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: expand only the first
    kept = torch.full((B, K), float("-inf"), device=device)  # without early stopping: see keep_best
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    n_finished = torch.zeros(B, dtype=torch.long, device=device)  # per active sentence
    t = 0
    while rows.numel():
        b = rows.numel()
        at_limit = limits <= t  # (b,)
        log_probs = restrict_tokens(model.step(tokens, state).view(b, width, -1), at_limit, not cfg.early_stopping)
        cand_scores, cand_beams, cand_tokens = beam_step(scores[:, :width], log_probs, 2 * K)  # (b, 2K)
        n_finished += finalize(finished, rows, history, cand_scores, cand_beams, cand_tokens, t, cfg)
        if not cfg.early_stopping:
            kept = keep_best(kept, cand_scores, cand_tokens, t, cfg)
        scores, beams, tokens = select_alive(cand_scores, cand_beams, cand_tokens, K)  # (b, K)
        history = torch.cat([history.gather(1, beams[:, :, None].expand(-1, -1, t)), tokens[:, :, None]], dim=2)
        keep = (~beam_done(scores, n_finished, at_limit, kept[:, -1], t, cfg)).nonzero().flatten()  # (b',)
        shrink = keep.numel() < b
        if shrink:  # sentences leave the batch
            rows, scores, history, beams, tokens, n_finished, limits, kept = (
                x[keep] for x in (rows, scores, history, beams, tokens, n_finished, limits, kept))
            first_rows = first_rows[: keep.numel()]
        if width < K:  # after the shared first step: each kept sentence's row becomes its K beams
            state = (state.select(keep) if shrink else state).expand(K)
            width = K
        else:  # the rows of the state that the kept beams continue
            state = state.select(((keep[:, None] * K if shrink else first_rows) + beams).flatten())
        tokens = tokens.flatten()
        t += 1
    return [best_hypotheses(hyps, K, cfg.nbest, cfg.early_stopping) for hyps in finished]


def best_hypotheses(finished: list[Hypothesis], k: int, n: int, likeliest: bool = True) -> list[Hypothesis]:
    """The n best of a sentence's finished hypotheses by score, among its k likeliest (by log-probability);
    not `likeliest` (beam search without early stopping): the n best by score, as transformers keeps them.

    A search ends once k hypotheses have finished, but its last step may finish more: as CTranslate2 does,
    the k likeliest are kept and then ranked by their length-normalised scores. (For alpha >= 0 the best
    one is the same as if only the first k to finish were kept: a hypothesis left out has a same-length
    one of the last step that is at least as likely, so at least as good.)
    """
    if not likeliest:
        return sorted(finished, key=lambda h: -h.score)[:n]
    kept = sorted(finished, key=lambda h: -h.log_prob)[:k]
    return sorted(kept, key=lambda h: -h.score)[:n]


def beam_done(scores: Tensor, n_finished: Tensor, at_limit: Tensor, worst_kept: Tensor, t: int,
              cfg: SearchConfig) -> Tensor:
    """Which sentences' beam search is over after step t (b,): at the length limit; when no beam is alive;
    with early stopping, once K hypotheses have ended (fairseq's rule, transformers' early_stopping=True);
    without, once the best running beam, ended now at length t + 1, would score no better than `worst_kept`,
    the K-th best score of the ended ones (-inf while fewer than K have ended): transformers' early_stopping=False,
    under which a longer hypothesis may still win where the length penalty favours length.
    scores (b, K): the running beams' log-probabilities, best first."""
    done = at_limit | torch.isinf(scores).all(1)
    if cfg.early_stopping:
        return done | (n_finished >= scores.size(1))
    # float32, as transformers divides: the same comparison to the last bit
    bound = scores[:, 0] / length_penalty(t + 1, cfg.lenpen, cfg.lenpen_type)
    return done | ~(bound > worst_kept)


def keep_best(kept: Tensor, cand_scores: Tensor, cand_tokens: Tensor, t: int, cfg: SearchConfig) -> Tensor:
    """Without early stopping: each sentence's K best scores of ended hypotheses, best first (-inf where fewer
    have ended), `kept` (b, K) with the EOS candidates of step t that rank within the top K (as `finalize`
    takes them). cand_scores, cand_tokens (b, 2K) from `beam_step`."""
    K = kept.size(1)
    ended = (cand_tokens[:, :K] == EOS) & torch.isfinite(cand_scores[:, :K])
    new = (cand_scores[:, :K] / length_penalty(t + 1, cfg.lenpen, cfg.lenpen_type)).masked_fill(~ended, float("-inf"))
    return torch.cat([kept, new], dim=1).topk(K, dim=1).values


def finalize(finished: list[list[Hypothesis]], rows: Tensor, history: Tensor, cand_scores: Tensor,
             cand_beams: Tensor, cand_tokens: Tensor, t: int, cfg: SearchConfig) -> Tensor:
    """Move EOS candidates ranked within the top K into their sentence's finished list (`best_hypotheses`
    keeps the K likeliest at the end).

    Vectorised: one device-to-host transfer per step that has EOS events, a Python loop over those
    events only. Returns how many EOS candidates each active sentence had in its top K (b,); a
    sentence has K finished hypotheses once these counts add up to K.
    """
    K = history.size(1)
    is_final = (cand_tokens[:, :K] == EOS) & torch.isfinite(cand_scores[:, :K])  # (b, K)
    idx = is_final.nonzero()  # (E, 2), row-major: each sentence's events in score order
    if idx.size(0) == 0:
        return is_final.sum(1)
    i, j = idx[:, 0], idx[:, 1]
    penalty = length_penalty(t + 1, cfg.lenpen, cfg.lenpen_type)
    sentences, log_probs = rows[i].tolist(), cand_scores[i, j].tolist()
    # Without early stopping the scores are float32 quotients, those `keep_best` and transformers compare.
    scores = [lp / penalty for lp in log_probs] if cfg.early_stopping else (cand_scores[i, j] / penalty).tolist()
    tokens = history[i, cand_beams[i, j]].tolist()  # (E, t)
    for sentence, log_prob, score, toks in zip(sentences, log_probs, scores, tokens):
        finished[sentence].append(Hypothesis(toks, score, log_prob))
    return is_final.sum(1)


def select_alive(cand_scores: Tensor, cand_beams: Tensor, cand_tokens: Tensor, K: int) -> tuple[Tensor, Tensor, Tensor]:
    """The best K candidates that do not end in EOS: scores, source beams, tokens, each (b, K)."""
    is_eos = cand_tokens == EOS
    # A stable sort puts the other candidates first, each group in its score order.
    pick = is_eos.byte().sort(dim=1, stable=True).indices[:, :K]  # (b, K)
    scores = cand_scores.gather(1, pick).masked_fill_(is_eos.gather(1, pick), float("-inf"))
    return scores, cand_beams.gather(1, pick), cand_tokens.gather(1, pick)


def sampling_probs(log_probs: Tensor, cfg: SearchConfig) -> Tensor:
    """The distribution to draw the next token from: log_probs (N, V) / temperature, cut to the top k and
    to the nucleus of probability topp (always keeping the likeliest token), renormalised. (N, V)"""
    logits = log_probs / cfg.temperature
    if 0 < cfg.topk < logits.size(-1):
        kth = logits.topk(cfg.topk, dim=-1).values[:, -1:]  # (N, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.topp < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(-1)
        before = sorted_probs.cumsum(-1) - sorted_probs  # probability of the likelier tokens
        drop = torch.empty_like(before, dtype=torch.bool).scatter_(-1, order, before >= cfg.topp)  # back in V order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


def draw(probs: Tensor, u: Tensor) -> Tensor:
    """Inverse-CDF sampling: for u (N,) uniform in [0, 1), the first token whose cumulative probability
    exceeds u (so a token of probability 0 is never drawn). probs (N, V) -> tokens (N,)"""
    cdf = probs.cumsum(-1)  # (N, V)
    x = (u.to(cdf.dtype) * cdf[:, -1]).unsqueeze(1)  # (N, 1): scaled to the row's total, ~1
    return torch.searchsorted(cdf, x, right=True).squeeze(1).clamp_(max=probs.size(-1) - 1)


Choose = Callable[[Tensor, Tensor], Tensor]  # (log_probs (b, V), rows (b,)) -> next tokens (b,)


def one_by_one(model: Decoder[StateT], src: Tensor, cfg: SearchConfig, max_positions: int, n: int,
               choose: Choose) -> list[list[Hypothesis]]:
    """The loop of greedy search and sampling: n hypotheses per sentence of src (B, S), each extended by
    the token `choose` picks until EOS or its length limit, best score first; hypotheses leave the batch
    as they end, so the work shrinks. Rows are numbered sentence * n + hypothesis."""
    B = src.size(0)
    state = model.start_decoding(src)
    if n > 1:  # hypotheses end one by one, not in whole groups as beams do: each gets its own rows
        state = state.select(torch.arange(B, device=src.device).repeat_interleave(n))
    limits = max_lengths(src, cfg.max_len_a, cfg.max_len_b, max_positions).repeat_interleave(n)  # (B*n,)
    rows = torch.arange(B * n, device=src.device)  # hypothesis of each active row
    tokens = torch.full((B * n,), BOS, dtype=torch.long, device=src.device)
    history = src.new_zeros(B * n, 0)
    totals = torch.zeros(B * n, device=src.device)
    results: list[list[Hypothesis]] = [[] for _ in range(B)]
    t = 0
    while rows.numel():
        log_probs = restrict_tokens(model.step(tokens, state)[:, None], limits[rows] <= t)[:, 0]  # (b, V)
        tokens = choose(log_probs, rows)  # (b,)
        totals = totals + log_probs.gather(1, tokens[:, None]).squeeze(1)
        done = (tokens == EOS) | (limits[rows] <= t)  # the limit ends a hypothesis even if EOS is impossible
        penalty = length_penalty(t + 1, cfg.lenpen, cfg.lenpen_type)
        for i in done.nonzero().flatten().tolist():
            score = cast(float, totals[i].item())  # item() is typed as any number; totals are float
            results[cast(int, rows[i].item()) // n].append(Hypothesis(history[i].tolist(), score / penalty, score))
        history = torch.cat([history, tokens[:, None]], dim=1)
        if done.any():
            keep = (~done).nonzero().flatten()
            rows, tokens, history, totals = rows[keep], tokens[keep], history[keep], totals[keep]
            state = state.select(keep)
        t += 1
    return [sorted(hyps, key=lambda h: -h.score) for hyps in results]


@torch.inference_mode()
def greedy_search(model: Decoder[StateT], src: Tensor, cfg: SearchConfig, max_positions: int) -> list[list[Hypothesis]]:
    """Arg-max decoding of src (B, S); one hypothesis per sentence."""
    return one_by_one(model, src, cfg, max_positions, 1, lambda log_probs, rows: argmax_by_chunks(log_probs))


def argmax_by_chunks(x: Tensor, chunk: int = 64) -> Tensor:
    """`x.argmax(-1)` of x (N, V), the first of equal maxima, found in two passes over a large V: the
    maximum of each chunk of `chunk` numbers (a vectorised max, ~10x cheaper per number than argmax on
    the CPUs we measured), then the first position of the maximum in the first chunk that holds it. (N,)"""
    N, V = x.shape
    if 4 * chunk > V:
        return x.argmax(-1)
    whole = V // chunk * chunk
    maxima = x[:, :whole].view(N, -1, chunk).amax(-1)  # (N, V // chunk)
    if whole < V:  # the last, shorter chunk
        maxima = torch.cat([maxima, x[:, whole:].amax(-1, keepdim=True)], dim=1)
    index = maxima.argmax(-1, keepdim=True) * chunk + torch.arange(chunk, device=x.device)  # (N, chunk)
    outside = index >= V
    values = x.gather(1, index.masked_fill(outside, 0)).masked_fill_(outside, float("-inf"))
    return index.gather(1, values.argmax(-1, keepdim=True)).squeeze(1)


@torch.inference_mode()
def sample_search(model: Decoder[StateT], src: Tensor, cfg: SearchConfig, max_positions: int,
                  keys: Optional[Sequence[int]] = None) -> list[list[Hypothesis]]:
    """`cfg.nbest` independent samples per sentence of src (B, S), best score first.

    Each sample draws from its own random stream, seeded by (cfg.seed, the sentence's key, the sample's
    number), so a line gets the same samples whatever it is batched with; `keys` are the sentences'
    line numbers (default 0..B-1). Scores are the model's log-probabilities of the drawn tokens (before
    temperature, top-k and top-p), length-penalised as in beam search.
    """
    keys = range(src.size(0)) if keys is None else keys
    streams = [random.Random(f"{cfg.seed}:{key}:{j}") for key in keys for j in range(cfg.nbest)]

    def choose(log_probs: Tensor, rows: Tensor) -> Tensor:
        u = torch.tensor([streams[r].random() for r in rows.tolist()], device=log_probs.device)
        return draw(sampling_probs(log_probs, cfg), u)

    return one_by_one(model, src, cfg, max_positions, cfg.nbest, choose)


def search(model: Decoder[StateT], src: Tensor, cfg: SearchConfig, max_positions: int,
           keys: Optional[Sequence[int]] = None) -> list[list[Hypothesis]]:
    """Sampling with `cfg.sampling` (`keys`: the sentences' line numbers); otherwise greedy search for
    beam 1 (and nbest 1), beam search for more."""
    if cfg.sampling:
        return sample_search(model, src, cfg, max_positions, keys)
    if cfg.beam == 1 and cfg.nbest == 1:
        return greedy_search(model, src, cfg, max_positions)
    return beam_search(model, src, cfg, max_positions)
