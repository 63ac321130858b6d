"""nmt.core.files: atomic writes into what is not a plain file."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.core.errors import OutputError
from nmt.core.files import atomic_write


def test_atomic_write_replaces_a_file_whole(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_write(out, "w") as f:
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
    with pytest.raises(OutputError, match="is a folder"), atomic_write(tmp_path, "w") as f:
        f.write("x")


# -- gzip both ways, byte-order marks ---------------------------------------------------------------

TEXT = "a man .\nzwei Hunde .\n\nüber 😀\n"


def gz(text: str, members: int = 1) -> bytes:
    """gzip of `text`, cut into `members` gzip members (as `cat a.gz b.gz` makes)."""
    import gzip

    data, cut = text.encode(), len(text.encode()) // members
    parts = [data[i * cut: (i + 1) * cut if i < members - 1 else None] for i in range(members)]
    return b"".join(gzip.compress(p) for p in parts)


def packed(kind: str, text: str) -> bytes:
    import bz2
    import lzma

    return {"bz2": bz2.compress, "xz": lzma.compress}[kind](text.encode())


@pytest.mark.parametrize("name, content", [
    ("plain.txt", TEXT.encode()),
    ("text.gz", gz(TEXT)),
    ("text.bz2", packed("bz2", TEXT)),
    ("text.xz", packed("xz", TEXT)),
    ("xz-named-txt.txt", packed("xz", TEXT)),
    ("two-bz2-streams.bz2", packed("bz2", TEXT[:10]) + packed("bz2", TEXT[10:])),
    ("gzip-named-txt.txt", gz(TEXT)),  # known by its bytes, not its name
    ("two-members.gz", gz(TEXT, members=2)),
    ("padded.gz", gz(TEXT) + b"\0" * 100),  # gzip skips zero padding: so does nmt
    ("bom-crlf.txt", ("\ufeff" + TEXT.replace("\n", "\r\n")).encode()),
    ("bom.gz", gz("\ufeff" + TEXT)),
])
def test_read_lines_and_byte_blocks_read_text_plain_or_gzip(tmp_path, name, content):
    from nmt.core.files import byte_blocks, count_lines, read_lines

    path = tmp_path / name
    path.write_bytes(content)
    expected = TEXT.split("\n")[:-1]
    assert list(read_lines(path)) == expected
    with open(path, "rb") as f:
        raw = b"".join(byte_blocks(f.fileno(), name)).decode()
    assert raw.lstrip("\ufeff").replace("\r\n", "\n") == TEXT
    assert count_lines(path) == len(expected)


@pytest.mark.parametrize("content, words", [
    (gz(TEXT)[:-12], ["ends early"]),  # truncated: the trailer is missing
    (gz(TEXT)[:15], ["ends early"]),
    (gz(TEXT) + b"garbage", ["not valid gzip data"]),
    (b"\x1f\x8b" + b"\x00" * 30, ["not valid gzip data"]),
    (packed("xz", TEXT)[:-10], ["xz"]),
    (packed("bz2", TEXT)[:-10], ["bzip2"]),
    (b"\x28\xb5\x2f\xfd" + b"\x00" * 20, ["zstd-compressed data", "decompress it first"]),
    (b"PK\x03\x04" + b"\x00" * 20, ["zip-compressed data"]),
])
def test_damaged_gzip_is_an_input_error_naming_the_file(tmp_path, content, words):
    from nmt.core.errors import InputError
    from nmt.core.files import byte_blocks, read_lines

    path = tmp_path / "damaged.gz"
    path.write_bytes(content)
    with pytest.raises(InputError, match="damaged.gz"):
        list(read_lines(path))
    with open(path, "rb") as f, pytest.raises(InputError) as e:
        list(byte_blocks(f.fileno(), str(path)))
    assert "damaged.gz" in str(e.value) and all(w in str(e.value) for w in words)


def test_byte_blocks_inflate_gzip_as_it_arrives():
    """A gzip stream whose writer flushes after each line: each line is readable before the next is written
    (what lets `... | gzip-flushing producer | nmt translate` answer line by line)."""
    import zlib

    from nmt.core.files import byte_blocks

    read_fd, write_fd = os.pipe()
    pack = zlib.compressobj(wbits=31)
    blocks = byte_blocks(read_fd, "pipe")
    try:
        for line in (b"first line\n", b"second line\n"):
            os.write(write_fd, pack.compress(line) + pack.flush(zlib.Z_SYNC_FLUSH))
            got = b""
            while not got.endswith(b"\n"):
                got += next(blocks)  # would block forever if byte_blocks waited for more input
            assert got == line
        os.write(write_fd, pack.flush())
        os.close(write_fd)
        assert b"".join(blocks) == b""
    finally:
        os.close(read_fd)


def test_byte_blocks_inflate_a_large_expansion_in_bounded_blocks():
    """A few kilobytes that inflate to 50 MB come out in blocks of at most READ_BLOCK bytes."""
    import gzip

    from nmt.core.files import READ_BLOCK, byte_blocks

    read_fd, write_fd = os.pipe()
    os.write(write_fd, gzip.compress(b"\n" * 50_000_000))
    os.close(write_fd)
    sizes = [len(b) for b in byte_blocks(read_fd, "pipe")]
    os.close(read_fd)
    assert sum(sizes) == 50_000_000 and max(sizes) <= READ_BLOCK


def test_atomic_write_gzips_text_named_gz(tmp_path):
    import gzip

    from nmt.core.files import read_lines

    for name in ("out.gz", "out.de.gz"):
        with atomic_write(tmp_path / name, "w") as f:
            f.write(TEXT)
        data = (tmp_path / name).read_bytes()
        assert data[:2] == b"\x1f\x8b" and gzip.decompress(data).decode() == TEXT
        assert list(read_lines(tmp_path / name)) == TEXT.split("\n")[:-1]
    assert (tmp_path / "out.gz").read_bytes() == (tmp_path / "out.de.gz").read_bytes()  # no name or time inside
    for name in ("out.bz2", "out.xz"):
        with atomic_write(tmp_path / name, "w") as f:
            f.write(TEXT)
        assert list(read_lines(tmp_path / name)) == TEXT.split("\n")[:-1]
        (tmp_path / name).unlink()
    with pytest.raises(OutputError, match="not zstd"), atomic_write(tmp_path / "out.zst", "w") as f:
        f.write(TEXT)
    with atomic_write(tmp_path / "model.gz", "wb") as f:  # binary files are written as given
        f.write(b"bytes")
    assert (tmp_path / "model.gz").read_bytes() == b"bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gz", "out.de.gz", "out.gz"]


def test_a_name_never_stands_for_its_gz(tmp_path):
    from nmt.core.errors import InputError
    from nmt.core.files import check_input_file, read_lines, resolve_prefixed

    (tmp_path / "x.gz").write_bytes(gz(TEXT))
    with pytest.raises(InputError, match="x.gz exists: give that name"):
        check_input_file(tmp_path / "x", "--input")
    with pytest.raises(InputError, match="x.gz exists: give that name"):
        list(read_lines(tmp_path / "x"))
    assert resolve_prefixed(tmp_path / "x") == tmp_path / "x.gz"  # a prefix file (prepare): PREFIX.SRC or .gz
    (tmp_path / "x").write_text("other text\n")
    with pytest.raises(InputError, match="both exist"):
        resolve_prefixed(tmp_path / "x")


# -- an output is never an input --------------------------------------------------------------------


def outputs_error(outputs, inputs, **kw) -> str:
    from nmt.core.errors import OutputError
    from nmt.core.outputs import check_outputs

    with pytest.raises(OutputError) as e:
        check_outputs(outputs, inputs, **kw)
    return str(e.value)


def test_check_outputs_finds_an_input_by_path_link_and_inode(tmp_path):
    from nmt.core.outputs import Output, check_outputs

    (tmp_path / "c.txt").write_text("corpus\n")
    (tmp_path / "sub").mkdir()
    os.link(tmp_path / "c.txt", tmp_path / "hard.txt")
    (tmp_path / "soft.txt").symlink_to(tmp_path / "c.txt")
    inputs = [("--train", tmp_path / "c.txt")]
    for spelling in (tmp_path / "c.txt", tmp_path / "sub" / ".." / "c.txt", tmp_path / "hard.txt", tmp_path / "soft.txt"):
        message = outputs_error([Output("--out", spelling)], inputs)
        assert message.startswith(f"--out {spelling} is also the input --train {tmp_path / 'c.txt'}")
    assert "through a link" in outputs_error([Output("--out", tmp_path / "hard.txt")], inputs)
    check_outputs([Output("--out", tmp_path / "new.txt")], inputs)  # a new file, or another one, is fine
    check_outputs([Output("--out", Path("/dev/null"))], [("--input", Path("/dev/null"))])  # devices hold no data


def test_check_outputs_folders_and_what_they_own(tmp_path):
    from nmt.core.outputs import Output, check_outputs

    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint_00000002.pt").write_bytes(b"x")
    (run / "keep.pt").write_bytes(b"x")
    owns = lambda relative, option: relative.startswith("checkpoint_")  # noqa: E731
    message = outputs_error([Output("--out", run, folder=True, owns=owns)], [("--init-from", run / "checkpoint_00000002.pt")])
    assert "holds the input --init-from" in message
    check_outputs([Output("--out", run, folder=True, owns=owns)], [("--init-from", run / "keep.pt")])
    assert "holds" in outputs_error([Output("OUT_DIR", run, folder=True)], [("MODEL", run / "keep.pt")])  # replaced whole
    assert "is also the input --data" in outputs_error([Output("--out", run, folder=True)], [("--data", run)])
    check_outputs([Output("--out", run / "sub", folder=True)], [("--data", run)])  # a run folder inside the data's
    assert "is also the output --output" in outputs_error(
        [Output("--output", tmp_path / "a"), Output("--attention", tmp_path / "a", folder=True)], [])


@pytest.mark.parametrize("fd", [1, 2])
def test_check_outputs_refuses_stdout_and_stderr_redirected_to_an_input(tmp_path, fd):
    """`nmt ... -i c.txt > c.txt`: the shell emptied c.txt already; nmt says so instead of translating nothing."""
    import subprocess
    import sys

    (tmp_path / "c.txt").write_text("text\n")
    code = ("from pathlib import Path; from nmt.core.outputs import check_outputs; from nmt.core.errors import OutputError\n"
            "try: check_outputs([], [('--input', Path('c.txt'))])\n"
            "except OutputError as e: print(e, file=open('message', 'w'))\n")
    with open(tmp_path / "c.txt", "a") as redirect:  # `>> c.txt`: not even emptied, still refused
        subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=60,
                       **{"stdout" if fd == 1 else "stderr": redirect})
    stream = "stdout" if fd == 1 else "stderr"
    assert (tmp_path / "message").read_text().startswith(f"{stream} is redirected to the input --input c.txt")


@pytest.mark.parametrize("appends, refused", [(False, True), (True, False)])
def test_stderr_onto_an_output_is_refused_unless_the_output_is_appended_to(tmp_path, appends, refused):
    """`-o out.de 2>> out.de`: what nmt says is gone when the output replaces the file; a log nmt appends to
    (serve --access-log) may take stderr too."""
    import subprocess
    import sys

    code = ("from pathlib import Path; from nmt.core.outputs import Output, check_outputs\n"
            "from nmt.core.errors import OutputError\n"
            f"try: check_outputs([Output('--output', Path('o.txt'), appends={appends})], [])\n"
            "except OutputError as e: open('message', 'w').write(str(e))\n")
    with open(tmp_path / "o.txt", "a") as err:
        subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=60, stderr=err)
    assert (tmp_path / "message").exists() == refused
    if refused:
        assert (tmp_path / "message").read_text().startswith("stderr is redirected to the output --output o.txt")


def test_check_outputs_refuses_stdin_read_from_an_output(tmp_path):
    import subprocess
    import sys

    (tmp_path / "x.txt").write_text("text\n")
    code = ("from pathlib import Path; from nmt.core.outputs import Output, check_outputs; from nmt.core.errors import OutputError\n"
            "check_outputs([Output('--output', Path('x.txt'))], [])\n"
            "try: check_outputs([Output('--output', Path('x.txt'))], [], reads_stdin=True)\n"
            "except OutputError as e: print(e)\n")
    with open(tmp_path / "x.txt", "rb") as stdin:
        r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, stdin=stdin, capture_output=True, text=True,
                           timeout=60, check=True)
    assert r.stdout.startswith("stdin is read from --output x.txt")


@pytest.mark.parametrize("stream, mode, refused", [
    ("stdout", "a", True),  # `< x.txt >> x.txt`: its own output read back, without end
    ("stdout", "r+", True),  # `< x.txt 1<> x.txt`
    ("stderr", "a", True),
    ("stdout", None, False),  # another file
])
def test_check_outputs_refuses_stdout_or_stderr_onto_the_file_stdin_reads(tmp_path, stream, mode, refused):
    """A command that reads stdin, its stdout (or stderr) the same file: refused before any work, whatever the
    command's own inputs (the shell gave the file, not an option)."""
    import subprocess
    import sys

    (tmp_path / "x.txt").write_text("text\n")
    code = ("from nmt.core.outputs import check_outputs; from nmt.core.errors import OutputError\n"
            "try: check_outputs([], [], reads_stdin=True)\n"
            "except OutputError as e: open('message', 'w').write(str(e))\n")
    with open(tmp_path / "x.txt", "rb") as stdin, open(tmp_path / ("x.txt" if mode else "other"), mode or "w") as out:
        subprocess.run([sys.executable, "-c", code], cwd=tmp_path, stdin=stdin, check=True, timeout=60,
                       **{stream: out})
    message = tmp_path / "message"
    assert message.exists() == refused
    if refused:
        assert message.read_text().startswith(f"{stream} is redirected to the file that stdin reads (")
        assert (tmp_path / "x.txt").read_text() == "text\n"


