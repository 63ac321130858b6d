"""Typed configuration, each option declared once: the model architecture, the training recipe, the
search, the inference device and number format, and the data filters.

Every field says, in its `option(...)` metadata, its help text, its command-line option (--field-name
unless named otherwise) and the values it accepts (a `Literal` type or a range). `nmt.options` builds
the commands' options from these declarations, `read_config_file` and `to_toml` the configuration files,
and `check_fields` the range checks, so that help text, TOML keys, defaults and checks cannot drift
apart. What a user (or a preset, or a file) set is an `Overrides`: the given fields of one config
class, applied to a base (the defaults, a preset, a resumed run's stored config).

A preset is just a named pair of overrides. The final configs are stored in every checkpoint (as plain
data), so `translate`, `eval` and `average` rebuild a model with no flags.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import difflib
import enum
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Iterator, Literal, Mapping, Optional, Sequence, TypeVar, Union

from nmt.compression import read_small_text
from nmt.errors import ConfigError, InputError

# The largest count or size an option takes: a sanity cap, so that no value overflows the int32/int64
# arithmetic of torch and numpy (or a seed their generators refuse) deep inside a run.
INT_MAX = 2**31 - 1
MAX_THREADS = 1024  # torch crashes (SIGSEGV) when asked for ~100k threads
# The widest beam search: its memory grows with beam x vocabulary per sentence.
MAX_BEAM = 1024
# Sanity caps of the search. |alpha| <= 10 keeps ((5 + len) / 6)^alpha and len^alpha finite for any length
# a model can emit; an output limit of 1000 tokens per source token is beyond any model's positions already.
MAX_LENPEN = 10.0
MAX_LEN_A = 1000.0


class Precision(str, enum.Enum):
    """Number formats, for training and translation alike; `nmt.device.resolve_precision` turns the
    requested one (auto included) into the one a device runs."""

    AUTO = "auto"
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    INT8 = "int8"  # dynamic int8 quantisation: translation on the CPU only

    def __str__(self) -> str:
        return self.value


TRAINING_PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # int8 (dynamic quantisation) is for translation only


# -- declaring an option ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OptionSpec:
    """How a config field appears to the user: its option, help text, accepted values."""

    help: str
    flag: Optional[str] = None  # the option's name; None: --field-name
    aliases: tuple[str, ...] = ()  # other names the option answers to (e.g. a short -m)
    choices: Optional[tuple[str, ...]] = None  # accepted values, where the type does not say (a subset of an enum)
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    requires: Optional[str] = None  # a field without which (while it is off: OFF) this one does nothing
    cli: bool = True  # False: set by nmt itself (e.g. vocab_size, from the data), not on the command line
    excludes: Optional[str] = None  # a boolean field with which this one does nothing


OFF = (False, None, "", 0, "none")  # the values of a field that switch it off (for `requires`)


def option(default: Any, help: str, *, flag: Optional[str] = None, aliases: Sequence[str] = (),
           choices: Optional[Sequence[str]] = None, low: Optional[float] = None, high: Optional[float] = None,
           low_open: bool = False, high_open: bool = False, requires: Optional[str] = None,
           cli: bool = True, excludes: Optional[str] = None) -> Any:
    """A config field declared once: its default, help text, option name, accepted values and range."""
    spec = OptionSpec(help, flag, tuple(aliases), tuple(choices) if choices else None, low, high, low_open,
                      high_open, requires, cli, excludes)
    return field(default=default, metadata={"option": spec})


def option_name(field_name: str) -> str:
    """The command-line option of a config field: max_len_a -> --max-len-a."""
    return "--" + field_name.replace("_", "-")


def spec_of(f: dataclasses.Field) -> OptionSpec:
    spec = f.metadata.get("option")
    if spec is None:
        raise TypeError(f"config field {f.name} is declared without option(...)")
    return spec


# Within `names_as_fields()`, messages name fields (d_model) rather than options (--d-model): the values
# come from a file (a checkpoint, a data folder), not from options the user gave.
_FIELD_NAMES: contextvars.ContextVar[bool] = contextvars.ContextVar("field_names", default=False)


@contextlib.contextmanager
def names_as_fields() -> Iterator[None]:
    token = _FIELD_NAMES.set(True)
    try:
        yield
    finally:
        _FIELD_NAMES.reset(token)


def flag_of(cls: type, name: str) -> str:
    """The command-line option that sets field `name` of config class `cls` (its first name: the
    positive one of a --x/--no-x pair), or the field's name within `names_as_fields()`."""
    if _FIELD_NAMES.get():
        return name
    return (spec_of(fields_of(cls)[name]).flag or option_name(name)).split("/")[0]


