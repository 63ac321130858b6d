"""Checkpoints: self-contained, typed (`Checkpoint`), atomically written, loaded as data
(`weights_only=True`), migrated from older versions, averaged.

A checkpoint holds the model and training configs, the data's identity (languages, vocabulary,
tokenizer), the tokenizer itself, the weights, the run's progress (`TrainState`) and, in a step
checkpoint of a training run, what resuming needs besides (`Resumable`: optimiser, loss scaler, each
rank's random generators); an imported model may bring its own search defaults. So `translate`,
`eval` and `average` need nothing but the file.

On disk it is a dict of plain data and tensors (what `torch.load(weights_only=True)` accepts); this
module alone reads and writes that dict, by `VERSION`, and turns the versions before into it (MIGRATIONS).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from nmt.config import (
    ModelConfig,
    Overrides,
    SearchConfig,
    TrainConfig,
    check_type,
    field_types,
    from_dict,
    named_as_fields,
    to_dict,
)
from nmt.core.errors import CheckpointError, ConfigError, DataError, InputError, OutputError
from nmt.core.files import atomic_write, is_checkpoint_file, same_file  # noqa: F401 (re-exported)
from nmt.core.identity import DataIdentity
from nmt.model.shortlist import Shortlist
from nmt.model.transformer import Transformer

FORMAT = "nmt-checkpoint"
VERSION = 3
STEP_NAME = "checkpoint_{:08d}.pt"
STEP_PATTERN = re.compile(r"^checkpoint_(\d{8})\.pt$")
# The best checkpoint by validation BLEU; STEP_PATTERN does not match it, so averaging and pruning skip it.
BEST_NAME = "checkpoint_best.pt"
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")  # terminal colour codes, as in torch's weights-only message
DAMAGED_SUFFIX = ".damaged"  # a step checkpoint that resume skipped, renamed so that nothing picks it up again


@dataclass
class TrainState:
    """The run's progress: what a checkpoint stores and a resume restores, besides the model, the
    optimiser, the loss scaler and the random generators. Saved as plain data, field by field."""

    updates: int = 0
    epoch: int = 0
    position: int = 0  # the next update group within the epoch
    valid_loss: Optional[float] = None
    valid_bleu: Optional[float] = None
    best_bleu: Optional[float] = None
    bad_validations: int = 0  # validations since the best BLEU (for --patience)
    lr_offset: int = 0  # fine-tuning with the schedule kept: the updates of the run it started from
    elapsed: float = 0.0  # seconds of the run so far, over every session (for --max-time and --lr-tail)


@dataclass
class Resumable:
    """What resuming a run needs beyond the weights and the `TrainState`: in step checkpoints only."""

    optimizer: dict[str, Any]
    scaler: dict[str, Any]  # {} when loss scaling is off (fp32, bf16)
    rng: list[dict[str, Any]]  # each rank's random generators, rank 0 first


@dataclass(eq=False)  # tensors have no truth value: compare the fields that matter, not whole checkpoints
class Checkpoint:
    """A model and everything it needs to translate, to be averaged and to go on training."""

    model_config: ModelConfig
    train_config: TrainConfig
    data: DataIdentity
    tokenizer: dict[str, Any]  # nmt.text.tokenizer's data form (`load_tokenizer` reads it)
    weights: dict[str, torch.Tensor]  # the model's state dict
    state: TrainState = field(default_factory=TrainState)
    resumable: Optional[Resumable] = None
    search: Overrides[SearchConfig] = field(default_factory=lambda: Overrides(SearchConfig))  # translate's defaults
    averaged: list[str] = field(default_factory=list)  # the checkpoints averaged into this one
    shortlist: Optional[Shortlist] = None  # the target tokens allowed per source token (`nmt shortlist`)

    @property
    def languages(self) -> tuple[str, str]:
        return self.data.src, self.data.tgt

    def build_model(self, path: Path | str = "checkpoint") -> Transformer:
        """The Transformer these weights belong to (on the CPU, in eval mode)."""
        check_weights(self.weights, path)
        model = Transformer(self.model_config)
        load_weights(model, self.weights, path)
        return model.eval()

    def for_inference(self) -> Checkpoint:
        """This checkpoint without what only resuming needs (an averaged or exported model)."""
        return dataclasses.replace(self, resumable=None)

    # -- as stored ----------------------------------------------------------------------------------

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "format": FORMAT, "version": VERSION, "model_config": to_dict(self.model_config),
            "train_config": to_dict(self.train_config), "data": self.data.to_dict(), "tokenizer": self.tokenizer,
            "model": self.weights, "state": dataclasses.asdict(self.state), "search": dict(self.search.values),
        }
        if self.averaged:
            payload["averaged"] = list(self.averaged)
        if self.shortlist is not None:
            payload["shortlist"] = self.shortlist.to_payload()
        if self.resumable is not None:
            payload.update(optimizer=self.resumable.optimizer, scaler=self.resumable.scaler, rng=self.resumable.rng)
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any], path: Path | str) -> Checkpoint:
        """The checkpoint stored in `payload` (of this VERSION), checked field by field: a damaged or
        foreign value is a CheckpointError naming the file and the field."""
        where = str(path)
        needed = ("model_config", "train_config", "data", "tokenizer", "model", "state")
        missing = [k for k in needed if k not in payload]
        if missing:
            raise CheckpointError(f"{path}: checkpoint lacks {', '.join(missing)}; it is damaged")
        try:
            model_config = from_dict(ModelConfig, payload["model_config"], where)
            train_config = from_dict(TrainConfig, payload["train_config"], where)
            data = DataIdentity.from_dict(payload["data"], where)
            try:
                search = Overrides(SearchConfig, payload.get("search") or {})
                search.apply()
            except ConfigError as e:
                raise ConfigError(f"{where}: search defaults: {named_as_fields(str(e), SearchConfig)}") from None
        except (ConfigError, DataError) as e:
            raise CheckpointError(f"{e}; the checkpoint is damaged or was written by another nmt") from None
        if not isinstance(payload["model"], dict):
            raise CheckpointError(f"{path}: its weights are a {type(payload['model']).__name__}, not a table; "
                                  "it is damaged")
        resumable = None
        if all(k in payload for k in ("optimizer", "rng")):
            resumable = typed_resumable(payload, path)
        averaged = payload.get("averaged") or []
        shortlist = (Shortlist.from_payload(payload["shortlist"], model_config.vocab_size, path)
                     if "shortlist" in payload else None)
        return cls(model_config, train_config, data, payload["tokenizer"], payload["model"],
                   typed_state(payload["state"], path), resumable, search, [str(a) for a in averaged], shortlist)


def typed_resumable(payload: dict[str, Any], path: Path | str) -> Resumable:
    """What a resume reads, each part of the type it is read as: the optimizer's state and each rank's
    random generators (a hand-edited or foreign file could hold anything)."""
    def damaged(what: str, value: Any) -> CheckpointError:
        return CheckpointError(f"{path}: its {what} is {str(value)[:60]!r}, not what nmt wrote; the file is damaged")

    optimizer, rng, scaler = payload["optimizer"], payload["rng"], payload.get("scaler") or {}
    if not (isinstance(optimizer, dict) and isinstance(optimizer.get("state"), dict)
            and isinstance(optimizer.get("param_groups"), list)):
        raise damaged("optimizer state", optimizer)
    if not (isinstance(rng, list) and rng):
        raise damaged("random generator state", rng)
    for state in rng:
        if not (isinstance(state, dict) and isinstance(state.get("torch"), torch.Tensor)
                and state["torch"].dtype == torch.uint8):
            raise damaged("random generator state", state)
    if not isinstance(scaler, dict):
        raise damaged("loss scaler state", scaler)
    return Resumable(optimizer, scaler, rng)


def load_weights(module: torch.nn.Module, state: dict[str, Any], path: Path | str) -> None:
    """`module.load_state_dict(state)`; weights that do not fit the module are a CheckpointError naming `path`."""
    try:
        module.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: weights do not match the stored model config "
                              f"({str(e).splitlines()[0]})") from None


def load_optimizer(optimizer: torch.optim.Optimizer, state: dict[str, Any], path: Path | str) -> None:
    """`optimizer.load_state_dict(state)`; a state that does not fit is a CheckpointError naming `path`."""
    try:
        optimizer.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
        raise CheckpointError(f"{path}: its optimizer state does not fit the model ({str(e).splitlines()[0][:120]}); "
                              "the file is damaged: move it out of the run folder to resume from the one "
                              "before") from None


def typed_state(data: object, path: Path | str) -> TrainState:
    """The stored `TrainState`, each field of its type (fields a newer nmt added to it are refused)."""
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: its training state is a {type(data).__name__}, not a table; it is damaged")
    kinds = field_types(TrainState)
    unknown = sorted(set(data) - set(kinds))
    if unknown:
        raise CheckpointError(f"{path}: unknown training state fields {unknown}: was this written by a newer nmt?")
    values: dict[str, Any] = {
        k: float(v) if kinds[k] in (float, Optional[float]) and isinstance(v, int) and not isinstance(v, bool) else v
        for k, v in data.items()}
    for name, value in values.items():
        try:
            check_type(name, value, kinds[name])
        except ConfigError as e:
            raise CheckpointError(f"{path}: training state {e}; the file is damaged") from None
        if isinstance(value, (int, float)) and value < 0 and name != "valid_loss":
            raise CheckpointError(f"{path}: training state {name} is {value}, below 0; the file is damaged")
    return TrainState(**values)


# -- older versions --------------------------------------------------------------------------------
# Each migration turns a payload of version N into one of version N + 1.

TRAIN_STATE_KEYS = ("updates", "epoch", "position", "valid_loss", "valid_bleu", "best_bleu", "bad_validations",
                    "lr_offset")


def _from_v1(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1 stored the youtokentome model's bytes as "bpe_model"; 2 stores nmt.text.tokenizer's data form."""
    bpe = payload.pop("bpe_model", None)
    if not isinstance(bpe, bytes):
        raise KeyError("bpe_model")
    return {**payload, "tokenizer": {"kind": "youtokentome", "version": 1, "source": bpe}}


