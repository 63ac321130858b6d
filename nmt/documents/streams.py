"""Lines in, lines out, for any engine (or `nmt.documents.texts.Documents`): a byte stream read as chunks of the
lines that have arrived (`read_chunks`: stdin as a pipe delivers it), a file's best translations (`translate_file`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Optional, Protocol

from nmt.core.errors import InputError, ref
from nmt.core.files import BOM, byte_blocks, read_lines
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.engines.base import Translation


def stream_name(stream: IO[bytes]) -> str:
    """What errors and warnings call a stream: its file's name, or stdin."""
    name = getattr(stream, "name", "the input")
    return "stdin" if name in (0, "<stdin>") else str(name)


def read_chunks(stream: IO[bytes], max_lines: int = 512, progress: ProgressFn = ignore) -> Iterator[list[str]]:
    """Lines of a byte stream (plain or gzip text) in chunks of what has arrived so far (at most
    `max_lines` each), without their newline (LF or CRLF) and without a byte-order mark.

    Reads with os.read (`nmt.core.files.byte_blocks`), which returns as soon as some input is available, so
    a pipe that delivers a line at a time gets its translations a line at a time; a file is read in
    large blocks, and gzip is inflated block by block. Invalid UTF-8 is replaced (with a warning), so
    that every input line still gets its output line.
    """
    name = stream_name(stream)
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


MAX_DOCUMENT = 64 << 20  # bytes of one document (`read_document`): it is held whole, with its translation


def read_document(stream: IO[bytes], progress: ProgressFn = ignore) -> str:
    """The whole of a byte stream (plain or compressed) as one document, its line ends as written (CRLF too) and
    without a byte-order mark; invalid UTF-8 replaced (with a warning); InputError past MAX_DOCUMENT bytes."""
    name = stream_name(stream)
    blocks, size = [], 0
    for block in byte_blocks(stream.fileno(), name):
        size += len(block)
        if size > MAX_DOCUMENT:
            raise InputError(f"{ref('input')}: more than {MAX_DOCUMENT >> 20} MiB; {ref('format')} html translates "
                             "one document held in memory: split it into pages")
        blocks.append(block)
    data = b"".join(blocks)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        progress(Progress("translate", message=f"warning: {name} is not valid UTF-8; undecodable bytes replaced"))
        text = data.decode("utf-8", errors="replace")
    return text[len(BOM):] if text.startswith(BOM) else text


class Translates(Protocol):
    def translate(self, chunks: Iterable[list[str]]) -> Iterator[Translation]: ...


def translate_file(translator: Translates, path: Optional[Path], lines: Optional[list[str]] = None) -> list[str]:
    """Best translations of a file's lines (or of `lines`), in order, by any engine."""
    if lines is None:
        assert path is not None, "a file or its lines"
        lines = list(read_lines(path))
    source = lines
    return [t.text for t in translator.translate([source])]