def given_flag(cls: type, name: str, value: Any) -> str:
    """The option as the user wrote it to give `value`: --no-x for False of a --x/--no-x pair."""
    flag = flag_of(cls, name)
    pair = (spec_of(fields_of(cls)[name]).flag or "").split("/")
    return pair[1] if value is False and len(pair) == 2 and not _FIELD_NAMES.get() else flag


def fields_of(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def field_types(cls: type) -> dict[str, Any]:
    """Each field's type, resolved (the annotations are strings under `from __future__ import annotations`)."""
    return typing.get_type_hints(cls)


def choices_of(cls: type, name: str) -> Optional[tuple[str, ...]]:
    """The values field `name` accepts, where they are a fixed set: its declared choices, or its
    `Literal`/enum type's values."""
    spec = spec_of(fields_of(cls)[name])
    if spec.choices:
        return spec.choices
    kind = field_types(cls)[name]
    if typing.get_origin(kind) is Literal:
        return tuple(typing.get_args(kind))
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return tuple(str(m.value) for m in kind)
    return None


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


def check_fields(config: Any) -> None:
    """Check every field of `config` against its declaration: its type, its choices, its range."""
    for name in fields_of(type(config)):
        check_field(type(config), name, getattr(config, name))


def check_field(cls: type, name: str, value: Any) -> None:
    """ConfigError naming the field's option (or, within `names_as_fields`, the field) unless `value`
    has field `name`'s type, is one of its choices and lies in its range."""
    spec, flag = spec_of(fields_of(cls)[name]), flag_of(cls, name)
    check_type(flag, value, field_types(cls)[name])
    if value is None:  # an Optional field left out (its type allows None)
        return
    allowed = choices_of(cls, name)
    if allowed is not None and str(value.value if isinstance(value, enum.Enum) else value) not in allowed:
        raise ConfigError(f"{flag} {value!s}: use one of {', '.join(allowed)}")
    if spec.low is not None or spec.high is not None:
        for v in value if isinstance(value, tuple) else (value,):
            check_range(flag, v, spec.low, spec.high, low_open=spec.low_open, high_open=spec.high_open)


def check_type(flag: str, value: Any, kind: Any) -> None:
    """ConfigError unless `value` is of type `kind` (an int is fine for a float; a bool is not a number).
    Configs come from checkpoints and files too, where a string can stand where a number belongs."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Union:  # Optional[X]
        if value is None and type(None) in args:
            return
        kind = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        ok = isinstance(value, str)
    elif isinstance(kind, type) and issubclass(kind, enum.Enum):
        ok = isinstance(value, kind) or value in {m.value for m in kind}
    elif origin is tuple:
        ok = isinstance(value, tuple) and len(value) == len(args) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ConfigError(f"{flag} {value!r}: should be {type_name(kind)}")


def type_name(kind: Any) -> str:
    if typing.get_origin(kind) is tuple:
        return f"{len(typing.get_args(kind))} numbers"
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(typing.get_args(kind))
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return "one of " + ", ".join(m.value for m in kind)
    return {int: "a whole number", float: "a number", bool: "true or false", str: "a string"}.get(kind, str(kind))


def coerce(cls: type, name: str, value: Any) -> Any:
    """`value` as read from a file or a checkpoint, in the type of field `name`: a list for a tuple,
    an int for a float, a string for an enum. Anything else is left for `check_fields` to judge."""
    kind = field_types(cls)[name]
    if typing.get_origin(kind) is Union:
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if isinstance(kind, type) and issubclass(kind, enum.Enum) and isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            raise ConfigError(f"{flag_of(cls, name)} {value!r}: use one of "
                              f"{', '.join(choices_of(cls, name) or ())}") from None
    if typing.get_origin(kind) is tuple and isinstance(value, list):
        return tuple(float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")  # a config class: a dataclass


@dataclass(frozen=True)
class Overrides(Generic[C]):
    """The fields of config class `cls` that someone set (the command line, a file, a preset), applied
    to a base config with `apply`; the fields not given keep the base's values."""

    cls: type[C]
    values: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = fields_of(self.cls)
        for name in self.values:
            if name not in known:
                raise ConfigError(f"{self.cls.__name__} has no field {name!r}{did_you_mean(name, known)}")
        object.__setattr__(self, "values", {k: coerce(self.cls, k, v) for k, v in self.values.items()
                                            if v is not None})

    def __or__(self, other: "Overrides[C]") -> "Overrides[C]":
        """These overrides, then `other`'s on top."""
        return Overrides(self.cls, {**self.values, **other.values})

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def without(self, *names: str) -> "Overrides[C]":
        return Overrides(self.cls, {k: v for k, v in self.values.items() if k not in names})

    def only(self, *names: str) -> "Overrides[C]":
        return Overrides(self.cls, {k: v for k, v in self.values.items() if k in names})

    def apply(self, base: Optional[C] = None) -> C:
        """`base` (default: the class's defaults) with these fields set, validated. An option set to
        another value than its default without the option it `requires` (or with one it `excludes`) is an
        error: it would silently do nothing."""
        config = dataclasses.replace(base, **self.values) if base is not None else self.cls(**self.values)
        for name, value in self.values.items():
            f = fields_of(self.cls)[name]
            spec = spec_of(f)
            if value == f.default:
                continue
            given = given_flag(self.cls, name, value)
            valued = given + ("" if isinstance(value, bool) else f" {plain(value)}")  # --lenpen-type power
            needed, excluded = spec.requires, spec.excludes
            if needed and getattr(config, needed) in OFF:
                flag = flag_of(self.cls, needed)
                if needed in self.values:  # given, as a value that turns it off (0, an empty string)
                    raise ConfigError(f"{valued} does nothing with {flag} {getattr(config, needed)}; drop {given} "
                                      f"or change {flag}")
                raise ConfigError(f"{given} only applies with {flag}; add {flag} or drop {given}")
            if excluded and getattr(config, excluded):
                raise ConfigError(f"{valued} does nothing with {flag_of(self.cls, excluded)}; drop one of them")
        return config.validate()  # type: ignore[attr-defined]


def overrides(cls: type[C], values: Union["Overrides[C]", Mapping[str, Any], None] = None) -> "Overrides[C]":
    """`values` as Overrides of `cls` (library callers may pass a plain mapping; None values are not given)."""
    if isinstance(values, Overrides):
        if values.cls is not cls:
            raise TypeError(f"overrides of {values.cls.__name__} given where {cls.__name__} is expected")
        return values
    return Overrides(cls, dict(values or {}))


def did_you_mean(name: str, known: Sequence[str] | Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


# -- the configs -----------------------------------------------------------------------------------


@dataclass
class ModelConfig:
    """Encoder-decoder Transformer with one shared (tied) embedding table."""

    vocab_size: int = option(37000, "Vocabulary size (set from the data's BPE model).", low=1, high=INT_MAX,
                             cli=False)
    d_model: int = option(512, "Model width: embeddings and every layer's input and output.", low=1, high=INT_MAX)
    n_heads: int = option(8, "Attention heads (must divide --d-model).", flag="--heads", low=1, high=INT_MAX)
    encoder_layers: int = option(6, "Encoder layers.", low=1, high=INT_MAX)
    decoder_layers: int = option(6, "Decoder layers.", low=1, high=INT_MAX)
    d_ff: int = option(2048, "Inner width of the feed-forward sublayers.", low=1, high=INT_MAX)
    dropout: float = option(0.1, "Dropout on sublayer outputs and on embeddings + positions.", low=0.0, high=1.0,
                            high_open=True)
    attention_dropout: float = option(0.1, "Dropout on attention weights.", low=0.0, high=1.0, high_open=True)
    activation_dropout: float = option(0.1, "Dropout after the feed-forward activation.", low=0.0, high=1.0,
                                       high_open=True)
    max_positions: int = option(1024, "Longest sequence (tokens) the model takes.", low=1, high=INT_MAX)
    positions: Literal["sinusoidal", "sinusoidal-halves", "learned"] = option(
        "sinusoidal", "Position encoding: sinusoidal (sines and cosines interleaved, as in the paper), "
        "sinusoidal-halves (the sines, then the cosines: Marian, fairseq) or learned.")
    norm: Literal["pre", "post"] = option("pre", "LayerNorm before each sublayer (pre) or after the residual "
                                                 "(post, the paper's original placement).")
    activation: Literal["relu", "gelu", "swish"] = option(
        "relu", "Feed-forward activation: relu (the paper's), gelu (erf) or swish (x * sigmoid(x), also called "
        "SiLU: OPUS-MT's).")
    scale_embeddings: bool = option(True, "Scale token embeddings by sqrt(d_model) before adding positions.",
                                    flag="--scale-embeddings/--no-scale-embeddings")
    output_bias: bool = option(False, "A fixed (untrained) bias on the output logits: an imported model's "
                               "(Marian's final_logits_bias).", cli=False)

    def validate(self) -> "ModelConfig":
        check_fields(self)
        if self.d_model % self.n_heads:
            raise ConfigError(f"{flag_of(ModelConfig, 'd_model')} {self.d_model} is not divisible by "
                              f"{flag_of(ModelConfig, 'n_heads')} {self.n_heads}; pick values that divide")
        return self


@dataclass
class TrainConfig:
    """The optimisation recipe of the paper: Adam, warmup + inverse square root, label smoothing."""

    max_tokens: int = option(4096, "Target tokens per batch (per process).", low=1, high=INT_MAX)
    update_tokens: int = option(25000, "Target tokens per update, summed over accumulation steps and processes.",
                                low=1, high=INT_MAX)
    # The caps keep the learning rate and Adam's epsilon within float32 (1e308 overflowed inside Adam's step).
    lr_factor: float = option(1.0, "lr = factor * d_model^-0.5 * min(update^-0.5, update * warmup^-1.5).", low=0.0,
                              low_open=True, high=1000.0)
    warmup: int = option(4000, "Updates of linear learning-rate warmup.", low=1, high=INT_MAX)
    lr_tail: Literal["none", "linear", "cosine"] = option(
        "none", "none: the paper's schedule to the end; linear or cosine: over the last --lr-tail-share of the run "
        "(by --max-updates or --max-time, whichever ends it first) the learning rate decays to 0.")
    lr_tail_share: float = option(0.2, "With --lr-tail: the share of the run over which the learning rate decays.",
                                  low=0.0, high=1.0, low_open=True, requires="lr_tail")
    adam_betas: tuple[float, float] = option((0.9, 0.98), "Adam's beta1 beta2.", low=0.0, high=1.0, high_open=True)
    adam_eps: float = option(1e-9, "Adam's epsilon.", low=0.0, high=1.0)
    label_smoothing: float = option(0.1, "Label smoothing of the training loss.", low=0.0, high=1.0, high_open=True)
    bpe_dropout: float = option(0.0, "Subword regularisation: each epoch a fresh sampled segmentation of the "
                                "training text (0: the stored one). BPE models: the probability of dropping a "
                                "merge (BPE-dropout, e.g. 0.1); SentencePiece unigram models: the sampling alpha "
                                "(smaller is noisier, e.g. 0.5).", low=0.0, high=1.0, high_open=True)
    clip_norm: float = option(0.0, "Clip the gradient norm to this (0: no clipping).", low=0.0)
    max_updates: int = option(100000, "Stop after this many updates.", low=1, high=INT_MAX)
    max_epochs: int = option(0, "Stop after this many epochs (0: no limit).", low=0, high=INT_MAX)
    max_time: float = option(0.0, "Stop after this many seconds of the run, time before a resume included (0: no "
                             "limit).", low=0.0)
    save_interval: int = option(1000, "Updates between checkpoints.", low=1, high=INT_MAX)
    keep_last: int = option(10, "Step checkpoints kept (for averaging).", low=1, high=INT_MAX)
    valid_interval: int = option(1000, "Updates between validations.", low=1, high=INT_MAX)
    log_interval: int = option(10, "Updates between progress reports.", low=1, high=INT_MAX)
    seed: int = option(1, "Random seed (weights, batches, dropout).", low=0, high=INT_MAX)
    precision: Precision = option(Precision.AUTO, "auto (CUDA: bf16, or fp16 with loss scaling; CPU: bf16 where "
                                  "native and faster for the model, timed once, else fp32), fp32, bf16 or fp16.",
                                  choices=TRAINING_PRECISIONS)
    max_bad_updates: int = option(5, "Stop after this many updates in a row with a NaN/inf loss (each is skipped).",
                                  low=1, high=INT_MAX)
    valid_bleu_sentences: int = option(500, "Validation sentences translated for BLEU (0: loss only).", low=0,
                                       high=INT_MAX)
    valid_beam: int = option(1, "Beam of the validation translations (1: greedy).", low=1, high=MAX_BEAM,
                             requires="valid_bleu_sentences")
    patience: int = option(0, "Stop after N validations without a BLEU improvement (0: never).", low=0, high=INT_MAX)
    init_from: str = option("", "Fine-tune: start a new run from this checkpoint's weights and architecture (its "
                            "BPE must be the data's: nmt prepare --bpe CKPT).")
    reset_optimizer: bool = option(True, "With --init-from: a fresh Adam (default), or keep the checkpoint's moments.",
                                   flag="--reset-optimizer/--no-reset-optimizer", requires="init_from")
    reset_lr_scheduler: bool = option(True, "With --init-from: warm up from update 0 (default), or continue its "
                                      "schedule.", flag="--reset-lr-scheduler/--no-reset-lr-scheduler",
                                      requires="init_from")

    def validate(self) -> "TrainConfig":
        check_fields(self)
        if self.patience and not self.valid_bleu_sentences:
            raise ConfigError(f"{flag_of(TrainConfig, 'patience')} counts validations without a BLEU improvement; "
                              f"it needs {flag_of(TrainConfig, 'valid_bleu_sentences')} above 0")
        return self


@dataclass
class SearchConfig:
    """How a translation is searched for: beam or greedy search, or sampling."""

    beam: int = option(4, "Beam size; 1 is greedy search.", low=1, high=MAX_BEAM, excludes="sampling")
    lenpen: float = option(0.6, "Length penalty alpha; 0: no length normalisation.", low=-MAX_LENPEN,
                           high=MAX_LENPEN)
    lenpen_type: Literal["gnmt", "power"] = option("gnmt", "gnmt: ((5+len)/6)^alpha; power: len^alpha (fairseq, "
                                                           "Marian, CTranslate2).", requires="lenpen")
    max_len_a: float = option(1.5, "Output limit a*|x|+b: the a (BPE tokens).", low=0.0, high=MAX_LEN_A)
    max_len_b: int = option(10, "Output limit a*|x|+b: the b.", low=0, high=INT_MAX)
    nbest: int = option(1, "Print N hypotheses per line: LINE\\tRANK\\tSCORE\\tLOGPROB\\tTEXT.", low=1, high=MAX_BEAM)
    sampling: bool = option(False, "Draw each token at random instead of searching (back-translation); --nbest N "
                            "draws N translations per line.", flag="--sampling/--no-sampling")
    topk: int = option(0, "Sampling: among the k likeliest tokens only (0: all).", low=0, high=INT_MAX,
                       requires="sampling")
    topp: float = option(1.0, "Sampling: among the likeliest tokens whose probability reaches p (nucleus; 1: all).",
                         low=0.0, high=1.0, low_open=True, requires="sampling")
    temperature: float = option(1.0, "Sampling: < 1 sharper, > 1 flatter.", low=0.0, low_open=True,
                                requires="sampling")
    seed: int = option(1, "Sampling: the same seed draws the same translations (seeds each line's draws with its "
                       "line number).", low=0, high=INT_MAX, requires="sampling")

    def validate(self) -> "SearchConfig":
        check_fields(self)
        if not self.sampling and self.nbest > self.beam:
            raise ConfigError(f"{flag_of(SearchConfig, 'nbest')} {self.nbest} must be between 1 and "
                              f"{flag_of(SearchConfig, 'beam')} {self.beam}")
        return self


@dataclass
class InferenceConfig:
    """Where and how fast a model translates: device, threads, number format, batch sizes."""

    engine: Literal["auto", "torch", "ctranslate2"] = option(
        "auto", "torch; ctranslate2 (pip install 'nmt-toolkit[ct2]'; the model is converted once, into the user's "
        "cache); "
        "auto: ctranslate2 where installed and able to do what is asked, else torch (stderr says which and why).")
    gpus: int = option(0, "GPUs to use (0: CPU; translation runs on one).", low=0, high=INT_MAX)
    threads: int = option(0, "CPU threads of the engine (0: torch's default).", low=0, high=MAX_THREADS)
    inter_threads: int = option(1, "Batches translated at once, each by its own copy of the model with --threads "
                                "threads (CTranslate2's inter_threads: throughput on many cores; the torch engine "
                                "translates one batch at a time).", low=1, high=MAX_THREADS)
    precision: Precision = option(Precision.FP32, "fp32; fp16 (GPU); bf16 (GPU, or a CPU with native bf16); int8 "
                                  "(CPU, same as --int8); auto: fp32 or bf16, whichever runs the model faster here "
                                  "(timed once, kept in the user's cache).")
    int8: bool = option(False, "CPU: dynamic int8 quantisation of the linear layers (same as --precision int8).",
                        flag="--int8")
    # serve's --max-batch-tokens/--max-batch-sentences: the same batches, named as a server's
    max_tokens: int = option(4096, "Source tokens per translation batch.", low=1, high=INT_MAX,
                             aliases=("--max-batch-tokens",))
    batch_size: int = option(128, "Sentences per translation batch at most.", low=1, high=INT_MAX,
                             aliases=("--max-batch-sentences",))

    def validate(self) -> "InferenceConfig":
        check_fields(self)
        if self.int8 and self.precision not in (Precision.FP32, Precision.INT8):
            raise ConfigError(f"--int8 contradicts --precision {self.precision}; give one of them")
        if self.engine == "torch" and self.inter_threads > 1:
            raise ConfigError(f"--inter-threads {self.inter_threads}: the torch engine translates one batch at a "
                              "time; use --engine ctranslate2, or leave --inter-threads out")
        return self

    @property
    def requested_precision(self) -> Precision:
        """--precision, with --int8 as its shorthand."""
        return Precision.INT8 if self.int8 else self.precision


@dataclass(frozen=True)
class FilterConfig:
    """Training-pair filters of `nmt prepare`; lengths count BPE tokens without specials."""

    min_len: int = option(3, "Drop training pairs with a side shorter than this (BPE tokens).", low=1, high=INT_MAX)
    max_len: int = option(150, "Drop training pairs with a side longer than this.", low=1, high=INT_MAX)
    max_ratio: float = option(2.0, "Drop training pairs whose length ratio exceeds this.", low=1.0)
    dedup: bool = option(True, "Drop repeated training pairs.", flag="--dedup/--no-dedup")

    def validate(self) -> "FilterConfig":
        check_fields(self)  # NaN max_ratio would silently disable the filter
        if self.max_len < self.min_len:
            max_len, min_len = flag_of(FilterConfig, "max_len"), flag_of(FilterConfig, "min_len")
            raise ConfigError(f"{max_len} {self.max_len} is below {min_len} {self.min_len}; raise {max_len}")
        return self


# The widest common encoding of one character in a request body: JSON's \uXXXX escape (what `json.dumps`
# writes for every non-ASCII character by default), as wide as a percent-encoded 2-byte UTF-8 character.
BYTES_PER_CHAR = 6
BODY_OVERHEAD = 64 * 1024  # field names, quotes, commas, a multipart boundary per field


@dataclass
class ServeConfig:
    """Batching, limits, timeouts, keys and logs of `nmt serve` (its model batches are InferenceConfig's)."""

    max_batch_sentences: int = option(128, "Lines merged into one chunk: the engine's --batch-size.", low=1,
                                      high=INT_MAX, cli=False)
    max_wait_ms: Optional[float] = option(
        None, "How long a request waits at most for others to join its batch (default: 0 with the ctranslate2 "
        "engine, whose time per line hardly grows as batches shrink: a batch goes as soon as the engine is free; "
        "50 with torch).", low=0.0, high=60_000.0)
    quiet_ms: float = option(0.0, "A batch goes once no request has come for this long (0: a request that finds "
                             "the engine idle goes at once).", low=0.0, high=60_000.0)
    max_queue: int = option(4096, "Lines waiting at most; then 503 + Retry-After (413 for a request that can "
                            "never fit).", low=1, high=INT_MAX)
    max_lines: int = option(256, "Lines per request at most (413 beyond).", low=1, high=INT_MAX)
    max_chars: int = option(5000, "Characters per line at most (413 beyond).", low=1, high=INT_MAX)
    timeout: float = option(60.0, "Seconds a request may take to send its body (408 after) and wait for its "
                            "translations (504 after).", low=0.0, low_open=True)
    max_body_bytes: int = option(0, "Bytes of a request body at most (413 beyond); 0: room for --max-lines x "
                                 "--max-chars.", low=0, high=2**62)
    drain_timeout: float = option(10.0, "On SIGTERM, seconds to finish the requests in flight before cutting "
                                  "their connections.", low=0.0, high=3600.0)
    api_keys: Optional[Path] = option(None, "File of accepted API keys, one per line: translating then needs "
                                      "api_key (403 without).")
    access_log: Optional[Path] = option(None, "Append one line per request to this file (-: stderr).")

    def validate(self) -> "ServeConfig":
        check_fields(self)
        return self

    def for_engine(self, engine: str) -> "ServeConfig":
        """With --max-wait-ms, where it was left out, the default of `engine` (torch or ctranslate2)."""
        if self.max_wait_ms is not None:
            return self
        return dataclasses.replace(self, max_wait_ms=0.0 if engine == "ctranslate2" else 50.0)

    @property
    def body_limit(self) -> int:
        """Bytes a request body may hold: --max-body-bytes, or room for --max-lines lines of --max-chars
        characters each in the widest common encoding."""
        return self.max_body_bytes or self.max_lines * self.max_chars * BYTES_PER_CHAR + BODY_OVERHEAD


# -- presets ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    model: Overrides[ModelConfig]
    train: Overrides[TrainConfig]
    description: str = ""

    @classmethod
    def of(cls, description: str, model: Mapping[str, Any], train: Mapping[str, Any]) -> "Preset":
        return cls(Overrides(ModelConfig, model), Overrides(TrainConfig, train), description)


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
        # Chosen on Multi30k en-de validation BLEU under a 90-minute, one-core-per-direction budget;
        # the experiments are in docs/results-multi30k.md.
        "Multi30k on a 2-core CPU (recipes/multi30k.sh): 4+4 layers, d_model 128",
        model=dict(d_model=128, n_heads=4, encoder_layers=4, decoder_layers=4, d_ff=512, max_positions=256,
                   dropout=0.1, attention_dropout=0.0, activation_dropout=0.0),
        # The run ends with its time budget (5,100 s of training: with download, BPE, prepare, averaging and
        # the test, `make multi30k` stays within 90 minutes), the learning rate decaying to 0 over its last
        # 20% (cosine); BPE-dropout resegments the training text every epoch (0.05: 1.45 more valid BLEU, both
        # directions summed, than 0.1). lr_factor 1.36 (peak 6e-3): with the whole budget spent, twice the rate
        # of the 2,700-update recipe gave 0.5-0.8 more valid BLEU.
        train=dict(max_tokens=4096, update_tokens=2000, lr_factor=1.36, warmup=400, max_time=5100.0,
                   lr_tail="cosine", bpe_dropout=0.05, save_interval=100, keep_last=10, valid_interval=500,
                   valid_bleu_sentences=1014),
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
        raise ConfigError(f"--preset {name!r} is unknown; choose one of {', '.join(PRESETS)}"
                          f"{did_you_mean(name, PRESETS)}")
    return PRESETS[name]


def from_preset(name: str, model: Union[Overrides[ModelConfig], Mapping[str, Any], None] = None,
                train: Union[Overrides[TrainConfig], Mapping[str, Any], None] = None
                ) -> tuple[ModelConfig, TrainConfig]:
    """Configs of a preset with the options the user set on top (None values count as not given)."""
    chosen = preset(name)
    return ((chosen.model | overrides(ModelConfig, model)).apply(),
            (chosen.train | overrides(TrainConfig, train)).apply())


# -- configs as data -------------------------------------------------------------------------------


def to_dict(config: Any) -> dict[str, Any]:
    """A config as plain Python data (safe for `torch.load(weights_only=True)` and TOML)."""
    return {name: plain(getattr(config, name)) for name in fields_of(type(config))}


def plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def from_dict(cls: type[C], data: Mapping[str, Any], where: str = "") -> C:
    """Rebuild a config from `to_dict` output (a checkpoint's, say), checked field by field: unknown
    keys (a newer nmt) and values of the wrong type (a damaged file) are a ConfigError naming `where`
    and the field."""
    prefix = f"{where}: " if where else ""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix}{cls.__name__} is a {type(data).__name__}, not a table of fields; "
                          "the file is damaged")
    known = fields_of(cls)
    unknown = [k for k in data if k not in known]
    if unknown:
        raise ConfigError(f"{prefix}unknown {cls.__name__} fields {sorted(unknown)}: was this written by a newer nmt?")
    with names_as_fields():
        try:
            config = cls(**{k: coerce(cls, k, v) for k, v in data.items()})
            return config.validate()  # type: ignore[attr-defined]
        except ConfigError as e:
            raise ConfigError(f"{prefix}{cls.__name__}: {e}") from None


