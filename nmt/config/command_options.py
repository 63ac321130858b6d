"""The commands' own options, declared once as config fields (as the config classes of
nmt.config.sections are): `nmt.cli.options` makes them typer options, and `Overrides.apply` checks them
(ranges, requires/excludes) before a command runs. One class per command; the config classes a command
shares with others (SearchConfig, InferenceConfig, ...) are offered next to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, TypeVar

from nmt.config.fields import INT_MAX, check_fields, option, threads_option

T = TypeVar("T", bound="CommandOptions")


class CommandOptions:
    """A command's options: checked against their declarations only (what they mean together is the
    library's to check)."""

    def validate(self: T) -> T:
        check_fields(self)
        return self


def tokenizer_threads() -> Any:
    return threads_option(0, "CPU threads of the tokenizer (0: all cores).")


def source_language() -> Any:
    """--src-lang of the commands that translate: a multilingual model's source, for its sentence rules."""
    return option(None, "Language of the input (a multilingual model of several sources: picks the sentence rules; "
                  "default: the model's source).")


def target_language() -> Any:
    """--tgt-lang of the commands that translate: which of a multilingual model's targets."""
    return option(None, "Language to translate into: one of a multilingual model's targets (default: the model's "
                  "only target).")


def model_paths() -> Any:
    """--model/-m of the commands that translate with a checkpoint (or an ensemble)."""
    return option(None, "Checkpoint (.pt) from train or average; repeat for an ensemble (models of one BPE "
                  "vocabulary).", aliases=("-m",), required=True)


@dataclass(frozen=True)
class ProgramOptions(CommandOptions):
    """`nmt`'s own options, before the command."""

    debug: bool = option(False, "Show tracebacks of errors.")
    version: bool = option(False, "Print the version and exit.", aliases=("-V",), eager=True)


@dataclass(frozen=True)
class BpeOptions(CommandOptions):
    """`nmt bpe` (its FILES argument aside)."""

    train: list[Path] = option(None, "Text files (plain, gzip, bzip2 or xz); list several after one --train.",
                               required=True)
    out: Path = option(None, "Where to write the BPE model.", required=True)
    vocab_size: int = option(37000, "Joint vocabulary size.")  # its range: nmt.text.corpus.check_train_args
    sample: Optional[int] = option(None, "Train on a seeded random sample of N lines.", example="`sample` N")
    seed: Optional[int] = option(None, "Seed of --sample (default 1).", requires="sample")
    threads: int = tokenizer_threads()
    kind: str = option("youtokentome", "youtokentome (BPE) or sentencepiece.")
    model_type: Optional[str] = option(None, "sentencepiece only: unigram (default) or bpe.")


@dataclass(frozen=True)
class PrepareOptions(CommandOptions):
    """`nmt prepare` (its filters are FilterConfig's)."""

    bpe_model: Path = option(None, "Model from `nmt bpe` (youtokentome or SentencePiece), or a checkpoint (.pt) "
                             "whose tokenizer to use (to fine-tune it on this data).", flag="--bpe", required=True)
    train: str = option(None, "Path prefix: PREFIX.SRC and PREFIX.TGT (or .gz, .bz2, .xz).", required=True)
    out: Path = option(None, "Folder for the binarized data.", required=True)
    src: Optional[str] = option(None, "Source language suffix.")
    tgt: Optional[str] = option(None, "Target language suffix.")
    pair: Optional[list[str]] = option(None, "A language pair SRC-TGT (suffixes of the files); repeat for a "
                                       "multilingual model (en-de en-fr: one-to-many; de-en fr-en: many-to-one), "
                                       "whose sources then begin with a target-language tag. Instead of --src/--tgt.")
    valid: Optional[str] = option(None, "Validation path prefix.")
    test: Optional[str] = option(None, "Test path prefix.")
    synthetic: Optional[list[str]] = option(None, "Path prefix of a synthetic corpus trained on beside --train: "
                                            "back- or forward-translations (nmt distill's OUT/train); repeat for "
                                            "several. One language pair.")
    tag_synthetic: bool = option(True, "Put the synthetic tag, an id of its own (never split by the subword model), "
                                 "first in each synthetic source (tagged back-translation, Caswell et al. 2019).",
                                 flag="--tag-synthetic/--no-tag-synthetic", requires="synthetic")
    upsample: int = option(1, "Take the --train corpus (the real pairs) this many times among the synthetic ones.",
                           low=1, high=1000, requires="synthetic")
    chunk_size: int = option(100_000, "Pairs encoded per chunk.")  # its range: nmt.data.dataset.prepare
    threads: int = tokenizer_threads()


