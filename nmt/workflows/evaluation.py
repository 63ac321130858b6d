"""`nmt eval` end to end: the checks of its options, reading the references and the systems (files,
stdin, or a model's translations of --src), and the scores or the paired bootstrap test."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, Optional

from nmt.config import InferenceConfig, Overrides, SearchConfig, TextConfig, flag_of
from nmt.config.command_options import EvalOptions
from nmt.core.compression import decompressed
from nmt.core.errors import ConfigError, InputError
from nmt.core.files import atomic_write, check_output_file, read_lines, stream_lines
from nmt.core.outputs import check_distinct
from nmt.core.progress import Progress, ProgressFn
from nmt.documents.streams import translate_file
from nmt.documents.texts import Documents
from nmt.engines.choice import open_engine
from nmt.scoring import (
    PairedScore,
    Score,
    check_parallel,
    paired_bootstrap,
    reference_sets,
    score,
    ter_left_out,
)
from nmt.text.glossary import Glossary
from nmt.workflows.threads import set_threads

DEFAULT_RESAMPLES = 1000  # --paired-bs-n
MODEL, SRC = flag_of(EvalOptions, "model"), flag_of(EvalOptions, "src")  # how messages name them
GLOSSARY = flag_of(EvalOptions, "glossary")


@dataclass
class EvalResult:
    """The scores of each system (`scored`), or, for the paired bootstrap test, its `paired` results and
    the metrics' signatures."""

    ref_names: list[str]
    lines: int
    scored: list[tuple[str, list[Score]]] = field(default_factory=list)
    paired: Optional[list[PairedScore]] = None
    signatures: dict[str, str] = field(default_factory=dict)


def check_translating(request: EvalOptions, search: Overrides[SearchConfig],
                      inference: Overrides[InferenceConfig]) -> Optional[InferenceConfig]:
    """The inference options when eval translates --src with --model (None when it does not); what only
    translating uses, given without --model, would do nothing and is an error."""
    if not request.model:
        unused = [f"{SRC} {request.src}"] if request.src and not request.glossary else []
        unused += [f"{flag_of(EvalOptions, name)} {getattr(request, name)}" for name in ("src_lang", "tgt_lang")
                   if getattr(request, name)]
        unused += [f"{flag_of(EvalOptions, 'save_hyp')} {request.save_hyp}"] if request.save_hyp else []
        unused += [flag_of(cls, name) for cls, given in ((SearchConfig, search), (InferenceConfig, inference))
                   for name in given.values]
        if unused:
            raise ConfigError(f"{', '.join(unused)}: only {'applies' if len(unused) == 1 else 'apply'} with {MODEL} "
                              f"(translating {SRC}); add {MODEL} CHECKPOINT or drop "
                              f"{'it' if len(unused) == 1 else 'them'}")
        return None
    if request.src is None:
        raise InputError(f"{MODEL} needs {SRC}: the source file to translate")
    check_distinct(MODEL, request.model)
    search_cfg, options = search.apply(), inference.apply()  # contradictions now, before reading anything
    if search_cfg.nbest > 1 and not search_cfg.sampling:  # eval scores each line's best hypothesis
        nbest = flag_of(SearchConfig, "nbest")
        raise ConfigError(f"{nbest} {search_cfg.nbest} does nothing here: eval scores the best translation of "
                          f"each line, which the n-best list does not change (with {flag_of(SearchConfig, 'sampling')} "
                          f"it scores the best of N draws); drop {nbest}")
    return options


def read_system(name: str, stdin: Callable[[], IO[bytes]]) -> tuple[str, list[str]]:
    """A system's translations: a file, or `stdin()` for '-' (plain or compressed text, either)."""
    if name != "-":
        return name, list(read_lines(Path(name)))
    stream = stdin()
    if stream.isatty():
        raise InputError(f"no translations to score: pipe them in (... | nmt eval --ref REF), or give "
                         f"{flag_of(EvalOptions, 'hyp')} FILE or {MODEL} and {SRC}")
    return "stdin", list(stream_lines(decompressed(stream, "stdin"), "stdin"))


