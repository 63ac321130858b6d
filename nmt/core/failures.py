"""Which failures are the user's to fix, and how each reads: an exception as one line and an exit code.

The command line renders the line (nmt.cli.main); this module only decides it, so that it needs nothing
above the base layer.
"""

from __future__ import annotations

from nmt.core.errors import NmtError, os_error_message, ref


def is_torch_io_error(e: BaseException) -> bool:
    """torch's (de)serialiser reports failed reads and writes (a full disk, a truncated file) as
    RuntimeErrors; they are the user's to fix, not bugs."""
    if not isinstance(e, RuntimeError):
        return False
    text = str(e)
    return isinstance(e.__context__, OSError) or any(
        marker in text for marker in ("PytorchStreamWriter", "PytorchStreamReader", "file write failed",
                                      "unexpected pos", "failed finding central directory"))


def is_out_of_memory(e: BaseException) -> bool:
    """Python's MemoryError, or torch's (CPU allocator failures and CUDA's OutOfMemoryError)."""
    text = str(e)
    return isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text or type(e).__name__ == "OutOfMemoryError"))


def error_line(e: BaseException) -> tuple[str, int]:
    """The one line and exit code of an expected failure."""
    if isinstance(e, NmtError):
        return str(e), e.exit_code
    if is_out_of_memory(e):
        return (f"out of memory; lower {ref('max_tokens')} (or {ref('batch_size')}, {ref('beam')}), or use a "
                f"machine with more memory ({str(e).splitlines()[0][:120] if str(e) else 'MemoryError'})"), 1
    if isinstance(e, OSError):
        return os_error_message(e), 1
    cause = e.__context__ if isinstance(e.__context__, OSError) else None
    if cause is not None:
        return os_error_message(cause), 1
    return f"{str(e).splitlines()[0] if str(e) else type(e).__name__}; check the disk and the files named above", 1