@dataclass(frozen=True)
class TrainRunOptions(CommandOptions):
    """`nmt train`'s run: where, on what, from which configuration (the fields are ModelConfig's and
    TrainConfig's)."""

    data: Path = option(None, "Folder from `nmt prepare`.", required=True)
    out: Path = option(None, "Run folder: checkpoints and log; rerun to resume.", required=True)
    preset: Optional[str] = option(None, "tiny, small, multi30k, multi30k-student, student, base or big (default "
                                   "base; on resume: the run's).")
    gpus: int = option(0, "GPUs of this machine, one worker process each (0: CPU). Under torchrun: >0 puts each "
                       "process on GPU LOCAL_RANK.")
    nproc: int = option(1, "CPU worker processes (gloo), for CPU training and tests.")
    threads: int = threads_option(0, "CPU threads per process (0: torch's default; with --nproc N: cores / N).")
    layers: Optional[int] = option(None, "Encoder and decoder layers (--encoder-layers and --decoder-layers win "
                                   "over it).", panel="Model")
    config: Optional[Path] = option(None, "TOML file of [model] and [train] fields (and preset); the options given "
                                    "here override it. RUN/config.toml of a run is one.")
    print_config: bool = option(False, "Print the resolved configuration (TOML) and exit without training.")


@dataclass(frozen=True)
class AverageOptions(CommandOptions):
    """`nmt average` (its INPUTS argument aside)."""

    out: Path = option(None, "Averaged checkpoint to write.", required=True)
    last: Optional[int] = option(None, "Average the newest N step checkpoints of the run folder.")


@dataclass(frozen=True)
class TranslateOptions(CommandOptions):
    """`nmt translate`'s model and files (its search and engine are SearchConfig's and InferenceConfig's)."""

    model: list[Path] = model_paths()
    input: Optional[Path] = option(None, "Read this file instead of stdin.", aliases=("-i",))
    output: Optional[Path] = option(None, "Write this file instead of stdout; it appears, whole, when the last line "
                                    "is translated.", aliases=("-o",))
    attention: Optional[Path] = option(None, "Also write cross-attention heatmaps (PNG, one per line and layer, a "
                                       "panel per head) to this folder; needs matplotlib.")
    alignments: bool = option(False, "Also print word alignments from the last layer's cross-attention, Pharaoh "
                              "format: TEXT ||| 0-0 1-2 ... (n-best: an extra column).")
    format: Literal["text", "html"] = option(
        "text", "text: one translation per input line; html: the whole input is one HTML document or fragment, "
        "written back with its tags, comments and untranslatable parts (script, style, code, translate=\"no\") "
        "kept and its text translated.")
    scores: bool = option(False, "Also print each translation's score after a tab: the mean log-probability of "
                          "its tokens, from minus infinity to 0 (0: sure; exp(score) is their geometric-mean "
                          "probability), so that doubtful translations can be flagged.")
    json: bool = option(False, "Write one JSON object per input line instead (JSON lines): its text and score, "
                        "its n-best list, its alignment; nothing in the text (a tab, ' ||| ') can be misread.")
    glossary: Optional[Path] = option(None, "Terms the translation must use: a TSV file, source term<TAB>target "
                                      "term a line (# comments); the words aligned to each term found are replaced "
                                      "by its target (docs/commands/translate.md#glossaries).")
    src_lang: Optional[str] = source_language()
    tgt_lang: Optional[str] = target_language()


