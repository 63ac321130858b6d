"""Translation of many lines: streaming chunks, length-sorted batches, order restored, one output per input,
shared by every engine (`BatchTranslator`); the torch engine (`Translator`)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Optional, Protocol, TypeVar

import torch

from nmt.compute.device import precision_warning, resolve_precision, select_device
from nmt.compute.precision import prepare_model
from nmt.compute.timing import translation_timing
from nmt.config import INT_MAX, InferenceConfig, Overrides, Precision, SearchConfig, check_range, overrides
from nmt.core.errors import CheckpointError, ConfigError, ref
from nmt.core.files import BOM, byte_blocks, read_lines
from nmt.core.identity import DataIdentity
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.core.vocab import EOS, PAD
from nmt.inference.ensemble import Ensemble
from nmt.inference.heatmaps import AttentionMaps, alignments, attention_maps
from nmt.inference.search import Decoder, Hypothesis, Restricted, search
from nmt.model import checkpoint
from nmt.text.tags import with_tags
from nmt.text.tokenizer import Tokenizer, load_tokenizer


@dataclass
class Translation:
    text: str
    hypotheses: list[tuple[str, Hypothesis]]  # (text, hypothesis), best first; empty for an empty input
    source: str = ""  # the input line


class BatchTranslator:
    """What every engine shares (see `nmt.inference.engines.Engine`): encoding, length-sorted batches, the order of the
    lines, one Translation per line (an empty line gives `nbest` empty hypotheses), streaming over chunks.

    An engine sets the attributes below and implements `search_batch`, the search of one batch; the
    torch engine is `Translator`, the CTranslate2 one `nmt.inference.ct2_engine.CTranslate2Translator`.
    """

    name = "engine"  # torch, ctranslate2: what the CLI says it translates with
    search_cfg: SearchConfig
    tokenizer: Tokenizer
    languages: tuple[str, str]  # (source, target) language codes: the direction chosen (`with_direction`)
    data: DataIdentity  # the model's languages (a multilingual model: its directions and target tags)
    tag: Optional[int] = None  # the id put first in every source: the target's tag (`with_direction`)
    max_positions: int  # the model's longest sequence: sources are cut to fit, outputs end before it
    max_tokens: int  # padded source tokens per batch at most
    max_sentences: int  # sentences per batch at most
    progress: ProgressFn  # warnings (a line cut to fit the model)
    parallel: int = 1  # batches searched at once (an engine whose search_batch releases the GIL)

    def search_batch(self, encoded: list[list[int]], keys: list[int]) -> list[list[Hypothesis]]:
        """The `search_cfg.nbest` best hypotheses of each source of one batch (ids + EOS, non-empty), best
        first; `keys` are the lines' numbers (sampling seeds each line's draws with its number)."""
        raise NotImplementedError

    def check_search(self, search_cfg: SearchConfig) -> SearchConfig:
        """`search_cfg`, validated; an engine refuses here (a one-line ConfigError) what it cannot search."""
        return search_cfg.validate()

    def with_search(self, search_cfg: SearchConfig) -> BatchTranslator:
        """The same model and tokenizer with other search settings (a shallow copy: nothing is loaded)."""
        other = copy.copy(self)
        other.search_cfg = self.check_search(search_cfg)
        return other

    def with_shortlist_of(self, sources: Optional[list[list[int]]]) -> BatchTranslator:
        """The same engine with its output restricted to the vocabulary shortlist of `sources` (a whole batch of
        another engine's, of which it searches some), or to none (None); an engine without a shortlist: itself."""
        return self

    def with_direction(self, src: Optional[str], tgt: Optional[str], where: str = "the model") -> BatchTranslator:
        """The same model translating from `src` into `tgt` (None: the model's only one), a multilingual model's
        target tag put first in every source (a shallow copy: nothing is loaded); ConfigError naming the
        directions the model knows for any other."""
        other = copy.copy(self)
        other.languages = self.data.choose(src, tgt, where)
        other.tag = self.data.tag(other.languages[1])
        return other

    def encode(self, lines: list[str], first_line: int) -> list[list[int]]:
        """Subword ids + EOS per line, truncated (with a warning) to fit the model's positions; a multilingual
        model's target tag first."""
        if self.data.tags and self.tag is None:  # a bug of the caller: never translate without the tag asked for
            raise ConfigError(f"the model translates into {', '.join(self.data.targets)}: choose one with "
                              f"{ref('tgt_lang')}")
        tag = [] if self.tag is None else [self.tag]
        return [tag + ids if len(ids) > 1 else ids for ids in
                encode_lines(self.tokenizer, lines, self.max_positions - len(tag), first_line, self.progress)]

    def batches(self, encoded: list[list[int]]) -> Iterator[list[int]]:
        """Indices of non-empty lines in length-sorted batches of at most max_tokens (padded) source tokens."""
        return length_sorted_batches(encoded, self.max_tokens, self.max_sentences)

    def translate_chunk(self, lines: list[str], first_line: int = 0) -> list[Translation]:
        """Translations of `lines`, in their order."""
        encoded = self.encode(lines, first_line)
        # An empty line translates to an empty line: N empty hypotheses, so --nbest always gives N rows.
        empty = [("", Hypothesis([], 0.0, 0.0))] * self.search_cfg.nbest
        results = [Translation("", empty, line) for line in lines]
        done = first_line + sum(len(ids) <= 1 for ids in encoded)  # empty lines need no search
        batches = list(self.batches(encoded))
        for batch, hyps in zip(batches, self.search_batches(encoded, batches, first_line)):
            for i, sentence_hyps in zip(batch, hyps):
                # One line out per line in, whatever the vocabulary holds: no piece may break the line.
                decoded = self.tokenizer.decode([h.tokens for h in sentence_hyps])
                texts = [t.replace("\r", " ").replace("\n", " ") for t in decoded]
                results[i] = Translation(texts[0] if texts else "", list(zip(texts, sentence_hyps)), lines[i])
            done += len(batch)
            self.progress(Progress("translate", done=done, unit="sentences"))
        return results

    def search_batches(self, encoded: list[list[int]], batches: list[list[int]],
                       first_line: int) -> Iterator[list[list[Hypothesis]]]:
        """`search_batch` of each batch (indices into `encoded`), in order; `parallel` of them at a time."""
        jobs = [([encoded[i] for i in batch], [first_line + i for i in batch]) for batch in batches]
        if self.parallel <= 1 or len(jobs) <= 1:
            yield from (self.search_batch(*job) for job in jobs)
            return
        with ThreadPoolExecutor(min(self.parallel, len(jobs)), thread_name_prefix="nmt-batch") as pool:
            yield from pool.map(lambda job: self.search_batch(*job), jobs)

    def translate(self, chunks: Iterable[list[str]]) -> Iterator[Translation]:
        """Translate a stream of chunks of lines, yielding one Translation per line, in order."""
        return translate_chunks(self.translate_chunk, chunks)

    def alignment(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> list[tuple[int, int]]:
        """Source-target word pairs of `line` and a hypothesis, from the last layer's cross-attention
        (averaged over its heads)."""
        raise ConfigError(f"{ref('alignments')}: the {self.name} engine cannot give alignments; use {ref('engine')} "
                          "torch")

    def attention(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> AttentionMaps:
        """Cross-attention maps of `line` and one of its hypotheses, every layer and head."""
        raise ConfigError(f"{ref('attention')}: the {self.name} engine cannot give attention maps; use "
                          f"{ref('engine')} torch")


class Translator(BatchTranslator):
    """The torch engine: a checkpoint (or an ensemble of checkpoints) made ready to translate: model,
    tokenizer and search settings.

    `precision`: fp32; fp16 or bf16 on CUDA; int8 on the CPU (see `prepare_model`). Several `model_path`s
    decode as an `Ensemble`; they must share the tokenizer (and so the vocabulary) and the direction.
    """

    name = "torch"

    def __init__(self, model_path: Path | Sequence[Path],
                 search_cfg: SearchConfig | Overrides[SearchConfig] = Overrides(SearchConfig), device: str = "cpu",
                 max_tokens: int = 4096, max_sentences: int = 128, progress: ProgressFn = ignore,
                 precision: Precision | str = Precision.FP32, shortlist: bool = True):
        """`search_cfg`: the search, or the options given (Overrides; default: none) over the model's own
        defaults (an imported model brings some) and nmt's. `shortlist`: restrict each batch's output to the
        first checkpoint's vocabulary shortlist, where it has one (`nmt shortlist`)."""
        check_range(ref("max_tokens"), max_tokens, 1, INT_MAX)
        check_range(ref("batch_size"), max_sentences, 1, INT_MAX)
        self.device = torch.device(device)
        paths = [Path(model_path)] if isinstance(model_path, (str, Path)) else [Path(p) for p in model_path]
        ckpts = [checkpoint.load(p) for p in paths]
        check_models_fit(ckpts, paths)
        precision = resolve_precision(precision, self.device, timing=translation_timing(ckpts[0].model_config))
        self.search_cfg = (search_cfg.validate() if isinstance(search_cfg, SearchConfig)
                           else search_cfg.apply(ckpts[0].search.apply()))
        models = [prepare_model(c.build_model(p), precision, self.device) for c, p in zip(ckpts, paths)]
        self.model = models[0] if len(models) == 1 else Ensemble(models)
        self.precision = precision
        self.data = ckpts[0].data
        self.tokenizer = with_tags(load_tokenizer(ckpts[0].tokenizer, str(paths[0])), self.data)
        for model, path in zip(models, paths):
            if model.cfg.vocab_size != self.tokenizer.vocab_size:  # ids beyond one of them would be garbage
                raise CheckpointError(f"{path}: its model has {model.cfg.vocab_size} tokens but its tokenizer "
                                      f"{self.tokenizer.vocab_size}; the checkpoint is damaged")
        self.languages = ckpts[0].languages
        self.shortlist = ckpts[0].shortlist if shortlist else None
        self.shortlist_of: Optional[list[list[int]]] = None  # the sources of the shortlist (None: each batch's)
        self.max_positions = min(m.cfg.max_positions for m in models)
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.progress = progress

    @classmethod
    def open(cls, model_paths: Sequence[Path], search: Overrides[SearchConfig] | SearchConfig | None = None,
             inference: Overrides[InferenceConfig] | InferenceConfig | None = None,
             progress: ProgressFn = ignore) -> Translator:
        """The torch engine of `translate`, `eval` and `serve`: the options the user gave (`search`,
        `inference`) over the defaults; a precision that is slow here is warned about on `progress`."""
        search_cfg = search if isinstance(search, SearchConfig) else overrides(SearchConfig, search)
        options = inference if isinstance(inference, InferenceConfig) else overrides(InferenceConfig, inference).apply()
        device = select_device(options.gpus)
        warning = precision_warning(options.requested_precision, device)
        if warning:
            progress(Progress("translate", message=warning))
        return cls(model_paths, search_cfg, device=str(device), max_tokens=options.max_tokens,
                   max_sentences=options.batch_size, progress=progress, precision=options.requested_precision,
                   shortlist=options.shortlist)

    def search_batch(self, encoded: list[list[int]], keys: list[int]) -> list[list[Hypothesis]]:
        width = max(len(ids) for ids in encoded)
        src = torch.full((len(encoded), width), PAD, dtype=torch.long)
        for row, ids in enumerate(encoded):
            src[row, : len(ids)] = torch.tensor(ids)
        model: Decoder[Any] = self.model  # one model or an ensemble: each its own state type
        if self.shortlist is not None:  # the union over the batch, as CTranslate2 takes it
            sources = src if self.shortlist_of is None else torch.tensor([t for ids in self.shortlist_of for t in ids])
            model = Restricted(model, self.shortlist.candidates(sources))
        return search(model, src.to(self.device), self.search_cfg, self.max_positions, keys=keys)

    def with_shortlist_of(self, sources: Optional[list[list[int]]]) -> Translator:
        other = copy.copy(self)
        other.shortlist, other.shortlist_of = (None, None) if sources is None else (self.shortlist, sources)
        return other

    def attention(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> AttentionMaps:
        """Cross-attention maps of `line` and one of its hypotheses (of one model, not an ensemble)."""
        if isinstance(self.model, Ensemble):
            raise ConfigError(f"{ref('attention')} plots one model's attention; give one {ref('model')}")
        src_ids = self.encode([line], line_index)[0]
        return attention_maps(self.model, self.tokenizer, src_ids, hypothesis.tokens)

    def alignment(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> list[tuple[int, int]]:
        if not hypothesis.tokens:
            return []
        return alignments(self.attention(line, hypothesis, line_index))


def check_models_fit(ckpts: list[checkpoint.Checkpoint], paths: list[Path]) -> None:
    """An ensemble's models must share the tokenizer (the same ids must mean the same pieces) and the
    direction (the same source and target languages)."""
    for ckpt, path in zip(ckpts[1:], paths[1:]):
        if ckpt.tokenizer != ckpts[0].tokenizer:
            raise ConfigError(f"{path} and {paths[0]} use different tokenizers (vocabularies); an ensemble needs "
                              "models trained on data prepared with the same `nmt bpe` model")
        if (ckpt.languages, ckpt.data.pairs, ckpt.data.tags) != (ckpts[0].languages, ckpts[0].data.pairs,
                                                                 ckpts[0].data.tags):
            (src, tgt), (first_src, first_tgt) = ckpt.languages, ckpts[0].languages
            raise ConfigError(f"{path} translates {src} -> {tgt} but {paths[0]} {first_src} -> {first_tgt}; "
                              "an ensemble needs models of one direction")


def encode_lines(tokenizer: Tokenizer, lines: list[str], max_positions: int, first_line: int = 0,
                 progress: ProgressFn = ignore) -> list[list[int]]:
    """Subword ids + EOS per (source) line, truncated (with a warning) to fit `max_positions`."""
    limit = max_positions - 1
    encoded = tokenizer.encode(lines, side="source")
    for i, ids in enumerate(encoded):
        if len(ids) > limit:
            progress(Progress("translate", message=f"warning: line {first_line + i + 1} has {len(ids)} BPE tokens, "
                                                   f"more than the model's {limit}; translating its first {limit}"))
            encoded[i] = ids[:limit]
    return [ids + [EOS] for ids in encoded]


def length_sorted_batches(encoded: list[list[int]], max_tokens: int, max_sentences: int) -> Iterator[list[int]]:
    """Indices of non-empty lines in length-sorted batches of at most `max_tokens` padded source
    tokens and `max_sentences` lines (a line longer than `max_tokens` goes alone)."""
    order = sorted((i for i, ids in enumerate(encoded) if len(ids) > 1), key=lambda i: len(encoded[i]))
    batch: list[int] = []
    for i in order:
        width = len(encoded[i])  # sorted, so the newest line is the longest
        if batch and (width * (len(batch) + 1) > max_tokens or len(batch) >= max_sentences):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def read_chunks(stream: IO[bytes], max_lines: int = 512, progress: ProgressFn = ignore) -> Iterator[list[str]]:
    """Lines of a byte stream (plain or gzip text) in chunks of what has arrived so far (at most
    `max_lines` each), without their newline (LF or CRLF) and without a byte-order mark.

    Reads with os.read (`nmt.core.files.byte_blocks`), which returns as soon as some input is available, so
    a pipe that delivers a line at a time gets its translations a line at a time; a file is read in
    large blocks, and gzip is inflated block by block. Invalid UTF-8 is replaced (with a warning), so
    that every input line still gets its output line.
    """
    name = getattr(stream, "name", "the input")
    name = "stdin" if name in (0, "<stdin>") else str(name)
    pending = b""
    line_no = 0

    def decode(raw: list[bytes]) -> list[str]:
        nonlocal line_no
        out = []
        for b in raw:
            line_no += 1
            try:
                out.append(b.decode("utf-8"))
            except UnicodeDecodeError:
                progress(Progress("translate", message=f"warning: input line {line_no} is not valid UTF-8; "
                                                       "undecodable bytes replaced"))
                out.append(b.decode("utf-8", errors="replace"))
        if line_no == len(out) and out and out[0].startswith(BOM):  # the first chunk
            out[0] = out[0][len(BOM):]
        return [s.rstrip("\r") for s in out]

    for block in byte_blocks(stream.fileno(), name):
        pending += block
        *complete, pending = pending.split(b"\n")
        for start in range(0, len(complete), max_lines):
            yield decode(complete[start : start + max_lines])
    if pending:
        yield decode([pending])


T = TypeVar("T")


def translate_chunks(translate_chunk: Callable[[list[str], int], list[T]], chunks: Iterable[list[str]]) -> Iterator[T]:
    """`translate_chunk(chunk, first_line)` of each chunk of a stream, its results one by one, in order (an
    engine's `translate`, a Documents' own)."""
    seen = 0
    for chunk in chunks:
        check_chunk(chunk)
        yield from translate_chunk(chunk, seen)
        seen += len(chunk)


def check_chunk(chunk: Any) -> None:
    """TypeError unless `chunk` is a list of lines (a list of strings given where chunks are expected would be
    translated one character at a time)."""
    if not isinstance(chunk, list):
        raise TypeError(f"translate() takes chunks, each a list of lines (e.g. [lines]); got a {type(chunk).__name__} "
                        "as a chunk (for a list of texts: nmt.load(...).translate(texts))")


def format_nbest(line_index: int, translation: Translation) -> list[str]:
    """N-best lines: `LINE<TAB>RANK<TAB>SCORE<TAB>LOGPROB<TAB>TEXT` (line and rank 0-based)."""
    if not translation.hypotheses:
        return [f"{line_index}\t0\t0.0000\t0.0000\t"]
    return [f"{line_index}\t{rank}\t{h.score:.4f}\t{h.log_prob:.4f}\t{text}"
            for rank, (text, h) in enumerate(translation.hypotheses)]


class Translates(Protocol):
    def translate(self, chunks: Iterable[list[str]]) -> Iterator[Translation]: ...


def translate_file(translator: Translates, path: Optional[Path], lines: Optional[list[str]] = None) -> list[str]:
    """Best translations of a file's lines (or of `lines`), in order, by any engine."""
    if lines is None:
        assert path is not None, "a file or its lines"
        lines = list(read_lines(path))
    source = lines
    return [t.text for t in translator.translate([source])]
