"""The Transformer's layers, bottom-up: dropout, multi-head attention, feed-forward, the residual sublayer
around each, then the encoder and decoder layers that `nmt.model.transformer` stacks.

Shapes: B batch, S source length, T target length, D d_model, H heads, Dh = D / H.

A decoder layer is one function, `decoder_layer`, of the layer's parts: training, decoding without the
cache (the reference) and each cached step compute with the same code. A cached step grows the layer's
self-attention `KVCache`: the layer returns the grown cache and changes nothing in place.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.config import ModelConfig

# The feed-forward activations, out of place (`decoder_layer` runs relu in place).
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}


class _Dropout(torch.autograd.Function):
    """Inverted dropout with the keep mask drawn by `torch.rand` (as torch's CUDA kernels do): on the CPU
    that is about twice as fast as `F.dropout`, whose per-element Bernoulli draws cost more than
    the rest of a small model's elementwise work. The same generator, so a resumed run redraws
    the same masks."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, p: float) -> Tensor:
        keep = torch.rand_like(x) >= p  # P(keep) = 1 - p: rand is uniform on [0, 1)
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return x.mul(keep).mul_(ctx.scale)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None


class Dropout(nn.Dropout):
    """`nn.Dropout` (same module, same state dict) with `_Dropout`'s faster mask on the CPU."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":  # CUDA's own fused kernel is already fast
            return F.dropout(x, self.p, True)
        # torch leaves Function.apply unannotated: it returns what forward returns.
        apply: Callable[..., Tensor] = _Dropout.apply
        return apply(x, self.p)


Fn = Callable[[Tensor], Tensor]


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, L, D) -> (B, H, L, Dh)"""
    B, L, D = x.shape
    return x.view(B, L, n_heads, D // n_heads).transpose(1, 2)


def merge_heads(y: Tensor) -> Tensor:
    """(B, H, L, Dh) -> (B, L, D)"""
    B, H, L, Dh = y.shape
    return y.transpose(1, 2).reshape(B, L, H * Dh)


def softmax_weights(q: Tensor, k: Tensor, mask: Optional[Tensor]) -> Tensor:
    """softmax(q k^T / sqrt(Dh)) where boolean `mask` allows. q (B, H, Tq, Dh), k (B, H, Tk, Dh) -> (B, H, Tq, Tk)"""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over H heads: queries, keys and values projected from the input, the
    heads' outputs projected back. In two halves, so that keys and values can be kept (the source's, once per
    sentence; the decoder's cache): `project_kv`, then `attend`."""

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout
        # Inference only (see `fuse_qkv`): q|k|v in one product; None: the three projections.
        self.qkv: Optional[nn.Linear] = None

    def fuse_qkv(self) -> None:
        """From now on, compute queries, keys and values with one nn.Linear (D -> 3D): one matrix product in
        place of three, and with int8 one quantisation of the input (the weights are quantised per output
        channel, so the numbers are those of the three layers). A copy of the weights, made for inference:
        it does not follow further training of q_proj, k_proj and v_proj."""
        projections = (self.q_proj, self.k_proj, self.v_proj)
        fused = nn.Linear(self.q_proj.in_features, 3 * self.q_proj.out_features,
                          device=self.q_proj.weight.device, dtype=self.q_proj.weight.dtype)
        with torch.no_grad():
            fused.weight.copy_(torch.cat([p.weight for p in projections]))
            fused.bias.copy_(torch.cat([p.bias for p in projections]))
        self.qkv = fused.requires_grad_(False)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of `x` (B, L, D), each (B, H, L, Dh)."""
        return split_heads(self.k_proj(x), self.n_heads), split_heads(self.v_proj(x), self.n_heads)

    def attend(self, x: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """Queries from `x` (B, Tq, D) over keys/values (B, H, Tk, Dh) -> (B, Tq, D), via torch's fused
        `scaled_dot_product_attention`. `mask` (broadcastable to (B, H, Tq, Tk)) is True where attention is allowed."""
        q = split_heads(self.q_proj(x), self.n_heads)  # (B, H, Tq, Dh)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        out: Tensor = self.out_proj(merge_heads(y))  # (B, Tq, D); a module's call is Any to mypy
        return out


class FeedForward(nn.Module):
    """Position-wise FFN(x) = W2 dropout(act(W1 x)), act relu (the paper's), gelu or swish."""

    def __init__(self, d_model: int, d_ff: int, activation_dropout: float, activation: str = "relu"):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(activation_dropout)
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.fc2(self.dropout(ACTIVATIONS[self.activation](self.fc1(x))))  # a module's call is Any
        return out


class Sublayer(nn.Module):
    """The residual connection around a sublayer fn, with LayerNorm before fn (pre-LN: x + dropout(fn(norm(x))))
    or after the sum (post-LN: norm(x + dropout(fn(x)))), as its two halves around fn: `input`, `output`."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def input(self, x: Tensor) -> Tensor:
        """What fn takes: norm(x) (pre-LN) or x (post-LN)."""
        return self.norm(x) if self.pre_norm else x

    def output(self, x: Tensor, y: Tensor) -> Tensor:
        """The sublayer's output from its input x and fn's output y."""
        return residual(self.pre_norm, self.norm, self.dropout, x, y)


def residual(pre_norm: bool, norm: Fn, dropout: Optional[Fn], x: Tensor, y: Tensor) -> Tensor:
    """A sublayer's output from its input x and its function's output y: x + dropout(y) (pre-LN) or
    norm(x + dropout(y)) (post-LN); without `dropout` (inference), no dropout call at all."""
    if dropout is not None:
        y = dropout(y)
    return x + y if pre_norm else norm(x + y)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation)
        self.attn_block = Sublayer(cfg.d_model, cfg.dropout, pre)
        self.ffn_block = Sublayer(cfg.d_model, cfg.dropout, pre)

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        """x (B, S, D), src_mask (B, 1, 1, S) True at real tokens -> (B, S, D)"""
        h = self.attn_block.input(x)
        x = self.attn_block.output(x, self.self_attn.attend(h, *self.self_attn.project_kv(h), mask=src_mask))
        return self.ffn_block.output(x, self.ffn(self.ffn_block.input(x)))


class DecoderLayer(nn.Module):
    """Causal self-attention, attention over the source, feed-forward, each a residual sublayer.

    The arithmetic is `decoder_layer`'s, on the layer's `parts`: one implementation for training (the
    whole target at once, with dropout), the decoder without a cache (the reference) and each cached
    decoding step, which binds the parts once per batch (`Transformer.start_decoding`). The parts are
    called as plain functions: hooks registered on them (not on the layer) do not run.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation)
        self.self_block = Sublayer(cfg.d_model, cfg.dropout, pre)
        self.cross_block = Sublayer(cfg.d_model, cfg.dropout, pre)
        self.ffn_block = Sublayer(cfg.d_model, cfg.dropout, pre)

    def forward(self, x: Tensor, memory_kv: tuple[Tensor, Tensor], src_mask: Tensor,
                cache: Optional[KVCache] = None, need_weights: bool = False) -> LayerOutput:
        """`decoder_layer` on this layer's parts (see there)."""
        return decoder_layer(self.parts(), x, memory_kv, src_mask, cache, need_weights)

    def parts(self) -> DecoderParts:
        """This layer's parts as plain functions (`function_of`), with dropout in training only."""
        sa, ca, ffn, train = self.self_attn, self.cross_attn, self.ffn, self.training
        return DecoderParts(
            n_heads=sa.n_heads, pre_norm=self.self_block.pre_norm,
            self_norm=function_of(self.self_block.norm), qkv=None if sa.qkv is None else function_of(sa.qkv),
            q=function_of(sa.q_proj), k=function_of(sa.k_proj), v=function_of(sa.v_proj),
            self_out=function_of(sa.out_proj), self_attention_dropout=sa.dropout if train else 0.0,
            self_dropout=self.self_block.dropout if train else None,
            cross_norm=function_of(self.cross_block.norm), cross_q=function_of(ca.q_proj),
            cross_out=function_of(ca.out_proj), cross_attention_dropout=ca.dropout if train else 0.0,
            cross_dropout=self.cross_block.dropout if train else None,
            ffn_norm=function_of(self.ffn_block.norm), fc1=function_of(ffn.fc1),
            activation=None if ffn.activation == "relu" else ACTIVATIONS[ffn.activation],
            activation_dropout=ffn.dropout if train else None, fc2=function_of(ffn.fc2),
            ffn_dropout=self.ffn_block.dropout if train else None)


def function_of(module: nn.Module) -> Fn:
    """`module` as a plain function of its input: nn.Linear and nn.LayerNorm as the torch function their forward
    calls, with the parameters bound; any other module (an int8 layer, say) as its forward. Without
    nn.Module's call machinery (and so without hooks), which costs microseconds per call: as much as the
    arithmetic of a layer on the few rows of a decoding step (decoding through module calls took 1.18x the
    time on batches of 1 sentence, docs/benchmarks-translate.md)."""
    if type(module) is nn.Linear:
        return functools.partial(F.linear, weight=module.weight, bias=module.bias)
    if type(module) is nn.LayerNorm:
        return functools.partial(torch.layer_norm, normalized_shape=module.normalized_shape, weight=module.weight,
                                 bias=module.bias, eps=module.eps)
    return module.forward


class DecoderParts(NamedTuple):
    """What `decoder_layer` computes with: a `DecoderLayer`'s settings and parts as functions (`DecoderLayer.parts`)."""

    n_heads: int
    pre_norm: bool
    self_norm: Fn
    qkv: Optional[Fn]  # q|k|v in one product (MultiHeadAttention.fuse_qkv), or None: q, k and v
    q: Fn
    k: Fn
    v: Fn
    self_out: Fn
    self_attention_dropout: float  # 0 outside training
    self_dropout: Optional[Fn]  # the residual dropouts and the FFN's activation dropout: None outside training
    cross_norm: Fn
    cross_q: Fn
    cross_out: Fn
    cross_attention_dropout: float
    cross_dropout: Optional[Fn]
    ffn_norm: Fn
    fc1: Fn
    activation: Optional[Fn]  # None: relu, in place
    activation_dropout: Optional[Fn]
    fc2: Fn
    ffn_dropout: Optional[Fn]


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

    def select(self, index: Tensor) -> KVCache:
        if self.k is None:
            return self
        return KVCache(self.k, self.v, index if self.order is None else self.order.index_select(0, index))

    def append(self, k: Tensor, v: Tensor) -> KVCache:
        """This cache (its pending selection applied) with new positions k, v (N, H, T, Dh) appended."""
        if self.k is None:
            return KVCache(k, v)
        assert self.v is not None  # k and v are set together
        return KVCache(append_positions(self.k, k, self.order), append_positions(self.v, v, self.order))


def decoder_layer(p: DecoderParts, x: Tensor, memory_kv: tuple[Tensor, Tensor], src_mask: Tensor,
                  cache: Optional[KVCache] = None, need_weights: bool = False) -> LayerOutput:
    """A decoder layer: x (B, T, D); memory_kv: cross-attention keys/values (B', H, S, Dh); src_mask
    (B', 1, 1, S), boolean (True at real tokens) or the same as an additive bias (`SourceMemory.bias`).

    B' is B, or one row per group of B / B' consecutive rows of x (the hypotheses of one sentence
    in beam search): the source is then shared rather than copied.

    Without `cache`, x is the whole target prefix and self-attention is causal. With `cache`,
    x holds only the newest position(s): they attend to the cached ones and themselves, which
    needs no mask, and the output carries the cache with their keys/values appended.
    With `need_weights` (and a boolean mask), the output also carries the cross-attention weights (B, H, T, S).
    """
    B, T, D = x.shape
    H = p.n_heads
    x = x.reshape(B * T, D)  # rows: what the linear layers and norms compute on (a 3-d input costs them two views)
    h = p.self_norm(x) if p.pre_norm else x
    if p.qkv is not None:
        q, k, v = p.qkv(h).view(B, T, 3, H, D // H).transpose(1, 3).unbind(2)  # (B, H, T, Dh) each
    else:  # keys and values first: the order in which the gradients of h add up
        k = p.k(h).view(B, T, H, D // H).transpose(1, 2)  # (B, H, T, Dh)
        v = p.v(h).view(B, T, H, D // H).transpose(1, 2)
        q = p.q(h).view(B, T, H, D // H).transpose(1, 2)
    if cache is not None:
        cache = cache.append(k, v)
        assert cache.k is not None and cache.v is not None  # append leaves both set
        k, v = cache.k, cache.v  # (B, H, t + T, Dh)
    # The whole prefix attends causally; the newest position attends to all the cached ones and itself.
    y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None, dropout_p=p.self_attention_dropout)
    x = residual(p.pre_norm, p.self_norm, p.self_dropout, x, p.self_out(y.transpose(1, 2).reshape(B * T, D)))

    h = p.cross_norm(x) if p.pre_norm else x
    k, v = memory_kv
    n = k.size(0)  # B': each source row serves the B / B' consecutive rows of x of its sentence
    q = p.cross_q(h).view(n, B // n * T, H, D // H).transpose(1, 2)  # (B', H, B/B' * T, Dh): a sentence's queries
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=src_mask, dropout_p=p.cross_attention_dropout)
    x = residual(p.pre_norm, p.cross_norm, p.cross_dropout, x, p.cross_out(y.transpose(1, 2).reshape(B * T, D)))
    weights = None
    if need_weights:  # each row's own queries: (B, H, T, S)
        S = k.size(2)
        weights = softmax_weights(q, k, src_mask).view(n, H, B // n, T, S).transpose(1, 2).reshape(B, H, T, S)

    h = p.ffn_norm(x) if p.pre_norm else x
    h = p.fc1(h)  # (B * T, d_ff)
    # relu in place: one buffer less per call (its gradient needs only the output); gelu and swish need their input
    h = torch.relu_(h) if p.activation is None else p.activation(h)
    if p.activation_dropout is not None:
        h = p.activation_dropout(h)
    x = residual(p.pre_norm, p.ffn_norm, p.ffn_dropout, x, p.fc2(h))
    return LayerOutput(x.view(B, T, D), cache, weights)


class LayerOutput(NamedTuple):
    x: Tensor  # (B, T, D)
    cache: Optional[KVCache]  # the self-attention cache with this call's positions appended
    cross_weights: Optional[Tensor]  # (B, H, T, S), with need_weights