@dataclass(frozen=True)
class EvalOptions(CommandOptions):
    """`nmt eval`: the references, the systems to score (--hyp files, '-' for stdin, or --model's
    translations of --src), and the test."""

    ref: list[Path] = option(None, "Reference translations, one per line; repeat for several references per line.",
                             required=True)
    model: Optional[list[Path]] = option(None, "Checkpoint to translate --src with; repeat for an ensemble.",
                                         aliases=("-m",))
    src: Optional[Path] = option(None, "Source file to translate.")
    hyp: Optional[list[str]] = option(None, "Translations to score ('-': stdin, the default without --model); "
                                      "repeat to score several systems.")
    save_hyp: Optional[Path] = option(None, "Also write the translations here.")
    glossary: Optional[Path] = option(None, "A glossary (as translate's): --model's translations use its terms, and "
                                      "every system's term accuracy is scored (the terms of --src found in it).")
    as_json: bool = option(False, "Print the scores as JSON.", flag="--json")
    paired_bs: bool = option(False, "Paired bootstrap resampling (sacreBLEU's) of every system against the first "
                             "--hyp, the baseline: BLEU, chrF, TER with p-values.")
    paired_bs_n: Optional[int] = option(None, "Bootstrap resamples (default 1000).", low=1, high=INT_MAX,
                                        requires="paired_bs")
    src_lang: Optional[str] = source_language()
    tgt_lang: Optional[str] = target_language()


@dataclass(frozen=True)
class DistillOptions(CommandOptions):
    """`nmt distill`: the teacher, the corpus it translates, how a translation is chosen and which are kept (its
    search and engine are SearchConfig's and InferenceConfig's)."""

    model: list[Path] = model_paths()
    train: str = option(None, "Path prefix of the corpus: PREFIX.SRC is translated; PREFIX.TGT, the references, is "
                        "needed by --interpolate only (plain, gzip, bzip2 or xz).", required=True)
    src: str = option(None, "Source language suffix.", required=True)
    tgt: str = option(None, "Target language suffix (and, a multilingual teacher, the target translated into).",
                      required=True)
    out: Path = option(None, "Folder for OUT/train.SRC and OUT/train.TGT (the corpus `nmt prepare --train OUT/train` "
                       "reads), report.json and dropped.tsv; rerun to resume.", required=True)
    interpolate: Literal["none", "chrf", "bleu"] = option(
        "none", "chrf or bleu: of each line's --nbest hypotheses (default: the whole beam), keep the one closest to "
        "the reference by sentence chrF or BLEU (Kim & Rush's sequence-level interpolation); none: the teacher's "
        "best.")
    chunk_lines: int = option(2000, "Lines translated per chunk: the unit of resumption.", low=1, high=INT_MAX)
    max_ratio: float = option(3.0, "Drop a translation more than this many times longer or shorter (in words, plus "
                              "one) than its source (0: keep all).", low=0.0, high=1e6)
    max_repeats: int = option(3, "Drop a translation in which an n-gram of 1 to 4 words comes more than this many "
                              "times in a row: the teacher looping (0: keep all).", low=0, high=INT_MAX)
    keep_copies: bool = option(False, "Keep translations identical to their source (by default dropped: a teacher "
                               "that copies has not translated).")
    lid: float = option(0.0, "Drop a source line that the language detector (fastText's lid.176) gives less than this "
                        "probability, in percent, of being in --src: monolingual text's noise (0: keep all).", low=0.0,
                        high=100.0)
    glossary: Optional[Path] = option(None, "Terms the teacher's translations must use (a TSV file as translate's): "
                                      "the words aligned to each term found are replaced by its target, for a "
                                      "terminology-aware student; one teacher, not with --interpolate.")


@dataclass(frozen=True)
class DemoOptions(CommandOptions):
    """`nmt demo`."""

    out: Path = option(None, "Folder for the whole run (data, checkpoints, averaged model).", required=True)
    max_updates: Optional[int] = option(None, "Training updates (default: the demo's).", low=1, high=INT_MAX)
    threads: int = threads_option(1, "CPU threads for torch; the tiny model is fastest on one.")


