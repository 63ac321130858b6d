"""The config classes, one per concern: the model architecture (`ModelConfig`), the training recipe
(`TrainConfig`), the search (`SearchConfig`), the inference device and number format (`InferenceConfig`),
the data filters (`FilterConfig`) and the server (`ServeConfig`). Each field is declared once, with
`option(...)`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from nmt.config.fields import (
    INT_MAX,
    MAX_BEAM,
    MAX_LEN_A,
    MAX_LENPEN,
    MAX_THREADS,
    TRAINING_PRECISIONS,
    Precision,
    check_fields,
    flag_of,
    option,
    shown,
    threads_option,
)
from nmt.core.errors import ConfigError

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
    tied_output: bool = option(True, "The output projection is the embedding table (tied, the paper's); untied: a "
                               "matrix of its own (an imported model's lm_head, OPUS-MT's tc-big models).", cli=False)

    def validate(self) -> ModelConfig:
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
    pair_temperature: float = option(5.0, "Data of several language pairs (nmt prepare --pair ...): each epoch "
                                     "draws pair i's sentences in proportion to n_i^(1/T) (Arivazhagan et al. 2019): "
                                     "1 as they are, larger is more balanced; an epoch keeps the corpus' size.",
                                     low=1.0, high=1000.0)
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

    def validate(self) -> TrainConfig:
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
    early_stopping: bool = option(True, "Beam search: a line's search ends once --beam hypotheses have ended "
                                  "(fairseq's rule); --no-early-stopping: once none of the running ones could beat "
                                  "the worst of them, as transformers' generate (early_stopping=False: imported "
                                  "models' default; EOS forced at the length limit then scores 0).",
                                  flag="--early-stopping/--no-early-stopping")

    def validate(self) -> SearchConfig:
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
    threads: int = threads_option(0, "CPU threads of the engine (0: torch's default).")
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
    shortlist: bool = option(True, "Restrict each batch's output to the model's vocabulary shortlist, where it has one "
                             "(`nmt shortlist`); --no-shortlist translates with the whole vocabulary.",
                             flag="--shortlist/--no-shortlist")

    def validate(self) -> InferenceConfig:
        check_fields(self)
        if self.int8 and self.precision not in (Precision.FP32, Precision.INT8):
            raise ConfigError(f"{flag_of(InferenceConfig, 'int8')} contradicts "
                              f"{flag_of(InferenceConfig, 'precision')} {self.precision}; give one of them")
        if self.engine == "torch" and self.inter_threads > 1:
            inter_threads = flag_of(InferenceConfig, "inter_threads")
            raise ConfigError(f"{inter_threads} {self.inter_threads}: the torch engine translates one batch at a "
                              f"time; use {flag_of(InferenceConfig, 'engine')} ctranslate2, or leave "
                              f"{inter_threads} out")
        return self

    @property
    def requested_precision(self) -> Precision:
        """--precision, with --int8 as its shorthand."""
        return Precision.INT8 if self.int8 else self.precision


@dataclass(frozen=True)
class TextConfig:
    """How the text given to translate is cut for a model trained on sentences, and how a glossary's terms get in."""

    split: bool = option(True, "Split each input line into sentences (the rules of the model's source language), "
                         "translate them as one batch and join them with the line's own spacing; --no-split gives "
                         "the model each line whole.", flag="--split/--no-split")
    glossary_method: Literal["auto", "place", "constrain"] = option(
        "auto", "How --glossary's terms get into a translation: place (the words aligned to a term replaced by its "
        "target), constrain (a beam search that must write each term; on CTranslate2 the torch engine searches the "
        "sentences with terms) or auto (place, then the constrained search for a sentence whose terms could not "
        "all be placed).")

    def validate(self) -> TextConfig:
        check_fields(self)
        return self


@dataclass(frozen=True)
class FilterConfig:
    """Training-pair filters of `nmt prepare`; lengths count BPE tokens without specials."""

    min_len: int = option(3, "Drop training pairs with a side shorter than this (BPE tokens).", low=1, high=INT_MAX)
    max_len: int = option(150, "Drop training pairs with a side longer than this.", low=1, high=INT_MAX)
    max_ratio: float = option(2.0, "Drop training pairs whose length ratio exceeds this.", low=1.0)
    dedup: bool = option(True, "Drop repeated training pairs.", flag="--dedup/--no-dedup")

    def validate(self) -> FilterConfig:
        check_fields(self)  # NaN max_ratio would silently disable the filter
        if self.max_len < self.min_len:
            max_len, min_len = flag_of(FilterConfig, "max_len"), flag_of(FilterConfig, "min_len")
            raise ConfigError(f"{max_len} {self.max_len} is below {min_len} {self.min_len}; raise {max_len}")
        return self


