"""`nmt train` end to end, around nmt.training.launch: the checks of its options, the configuration it
trains with (a --config file, the command line over it, --layers for both stacks), and the summary of a run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from nmt.config import ConfigFile, ModelConfig, Overrides, TrainConfig, flag_of, read_config_file, to_toml
from nmt.core.errors import ConfigError, NmtError, ref
from nmt.data.dataset import load_meta
from nmt.training.launch import plan
from nmt.training.trainer import TrainResult
from nmt.workflows.threads import set_threads


@dataclass(frozen=True)
class TrainPlan:
    """What a run trains with: the preset and the fields set over it (by --config, then the command line)."""

    preset: Optional[str]
    model: Overrides[ModelConfig]
    train: Overrides[TrainConfig]


def has_split(data: Path, split: str) -> bool:
    """Whether the data folder holds `split` (True when it cannot be read: training will say why)."""
    try:
        return split in load_meta(data)["splits"]
    except NmtError:
        return True


def check_train_options(data: Path, model: Overrides[ModelConfig], train: Overrides[TrainConfig],
                        layers: Optional[int], print_config: bool) -> None:
    """ConfigError for options that would do nothing."""
    if layers is not None and "encoder_layers" in model and "decoder_layers" in model:
        raise ConfigError(f"{ref('layers')} does nothing next to {flag_of(ModelConfig, 'encoder_layers')} and "
                          f"{flag_of(ModelConfig, 'decoder_layers')}; drop one of them")
    # What only a validation split gives meaning to (--valid-interval and --valid-bleu-sentences also turn
    # validation down, so they pass)
    validating = [f"{flag_of(TrainConfig, k)} {train.get(k)}" for k in ("valid_beam", "patience")
                  if train.get(k, 0) > TrainConfig.__dataclass_fields__[k].default]
    if validating and not print_config and not has_split(data, "valid"):
        raise ConfigError(f"{', '.join(validating)}: {data} has no validation split, so nothing is validated; "
                          f"prepare the data with {ref('valid')} PREFIX, or drop it")


def train_plan(data: Path, config: Optional[Path], preset: Optional[str], model: Overrides[ModelConfig],
               train: Overrides[TrainConfig], layers: Optional[int], threads: int,
               print_config: bool = False) -> TrainPlan:
    """The options checked, torch's threads set, and the configuration: the command line over the --config file."""
    check_train_options(data, model, train, layers, print_config)
    set_threads(threads)
    file = read_config_file(config) if config else ConfigFile.EMPTY
    stacks = Overrides(ModelConfig, {"encoder_layers": layers, "decoder_layers": layers})
    # the command line over the file; --encoder-layers over --layers
    return TrainPlan(preset or file.preset, file.model | stacks | model, file.train | train)


def resolved_toml(data: Path, out: Path, run: TrainPlan) -> str:
    """The configuration a run would train with, as TOML (--print-config)."""
    model_cfg, train_cfg, _ = plan(data, out, run.preset, run.model, run.train)
    return to_toml(model_cfg, train_cfg)


def summary(result: TrainResult, out: Path) -> str:
    """One line on how a run ended."""
    if result.new_updates == 0 and result.stopped:  # a stop reason is named after its option
        return (f"nothing to train: {out} had already ended at update {result.updates} (stopped by "
                f"{result.stopped}); raise {ref(result.stopped.replace('-', '_'))} to train on; last checkpoint "
                f"{result.checkpoint}")
    valid = f", valid loss {result.valid_loss:.3f}" if result.valid_loss is not None else ""
    valid += f", BLEU {result.valid_bleu:.2f} (best: {result.best_checkpoint})" if result.valid_bleu is not None else ""
    return (f"trained to update {result.updates} in {result.seconds:.0f}s "
            f"({result.tokens_per_second:,.0f} target tokens/s)"
            f"{valid}; stopped by {result.stopped or 'request'}; last checkpoint {result.checkpoint}")
