"""`nmt distill` end to end: a teacher translates the source side of a corpus chunk by chunk (each chunk a file
of its own, written whole: a killed run goes on from the first chunk missing), one translation is kept per line
(the teacher's best, or the n-best one closest to the reference; with a glossary, its terms placed in the best,
`nmt.documents.terms`), and the pairs the teacher got wrong are dropped and counted; the distilled corpus appears,
whole, once every chunk is done.

OUT holds chunks/ (the translations), distill.json (who made them: teacher files, engine, search, source, glossary),
then train.SRC and train.TGT, dropped.tsv (line, reason, source, translation) and report.json.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from itertools import islice, repeat, zip_longest
from pathlib import Path
from typing import Any, Callable, Optional

from nmt.config import InferenceConfig, Overrides, Precision, SearchConfig, flag_of
from nmt.config.command_options import DistillOptions
from nmt.core.errors import ConfigError, InputError, ref
from nmt.core.files import (
    atomic_write,
    check_output_dir,
    count_lines,
    folder_lock,
    read_lines,
    remove_stale_temporaries,
    resolve_prefixed,
)
from nmt.core.outputs import check_distinct, claim_folder
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.distillation.interpolation import closest
from nmt.distillation.teacher_checks import REASONS, TeacherChecks, failure
from nmt.documents.terms import Placed, place_terms
from nmt.engines.base import Engine, Translation
from nmt.engines.choice import Needs, open_engine
from nmt.engines.conversions import checkpoint_digest
from nmt.engines.ct2_export import file_sha256
from nmt.text.glossary import Glossary
from nmt.text.languages import Detector
from nmt.training.distributed import Comm, process_group, torchrun_env

STATE = "distill.json"
STATE_FORMAT = "nmt-distill"
STATE_VERSION = 1
CHUNKS = "chunks"
REPORT = "report.json"
DROPPED = "dropped.tsv"


def distill(o: DistillOptions, search: Overrides[SearchConfig], inference: Overrides[InferenceConfig],
            progress: ProgressFn = ignore, open_teacher: Callable[..., Engine] = open_engine,
            total: Optional[int] = None) -> dict[str, Any]:
    """Distil `o.train`.SRC with the teacher `o.model` into `o.out`; the report (also OUT/report.json). `total`: the
    source's lines, where the caller has counted them already.

    Under torchrun (`torchrun_env`: one process per core or GPU, on one machine or several sharing OUT's file system)
    each process translates its share of the chunks (chunk k: rank k mod the processes); rank 0 holds the folder's
    lock and assembles the corpus once every chunk is done. Each chunk is translated alike by any process, so the
    corpus is the one a single process makes (the same CPU kind or GPU, the same engine)."""
    rank, world, local_rank = torchrun_env() or (0, 1, 0)
    with process_group(rank, world, local_rank, bool(inference.get("gpus", 0)), "env://" if world > 1 else None) \
            as comm:
        return distil_share(o, search, inference, progress, open_teacher, total, comm)


def distil_share(o: DistillOptions, search: Overrides[SearchConfig], inference: Overrides[InferenceConfig],
                 progress: ProgressFn, open_teacher: Callable[..., Engine], total: Optional[int],
                 comm: Comm) -> dict[str, Any]:
    """This process's part of `distill`: every rank checks and opens the teacher, translates its chunks; rank 0
    locks, records and assembles (an error on any rank is raised on every rank)."""
    check_distinct(ref("model"), o.model)
    source, reference = corpus_files(o)
    started = time.monotonic()
    check_output_dir(o.out, ref("out"))
    claim_folder(o.out, ref("out"), (STATE, CHUNKS, REPORT), "nmt distill")  # never a user's train.SRC and .TGT
    glossary = comm.all_succeed(lambda: teacher_glossary(o))  # its errors before the teacher loads
    needs = Needs(alignments=glossary is not None)
    engine = comm.all_succeed(lambda: teacher(open_teacher(o.model, teacher_search(search, o),
                                                           teacher_inference(inference), progress=progress,
                                                           needs=needs), o))
    wanted = identity(o, engine, source, reference)
    found = comm.gather(wanted)
    if any(other != wanted for other in found):  # the same teacher, search and corpus in every process
        raise ConfigError(f"the {comm.world} processes differ in {', '.join(sorted(differences(found)))}: "
                          "give every process the same files and options")
    with contextlib.ExitStack() as held:
        def take_folder() -> None:
            held.enter_context(folder_lock(o.out))
            for folder in (o.out, o.out / CHUNKS):  # a killed run's half-written files (the lock: none is running)
                remove_stale_temporaries(folder)
            keep_state(o.out, wanted)

        comm.all_succeed(take_folder if comm.rank == 0 else lambda: None)
        total = count_lines(source) if total is None else total
        if reference is not None and count_lines(reference) != total:  # now, not after translating all but the end
            raise InputError(f"{source} has {total:,} lines but {reference} has {count_lines(reference):,}; give a "
                             f"line-aligned corpus ({ref('train')})")
        engine.progress = progress
        share = comm.all_succeed(lambda: translate_chunks(engine, source, reference, o, total, progress, comm.rank,
                                                          comm.world, glossary))
        shares = comm.gather(share)
        translated = sum(lines for lines, _ in shares)

        def finish() -> dict[str, Any]:
            report = assemble(o, source, o.out / CHUNKS, total)
            seconds = time.monotonic() - started
            report.update(teacher=[str(m) for m in o.model], engine=describe_engine(engine), processes=comm.world,
                          translated_now=translated, seconds=round(seconds, 1),
                          sentences_per_second=round(translated / seconds, 1) if translated else None)
            if glossary is not None:  # the terms of the lines translated now (a resumed run's chunks were counted then)
                report["glossary"] = {"file": str(o.glossary), "terms": len(glossary),
                                      "found_now": sum(terms.found for _, terms in shares),
                                      "placed_now": sum(terms.placed for _, terms in shares)}
            with atomic_write(o.out / REPORT, "w") as f:  # last: its presence says the corpus is whole
                f.write(json.dumps(report, indent=2) + "\n")
            return report

        return comm.from_rank0(finish)


def differences(found: list[dict[str, Any]]) -> set[str]:
    """What the processes' identities of one distillation differ in, in words (`WHAT`)."""
    return {WHAT[key] for key in WHAT if len({json.dumps(f.get(key), sort_keys=True) for f in found}) > 1}


def corpus_files(o: DistillOptions) -> tuple[Path, Optional[Path]]:
    """PREFIX.SRC, and PREFIX.TGT where --interpolate needs the references; InputError for a missing one."""
    source = resolve_prefixed(f"{o.train}.{o.src}")
    if o.interpolate == "none":
        return source, None
    return source, resolve_prefixed(f"{o.train}.{o.tgt}")


def teacher(engine: Engine, o: DistillOptions) -> Engine:
    """The teacher translating --src into --tgt; ConfigError naming --src/--tgt for a direction it lacks."""
    try:
        return engine.with_direction(o.src, o.tgt, str(o.model[0]))
    except ConfigError as e:
        raise ConfigError(str(e).replace(ref("tgt_lang"), ref("tgt")).replace(ref("src_lang"), ref("src"))) from None


def teacher_glossary(o: DistillOptions) -> Optional[Glossary]:
    """The glossary of --glossary (None without one): InputError naming FILE:LINE for a line that is no term;
    ConfigError for an ensemble (terms are placed through one model's attention) or --interpolate (it keeps the n-best
    hypothesis closest to the reference, and terms are placed in the teacher's best only)."""
    if o.glossary is None:
        return None
    if len(o.model) > 1:
        raise ConfigError(f"{ref('glossary')}: terms are placed through one model's attention, and an ensemble "
                          f"({len(o.model)} checkpoints) has none; give one {ref('model')}")
    if o.interpolate != "none":
        raise ConfigError(f"{ref('glossary')} with {ref('interpolate')} {o.interpolate}: the terms are placed in the "
                          "teacher's best translation, and interpolation keeps the n-best one closest to the reference "
                          f"(often another, without them); leave {ref('interpolate')} or {ref('glossary')} out")
    return Glossary.read(o.glossary, ref("glossary"))


def teacher_search(search: Overrides[SearchConfig], o: DistillOptions) -> Overrides[SearchConfig]:
    """The search asked for; with --interpolate and no --nbest, the whole beam is the n-best."""
    if o.interpolate == "none":
        if search.get("nbest", 1) > 1:
            raise ConfigError(f"{flag_of(SearchConfig, 'nbest')} {search.get('nbest')}: a distilled corpus keeps one "
                              f"translation per line; add {ref('interpolate')} chrf to choose among them, or drop "
                              f"{flag_of(SearchConfig, 'nbest')}")
        return search
    if "nbest" in search:
        return search
    if search.get("sampling"):
        raise ConfigError(f"{ref('interpolate')} with {flag_of(SearchConfig, 'sampling')} chooses among the draws "
                          f"of each line; give {flag_of(SearchConfig, 'nbest')} 2 or more")
    beam = search.get("beam")
    if beam == 1:
        raise ConfigError(f"{ref('interpolate')} chooses among a beam search's hypotheses; give "
                          f"{flag_of(SearchConfig, 'beam')} 2 or more")
    return search | Overrides(SearchConfig, {"nbest": beam or SearchConfig().beam})


def teacher_inference(inference: Overrides[InferenceConfig]) -> Overrides[InferenceConfig]:
    """int8 on a CPU unless a number format is asked for: the fastest engine that can (CTranslate2 int8 for one
    model; an ensemble runs on torch, whose int8 took 0.76x the CPU time of fp32 for an ensemble of two 4+4-layer
    models at beam 6, docs/commands/distill.md)."""
    if {"precision", "int8"} & set(inference.values) or inference.get("gpus", 0):
        return inference
    return inference | Overrides(InferenceConfig, {"precision": Precision.INT8})


def identity(o: DistillOptions, engine: Engine, source: Path, reference: Optional[Path]) -> dict[str, Any]:
    """What makes the chunks what they are: rerunning with anything else would mix two distillations."""
    search = asdict(engine.search_cfg)
    return {"format": STATE_FORMAT, "version": STATE_VERSION,
            "teacher": [checkpoint_digest(m) for m in o.model],
            "engine": describe_engine(engine), "search": search, "direction": f"{o.src}-{o.tgt}",
            "source": file_sha256(source), "interpolate": o.interpolate,
            "reference": file_sha256(reference) if reference else None, "chunk_lines": o.chunk_lines,
            "glossary": file_sha256(o.glossary) if o.glossary else None}


def describe_engine(engine: Engine) -> str:
    kind = getattr(engine, "compute_type", None) or getattr(engine, "precision", None)
    return f"{engine.name} ({kind})" if kind else engine.name


WHAT = {"teacher": "another teacher (--model)", "engine": "another engine or number format",
        "search": "other search options", "direction": "another --src/--tgt", "source": "another source file",
        "interpolate": "another --interpolate", "reference": "another reference file", "chunk_lines": "another "
        "--chunk-lines", "glossary": "another --glossary (or none)", "format": "another nmt", "version": "another nmt"}


def keep_state(out: Path, wanted: dict[str, Any]) -> None:
    """Record `wanted` in OUT/distill.json, or check that the chunks already there were made so; ConfigError
    naming what differs (never a corpus of two teachers)."""
    path = out / STATE
    if path.is_file() and any((out / CHUNKS).glob("*.txt")):
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise InputError(f"{path}: unreadable ({e}); delete {out / CHUNKS} and {path} to start over") from None
        differs = [WHAT[k] for k in WHAT if not isinstance(found, dict) or found.get(k) != wanted[k]]
        if differs:
            raise ConfigError(f"{ref('out')} {out} holds translations made with {', '.join(differs)}; distil into "
                              f"another {ref('out')}, or delete {out / CHUNKS} to start over")
        return
    with atomic_write(path, "w") as f:
        f.write(json.dumps(wanted, indent=2) + "\n")


def source_chunks(source: Path, reference: Optional[Path], size: int) -> Iterator[tuple[list[str], list[str]]]:
    """(source lines, reference lines: "" without references) `size` at a time; InputError when the files' lines
    do not pair up."""
    pairs = zip_longest(read_lines(source), read_lines(reference)) if reference else zip(read_lines(source), repeat(""))
    while chunk := list(islice(pairs, size)):
        if any(line is None for pair in chunk for line in pair):  # zip_longest ran past the shorter file
            raise InputError(f"{source} and {reference} differ in length; give a line-aligned corpus "
                             f"({ref('train')})")
        yield [s for s, _ in chunk], [r for _, r in chunk]


def translate_chunks(engine: Engine, source: Path, reference: Optional[Path], o: DistillOptions, total: int,
                     progress: ProgressFn, rank: int = 0, world: int = 1,
                     glossary: Optional[Glossary] = None) -> tuple[int, Placed]:
    """Translate each chunk of this process's share (chunk k: k mod `world` is `rank`) not yet in OUT/chunks, with
    `glossary`'s terms placed in each line's best translation; how many lines were translated now, and their terms."""
    chunks = o.out / CHUNKS
    chunks.mkdir(exist_ok=True)
    translated, terms = 0, Placed()
    for k, (lines, refs) in enumerate(source_chunks(source, reference, o.chunk_lines)):
        if k % world != rank:
            continue
        first = k * o.chunk_lines
        path = chunks / f"{k:06d}.txt"
        if path.is_file():
            progress(Progress("translate", done=first + len(lines), total=total, unit="sentences"))
            continue
        done = engine.translate_chunk(lines, first)
        if glossary is not None:
            done = [with_terms(engine, t, glossary, first + i, terms) for i, t in enumerate(done)]
        rows = [chosen(t, r, o.interpolate) for t, r in zip(done, refs)]
        with atomic_write(path, "w") as f:
            f.writelines(f"{rank}\t{text}\n" for rank, text in rows)
        translated += len(lines)
    return translated, terms


def with_terms(engine: Engine, t: Translation, glossary: Glossary, line: int, terms: Placed) -> Translation:
    """Line number `line`'s translation with the glossary's terms placed through the teacher's alignment, counted in
    `terms`."""
    placed, counts = place_terms(t, glossary, lambda source, hypothesis: engine.alignment(source, hypothesis, line))
    terms.found += counts.found
    terms.placed += counts.placed
    return placed


def chosen(t: Translation, reference: str, metric: str) -> tuple[int, str]:
    """(rank, text) of the translation kept of a line: the best, or the n-best one closest to `reference`."""
    if metric == "none" or len(t.hypotheses) <= 1:
        return 0, t.text
    rank = closest([text for text, _ in t.hypotheses], reference, metric)
    return rank, t.hypotheses[rank][0]


def language_check(lang: str, threshold: float) -> Callable[[str], bool]:
    """Whether a source line is in `lang` by the language detector (`nmt.text.languages`): a probability of at least
    `threshold` percent that it is (0: every line is; no detector is loaded)."""
    if not threshold:
        return lambda line: True
    detector = Detector([lang])  # its probability of `lang` among every language it knows: a line without
    return lambda line: any(d.confidence >= threshold for d in detector.detect(line))  # letters is in none


def chunk_rows(chunks: Path, lines: int, size: int) -> Iterator[tuple[int, str]]:
    """(rank, text) of every line, chunk after chunk; InputError for a chunk of the wrong length (edited)."""
    for k in range((lines + size - 1) // size):
        path = chunks / f"{k:06d}.txt"
        rows = path.read_text(encoding="utf-8").split("\n")[:-1]
        if len(rows) != min(size, lines - k * size):
            raise InputError(f"{path}: {len(rows)} lines where {min(size, lines - k * size)} were written; delete "
                             "it to translate that chunk again")
        for row in rows:
            rank, _, text = row.partition("\t")
            yield int(rank) if rank.isdigit() else 0, text


def assemble(o: DistillOptions, source: Path, chunks: Path, total: int) -> dict[str, Any]:
    """Write OUT/train.SRC, OUT/train.TGT (the kept pairs) and OUT/dropped.tsv; the counts."""
    checks = TeacherChecks(o.max_ratio, o.max_repeats, o.keep_copies)
    in_source_language = language_check(o.src, o.lid)
    dropped: Counter[str] = Counter()
    not_best = kept = 0
    with atomic_write(o.out / f"train.{o.src}", "w") as src_file, \
            atomic_write(o.out / f"train.{o.tgt}", "w") as tgt_file, atomic_write(o.out / DROPPED, "w") as why:
        for i, (line, (rank, text)) in enumerate(zip(read_lines(source), chunk_rows(chunks, total, o.chunk_lines))):
            not_best += rank > 0
            reason = "language" if not in_source_language(line) else failure(line, text, checks)
            if reason:
                dropped[reason] += 1
                why.write(f"{i + 1}\t{reason}\t{' '.join(line.split())}\t{' '.join(text.split())}\n")
                continue
            src_file.write(line + "\n")
            tgt_file.write(text + "\n")
            kept += 1
    report: dict[str, Any] = {"lines": total, "kept": kept, "dropped": {r: dropped[r] for r in REASONS},
                              "corpus": str(o.out / "train"), "src": o.src, "tgt": o.tgt}
    if o.interpolate != "none":
        report["interpolation"] = {"metric": o.interpolate, "not_teacher_best": not_best}
    return report
