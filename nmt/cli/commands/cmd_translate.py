"""`nmt translate`: stdin (or a file) to stdout (or a file), line by line, streaming."""

from __future__ import annotations

import contextlib

from nmt.cli.options import with_config_options
from nmt.cli.stdio import stdin_bytes, write_stdout
from nmt.config import InferenceConfig, Overrides, SearchConfig, TextConfig
from nmt.config.command_options import TranslateOptions

EPILOG = "Example: cat news.en | nmt translate --model run/averaged.pt --beam 4 > news.de"


@with_config_options({"given": TranslateOptions, "search": SearchConfig, "inference": InferenceConfig,
                      "text": TextConfig})
def translate_command(given: Overrides[TranslateOptions], search: Overrides[SearchConfig],
                      inference: Overrides[InferenceConfig], text: Overrides[TextConfig]) -> None:
    """Translate stdin to stdout, one output line per input line, streaming; a line of several sentences is
    translated sentence by sentence (plain or compressed text: gzip, bzip2, xz; -o NAME.gz writes gzip; --format
    html: an HTML document, its tags kept)."""
    from nmt.cli.console import message_logger, progress_wanted, translation_progress
    from nmt.core.files import atomic_write, count_lines, open_input
    from nmt.engines.choice import Needs, open_engine
    from nmt.workflows.threads import set_threads
    from nmt.workflows.translation import check_translate, read_glossary, translated_text

    o = given.apply()
    options = check_translate(o.model, inference, o.input, o.output, o.attention, o.alignments, o.format)
    glossary = read_glossary(o.glossary, o.alignments, o.attention, o.format)  # its errors before the model loads
    set_threads(options.threads)
    # A bar (sentences/s, time left) for a file on a terminal; a pipe or a log gets only warnings.
    total = count_lines(o.input) if o.input and o.input.is_file() and progress_wanted() else None
    stream = open_input(o.input) if o.input else stdin_bytes()  # a missing input fails before the model loads
    try:
        translator = open_engine(o.model, search, options, progress=message_logger(),
                                 needs=Needs(o.alignments or glossary is not None, o.attention is not None)
                                 ).with_direction(o.src_lang, o.tgt_lang, str(o.model[0]))
        with atomic_write(o.output, "w") if o.output else contextlib.nullcontext() as out_file, \
                translation_progress(total) as report:
            write = out_file.write if out_file is not None else write_stdout
            translator.progress = report
            for out in translated_text(translator, stream, report, o.alignments, o.attention, text.apply(), o.format,
                                       o.scores, o.json, glossary):
                write(out)
    finally:
        if o.input:
            stream.close()
