"""Checkpoints: self-contained, atomically written, loaded as data (`weights_only=True`), averaged.

A checkpoint is a dict of plain data and tensors:
  format, version, model_config, train_config, data (languages, vocabulary, BPE hash),
  bpe_model (the youtokentome model's bytes), model (state dict), updates, epoch,
  and, in training checkpoints, optimizer, gradient scaler, rng (per rank) and the position in the
  epoch's batch order.
So `translate`, `eval` and `average` need nothing but the file.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any, Optional

import torch

from nmt.config import ModelConfig, from_dict
from nmt.errors import CheckpointError, ConfigError, InputError, OutputError
from nmt.files import atomic_write, is_checkpoint_file  # noqa: F401 (re-exported)

FORMAT = "nmt-checkpoint"
VERSION = 1
STEP_NAME = "checkpoint_{:08d}.pt"
STEP_PATTERN = re.compile(r"^checkpoint_(\d{8})\.pt$")
# The best checkpoint by validation BLEU; STEP_PATTERN does not match it, so averaging and pruning skip it.
BEST_NAME = "checkpoint_best.pt"
INFERENCE_KEYS = ("format", "version", "model_config", "train_config", "data", "bpe_model", "model", "updates", "epoch")
TRAINING_KEYS = ("optimizer", "position", "rng")  # what resuming needs beyond INFERENCE_KEYS
DAMAGED_SUFFIX = ".damaged"  # a step checkpoint that resume skipped, renamed so that nothing picks it up again


def save(path: Path, payload: dict[str, Any]) -> None:
    """Write a checkpoint atomically: a crash mid-write leaves the previous file intact."""
    payload = {"format": FORMAT, "version": VERSION, **payload}
    try:
        with atomic_write(path) as f:
            torch.save(payload, f)
    except (OutputError, RuntimeError) as e:
        # Disk full, read-only folder, quota: the user's to fix, not a bug. torch's zip writer reports a
        # failed write as a RuntimeError ("unexpected pos ...") raised while handling the OSError.
        cause = e.__cause__ if isinstance(e, OutputError) else e.__context__
        if not isinstance(cause, OSError):
            raise  # a folder in the way (already a one-line error), or a real bug
        raise CheckpointError(f"{path}: cannot write the checkpoint ({cause.strerror or cause}); "
                              "free disk space or choose a writable --out, then rerun to resume") from e


def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and check a checkpoint, as data only: a checkpoint is never allowed to run code."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory; pass a checkpoint file (e.g. {path}/averaged.pt)")
    if not path.exists():
        raise InputError(f"{path}: no such checkpoint; check the path")
    if not path.is_file():
        raise InputError(f"{path}: not a checkpoint file (a device or a pipe); pass a .pt file from nmt train or average")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # weights_only refuses code, so any failure here means a bad file, not a bug
        if isinstance(e, pickle.UnpicklingError) or not str(e).strip():
            why = "not a torch checkpoint of plain data"  # torch's own text suggests unsafe loading: don't
        else:
            why = str(e).strip().splitlines()[0][:160]
        raise CheckpointError(f"{path}: not a readable nmt checkpoint ({why}); was it truncated or written by another tool?") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an nmt checkpoint (no '{FORMAT}' header); train one with `nmt train`")
    if ckpt.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint version {ckpt.get('version')} is not supported by this nmt (expects {VERSION}); upgrade nmt")
    missing = [k for k in INFERENCE_KEYS if k not in ckpt]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks {', '.join(missing)}; it is damaged")
    check_contents(ckpt, path)
    return ckpt


# The type of each entry a checkpoint's readers take for granted, and of each field of its `data`.
CONTENT_TYPES = {"model_config": dict, "train_config": dict, "data": dict, "bpe_model": bytes, "model": dict,
                 "updates": int, "epoch": int}
DATA_TYPES = {"src": str, "tgt": str, "vocab_size": int, "bpe_sha256": str}


def check_contents(ckpt: dict[str, Any], path: Path) -> None:
    """CheckpointError naming the entry unless the checkpoint's entries have the types nmt reads them as
    (a hand-edited or foreign file could hold a string where a number belongs), and its configs check out."""
    for key, kind in CONTENT_TYPES.items():
        if not isinstance(ckpt[key], kind) or isinstance(ckpt[key], bool):
            raise CheckpointError(f"{path}: its {key} is a {type(ckpt[key]).__name__}, not a {kind.__name__}; "
                                  "the file is damaged")
    for key, kind in DATA_TYPES.items():
        value = ckpt["data"].get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise CheckpointError(f"{path}: its data {key} is {value!r}, not a {kind.__name__}; the file is damaged")
    try:
        model_config(ckpt, path)
    except ConfigError as e:
        raise CheckpointError(str(e)) from None


def bpe_model_bytes(path: Path) -> bytes:
    """The BPE model a checkpoint was trained with (its youtokentome model file, byte for byte)."""
    return load(path)["bpe_model"]


def model_config(ckpt: dict[str, Any], path: Path | str = "checkpoint") -> ModelConfig:
    """The checkpoint's model config, checked field by field; a ConfigError names `path` and the field."""
    return from_dict(ModelConfig, ckpt["model_config"], str(path))


