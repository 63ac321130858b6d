"""The Transformer: positions, masks, padding, tied embeddings, initialisation, the KV cache, configs."""

import math

import pytest
import torch
import torch.nn.functional as F

from nmt.config import PRESETS, ModelConfig, TrainConfig, from_dict, from_preset, to_dict
from nmt.core.errors import ConfigError
from nmt.core.vocab import BOS, EOS, PAD, UNK
from nmt.model.layers import Dropout, KVCache, Sublayer
from nmt.model.transformer import (
    Transformer,
    count_parameters,
    sinusoidal_halves_table,
    sinusoidal_table,
)

V, D, H, FF, P = 13, 16, 4, 24, 32  # tiny: vocabulary, d_model, heads, d_ff, max_positions
NORMS = ["pre", "post"]
POSITIONS = ["sinusoidal", "learned"]




def tiny(norm="pre", positions="sinusoidal", seed=0, **kw) -> Transformer:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=V, d_model=D, n_heads=H, encoder_layers=2, decoder_layers=2, d_ff=FF,
               dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, max_positions=P,
               positions=positions, norm=norm)
    cfg.update(kw)
    model = Transformer(ModelConfig(**cfg).validate())
    if positions == "learned":
        # N(0, D^-0.5) positions are tiny next to sqrt(D)-scaled tokens; make them matter.
        with torch.no_grad():
            model.pos_embed.weight.mul_(4.0)
    return model.eval()


def batch(*rows, pad=PAD) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([list(r) + [pad] * (width - len(r)) for r in rows], dtype=torch.long)


SRC = batch([4, 5, 6, 7, EOS], [8, 9, EOS])  # second row padded
TGT = batch([BOS, 10, 11, 12, 4, 5], [BOS, 6, 7, 8, 9, 10])


# -- sinusoidal positions ------------------------------------------------------------------------

@pytest.mark.parametrize(
    "d_model, pos, dim, expected",
    [
        (8, 0, 0, 0.0),  # sin(0)
        (8, 0, 1, 1.0),  # cos(0)
        (8, 0, 7, 1.0),
        (8, 1, 0, math.sin(1.0)),  # i = 0: frequency 1
        (8, 1, 1, math.cos(1.0)),
        (8, 1, 2, math.sin(1.0 / 10000 ** (2 / 8))),  # i = 1: 1 / 10000^(2i/D) = 0.1
        (8, 1, 3, math.cos(0.1)),
        (8, 3, 6, math.sin(3.0 / 10000 ** (6 / 8))),  # i = 3: 10000^-0.75 = 0.001
        (8, 3, 7, math.cos(0.003)),
        (8, 10, 0, math.sin(10.0)),
        (4, 2, 2, math.sin(2.0 / 100.0)),  # D = 4, i = 1: 10000^(2/4) = 100
        (4, 2, 3, math.cos(0.02)),
        # odd d_model: ceil(D/2) sines, floor(D/2) cosines
        (5, 1, 0, math.sin(1.0)),
        (5, 1, 1, math.cos(1.0)),
        (5, 1, 4, math.sin(1.0 / 10000 ** (4 / 5))),
        (5, 7, 3, math.cos(7.0 / 10000 ** (2 / 5))),
        (3, 2, 2, math.sin(2.0 / 10000 ** (2 / 3))),
        (1, 5, 0, math.sin(5.0)),
    ],
)
def test_sinusoidal_table_values(d_model, pos, dim, expected):
    table = sinusoidal_table(16, d_model)
    assert table.shape == (16, d_model)
    assert table[pos, dim].item() == pytest.approx(expected, abs=1e-5)


def test_sinusoidal_table_bounded_and_distinct():
    table = sinusoidal_table(64, 16)
    assert table.abs().max() <= 1.0 + 1e-6
    # sin^2 + cos^2 = 1 for every (sin, cos) pair
    pairs = table[:, 0::2] ** 2 + table[:, 1::2] ** 2
    torch.testing.assert_close(pairs, torch.ones_like(pairs), atol=1e-5, rtol=0)
    assert torch.cdist(table, table).add(torch.eye(64) * 10).min() > 0.1  # no two positions alike


# -- masks and padding ---------------------------------------------------------------------------

