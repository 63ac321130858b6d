"""What every engine shares: the `Engine` protocol that `translate`, `eval`, `serve`, the Python API and
distillation use, and `BatchEngine`, its implementation up to the search of one batch: encoding, length-sorted
batches, the order of the lines, one `Translation` per line, streaming over chunks. The torch engine is
`nmt.engines.torch_engine.TorchEngine`, the CTranslate2 one `nmt.engines.ct2_engine.CTranslate2Engine`;
`nmt.engines.choice.open_engine` opens either."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional, Protocol, TypeVar

from nmt.config import SearchConfig
from nmt.core.errors import ConfigError, ref
from nmt.core.identity import DataIdentity
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.core.vocab import EOS
from nmt.engines.heatmaps import AttentionMaps
from nmt.engines.search import Hypothesis
from nmt.text.tokenizer import Tokenizer


@dataclass
class Translation:
    text: str
    hypotheses: list[tuple[str, Hypothesis]]  # (text, hypothesis), best first; empty for an empty input
    source: str = ""  # the input line


class Engine(Protocol):
    """A loaded model that translates chunks of lines (torch or CTranslate2): what the commands and the
    server use of it."""

    name: str  # torch, ctranslate2
    search_cfg: SearchConfig  # the search of every chunk (the server's default search)
    progress: ProgressFn  # where warnings go (a line cut to fit the model); the commands set it

    @property
    def languages(self) -> tuple[str, str]:
        """(source, target) language codes of the model, e.g. ("en", "de")."""
        ...

    def translate_chunk(self, lines: list[str], first_line: int = 0) -> list[Translation]:
        """One Translation per line, in order (an empty line gives an empty translation); `first_line` is the
        number of the chunk's first line in the input (warnings name lines, sampling seeds with them)."""
        ...

    def translate(self, chunks: Iterable[list[str]]) -> Iterator[Translation]:
        """One Translation per line of a stream of chunks, in order, as each chunk is translated."""
        ...

    def with_search(self, cfg: SearchConfig) -> Engine:
        """The same model with other search settings (cheap: nothing is loaded again)."""
        ...

    @property
    def data(self) -> DataIdentity:
        """The model's languages: its directions and (a multilingual model) the target-language tags."""
        ...

    def with_direction(self, src: Optional[str], tgt: Optional[str], where: str = "the model") -> Engine:
        """The same model translating `src` into `tgt` (None: the model's only one; cheap: nothing is loaded
        again); a one-line ConfigError naming `where` and the directions it knows for any other."""
        ...

    def with_constraints(self, terms: dict[int, list[str]]) -> Engine:
        """The same model, the translation of line number n (as `translate_chunk` numbers them) made to hold each
        target term of `terms[n]` (constrained beam search: torch only; a one-line ConfigError elsewhere)."""
        ...

    def alignment(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> list[tuple[int, int]]:
        """Word alignment of `line` and one of its hypotheses, from the last layer's cross-attention."""
        ...

    def attention(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> AttentionMaps:
        """Cross-attention of `line` and one of its hypotheses, every layer and head (torch only)."""
        ...




class BatchEngine:
    """What every engine shares (see `nmt.engines.base.Engine`): encoding, length-sorted batches, the order of the
    lines, one Translation per line (an empty line gives `nbest` empty hypotheses), streaming over chunks.

    An engine sets the attributes below and implements `search_batch`, the search of one batch; the
    torch engine is `TorchEngine`, the CTranslate2 one `nmt.engines.ct2_engine.CTranslate2Engine`.
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

    def with_search(self, search_cfg: SearchConfig) -> BatchEngine:
        """The same model and tokenizer with other search settings (a shallow copy: nothing is loaded)."""
        other = copy.copy(self)
        other.search_cfg = self.check_search(search_cfg)
        return other

    def with_shortlist_of(self, sources: Optional[list[list[int]]]) -> BatchEngine:
        """The same engine with its output restricted to the vocabulary shortlist of `sources` (a whole batch of
        another engine's, of which it searches some), or to none (None); an engine without a shortlist: itself."""
        return self

    def with_direction(self, src: Optional[str], tgt: Optional[str], where: str = "the model") -> BatchEngine:
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

    def with_constraints(self, terms: dict[int, list[str]]) -> BatchEngine:
        """See `Engine.with_constraints`: an engine without constrained search refuses."""
        raise ConfigError(f"{ref('glossary_method')} constrain: the {self.name} engine has no constrained search; "
                          f"use {ref('engine')} torch, or {ref('glossary_method')} place")

    def alignment(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> list[tuple[int, int]]:
        """Source-target word pairs of `line` and a hypothesis, from the last layer's cross-attention
        (averaged over its heads)."""
        raise ConfigError(f"{ref('alignments')}: the {self.name} engine cannot give alignments; use {ref('engine')} "
                          "torch")

    def attention(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> AttentionMaps:
        """Cross-attention maps of `line` and one of its hypotheses, every layer and head."""
        raise ConfigError(f"{ref('attention')}: the {self.name} engine cannot give attention maps; use "
                          f"{ref('engine')} torch")

Search = Callable[[list[int]], list[list[Hypothesis]]]  # rows of a batch -> their hypotheses, in that order


def search_apart(rows: int, held: list[int], search_free: Search, search_held: Search) -> list[list[Hypothesis]]:
    """The hypotheses of a batch of `rows` sentences, those of rows `held` (sentences that must hold glossary terms)
    from `search_held`, the others from `search_free` (each called once, and not with no rows)."""
    found: list[list[Hypothesis]] = [[] for _ in range(rows)]
    taken = set(held)
    free = [i for i in range(rows) if i not in taken]
    for part, search in ((free, search_free), (held, search_held)):
        if part:
            for i, hyps in zip(part, search(part)):
                found[i] = hyps
    return found


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
