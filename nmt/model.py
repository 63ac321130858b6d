"""The Transformer of "Attention Is All You Need", bottom-up: attention, feed-forward, layers, model.

Shapes: B batch, S source length, T target length, D d_model, H heads, Dh = D / H, V vocabulary.
One embedding table serves the encoder, the decoder and the output projection.

Incremental decoding carries a `DecodingState` from step to step: the tokens fed so far, the encoded
source (shared by a sentence's hypotheses) and each decoder layer's self-attention `KVCache`. `step`
advances it; search reorders, shrinks or widens it with `select` and `expand`, the one place that
knows its layout. The layers themselves change nothing: they return the grown cache.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.config import ModelConfig
from nmt.vocab import PAD


def sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(...), as in the paper. (N, D)"""
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]  # (N, 1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))  # (D/2,)
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)[:, : d_model // 2]
    return table


class _Dropout(torch.autograd.Function):
    """Inverted dropout with the keep mask drawn by `torch.rand` (as torch's CUDA kernels do): on the CPU
    that is about twice as fast as `F.dropout`, whose per-element Bernoulli draws cost more than
    the rest of a small model's elementwise work. The same generator, so a resumed run redraws
    the same masks."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:
        keep = torch.rand_like(x) >= p  # P(keep) = 1 - p: rand is uniform on [0, 1)
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return x.mul(keep).mul_(ctx.scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None


class Dropout(nn.Dropout):
    """`nn.Dropout` (same module, same state dict) with `_Dropout`'s faster mask on the CPU."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":  # CUDA's own fused kernel is already fast
            return F.dropout(x, self.p, True)
        return _Dropout.apply(x, self.p)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over H heads, via torch's fused `scaled_dot_product_attention`."""

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def split_heads(self, x: Tensor) -> Tensor:
        B, L, D = x.shape
        return x.view(B, L, self.n_heads, D // self.n_heads).transpose(1, 2)  # (B, H, L, Dh)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of `x` (B, L, D), each (B, H, L, Dh)."""
        return self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))

    def attend(self, x: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None,
               causal: bool = False, need_weights: bool = False) -> tuple[Tensor, Optional[Tensor]]:
        """Queries from `x` (B, Tq, D) over precomputed keys/values (B, H, Tk, Dh).

        Returns the output (B, Tq, D) and, with `need_weights` (for plots; no causal mask), the
        softmax weights (B, H, Tq, Tk) of the same queries; the output is SDPA's either way.
        `mask` is boolean, True where attention is allowed, broadcastable to (B, H, Tq, Tk).
        """
        q = self.split_heads(self.q_proj(x))  # (B, H, Tq, Dh)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, dropout_p=self.dropout if self.training else 0.0
        )  # (B, H, Tq, Dh)
        B, H, Tq, Dh = y.shape
        weights = softmax_weights(q, k, mask) if need_weights else None
        return self.out_proj(y.transpose(1, 2).reshape(B, Tq, H * Dh)), weights  # (B, Tq, D)


def softmax_weights(q: Tensor, k: Tensor, mask: Optional[Tensor]) -> Tensor:
    """softmax(q k^T / sqrt(Dh)) where `mask` allows. q (B, H, Tq, Dh), k (B, H, Tk, Dh) -> (B, H, Tq, Tk)"""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1)


class FeedForward(nn.Module):
    """Position-wise FFN(x) = W2 dropout(relu(W1 x))."""

    def __init__(self, d_model: int, d_ff: int, activation_dropout: float):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(activation_dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.dropout(F.relu(self.fc1(x))))


