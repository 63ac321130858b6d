"""`nmt translate` end to end: the checks before the model loads, and each input line's output lines
(the best translation, an n-best list, word alignments) with attention heatmaps written on the way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO, Optional

from nmt.config import InferenceConfig, Overrides
from nmt.core.errors import ConfigError, ref
from nmt.core.files import check_input_file, check_output_file
from nmt.core.progress import Progress, ProgressFn
from nmt.inference.engines import Engine
from nmt.inference.heatmaps import pharaoh, require_matplotlib, write_heatmaps
from nmt.inference.translator import format_nbest, read_chunks
from nmt.workflows.paths import check_distinct


def check_translate(model: list[Path], inference: Overrides[InferenceConfig], input: Optional[Path],
                    output: Optional[Path], attention: Optional[Path], alignments: bool) -> InferenceConfig:
    """The inference options, once every file and option is checked (before the model loads)."""
    check_distinct(ref("model"), model)
    if output:
        check_output_file(output, ref("output"), text=True)
    if input:
        check_input_file(input, ref("input"))
    options = inference.apply()
    if attention:
        require_matplotlib()  # fail before translating anything
    if (attention or alignments) and len(model) > 1:
        raise ConfigError(f"{ref('attention')} and {ref('alignments')} read one model's attention; give one "
                          f"{ref('model')}, not an ensemble")
    return options


def translated_text(translator: Engine, stream: IO[bytes], log: ProgressFn, alignments: bool = False,
                    attention: Optional[Path] = None) -> Iterator[str]:
    """The output of each line of `stream` as it is translated (its lines, newline-terminated); with
    `attention`, the heatmaps of each line's best translation are written to that folder."""
    nbest = translator.search_cfg.nbest
    for i, t in enumerate(translator.translate(read_chunks(stream, progress=log))):
        lines = format_nbest(i, t) if nbest > 1 else [t.text]
        if alignments:
            aligned = [pharaoh(translator.alignment(t.source, h, i)) for _, h in t.hypotheses[: len(lines)]]
            lines = [f"{line}\t{a}" if nbest > 1 else f"{line} ||| {a}" for line, a in zip(lines, aligned)]
        yield "\n".join(lines) + "\n"
        if attention and t.hypotheses and t.source:
            paths = write_heatmaps(translator.attention(t.source, t.hypotheses[0][1], i), attention, i)
            log(Progress("translate", message=f"wrote {len(paths)} attention heatmap(s) of line {i + 1} "
                                              f"to {attention}"))
