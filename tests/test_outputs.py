"""Outputs are never a user's files: every command that writes a folder refuses a user's folder of other files, every
command that writes a checkpoint or a model refuses a user's file of another kind, and an output inside an input (a
store's train.bin) is refused; each refusal is one line and leaves the user's files as they were. The table covers
every command that writes; the commands that write text (translate -o, eval --save-hyp) write over a file as the
shell's `>` does, and export replaces a folder only with --force."""

from __future__ import annotations

import pytest
from test_cli_robustness import assert_cli_error, cli

from nmt.core.errors import OutputError
from nmt.core.outputs import claim_file, claim_folder

PRECIOUS = "my own notes\n"

# (command and its arguments, with OUT for the destination; the destination: "folder" a user's folder holding
# train.en and train.de, "file" a user's text file train.de, "store" the --data store's train.bin)
COMMANDS = [
    (["bpe", "--train", "CORPUS/train.en", "--vocab-size", "300", "--out", "OUT"], "file"),
    (["prepare", "--bpe", "BPE", "--train", "CORPUS/train", "--src", "en", "--tgt", "de", "--out", "OUT"], "folder"),
    (["train", "--data", "DATA", "--out", "OUT", "--preset", "tiny", "--max-updates", "1"], "folder"),
    (["average", "CKPT", "CKPT2", "--out", "OUT"], "file"),
    (["distill", "-m", "CKPT", "--train", "CORPUS/train", "--src", "en", "--tgt", "de", "--out", "OUT"], "folder"),
    (["shortlist", "--model", "CKPT", "--data", "DATA", "--out", "OUT"], "store"),
    (["shortlist", "--model", "CKPT", "--data", "DATA", "--out", "OUT"], "file"),
    (["demo", "--out", "OUT"], "folder"),
    (["download", "multi30k", "--mirror", "CORPUS", "--out", "OUT"], "folder"),
    (["export", "CKPT", "OUT"], "folder"),
]


@pytest.mark.parametrize("args, kind", COMMANDS, ids=[f"{a[0]}-{k}" for a, k in COMMANDS])
def test_a_command_never_writes_over_a_users_files(args, kind, tiny_corpus, tiny_bpe, tiny_data, tiny_run, tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    for name in ("train.en", "train.de"):
        (user / name).write_text(PRECIOUS)
    if kind == "store":
        out = tmp_path / "data"
        out.mkdir()
        for p in tiny_data.iterdir():
            (out / p.name).write_bytes(p.read_bytes())
        before = (out / "train.bin").read_bytes()
        out = out / "train.bin"
    else:
        out = user if kind == "folder" else user / "train.de"
    values = {"OUT": out, "CORPUS": tiny_corpus, "BPE": tiny_bpe, "DATA": out.parent if kind == "store" else tiny_data,
              "CKPT": tiny_run / "checkpoint_00000030.pt", "CKPT2": tiny_run / "checkpoint_00000020.pt"}
    given = [str(values.get(a.split("/")[0], a)) + ("/" + a.split("/", 1)[1] if "/" in a else "") for a in args]
    assert_cli_error(cli(*given), str(out))
    for name in ("train.en", "train.de"):
        assert (user / name).read_text() == PRECIOUS
    if kind == "store":
        assert out.read_bytes() == before
    assert sorted(p.name for p in user.iterdir()) == ["train.de", "train.en"]  # nothing written beside them


@pytest.mark.parametrize("names, own, allowed", [
    ([], ("meta.json",), True),  # empty
    ([".nmt.lock"], ("meta.json",), True),  # only a lock: a run that never began
    (["meta.json", "train.bin"], ("meta.json",), True),  # the command's own
    (["checkpoint_00000100.pt"], ("checkpoint_*.pt*",), True),
    (["train.en"], ("meta.json",), False),
    (["notes.txt", "chunks"], ("distill.json", "chunks"), True),
])
def test_claim_folder(names, own, allowed, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    for name in names:
        (folder / name).mkdir() if name == "chunks" else (folder / name).write_text("x")
    if allowed:
        claim_folder(folder, "--out", own, "nmt x")
    else:
        with pytest.raises(OutputError, match="is not a folder nmt x made"):
            claim_folder(folder, "--out", own, "nmt x")
    claim_folder(tmp_path / "missing", "--out", own, "nmt x")


def test_claim_file(tmp_path):
    (tmp_path / "a").write_text("text")
    claim_file(tmp_path / "missing", "--out", lambda p: False, "a checkpoint")
    claim_file(tmp_path / "a", "--out", lambda p: True, "a checkpoint")
    with pytest.raises(OutputError, match="exists and is not a checkpoint"):
        claim_file(tmp_path / "a", "--out", lambda p: False, "a checkpoint")