class Sublayer(nn.Module):
    """A residual connection around `fn` with LayerNorm before (pre-LN) or after (post-LN)."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x: Tensor, fn) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(fn(self.norm(x)))
        return self.norm(x + self.dropout(fn(x)))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout)
        self.attn_block = Sublayer(cfg.d_model, cfg.dropout, pre)
        self.ffn_block = Sublayer(cfg.d_model, cfg.dropout, pre)

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        """x (B, S, D), src_mask (B, 1, 1, S) True at real tokens -> (B, S, D)"""

        def self_attention(h: Tensor) -> Tensor:
            return self.self_attn.attend(h, *self.self_attn.project_kv(h), mask=src_mask)[0]

        x = self.attn_block(x, self_attention)
        return self.ffn_block(x, self.ffn)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout)
        self.self_block = Sublayer(cfg.d_model, cfg.dropout, pre)
        self.cross_block = Sublayer(cfg.d_model, cfg.dropout, pre)
        self.ffn_block = Sublayer(cfg.d_model, cfg.dropout, pre)

    def forward(self, x: Tensor, memory_kv: tuple[Tensor, Tensor], src_mask: Tensor,
                cache: Optional["KVCache"] = None, need_weights: bool = False) -> "LayerOutput":
        """x (B, T, D); memory_kv: cross-attention keys/values (B', H, S, Dh); src_mask (B', 1, 1, S).

        B' is B, or one row per group of B / B' consecutive rows of x (the hypotheses of one sentence
        in beam search): the source is then shared rather than copied.

        Without `cache`, x is the whole target prefix and self-attention is causal. With `cache`,
        x holds only the newest position(s): they attend to the cached ones and themselves, which
        needs no mask, and the output carries the cache with their keys/values appended.
        With `need_weights`, the output also carries the cross-attention weights (B, H, T, S).
        """
        new_cache, weights = None, None

        def self_attention(h: Tensor) -> Tensor:
            nonlocal new_cache
            k, v = self.self_attn.project_kv(h)  # (B, H, T, Dh)
            if cache is None:
                return self.self_attn.attend(h, k, v, causal=True)[0]
            new_cache = cache.append(k, v)
            return self.self_attn.attend(h, new_cache.k, new_cache.v)[0]

        def cross_attention(h: Tensor) -> Tensor:
            nonlocal weights
            k, v = memory_kv
            n = k.size(0)
            if h.size(0) == n:
                y, weights = self.cross_attn.attend(h, k, v, mask=src_mask, need_weights=need_weights)
                return y
            # Beam search: memory_kv has one row per sentence and h the sentence's hypotheses in
            # consecutive rows; each hypothesis' positions become queries of its sentence's row.
            N, T, D = h.shape
            y, weights = self.cross_attn.attend(h.reshape(n, (N // n) * T, D), k, v, mask=src_mask,
                                                need_weights=need_weights)
            if weights is not None:
                weights = weights.view(n, -1, N // n, T, k.size(2)).transpose(1, 2).reshape(N, -1, T, k.size(2))
            return y.view(N, T, D)

        x = self.self_block(x, self_attention)
        x = self.cross_block(x, cross_attention)
        return LayerOutput(self.ffn_block(x, self.ffn), new_cache, weights)


class LayerOutput(NamedTuple):
    x: Tensor  # (B, T, D)
    cache: Optional["KVCache"]  # the self-attention cache with this call's positions appended
    cross_weights: Optional[Tensor]  # (B, H, T, S), with need_weights


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
            self.register_buffer("pos_table", sinusoidal_table(cfg.max_positions, cfg.d_model), persistent=False)
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
        if self.pos_embed is not None:
            nn.init.normal_(self.pos_embed.weight, mean=0.0, std=self.cfg.d_model ** -0.5)

    # -- pieces -------------------------------------------------------------------------------

    def embed_tokens(self, tokens: Tensor, start: int = 0) -> Tensor:
        """Scaled token embeddings plus positions start..start+L-1. tokens (B, L) -> (B, L, D)"""
        L = tokens.size(1)
        if start + L > self.cfg.max_positions:
            raise ValueError(f"sequence of {start + L} tokens exceeds max_positions {self.cfg.max_positions}")
        x = self.embed(tokens) * math.sqrt(self.cfg.d_model)  # (B, L, D)
        if self.pos_embed is not None:
            x = x + self.pos_embed.weight[start : start + L]
        else:
            x = x + self.pos_table[start : start + L].to(x.dtype)
        return self.dropout(x)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S) -> memory (B, S, D) and src_mask (B, 1, 1, S), True at real (non-pad) tokens."""
        src_mask = (src != PAD)[:, None, None, :]  # (B, 1, 1, S)
        x = self.embed_tokens(src)
        for layer in self.encoder:
            x = layer(x, src_mask)
        return self.encoder_norm(x), src_mask

    def memory_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Cross-attention keys/values of every decoder layer, computed once per source. Each (B, H, S, Dh)."""
        return [layer.cross_attn.project_kv(memory) for layer in self.decoder]

    def output_logits(self, x: Tensor) -> Tensor:
        """Decoder states (B, T, D) -> logits (B, T, V) through the shared embedding matrix."""
        if self.output_proj is not None:
            return self.output_proj(self.decoder_norm(x))
        return F.linear(self.decoder_norm(x), self.embed.weight)

    def use_output_projection(self) -> None:
        """Compute the output logits with an `nn.Linear` sharing the embedding table, for inference.

        The same function as before; the point is that module-level rewrites such as int8 dynamic
        quantisation (which replaces every nn.Linear) then reach the output projection too, while the
        embedding lookups keep the original table. For inference only: the state dict then lists the
        table a second time (output_proj.weight), and a quantised copy no longer follows the embedding.
        """
        proj = nn.Linear(self.cfg.d_model, self.cfg.vocab_size, bias=False, device=self.embed.weight.device,
                         dtype=self.embed.weight.dtype)
        proj.weight = self.embed.weight  # shared, not copied
        self.output_proj = proj

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
        fuses the projection (nmt.loss.projected_loss)."""
        memory, src_mask = self.encode(src)
        x = self.decode(tgt_in, self.memory_kv(memory), src_mask)[0]
        return self.output_logits(x) if project else self.decoder_norm(x)

    # -- incremental decoding -----------------------------------------------------------------

    def start_decoding(self, src: Tensor, use_cache: bool = True) -> "DecodingState":
        """Encode `src` (B, S): the state of `step` before any token, one row per sentence.

        The cross-attention keys/values of every layer are computed here, once. Without the cache
        (`use_cache=False`, the reference that tests compare against), `step` recomputes the whole
        prefix, which is the cost the cache removes.
        """
        memory, src_mask = self.encode(src)
        caches = [KVCache() for _ in self.decoder] if use_cache else None
        layers = [LayerOps.of(layer) for layer in self.decoder] if use_cache else None
        return DecodingState(src.new_zeros(src.size(0), 0), Source.of(src_mask, self.memory_kv(memory)), caches, layers)

    def step(self, tokens: Tensor, state: "DecodingState") -> Tensor:
        """Feed the newest token of each hypothesis, tokens (N,): log-probabilities (N, V).

        Advances `state` in place: its prefix, and each layer's cache as soon as the layer has run, so
        that the old cache is freed then (a new state per step would hold every layer's old and new
        cache at once, about a cache more of peak memory). With the cache, each layer runs
        `layer_step` (inference only: no dropout).
        """
        state.prefix = torch.cat([state.prefix, tokens[:, None]], dim=1)  # (N, t+1)
        src = state.source
        if state.caches is None:
            x = self.decode(state.prefix, src.kv, src.mask)[0][:, -1]  # (N, D)
        else:
            x = self.embed_tokens(tokens[:, None], start=state.prefix.size(1) - 1)[:, 0]  # (N, D)
            for i, (ops, kv) in enumerate(zip(state.layers, src.kv)):
                x, state.caches[i] = layer_step(ops, x, kv, src, state.caches[i])
        logits = self.output_logits(x).float()  # (N, V), a tensor of our own
        # In place: one (N, V) buffer less to allocate (and page in) per step.
        return torch.log_softmax(logits, -1, out=logits)

    def cross_attention_weights(self, src: Tensor, tgt_in: Tensor) -> list[Tensor]:
        """Teacher-forced cross-attention weights of every decoder layer, each (B, H, T, S), for plots."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, self.memory_kv(memory), src_mask, need_weights=True)[1]


class LayerOps(NamedTuple):
    """A decoder layer's parts as plain functions, for `layer_step`: looked up once per batch
    (`start_decoding`) rather than at every step, and called without nn.Module's call machinery, which
    costs microseconds per call, as much as the arithmetic of a layer with a few rows."""

    n_heads: int
    pre_norm: bool
    self_norm: Callable[[Tensor], Tensor]
    qkv: Optional[Callable[[Tensor], Tensor]]  # q|k|v in one product (nmt.kernels.fuse_self_attention), or None
    q: Callable[[Tensor], Tensor]
    k: Callable[[Tensor], Tensor]
    v: Callable[[Tensor], Tensor]
    out: Callable[[Tensor], Tensor]
    cross_norm: Callable[[Tensor], Tensor]
    cross_q: Callable[[Tensor], Tensor]
    cross_out: Callable[[Tensor], Tensor]
    ffn_norm: Callable[[Tensor], Tensor]
    fc1: Callable[[Tensor], Tensor]
    fc2: Callable[[Tensor], Tensor]

    @classmethod
    def of(cls, layer: DecoderLayer) -> "LayerOps":
        attn, cross, ffn = layer.self_attn, layer.cross_attn, layer.ffn
        qkv = getattr(attn, "qkv_proj", None)
        return cls(attn.n_heads, layer.self_block.pre_norm, direct(layer.self_block.norm),
                   None if qkv is None else direct(qkv), direct(attn.q_proj), direct(attn.k_proj),
                   direct(attn.v_proj), direct(attn.out_proj), direct(layer.cross_block.norm),
                   direct(cross.q_proj), direct(cross.out_proj), direct(layer.ffn_block.norm), direct(ffn.fc1),
                   direct(ffn.fc2))


def direct(module: nn.Module) -> Callable[[Tensor], Tensor]:
    """`module`'s function, called without nn.Module.__call__ (so without hooks): nn.Linear and nn.LayerNorm
    as their torch function with the parameters bound, other modules as their bound `forward`."""
    if type(module) is nn.Linear:
        return functools.partial(F.linear, weight=module.weight, bias=module.bias)
    if type(module) is nn.LayerNorm:
        return functools.partial(torch.layer_norm, normalized_shape=module.normalized_shape, weight=module.weight,
                                 bias=module.bias, eps=module.eps)
    return module.forward


def layer_step(ops: LayerOps, x: Tensor, memory_kv: tuple[Tensor, Tensor], source: "Source",
               cache: "KVCache") -> tuple[Tensor, "KVCache"]:
    """One decoding step of a decoder layer: x (N, D), the newest position of each hypothesis -> (N, D),
    and `cache` with the position's keys/values appended.

    `DecoderLayer.forward` with a cache, on the same shapes and so with the same arithmetic, in fewer
    tensor operations: rows of (N, D) rather than (N, 1, D), no dropout (inference only), and the
    source mask as an additive bias made once per source. Tests compare it with the uncached decoder,
    which runs `DecoderLayer.forward`.
    """
    N, D = x.shape
    H = ops.n_heads
    h = ops.self_norm(x) if ops.pre_norm else x
    if ops.qkv is not None:
        q, k, v = ops.qkv(h).view(N, 3, H, 1, D // H).unbind(1)  # (N, H, 1, Dh) each
    else:
        q, k, v = (proj(h).view(N, H, 1, D // H) for proj in (ops.q, ops.k, ops.v))
    cache = cache.append(k, v)
    y = F.scaled_dot_product_attention(q, cache.k, cache.v)  # (N, H, 1, Dh)
    x = residual(ops, ops.self_norm, x, ops.out(y.view(N, D)))

    h = ops.cross_norm(x) if ops.pre_norm else x
    k, v = memory_kv  # (B', H, S, Dh), one row per `source.group` consecutive hypotheses
    q = ops.cross_q(h).view(k.size(0), N // k.size(0), H, D // H).transpose(1, 2)  # (B', H, N / B', Dh)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=source.bias)  # (B', H, N / B', Dh)
    x = residual(ops, ops.cross_norm, x, ops.cross_out(y.transpose(1, 2).reshape(N, D)))

    h = ops.ffn_norm(x) if ops.pre_norm else x
    return residual(ops, ops.ffn_norm, x, ops.fc2(F.relu(ops.fc1(h), inplace=True))), cache


def residual(ops: LayerOps, norm: Callable[[Tensor], Tensor], x: Tensor, y: Tensor) -> Tensor:
    """`Sublayer`'s residual connection around a computed y = fn(norm(x)) or fn(x), without dropout."""
    return x + y if ops.pre_norm else norm(x + y)