# The widest common encoding of one character in a request body: JSON's \uXXXX escape (what `json.dumps`
# writes for every non-ASCII character by default), as wide as a percent-encoded 2-byte UTF-8 character.
BYTES_PER_CHAR = 6
# A web origin as browsers send it: scheme://host[:port], the host a name, an IPv4 or a bracketed IPv6 address.
ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://(\[[0-9a-f:.]+\]|[a-z0-9_-]+(\.[a-z0-9_-]+)*)(:[0-9]{1,5})?", re.IGNORECASE)
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
    max_queue: int = option(8192, "Sentences waiting at most; then 503 + Retry-After (413 for a request that can "
                            "never fit).", low=1, high=INT_MAX)
    max_lines: int = option(256, "Lines per plain-text request at most (413 beyond).", low=1, high=INT_MAX)
    max_chars: int = option(5000, "Characters per line of a plain-text request at most (413 beyond).", low=1,
                            high=INT_MAX)
    max_sentences: int = option(4096, "Sentences per request at most, counted once its texts are cut into "
                                "sentences: what the engine will see (413 beyond).", low=1, high=INT_MAX)
    max_document_chars: int = option(500_000, "Characters of text to translate in one HTML request or file at most "
                                     "(tags, scripts and styles not counted; 413 beyond): these take the place of "
                                     "--max-lines and --max-chars, which mean nothing for a page.", low=1,
                                     high=INT_MAX)
    timeout: float = option(60.0, "Seconds a request may take to send its whole body (408 after: a client that "
                            "sends a byte now and then is cut too) and wait for its translations (504 after).",
                            low=0.0, low_open=True)
    max_connections: int = option(0, "Open connections at most: one beyond gets 503 and is closed at once, so that "
                                  "slow or idle clients cannot take every file descriptor (0: the process's limit, "
                                  "ulimit -n, less 64 for its own files, at most 4096).", low=0, high=INT_MAX)
    max_body_bytes: int = option(0, "Bytes of a request body at most (413 beyond); 0: room for --max-lines x "
                                 "--max-chars.", low=0, high=2**62)
    max_beam: int = option(16, "The widest search a request may ask for: beam and nbest (422 beyond), "
                           "LibreTranslate's alternatives + 1 (400 beyond); the server's own --beam where wider.",
                           low=1, high=MAX_BEAM)
    drain_timeout: float = option(10.0, "On SIGTERM, seconds to finish the requests in flight before cutting "
                                  "their connections.", low=0.0, high=3600.0)
    api_keys: Optional[Path] = option(None, "File of accepted API keys, one per line: translating then needs "
                                      "api_key (403 without).")
    access_log: Optional[Path] = option(None, "Append one line per request to this file (-: stderr).")
    cors_origins: Optional[list[str]] = option(
        None, "Origins whose web pages may call the server (CORS), such as https://example.org: comma-separated "
        "or repeated; default * (every origin, as LibreTranslate).")
    max_files: int = option(100, "Translated files (/translate_file) kept for download at most, each for "
                            "--files-ttl seconds: a full store refuses new files (503, Retry-After) rather than drop "
                            "one before its time.", low=1, high=INT_MAX)
    max_files_bytes: int = option(64 * 2**20, "Bytes of the translated files kept at most (a full store refuses "
                                  "new files, as with --max-files).", low=1, high=2**62)
    files_ttl: float = option(1800.0, "Seconds a translated file stays downloadable (LibreTranslate's 30 "
                              "minutes).", low=0.0, low_open=True, high=366 * 86400.0)

    def validate(self) -> ServeConfig:
        check_fields(self)
        self.origins  # noqa: B018 (a ConfigError for an origin that is none)
        # A wait bound at or past the timeout: the requests it holds (a lone one for quiet_ms, one under load
        # for max_wait_ms) are answered 504 before their batch goes.
        for name in ("quiet_ms", "max_wait_ms"):
            wait, field, timeout = getattr(self, name), flag_of(ServeConfig, name), flag_of(ServeConfig, "timeout")
            if wait is not None and wait >= self.timeout * 1000:
                raise ConfigError(f"{field} {wait:g} is not below {timeout} {self.timeout:g} s "
                                  f"({self.timeout * 1000:g} ms): requests would time out waiting for their batch; "
                                  f"lower {field} or raise {timeout}")
        return self

    def for_engine(self, engine: str) -> ServeConfig:
        """With --max-wait-ms, where it was left out, the default of `engine` (torch or ctranslate2)."""
        if self.max_wait_ms is not None:
            return self
        return dataclasses.replace(self, max_wait_ms=0.0 if engine == "ctranslate2" else 50.0)

    @property
    def origins(self) -> tuple[str, ...]:
        """--cors-origins, each value split at its commas: ("*",) without it, ("*",) where one of them is *.
        ConfigError for a value that is no origin (scheme://host[:port], nothing after)."""
        given = [o.strip() for value in (self.cors_origins or ["*"]) for o in value.split(",") if o.strip()]
        flag = flag_of(ServeConfig, "cors_origins")
        if not given:
            raise ConfigError(f"{flag}: no origin given; write such as https://example.org, or * for every origin")
        if "*" in given:
            return ("*",)
        for origin in given:
            if not ORIGIN.fullmatch(origin):
                raise ConfigError(f"{flag} {shown(origin)}: not an origin; write scheme://host[:port] with nothing "
                                  "after, such as https://example.org or http://localhost:8080 (or * for every origin)")
        return tuple(dict.fromkeys(o.lower() for o in given))

    @property
    def body_limit(self) -> int:
        """Bytes a request body may hold: --max-body-bytes, or room for --max-lines lines of --max-chars
        characters each in the widest common encoding."""
        return self.max_body_bytes or self.max_lines * self.max_chars * BYTES_PER_CHAR + BODY_OVERHEAD
