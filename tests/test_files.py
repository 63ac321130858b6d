"""nmt.files: atomic writes into what is not a plain file."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from nmt.errors import OutputError
from nmt.files import atomic_write


def test_atomic_write_replaces_a_file_whole(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_write(out, "w") as f:
            f.write("half")
            raise RuntimeError("interrupted")
    assert out.read_text() == "old\n" and os.listdir(tmp_path) == ["out.txt"]
    with atomic_write(out, "w") as f:
        f.write("new\n")
    assert out.read_text() == "new\n" and os.listdir(tmp_path) == ["out.txt"]


def test_atomic_write_through_a_link_replaces_the_file_it_names(tmp_path):
    """`-o /dev/stdout` under `> FILE` is a link to FILE: the link stays a link."""
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    with atomic_write(link, "w") as f:
        f.write("new\n")
    assert link.is_symlink() and os.readlink(link) == str(target) and target.read_text() == "new\n"


def test_atomic_write_into_a_fifo_writes_in_place(tmp_path):
    """A FIFO (or a device such as /dev/null) cannot be replaced: renaming a file over it would swap the
    pipe for a plain file."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    with atomic_write(fifo, "w") as f:
        f.write("through the pipe\n")
    reader.join(timeout=30)
    assert got == ["through the pipe\n"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["pipe"]


def test_atomic_write_to_a_folder_is_an_output_error(tmp_path):
    with pytest.raises(OutputError, match="is a folder"):
        with atomic_write(tmp_path, "w") as f:
            f.write("x")
