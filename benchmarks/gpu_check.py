"""GPU readiness in one command: `make gpu-check` (that is, `.venv/bin/python benchmarks/gpu_check.py`).

On a machine with a CUDA GPU it runs nmt's GPU paths end to end, as a user would, on the sample
corpus that ships in nmt/sample_data (BPE and binarized data made as `nmt demo` makes them), and
writes a markdown report (--report, default gpu-check-report.md): every check with PASS, FAIL or
SKIP, its figures and the exact commands it ran. The summary goes to stdout, progress to stderr.
It runs 11 commands, each of which also pays for starting Python, torch and CUDA; the whole check
stops at 10 minutes (what did not finish by then fails, "timed out").

  data        `nmt bpe` and `nmt prepare` of the sample corpus.
  precision   `nmt train --gpus 1` of the tiny preset, 400 updates, in fp32, bf16 and fp16 with the
              same seed (same initial weights, same batches in the same order); the losses logged in
              OUT/log.jsonl must all be finite and the curves must agree (tolerances below).
  torchrun    `python -m torch.distributed.run --standalone --nproc-per-node G -m nmt train --gpus 1`
              (G: the GPUs of this machine) trains and writes its checkpoint.
  translate   `nmt translate --gpus 1` in fp32, fp16 and bf16 of the test set with the fp32-trained
              model, against `nmt translate --gpus 0` (the CPU) of the same model.
  throughput  target tokens/s of `nmt train --preset base --gpus 1` in bf16 and fp16 over 40 updates,
              warm-up excluded (figures only: no threshold; the loss must stay finite).

bf16 is SKIP, with a note, on GPUs without native bfloat16 (before Ampere), where `--precision auto`
picks fp16.

--cpu runs the same checks scaled down on the CPU (a tiny model, a few updates, fp32 only, the CPU
translation compared with itself, what needs a GPU reported as SKIP), so that this script's logic
runs without a GPU (tests/test_gpu_check.py). Without CUDA and without --cpu it prints one line and
exits with 2. Exit code 0: no check failed (SKIP is no failure); 1: a check failed.

Tolerances (options change them; the defaults, and why):

  --loss-rtol 0.05   bf16 and fp16 training: the final loss (the mean of the last quarter of the
      logged training losses, which smooths the batch-to-batch noise) within 5% of fp32's. Same
      seed, same batches in the same order: the runs differ only by rounding, which grows into a
      different but equally good trajectory; mixed precision is known to reach fp32's loss
      (Micikevicius et al. 2018, "Mixed Precision Training"). The scale of "equally good": fp32
      itself under another seed (other initial weights, another batch order, so a larger change
      than rounding) ended this 400-update run 0.2% away from seed 1 (final loss 1.485 vs 1.488,
      measured on a CPU; 1.0% apart at update 300). 5% is many times that, so that no healthy GPU
      fails, and still catches a run that learns visibly slower (gradients lost to underflow, an
      op that autocast should have kept in fp32); a run that diverges fails on its NaN/inf.
  --min-loss-drop 0.5 (CPU smoke test: 0.15)   fp32 training must learn, or three equally broken
      runs would agree: its final loss at most half its first. The tiny preset falls from 7.5 to
      1.5 (80%) in 400 updates on this corpus; a model that has learned little more than word
      frequencies (the smoke test's after its 20 updates: 7.4 to 5.4, BLEU 0) falls by about 25%.
  --fp32-max-differing 0.02   fp32 on the GPU against the CPU: at most 2% of the lines differ.
      The arithmetic is the same up to summation order (cuBLAS against oneDNN), so almost every
      line is identical; a beam whose two best candidates score within rounding of each other may
      flip. (On the CPU, oneDNN's packed kernels against torch's default ones: 0 of 500 lines.)
  --min-bleu 95   fp16 and bf16 translation: BLEU of the GPU output against the CPU output (not
      against the references) at least 95. The whole model runs in half precision (the scores in
      fp32), so near-ties flip more often than in fp32, bf16 (8 mantissa bits) more than fp16 (11).
      Emulated on a CPU with the model of a 400-update fp32 run, cast as nmt casts it on the GPU,
      bf16 changed 8 of 500 lines (BLEU 98.6 against fp32) and fp16 1 line (99.85). GPU kernels
      round differently, hence the margin; a precision that garbles (overflow, a wrong cast) scores
      far lower.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Optional

import torch

import nmt
from nmt.compute.device import native_bf16
from nmt.core.errors import NmtError
from nmt.core.files import atomic_write, check_output_file, read_lines
from nmt.model import checkpoint
from nmt.scoring import bleu
from nmt.workflows.demo import SAMPLE_DIR, SRC, TGT, VOCAB_SIZE

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
OVERFLOW = "fp16 gradient overflow"  # how nmt's log.jsonl starts the reason of a skip that loss scaling caused
NO_CUDA_EXIT = 2


# -- what to run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    """How much work each check does: on a GPU, or scaled down for the CPU smoke test."""

    device: str  # cuda or cpu
    train_pairs: int  # the first N pairs of each split of the sample corpus
    valid_pairs: int
    test_lines: int
    model: tuple[str, ...]  # `nmt train` options of the model the precision, torchrun and translate checks train
    updates: int  # of each precision's run
    log_interval: int
    torchrun_updates: int
    throughput_model: tuple[str, ...]
    throughput_updates: int
    throughput_log_interval: int
    throughput_from: int  # the timed part starts at this logged update (the warm-up before it is excluded)
    device_options: tuple[str, ...]  # of every `nmt train`
    cpu_threads: tuple[str, ...]  # of the CPU reference translation
    min_loss_drop: float  # the default of --min-loss-drop
    timeout: int  # seconds per command
    budget: int  # seconds for all of them


GPU = Scale(device="cuda", train_pairs=12000, valid_pairs=500, test_lines=500, model=("--preset", "tiny"),
            updates=400, log_interval=10, torchrun_updates=100, throughput_model=("--preset", "base"),
            throughput_updates=40, throughput_log_interval=5, throughput_from=10, device_options=("--gpus", "1"),
            cpu_threads=(), min_loss_drop=0.5, timeout=300, budget=590)
CPU_MODEL = ("--preset", "tiny", "--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff", "64",
             "--max-tokens", "1024", "--update-tokens", "1024", "--warmup", "20")
CPU = Scale(device="cpu", train_pairs=2000, valid_pairs=50, test_lines=40, model=CPU_MODEL, updates=20,
            log_interval=5, torchrun_updates=3, throughput_model=CPU_MODEL, throughput_updates=5,
            throughput_log_interval=1, throughput_from=2, device_options=("--threads", "1"),
            cpu_threads=("--threads", "1"), min_loss_drop=0.15, timeout=180, budget=590)


@dataclass
class Tolerances:
    """Pass thresholds; the module docstring says why each default is what it is."""

    loss_rtol: float = 0.05
    min_loss_drop: float = GPU.min_loss_drop
    fp32_max_differing: float = 0.02
    min_bleu: float = 95.0


# -- running commands ------------------------------------------------------------------------------


@dataclass
class Ran:
    """A finished command: its exit status, duration and log (stdout and stderr together)."""

    command: list[str]
    returncode: Optional[int]  # None: timed out
    seconds: float
    log: Path
    timeout: int

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def shell(self) -> str:
        return shlex.join(self.command)

    def why(self) -> str:
        """Why it failed, in one line: the command's last words (nmt's one-line error)."""
        lines = [line for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        last = lines[-1].strip()[:300] if lines else "no output"
        if self.returncode is None:
            return f"timed out after {self.timeout}s (log {self.log})" if self.timeout else last
        return f"exit code {self.returncode}: {last} (log {self.log})"


@dataclass
class Context:
    scale: Scale
    tol: Tolerances
    work: Path
    start: float = field(default_factory=time.monotonic)
    data: Optional[Path] = None  # set by the data check
    fp32_model: Optional[Path] = None  # set by the precision check

    def say(self, message: str) -> None:
        print(f"[{time.monotonic() - self.start:4.0f}s] {message}", file=sys.stderr, flush=True)

    def run(self, name: str, command: list[str]) -> Ran:
        """Run `command` (output to WORK/logs/NAME.log) within its timeout and what is left of the budget."""
        log = self.work / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        timeout = int(min(self.scale.timeout, self.start + self.scale.budget - time.monotonic()))
        self.say(f"{name}: {shlex.join(command)}")
        start, code = time.monotonic(), None
        with open(log, "w", encoding="utf-8") as f:
            if timeout < 1:
                f.write(f"not started: the {self.scale.budget}s budget of the whole check is spent\n")
            else:
                code = run_in_group(command, f, timeout)
        return Ran(command, code, time.monotonic() - start, log, max(timeout, 0))


def run_in_group(command: list[str], log: IO[str], timeout: int) -> Optional[int]:
    """The command's exit status, or None when it ran out of time; then (or on Ctrl-C) it is killed with
    the processes it started (torchrun's workers)."""
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def nmt_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "nmt", *args]