ProgressBar = Callable[[int], AbstractContextManager[ProgressFn]]  # a progress display for N sentences


def translate_source(request: EvalOptions, search: Overrides[SearchConfig], options: InferenceConfig,
                     refs: list[list[str]], log: ProgressFn, bar: ProgressBar,
                     text: TextConfig = TextConfig(), glossary: Optional[Glossary] = None) -> tuple[str, list[str]]:
    """--model's translations of --src (line-parallel to the first reference; with `glossary`'s terms), saved to
    --save-hyp if given."""
    assert request.model and request.src is not None  # check_translating refuses --model without --src
    sources = list(read_lines(request.src))
    check_parallel(sources, refs[0], str(request.src), str(request.ref[0]))
    set_threads(options.threads)
    translator = open_engine(request.model, search, options, progress=log).with_direction(
        request.src_lang, request.tgt_lang, str(request.model[0]))
    with bar(len(sources)) as report:
        translator.progress = report
        translations = translate_file(Documents(translator, text.split, glossary=glossary,
                                                           glossary_method=text.glossary_method), None, sources)
    if request.save_hyp:
        with atomic_write(request.save_hyp, "w") as f:
            f.write("".join(h + "\n" for h in translations))
    return f"translations of {request.src}", translations


def evaluate(request: EvalOptions, search: Overrides[SearchConfig], inference: Overrides[InferenceConfig],
             stdin: Callable[[], IO[bytes]], log: ProgressFn, bar: ProgressBar,
             text: TextConfig = TextConfig()) -> EvalResult:
    """Score every system against the references (or test them against the first with paired bootstrap
    resampling); every option is checked before anything is read."""
    options = check_translating(request, search, inference)
    if request.save_hyp:
        # now, not after translating everything
        check_output_file(request.save_hyp, flag_of(EvalOptions, "save_hyp"), text=True)
    glossary = Glossary.read(request.glossary, GLOSSARY) if request.glossary else None  # (its errors first)
    if glossary is not None and request.src is None:
        raise ConfigError(f"{GLOSSARY} needs {SRC}: the terms are found in the sources")
    refs = [list(read_lines(r)) for r in request.ref]
    ref_names = [str(r) for r in request.ref]
    systems = [read_system(h, stdin) for h in request.hyp or ([] if request.model else ["-"])]
    if options is not None:
        systems.append(translate_source(request, search, options, refs, log, bar, text, glossary))
    left_out = ter_left_out(systems, reference_sets(refs), ref_names)
    if left_out:
        log(Progress("eval", message=f"warning: {left_out}"))
    result = EvalResult(ref_names, len(refs[0]))
    if request.paired_bs:
        n = DEFAULT_RESAMPLES if request.paired_bs_n is None else request.paired_bs_n
        result.paired, result.signatures = paired_bootstrap(systems, refs, n)
    else:
        result.scored = [(name, score(hyps, refs, name, ref_names)) for name, hyps in systems]
        if glossary is not None:
            assert request.src is not None and request.glossary is not None
            sources = list(read_lines(request.src))
            for name, scores in result.scored:
                scores.append(term_accuracy(glossary, request.glossary, sources, dict(systems)[name], name))
    return result


def term_accuracy(glossary: Glossary, path: Path, sources: list[str], hyps: list[str], name: str) -> Score:
    """The share of the glossary's terms found in `sources` that `hyps` use (`Glossary.used`), in percent."""
    check_parallel(hyps, sources, name, str(path))
    used, found = glossary.used(sources, hyps)
    return Score("term accuracy", round(100 * used / found, 2) if found else 0.0, f"glossary:{path}|terms:{found}",
                 f"{used:,} of the {found:,} glossary terms of the sources used in the translations")