@pytest.mark.parametrize("stderr_onto, stdout_onto", [("glossary", "out"), ("input", "out"), ("glossary", None)])
def test_stderr_onto_an_input_leaves_it_as_it_was(tiny_checkpoint, tmp_path, stderr_onto, stdout_onto):
    """`nmt translate --glossary g.tsv < x 2>> g.tsv`: the refusal, said on stderr, would break the glossary; it is
    said on stdout (where that is another file), else only by the exit code."""
    import subprocess
    import sys

    from test_cli import ENV

    files = {"glossary": tmp_path / "g.tsv", "input": tmp_path / "in.en", "out": tmp_path / "out.txt"}
    files["glossary"].write_text("man\tMann\n")
    files["input"].write_text("a man .\n")
    with open(files["input"], "rb") as stdin, open(files[stderr_onto], "ab") as err, \
            open(files[stdout_onto] if stdout_onto else files[stderr_onto], "ab") as out:
        r = subprocess.run([sys.executable, "-m", "nmt", "translate", "-m", str(tiny_checkpoint),
                            "--glossary", str(files["glossary"])], stdin=stdin, stdout=out, stderr=err, env=ENV,
                           timeout=120)
    assert r.returncode == 1
    assert files["glossary"].read_text() == "man\tMann\n" and files["input"].read_text() == "a man .\n"
    if stdout_onto:
        assert files["out"].read_text().startswith("error: stderr is redirected to ")