@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("j", [1, 3, 5])
def test_causal_mask_future_token_does_not_leak(norm, positions, j):
    model = tiny(norm, positions)
    with torch.no_grad():
        before = model(SRC, TGT)
        changed = TGT.clone()
        changed[:, j] = torch.tensor([11, 12])  # a different token at position j in both rows
        assert not torch.equal(changed, TGT)
        after = model(SRC, changed)
    torch.testing.assert_close(after[:, :j], before[:, :j], atol=1e-5, rtol=0)
    assert (after[:, j:] - before[:, j:]).abs().max() > 1e-3  # the change is visible from j on


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("norm", NORMS)
def test_source_change_reaches_every_position(norm, positions):
    model = tiny(norm, positions)
    with torch.no_grad():
        before = model(SRC, TGT)
        src = SRC.clone()
        src[0, 0] = 12
        after = model(src, TGT)
    assert (after[0] - before[0]).abs().amax(-1).min() > 1e-4  # every target position of row 0 sees it
    torch.testing.assert_close(after[1], before[1], atol=1e-6, rtol=0)  # row 1 does not


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("norm", NORMS)
def test_padding_does_not_change_real_positions(norm, positions):
    model = tiny(norm, positions)
    with torch.no_grad():
        ref = model(SRC, TGT)
        src_pad = torch.cat([SRC, torch.full((2, 3), PAD)], dim=1)
        tgt_pad = torch.cat([TGT, torch.full((2, 2), PAD)], dim=1)
        out = model(src_pad, tgt_pad)
    assert out.shape == (2, TGT.size(1) + 2, V)
    torch.testing.assert_close(out[:, : TGT.size(1)], ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("norm", NORMS)
def test_sentence_alone_equals_sentence_in_padded_batch(norm, positions):
    model = tiny(norm, positions)
    short_src, short_tgt = [8, 9, EOS], [BOS, 6, 7]
    long_src, long_tgt = [4, 5, 6, 7, 10, 11, EOS], [BOS, 10, 11, 12, 4, 5, 6]
    with torch.no_grad():
        alone = model(batch(short_src), batch(short_tgt))[0]
        both = model(batch(long_src, short_src), batch(long_tgt, short_tgt))
        long_alone = model(batch(long_src), batch(long_tgt))[0]
    torch.testing.assert_close(both[1, : len(short_tgt)], alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(both[0], long_alone, atol=1e-5, rtol=0)


def test_pad_source_token_value_is_ignored():
    """What sits under the padding mask does not matter: PAD positions are masked, not just zero."""
    model = tiny()
    with torch.no_grad():
        src = batch([4, 5, EOS, PAD, PAD])
        memory, mask = model.encode(src)
        assert mask.shape == (1, 1, 1, 5)
        assert mask[0, 0, 0].tolist() == [True, True, True, False, False]
        ref = model(src, batch([BOS, 6, 7]))
        # Same sentence, no padding at all.
        out = model(batch([4, 5, EOS]), batch([BOS, 6, 7]))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("pre", [True, False])
def test_sublayer_norm_placement(pre):
    torch.manual_seed(0)
    block = Sublayer(D, dropout=0.0, pre_norm=pre)
    with torch.no_grad():
        block.norm.weight.uniform_(0.5, 1.5)
        block.norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 3, D) * 3 + 1
    fn = lambda h: 2.0 * h + 1.0  # noqa: E731
    expected = x + fn(block.norm(x)) if pre else block.norm(x + fn(x))
    torch.testing.assert_close(block.output(x, fn(block.input(x))), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm", NORMS)
def test_layer_outputs_normalised_only_in_post_norm(norm):
    """Post-LN: every layer ends in a LayerNorm (weight 1, bias 0 at init); pre-LN: only the stacks do."""
    model = tiny(norm)
    outputs = []
    hooks = [layer.register_forward_hook(lambda m, i, o: outputs.append(getattr(o, "x", o)))
             for layer in list(model.encoder) + list(model.decoder)]
    with torch.no_grad():
        model(SRC, TGT)
        memory, _ = model.encode(SRC)
    for h in hooks:
        h.remove()
    assert len(outputs) == 4 + 2
    for out in outputs[:4]:
        normalised = (out.mean(-1).abs().max() < 1e-4) and ((out.var(-1, unbiased=False) - 1).abs().max() < 1e-3)
        assert bool(normalised) == (norm == "post")
    # the encoder output is normalised either way (pre-LN by the final encoder_norm)
    torch.testing.assert_close(memory.mean(-1), torch.zeros(2, SRC.size(1)), atol=1e-4, rtol=0)


# -- tied embeddings and the parameter count ----------------------------------------------------

def expected_parameter_count(vocab, d, ff, enc, dec, max_pos, positions, norm) -> int:
    linear = lambda n_in, n_out: n_in * n_out + n_out  # noqa: E731
    layer_norm = 2 * d
    attention = 4 * linear(d, d)
    ffn = linear(d, ff) + linear(ff, d)
    encoder_layer = attention + ffn + 2 * layer_norm
    decoder_layer = 2 * attention + ffn + 3 * layer_norm
    total = vocab * d + enc * encoder_layer + dec * decoder_layer  # one embedding matrix, no output matrix
    if positions == "learned":
        total += max_pos * d
    if norm == "pre":
        total += 2 * layer_norm  # final encoder and decoder norms
    return total


@pytest.mark.parametrize(
    "vocab, d, heads, ff, enc, dec, positions, norm, expected",
    [
        # worked out by hand for the first row: embed 13*16 = 208; attention 4*(256+16) = 1088;
        # ffn (16*24+24) + (24*16+16) = 408 + 400 = 808; LN 32.
        # encoder layer 1088 + 808 + 64 = 1960; decoder layer 2176 + 808 + 96 = 3080
        # 208 + 2*1960 + 2*3080 + 2*32 = 10352
        (13, 16, 4, 24, 2, 2, "sinusoidal", "pre", 10352),
        (13, 16, 4, 24, 2, 2, "sinusoidal", "post", 10352 - 64),
        (13, 16, 4, 24, 2, 2, "learned", "pre", 10352 + 32 * 16),
        (7, 8, 2, 8, 1, 3, "learned", "post", None),
        (50, 12, 3, 20, 3, 1, "sinusoidal", "pre", None),
    ],
)
def test_parameter_count_formula(vocab, d, heads, ff, enc, dec, positions, norm, expected):
    cfg = ModelConfig(vocab_size=vocab, d_model=d, n_heads=heads, d_ff=ff, encoder_layers=enc,
                      decoder_layers=dec, max_positions=32, positions=positions, norm=norm).validate()
    model = Transformer(cfg)
    formula = expected_parameter_count(vocab, d, ff, enc, dec, 32, positions, norm)
    if expected is not None:
        assert formula == expected
    assert count_parameters(model) == formula
    # Nothing of shape (V, D) other than the shared embedding.
    vd = [n for n, p in model.named_parameters() if p.shape == (vocab, d)]
    assert vd == ["embed.weight"]


def test_output_projection_is_the_embedding_matrix():
    model = tiny()
    src, tgt = SRC, TGT
    unused = UNK  # a token that is not among the inputs, so only its output row matters
    assert unused not in src.flatten().tolist() + tgt.flatten().tolist()
    with torch.no_grad():
        before = model(src, tgt)
        memory, mask = model.encode(src)
        x = model.embed_tokens(tgt)
        for layer, kv in zip(model.decoder, model.memory_kv(memory)):
            x = layer(x, kv, mask).x
        h = model.decoder_norm(x)
        torch.testing.assert_close(before, h @ model.embed.weight.T, atol=1e-5, rtol=0)
        # Move one row of the embedding: only that token's logit changes (its input embedding is unused).
        delta = torch.randn(D)
        model.embed.weight[unused] += delta
        after = model(src, tgt)
    others = [v for v in range(V) if v != unused]
    torch.testing.assert_close(after[..., others], before[..., others], atol=1e-5, rtol=0)
    torch.testing.assert_close(after[..., unused], before[..., unused] + h @ delta, atol=1e-4, rtol=0)
    assert (after[..., unused] - before[..., unused]).abs().max() > 1e-3


# -- initialisation ------------------------------------------------------------------------------

@pytest.mark.parametrize("d_model, heads", [(32, 4), (64, 8)])
def test_initialisation(d_model, heads):
    torch.manual_seed(1)
    cfg = ModelConfig(vocab_size=4000, d_model=d_model, n_heads=heads, encoder_layers=1, decoder_layers=1,
                      d_ff=2 * d_model, max_positions=2000, positions="learned").validate()
    model = Transformer(cfg)
    emb = model.embed.weight.detach()
    assert torch.count_nonzero(emb[PAD]) == 0
    real = emb[torch.arange(emb.size(0)) != PAD]
    assert real.std().item() == pytest.approx(d_model ** -0.5, rel=0.03)
    assert abs(real.mean().item()) < 0.01 * d_model ** -0.5 * 10
    assert model.pos_embed.weight.std().item() == pytest.approx(d_model ** -0.5, rel=0.03)
    n_linear = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            n_linear += 1
            assert torch.count_nonzero(module.bias) == 0, name
            fan_out, fan_in = module.weight.shape
            bound = math.sqrt(6.0 / (fan_in + fan_out))  # Xavier uniform
            w = module.weight.detach()
            assert w.abs().max() <= bound + 1e-6, name
            assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.1), name
        if isinstance(module, torch.nn.LayerNorm):
            assert torch.all(module.weight == 1) and torch.all(module.bias == 0), name
    assert n_linear == 4 + 2 + 8 + 2  # enc attn + ffn, dec self/cross attn + ffn


def test_pad_input_embedding_gets_no_gradient():
    # Input side only: through the tied output projection the PAD row is a logit like any other.
    model = tiny()
    model.train()
    model.embed_tokens(torch.cat([SRC, TGT], dim=1)).pow(2).sum().backward()
    assert torch.count_nonzero(model.embed.weight.grad[PAD]) == 0
    assert torch.count_nonzero(model.embed.weight.grad[4]) > 0


# -- embedding scale and positions ---------------------------------------------------------------

@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("start", [0, 3])
def test_embed_tokens_scale_and_positions(positions, start):
    model = tiny(positions=positions)
    tokens = batch([4, 5, 6, 7], [8, 9, PAD, PAD])
    with torch.no_grad():
        out = model.embed_tokens(tokens, start=start)
    pos = model.pos_embed.weight if positions == "learned" else sinusoidal_table(P, D)
    expected = model.embed.weight[tokens] * math.sqrt(D) + pos[start : start + 4]
    torch.testing.assert_close(out, expected.detach(), atol=1e-5, rtol=0)
    # PAD embeds to its position only
    torch.testing.assert_close(out[1, 2], pos[start + 2].detach(), atol=1e-6, rtol=0)


def test_embed_tokens_scale_factor_is_sqrt_d_model():
    model = tiny()
    with torch.no_grad():
        model.embed.weight.fill_(1.0)
        out = model.embed_tokens(batch([5]))  # position 0: sin 0 = 0 on even dims, cos 0 = 1 on odd dims
    expected = torch.tensor([math.sqrt(D) + (i % 2) for i in range(D)])  # 4 or 5
    torch.testing.assert_close(out[0, 0], expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "length, start, ok",
    [(P, 0, True), (P + 1, 0, False), (1, P - 1, True), (1, P, False), (5, P - 4, False), (100, 0, False)],
)
def test_too_long_input(length, start, ok):
    model = tiny()
    tokens = torch.full((1, length), 5)
    if ok:
        assert model.embed_tokens(tokens, start=start).shape == (1, length, D)
    else:
        with pytest.raises(ValueError, match="max_positions"):
            model.embed_tokens(tokens, start=start)


def test_too_long_source_raises_in_forward():
    model = tiny()
    with pytest.raises(ValueError):
        model(torch.full((1, P + 1), 5), batch([BOS]))
    with pytest.raises(ValueError):
        model(batch([5, EOS]), torch.full((1, P + 1), 5))


def test_step_past_max_positions_raises():
    model = tiny()
    with torch.no_grad():
        state = model.start_decoding(batch([4, EOS]))
        for _ in range(P):
            model.step(torch.tensor([5]), state)
        with pytest.raises(ValueError):
            model.step(torch.tensor([5]), state)


# -- incremental decoding ------------------------------------------------------------------------

@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("use_cache", [True, False])
def test_step_equals_full_recomputation(norm, positions, use_cache):
    model = tiny(norm, positions)
    with torch.no_grad():
        full = model(SRC, TGT).log_softmax(-1)  # (B, T, V)
        state = model.start_decoding(SRC, use_cache=use_cache)
        assert (state.caches is not None) == use_cache
        for t in range(TGT.size(1)):
            lp = model.step(TGT[:, t], state)
            assert lp.shape == (2, V)
            torch.testing.assert_close(lp, full[:, t], atol=1e-5, rtol=0)
            assert state.prefix.tolist() == TGT[:, : t + 1].tolist()
        if use_cache:
            for cache in state.caches:
                assert cache.k.shape == (2, H, TGT.size(1), D // H)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("index", [[2, 0, 1], [1, 1, 0], [2], [0, 2]])
def test_reorder_state_then_step(norm, use_cache, index):
    """Reordering (or shrinking / duplicating) the state then stepping = stepping the selected rows."""
    model = tiny(norm)
    src = batch([4, 5, 6, EOS], [8, EOS], [9, 10, 11, 12, 4, EOS])
    tgt = batch([BOS, 5, 6, 7, 8], [BOS, 9, 10, 11, 12], [BOS, 12, 11, 10, 9])
    idx = torch.tensor(index)
    with torch.no_grad():
        full = model(src, tgt).log_softmax(-1)
        state = model.start_decoding(src, use_cache=use_cache)
        for t in range(2):
            model.step(tgt[:, t], state)
        before = state
        state = state.select(idx)
        assert before.prefix.size(0) == 3  # selecting leaves the state it started from as it was
        assert state.prefix.tolist() == tgt[idx, :2].tolist()
        for t in range(2, tgt.size(1)):
            lp = model.step(tgt[idx, t], state)
            torch.testing.assert_close(lp, full[idx, t], atol=1e-5, rtol=0)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("k, index", [(2, [0, 1, 2, 3, 4, 5]), (2, [5, 4, 1, 0]), (3, [3, 4, 5, 0, 1, 2, 6, 7, 8])])
def test_expand_then_select_then_step(use_cache, k, index):
    """Expanding each sentence to k hypotheses (the source shared, not copied), selecting whole groups of
    hypotheses (as beam search does) and stepping = stepping the same rows of a plain batch."""
    model = tiny()
    src = batch([4, 5, 6, EOS], [8, EOS], [9, 10, 11, 12, 4, EOS])
    tgt = batch([BOS, 5, 6, 7], [BOS, 9, 10, 11], [BOS, 12, 11, 10])
    rows = torch.arange(3).repeat_interleave(k)[torch.tensor(index)]  # the sentence of each kept hypothesis
    with torch.no_grad():
        full = model(src[rows], tgt[rows]).log_softmax(-1)
        state = model.start_decoding(src, use_cache=use_cache)
        model.step(tgt[:, 0], state)
        state = state.expand(k)
        assert state.source.group == k and state.source.mask.size(0) == 3  # shared per sentence
        state = state.select(torch.tensor(index))
        assert state.prefix.tolist() == tgt[rows, :1].tolist()
        for t in range(1, tgt.size(1)):
            lp = model.step(tgt[rows, t], state)
            torch.testing.assert_close(lp, full[:, t], atol=1e-5, rtol=0)


def test_kv_cache_selection_is_deferred_and_composed():
    k = torch.arange(4.0).view(4, 1, 1, 1)
    cache = KVCache(k, -k).select(torch.tensor([3, 1, 1])).select(torch.tensor([2, 0]))
    assert cache.k is k and cache.order.tolist() == [1, 3]  # nothing copied yet
    grown = cache.append(torch.full((2, 1, 1, 1), 9.0), torch.full((2, 1, 1, 1), -9.0))
    assert grown.k[:, 0, :, 0].tolist() == [[1.0, 9.0], [3.0, 9.0]] and grown.order is None
    assert grown.v[:, 0, :, 0].tolist() == [[-1.0, -9.0], [-3.0, -9.0]]
    assert KVCache().select(torch.tensor([0])) == KVCache()  # empty before the first step


def test_step_log_probs_normalised():
    model = tiny()
    with torch.no_grad():
        lp = model.step(torch.full((2,), BOS), model.start_decoding(SRC))
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(2), atol=1e-5, rtol=0)
    assert lp.dtype == torch.float32


def test_dropout_only_in_training():
    model = tiny(dropout=0.3, attention_dropout=0.3, activation_dropout=0.3)
    with torch.no_grad():
        a, b = model(SRC, TGT), model(SRC, TGT)
        torch.testing.assert_close(a, b, atol=0, rtol=0)
        model.train()
        c, d = model(SRC, TGT), model(SRC, TGT)
    assert (c - d).abs().max() > 1e-3


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_dropout_keeps_the_expectation_and_a_fraction_1_minus_p(p):
    """Inverted dropout: a share 1 - p of the values is kept, scaled by 1 / (1 - p), the rest zeroed; the
    gradient passes where the value was kept, with the same scale. 2^20 values: the kept share is
    within 5 standard deviations (about 0.0023) of 1 - p."""
    torch.manual_seed(0)
    drop = Dropout(p).train()
    x = torch.ones(1 << 20, requires_grad=True)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * (p * (1 - p) / (1 << 20)) ** 0.5
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
    y.sum().backward()
    torch.testing.assert_close(x.grad, y.detach())  # d y / d x: the same mask and scale
    assert torch.equal(drop.eval()(x), x)


def test_dropout_masks_follow_the_generator():
    """The same seed gives the same masks (so a resumed run redraws them), another seed others."""
    drop, x = Dropout(0.3).train(), torch.ones(1000)
    torch.manual_seed(5)
    a = drop(x)
    torch.manual_seed(5)
    b = drop(x)
    torch.manual_seed(6)
    c = drop(x)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_hidden_states_are_the_logits_before_the_projection():
    model = tiny()
    with torch.no_grad():
        hidden = model(SRC, TGT, project=False)  # (B, T, D)
        torch.testing.assert_close(hidden @ model.embed.weight.t(), model(SRC, TGT))
    assert hidden.shape == (*TGT.shape, model.cfg.d_model)


# -- configuration -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(d_model=510, n_heads=8), "divisible"),
        (dict(d_model=64, n_heads=3), "divisible"),
        (dict(positions="rotary"), "positions"),
        (dict(positions="Learned"), "positions"),
        (dict(norm="sandwich"), "norm"),
        (dict(norm=""), "norm"),
        (dict(vocab_size=0), "`vocab_size`"),
        (dict(encoder_layers=0), "`encoder_layers`"),
        (dict(decoder_layers=-1), "`decoder_layers`"),
        (dict(d_ff=0), "`d_ff`"),
        (dict(max_positions=0), "`max_positions`"),
        (dict(d_model=0), "`d_model`"),
        # n_heads 0 must be a ConfigError, not a ZeroDivisionError from `d_model % n_heads`
        pytest.param(dict(n_heads=0), "heads", id="n_heads=0"),
        (dict(n_heads=-2), "heads"),
        (dict(dropout=1.0), "dropout"),
        (dict(attention_dropout=-0.1), "`attention_dropout`"),
        (dict(activation_dropout=1.5), "`activation_dropout`"),
    ],
)
def test_model_config_validation_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**overrides).validate()