# -- configuration files ---------------------------------------------------------------------------

SECTIONS: dict[str, type] = {"model": ModelConfig, "train": TrainConfig}


@dataclass(frozen=True)
class ConfigFile:
    """What a `--config` TOML file sets: a preset and some model and training fields."""

    preset: Optional[str]
    model: Overrides[ModelConfig]
    train: Overrides[TrainConfig]

    EMPTY: ClassVar["ConfigFile"]


ConfigFile.EMPTY = ConfigFile(None, Overrides(ModelConfig), Overrides(TrainConfig))


def to_toml(model: ModelConfig, train: TrainConfig, preset: Optional[str] = None) -> str:
    """A run's configuration as TOML: `[model]` and `[train]` with every field and its help as a comment
    (what `--config` reads)."""
    lines = ["# nmt run configuration: `nmt train --config FILE` reads it; command-line options override it", ""]
    if preset:
        lines += [f"preset = {toml_value(preset)}", ""]
    for section, config in (("model", model), ("train", train)):
        lines.append(f"[{section}]")
        for f in dataclasses.fields(config):
            lines += [f"# {spec_of(f).help}", f"{f.name} = {toml_value(plain(getattr(config, f.name)))}"]
        lines.append("")
    return "\n".join(lines)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)  # round-trips exactly; inf/nan are rejected by validate() before they get here
    return str(value)