def _from_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 2 kept the TrainState fields at the top level and a single rank's generators in "rng" (the
    others in "rng_ranks"); 3 nests the state and lists every rank's generators."""
    out = {k: v for k, v in payload.items() if k not in TRAIN_STATE_KEYS and k not in ("rng", "rng_ranks")}
    for key in ("updates", "epoch"):
        if key not in payload:
            raise KeyError(key)
    out["state"] = {k: payload[k] for k in TRAIN_STATE_KEYS if k in payload}
    if "rng" in payload:
        out["rng"] = payload.get("rng_ranks") or [payload["rng"]]
    return out


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_v1, 2: _from_v2}


def migrate(payload: dict[str, Any], path: Path | str) -> dict[str, Any]:
    """`payload` of any version this nmt knows, as one of VERSION."""
    version = payload.get("version")
    if not isinstance(version, int) or not (min(MIGRATIONS) <= version <= VERSION):
        raise CheckpointError(f"{path}: checkpoint version {version} is not supported by this nmt (it reads "
                              f"{min(MIGRATIONS)} to {VERSION}); upgrade nmt")
    while version < VERSION:
        try:
            payload = MIGRATIONS[version](payload)
        except KeyError as e:
            raise CheckpointError(f"{path}: a version-{version} checkpoint without {e}; it is damaged") from None
        version += 1
    return payload