@pytest.mark.parametrize(
    "overrides",
    [dict(), dict(d_model=64, n_heads=64), dict(d_model=12, n_heads=3), dict(positions="learned", norm="post"),
     dict(dropout=0.0, attention_dropout=0.999)],
)
def test_model_config_valid(overrides):
    cfg = ModelConfig(**overrides)
    assert cfg.validate() is cfg


@pytest.mark.parametrize(
    "overrides, message",
    [(dict(warmup=0), "warmup"), (dict(max_tokens=0), "`max_tokens`"), (dict(label_smoothing=1.0), "`label_smoothing`"),
     (dict(max_updates=0), "`max_updates`"), (dict(keep_last=0), "`keep_last`")],
)
def test_train_config_validation_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**overrides).validate()


def test_from_preset_with_overrides():
    model, train = from_preset("tiny", dict(d_model=32, dropout=None, positions="learned"), dict(warmup=50, seed=None))
    assert (model.d_model, model.n_heads, model.encoder_layers, model.d_ff) == (32, 4, 2, 256)
    assert model.positions == "learned"
    assert model.dropout == ModelConfig().dropout  # None means "not set"
    assert (train.warmup, train.lr_factor, train.seed) == (50, 2.0, TrainConfig().seed)
    base, _ = from_preset("base")
    assert base == ModelConfig()
    big, _ = from_preset("big")
    assert (big.d_model, big.n_heads, big.d_ff, big.dropout) == (1024, 16, 4096, 0.3)