def append_positions(cache: Tensor, new: Tensor, order: Optional[Tensor] = None) -> Tensor:
    """cache (N, H, t, Dh) with rows `order` selected (if given), then `new` (N', H, T, Dh) appended on
    the time axis: one copy of the cache rather than a selection and a concatenation."""
    if order is None:
        return torch.cat([cache, new], dim=2)
    if cache.device.type != "cpu":  # index_select into a strided view is a CPU kernel feature
        return torch.cat([cache.index_select(0, order), new], dim=2)
    N, H, t, Dh = new.size(0), cache.size(1), cache.size(2), cache.size(3)
    out = cache.new_empty(N, H, t + new.size(2), Dh)
    torch.index_select(cache, 0, order, out=out[:, :, :t])
    out[:, :, t:] = new
    return out


@dataclass(frozen=True)
class KVCache:
    """One decoder layer's self-attention keys and values, k and v (N, H, t, Dh), None before the first step.

    A selection of hypotheses is not applied at once: `select` records it in `order` (composed with
    one still pending) and the next `append` applies it while copying the new position in, so beam
    search's reordering costs no copy of its own.
    """

    k: Optional[Tensor] = None
    v: Optional[Tensor] = None
    order: Optional[Tensor] = None  # rows of k/v that make up the hypotheses, pending

    def select(self, index: Tensor) -> "KVCache":
        if self.k is None:
            return self
        return KVCache(self.k, self.v, index if self.order is None else self.order.index_select(0, index))

    def append(self, k: Tensor, v: Tensor) -> "KVCache":
        """This cache (its pending selection applied) with new positions k, v (N, H, T, Dh) appended."""
        if self.k is None:
            return KVCache(k, v)
        return KVCache(append_positions(self.k, k, self.order), append_positions(self.v, v, self.order))