# -- results ---------------------------------------------------------------------------------------


@dataclass
class Check:
    """One check's outcome for the report: a status, a one-line summary, a table, commands and notes."""

    name: str
    title: str
    status: str = SKIP
    summary: str = ""
    table: list[list[str]] = field(default_factory=list)  # the header row first
    commands: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def conclude(self, parts: list[str], nothing: str) -> None:
        """Status from the table's result column (under the header row), summary from `parts`."""
        self.status = combine([row[1] for row in self.table[1:]])
        self.summary = "; ".join(parts) or nothing


def combine(statuses: list[str]) -> str:
    """A check's status from its parts': FAIL if any failed, else PASS if any passed, else SKIP."""
    if FAIL in statuses:
        return FAIL
    return PASS if PASS in statuses else SKIP


def not_run(name: str, title: str, because: str) -> Check:
    return Check(name, title, FAIL, f"not run: {because}")


# -- reading training logs -------------------------------------------------------------------------


@dataclass
class Curve:
    """What a run's OUT/log.jsonl says: the logged training losses, skipped updates, validation, speed."""

    updates: list[int]
    losses: list[float]
    skipped: int = 0  # updates skipped, for any reason
    bad_skips: list[int] = field(default_factory=list)  # updates skipped for a NaN/inf loss or gradient norm
    valid_loss: Optional[float] = None  # of the last validation
    valid_bleu: Optional[float] = None
    valid_update: int = 0
    speed: list[tuple[int, float, float]] = field(default_factory=list)  # (update, elapsed s, cumulative tok/s)

    def final(self) -> float:
        """The mean loss of the last quarter of the logged updates (one batch's loss is noisy)."""
        k = max(1, len(self.losses) // 4)
        return statistics.fmean(self.losses[-k:])

    def first_bad(self) -> Optional[int]:
        """The first update whose loss (or gradient norm) was not finite (None: all finite). fp16's skipped
        overflows do not count: they are the loss scale settling."""
        bad = [u for u, loss in zip(self.updates, self.losses) if not math.isfinite(loss)] + self.bad_skips
        if self.valid_loss is not None and not math.isfinite(self.valid_loss):
            bad.append(self.valid_update)
        return min(bad) if bad else None


def read_curve(path: Path) -> Curve:
    curve = Curve([], [])
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)  # nmt writes NaN and Infinity as such; json reads them back
        if "skipped" in record:
            curve.skipped += 1
            if not record["skipped"].startswith(OVERFLOW):
                curve.bad_skips.append(record["update"])
        elif "valid_loss" in record:
            curve.valid_loss, curve.valid_bleu = record["valid_loss"], record.get("valid_bleu")
            curve.valid_update = record["update"]
        elif "loss" in record:
            curve.updates.append(record["update"])
            curve.losses.append(record["loss"])
            curve.speed.append((record["update"], record["elapsed"], record["tok/s"]))
    return curve