def test_from_preset_errors():
    with pytest.raises(ConfigError, match="unknown"):
        from_preset("huge")
    with pytest.raises(ConfigError, match="divisible"):
        from_preset("tiny", dict(n_heads=5))  # 64 % 5 != 0: overrides are validated
    assert set(PRESETS) >= {"tiny", "small", "base", "big"}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_config_dict_round_trip(preset):
    model, train = from_preset(preset)
    for cfg in (model, train):
        data = to_dict(cfg)
        assert all(not isinstance(v, tuple) for v in data.values())  # plain data only
        assert from_dict(type(cfg), data) == cfg
    assert to_dict(train)["adam_betas"] == [0.9, 0.98]
    assert from_dict(TrainConfig, to_dict(train)).adam_betas == (0.9, 0.98)


def test_from_dict_partial_uses_defaults():
    assert from_dict(ModelConfig, {"d_model": 64}) == ModelConfig(d_model=64)


@pytest.mark.parametrize("cls", [ModelConfig, TrainConfig])
def test_from_dict_unknown_key(cls):
    data = {**to_dict(cls()), "rope_theta": 10000}
    with pytest.raises(ConfigError, match="rope_theta"):
        from_dict(cls, data)


@pytest.mark.parametrize("norm", NORMS)
def test_cross_attention_weights_with_a_shared_source(norm):
    """The weights of hypotheses that share their sentence's source row (beam search) are those of
    copied source rows, each hypothesis its own."""
    model = tiny(norm)
    src = batch([4, 5, 6, EOS], [8, EOS])
    tgt = batch([BOS, 5, 6], [BOS, 7, 6], [BOS, 9, 10], [BOS, 12, 11])  # 2 hypotheses per sentence
    rows = torch.tensor([0, 0, 1, 1])
    with torch.no_grad():
        memory, mask = model.encode(src)
        kv = model.memory_kv(memory)
        x_shared, shared = model.decode(tgt, kv, mask, need_weights=True)
        x_copied, copied = model.decode(tgt, [(k[rows], v[rows]) for k, v in kv], mask[rows], need_weights=True)
    torch.testing.assert_close(x_shared, x_copied, atol=1e-5, rtol=0)
    for a, b in zip(shared, copied):
        assert a.shape == (4, H, 3, 4)
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