def check_weights(state: dict[str, Any], path: Path | str) -> None:
    """CheckpointError unless every weight is a finite tensor: NaN weights would translate every line to
    nothing, without a word."""
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{path}: weight {name} is a {type(value).__name__}, not a tensor; the file is damaged")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"{path}: weight {name} holds NaN or infinite values (the run diverged before "
                                  "this checkpoint); use an earlier checkpoint")


def build_model(ckpt: dict[str, Any], path: Path | str = "checkpoint"):
    """Rebuild the Transformer stored in `ckpt` (on CPU, in eval mode)."""
    from nmt.model import Transformer

    check_weights(ckpt["model"], path)
    model = Transformer(model_config(ckpt, path))
    load_weights(model, ckpt["model"], path)
    return model.eval()


def step_checkpoints(run_dir: Path) -> list[Path]:
    """The run's step checkpoints, oldest first."""
    if not run_dir.is_dir():
        return []
    return sorted(p for p in run_dir.iterdir() if STEP_PATTERN.search(p.name))


def latest(run_dir: Path) -> Optional[Path]:
    found = step_checkpoints(run_dir)
    return found[-1] if found else None


def load_resumable(path: Path) -> dict[str, Any]:
    """A step checkpoint that can resume training: loadable, with optimizer, counters and random state."""
    ckpt = load(path)
    missing = [k for k in TRAINING_KEYS if k not in ckpt]
    if missing:
        raise CheckpointError(f"{path}: lacks {', '.join(missing)} (an inference-only or damaged checkpoint)")
    check_training_state(ckpt, path)
    return ckpt


def check_training_state(ckpt: dict[str, Any], path: Path) -> None:
    """CheckpointError naming the entry unless what a resume reads has the type it is read as: counters,
    validation figures, the optimizer's state, each rank's random generators."""
    def damaged(what: str, value: Any) -> CheckpointError:
        return CheckpointError(f"{path}: its {what} is {str(value)[:60]!r}, not what nmt wrote; the file is damaged")

    for key in ("updates", "epoch", "position", "bad_validations", "lr_offset"):
        value = ckpt.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise damaged(key, value)
    for key in ("valid_loss", "valid_bleu", "best_bleu"):
        value = ckpt.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise damaged(key, value)
    optimizer = ckpt["optimizer"]
    if not (isinstance(optimizer, dict) and isinstance(optimizer.get("state"), dict)
            and isinstance(optimizer.get("param_groups"), list)):
        raise damaged("optimizer state", optimizer)
    for rng in ckpt.get("rng_ranks") or [ckpt["rng"]]:
        if not (isinstance(rng, dict) and isinstance(rng.get("torch"), torch.Tensor) and rng["torch"].dtype == torch.uint8):
            raise damaged("random generator state", rng)


def load_weights(module: torch.nn.Module, state: dict[str, Any], path: Path | str) -> None:
    """`module.load_state_dict(state)`; weights that do not fit the module are a CheckpointError naming `path`."""
    try:
        module.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: weights do not match the stored model config ({str(e).splitlines()[0]})") from None


def load_optimizer(optimizer: torch.optim.Optimizer, state: dict[str, Any], path: Path | str) -> None:
    """`optimizer.load_state_dict(state)`; a state that does not fit is a CheckpointError naming `path`."""
    try:
        optimizer.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
        raise CheckpointError(f"{path}: its optimizer state does not fit the model ({str(e).splitlines()[0][:120]}); "
                              "the file is damaged: move it out of the run folder to resume from the one before") from None


def latest_resumable(run_dir: Path) -> tuple[Optional[Path], Optional[dict[str, Any]], list[str]]:
    """The newest step checkpoint of `run_dir` that can resume training, loaded, and a note for each newer one
    that could not (truncated by a crash, say), which is renamed NAME.damaged so that averaging and later
    resumes skip it. (None, None, []) for a folder without step checkpoints; a CheckpointError, renaming
    nothing, when none of them loads: starting afresh would silently throw the run away."""
    found = step_checkpoints(run_dir)
    errors: list[tuple[Path, str]] = []
    for path in reversed(found):
        try:
            ckpt = load_resumable(path)
        except CheckpointError as e:
            errors.append((path, str(e)))
            continue
        notes = []
        for bad, why in errors:
            moved = bad.with_name(bad.name + DAMAGED_SUFFIX)
            os.replace(bad, moved)
            notes.append(f"warning: skipped {why}; renamed it {moved.name}, resuming from {path.name}")
        return path, ckpt, notes
    if errors:
        raise CheckpointError(f"{run_dir}: none of its {len(found)} step checkpoints can resume training "
                              f"(newest: {errors[0][1]}); move them out of the folder to start afresh")
    return None, None, []