def judge_precisions(curves: dict[str, Curve], tol: Tolerances) -> dict[str, tuple[str, str]]:
    """(status, reason) of each precision's run: finite losses; fp32 learns; the others end near fp32."""
    verdicts = {}
    base = curves.get("fp32")
    for precision, curve in curves.items():
        problems = []
        bad = curve.first_bad()
        if not curve.losses:
            problems.append("no training loss logged")
        elif bad is not None:
            problems.append(f"non-finite loss from update {bad}")
        elif precision == "fp32":
            drop = 1 - curve.final() / curve.losses[0]
            if drop < tol.min_loss_drop:
                problems.append(f"the loss fell by {drop:.0%} only (--min-loss-drop {tol.min_loss_drop:g})")
        elif base is None or not base.losses or base.first_bad() is not None:
            problems.append("no sound fp32 run to compare with")
        else:
            gap = curve.final() / base.final() - 1
            if abs(gap) > tol.loss_rtol:
                problems.append(f"final loss {gap:+.1%} from fp32's (--loss-rtol {tol.loss_rtol:g})")
        verdicts[precision] = (FAIL, "; ".join(problems)) if problems else (PASS, "")
    return verdicts


def steady_speed(curve: Curve, start_update: int) -> Optional[tuple[float, float]]:
    """(target tokens/s, seconds/update) between the first logged update >= start_update and the last."""
    points = [p for p in curve.speed if p[0] >= start_update]
    if len(points) < 2 or points[-1][1] <= points[0][1]:
        return None
    (u0, t0, s0), (u1, t1, s1) = points[0], points[-1]
    return (s1 * t1 - s0 * t0) / (t1 - t0), (t1 - t0) / (u1 - u0)  # tok/s is cumulative: undo it


