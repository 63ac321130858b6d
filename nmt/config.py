"""Typed configuration: the model architecture and the training recipe.

A preset is just a named pair of configs. The final configs are stored in every checkpoint
(as plain dicts), so `translate`, `eval` and `average` rebuild a model with no flags.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from nmt.errors import ConfigError

# The largest count or size an option takes: a sanity cap, so that no value overflows the int32/int64
# arithmetic of torch and numpy (or a seed their generators refuse) deep inside a run.
INT_MAX = 2**31 - 1
MAX_THREADS = 1024  # torch crashes (SIGSEGV) when asked for ~100k threads


def option_name(field_name: str) -> str:
    """The command-line option of a config field: max_len_a -> --max-len-a."""
    return "--" + field_name.replace("_", "-")


def check_range(option: str, value: float, low: Optional[float] = None, high: Optional[float] = None, *,
                low_open: bool = False, high_open: bool = False) -> None:
    """ConfigError naming `option` unless `value` is a finite number between `low` and `high` (each
    included unless open). NaN fails every comparison, so it is caught first rather than slipping past one."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{option} must be a finite number, got {value}")
    if low is not None and (value <= low if low_open else value < low):
        raise ConfigError(f"{option} must be {'above' if low_open else 'at least'} {low}, got {value}")
    if high is not None and (value >= high if high_open else value > high):
        raise ConfigError(f"{option} must be {'below' if high_open else 'at most'} {high}, got {value}")


@dataclass
class ModelConfig:
    """Encoder-decoder Transformer with one shared (tied) embedding table."""

    vocab_size: int = 37000
    d_model: int = 512
    n_heads: int = 8
    encoder_layers: int = 6
    decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1  # on sublayer outputs and on embeddings + positions
    attention_dropout: float = 0.1  # on attention weights
    activation_dropout: float = 0.1  # on the ReLU of the feed-forward
    max_positions: int = 1024
    positions: str = "sinusoidal"  # or "learned"
    norm: str = "pre"  # or "post" (the paper's original placement)

    def validate(self) -> "ModelConfig":
        if self.n_heads >= 1 and self.d_model % self.n_heads:
            raise ConfigError(f"--d-model {self.d_model} is not divisible by --heads {self.n_heads}; pick values that divide")
        if self.positions not in ("sinusoidal", "learned"):
            raise ConfigError(f"--positions {self.positions!r}: use 'sinusoidal' or 'learned'")
        if self.norm not in ("pre", "post"):
            raise ConfigError(f"--norm {self.norm!r}: use 'pre' or 'post'")
        for name in ("vocab_size", "d_model", "n_heads", "encoder_layers", "decoder_layers", "d_ff", "max_positions"):
            check_range(option_name(name), getattr(self, name), 1, INT_MAX)
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            check_range(option_name(name), getattr(self, name), 0.0, 1.0, high_open=True)
        return self


# The widest beam search: its memory grows with beam x vocabulary per sentence.
MAX_BEAM = 1024

# Number formats, for training and translation alike (nmt.device resolves them for a device).
PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
TRAINING_PRECISIONS = PRECISIONS[:4]  # int8 (dynamic quantisation) is for translation only


