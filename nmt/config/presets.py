"""Presets: named pairs of model and training overrides (`nmt train --preset NAME`), with the experiments
behind their values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from nmt.config.fields import Overrides, did_you_mean, overrides
from nmt.config.sections import ModelConfig, SearchConfig, TrainConfig
from nmt.core.errors import ConfigError, ref

# -- presets ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    model: Overrides[ModelConfig]
    train: Overrides[TrainConfig]
    description: str = ""
    # translate's defaults, stored in the run's checkpoints (a student's greedy search)
    search: Overrides[SearchConfig] = Overrides(SearchConfig)

    @classmethod
    def of(cls, description: str, model: Mapping[str, Any], train: Mapping[str, Any],
           search: Mapping[str, Any] | None = None) -> Preset:
        return cls(Overrides(ModelConfig, model), Overrides(TrainConfig, train), description,
                   Overrides(SearchConfig, search or {}))


# The multi30k preset, chosen on Multi30k en-de validation BLEU under a 90-minute, one-core-per-direction budget
# (the experiments are in docs/results-multi30k.md); its student preset starts from it.
MULTI30K_MODEL: dict[str, Any] = dict(d_model=128, n_heads=4, encoder_layers=4, decoder_layers=4, d_ff=512,
                                      max_positions=256, dropout=0.1, attention_dropout=0.0, activation_dropout=0.0)
# The run ends with its time budget (5,100 s of training: with download, BPE, prepare, averaging and the test,
# `make multi30k` stays within 90 minutes), the learning rate decaying to 0 over its last 20% (cosine); BPE-dropout
# resegments the training text every epoch (0.05: 1.45 more valid BLEU, both directions summed, than 0.1).
# lr_factor 1.36 (peak 6e-3): with the whole budget spent, twice the rate of the 2,700-update recipe gave 0.5-0.8
# more valid BLEU.
MULTI30K_TRAIN: dict[str, Any] = dict(max_tokens=4096, update_tokens=2000, lr_factor=1.36, warmup=400,
                                      max_time=5100.0, lr_tail="cosine", bpe_dropout=0.05, save_interval=100,
                                      keep_last=10, valid_interval=500, valid_bleu_sentences=1014)


PRESETS: dict[str, Preset] = {
    "tiny": Preset.of(
        "tests and the demo: 2+2 layers, d_model 64",
        model=dict(d_model=64, n_heads=4, encoder_layers=2, decoder_layers=2, d_ff=256, max_positions=256),
        train=dict(max_tokens=2048, update_tokens=2048, lr_factor=2.0, warmup=200, save_interval=100,
                   valid_interval=100, keep_last=5),
    ),
    "small": Preset.of(
        "CPU training on Multi30k-size data: 3+3 layers, d_model 256",
        model=dict(d_model=256, n_heads=4, encoder_layers=3, decoder_layers=3, d_ff=1024, max_positions=512),
        train=dict(max_tokens=4096, update_tokens=8192, lr_factor=2.0, warmup=1000, save_interval=500,
                   valid_interval=500),
    ),
    "multi30k": Preset.of(
        "Multi30k on a 2-core CPU (recipes/multi30k.sh): 4+4 layers, d_model 128",
        model=MULTI30K_MODEL,
        train=MULTI30K_TRAIN,
    ),
    "multi30k-student": Preset.of(
        # Trained on a teacher's translations (`nmt distill`): a deep encoder, which runs once per sentence, and a
        # shallow decoder, which runs once per output token (Kasai et al. 2021); greedy search. Two decoder layers,
        # not one: at 1,500 updates 2.8 (en-de) and 1.8 (de-en) BLEU more, greedy, for 16% and 15% fewer
        # sentences/s (docs/results-multi30k.md, "Distilled students").
        "a distilled student of the multi30k model: 6+2 layers, d_model 128, greedy search by default",
        model={**MULTI30K_MODEL, "encoder_layers": 6, "decoder_layers": 2},
        train={**MULTI30K_TRAIN, "max_time": 2700.0},
        search=dict(beam=1),
    ),
    "student": Preset.of(
        "a distilled student of a base-size teacher: 6+2 layers, d_model 512, d_ff 1024, greedy search by default",
        model=dict(encoder_layers=6, decoder_layers=2, d_ff=1024), train={}, search=dict(beam=1),
    ),
    "base": Preset.of("the paper's base model: 6+6 layers, d_model 512, 8 heads, d_ff 2048", model={}, train={}),
    "big": Preset.of(
        "the paper's big model: 6+6 layers, d_model 1024, 16 heads, d_ff 4096, dropout 0.3",
        model=dict(d_model=1024, n_heads=16, d_ff=4096, dropout=0.3),
        train=dict(lr_factor=1.0, warmup=4000),
    ),
}


def preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ConfigError(f"{ref('preset')} {name!r} is unknown; choose one of {', '.join(PRESETS)}"
                          f"{did_you_mean(name, PRESETS)}")
    return PRESETS[name]


def from_preset(name: str, model: Union[Overrides[ModelConfig], Mapping[str, Any], None] = None,
                train: Union[Overrides[TrainConfig], Mapping[str, Any], None] = None
                ) -> tuple[ModelConfig, TrainConfig]:
    """Configs of a preset with the options the user set on top (None values count as not given)."""
    chosen = preset(name)
    return ((chosen.model | overrides(ModelConfig, model)).apply(),
            (chosen.train | overrides(TrainConfig, train)).apply())