def read_config_file(path: Any) -> ConfigFile:
    """The preset and fields a TOML file (written by `to_toml` or by hand) sets; unknown sections or
    fields (with a "did you mean") and values of the wrong type are a ConfigError naming the file."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    try:
        text = read_small_text(path, f"--config {path}", "--config takes a TOML file such as a run's config.toml")
    except InputError as e:
        raise ConfigError(str(e)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    chosen = data.pop("preset", None)
    if chosen is not None and not isinstance(chosen, str):
        raise ConfigError(f"{path}: preset must be a string such as \"base\"")
    for section in data:
        if section not in SECTIONS:
            raise ConfigError(f"{path}: unknown section [{section}]{did_you_mean(section, SECTIONS)}; "
                              "use [model] and [train]")
    found = {}
    for section, cls in SECTIONS.items():
        values = data.get(section, {})
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: {section} must be a table, [{section}]")
        found[section] = {name: checked_value(path, section, cls, name, value) for name, value in values.items()}
    return ConfigFile(chosen, Overrides(ModelConfig, found["model"]), Overrides(TrainConfig, found["train"]))


def checked_value(path: Any, section: str, cls: type, name: str, value: Any) -> Any:
    """`value` of key `name` in `[section]` as the field's type, in its range; a ConfigError naming the
    file and the key otherwise."""
    known = fields_of(cls)
    if name not in known:
        raise ConfigError(f"{path}: [{section}] has no field {name!r}{did_you_mean(name, known)} "
                          f"(the fields are {', '.join(known)})")
    with names_as_fields():
        try:
            value = coerce(cls, name, value)
            check_field(cls, name, value)
        except ConfigError as e:
            raise ConfigError(f"{path}: [{section}] {e}; the default is "
                              f"{toml_value(plain(known[name].default))}") from None
    return value
