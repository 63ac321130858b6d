"""The Transformer of "Attention Is All You Need", bottom-up: attention, feed-forward, layers, model.

Shapes: B batch, S source length, T target length, D d_model, H heads, Dh = D / H, V vocabulary.
One embedding table serves the encoder, the decoder and the output projection.

Incremental decoding keeps a `state` dict whose tensors all have the batch (or hypothesis) on
dim 0, so search can reorder or shrink it with one `index_select` (`reorder_state`).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.config import ModelConfig
from nmt.vocab import PAD

State = dict[str, Any]


def sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(...), as in the paper. (N, D)"""
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]  # (N, 1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))  # (D/2,)
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)[:, : d_model // 2]
    return table


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
               causal: bool = False) -> Tensor:
        """Queries from `x` (B, Tq, D) over precomputed keys/values (B, H, Tk, Dh). -> (B, Tq, D)

        `mask` is boolean, True where attention is allowed, broadcastable to (B, H, Tq, Tk).
        """
        q = self.split_heads(self.q_proj(x))  # (B, H, Tq, Dh)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, dropout_p=self.dropout if self.training else 0.0
        )  # (B, H, Tq, Dh)
        B, H, Tq, Dh = y.shape
        return self.out_proj(y.transpose(1, 2).reshape(B, Tq, H * Dh))  # (B, Tq, D)

    def attention_weights(self, x: Tensor, k: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """The softmax weights `attend` uses (no dropout), for plots. (B, H, Tq, Tk)"""
        q = self.split_heads(self.q_proj(x))
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
        self.dropout = nn.Dropout(activation_dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.dropout(F.relu(self.fc1(x))))


class Sublayer(nn.Module):
    """A residual connection around `fn` with LayerNorm before (pre-LN) or after (post-LN)."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
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
            return self.self_attn.attend(h, *self.self_attn.project_kv(h), mask=src_mask)

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
                cache: Optional[dict[str, Tensor]] = None) -> Tensor:
        """x (B, T, D); memory_kv: cross-attention keys/values (B, H, S, Dh); src_mask (B, 1, 1, S).

        memory_kv and src_mask may instead have one row per group of B / B' consecutive rows of x (the
        hypotheses of one sentence in beam search), shared rather than copied.

        Without `cache`, x is the whole target prefix and self-attention is causal. With `cache`,
        x holds only the newest position(s); their keys/values are appended to cache["k"], cache["v"]
        and they attend to everything cached, which needs no mask.
        """

        def self_attention(h: Tensor) -> Tensor:
            k, v = self.self_attn.project_kv(h)  # (B, H, T, Dh)
            if cache is None:
                return self.self_attn.attend(h, k, v, causal=True)
            order = cache.pop("order", None)  # a row selection `reorder_state` left pending (KVCache)
            if "k" in cache:
                k = append_positions(cache["k"], k, order)
                v = append_positions(cache["v"], v, order)
            cache["k"], cache["v"] = k, v
            return self.self_attn.attend(h, k, v)

        def cross_attention(h: Tensor) -> Tensor:
            k, v = memory_kv
            n = k.size(0)
            if h.size(0) == n:
                return self.cross_attn.attend(h, k, v, mask=src_mask)
            # Beam search: memory_kv has one row per sentence and h the sentence's hypotheses in
            # consecutive rows; each hypothesis' positions become queries of its sentence's row.
            N, T, D = h.shape
            return self.cross_attn.attend(h.reshape(n, (N // n) * T, D), k, v, mask=src_mask).view(N, T, D)

        x = self.self_block(x, self_attention)
        x = self.cross_block(x, cross_attention)
        return self.ffn_block(x, self.ffn)


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
        self.dropout = nn.Dropout(cfg.dropout)
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

    def decode(self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        """Teacher-forced decoding of the whole prefix. tgt_in (B, T) -> logits (B, T, V)"""
        x = self.embed_tokens(tgt_in)  # (B, T, D)
        for layer, kv in zip(self.decoder, self.memory_kv(memory)):
            x = layer(x, kv, src_mask)
        return self.output_logits(x)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """src (B, S), tgt_in (B, T) starting with BOS -> logits (B, T, V)"""
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)

    # -- incremental decoding -----------------------------------------------------------------

    def start_decoding(self, src: Tensor, use_cache: bool = True) -> State:
        """Encode `src` (B, S) and return the decoding state for `step`.

        The state holds the source mask, the cross-attention keys/values of every layer (computed
        here, once) and, as decoding goes on, each layer's self-attention keys/values, plus the
        prefix of tokens fed so far (B, t) for decoding without the cache. With the cache, the source
        mask and the cross-attention keys/values are `PerSentence`: `expand_state` gives each sentence
        K hypotheses without copying them.
        """
        memory, src_mask = self.encode(src)
        state: State = {
            "src_mask": src_mask,
            "memory_kv": self.memory_kv(memory),
            "prefix": src.new_zeros(src.size(0), 0),
        }
        if use_cache:
            state["src_mask"] = PerSentence(state["src_mask"])
            state["memory_kv"] = PerSentence(state["memory_kv"])
            state["self_kv"] = [KVCache() for _ in self.decoder]
        else:
            state["memory"] = memory
        return state

    @staticmethod
    def expand_state(state: State, k: int) -> State:
        """The state of `start_decoding` with each sentence's row repeated for its k hypotheses (B*k rows,
        a sentence's hypotheses consecutive); `PerSentence` entries stay one row per sentence."""
        if k == 1:
            return state
        some = state["prefix"]
        index = torch.arange(some.size(0), device=some.device).repeat_interleave(k)
        return _expand(state, index, k)

    def step(self, tokens: Tensor, state: State) -> Tensor:
        """Feed the newest token of each hypothesis; tokens (N,) -> log-probabilities (N, V).

        With the cache, only the new position goes through the decoder; without it (use_cache=False
        in `start_decoding`), the whole prefix is recomputed, which is the cost the cache removes.
        """
        prefix = torch.cat([state["prefix"], tokens[:, None]], dim=1)  # (N, t+1)
        state["prefix"] = prefix
        if "self_kv" in state:
            src_mask, memory_kv = _value(state["src_mask"]), _value(state["memory_kv"])
            x = self.embed_tokens(tokens[:, None], start=prefix.size(1) - 1)  # (N, 1, D)
            for layer, kv, cache in zip(self.decoder, memory_kv, state["self_kv"]):
                x = layer(x, kv, src_mask, cache=cache)
            logits = self.output_logits(x)[:, -1].float()  # (N, V), a tensor of our own
            # In place: one (N, V) buffer less to allocate (and page in) per step.
            return torch.log_softmax(logits, -1, out=logits)
        logits = self.decode(prefix, state["memory"], state["src_mask"])[:, -1]  # (N, V)
        return logits.float().log_softmax(-1)

    def cross_attention_weights(self, src: Tensor, tgt_in: Tensor) -> list[Tensor]:
        """Teacher-forced cross-attention weights of every decoder layer, each (B, H, T, S), for plots."""
        memory, src_mask = self.encode(src)
        x = self.embed_tokens(tgt_in)
        weights = []
        for layer, kv in zip(self.decoder, self.memory_kv(memory)):
            pre = layer.cross_block.pre_norm
            # Recompute the cross-attention input exactly as the layer's forward sees it.
            h = layer.self_block(x, lambda h_: layer.self_attn.attend(h_, *layer.self_attn.project_kv(h_), causal=True))
            q_in = layer.cross_block.norm(h) if pre else h
            weights.append(layer.cross_attn.attention_weights(q_in, kv[0], mask=src_mask))
            x = layer(x, kv, src_mask)
        return weights


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


