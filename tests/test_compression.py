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


COMPRESSIONS = {"plain": lambda b: b, "gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}


@pytest.mark.parametrize("form", sorted(COMPRESSIONS))
@pytest.mark.parametrize("size, refused", [(100, False), (101, True)])
def test_a_small_text_file_holds_at_most_its_limit_once_decompressed(form, size, refused, tmp_path: Path):
    """The limit counts the bytes as read (decompressed), not the file's size."""
    (tmp_path / "f").write_bytes(COMPRESSIONS[form](b"k" * size))
    if not refused:
        assert read_small_text(tmp_path / "f", "--keys f", "one key per line", limit=100) == "k" * size
        return
    with pytest.raises(InputError) as e:
        read_small_text(tmp_path / "f", "--keys f", "one key per line", limit=100)
    inflated = "" if form == "plain" else " once decompressed"
    assert str(e.value) == (f"--keys f: holds more than 100 bytes{inflated}, more than nmt reads from such a file; "
                            "one key per line")


@pytest.mark.parametrize("form", ["gzip", "bzip2", "xz"])
def test_a_decompression_bomb_is_refused_without_inflating_it(form, tmp_path: Path):
    """A file of a few kilobytes that inflates to 1 GiB (1,024 streams of 1 MiB of zero bytes, one after the
    other as `cat` joins them): refused at the default limit, holding no more than that limit."""
    import tracemalloc

    from nmt.core.compression import SMALL_TEXT_LIMIT

    stream = COMPRESSIONS[form](bytes(1 << 20))
    (tmp_path / "bomb").write_bytes(stream * 1024)
    assert (tmp_path / "bomb").stat().st_size < 2 << 20
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="^--keys bomb: holds more than 16 MiB once decompressed"):
            read_small_text(tmp_path / "bomb", "--keys bomb", "one key per line")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * SMALL_TEXT_LIMIT, peak
