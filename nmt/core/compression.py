"""Compressed text, both ways: gzip, bzip2 and xz (Python's own zlib, bz2 and lzma).

Read, a compression is known by the data's first bytes, whatever the file's name (no UTF-8 text starts
with any of these signatures), and inflated block by block as it arrives, so that a pipe is answered
line by line and a large file is never read whole. Written, it is chosen by the name's suffix (.gz,
.bz2, .xz). Compressions nmt cannot read or write (zstd, zip, 7z, lz4) are refused by name rather than
read as text.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, Callable, Optional, Union, cast

from nmt.core.errors import InputError, OutputError

BLOCK = 1 << 16  # bytes inflated at a time: a few kilobytes may inflate to gigabytes
HEAD = 10  # bytes that tell every signature below apart (the longest is bzip2's)
# The most a small text file (an --api-keys file; a --config file reads less) may hold once decompressed.
SMALL_TEXT_LIMIT = 16 << 20


Signature = tuple[bytes, ...]  # the bytes each leading position may hold
CompressedFile = Union[gzip.GzipFile, bz2.BZ2File, lzma.LZMAFile]


def signature(*positions: bytes) -> Signature:
    return positions


def matches(head: bytes, sig: Signature) -> bool:
    return len(head) >= len(sig) and all(head[i] in sig[i] for i in range(len(sig)))


def could_become(head: bytes, sig: Signature) -> bool:
    """Whether `head`, shorter than `sig`, may still turn out to start with it once more bytes arrive."""
    return len(head) < len(sig) and all(head[i] in sig[i] for i in range(len(head)))


@dataclass(frozen=True)
class Codec:
    name: str  # as a user knows it: gzip, bzip2, xz
    suffix: str  # of the names it is written under
    signature: Signature  # of the first bytes of its data
    decompressor: Callable[[], Any]  # a new streaming decompressor (bz2/lzma's interface)
    reader: Callable[[IO[bytes]], CompressedFile]  # a decompressing file over an open one
    writer: Callable[[IO[bytes]], CompressedFile]  # a compressing file over an open one (closing it leaves that open)


class _Zlib:
    """zlib's gzip decompressor with bz2's and lzma's interface (`needs_input`, `eof`, `unused_data`)."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(wbits=31)  # 31: gzip framing
        self.needs_input = True

    def decompress(self, data: bytes, max_length: int) -> bytes:
        out = self._inflate.decompress(self._inflate.unconsumed_tail + data, max_length)
        # Output held back by the bound, as input not yet consumed or inside zlib, needs no new input.
        self.needs_input = not self._inflate.unconsumed_tail and len(out) < max_length
        return out

    @property
    def eof(self) -> bool:
        return self._inflate.eof

    @property
    def unused_data(self) -> bytes:
        return self._inflate.unused_data + self._inflate.unconsumed_tail


CODECS = (
    # No file name or time in a gzip header: the same text always gives the same bytes (`gzip -n`).
    Codec("gzip", ".gz", signature(b"\x1f", b"\x8b"), _Zlib, lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
          lambda raw: gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)),
    Codec("bzip2", ".bz2", signature(*(bytes([c]) for c in b"BZh"), b"123456789", *(bytes([c]) for c in b"1AY&SY")),
          # the codecs open streams that their callers close (SIM115 asks for a with: not here)
          bz2.BZ2Decompressor, lambda raw: bz2.BZ2File(raw, "rb"), lambda raw: bz2.BZ2File(raw, "wb")),  # noqa: SIM115
    Codec("xz", ".xz", signature(*(bytes([c]) for c in b"\xfd7zXZ\x00")), lzma.LZMADecompressor,
          lambda raw: lzma.LZMAFile(raw, "rb"), lambda raw: lzma.LZMAFile(raw, "wb")),  # noqa: SIM115
)
# Compressions nmt does not read or write, by signature and by suffix.
FOREIGN = {kind: (signature(*(bytes([c]) for c in magic)), suffix) for kind, magic, suffix in (
    ("zstd", b"\x28\xb5\x2f\xfd", ".zst"), ("zip", b"PK\x03\x04", ".zip"), ("7z", b"7z\xbc\xaf\x27\x1c", ".7z"),
    ("lz4", b"\x04\x22\x4d\x18", ".lz4"))}
SIGNATURES = [c.signature for c in CODECS] + [sig for sig, _ in FOREIGN.values()]


def undecided(head: bytes) -> bool:
    """Whether the first bytes `head` may still become a signature (wait for more before deciding): false
    at once for text, so that a line typed into a pipe is never kept waiting."""
    return any(could_become(head, sig) for sig in SIGNATURES)
KNOWN = ", ".join(c.name for c in CODECS)


def codec_of_bytes(head: bytes, name: str) -> Optional[Codec]:
    """The compression of data that starts with `head` (None: plain text); InputError naming `name` for
    a compression nmt cannot read."""
    for codec in CODECS:
        if matches(head, codec.signature):
            return codec
    for kind, (sig, _) in FOREIGN.items():
        if matches(head, sig):
            raise InputError(f"{name}: {kind}-compressed data; nmt reads plain text or {KNOWN}: decompress it first "
                             f"(or recompress it as gzip)")
    return None