@dataclass
class TrainConfig:
    """The optimisation recipe of the paper: Adam, warmup + inverse square root, label smoothing."""

    max_tokens: int = 4096  # target tokens per forward batch (per process)
    update_tokens: int = 25000  # target tokens per optimizer update, over accumulation steps and processes
    lr_factor: float = 1.0  # lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    warmup: int = 4000
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    label_smoothing: float = 0.1
    clip_norm: float = 0.0  # 0 disables gradient clipping
    max_updates: int = 100000
    max_epochs: int = 0  # 0: no limit
    max_time: float = 0.0  # seconds; 0: no limit
    save_interval: int = 1000  # updates between checkpoints
    keep_last: int = 10  # step checkpoints kept (for averaging)
    valid_interval: int = 1000  # updates between validations
    log_interval: int = 10  # updates between progress reports
    seed: int = 1
    precision: str = "auto"  # auto: bf16 (or fp16) on CUDA; on the CPU bf16 where native and wide enough, else fp32
    max_bad_updates: int = 5  # consecutive updates with a non-finite loss that stop training
    valid_bleu_sentences: int = 500  # validation sentences translated for BLEU; 0: loss only
    valid_beam: int = 1  # beam of the validation translations; 1: greedy
    patience: int = 0  # stop after this many validations without a BLEU improvement; 0: never
    init_from: str = ""  # fine-tuning: a new run starts from this checkpoint's weights; "": from scratch
    reset_optimizer: bool = True  # with init_from: a fresh Adam; False: the checkpoint's moments
    reset_lr_scheduler: bool = True  # with init_from: warmup from update 0; False: continue its schedule

    def validate(self) -> "TrainConfig":
        for name in ("max_tokens", "update_tokens", "warmup", "max_updates", "save_interval", "keep_last",
                     "valid_interval", "log_interval", "max_bad_updates"):
            check_range(option_name(name), getattr(self, name), 1, INT_MAX)
        for name in ("max_epochs", "valid_bleu_sentences", "patience", "seed"):  # 0: no limit / loss only / never
            check_range(option_name(name), getattr(self, name), 0, INT_MAX)
        check_range("--valid-beam", self.valid_beam, 1, MAX_BEAM)
        check_range("--lr-factor", self.lr_factor, 0.0, low_open=True)
        check_range("--label-smoothing", self.label_smoothing, 0.0, 1.0, high_open=True)
        check_range("--clip-norm", self.clip_norm, 0.0)  # 0: no clipping
        check_range("--max-time", self.max_time, 0.0)  # 0: no limit
        check_range("--adam-eps", self.adam_eps, 0.0)
        if len(self.adam_betas) != 2:
            raise ConfigError(f"--adam-betas takes two numbers (beta1 beta2), got {len(self.adam_betas)}")
        for beta in self.adam_betas:  # torch's Adam refuses others with a ValueError
            check_range("--adam-betas", beta, 0.0, 1.0, high_open=True)
        if self.precision not in TRAINING_PRECISIONS:
            raise ConfigError(f"--precision {self.precision!r}: use one of {', '.join(TRAINING_PRECISIONS)}")
        if self.patience and not self.valid_bleu_sentences:
            raise ConfigError("--patience counts validations without a BLEU improvement; "
                              "it needs --valid-bleu-sentences above 0")
        return self


@dataclass
class Preset:
    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    description: str = ""


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        model=dict(d_model=64, n_heads=4, encoder_layers=2, decoder_layers=2, d_ff=256, max_positions=256),
        train=dict(max_tokens=2048, update_tokens=2048, lr_factor=2.0, warmup=200, save_interval=100,
                   valid_interval=100, keep_last=5),
        description="tests and the demo: 2+2 layers, d_model 64",
    ),
    "small": Preset(
        model=dict(d_model=256, n_heads=4, encoder_layers=3, decoder_layers=3, d_ff=1024, max_positions=512),
        train=dict(max_tokens=4096, update_tokens=8192, lr_factor=2.0, warmup=1000, save_interval=500,
                   valid_interval=500),
        description="CPU training on Multi30k-size data: 3+3 layers, d_model 256",
    ),
    "multi30k": Preset(
        # Chosen on Multi30k en-de validation BLEU under a 90-minute, one-core-per-direction budget;
        # the experiments are in docs/results-multi30k.md.
        model=dict(d_model=128, n_heads=4, encoder_layers=4, decoder_layers=4, d_ff=512, max_positions=256,
                   dropout=0.1, attention_dropout=0.0, activation_dropout=0.0),
        train=dict(max_tokens=4096, update_tokens=2000, lr_factor=0.68, warmup=400, max_updates=2700, max_time=5280.0,
                   save_interval=100, keep_last=10, valid_interval=500, valid_bleu_sentences=1014),
        description="Multi30k on a 2-core CPU (recipes/multi30k.sh): 4+4 layers, d_model 128",
    ),
    "base": Preset(
        model=dict(),
        train=dict(),
        description="the paper's base model: 6+6 layers, d_model 512, 8 heads, d_ff 2048",
    ),
    "big": Preset(
        model=dict(d_model=1024, n_heads=16, d_ff=4096, dropout=0.3),
        train=dict(lr_factor=1.0, warmup=4000),
        description="the paper's big model: 6+6 layers, d_model 1024, 16 heads, d_ff 4096, dropout 0.3",
    ),
}