# -- the checks ------------------------------------------------------------------------------------


def check_data(ctx: Context) -> Check:
    """BPE and binarized data from the first pairs of the sample corpus, as `nmt demo` makes them."""
    check = Check("data", "data: nmt bpe and nmt prepare of the sample corpus")
    corpus = ctx.work / "corpus"
    corpus.mkdir(parents=True)
    counts = {"train": ctx.scale.train_pairs, "valid": ctx.scale.valid_pairs, "test": ctx.scale.test_lines}
    for split, n in counts.items():
        for lang in (SRC, TGT):
            lines = list(read_lines(SAMPLE_DIR / f"{split}.{lang}"))[:n]
            (corpus / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    steps = [
        ("bpe", nmt_command("bpe", "--train", str(corpus / f"train.{SRC}"), str(corpus / f"train.{TGT}"),
                            "--vocab-size", str(VOCAB_SIZE), "--out", str(ctx.work / "bpe.model"))),
        ("prepare", nmt_command("prepare", "--bpe", str(ctx.work / "bpe.model"), "--train", str(corpus / "train"),
                                "--valid", str(corpus / "valid"), "--src", SRC, "--tgt", TGT,
                                "--out", str(ctx.work / "data"))),
    ]
    for name, command in steps:
        ran = ctx.run(name, command)
        check.commands.append(ran.shell())
        if not ran.ok:
            check.status, check.summary = FAIL, f"nmt {name} failed: {ran.why()}"
            return check
    ctx.data = ctx.work / "data"
    check.status = PASS
    check.summary = (f"{counts['train']:,} training and {counts['valid']:,} validation pairs of {SAMPLE_DIR}, "
                     f"BPE vocabulary {VOCAB_SIZE:,}")
    return check


def unavailable(precision: str, ctx: Context, what: str) -> str:
    """Why `precision` cannot run here ('' when it can)."""
    if precision == "fp32":
        return ""
    if ctx.scale.device != "cuda":
        return f"{what} in {precision} needs a CUDA GPU (the CPU smoke test runs fp32 only)"
    if precision == "bf16" and not native_bf16():
        return "this GPU has no native bfloat16 (it came with Ampere); nmt's --precision auto uses fp16 here"
    return ""


def train_command(ctx: Context, out: Path, model: tuple[str, ...], updates: int, log_interval: int,
                  *more: str) -> list[str]:
    return nmt_command("train", "--data", str(ctx.data), "--out", str(out), *model, "--max-updates", str(updates),
                       "--log-interval", str(log_interval), "--valid-interval", str(updates),
                       "--save-interval", str(updates), *ctx.scale.device_options, *more)


def train_precisions(ctx: Context, check: Check) -> tuple[dict[str, Curve], dict[str, tuple[str, str]]]:
    """The loss curve of each precision that trained, and (status, why) of those that did not train."""
    curves: dict[str, Curve] = {}
    others: dict[str, tuple[str, str]] = {}
    for precision in ("fp32", "bf16", "fp16"):
        why = unavailable(precision, ctx, "training")
        if why:
            others[precision] = (SKIP, why)
            continue
        out = ctx.work / f"train-{precision}"
        ran = ctx.run(f"train-{precision}", train_command(ctx, out, ctx.scale.model, ctx.scale.updates,
                                                          ctx.scale.log_interval, "--precision", precision, "--seed", "1"))
        check.commands.append(ran.shell())
        if not ran.ok:
            others[precision] = (FAIL, ran.why())
        elif not (out / "log.jsonl").is_file():
            others[precision] = (FAIL, f"no {out / 'log.jsonl'}")
        else:
            curves[precision] = read_curve(out / "log.jsonl")
            model = out / checkpoint.STEP_NAME.format(ctx.scale.updates)
            if precision == "fp32" and model.is_file():
                ctx.fp32_model = model
    return curves, others


def check_precision(ctx: Context) -> Check:
    title = f"precision: nmt train {' '.join(ctx.scale.device_options)} in fp32, bf16 and fp16, same seed"
    if ctx.data is None:
        return not_run("precision", title, "no data (the data check failed)")
    check = Check("precision", title)
    curves, others = train_precisions(ctx, check)
    verdicts = {**judge_precisions(curves, ctx.tol), **others}
    check.table = [["precision", "result", "first loss", "final loss", "vs fp32", "valid loss", "valid BLEU",
                    "skipped updates", "note"]]
    base = curves.get("fp32")
    parts = []
    for precision in ("fp32", "bf16", "fp16"):
        status, note = verdicts[precision]
        curve = curves.get(precision)
        if curve is None or not curve.losses:
            check.table.append([precision, status, "", "", "", "", "", "", note])
            parts.append(f"{precision} {status}")
            continue
        gap = f"{curve.final() / base.final() - 1:+.1%}" if base and base.losses and precision != "fp32" else ""
        check.table.append([precision, status, f"{curve.losses[0]:.3f}", f"{curve.final():.3f}", gap,
                            fmt(curve.valid_loss, ".3f"), fmt(curve.valid_bleu, ".2f"), str(curve.skipped), note])
        parts.append(f"{precision} {curve.final():.3f}" + (f" ({gap})" if gap else ""))
    check.status = combine([status for status, _ in verdicts.values()])
    check.summary = f"final loss {'; '.join(parts)}; tolerance ±{ctx.tol.loss_rtol:.0%} of fp32"
    check.notes = [f"{ctx.scale.updates} updates each; final loss: the mean training loss (label-smoothed, per "
                   "target token) of the last quarter of the logged updates; first loss: update 1's.",
                   f"PASS: every loss finite; fp32's final loss at most {1 - ctx.tol.min_loss_drop:.0%} of its first; "
                   f"bf16's and fp16's within ±{ctx.tol.loss_rtol:.0%} of fp32's. fp16 skips the updates whose "
                   "gradients overflow while its loss scale settles (counted, not failures)."]
    return check


def check_torchrun(ctx: Context) -> Check:
    n = torch.cuda.device_count() if ctx.scale.device == "cuda" else 1
    title = f"torchrun: nmt train {' '.join(ctx.scale.device_options)} under torchrun, {n} process(es)"
    if ctx.data is None:
        return not_run("torchrun", title, "no data (the data check failed)")
    check = Check("torchrun", title)
    out, updates = ctx.work / "torchrun", ctx.scale.torchrun_updates
    inner = train_command(ctx, out, ctx.scale.model, updates, ctx.scale.log_interval)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), *inner[1:]]
    ran = ctx.run("torchrun", command)
    check.commands.append(ran.shell())
    path = out / checkpoint.STEP_NAME.format(updates)
    if not ran.ok:
        check.status, check.summary = FAIL, ran.why()
        return check
    if not path.is_file():
        check.status, check.summary = FAIL, f"exit code 0 but no {path}"
        return check
    saved = checkpoint.load(path)
    layout = next((line.split("device ", 1)[1] for line in ran.log.read_text(encoding="utf-8").splitlines()
                   if line.startswith("model: ") and "device " in line), "?")
    curve = read_curve(out / "log.jsonl")
    bad = curve.first_bad()
    check.table = [["device, processes, precision", "updates", "final loss", "checkpoint", "seconds"],
                   [layout, str(saved.state.updates), fmt(curve.final() if curve.losses else None, ".3f"), str(path),
                    f"{ran.seconds:.0f}"]]
    if saved.state.updates != updates or bad is not None:
        check.status = FAIL
        check.summary = f"checkpoint at update {saved.state.updates} (expected {updates})" if bad is None else \
            f"non-finite loss from update {bad}"
        return check
    check.status, check.summary = PASS, f"trained {updates} updates on {layout}; wrote {path.name}"
    return check


