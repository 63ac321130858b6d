"""The `nmt` command, run as a real process: help, the whole pipeline, resuming, and user errors.

Error paths go through `python -m nmt` (nmt.cli.main.main) so that exit codes and stderr are the real ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from nmt.config import to_dict
from nmt.core.files import LOCK_NAME
from nmt.documents.streams import translate_file
from nmt.engines.search import SearchConfig
from nmt.engines.torch_engine import TorchEngine
from nmt.model import checkpoint

NMT_SCRIPT = Path(sys.executable).parent / "nmt"
ENV = {k: v for k, v in os.environ.items() if k not in ("NMT_DEBUG", "FORCE_COLOR", "PYTHONWARNINGS")}
ENV.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NO_COLOR="1")


def subcommands() -> list[str]:
    """Every subcommand of the app (so that new ones are covered by the help test too)."""
    import typer.main

    from nmt.cli.main import app

    return sorted(typer.main.get_command(app).commands)


SUBCOMMANDS = subcommands()

# e2e training (2000 training pairs, BPE 1000, tiny preset, warmup 100, one thread): measured greedy
# validation BLEU 4 after 70 updates, 10 after 80, 24 after 100, 41 after 120; the average of the
# checkpoints at 110 and 120 scored 39.9 BLEU 13a cased (beam 4) on the first 200 test lines.
# Training takes 45-60 s of wall time on a 2-core machine shared with other work.
E2E_UPDATES = 120
E2E_MIN_BLEU = 10.0




def nmt(*args, input: bytes | str | None = None, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `python -m nmt ARGS`; stdout and stderr as text."""
    if isinstance(input, str):
        input = input.encode("utf-8")
    r = subprocess.run([sys.executable, "-m", "nmt", *map(str, args)], input=input, capture_output=True,
                       env=ENV, timeout=timeout, cwd=cwd)
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode("utf-8", "replace"),
                                       r.stderr.decode("utf-8", "replace"))