def from_preset(name: str, model_overrides: Optional[dict] = None,
                train_overrides: Optional[dict] = None) -> tuple[ModelConfig, TrainConfig]:
    """Build configs from a preset, then apply the options the user set (None values are ignored)."""
    if name not in PRESETS:
        raise ConfigError(f"--preset {name!r} is unknown; choose one of {', '.join(PRESETS)}")
    preset = PRESETS[name]
    model = {**preset.model, **{k: v for k, v in (model_overrides or {}).items() if v is not None}}
    train = {**preset.train, **{k: v for k, v in (train_overrides or {}).items() if v is not None}}
    return ModelConfig(**model).validate(), TrainConfig(**train).validate()


def overrides(cls: type, options: dict[str, Any], renamed: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """The values in `options` (e.g. a command's options) that set fields of the config class `cls`;
    `renamed` maps option names to field names where they differ; None (not given) is left out."""
    names = {f.name for f in dataclasses.fields(cls)}
    renamed = renamed or {}
    picked = ((renamed.get(key, key), value) for key, value in options.items())
    return {name: value for name, value in picked if name in names and value is not None}


def to_dict(config: Any) -> dict[str, Any]:
    """A config as plain Python data (safe for `torch.load(weights_only=True)`)."""
    d = dataclasses.asdict(config)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def from_dict(cls: type, data: dict[str, Any]):
    """Rebuild a config from `to_dict` output; unknown keys (a newer nmt) are an error."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} fields {sorted(unknown)}: was this written by a newer nmt?")
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return cls(**kwargs)


# -- configuration files ---------------------------------------------------------------------------

SECTIONS = {"model": ModelConfig, "train": TrainConfig}


def to_toml(model: ModelConfig, train: TrainConfig, preset: Optional[str] = None) -> str:
    """A run's configuration as TOML: `[model]` and `[train]` with every field (what `--config` reads)."""
    lines = ["# nmt run configuration: `nmt train --config FILE` reads it; command-line options override it", ""]
    if preset:
        lines += [f"preset = {_toml_value(preset)}", ""]
    for section, config in (("model", model), ("train", train)):
        lines.append(f"[{section}]")
        lines += [f"{name} = {_toml_value(value)}" for name, value in to_dict(config).items()]
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)  # round-trips exactly; inf/nan are rejected by validate() before they get here
    return str(value)


def read_config_file(path: Any) -> tuple[Optional[str], dict[str, Any], dict[str, Any]]:
    """(preset, model fields, train fields) of a TOML file written by `to_toml` or by hand; unknown
    sections or fields and values of the wrong type are a ConfigError naming the file."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot read it ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"--config {path}: not valid TOML ({e})") from None
    preset = data.pop("preset", None)
    if preset is not None and not isinstance(preset, str):
        raise ConfigError(f"--config {path}: preset must be a string such as \"base\"")
    unknown = set(data) - set(SECTIONS)
    if unknown:
        raise ConfigError(f"--config {path}: unknown section(s) {sorted(unknown)}; use [model] and [train]")
    found = {}
    for section, cls in SECTIONS.items():
        values = data.get(section, {})
        if not isinstance(values, dict):
            raise ConfigError(f"--config {path}: {section} must be a table, [{section}]")
        found[section] = {name: _checked(path, section, cls, name, value) for name, value in values.items()}
    return preset, found["model"], found["train"]


def _checked(path: Any, section: str, cls: type, name: str, value: Any) -> Any:
    """`value` as the type of field `name` of `cls` (an int is fine for a float, a list for a tuple)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if name not in fields:
        raise ConfigError(f"--config {path}: [{section}] has no field {name!r}; "
                          f"the fields are {', '.join(fields)}")
    default = fields[name].default
    if isinstance(default, tuple):
        ok = isinstance(value, list) and len(value) == len(default) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        value = tuple(float(v) for v in value) if ok else value
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, type(default)) and not (isinstance(value, bool) and not isinstance(default, bool))
    if not ok:
        raise ConfigError(f"--config {path}: [{section}] {name} = {value!r} should be like {default!r}")
    return value