def prune(run_dir: Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` step checkpoints; returns what was deleted."""
    old = step_checkpoints(run_dir)[:-keep_last] if keep_last > 0 else []
    for p in old:
        p.unlink(missing_ok=True)
    return old


def average(paths: list[Path]) -> dict[str, Any]:
    """An inference checkpoint whose parameters are the elementwise mean of those of `paths`.

    All checkpoints must share the model config and the vocabulary; means are accumulated in float64.
    """
    if not paths:
        raise InputError("no checkpoints to average; name files or a run folder with --last N")
    first = load(paths[0])
    check_weights(first["model"], paths[0])
    sums: dict[str, torch.Tensor] = {k: v.double() if v.is_floating_point() else v.clone() for k, v in first["model"].items()}
    for path in paths[1:]:
        ckpt = load(path)
        if ckpt["data"]["src"] != first["data"]["src"] or ckpt["data"]["tgt"] != first["data"]["tgt"]:
            raise CheckpointError(f"{path} translates {ckpt['data']['src']} -> {ckpt['data']['tgt']} but {paths[0]} "
                                  f"{first['data']['src']} -> {first['data']['tgt']}; average checkpoints of one run only")
        if ckpt["model_config"] != first["model_config"] or ckpt["bpe_model"] != first["bpe_model"]:
            raise CheckpointError(f"{path}: model config or vocabulary differs from {paths[0]}; average checkpoints of one run only")
        check_same_run(ckpt, first, path, paths[0])
        check_weights(ckpt["model"], path)
        check_same_tensors(ckpt["model"], first["model"], path, paths[0])
        for k, v in ckpt["model"].items():
            if v.is_floating_point():
                sums[k] += v.double()
            elif not torch.equal(v, sums[k]):
                raise CheckpointError(f"{path}: integer tensor {k} differs from {paths[0]}; cannot average it")
    n = len(paths)
    state = {k: (v / n).to(first["model"][k].dtype) if v.is_floating_point() else v for k, v in sums.items()}
    out = {k: first[k] for k in INFERENCE_KEYS if k not in ("format", "version")}
    out["model"] = state
    out["averaged"] = [str(p) for p in paths]
    return out


def check_same_run(ckpt: dict[str, Any], first: dict[str, Any], path: Path, first_path: Path) -> None:
    """CheckpointError unless two checkpoints come from one run (or from fine-tunings of one checkpoint, whose
    average is a "model soup"): the mean of independently initialised weights is no model at all."""
    ours, theirs = ckpt["train_config"], first["train_config"]
    same_start = ours.get("init_from") and ours.get("init_from") == theirs.get("init_from")
    if ours.get("seed") != theirs.get("seed") and not same_start:
        raise CheckpointError(f"{path} and {first_path} come from different training runs (seed {ours.get('seed')} and "
                              f"{theirs.get('seed')}); the average of independently trained weights is no model: "
                              "average checkpoints of one run only")


def check_same_tensors(state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor], path: Path,
                       reference_path: Path) -> None:
    """CheckpointError unless `state` has the keys, shapes and dtypes of `reference`: averaging would
    otherwise broadcast one tensor over another, or average a weight with nothing."""
    if state.keys() != reference.keys():
        extra, missing = sorted(state.keys() - reference.keys()), sorted(reference.keys() - state.keys())
        what = "; ".join(f"{label} {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
                         for label, names in (("has", extra), ("lacks", missing)) if names)
        raise CheckpointError(f"{path}: its weights differ from {reference_path} ({what}); "
                              "average checkpoints of one run only")
    for name, value in state.items():
        ref = reference[name]
        if value.shape != ref.shape or value.dtype != ref.dtype:
            raise CheckpointError(f"{path}: weight {name} is {tuple(value.shape)} {value.dtype}, but "
                                  f"{tuple(ref.shape)} {ref.dtype} in {reference_path}; average checkpoints of one run only")


def resolve_average_inputs(inputs: list[Path], last: Optional[int]) -> list[Path]:
    """Files named, or the newest `last` step checkpoints of a single run folder."""
    if len(inputs) == 1 and inputs[0].is_dir():
        found = step_checkpoints(inputs[0])
        if not found:
            raise InputError(f"{inputs[0]}: no step checkpoints (checkpoint_NNNNNNNN.pt) in this folder; train first")
        if last is not None and last < 1:
            raise InputError(f"--last {last}: give a positive number of checkpoints to average")
        n = len(found) if last is None else last
        if n > len(found):
            raise InputError(f"--last {n}: {inputs[0]} holds only {len(found)} step checkpoints; use --last {len(found)} or fewer")
        return found[-n:]
    if last is not None:
        raise InputError("--last N goes with a single run folder, not with checkpoint files")
    for p in inputs:
        if not p.is_file():
            raise InputError(f"{p}: no such checkpoint file")
    return inputs