@dataclass(frozen=True)
class Source:
    """The encoded source: mask (B', 1, 1, S), the same as an additive attention bias, and each decoder
    layer's cross-attention keys/values (B', H, S, Dh), with one row per `group` consecutive hypotheses
    (a sentence's beams share it)."""

    mask: Tensor
    bias: Tensor  # 0 where the mask allows, -inf elsewhere: what attention makes of a boolean mask each call
    kv: list[tuple[Tensor, Tensor]]
    group: int = 1

    @classmethod
    def of(cls, mask: Tensor, kv: list[tuple[Tensor, Tensor]]) -> "Source":
        k = kv[0][0]
        bias = torch.zeros(mask.shape, dtype=k.dtype, device=k.device).masked_fill_(~mask, float("-inf"))
        return cls(mask, bias, kv)

    def select(self, index: Tensor) -> "Source":
        """Follow a selection of hypotheses `index` (N',); with group > 1 it lists whole groups, as
        beam search's reordering does, so the sentences are every group-th entry. Beam search keeps
        the same sentences at most steps: then nothing is copied."""
        sentences = index if self.group == 1 else index[:: self.group] // self.group
        n = self.mask.size(0)
        if sentences.numel() == n and torch.equal(sentences, torch.arange(n, device=sentences.device)):
            return self
        return Source(self.mask.index_select(0, sentences), self.bias.index_select(0, sentences),
                      [(k.index_select(0, sentences), v.index_select(0, sentences)) for k, v in self.kv], self.group)

    def expand(self, k: int) -> "Source":
        return replace(self, group=self.group * k)


@dataclass
class DecodingState:
    """What incremental decoding carries from one step to the next, for N hypotheses. `Transformer.step`
    advances it in place; `select` and `expand` return new states and leave this one as it is."""

    prefix: Tensor  # (N, t) tokens fed so far, BOS first
    source: Source
    caches: Optional[list[KVCache]]  # one per decoder layer; None: recompute the prefix each step
    layers: Optional[list[LayerOps]] = None  # with the caches: what each layer's step runs

    def select(self, index: Tensor) -> "DecodingState":
        """Keep hypotheses `index` (N',): reorder, drop or repeat rows. The one place that knows the layout."""
        caches = None if self.caches is None else [c.select(index) for c in self.caches]
        return DecodingState(self.prefix.index_select(0, index), self.source.select(index), caches, self.layers)

    def expand(self, k: int) -> "DecodingState":
        """Each hypothesis becomes k consecutive ones (beam search after its first step); the source is
        shared, not copied."""
        if k == 1:
            return self
        index = torch.arange(self.prefix.size(0), device=self.prefix.device).repeat_interleave(k)
        caches = None if self.caches is None else [c.select(index) for c in self.caches]
        return DecodingState(self.prefix.index_select(0, index), self.source.expand(k), caches, self.layers)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