# -- the switches an imported (Marian) model needs ----------------------------------------------------
# Each defaults to what nmt always did, so nmt's own checkpoints load and compute as before.


def test_the_switches_default_to_the_paper_model():
    cfg = ModelConfig()
    assert (cfg.positions, cfg.activation, cfg.scale_embeddings, cfg.output_bias) == ("sinusoidal", "relu", True, False)
    assert "output_bias" not in tiny().state_dict()  # checkpoints of before load as they are
    assert from_dict(ModelConfig, {k: v for k, v in to_dict(cfg).items()
                                   if k not in ("activation", "scale_embeddings", "output_bias")}) == cfg


@pytest.mark.parametrize("d_model, pos, dim, expected", [
    (8, 0, 0, 0.0), (8, 0, 4, 1.0),  # sin 0 in the first half, cos 0 in the second
    (8, 1, 0, math.sin(1.0)), (8, 1, 4, math.cos(1.0)),  # i = 0: frequency 1
    (8, 1, 1, math.sin(1.0 / 10000 ** (2 / 8))), (8, 1, 5, math.cos(1.0 / 10000 ** (2 / 8))),
    (8, 7, 3, math.sin(7.0 / 10000 ** (6 / 8))), (8, 7, 7, math.cos(7.0 / 10000 ** (6 / 8))),
    (4, 30, 1, math.sin(30.0 / 100.0)), (4, 30, 3, math.cos(0.3)),
    # odd d_model: ceil(D/2) sines, then floor(D/2) cosines (transformers' layout)
    (5, 2, 2, math.sin(2.0 / 10000 ** (4 / 5))), (5, 2, 3, math.cos(2.0)), (5, 2, 4, math.cos(2.0 / 10000 ** (2 / 5))),
])
def test_sinusoidal_halves_table_values(d_model, pos, dim, expected):
    table = sinusoidal_halves_table(32, d_model)
    assert table.shape == (32, d_model) and table.dtype == torch.float32
    assert table[pos, dim].item() == pytest.approx(expected, abs=1e-7)