def compare_lines(hyps: list[str], refs: list[str]) -> tuple[int, float, float]:
    """(differing lines, agreement fraction, BLEU of hyps against refs) of two outputs of as many lines."""
    differing = sum(h != r for h, r in zip(hyps, refs))
    return differing, 1 - differing / max(len(refs), 1), bleu(hyps, refs, "the GPU output", "the CPU output")


def judge_translation(precision: str, differing: int, lines: int, score: float, tol: Tolerances) -> tuple[str, str]:
    if precision == "fp32":
        limit = int(tol.fp32_max_differing * lines + 1e-9)
        return (PASS, "") if differing <= limit else \
            (FAIL, f"{differing} lines differ, more than {limit} (--fp32-max-differing {tol.fp32_max_differing:g})")
    return (PASS, "") if score >= tol.min_bleu else (FAIL, f"BLEU {score:.2f} < --min-bleu {tol.min_bleu:g}")


def translation_row(precision: str, ran: Ran, out: Path, reference: list[str],
                    tol: Tolerances) -> tuple[str, list[str], str]:
    """(status, table row, summary part) of one precision's translation, against the CPU's `reference`."""
    seconds = f"{ran.seconds:.0f}"
    if not ran.ok:
        return FAIL, [precision, FAIL, "", "", "", "", seconds, ran.why()], f"{precision} FAIL"
    hyps = list(read_lines(out))
    if len(hyps) != len(reference):
        why = f"{len(hyps)} lines, the CPU's {len(reference)}"
        return FAIL, [precision, FAIL, str(len(hyps)), "", "", "", seconds, why], f"{precision} FAIL"
    differing, agreement, score = compare_lines(hyps, reference)
    status, note = judge_translation(precision, differing, len(reference), score, tol)
    row = [precision, status, str(len(hyps)), str(differing), f"{agreement:.1%}", f"{score:.2f}", seconds, note]
    return status, row, f"{precision} {differing}/{len(reference)} lines differ, BLEU {score:.1f}"