@given(st.lists(st.sampled_from(["a", "b", "d/a", "d/../a", "./b", "link-a", "hard-b", "d", "new"]), min_size=1,
                max_size=4), st.sampled_from(["a", "b", "d/a", "./a", "link-a", "hard-b", "new", "d/new"]))
@settings(max_examples=200, deadline=None)
def test_check_outputs_refuses_exactly_the_outputs_that_are_inputs(tmp_path_factory, inputs, output):
    """Whatever the spelling (relative parts, symbolic or hard links), an output file is refused exactly
    when it names the same file as an input (or, not there yet, the same path)."""
    from nmt.core.errors import OutputError
    from nmt.core.outputs import Output, check_outputs

    root = tmp_path_factory.mktemp("paths")
    (root / "d").mkdir()
    for name in ("a", "b", "d/a"):
        (root / name).write_text(name)
    (root / "link-a").symlink_to(root / "a")
    os.link(root / "b", root / "hard-b")
    hard = {os.path.realpath(root / "hard-b"): os.path.realpath(root / "b")}  # one inode, two names
    key = lambda name: hard.get(os.path.realpath(root / name), os.path.realpath(root / name))  # noqa: E731
    clash = any(key(output) == key(i) for i in inputs)
    try:
        check_outputs([Output("--out", root / output)], [("--in", root / i) for i in inputs])
        refused = False
    except OutputError:
        refused = True
    assert refused == clash


@pytest.mark.parametrize("first", [b"ok\n", b"P\n", b"BZh\n", b"\x1f\n"])
def test_byte_blocks_never_wait_for_more_than_text_needs(first):
    """A short first line (even one that starts like a signature) is passed on at once: waiting for the
    bytes that would tell a compression apart would hold up an interactive pipe."""
    from nmt.core.files import byte_blocks

    read_fd, write_fd = os.pipe()
    os.write(write_fd, first)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(next(byte_blocks(read_fd, "pipe"))), daemon=True)
    reader.start()
    reader.join(timeout=10)
    os.close(write_fd)
    os.close(read_fd)
    assert got == [first]


def test_a_lock_file_that_cannot_be_written_names_the_option_and_the_file(tmp_path, monkeypatch):
    import errno

    from nmt.core.files import LOCK_NAME, folder_lock

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(OutputError) as e, folder_lock(tmp_path / "data", "--out"):
        pass
    assert str(e.value) == (f"--out {tmp_path / 'data' / LOCK_NAME}: cannot write (No space left on device); free "
                            "disk space or choose another location")
