from __future__ import annotations

import bz2
import gzip
import lzma
from pathlib import Path

import pytest

from nmt.core.compression import read_small_text
from nmt.core.errors import InputError

TEXT = "# keys\nalpha\nbeta\n" * 50


def damaged(data: bytes) -> bytes:
    """`data` with ten bytes in its middle overwritten, its header and trailer left alone."""
    middle = len(data) // 2
    return data[:middle] + b"\xff" * 10 + data[middle + 10 :]


@pytest.mark.parametrize("form, write", [
    ("plain", lambda t: t.encode()),
    ("byte-order mark", lambda t: t.encode("utf-8-sig")),
    ("gzip", lambda t: gzip.compress(t.encode())),
    ("bzip2", lambda t: bz2.compress(t.encode())),
    ("xz", lambda t: lzma.compress(t.encode())),
])
def test_a_small_text_file_reads_the_same_plain_or_compressed(form, write, tmp_path: Path):
    (tmp_path / "f").write_bytes(write(TEXT))
    assert read_small_text(tmp_path / "f", "--keys f", "one key per line") == TEXT


@pytest.mark.parametrize("form, make, words", [
    ("missing", None, "--keys f: cannot read (No such file or directory); check the path"),
    ("directory", lambda p: p.mkdir(), "--keys f: cannot read (Is a directory); check the path"),
    ("binary", lambda p: p.write_bytes(b"\x00\xff\xfe binary \x80"),
     "--keys f: not a text file (not UTF-8); one key per line"),
    ("gzip, truncated", lambda p: p.write_bytes(gzip.compress(TEXT.encode())[:-12]), "is the file complete?"),
    ("gzip, damaged", lambda p: p.write_bytes(damaged(gzip.compress(TEXT.encode()))), "is the file complete?"),
    ("bzip2, damaged", lambda p: p.write_bytes(damaged(bz2.compress(TEXT.encode()))), "is the file complete?"),
    ("xz, damaged", lambda p: p.write_bytes(damaged(lzma.compress(TEXT.encode()))), "is the file complete?"),
    ("zstd", lambda p: p.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(20)), "zstd-compressed data"),
])
def test_an_unreadable_small_text_file_is_one_line_naming_it(form, make, words, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if make:
        make(tmp_path / "f")
    with pytest.raises(InputError) as e:
        read_small_text("f", "--keys f", "one key per line")
    message = str(e.value)
    assert message.startswith("--keys f: ") and words in message and "\n" not in message, message