def check_translate(ctx: Context) -> Check:
    gpu = ctx.scale.device == "cuda"
    title = "translate: nmt translate --gpus 1 in fp32, fp16 and bf16 against the CPU" if gpu else \
        "translate: nmt translate on the CPU (no GPU: compared with itself)"
    if ctx.fp32_model is None:
        return not_run("translate", title, "no fp32-trained model (the precision check's fp32 run failed)")
    check = Check("translate", title)
    folder = ctx.work / "translate"
    source = ctx.work / "corpus" / f"test.{SRC}"

    def translate(name: str, *options: str) -> tuple[Ran, Path]:
        out = folder / f"{name}.{TGT}"
        ran = ctx.run(f"translate-{name}", nmt_command("translate", "--model", str(ctx.fp32_model), "--input",
                                                       str(source), "--output", str(out), *options))
        check.commands.append(ran.shell())
        return ran, out

    ran, cpu_out = translate("cpu", "--gpus", "0", *ctx.scale.cpu_threads)
    if not ran.ok:
        check.status, check.summary = FAIL, f"the CPU translation failed: {ran.why()}"
        return check
    reference = list(read_lines(cpu_out))
    check.table = [["precision", "result", "lines", "differing lines", "agreement", "BLEU vs CPU", "seconds", "note"]]
    parts = []
    for precision in ("fp32", "fp16", "bf16"):
        why = unavailable(precision, ctx, "translation")
        if why:
            check.table.append([precision, SKIP, "", "", "", "", "", why])
            continue
        if gpu:
            ran, out = translate(precision, "--gpus", "1", "--precision", precision)
        else:
            out = cpu_out  # no GPU: the comparison itself is what runs
        status, row, part = translation_row(precision, ran, out, reference, ctx.tol)
        check.table.append(row)
        parts.append(part)
    check.conclude(parts, "nothing compared")
    check.notes = [f"Model: {ctx.fp32_model} (the precision check's fp32 run); input: the first "
                   f"{ctx.scale.test_lines} lines of the sample test set; beam 4 (nmt's default).",
                   f"PASS: fp32 at most {ctx.tol.fp32_max_differing:.0%} of the lines differ from the CPU's; "
                   f"fp16 and bf16 BLEU against the CPU output at least {ctx.tol.min_bleu:g}."]
    return check