def codec_of_name(name: str, option: str = "") -> Optional[Codec]:
    """The compression text written under `name` gets (None: plain); OutputError for a suffix of a
    compression nmt cannot write, rather than plain text under a name that promises otherwise."""
    for codec in CODECS:
        if name.endswith(codec.suffix):
            return codec
    for kind, (_, suffix) in FOREIGN.items():
        if name.endswith(suffix):
            where = f"{option} {name}" if option else name
            raise OutputError(f"{where}: nmt writes text plain or as {KNOWN} ({', '.join(c.suffix for c in CODECS)}), "
                              f"not {kind}; choose another name")
    return None


def blocks(head: bytes, read: Callable[[], bytes], name: str) -> Iterator[bytes]:
    """The bytes of a stream that begins with `head` and goes on with `read()` (b"" at its end), inflated
    when `head` shows a compression: in blocks of at most BLOCK bytes, each as soon as its input has
    arrived. Streams of one compression may follow one another (`cat a.gz b.gz`); zero bytes that pad
    the end are skipped, as gzip does. Damaged or truncated data is an InputError naming `name`."""
    codec = codec_of_bytes(head[:HEAD], name)
    if codec is None:
        block = head
        while block:
            yield block
            block = read()
        return
    decoder, fed, pending = codec.decompressor(), False, head
    while True:
        if not pending and (not fed or decoder.needs_input):
            pending = read()
            if not pending:
                break
        if not fed:
            pending = pending.lstrip(b"\0")  # padding after a stream
            if not pending:
                continue
        try:
            out = decoder.decompress(pending, BLOCK)
        except (zlib.error, OSError, EOFError, lzma.LZMAError) as e:
            raise InputError(f"{name}: not valid {codec.name} data ({e}); is the file complete?") from None
        pending, fed = b"", True
        if out:
            yield out
        if decoder.eof:  # one stream done; another may follow
            pending, decoder, fed = decoder.unused_data, codec.decompressor(), False
    if fed:
        raise InputError(f"{name}: the {codec.name} data ends early (the file is truncated); is the file complete?")


class _Closing(io.BufferedIOBase):
    """A decompressing file that closes the file under it too (GzipFile & co. leave a given file open)."""

    def __init__(self, inner: CompressedFile, raw: IO[bytes]):
        self._inner, self._raw = inner, raw

    def readable(self) -> bool:
        return True

    def read(self, size: Optional[int] = -1) -> bytes:
        return self._inner.read(size)

    def read1(self, size: int = -1) -> bytes:
        return self._inner.read1(size)

    def readline(self, size: Optional[int] = -1) -> bytes:
        return self._inner.readline(-1 if size is None else size)  # BZ2File refuses None (io's "no limit")

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._raw.close()
            super().close()


def decompressed(raw: IO[bytes], name: str) -> IO[bytes]:
    """`raw` (a buffered byte stream), decompressed when its first bytes show a compression. Looks at
    them without consuming them, so a pipe works as well as a file."""
    peek = getattr(raw, "peek", None)
    codec = codec_of_bytes(peek(HEAD)[:HEAD], name) if peek else None
    if codec is None:
        return raw
    # A BufferedIOBase is a binary file, but typeshed does not make it an IO[bytes] (nor GzipFile).
    return cast(IO[bytes], _Closing(codec.reader(raw), raw))


def read_small_text(path: Any, label: str, content: str, limit: int = SMALL_TEXT_LIMIT) -> str:
    """The whole of a small text file (plain or compressed, as every text file nmt reads), UTF-8 without its
    byte-order mark (Windows editors write one). InputError starting with `label` (e.g. "`config` c.toml")
    when it cannot be read, is damaged, is not UTF-8 or holds more than `limit` bytes once decompressed (a
    few kilobytes of gzip may inflate to gigabytes: they are never read whole); `content` says what it
    should hold."""
    try:
        with open(path, "rb") as f, decompressed(f, label) as data:
            raw = read_at_most(data, limit)
            if raw is None:
                inflated = " once decompressed" if data is not f else ""
                raise InputError(f"{label}: holds more than {size_text(limit)}{inflated}, more than nmt reads from "
                                 f"such a file; {content}")
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as e:
        # An OSError with an errno is the file system's; the others are damaged or truncated compressed data.
        hint = "check the path" if getattr(e, "errno", None) is not None else "is the file complete?"
        raise InputError(f"{label}: cannot read ({getattr(e, 'strerror', None) or e}); {hint}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{label}: not a text file (not UTF-8); {content}") from None


def read_at_most(data: IO[bytes], limit: int) -> Optional[bytes]:
    """All the bytes of `data`, block by block; None as soon as there are more than `limit` (never holding
    more than `limit` + 1)."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = data.read(min(BLOCK, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    return None


def size_text(n: int) -> str:
    """A size as a message says it: 16 MiB, 1 KiB, 100 bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


@contextlib.contextmanager
def compressing(raw: IO[bytes], codec: Codec) -> Iterator[CompressedFile]:
    """A file that compresses into `raw`; leaving the block writes the compression's trailer and leaves
    `raw` open."""
    packed = codec.writer(raw)
    try:
        yield packed
    finally:
        packed.close()