# -- files -----------------------------------------------------------------------------------------


def save(path: Path, ckpt: Checkpoint) -> None:
    """Write a checkpoint atomically: a crash mid-write leaves the previous file intact."""
    try:
        with atomic_write(path) as f:
            torch.save(ckpt.to_payload(), f)
    except (OutputError, RuntimeError) as e:
        # Disk full, read-only folder, quota: the user's to fix, not a bug. torch's zip writer reports a
        # failed write as a RuntimeError ("unexpected pos ...") raised while handling the OSError.
        cause = e.__cause__ if isinstance(e, OutputError) else e.__context__
        if not isinstance(cause, OSError):
            raise  # a folder in the way (already a one-line error), or a real bug
        raise CheckpointError(f"{path}: cannot write the checkpoint ({cause.strerror or cause}); "
                              "free disk space or choose a writable `out`, then rerun to resume") from e


def load(path: str | Path, map_location: str | torch.device = "cpu", mmap: bool = False) -> Checkpoint:
    """Load, migrate and check a checkpoint, as data only: a checkpoint is never allowed to run code. `mmap`: the
    tensors are mapped from the file, read only where used (what a checkpoint says of itself, without its
    weights)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory; pass a checkpoint file (e.g. {path}/averaged.pt)")
    if not path.exists():
        raise InputError(f"{path}: no such checkpoint; check the path")
    if not path.is_file():
        raise InputError(f"{path}: not a checkpoint file (a device or a pipe); pass a .pt file from nmt train "
                         "or average")
    try:
        # (only a whole zip file can be mapped: any other is read, so that a damaged file is told as such)
        payload = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap and zipfile.is_zipfile(path))
    except Exception as e:  # weights_only refuses code, so any failure here means a bad file, not a bug
        raise CheckpointError(f"{path}: not a readable nmt checkpoint ({load_failure(e)}); was it truncated or "
                              "written by another tool?") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an nmt checkpoint (no '{FORMAT}' header); train one with `nmt train`")
    return Checkpoint.from_payload(migrate(payload, path), path)


def load_failure(e: Exception) -> str:
    """Why `torch.load(weights_only=True)` failed, as a few whole words: nmt's own where the file holds objects
    other than plain data (torch's text for it advises loading it unsafely, which nmt never does), else the
    first sentence of torch's message, without its terminal colours."""
    text = " ".join(_COLOURS.sub("", str(e)).split())
    if isinstance(e, pickle.UnpicklingError) and "weights only" in text.lower().replace("_", " "):
        code = re.search(r"GLOBAL ([\w.]{1,80})", text)
        if code:
            return f"it calls Python code ({code.group(1)}), which nmt never runs: it loads tensors and plain data only"
        return "not a pickle of tensors and plain data: damaged or foreign"
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].rstrip(".")
    if len(sentence) > 160:
        sentence = sentence[:160].rsplit(" ", 1)[0] + " ..."
    return sentence or ("it ends too soon" if isinstance(e, EOFError) else "not a torch file of plain data")