def throughput_row(precision: str, ran: Ran, out: Path, start_update: int) -> tuple[str, list[str], str]:
    """(status, table row, summary part) of one precision's timed run."""
    if not ran.ok:
        return FAIL, [precision, FAIL, "", "", "", "", "", ran.why()], f"{precision} FAIL"
    curve = read_curve(out / "log.jsonl")
    speed = steady_speed(curve, start_update)
    bad = curve.first_bad()
    status, note = PASS, ""
    if bad is not None:
        status, note = FAIL, f"non-finite loss from update {bad}"
    elif speed is None:
        status, note = FAIL, f"too few logged updates after update {start_update} to time"
    tokens, seconds = speed if speed else (None, None)
    whole = curve.speed[-1][2] if curve.speed else None
    row = [precision, status, fmt(tokens, ",.0f"), fmt(seconds, ".3f"), fmt(whole, ",.0f"),
           fmt(curve.final() if curve.losses else None, ".3f"), str(curve.skipped), note]
    return status, row, f"{precision} {tokens:,.0f} target tok/s" if speed else f"{precision} {status}"


def check_throughput(ctx: Context) -> Check:
    preset = ctx.scale.throughput_model[1]
    title = f"throughput: nmt train --preset {preset} {' '.join(ctx.scale.device_options)}, target tokens/s"
    if ctx.data is None:
        return not_run("throughput", title, "no data (the data check failed)")
    check = Check("throughput", title)
    check.table = [["precision", "result", "target tok/s", "s/update", "whole run tok/s", "final loss",
                    "skipped updates", "note"]]
    parts = []
    precisions = ("bf16", "fp16") if ctx.scale.device == "cuda" else ("fp32", "bf16", "fp16")
    for precision in precisions:
        why = unavailable(precision, ctx, "training")
        if why:
            check.table.append([precision, SKIP, "", "", "", "", "", why])
            continue
        out = ctx.work / f"throughput-{precision}"
        ran = ctx.run(f"throughput-{precision}", train_command(
            ctx, out, ctx.scale.throughput_model, ctx.scale.throughput_updates, ctx.scale.throughput_log_interval,
            "--precision", precision, "--valid-bleu-sentences", "0"))
        check.commands.append(ran.shell())
        status, row, part = throughput_row(precision, ran, out, ctx.scale.throughput_from)
        check.table.append(row)
        parts.append(part)
    check.conclude(parts, "nothing timed")
    check.notes = [f"{ctx.scale.throughput_updates} updates of the {preset} preset on the sample data (its BPE "
                   f"vocabulary of {VOCAB_SIZE:,}: the output layer is smaller than with WMT's 37,000, so expect "
                   "fewer tokens/s there); timed from logged update "
                   f"{ctx.scale.throughput_from} to the last (CUDA start-up and warm-up excluded); 'whole run' "
                   "includes them. Figures only: PASS means it trained with finite losses."]
    return check


def fmt(value: Optional[float], spec: str) -> str:
    return "" if value is None else format(value, spec)


# -- the report ------------------------------------------------------------------------------------


