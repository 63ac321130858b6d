"""`nmt translate` end to end: the checks before the model loads, and each input line's output lines
(the best translation, an n-best list, word alignments) with attention heatmaps written on the way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Optional

from nmt.config import InferenceConfig, Overrides, TextConfig
from nmt.core.errors import ConfigError, ref
from nmt.core.files import check_input_file, check_output_file
from nmt.core.outputs import check_distinct
from nmt.core.progress import Progress, ProgressFn
from nmt.documents.streams import read_chunks, read_document
from nmt.documents.texts import NOTHING, Documents, Format, TextTranslation
from nmt.engines.base import Engine, Translation
from nmt.engines.heatmaps import pharaoh, require_matplotlib, write_heatmaps
from nmt.text.glossary import Glossary


def check_translate(model: list[Path], inference: Overrides[InferenceConfig], input: Optional[Path],
                    output: Optional[Path], attention: Optional[Path], alignments: bool,
                    format: Format = "text") -> InferenceConfig:
    """The inference options, once every file and option is checked (before the model loads)."""
    check_distinct(ref("model"), model)
    if output:
        check_output_file(output, ref("output"), text=True)
    if input:
        check_input_file(input, ref("input"))
    options = inference.apply()
    if attention:
        require_matplotlib()  # fail before translating anything
    if format == "html" and (attention or alignments):
        raise ConfigError(f"{ref('format')} html: {ref('alignments')} and {ref('attention')} are for plain text "
                          "lines; leave them out")
    if (attention or alignments) and len(model) > 1:
        raise ConfigError(f"{ref('attention')} and {ref('alignments')} read one model's attention; give one "
                          f"{ref('model')}, not an ensemble")
    return options


def translated_text(translator: Engine, stream: IO[bytes], log: ProgressFn, alignments: bool = False,
                    attention: Optional[Path] = None, text: TextConfig = TextConfig(), format: Format = "text",
                    scores: bool = False, json_lines: bool = False, glossary: Optional[Glossary] = None
                    ) -> Iterator[str]:
    """The output of each line of `stream` as it is translated (its lines, newline-terminated): each line cut
    into sentences (`text.split`) and put back together; with `attention`, the heatmaps of each line's best
    translation are written to that folder; with `scores`, each translation is followed by a tab and its score;
    with `json_lines`, each line's output is one JSON object (`as_json`); with `glossary`, its terms are placed
    (`nmt.documents.terms`) and counted on `log` at the end. `format` html: the whole input is one HTML document,
    written back with its tags."""
    documents = Documents(translator, text.split, format, glossary, text.glossary_method)
    yield from outputs(documents, stream, log, alignments, attention, scores, json_lines)
    if glossary is not None:
        terms = documents.terms
        searched = f" ({terms.searched:,} sentence(s) searched again for theirs)" if terms.searched else ""
        log(Progress("translate", message=f"glossary: {terms.found:,} term(s) found, {terms.placed:,} in the "
                                          f"translations{searched}" + (
                                              f", {terms.unplaced:,} not (neither written by a constrained search nor "
                                              "placed: aligned to no word, or to one another term took)"
                                              if terms.unplaced else "")))


def read_glossary(path: Optional[Path], alignments: bool = False, attention: Optional[Path] = None,
                  format: Format = "text") -> Optional[Glossary]:
    """The glossary of --glossary (None without one); InputError naming FILE:LINE for a bad line, ConfigError with
    what it cannot go with yet (the alignments and heatmaps are of the model's own words; html places its inline tags
    through them)."""
    if path is None:
        return None
    if alignments or attention or format == "html":
        raise ConfigError(f"{ref('glossary')}: not with {ref('alignments')}, {ref('attention')} or {ref('format')} "
                          "html (these read the model's own words, which the glossary replaces); leave one out")
    return Glossary.read(path, ref("glossary"))


def outputs(documents: Documents, stream: IO[bytes], log: ProgressFn, alignments: bool, attention: Optional[Path],
            scores: bool, json_lines: bool) -> Iterator[str]:
    """Each input line's output lines (see `translated_text`)."""
    translator, format = documents.engine, documents.format
    if format == "html":  # check_translate refused --alignments and --attention
        page = read_document(stream, log)
        t = documents.translate_chunk([page])[0]
        # the document's bytes as written, line ends included (it ends with a line end: its own, else "\n")
        end = "\r\n" if t.text.endswith("\r\n") else "\n"
        body = t.text[: -len(end)] if t.text.endswith(end) else t.text
        yield as_json(t, 1) if json_lines else body + (f"\t{t.score:.4f}" if scores else "") + end
        return
    nbest = translator.search_cfg.nbest
    for i, t in enumerate(documents.translate(read_chunks(stream, progress=log))):
        if json_lines:
            ranks = range(max(1, len(t.hypotheses)) if nbest > 1 else 1)
            yield as_json(t, nbest, [pharaoh(documents.alignment(t, r, i)) for r in ranks] if alignments else None)
            continue
        lines = format_nbest(i, t) if nbest > 1 else [t.text]
        if alignments:
            aligned = [pharaoh(documents.alignment(t, rank, i)) for rank in range(len(lines))]
            lines = [f"{line}\t{a}" if nbest > 1 else f"{line} ||| {a}" for line, a in zip(lines, aligned)]
        if scores and nbest == 1:
            lines = [f"{lines[0]}\t{t.score:.4f}"]
        yield "\n".join(lines) + "\n"
        if attention and t.hypotheses and t.source:
            for j, sentence in enumerate(t.sentences):
                paths = write_heatmaps(translator.attention(sentence.source, sentence.hypotheses[0][1], i), attention,
                                       i, j if len(t.sentences) > 1 else None)
                log(Progress("translate", message=f"wrote {len(paths)} attention heatmap(s) of line {i + 1} "
                                                  f"to {attention}"))


def as_json(t: TextTranslation, nbest: int, alignments: Optional[list[str]] = None) -> str:
    """One line's output as a JSON line: {"text", "score"} (the best translation and its mean token log-probability),
    "nbest" with n-best (each {"text", "score", "log_prob"}: the search's score, the log-probability), "alignment"
    with alignments (Pharaoh pairs; with n-best, each hypothesis's)."""
    row: dict[str, object] = {"text": t.text, "score": round(t.score, 4)}
    if nbest > 1:
        hypotheses = t.hypotheses or [("", NOTHING)]
        entries: list[dict[str, object]] = [{"text": text, "score": round(h.score, 4), "log_prob": round(h.log_prob, 4)}
                                            for text, h in hypotheses]
        for entry, alignment in zip(entries, alignments or []):
            entry["alignment"] = alignment
        row["nbest"] = entries
    elif alignments:
        row["alignment"] = alignments[0]
    return json.dumps(row, ensure_ascii=False) + "\n"


def format_nbest(line_index: int, translation: Translation) -> list[str]:
    """N-best lines: `LINE<TAB>RANK<TAB>SCORE<TAB>LOGPROB<TAB>TEXT` (line and rank 0-based)."""
    if not translation.hypotheses:
        return [f"{line_index}\t0\t0.0000\t0.0000\t"]
    return [f"{line_index}\t{rank}\t{h.score:.4f}\t{h.log_prob:.4f}\t{text}"
            for rank, (text, h) in enumerate(translation.hypotheses)]
