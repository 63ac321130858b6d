"""Inference kernels and the decoding step's fast paths compute what the plain model computes: the step
against the training forward pass, the fused q|k|v projection, the parts called without nn.Module, the
shared source, the prepared fp32 model and the int8 layers."""

import pytest
import torch

from nmt.compute import precision as kernels
from nmt.compute.precision import Int8Linear, prepare_model
from nmt.config import ModelConfig
from nmt.core.vocab import BOS, EOS, PAD
from nmt.model.layers import function_of
from nmt.model.transformer import SourceMemory, Transformer

V, D, H, FF, P = 29, 32, 4, 48, 64


def tiny(norm="pre", seed=0) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=V, d_model=D, n_heads=H, encoder_layers=2, decoder_layers=2, d_ff=FF, dropout=0.0,
                      attention_dropout=0.0, activation_dropout=0.0, max_positions=P, norm=norm)
    return Transformer(cfg.validate()).eval()


def sources(n: int, seed: int = 1) -> torch.Tensor:
    """n sources of different lengths (so some are padded), each ending in EOS. (n, S)"""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(4, V, (1 + (3 * i) % 7,), generator=g).tolist() + [EOS] for i in range(n)]
    width = max(map(len, rows))
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


def beam_like_steps(model, src: torch.Tensor, k: int, steps: int, seed: int = 2) -> list[torch.Tensor]:
    """Log-probabilities of `steps` decoding steps as beam search takes them: one row per sentence, then
    k rows each, reordered within each sentence at every step."""
    g = torch.Generator().manual_seed(seed)
    out = []
    with torch.inference_mode():
        state = model.start_decoding(src)
        out.append(model.step(torch.full((src.size(0),), BOS), state))
        state = state.expand(k)
        for _ in range(steps):
            order = (torch.arange(src.size(0))[:, None] * k + torch.randint(0, k, (src.size(0), k), generator=g))
            state = state.select(order.flatten())
            out.append(model.step(torch.randint(4, V, (src.size(0) * k,), generator=g), state))
    return out


# -- the step against the training forward pass ------------------------------------------------------

@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("prepared", [False, True])
def test_beam_like_steps_equal_full_recomputation(norm, prepared):
    """Beam-like steps (shared source, reordered cache) give the log-probabilities of recomputing the
    whole prefix with the training forward pass, for the model as trained and as prepared for inference."""
    model, src, k = tiny(norm), sources(5), 3
    step_model = prepare_model(tiny(norm), "fp32") if prepared else model
    g = torch.Generator().manual_seed(4)
    with torch.inference_mode():
        state = step_model.start_decoding(src)
        prefix = torch.full((5, 1), BOS)
        step_model.step(prefix[:, 0], state)
        state, prefix = state.expand(k), prefix.repeat_interleave(k, 0)
        rows = torch.arange(5).repeat_interleave(k)  # the sentence of each hypothesis
        for _ in range(4):
            order = (torch.arange(5)[:, None] * k + torch.randint(0, k, (5, k), generator=g)).flatten()
            state, prefix = state.select(order), prefix[order]
            tokens = torch.randint(4, V, (5 * k,), generator=g)
            prefix = torch.cat([prefix, tokens[:, None]], dim=1)
            lp = step_model.step(tokens, state)
            full = model(src[rows], prefix).log_softmax(-1)[:, -1]
            torch.testing.assert_close(lp, full, atol=1e-5, rtol=0)


# -- fused q|k|v, direct calls, the shared source --------------------------------------------------

