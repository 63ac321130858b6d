"""The Transformer of "Attention Is All You Need": embeddings and positions, the encoder and decoder
stacks of `nmt.model.layers`, the output projection, and incremental decoding.

Shapes: B batch, S source length, T target length, D d_model, H heads, Dh = D / H, V vocabulary.
One embedding table serves the encoder, the decoder and the output projection.

Incremental decoding carries a `DecodingState` from step to step: the tokens fed so far, the encoded
source (shared by a sentence's hypotheses) and each decoder layer's self-attention `KVCache`. `step`
advances it; search reorders, shrinks or widens it with `select` and `expand`, the one place that
knows its layout. The layers themselves change nothing: they return the grown cache.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Optional, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.config import ModelConfig
from nmt.core.vocab import PAD
from nmt.model.layers import DecoderLayer, DecoderParts, Dropout, EncoderLayer, KVCache, decoder_layer


def sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(...), as in the paper. (N, D)"""
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]  # (N, 1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))  # (D/2,)
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)[:, : d_model // 2]
    return table


def sinusoidal_halves_table(n_positions: int, d_model: int) -> Tensor:
    """The same frequencies in halves: PE[pos, i] = sin(pos / 10000^(2i/D)) for the first ceil(D/2) columns,
    then PE[pos, ceil(D/2) + i] = cos(...) (Marian's layout, as transformers' MarianSinusoidalPositionalEmbedding
    computes it: in float64, then rounded). (N, D)"""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (N, 1)
    angles = pos / 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (N, ceil(D/2))
    return torch.cat([angles.sin(), angles[:, : d_model // 2].cos()], dim=1).float()


POSITION_TABLES = {"sinusoidal": sinusoidal_table, "sinusoidal-halves": sinusoidal_halves_table}

# An imported model's output bias lowers the ids that are never generated (PAD, BOS) by this much, so that their
# logits leave the softmax's normaliser (exp(-10000) is 0 in any float format) while staying finite, as a checkpoint's
# weights must be (and fp16 can hold it).
NEVER_GENERATED_BIAS = -1e4


@dataclass(frozen=True)
class SourceMemory:
    """The encoded source: mask (B', 1, 1, S), the same as an additive attention bias, and each decoder
    layer's cross-attention keys/values (B', H, S, Dh), with one row per `group` consecutive hypotheses
    (a sentence's beams share it)."""

    mask: Tensor
    bias: Tensor  # 0 where the mask allows, -inf elsewhere: what attention makes of a boolean mask each call
    kv: list[tuple[Tensor, Tensor]]
    group: int = 1

    @classmethod
    def of(cls, mask: Tensor, kv: list[tuple[Tensor, Tensor]]) -> SourceMemory:
        k = kv[0][0]
        bias = torch.zeros(mask.shape, dtype=k.dtype, device=k.device).masked_fill_(~mask, float("-inf"))
        return cls(mask, bias, kv)

    def select(self, index: Tensor) -> SourceMemory:
        """Follow a selection of hypotheses `index` (N',); with group > 1 it lists whole groups, as
        beam search's reordering does, so the sentences are every group-th entry. Beam search keeps
        the same sentences at most steps: then nothing is copied."""
        sentences = index if self.group == 1 else index[:: self.group] // self.group
        n = self.mask.size(0)
        if sentences.numel() == n and torch.equal(sentences, torch.arange(n, device=sentences.device)):
            return self
        return SourceMemory(self.mask.index_select(0, sentences), self.bias.index_select(0, sentences),
                      [(k.index_select(0, sentences), v.index_select(0, sentences)) for k, v in self.kv], self.group)

    def expand(self, k: int) -> SourceMemory:
        return replace(self, group=self.group * k)


@dataclass
class DecodingState:
    """What incremental decoding carries from one step to the next, for N hypotheses. `Transformer.step`
    advances it in place; `select` and `expand` return new states and leave this one as it is."""

    prefix: Tensor  # (N, t) tokens fed so far, BOS first
    source: SourceMemory
    caches: Optional[list[KVCache]]  # one per decoder layer; None: recompute the prefix each step
    layers: Optional[list[DecoderParts]] = None  # with the caches: each decoder layer's parts, bound once

    def select(self, index: Tensor) -> DecodingState:
        """Keep hypotheses `index` (N',): reorder, drop or repeat rows. The one place that knows the layout."""
        caches = None if self.caches is None else [c.select(index) for c in self.caches]
        return DecodingState(self.prefix.index_select(0, index), self.source.select(index), caches, self.layers)

    def expand(self, k: int) -> DecodingState:
        """Each hypothesis becomes k consecutive ones (beam search after its first step); the source is
        shared, not copied."""
        if k == 1:
            return self
        index = torch.arange(self.prefix.size(0), device=self.prefix.device).repeat_interleave(k)
        caches = None if self.caches is None else [c.select(index) for c in self.caches]
        return DecodingState(self.prefix.index_select(0, index), self.source.expand(k), caches, self.layers)


class Transformer(nn.Module):
    """Encoder-decoder Transformer with tied embeddings (encoder, decoder and output projection)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD)
        if cfg.positions == "learned":
            self.pos_embed: Optional[nn.Embedding] = nn.Embedding(cfg.max_positions, cfg.d_model)
        else:
            self.pos_embed = None
            table = POSITION_TABLES[cfg.positions](cfg.max_positions, cfg.d_model)
            self.pos_table: Tensor
            self.register_buffer("pos_table", table, persistent=False)
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        # A fixed vector added to the logits (an imported Marian model's final_logits_bias): a buffer, not
        # trained, as transformers keeps it.
        self.output_bias: Optional[Tensor]
        self.register_buffer("output_bias", torch.zeros(cfg.vocab_size) if cfg.output_bias else None)
        # An untied model's output projection (an imported lm_head); a tied one projects with `embed.weight`.
        self.output_weight: Optional[nn.Parameter] = (
            None if cfg.tied_output else nn.Parameter(torch.empty(cfg.vocab_size, cfg.d_model)))
        self.dropout = Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        # Pre-LN stacks end un-normalised, so each gets a final LayerNorm; post-LN layers already end in one.
        pre = cfg.norm == "pre"
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        # Inference only (see `use_output_projection`): the output projection as its own module.
        self.output_proj: Optional[nn.Module] = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform linear weights, zero biases, embeddings ~ N(0, D^-0.5), as in fairseq."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        nn.init.normal_(self.embed.weight, mean=0.0, std=self.cfg.d_model ** -0.5)
        with torch.no_grad():
            self.embed.weight[PAD].zero_()
        if self.output_weight is not None:
            nn.init.normal_(self.output_weight, mean=0.0, std=self.cfg.d_model ** -0.5)
        if self.pos_embed is not None:
            nn.init.normal_(self.pos_embed.weight, mean=0.0, std=self.cfg.d_model ** -0.5)

    # -- pieces -------------------------------------------------------------------------------

    def embed_tokens(self, tokens: Tensor, start: int = 0) -> Tensor:
        """Token embeddings (scaled by sqrt(D) unless the config says not) plus positions start..start+L-1.
        tokens (B, L) -> (B, L, D)"""
        L = tokens.size(1)
        if start + L > self.cfg.max_positions:
            raise ValueError(f"sequence of {start + L} tokens exceeds max_positions {self.cfg.max_positions}")
        x = self.embed(tokens) * self.embed_scale  # (B, L, D)
        if self.pos_embed is not None:
            x = x + self.pos_embed.weight[start : start + L]
        else:
            x = x + self.pos_table[start : start + L].to(x.dtype)
        out: Tensor = self.dropout(x)  # a module's call is Any to mypy
        return out

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S) -> memory (B, S, D) and src_mask (B, 1, 1, S), True at real (non-pad) tokens."""
        src_mask = (src != PAD)[:, None, None, :]  # (B, 1, 1, S)
        x = self.embed_tokens(src)
        for layer in self.encoder:
            x = layer(x, src_mask)
        return self.encoder_norm(x), src_mask

    def memory_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Cross-attention keys/values of every decoder layer, computed once per source. Each (B, H, S, Dh)."""
        return [layer.cross_attn.project_kv(memory) for layer in cast("Iterable[DecoderLayer]", self.decoder)]

    @property
    def projection(self) -> Tensor:
        """The output projection's matrix (V, D): the embedding table, or an untied model's own."""
        return self.embed.weight if self.output_weight is None else self.output_weight

    def output_logits(self, x: Tensor) -> Tensor:
        """Decoder states (B, T, D) -> logits (B, T, V) through the output projection (the shared embedding
        matrix, or an untied model's own) plus the output bias, if the model has one."""
        if self.output_proj is not None:
            logits: Tensor = self.output_proj(self.decoder_norm(x))  # a module's call is Any to mypy
            return logits
        return F.linear(self.decoder_norm(x), self.projection, self.output_bias)

    def use_output_projection(self) -> None:
        """Compute the output logits with an `nn.Linear` sharing the embedding table, for inference.

        The same function as before; the point is that module-level rewrites such as int8 dynamic
        quantisation (which replaces every nn.Linear) then reach the output projection too, while the
        embedding lookups keep the original table. For inference only: the state dict then lists the
        table a second time (output_proj.weight), and a quantised copy no longer follows the embedding.
        """
        proj = nn.Linear(self.cfg.d_model, self.cfg.vocab_size, bias=False, device=self.embed.weight.device,
                         dtype=self.embed.weight.dtype)
        proj.weight = cast(nn.Parameter, self.projection)  # shared, not copied
        if self.output_bias is not None:
            proj.bias = nn.Parameter(self.output_bias, requires_grad=False)  # shared too
        self.output_proj = proj

    def fuse_qkv(self) -> None:
        """For decoding: each decoder layer's self-attention computes q|k|v in one product from now on
        (`MultiHeadAttention.fuse_qkv`; a copy of the weights: inference only)."""
        for layer in cast("Iterable[DecoderLayer]", self.decoder):
            layer.self_attn.fuse_qkv()

    def decode(self, tgt_in: Tensor, memory_kv: list[tuple[Tensor, Tensor]], src_mask: Tensor,
               need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """Teacher-forced decoding of the whole prefix tgt_in (B, T) -> decoder states (B, T, D), and
        with `need_weights` each layer's cross-attention weights (B, H, T, S)."""
        x = self.embed_tokens(tgt_in)  # (B, T, D)
        weights = []
        for layer, kv in zip(self.decoder, memory_kv):
            x, _, w = layer(x, kv, src_mask, need_weights=need_weights)
            weights.append(w)
        return x, weights if need_weights else []

    def forward(self, src: Tensor, tgt_in: Tensor, project: bool = True) -> Tensor:
        """src (B, S), tgt_in (B, T) starting with BOS -> logits (B, T, V); with `project=False` the final
        decoder states (B, T, D) that the output projection (`embed.weight`) takes, for a loss that
        fuses the projection (nmt.model.loss.projected_loss)."""
        memory, src_mask = self.encode(src)
        x = self.decode(tgt_in, self.memory_kv(memory), src_mask)[0]
        return self.output_logits(x) if project else self.decoder_norm(x)

    # -- incremental decoding -----------------------------------------------------------------

    def start_decoding(self, src: Tensor, use_cache: bool = True) -> DecodingState:
        """Encode `src` (B, S): the state of `step` before any token, one row per sentence.

        The cross-attention keys/values of every layer are computed here, once. Without the cache
        (`use_cache=False`, the reference that tests compare against), `step` recomputes the whole
        prefix, which is the cost the cache removes.
        """
        memory, src_mask = self.encode(src)
        caches = [KVCache() for _ in self.decoder] if use_cache else None
        layers = [layer.parts() for layer in cast("Iterable[DecoderLayer]", self.decoder)] if use_cache else None
        source = SourceMemory.of(src_mask, self.memory_kv(memory))
        return DecodingState(src.new_zeros(src.size(0), 0), source, caches, layers)

    def step(self, tokens: Tensor, state: DecodingState) -> Tensor:
        """Feed the newest token of each hypothesis, tokens (N,): log-probabilities (N, V).

        Advances `state` in place: its prefix, and each layer's cache as soon as the layer has run, so
        that the old cache is freed then (a new state per step would hold every layer's old and new
        cache at once, about a cache more of peak memory). With the cache, each layer runs `decoder_layer`
        on its parts as `start_decoding` bound them, on the newest position only.
        """
        state.prefix = torch.cat([state.prefix, tokens[:, None]], dim=1)  # (N, t+1)
        src = state.source
        if state.caches is None:
            x = self.decode(state.prefix, src.kv, src.mask)[0][:, -1:]  # (N, 1, D)
        else:
            assert state.layers is not None  # start_decoding binds the layers' parts with the caches
            x = self.embed_tokens(tokens[:, None], start=state.prefix.size(1) - 1)  # (N, 1, D)
            for i, (parts, kv) in enumerate(zip(state.layers, src.kv)):
                x, cache, _ = decoder_layer(parts, x, kv, src.bias, state.caches[i])
                assert cache is not None  # given a cache, decoder_layer returns it extended
                state.caches[i] = cache
        logits = self.output_logits(x.squeeze(1)).float()  # (N, V), a tensor of our own
        # In place: one (N, V) buffer less to allocate (and page in) per step.
        return torch.log_softmax(logits, -1, out=logits)

    def cross_attention_weights(self, src: Tensor, tgt_in: Tensor) -> list[Tensor]:
        """Teacher-forced cross-attention weights of every decoder layer, each (B, H, T, S), for plots."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, self.memory_kv(memory), src_mask, need_weights=True)[1]


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