def ok(r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert r.returncode == 0, f"{r.args} failed ({r.returncode}):\n{r.stderr[-3000:]}"
    return r


def assert_user_error(r: subprocess.CompletedProcess, *words: str) -> str:
    """Exit code 1, nothing on stdout, and exactly one stderr line, starting with "error:", no traceback."""
    assert r.returncode == 1, f"exit code {r.returncode}; stderr:\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.stdout == ""
    lines = r.stderr.strip("\n").splitlines()
    assert len(lines) == 1, f"expected one stderr line, got:\n{r.stderr}"
    assert lines[0].startswith("error: "), lines[0]
    for w in words:
        assert w in lines[0], f"{w!r} not in {lines[0]!r}"
    return lines[0]


def digest(folder: Path) -> dict[str, str]:
    """sha256 of each file in `folder` but the lock file (which holds the pid of its last user)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.is_file() and p.name != LOCK_NAME}


# -- help ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [[]] + [[c] for c in SUBCOMMANDS], ids=["nmt"] + SUBCOMMANDS)
def test_help(command):
    exe = [str(NMT_SCRIPT)] if NMT_SCRIPT.exists() else [sys.executable, "-m", "nmt"]
    r = subprocess.run(exe + command + ["--help"], capture_output=True, text=True, env=ENV, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Example" in r.stdout
    assert "Traceback" not in r.stderr


# -- the whole pipeline ----------------------------------------------------------------------------


@pytest.mark.slow
def test_pipeline_end_to_end(tiny_corpus, tmp_path):
    c = tiny_corpus
    r = ok(nmt("bpe", "--train", c / "train.en", c / "train.de", "--vocab-size", 1000, "--out", tmp_path / "bpe.model"))
    assert r.stdout == ""  # youtokentome's chatter must not reach stdout
    ok(nmt("prepare", "--bpe", tmp_path / "bpe.model", "--train", c / "train", "--valid", c / "valid",
           "--src", "en", "--tgt", "de", "--out", tmp_path / "data"))
    run = tmp_path / "run"
    ok(nmt("train", "--data", tmp_path / "data", "--out", run, "--preset", "tiny", "--max-updates", E2E_UPDATES,
           "--warmup", 100, "--save-interval", 10, "--keep-last", 2, "--valid-interval", 1000, "--threads", 1))
    assert [p.name for p in checkpoint.step_checkpoints(run)] == ["checkpoint_00000110.pt", "checkpoint_00000120.pt"]
    avg = tmp_path / "averaged.pt"
    r = ok(nmt("average", run, "--last", 2, "--out", avg))
    assert avg.is_file() and "2 checkpoints" in r.stderr

    # translate: stdin -> stdout, one line per input line, and nothing else on stdout
    src_lines = (c / "test.en").read_text(encoding="utf-8").splitlines()
    r = ok(nmt("translate", "--model", avg, "--threads", 1, input="".join(s + "\n" for s in src_lines)))
    assert r.stdout.endswith("\n")
    hyps = r.stdout[:-1].split("\n")
    assert len(hyps) == len(src_lines)
    assert hyps == translate_file(TorchEngine(avg, SearchConfig()), None, src_lines)  # the CLI's defaults
    (tmp_path / "hyp.de").write_text(r.stdout, encoding="utf-8")

    # eval --model: translate and score
    r = ok(nmt("eval", "--model", avg, "--src", c / "test.en", "--ref", c / "test.de", "--json", "--threads", 1,
               "--save-hyp", tmp_path / "saved.de"))
    report = json.loads(r.stdout)
    assert set(report) >= {"hyp", "ref", "lines", "scores"}
    assert report["lines"] == len(src_lines)
    scores = {s["metric"]: s for s in report["scores"]}
    assert set(scores) >= {"BLEU 13a cased", "BLEU 13a uncased", "BLEU intl cased", "BLEU intl uncased", "chrF"}
    for s in scores.values():
        assert set(s) >= {"metric", "score", "signature", "detail"} and 0.0 <= s["score"] <= 100.0
    bleu = scores["BLEU 13a cased"]["score"]
    assert bleu > E2E_MIN_BLEU, f"the tiny model did not learn: BLEU {bleu}"
    assert "tok:13a" in scores["BLEU 13a cased"]["signature"]
    assert (tmp_path / "saved.de").read_text(encoding="utf-8") == "".join(h + "\n" for h in hyps)

    # eval --hyp: scoring the translate output gives the same numbers (here as a table)
    r = ok(nmt("eval", "--hyp", tmp_path / "hyp.de", "--ref", c / "test.de"))
    for metric, s in scores.items():
        row = rf"^\s*{re.escape(metric)}\s+{s['score']:.2f}\s+{re.escape(s['signature'])}\s*$"
        assert re.search(row, r.stdout, re.MULTILINE), f"no row {metric} {s['score']:.2f} in:\n{r.stdout}"


# -- train: resume, and refusing a different model -------------------------------------------------


def test_train_resume_then_refuse_other_model(tiny_data, tmp_path):
    run = tmp_path / "run"
    common = ["train", "--data", tiny_data, "--out", run, "--preset", "tiny", "--threads", 1,
              "--max-tokens", 1024, "--update-tokens", 1024]
    ok(nmt(*common, "--max-updates", 4))
    assert [p.name for p in checkpoint.step_checkpoints(run)] == ["checkpoint_00000004.pt"]
    r = ok(nmt(*common, "--max-updates", 8))
    assert "resum" in r.stderr
    last = checkpoint.latest(run)
    assert last.name == "checkpoint_00000008.pt"
    assert checkpoint.load(last).state.updates == 8
    assert (run / "checkpoint_00000004.pt").is_file()

    before = digest(run)
    r = nmt(*common, "--max-updates", 12, "--d-model", 32)
    line = assert_user_error(r, "d_model")
    assert "64" in line and "32" in line
    assert digest(run) == before  # existing checkpoints (and the log) untouched


# -- user errors: one line, exit code 1, no traceback ----------------------------------------------


def test_error_bpe_missing_train_file(tmp_path):
    assert_user_error(nmt("bpe", "--train", tmp_path / "nope.en", "--out", tmp_path / "bpe.model"), "nope.en")
    assert not (tmp_path / "bpe.model").exists()


def test_error_prepare_unequal_lengths(tiny_bpe, tmp_path):
    (tmp_path / "c.en").write_text("one\ntwo\nthree\n", encoding="utf-8")
    (tmp_path / "c.de").write_text("eins\nzwei\n", encoding="utf-8")
    assert_user_error(nmt("prepare", "--bpe", tiny_bpe, "--train", tmp_path / "c", "--src", "en", "--tgt", "de",
                          "--out", tmp_path / "data"), "c.en", "c.de")


def test_error_prepare_empty_corpus(tiny_bpe, tmp_path):
    (tmp_path / "c.en").write_bytes(b"")
    (tmp_path / "c.de").write_bytes(b"")
    assert_user_error(nmt("prepare", "--bpe", tiny_bpe, "--train", tmp_path / "c", "--src", "en", "--tgt", "de",
                          "--out", tmp_path / "data"), "empty")
    assert not (tmp_path / "data" / "meta.json").exists()


def test_error_invalid_utf8_training_file(tmp_path):
    bad = tmp_path / "bad.en"
    bad.write_bytes(b"a fine line\nlatin-1 \xe9t\xe9\n")
    assert_user_error(nmt("bpe", "--train", bad, "--vocab-size", 50, "--out", tmp_path / "bpe.model"), "bad.en", "UTF-8")


def test_error_invalid_utf8_names_the_right_line(tiny_bpe, tmp_path):
    """The message must name the line that holds the bad bytes (here line 300), not the start of the read block."""
    good = "".join(f"a good line number {i}\n" for i in range(1, 300)).encode()
    (tmp_path / "c.en").write_bytes(good + b"caf\xe9\n" + b"ok\n")
    (tmp_path / "c.de").write_bytes(good + b"Kaffee\n" + b"ok\n")
    line = assert_user_error(nmt("prepare", "--bpe", tiny_bpe, "--train", tmp_path / "c", "--src", "en", "--tgt", "de",
                                 "--out", tmp_path / "data"), "c.en", "UTF-8")
    assert "line 300 " in line


def test_error_translate_truncated_checkpoint(tiny_checkpoint, tmp_path):
    data = tiny_checkpoint.read_bytes()
    bad = tmp_path / "truncated.pt"
    bad.write_bytes(data[: len(data) // 2])
    assert_user_error(nmt("translate", "--model", bad, input="A dog runs.\n"), "truncated.pt")


@pytest.mark.parametrize("content", [b"This is a text file, not a model.\n", b"e."], ids=["text", "pickle-stack-underflow"])
def test_error_translate_foreign_model(tmp_path, content):
    bad = tmp_path / "notes.txt"
    bad.write_bytes(content)
    assert_user_error(nmt("translate", "--model", bad, input="A dog runs.\n"), "notes.txt")


def test_error_eval_line_counts(tmp_path):
    (tmp_path / "hyp.de").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "ref.de").write_text("a\nb\n", encoding="utf-8")
    assert_user_error(nmt("eval", "--hyp", tmp_path / "hyp.de", "--ref", tmp_path / "ref.de"), "hyp.de", "ref.de")


def test_error_average_empty_folder(tmp_path):
    (tmp_path / "run").mkdir()
    assert_user_error(nmt("average", tmp_path / "run", "--out", tmp_path / "avg.pt"), "run")
    assert not (tmp_path / "avg.pt").exists()


def test_error_average_last_too_large(tiny_run, tmp_path):
    assert_user_error(nmt("average", tiny_run, "--last", 9, "--out", tmp_path / "avg.pt"), "--last")
    assert not (tmp_path / "avg.pt").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_error_train_gpus_without_cuda(tiny_data, tmp_path):
    assert_user_error(nmt("train", "--data", tiny_data, "--out", tmp_path / "run", "--preset", "tiny", "--gpus", 1), "--gpus")
    assert not list((tmp_path).glob("run/checkpoint_*"))


def test_debug_shows_traceback(tmp_path):
    (tmp_path / "run").mkdir()
    r = nmt("--debug", "average", tmp_path / "run", "--out", tmp_path / "avg.pt")
    assert r.returncode == 1
    assert "Traceback" in r.stderr and "InputError" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: ")


# -- translate as a Unix filter --------------------------------------------------------------------


def test_translate_pipe_one_line_per_input(tiny_checkpoint, tmp_path):
    lines = ["A man is riding a bicycle.", "", "   ", "Two dogs are playing in the snow.", "", "x", "\t", ""]
    r = ok(nmt("translate", "--model", tiny_checkpoint, "--beam", 2, "--threads", 1, input="\n".join(lines) + "\n"))
    out = r.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    for src, hyp in zip(lines, out):
        if not src.strip():
            assert hyp == src  # nothing to translate: the line's own spaces come back (none with --no-split)
    assert out[0] and out[3]  # real sentences get real translations
    # From --input, with no final newline: the same lines.
    (tmp_path / "in.en").write_text("\n".join(lines[:-1]), encoding="utf-8")
    r2 = ok(nmt("translate", "--model", tiny_checkpoint, "--beam", 2, "--threads", 1, "--input", tmp_path / "in.en"))
    assert r2.stdout == "".join(line + "\n" for line in out[: len(lines) - 1])


def test_translate_nbest_cli(tiny_checkpoint):
    r = ok(nmt("translate", "--model", tiny_checkpoint, "--beam", 3, "--nbest", 3, "--threads", 1,
               input="A dog runs.\nTwo women are talking.\n"))
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    assert [(f[0], f[1]) for f in rows] == [("0", "0"), ("0", "1"), ("0", "2"), ("1", "0"), ("1", "1"), ("1", "2")]


def test_translate_output_file_is_what_stdout_gets(tiny_checkpoint, tmp_path):
    text = "A dog runs.\n\nTwo women are talking.\n"
    stdout = ok(nmt("translate", "-m", tiny_checkpoint, "--threads", 1, input=text)).stdout
    out = tmp_path / "sub" / "out.de"
    r = ok(nmt("translate", "-m", tiny_checkpoint, "--threads", 1, "-o", out, input=text))
    assert r.stdout == "" and out.read_text(encoding="utf-8") == stdout
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.de"]  # no temporary file left


@pytest.mark.parametrize("make_target, words", [
    (lambda tmp: tmp, ["--output", "is a folder"]),
    (lambda tmp: (tmp / "file").write_text("x") and tmp / "file" / "out.de", ["--output"]),
])
def test_translate_bad_output_is_one_line_before_translating(tiny_checkpoint, tmp_path, make_target, words):
    assert_user_error(nmt("translate", "-m", tiny_checkpoint, "-o", make_target(tmp_path), input="A dog.\n"), *words)


def test_translate_output_keeps_the_old_file_when_interrupted(tiny_checkpoint, tmp_path):
    """Ctrl-C while stdin is still open: the earlier file stays as it was and no temporary file is left."""
    out = tmp_path / "out.de"
    out.write_text("earlier\n")
    # A suite started in the background of a script (`make test &`) inherits SIGINT ignored, as the shell
    # wants for background jobs; Python then keeps ignoring it. Ctrl-C reaches a foreground nmt: so here.
    proc = subprocess.Popen([sys.executable, "-m", "nmt", "translate", "-m", str(tiny_checkpoint), "-o", str(out)],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    proc.stdin.write(b"A dog runs.\n")
    proc.stdin.flush()
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".out.de.*.tmp")):  # the output is open: the model is loaded
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and b"Traceback" not in stderr, stderr
    assert out.read_text() == "earlier\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.de"]


def test_translate_streams_line_by_line(tiny_checkpoint):
    """A line written to the pipe gets its translation back while stdin is still open."""
    proc = subprocess.Popen([sys.executable, "-m", "nmt", "translate", "--model", str(tiny_checkpoint), "--beam", "2",
                             "--threads", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=ENV)
    got: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [got.put(line) for line in iter(proc.stdout.readline, b"")], daemon=True).start()
    try:
        proc.stdin.write(b"A man is riding a bicycle.\n")
        proc.stdin.flush()
        first = got.get(timeout=120)  # model loading included
        assert first.endswith(b"\n") and first.strip()
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        assert got.get(timeout=60) == b"\n"
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert got.empty()


# -- nmt train's options and the config fields -----------------------------------------------------


def train_options() -> dict[str, list[str]]:
    """Python name -> option strings of each `nmt train` option."""
    import typer.main

    from nmt.cli.main import app

    command = typer.main.get_command(app).commands["train"]
    return {p.name: p.opts for p in command.params}


def test_every_config_field_is_a_train_option_and_back():
    """A field is declared once, in nmt/config.py: `nmt train` has its option (named as declared), and
    every other option is one of the command's own (launch) options."""
    from nmt.config import ModelConfig, TrainConfig, fields_of, spec_of
    from nmt.config.flags import flag

    options = train_options()
    declared = {name for cls in (ModelConfig, TrainConfig) for name, f in fields_of(cls).items() if spec_of(f).cli}
    assert declared <= set(options), "config fields without an option"
    own = set(options) - declared
    assert own == {"data", "out", "preset", "gpus", "nproc", "threads", "layers", "config", "print_config"}
    for cls in (ModelConfig, TrainConfig):
        for name in fields_of(cls):
            if name in declared:
                assert flag(name) in options[name]


def test_train_options_reach_the_config(tiny_data, tmp_path):
    """Options the other train tests do not set end up in the stored configs."""
    ok(nmt("train", "--data", str(tiny_data), "--out", str(tmp_path), "--preset", "tiny", "--max-updates", "1",
           "--layers", "1", "--decoder-layers", "2", "--heads", "2", "--adam-betas", "0.8", "0.9", "--adam-eps", "1e-7",
           "--max-epochs", "3", "--norm", "post", "--threads", "1"))
    ckpt = checkpoint.load(checkpoint.latest(tmp_path))
    model, train = to_dict(ckpt.model_config), to_dict(ckpt.train_config)
    assert (model["encoder_layers"], model["decoder_layers"], model["n_heads"], model["norm"]) == (1, 2, 2, "post")
    assert (train["adam_betas"], train["adam_eps"], train["max_epochs"]) == ([0.8, 0.9], 1e-7, 3)


def test_eval_reads_stdin_and_compares_systems(tmp_path):
    ref = tmp_path / "ref.de"
    good = "ein großer Hund läuft über die Wiese\nzwei kleine Katzen schlafen auf dem Sofa\n"
    ref.write_text(good)
    base = tmp_path / "base.de"
    base.write_text("ein Hund rennt über eine Wiese\nzwei Katze schläft auf das Sofa\n")
    r = ok(nmt("eval", "--ref", ref, "--json", input=good))
    assert json.loads(r.stdout)["hyp"] == "stdin" and json.loads(r.stdout)["scores"][0]["score"] == 100.0
    r = ok(nmt("eval", "--ref", ref, "--hyp", base, "--hyp", "-", "--paired-bs", "--paired-bs-n", "50", "--json",
               input=good))
    found = {(x["system"], x["metric"]): x for x in json.loads(r.stdout)["paired_bs"]}
    assert found[(str(base), "TER")]["p_value"] is None and found[("stdin", "BLEU 13a cased")]["score"] == 100.0
    assert_user_error(nmt("eval", "--ref", ref, "--hyp", base, "--paired-bs"), "--paired-bs", "two or more")


def test_eval_scores_alike_on_both_engines(tiny_checkpoint, tiny_corpus, tmp_path):
    """`nmt eval --model` on torch and on CTranslate2: the same translations, so the same scores; auto says
    which engine it took on stderr, the one named with --engine says nothing."""
    pytest.importorskip("ctranslate2")
    from typer.testing import CliRunner

    from nmt.cli.main import app

    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    for path, name in ((src, "test.en"), (ref, "test.de")):
        path.write_text("".join((tiny_corpus / name).read_text(encoding="utf-8").splitlines(keepends=True)[:20]))
    found = {}
    for engine in ("torch", "ctranslate2", "auto"):
        r = CliRunner().invoke(app, ["eval", "-m", str(tiny_checkpoint), "--src", str(src), "--ref", str(ref), "--json",
                                     "--engine", engine, "--threads", "1", "--save-hyp", str(tmp_path / f"{engine}.de")])
        assert r.exit_code == 0, r.output
        found[engine] = json.loads(r.stdout)["scores"]
        assert ("engine: " in r.stderr) == (engine == "auto"), r.stderr
    assert found["torch"] == found["ctranslate2"] == found["auto"]
    assert (tmp_path / "torch.de").read_text() == (tmp_path / "ctranslate2.de").read_text()


# -- configuration files ---------------------------------------------------------------------------


def test_config_file_and_options_agree(tiny_data, tmp_path):
    """Every field set in a --config file gives the configuration the matching option gives, and options
    override the file."""
    from dataclasses import fields

    from nmt.config import ModelConfig, TrainConfig, spec_of
    from nmt.config.flags import flag

    # A value other than the tiny preset's for every settable field, through options...
    values = {"d_model": 48, "n_heads": 3, "encoder_layers": 2, "decoder_layers": 3, "d_ff": 96, "dropout": 0.2,
              "attention_dropout": 0.05, "activation_dropout": 0.15, "max_positions": 200, "positions": "learned",
              "norm": "post", "max_tokens": 999, "update_tokens": 1999, "lr_factor": 1.5, "warmup": 77,
              "adam_betas": (0.8, 0.95), "adam_eps": 1e-8, "label_smoothing": 0.2, "clip_norm": 1.5,
              "max_updates": 321, "max_epochs": 9, "max_time": 60.5, "save_interval": 11, "keep_last": 3,
              "valid_interval": 13, "log_interval": 7, "seed": 5, "precision": "fp32", "max_bad_updates": 4,
              "valid_bleu_sentences": 9, "valid_beam": 2, "patience": 3, "lr_tail": "cosine", "lr_tail_share": 0.3, "bpe_dropout": 0.1,
                  "pair_temperature": 2.5,
              "activation": "gelu", "scale_embeddings": False}
    # init_from takes the architecture from a checkpoint, and the reset options act only with it:
    # tests/test_fine_tuning.py covers them; fields without an option (output_bias) come from an import
    settable = {f.name for cls in (ModelConfig, TrainConfig) for f in fields(cls) if spec_of(f).cli} - {
        "vocab_size", "init_from", "reset_optimizer", "reset_lr_scheduler"}
    assert set(values) == settable  # a new field needs a value here
    args = []
    for name, value in values.items():
        if isinstance(value, bool):  # a --flag/--no-flag pair
            args.append(flag(name, off=not value))
            continue
        args += [flag(name), *map(str, value)] if isinstance(value, tuple) else [flag(name), str(value)]
    base = ["train", "--data", tiny_data, "--out", tmp_path / "run", "--preset", "tiny", "--print-config"]
    from_options = ok(nmt(*base, *args)).stdout
    # ... and through a file: the printed configuration is such a file
    config = tmp_path / "run.toml"
    config.write_text(from_options)
    assert ok(nmt(*base, "--config", config)).stdout == from_options
    overridden = ok(nmt(*base, "--config", config, "--d-model", "60", "--heads", "4")).stdout
    assert "d_model = 60" in overridden and "n_heads = 4" in overridden and "d_ff = 96" in overridden


def test_a_run_writes_its_config_and_it_trains_the_same(tiny_data, tmp_path):
    ok(nmt("train", "--data", tiny_data, "--out", tmp_path / "a", "--preset", "tiny", "--max-updates", "2",
           "--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff", "64", "--threads", "1"))
    written = (tmp_path / "a" / "config.toml").read_text()
    ok(nmt("train", "--data", tiny_data, "--out", tmp_path / "b", "--config", tmp_path / "a" / "config.toml",
           "--threads", "1"))
    assert (tmp_path / "b" / "config.toml").read_text() == written
    a = checkpoint.load(checkpoint.latest(tmp_path / "a"))
    b = checkpoint.load(checkpoint.latest(tmp_path / "b"))
    assert a.model_config == b.model_config and a.train_config == b.train_config
    assert all(torch.equal(a.weights[k], b.weights[k]) for k in a.weights)


@pytest.mark.parametrize("text, words", [
    ("[model]\nd_modle = 3\n", ["has no field 'd_modle'"]),
    ("[model]\nd_model = \"big\"\n", ["[model] d_model 'big': should be a whole number; the default is 512"]),
    ("[optimizer]\nlr = 1\n", ["unknown section"]),
    ("[model\n", ["not valid TOML"]),
    ("[train]\nadam_betas = [0.9]\n", ["adam_betas"]),
])
def test_bad_config_files(tiny_data, tmp_path, text, words):
    config = tmp_path / "c.toml"
    config.write_text(text)
    assert_user_error(nmt("train", "--data", tiny_data, "--out", tmp_path / "run", "--config", config), str(config),
                      *words)


@pytest.mark.parametrize("args, words", [
    (["wmt14", "--pair", "en-ru"], ["--pair en-ru", "wmt14 has no en-ru", "en-de, de-en, en-fr, fr-en"]),
    (["wmt14", "--pair", "english"], ["--pair 'english'", "SOURCE-TARGET"]),
    (["europarl", "--pair", "en-de"], ["europarl has no en-de", "en-fr, fr-en"]),
    (["wmt14-en-fr", "--pair", "fr-en"], ["wmt14-en-fr is en-fr", "nmt download wmt14 --pair fr-en"]),
    (["wmt15"], ["unknown dataset 'wmt15'", "europarl, multi30k, wmt14"]),
])
def test_error_download_dataset_and_pair(tmp_path, args, words):
    assert_user_error(nmt("download", *args, "--out", tmp_path / "out"), *words)
    assert not (tmp_path / "out").exists()  # refused before anything is written


@pytest.mark.parametrize("args, words", [
    (["--mirror", "http://[::1"], ["--mirror 'http://[::1': not a valid URL"]),  # was a ValueError traceback
    (["--mirror", "https://example.org:99999/"], ["--mirror", "not a valid URL"]),
    (["--mirror", "OUT"], ["--mirror", "is the --out folder"]),
    (["--mirror", "OUT/.cache"], ["--mirror", "is inside --out"]),
    ([], ["train.en", "exists and no MANIFEST.json says nmt wrote it", "choose another --out"]),
])
def test_error_download_mirror_and_out(tmp_path, args, words):
    """Each refused before anything is written: no traceback, no file replaced."""
    mine = tmp_path / "mine"
    (mine / ".cache").mkdir(parents=True)
    (mine / "train.en").write_text("my own corpus\n")
    args = [str(mine / ".cache") if a == "OUT/.cache" else str(mine) if a == "OUT" else a for a in args]
    before = sorted(mine.rglob("*"))
    assert_user_error(nmt("download", "multi30k", "--out", mine, *args), *words)
    assert sorted(mine.rglob("*")) == before and (mine / "train.en").read_text() == "my own corpus\n"


def test_download_list_into_a_closed_stdout_is_an_error():
    """`nmt download --list >&-` exited 0 with the listing gone."""
    r = subprocess.run([sys.executable, "-m", "nmt", "download", "--list"], capture_output=True, text=True, env=ENV,
                       timeout=120, preexec_fn=lambda: os.close(1))  # as `nmt download --list >&-`
    assert_user_error(r, "stdout is closed")


def test_download_europarl_fr_en_from_a_mirror_and_list(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("fake", Path(__file__).resolve().parents[1] / "tools" / "fake_enfr_archives.py")
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    fake.write_archives(tmp_path / "mirror", {"europarl": 2500})
    r = ok(nmt("download", "europarl", "--pair", "fr-en", "--out", tmp_path / "ep", "--mirror", tmp_path / "mirror"))
    assert r.stdout == "" and "europarl-fr-en: downloaded 1 file(s)" in r.stderr
    names = [f"{split}.{lang}" for split in ("train", "valid", "test") for lang in ("fr", "en")]
    counts = {n: len((tmp_path / "ep" / n).read_text(encoding="utf-8").split("\n")[:-1]) for n in names}
    # pairs 500, 1500, 2500 valid, 1000, 2000 test; train: the rest, less the copies of those five
    assert {n: c for n, c in counts.items() if not n.startswith("train")} == {"valid.fr": 3, "valid.en": 3, "test.fr": 2,
                                                                              "test.en": 2}
    assert 2400 < counts["train.fr"] == counts["train.en"] <= 2495
    listing = ok(nmt("download", "--list")).stdout
    for name in ("wmt14-en-fr", "wmt14-fr-en", "europarl-en-fr", "europarl-fr-en"):
        assert name in listing