def test_fused_self_attention_computes_the_same_steps():
    plain, fused = tiny(), tiny()
    fused.fuse_qkv()
    for layer in fused.decoder:
        a = layer.self_attn
        assert torch.equal(a.qkv.weight, torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
        assert not a.qkv.weight.requires_grad
        assert layer.parts().qkv is not None
    assert all(layer.self_attn.qkv is None and layer.parts().qkv is None for layer in plain.decoder)  # training's model
    assert all(layer.self_attn.qkv is None for layer in fused.encoder)  # encoded once per sentence: left as trained
    src = sources(4)
    for a, b in zip(beam_like_steps(plain, src, 2, 4), beam_like_steps(fused, src, 2, 4)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_plain_functions_compute_what_the_modules_compute(precision):
    model = prepare_model(tiny(), precision)
    layer = model.decoder[1]
    x = torch.randn(5, D)
    with torch.inference_mode():
        for module in (layer.ffn.fc1, layer.self_block.norm, layer.self_attn.qkv, layer.cross_attn.out_proj):
            assert torch.equal(function_of(module)(x), module(x))


def test_decoder_parts_carry_dropout_only_in_training():
    """The decoding step runs the parts bound in eval mode: no dropout call at all; training's forward
    pass binds the layer's dropout modules."""
    layer = tiny().decoder[0]
    parts = layer.parts()
    assert parts.self_dropout is parts.cross_dropout is parts.activation_dropout is parts.ffn_dropout is None
    layer.train()
    parts = layer.parts()
    assert parts.self_dropout is layer.self_block.dropout and parts.ffn_dropout is layer.ffn_block.dropout
    assert parts.activation_dropout is layer.ffn.dropout and parts.cross_dropout is layer.cross_block.dropout


def test_source_is_shared_until_a_sentence_leaves():
    model, src = tiny(), sources(3)
    with torch.no_grad():
        source = model.start_decoding(src).expand(2).source
    assert torch.equal(source.bias, torch.zeros(src.shape).masked_fill(src == PAD, float("-inf"))[:, None, None])
    assert source.select(torch.tensor([1, 0, 2, 3, 5, 5])) is source  # beams reordered within their sentences
    kept = source.select(torch.tensor([4, 5, 0, 1]))  # sentence 1 left; 2 and 0 remain, in that order
    assert kept.mask.size(0) == 2 and torch.equal(kept.kv[0][0], source.kv[0][0][[2, 0]])
    assert torch.equal(kept.bias, source.bias[[2, 0]])
    assert isinstance(kept, SourceMemory) and kept.group == 2


# -- packing and int8 -----------------------------------------------------------------------------------

def test_prepared_fp32_model_uses_torch_linear_layers():
    """fp32 inference runs torch's own linear layers (public kernels): nothing replaced, q|k|v fused."""
    model = prepare_model(tiny(), "fp32")
    assert model.output_proj is None  # the tied embedding matrix, as in training
    linears = [m for m in model.modules() if "Linear" in type(m).__name__]
    assert all(type(m) is torch.nn.Linear for m in linears)
    assert len(linears) == sum(type(m) is torch.nn.Linear for m in tiny().modules()) + len(model.decoder)


@pytest.mark.parametrize("rows", [1, 4, 70, 130])
def test_int8_linear_equals_torch_dynamic_quantisation(rows):
    """Int8Linear computes what torch.ao's dynamically quantised module computes, with the backend it was
    packed for; with two packings, the second one's below FEW_ROWS rows."""
    import warnings

    import torch.ao.nn.quantized.dynamic as nnqd
    from torch.ao.quantization import per_channel_dynamic_qconfig

    torch.manual_seed(rows)
    linear, x = torch.nn.Linear(D, FF), torch.randn(rows, D)
    wide, small = kernels.int8_engines()
    theirs = {}
    before = torch.backends.quantized.engine
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
            for engine in (wide, small):
                torch.backends.quantized.engine = engine
                linear.qconfig = per_channel_dynamic_qconfig
                theirs[engine] = nnqd.Linear.from_float(linear)(x)
    finally:
        torch.backends.quantized.engine = before
    for engine in (wide, small):
        assert torch.equal(Int8Linear.of(linear, engine)(x), theirs[engine])
    both = Int8Linear.of(linear, wide, few_rows_engine=small)
    assert torch.equal(both(x), theirs[small if rows < kernels.FEW_ROWS else wide])