class KVCache(dict):
    """One decoder layer's self-attention cache: "k" and "v" (N, H, t, Dh), and possibly "order".

    `reorder_state` does not copy the cache: it records the row selection in "order" (composing it
    with one still pending), and the next step applies it while appending its new position. So
    after a reorder, "k" and "v" hold the rows before the selection; `materialize` applies it.
    """

    def select(self, index: Tensor) -> "KVCache":
        out = KVCache(self)
        if "k" in self:
            out["order"] = index if "order" not in self else self["order"].index_select(0, index)
        return out

    def materialize(self) -> "KVCache":
        """This cache with its pending selection applied (for inspection; decoding does not need it)."""
        if "order" not in self:
            return self
        return KVCache({name: self[name].index_select(0, self["order"]) for name in ("k", "v")})


class PerSentence:
    """Decoding-state entries with one row per sentence while the rest of the state has `group` rows
    (a sentence's hypotheses, consecutive) per sentence: the source mask and cross-attention
    keys/values, which beam search then shares between a sentence's K hypotheses instead of copying.
    With group 1 (greedy search, or before `expand_state`) it behaves like the plain entries."""

    __slots__ = ("value", "group")

    def __init__(self, value: Any, group: int = 1):
        self.value, self.group = value, group

    def select(self, index: Tensor) -> "PerSentence":
        """Follow a selection of hypothesis rows; with group > 1, `index` lists whole groups
        (group consecutive entries from one sentence), as beam search's reordering does."""
        sentences = index if self.group == 1 else index[:: self.group] // self.group
        return PerSentence(reorder_state(self.value, sentences), self.group)


def _value(entry: Any) -> Any:
    return entry.value if isinstance(entry, PerSentence) else entry


def _expand(state: Any, index: Tensor, k: int) -> Any:
    if isinstance(state, PerSentence):
        return PerSentence(state.value, state.group * k)
    if isinstance(state, KVCache):
        return state.select(index)
    if isinstance(state, Tensor):
        return state.index_select(0, index)
    if isinstance(state, dict):
        return {key: _expand(v, index, k) for key, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_expand(v, index, k) for v in state)
    return state


def reorder_state(state: Any, index: Tensor) -> Any:
    """Select hypotheses `index` (N',) along dim 0 of every tensor in the (nested) decoding state.

    The one place where beam search reorders or shrinks the cache. `PerSentence` entries follow the
    sentences of the selected hypotheses; a `KVCache` records the selection, applied (with no extra
    copy) when the next step appends to it.
    """
    if isinstance(state, Tensor):
        return state.index_select(0, index)
    if isinstance(state, (PerSentence, KVCache)):
        return state.select(index)
    if isinstance(state, dict):
        return {k: reorder_state(v, index) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(reorder_state(v, index) for v in state)
    return state


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
