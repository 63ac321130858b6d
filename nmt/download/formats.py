"""The formats a source comes in, each read as one sentence a line: plain text, WMT's SGML, TSV.

Every reader raises InputError naming the file and line it cannot read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from nmt.core.errors import InputError
from nmt.core.files import open_binary, read_lines
from nmt.download.spec import Source

# sacreBLEU's reading of WMT's fake SGML (its FakeSGMLDataset), kept exactly: the line's text with
# the <seg ...> tag and the first </seg> taken out, whitespace runs made one space.
_SEG = re.compile(r"<seg.*?>(.*)</seg>.*?")
_SPACES = re.compile(r"\s+")


def sgm_lines(path: Path) -> Iterator[str]:
    """The text of each line of `path` that starts with `<seg `, as sacreBLEU's plain text of the file.

    Lines end at "\\n" alone (a "\\r" is whitespace inside one), as sacreBLEU reads them.
    """
    lineno = 0
    try:
        with open_binary(path) as f:
            for lineno, raw in enumerate(f, 1):  # noqa: B007 (the error below names the line)
                line = raw.decode("utf-8")
                if line.startswith("<seg "):
                    yield _SPACES.sub(" ", _SEG.sub(r"\1", line).strip())
    except UnicodeDecodeError as e:
        raise InputError(
            f"{path}: line {lineno} is not valid UTF-8 ({e.reason} at byte {e.start + 1} of the line); "
            "the test set is damaged: delete it and re-run"
        ) from None
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise InputError(f"{path}: cannot read ({e}); is the file complete?") from None


def tsv_lines(path: Path, column: int) -> Iterator[str]:
    """Field `column` (from 0) of each tab-separated line of `path`."""
    for lineno, line in enumerate(read_lines(path), 1):
        fields = line.split("\t")
        if column >= len(fields):
            raise InputError(
                f"{path}: line {lineno} has {len(fields)} tab-separated field(s), not the {column + 1} "
                "expected; the file is damaged or not the expected one: delete it and re-run"
            )
        yield fields[column]


def source_lines(source: Source, path: Path) -> Iterator[str]:
    """The sentences of `source`, read from its local copy `path` in the source's format."""
    if source.fmt == "sgm":
        return sgm_lines(path)
    if source.fmt == "tsv":
        assert source.column is not None  # check_spec
        return tsv_lines(path, source.column)
    return read_lines(path)