@dataclass(frozen=True)
class DownloadOptions(CommandOptions):
    """`nmt download` (its NAME argument aside)."""

    out: Optional[Path] = option(None, "Output folder.")
    pair: Optional[str] = option(None, "Language pair, source first (wmt14 and europarl: en-de, de-en, en-fr, fr-en; "
                                 "multi30k: any two of en, de, fr, cs; see --list); default: the family's first.")
    mirror: Optional[list[str]] = option(None, "Base URL or local folder that replaces the dataset's source; repeat "
                                         "it to look in several, in order, for each file.")
    extra_tests: bool = option(False, "Also fetch the dataset's extra test sets.")
    list_: bool = option(False, "List the known datasets.", flag="--list")
    # its range is checked by the download (--list and --verify take none)
    timeout: float = option(30.0, "Seconds to wait for the server's next bytes (connect: 10 at most); a transfer "
                            "that brings under 1 KiB in this time has stalled and is resumed.")
    verify: bool = option(False, "Check the files in --out against MANIFEST.json's sizes and sha256, download "
                          "nothing; exit 1 if any differs.")


@dataclass(frozen=True)
class ListenOptions(CommandOptions):
    """`nmt serve`'s models, their glossaries and its address (its batching and limits are ServeConfig's)."""

    model: list[Path] = model_paths()
    name: Optional[list[str]] = option(None, "A name for each -m checkpoint, in order: what /health, the answers' "
                                       "model and the log call it (default: its folder and file, such as "
                                       "en-de/averaged.pt).")
    glossary: Optional[list[str]] = option(
        None, "Terms a direction's translations must use: SRC-TGT=FILE (a bare FILE: the only direction served), a "
        "TSV file as translate's (source term<TAB>target term a line); repeat it for other directions. A request's "
        "own glossary goes over it (docs/commands/serve.md#glossaries).")
    host: str = option("127.0.0.1", "Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every "
                       "interface, e.g. behind a reverse proxy).")
    port: int = option(8080, "TCP port.", low=0, high=65535)


@dataclass(frozen=True)
class ExportOptions(CommandOptions):
    """`nmt export` (its MODEL and OUT_DIR arguments aside)."""

    format: str = option("ctranslate2", "Target engine: ctranslate2.")
    quantization: Optional[str] = option(None, "Store weights as int8, int8_float16, int16, float16, bfloat16 "
                                         "(default: float32; CTranslate2 can also quantise at load time).")
    force: bool = option(False, "Replace OUT_DIR if it exists.")


@dataclass(frozen=True)
class ImportMarianOptions(CommandOptions):
    """`nmt import marian` (its FOLDER argument aside)."""

    out: Path = option(None, "Checkpoint (.pt) to write.", required=True)
    src: Optional[str] = option(None, "Source language code, e.g. en, lower-cased (default: the folder's "
                                "tokenizer_config.json, else its name, opus-mt-SRC-TGT).")
    tgt: Optional[str] = option(None, "Target language code (as --src); not for a multilingual model, whose "
                                "targets are its >>xxx<< tokens (pick one when translating: --tgt-lang).")


@dataclass(frozen=True)
class ShortlistOptions(CommandOptions):
    """`nmt shortlist`: a vocabulary shortlist learnt from a model's prepared data, attached to a copy of the model."""

    model: Path = option(None, "Checkpoint (.pt) to attach the shortlist to.", required=True)
    data: Path = option(None, "Folder from `nmt prepare` with the model's tokenizer: its train split is learnt from, "
                        "its valid split measures the coverage.", required=True)
    out: Path = option(None, "Checkpoint (.pt) to write: the model with its shortlist.", required=True)
    top: int = option(50, "Target tokens allowed per source token (the likeliest by p(target | source)).", low=1,
                      high=INT_MAX)
    frequent: int = option(100, "Most frequent target tokens, always allowed (the special tokens besides).", low=0,
                           high=INT_MAX)
