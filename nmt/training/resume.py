"""What a training run saves and how it picks up again: step checkpoints, the exact restore of a run,
fine-tuning's start from another run, and each rank's random streams.

`RunCheckpoints` is the part of `nmt.training.trainer.Trainer` that reads and writes checkpoints; the
attributes it declares are the Trainer's.
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, cast

import numpy as np
import torch

from nmt.config import ModelConfig, Overrides, SearchConfig, TrainConfig
from nmt.core.errors import ConfigError, ref
from nmt.core.identity import DataIdentity
from nmt.core.progress import Progress, ProgressFn
from nmt.model import checkpoint
from nmt.model.checkpoint import TrainState
from nmt.model.transformer import Transformer
from nmt.text.tokenizer import Tokenizer
from nmt.training.distributed import Comm


def rng_state(device: torch.device) -> dict[str, Any]:
    """Every random generator a run may draw from (dropout uses torch's), as checkpoint-safe data."""
    # The legacy tuple (legacy=True is the default), which numpy's stubs type as the dict of legacy=False.
    kind, keys, pos, has_gauss, cached = cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state())
    state = {"torch": torch.get_rng_state(), "python": list(random.getstate()),
             "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached": float(cached)}}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"].cpu())
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)
    if "python" in state:  # checkpoints of older nmt versions hold torch's only
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        s = state["numpy"]
        keys = s["keys"].cpu().numpy().astype(np.uint32)
        np.random.set_state(("MT19937", keys, s["pos"], s["has_gauss"], s["cached"]))


def rank_seed(seed: int, rank: int, updates: int = 0) -> int:
    """Dropout seed of rank r > 0: ranks must not draw the same masks."""
    return seed + 1_000_003 * rank + 7919 * updates


@dataclass
class Session:
    """What this process tracks of the run beside `TrainState`: rebuilt at every start, so not saved."""

    started: float = 0.0  # time.monotonic() at which the run's elapsed time was 0
    begun: float = 0.0  # the run's elapsed seconds when this session began to train
    bad_updates: int = 0  # consecutive skipped updates (for --max-bad-updates)
    saved_at: int = -1  # the update of the newest step checkpoint
    last_path: Optional[Path] = None  # the newest step checkpoint
    best_path: Optional[Path] = None  # checkpoint_best.pt, once written
    time_up: bool = False  # --max-time reached (every rank agrees: the flag travels in each update's all-reduce)
    stop_requested: bool = False  # Ctrl-C or SIGTERM reached some rank

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class RunCheckpoints:
    """A training process's checkpoints: writing them, and restoring a run (or starting a new one) from one."""

    out_dir: Path
    device: torch.device
    model_cfg: ModelConfig
    cfg: TrainConfig
    comm: Comm
    is_main: bool
    progress: ProgressFn
    identity: DataIdentity
    tokenizer: Tokenizer
    module: Transformer
    optimizer: torch.optim.Optimizer
    scaler: Any  # torch's GradScaler (`nmt.compute.device.make_scaler`)
    state: TrainState
    search: Overrides[SearchConfig]
    session: Session

    def restore(self, path: Path) -> None:
        ckpt = checkpoint.load(path, map_location=self.device)
        if ckpt.resumable is None:
            raise ConfigError(f"{path}: an inference-only checkpoint (averaged?) cannot resume training; "
                              f"move it out of {self.out_dir}")
        checkpoint.load_weights(self.module, ckpt.weights, path)
        checkpoint.load_optimizer(self.optimizer, ckpt.resumable.optimizer, path)
        if ckpt.resumable.scaler and self.scaler.is_enabled():  # a disabled scaler saves {}
            self.scaler.load_state_dict(ckpt.resumable.scaler)
        self.state, self.search = ckpt.state, ckpt.search
        self.restore_rng(ckpt.resumable.rng)
        best = self.out_dir / checkpoint.BEST_NAME
        self.session = Session(started=time.monotonic() - self.state.elapsed, saved_at=self.state.updates,
                               last_path=path, best_path=best if best.is_file() else None)

    def start_from(self, path: Path) -> str:
        """Fine-tuning: this new run's weights (and, unless reset, Adam's moments and the position in the
        learning-rate schedule) from another run's checkpoint. Returns what was taken, for the log."""
        ckpt = checkpoint.load(path, map_location=self.device)
        checkpoint.check_weights(ckpt.weights, path)
        checkpoint.load_weights(self.module, ckpt.weights, path)
        self.search = ckpt.search  # an imported model's search defaults go on with it
        taken = ["weights"]
        if not self.cfg.reset_optimizer:
            if ckpt.resumable is None:
                raise ConfigError(f"{path}: an inference-only checkpoint (averaged?) has no optimizer state to keep; "
                                  f"drop {ref('reset_optimizer', off=True)}, or start from a step checkpoint")
            checkpoint.load_optimizer(self.optimizer, ckpt.resumable.optimizer, path)
            taken.append("optimizer state")
        if not self.cfg.reset_lr_scheduler:
            self.state.lr_offset = ckpt.state.updates + ckpt.state.lr_offset
            taken.append(f"learning-rate schedule (at update {self.state.lr_offset})")
        return f"fine-tuning from {path} (update {ckpt.state.updates} of its run): took its {', '.join(taken)}"

    def restore_rng(self, per_rank: list[dict[str, Any]]) -> None:
        """Each rank continues its own random streams, so a resumed run draws the dropout masks it would have."""
        rank, world = self.comm.rank, self.comm.world
        if len(per_rank) == world:
            set_rng_state(per_rank[rank], self.device)
            return
        if rank == 0:
            set_rng_state(per_rank[0], self.device)
        else:
            torch.manual_seed(rank_seed(self.cfg.seed, rank, self.state.updates))
        self.progress(Progress("train", message=f"note: the checkpoint was written by {len(per_rank)} process(es), "
                               f"this run has {world}: dropout masks differ from an uninterrupted run"))

    def as_checkpoint(self, rngs: list[dict[str, Any]]) -> checkpoint.Checkpoint:
        """This run as a checkpoint: configs, data identity, tokenizer, weights, the `TrainState`, and what
        resuming needs (optimiser, scaler, each rank's random generators)."""
        return checkpoint.Checkpoint(
            self.model_cfg, self.cfg, self.identity, self.tokenizer.to_data(), self.module.state_dict(),
            dataclasses.replace(self.state),
            checkpoint.Resumable(self.optimizer.state_dict(), self.scaler.state_dict(), rngs), self.search)

    def save(self, best: bool = False) -> Path:
        """A step checkpoint (or checkpoint_best.pt); every rank must call it, rank 0 writes."""
        rngs = self.comm.gather(rng_state(self.device))
        self.state.elapsed = self.session.elapsed()
        path = self.out_dir / (checkpoint.BEST_NAME if best else checkpoint.STEP_NAME.format(self.state.updates))
        if self.is_main:
            checkpoint.save(path, self.as_checkpoint(rngs))
            if not best:
                checkpoint.prune(self.out_dir, self.cfg.keep_last)
            self.progress(Progress("train", message=f"saved {path}"))
        if best:
            self.session.best_path = path
        else:
            self.session.saved_at, self.session.last_path = self.state.updates, path
        return path