def test_sinusoidal_halves_is_the_interleaved_table_rearranged():
    a, b = sinusoidal_table(64, 16), sinusoidal_halves_table(64, 16)
    torch.testing.assert_close(torch.cat([a[:, 0::2], a[:, 1::2]], dim=1), b, atol=2e-5, rtol=0)
    assert tiny(positions="sinusoidal-halves").pos_table.equal(sinusoidal_halves_table(P, D))


ACTIVATION_FORMULAS = [
    ("relu", lambda x: x.clamp(min=0)),
    ("gelu", lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))),
    ("swish", lambda x: x * torch.sigmoid(x)),
]


@pytest.mark.parametrize("activation, fn", ACTIVATION_FORMULAS)
def test_feed_forward_activation(activation, fn):
    ffn = tiny(activation=activation).encoder[0].ffn
    x = torch.randn(3, D)
    with torch.no_grad():
        expected = F.linear(fn(F.linear(x, ffn.fc1.weight, ffn.fc1.bias)), ffn.fc2.weight, ffn.fc2.bias)
        torch.testing.assert_close(ffn(x), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("activation, fn", ACTIVATION_FORMULAS)
def test_decoder_layer_by_hand(activation, fn):
    """`decoder_layer` (post-LN, Marian's placement) against the layer written out from its modules."""
    model = tiny("post", activation=activation)
    layer = model.decoder[0]
    x, memory = torch.randn(2, 5, D), torch.randn(2, 4, D)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])[:, None, None, :]

    def attend(att, q_in, kv_in, **kw):
        q, k, v = (split(m(t)) for m, t in ((att.q_proj, q_in), (att.k_proj, kv_in), (att.v_proj, kv_in)))
        return att.out_proj(F.scaled_dot_product_attention(q, k, v, **kw).transpose(1, 2).reshape(x.shape[0], -1, D))

    def split(t):
        return t.view(t.shape[0], t.shape[1], H, D // H).transpose(1, 2)

    with torch.no_grad():
        h = layer.self_block.norm(x + attend(layer.self_attn, x, x, is_causal=True))
        h = layer.cross_block.norm(h + attend(layer.cross_attn, h, memory, attn_mask=mask))
        h = layer.ffn_block.norm(h + layer.ffn.fc2(fn(layer.ffn.fc1(h))))
        out = layer(x, layer.cross_attn.project_kv(memory), mask).x
    torch.testing.assert_close(out, h, atol=1e-5, rtol=0)


@pytest.mark.parametrize("activation", ["gelu", "swish"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_step_equals_full_recomputation_with_other_activations(activation, use_cache):
    """Training's forward, the uncached and the cached step compute the same activation: different ones
    give different numbers, the same within 1e-5."""
    model, relu = tiny(activation=activation), tiny()
    with torch.no_grad():
        full = model(SRC, TGT).log_softmax(-1)
        assert not torch.allclose(full, relu(SRC, TGT).log_softmax(-1), atol=1e-3)
        state = model.start_decoding(SRC, use_cache=use_cache)
        for t in range(TGT.size(1)):
            torch.testing.assert_close(model.step(TGT[:, t], state), full[:, t], atol=1e-5, rtol=0)


def test_training_with_swish_has_gradients():
    model = tiny(activation="swish").train()
    model(SRC, TGT).sum().backward()
    assert model.decoder[0].ffn.fc1.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("positions", POSITIONS + ["sinusoidal-halves"])
def test_embeddings_unscaled(positions):
    model = tiny(positions=positions, scale_embeddings=False)
    tokens = batch([4, 5, 6], [8, PAD, PAD])
    with torch.no_grad():
        out = model.embed_tokens(tokens, start=2)
    pos = model.pos_embed.weight if positions == "learned" else model.pos_table
    torch.testing.assert_close(out, (model.embed.weight[tokens] + pos[2:5]).detach(), atol=1e-6, rtol=0)


def test_output_bias_is_added_to_the_logits_and_not_trained():
    model = tiny(output_bias=True)
    assert model.output_bias.shape == (V,) and model.output_bias.abs().sum() == 0
    assert "output_bias" in model.state_dict() and "output_bias" not in dict(model.named_parameters())
    with torch.no_grad():
        model.output_bias.copy_(torch.arange(V, dtype=torch.float32))
        hidden = model(SRC, TGT, project=False)
        logits = model(SRC, TGT)
    torch.testing.assert_close(logits, F.linear(hidden, model.embed.weight) + torch.arange(V), atol=1e-5, rtol=0)
    # the inference projection (and so int8) carries it too, sharing the buffer
    model.use_output_projection()
    with torch.no_grad():
        torch.testing.assert_close(model(SRC, TGT), logits, atol=1e-5, rtol=0)
    assert model.output_proj.bias.data_ptr() == model.output_bias.data_ptr()