def tokenizer_data(path: Path) -> dict[str, Any]:
    """The tokenizer a checkpoint was trained with, in `nmt.text.tokenizer`'s data form."""
    return load(path).tokenizer


def check_weights(state: dict[str, Any], path: Path | str) -> None:
    """CheckpointError unless every weight is a finite tensor: NaN weights would translate every line to
    nothing, without a word."""
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{path}: weight {name} is a {type(value).__name__}, not a tensor; "
                                  "the file is damaged")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"{path}: weight {name} holds NaN or infinite values (the run diverged before "
                                  "this checkpoint); use an earlier checkpoint")


def step_checkpoints(run_dir: Path) -> list[Path]:
    """The run's step checkpoints, oldest first."""
    if not run_dir.is_dir():
        return []
    return sorted(p for p in run_dir.iterdir() if STEP_PATTERN.search(p.name))


def latest(run_dir: Path) -> Optional[Path]:
    found = step_checkpoints(run_dir)
    return found[-1] if found else None


def load_resumable(path: Path) -> Checkpoint:
    """A step checkpoint that can resume training: loadable, with optimizer and random state."""
    ckpt = load(path)
    if ckpt.resumable is None:
        raise CheckpointError(f"{path}: lacks the optimizer and random state (an inference-only or damaged checkpoint)")
    return ckpt


def latest_resumable(run_dir: Path) -> tuple[Optional[Path], Optional[Checkpoint], list[str]]:
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


