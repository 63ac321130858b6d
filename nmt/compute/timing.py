"""What `--precision auto` times on the CPU, fp32 against bf16: the model itself (its configuration, random
weights, a synthetic batch), run as training or translation runs it. `nmt.compute.device.fastest_cpu_precision`
times these once per machine and shape and keeps the result."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from nmt.compute.device import Timing, autocast
from nmt.compute.precision import prepare_model
from nmt.config import ModelConfig, Precision
from nmt.core.vocab import BOS
from nmt.model.loss import Workspace, label_smoothed_loss, projected_loss
from nmt.model.transformer import Transformer

TRAINING_SENTENCES, TRAINING_LENGTH = 16, 32  # 512 target tokens: a fraction of a second for a base model's pass
DECODING_SENTENCES, DECODING_BEAM, DECODING_LENGTH = 16, 4, 16  # the hypotheses and source length of a step
DECODING_STEPS = 8


def shape_of(cfg: ModelConfig) -> str:
    return (f"{cfg.encoder_layers}+{cfg.decoder_layers} layers d{cfg.d_model} h{cfg.n_heads} ff{cfg.d_ff} "
            f"v{cfg.vocab_size} {cfg.norm}")


def training_timing(cfg: ModelConfig, label_smoothing: float = 0.1) -> Timing:
    """One forward, loss and backward of the model on TRAINING_SENTENCES x TRAINING_LENGTH tokens, as the
    trainer runs an update: fp32, with the output projection fused into the loss; or bf16 autocast, the
    projection under autocast too (mirrors `nmt.training.trainer.Trainer.loss`)."""
    parts: dict[str, Any] = {}  # built at the first pass: a cached timing needs no model

    def build() -> dict[str, Any]:
        gen = torch.Generator().manual_seed(0)
        length = min(TRAINING_LENGTH, cfg.max_positions - 1)
        tgt = torch.randint(4, cfg.vocab_size, (TRAINING_SENTENCES, length + 1), generator=gen)
        tgt[:, 0] = BOS
        return {"model": Transformer(cfg).train(), "workspace": Workspace(), "tgt": tgt, "target": tgt[:, 1:].flatten(),
                "src": torch.randint(4, cfg.vocab_size, (TRAINING_SENTENCES, length), generator=gen)}

    def run(precision: Precision) -> None:
        if not parts:
            parts.update(build())
        model, target, cpu = parts["model"], parts["target"], torch.device("cpu")
        with autocast(precision, cpu):
            hidden = model(parts["src"], parts["tgt"][:, :-1], project=False).flatten(0, 1)  # (N, D)
        if precision == Precision.FP32:
            loss, _ = projected_loss(hidden, model.projection, target, label_smoothing, parts["workspace"])
        else:
            with autocast(precision, cpu):
                logits = F.linear(hidden, model.projection)  # (N, V)
            loss, _ = label_smoothed_loss(logits, target, label_smoothing)
        backward: Callable[[], None] = loss.backward  # unannotated in torch
        backward()
        model.zero_grad(set_to_none=True)

    return Timing(shape_of(cfg), run)


def translation_timing(cfg: ModelConfig) -> Timing:
    """DECODING_STEPS decoding steps of DECODING_SENTENCES sentences x DECODING_BEAM beams, the model prepared
    for translation in each format as the torch engine prepares it (`prepare_model`)."""
    parts: dict[str, Any] = {}  # built at the first pass: a cached timing needs no model

    def build() -> dict[str, Any]:
        gen = torch.Generator().manual_seed(0)
        length = min(DECODING_LENGTH, cfg.max_positions - 1)
        return {"weights": Transformer(cfg).state_dict(),
                "src": torch.randint(4, cfg.vocab_size, (DECODING_SENTENCES, length), generator=gen),
                "tokens": torch.randint(4, cfg.vocab_size, (DECODING_STEPS, DECODING_SENTENCES * DECODING_BEAM),
                                        generator=gen)}

    @torch.inference_mode()
    def run(precision: Precision) -> None:
        if not parts:
            parts.update(build())
        if precision not in parts:
            model = Transformer(cfg).eval()
            model.load_state_dict(parts["weights"])
            parts[precision] = prepare_model(model, precision, "cpu")
        model = parts[precision]
        state = model.start_decoding(parts["src"])
        model.step(torch.full((DECODING_SENTENCES,), BOS), state)
        state = state.expand(DECODING_BEAM)
        for step in parts["tokens"]:
            model.step(step, state)

    return Timing(shape_of(cfg), run)