def environment(scale: Scale) -> list[str]:
    lines = [f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", f"host: {platform.node()} ({platform.platform()})",
             f"python {platform.python_version()}, torch {torch.__version__}, nmt {nmt.__version__}"]
    if scale.device == "cuda":
        lines.append(f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            lines.append(f"GPU {i}: {p.name}, compute capability {p.major}.{p.minor}, "
                         f"{p.total_memory / 2 ** 30:.1f} GiB; native bf16: {'yes' if native_bf16() else 'no'}")
    else:
        lines.append("mode: CPU smoke test (--cpu): the checks scaled down, fp32 only; no GPU was used")
    return lines


def markdown_table(rows: list[list[str]]) -> list[str]:
    if not rows:
        return []
    lines = ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return [lines[0], "|" + "---|" * len(rows[0])] + lines[1:]


def overall(checks: list[Check]) -> str:
    counts = {s: sum(c.status == s for c in checks) for s in (PASS, FAIL, SKIP)}
    verdict = FAIL if counts[FAIL] else PASS
    return f"{verdict} ({counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped)"


def render(checks: list[Check], scale: Scale, seconds: float, work: Path, kept: bool) -> str:
    out = ["# nmt GPU check" if scale.device == "cuda" else "# nmt GPU check: CPU smoke test", ""]
    out += [f"- {line}" for line in environment(scale)]
    out += [f"- result: **{overall(checks)}** in {seconds:.0f}s",
            f"- work folder (data, runs, logs): {work}" + ("" if kept else " (deleted; --keep keeps it)"), ""]
    out += markdown_table([["check", "result", "summary"]] + [[c.name, c.status, c.summary] for c in checks])
    for c in checks:
        out += ["", f"## {c.title}", "", f"**{c.status}**: {c.summary}", ""]
        if c.table:
            out += markdown_table(c.table) + [""]
        for note in c.notes:
            out += [note, ""]
        if c.commands:
            out += ["Commands:", "", "```sh", *c.commands, "```"]
    return "\n".join(out) + "\n"


def summary_lines(checks: list[Check]) -> list[str]:
    return [f"{c.status}  {c.name:<10}  {c.summary}" for c in checks]


# -- main --------------------------------------------------------------------------------------------


def run_checks(ctx: Context) -> list[Check]:
    checks = []
    for step in (check_data, check_precision, check_torchrun, check_translate, check_throughput):
        checks.append(step(ctx))
        ctx.say(f"{checks[-1].name}: {checks[-1].status} {checks[-1].summary}")
    return checks


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", type=Path, default=Path("gpu-check-report.md"), help="the markdown report to write")
    parser.add_argument("--cpu", action="store_true", help="the CPU smoke test: the checks scaled down, no GPU needed")
    parser.add_argument("--work", type=Path, help="folder for the data, runs and logs (new or empty; default: a "
                        "temporary folder, deleted at the end unless --keep or a check failed)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work folder")
    for f in fields(Tolerances):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=float, dest=f.name,
                            help="a pass threshold; its default, and why: see above")
    args = parser.parse_args(argv)
    try:
        check_output_file(args.report, "--report")  # now, not after 10 minutes of checks
    except NmtError as e:
        parser.error(str(e))
    if args.work is not None and args.work.exists() and (not args.work.is_dir() or any(args.work.iterdir())):
        parser.error(f"--work {args.work}: exists and is not an empty folder; give a new one (runs in it would resume)")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        print(f"gpu-check: no CUDA GPU found (torch {torch.__version__} sees none); for the CPU smoke test of "
              f"this script run: {Path(sys.executable).name} benchmarks/gpu_check.py --cpu", file=sys.stderr)
        return NO_CUDA_EXIT
    scale = CPU if args.cpu else GPU
    given = {f.name: getattr(args, f.name) for f in fields(Tolerances) if getattr(args, f.name) is not None}
    tol = Tolerances(**{"min_loss_drop": scale.min_loss_drop, **given})
    temporary = args.work is None
    work = Path(tempfile.mkdtemp(prefix="nmt-gpu-check-")) if temporary else args.work
    work.mkdir(parents=True, exist_ok=True)
    ctx = Context(scale, tol, work.resolve())
    checks = run_checks(ctx)
    failed = any(c.status == FAIL for c in checks)
    kept = not temporary or args.keep or failed
    with atomic_write(args.report, "w") as f:
        f.write(render(checks, scale, time.monotonic() - ctx.start, ctx.work, kept))
    if not kept:
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(summary_lines(checks)))
    print(f"gpu-check: {overall(checks)} in {time.monotonic() - ctx.start:.0f}s; report {args.report}"
          + (f"; logs in {ctx.work / 'logs'}" if kept else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