def average(paths: list[Path]) -> Checkpoint:
    """An inference checkpoint whose parameters are the elementwise mean of those of `paths`.

    All checkpoints must share the model config, the data (languages) and the tokenizer; means are
    accumulated in float64. Each counts once: a copy of another (checkpoint_best.pt is one of the step it was
    best at) or an average of others among `paths` is refused (`check_counted_once`).
    """
    if not paths:
        raise InputError("no checkpoints to average; name files or a run folder with `last` N")
    first = load(paths[0])
    check_weights(first.weights, paths[0])
    sums: dict[str, torch.Tensor] = {k: v.double() if v.is_floating_point() else v.clone()
                                     for k, v in first.weights.items()}
    at_update: dict[int, list[Path]] = {}
    check_counted_once(first, paths[0], at_update, paths)
    for path in paths[1:]:
        ckpt = load(path)
        if ckpt.model_config != first.model_config or ckpt.tokenizer != first.tokenizer or ckpt.data != first.data:
            what = ("model config" if ckpt.model_config != first.model_config else
                    "tokenizer (vocabulary)" if ckpt.tokenizer != first.tokenizer else
                    f"data ({ckpt.data.src} -> {ckpt.data.tgt} vs {first.data.src} -> {first.data.tgt})")
            raise CheckpointError(f"{path}: its {what} differs from {paths[0]}'s; average checkpoints of one run only")
        check_same_run(ckpt, first, path, paths[0])
        check_weights(ckpt.weights, path)
        check_same_tensors(ckpt.weights, first.weights, path, paths[0])
        check_counted_once(ckpt, path, at_update, paths)
        for k, v in ckpt.weights.items():
            if v.is_floating_point():
                sums[k] += v.double()
            elif not torch.equal(v, sums[k]):
                raise CheckpointError(f"{path}: integer tensor {k} differs from {paths[0]}; cannot average it")
    n = len(paths)
    weights = {k: (v / n).to(first.weights[k].dtype) if v.is_floating_point() else v for k, v in sums.items()}
    return dataclasses.replace(first.for_inference(), weights=weights, averaged=[str(p) for p in paths])


def check_counted_once(ckpt: Checkpoint, path: Path, at_update: dict[int, list[Path]], paths: list[Path]) -> None:
    """CheckpointError when `ckpt` (at `path`) holds the weights of a checkpoint averaged before it (one of those
    of its update in `at_update`, to which this adds it), or is itself an average of another of `paths`: either
    would count twice."""
    for member in ckpt.averaged:
        twice = next((p for p in paths if p != path and same_file(p, member)), None)
        if twice is not None:
            raise CheckpointError(f"{path} is an average of {twice}, also given: {twice} would count twice; "
                                  "give the step checkpoints or their average, not both")
    for earlier in at_update.setdefault(ckpt.state.updates, []):
        weights = load(earlier).weights
        if weights.keys() == ckpt.weights.keys() and all(torch.equal(v, ckpt.weights[k]) for k, v in weights.items()):
            raise CheckpointError(f"{path} holds the weights of {earlier} (update {ckpt.state.updates}), also given: "
                                  "they would count twice; give each checkpoint once (checkpoint_best.pt is a copy "
                                  "of the step checkpoint it was best at)")
    at_update[ckpt.state.updates].append(path)


def check_same_run(ckpt: Checkpoint, first: Checkpoint, path: Path, first_path: Path) -> None:
    """CheckpointError unless two checkpoints come from one run (or from fine-tunings of one checkpoint, whose
    average is a "model soup"): the mean of independently initialised weights is no model at all."""
    ours, theirs = ckpt.train_config, first.train_config
    same_start = ours.init_from and ours.init_from == theirs.init_from
    if ours.seed != theirs.seed and not same_start:
        raise CheckpointError(f"{path} and {first_path} come from different training runs (seed {ours.seed} and "
                              f"{theirs.seed}); the average of independently trained weights is no model: "
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
                                  f"{tuple(ref.shape)} {ref.dtype} in {reference_path}; average checkpoints of "
                                  "one run only")


def resolve_average_inputs(inputs: list[Path], last: Optional[int]) -> list[Path]:
    """Files named, or the newest `last` step checkpoints of a single run folder."""
    if len(inputs) == 1 and inputs[0].is_dir():
        found = step_checkpoints(inputs[0])
        if not found:
            raise InputError(f"{inputs[0]}: no step checkpoints (checkpoint_NNNNNNNN.pt) in this folder; train first")
        if last is not None and last < 1:
            raise InputError(f"`last` {last}: give a positive number of checkpoints to average")
        n = len(found) if last is None else last
        if n > len(found):
            raise InputError(f"`last` {n}: {inputs[0]} holds only {len(found)} step checkpoints; "
                             f"use `last` {len(found)} or fewer")
        return found[-n:]
    if last is not None:
        raise InputError("`last` N goes with a single run folder, not with checkpoint files")
    for p in inputs:
        if not p.is_file():
            raise InputError(f"{p}: no such checkpoint file")
    return inputs
