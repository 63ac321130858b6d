"""One training process: the model, the optimiser and the run's progress (`TrainState`), the update
(token-based gradient accumulation, mixed precision, skipped non-finite updates), validation (loss,
perplexity, BLEU) with early stopping, and the logs; checkpoints and the exact restore of all of it are
`nmt.training.resume`'s.

Every rank computes the same epoch batches and update groups; rank r trains on its share of each
update's batches, and DistributedDataParallel sums the gradients. Only rank 0 validates, logs,
reports and writes files. Starting the processes is `nmt.training.launch`'s job.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, cast

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from nmt.compute.device import autocast, make_scaler, precision_warning, resolve_precision
from nmt.compute.timing import training_timing
from nmt.config import ModelConfig, Overrides, SearchConfig, TrainConfig, to_toml
from nmt.core.errors import DataError, TrainingDiverged, TrainingInterrupted, ref
from nmt.core.files import atomic_write
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.data.batches import collate, group_updates, make_batches, sample_parts, shard
from nmt.data.dataset import ParallelDataset, data_identity, read_tokenizer
from nmt.data.regularization import Resegmenter
from nmt.model import checkpoint
from nmt.model.checkpoint import TrainState
from nmt.model.loss import Workspace, label_smoothed_loss, projected_loss
from nmt.model.transformer import Transformer, count_parameters
from nmt.text.tags import with_tags
from nmt.training.distributed import Comm, StopSignal
from nmt.training.resume import RunCheckpoints, Session, rank_seed
from nmt.training.runlog import CONFIG_NAME, RunLog
from nmt.training.schedule import learning_rate, tail_factor
from nmt.training.validation import Validator

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel


@dataclass
class TrainResult:
    updates: int
    epoch: int
    checkpoint: Optional[Path]
    valid_loss: Optional[float]
    seconds: float
    tokens_per_second: float
    valid_bleu: Optional[float] = None
    best_checkpoint: Optional[Path] = None
    stopped: str = ""  # why training ended: max-updates, max-epochs, max-time or patience
    rank: int = 0  # this process's rank: only rank 0's result speaks for the run
    new_updates: int = 0  # updates made by this command (0: the run had already ended)


@dataclass
class UpdateStats:
    loss: float  # label-smoothed loss per target token
    nll: float  # NLL per target token
    tokens: int  # target tokens of the update, all ranks
    gnorm: float  # gradient norm before clipping
    applied: bool  # False when the update was skipped (non-finite loss, or fp16 overflow)


class Trainer(RunCheckpoints):
    """One training process: model, optimiser, the run's `TrainState`, and the periodic side work
    (validation, checkpoints, logs). The other attributes are this process's own and are not saved."""

    def __init__(self, data_dir: Path, out_dir: Path, model_cfg: ModelConfig, train_cfg: TrainConfig,
                 device: torch.device, progress: ProgressFn = ignore, comm: Optional[Comm] = None,
                 stop: Optional[StopSignal] = None):
        self.data_dir, self.out_dir = data_dir, out_dir
        self.model_cfg, self.cfg, self.device = model_cfg, train_cfg, device
        self.comm = comm or Comm(device=device)
        self.is_main = self.comm.rank == 0
        self.progress = progress if self.is_main else ignore
        self.stop = stop or StopSignal()
        self.train_data = ParallelDataset(data_dir, "train")
        if len(self.train_data) == 0:
            raise DataError(f"{data_dir}: the train split holds no pairs; check the filters of `nmt prepare`")
        self.identity = data_identity(data_dir)
        self.tokenizer = read_tokenizer(data_dir)
        self.resegmenter = (Resegmenter(self.train_data, self.tokenizer, train_cfg.bpe_dropout, train_cfg.seed,
                                        model_cfg.max_positions - 1) if train_cfg.bpe_dropout > 0 else None)
        self.validator = Validator(data_dir, with_tags(self.tokenizer, self.identity), model_cfg.max_positions,
                                   train_cfg.max_tokens, train_cfg.valid_bleu_sentences, train_cfg.valid_beam)
        self.precision = resolve_precision(train_cfg.precision, device, training=True,
                                           timing=training_timing(model_cfg, train_cfg.label_smoothing))
        torch.manual_seed(train_cfg.seed)
        self.module = Transformer(model_cfg).to(device)
        self.model: torch.nn.Module = self.module  # becomes the DistributedDataParallel wrapper in run()
        if self.comm.rank > 0:
            torch.manual_seed(rank_seed(train_cfg.seed, self.comm.rank))
        self.optimizer = torch.optim.Adam(self.module.parameters(), lr=0.0, betas=train_cfg.adam_betas,
                                          eps=train_cfg.adam_eps)
        self.scaler = make_scaler(self.precision == "fp16", device.type)
        self.workspace = Workspace()  # the (N, V) logits of the fused loss, reused batch after batch
        self.state = TrainState()
        self.search: Overrides[SearchConfig] = Overrides(SearchConfig)  # translate's defaults (an imported model's)
        self.session = Session(started=time.monotonic())
        self.metrics: Optional[RunLog] = None
        # This epoch's data (the store, or its resegmentation), batches and update groups.
        self._epoch_cache: tuple[int, Any, list[np.ndarray], list[list[int]]] = (-1, self.train_data, [], [])

    # -- the schedule, the log --------------------------------------------------------------------

    def learning_rate(self, update: int, elapsed: float = 0.0) -> float:
        """The learning rate of update `update` (1-based), `elapsed` seconds into the run."""
        cfg = self.cfg
        base = learning_rate(update + self.state.lr_offset, self.model_cfg.d_model, cfg.lr_factor, cfg.warmup)
        # The run's progress: whichever of its limits it is nearer to, counted at the update's start.
        progress = max((update - 1) / cfg.max_updates, elapsed / cfg.max_time if cfg.max_time > 0 else 0.0)
        return base * tail_factor(cfg.lr_tail, progress, cfg.lr_tail_share)

    def log(self, record: dict[str, Any], section: str = "train") -> None:
        if self.metrics is not None:
            self.metrics.write(record, section)

    # -- work -----------------------------------------------------------------------------------

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        return autocast(self.precision, self.device)

    def sync_gradients(self, sync: bool) -> contextlib.AbstractContextManager[None]:
        """DDP all-reduces gradients in the backward of the last micro-batch of an update only."""
        if sync or self.model is self.module:
            return contextlib.nullcontext()
        return cast("DistributedDataParallel", self.model).no_sync()

    def update(self, group: list[np.ndarray]) -> UpdateStats:
        """One optimiser update over this rank's share of `group` (gradient accumulation)."""
        share = shard(group, self.comm.rank, self.comm.world) if self.comm.world > 1 else group
        loss_sum, nll_sum, tokens = self.accumulate(share)
        # One all-reduce carries the update's figures and the flags every rank must agree on.
        # The elapsed time too, averaged: every rank must set the same learning rate.
        elapsed = self.session.elapsed()
        flags = torch.tensor([tokens, self.stop.is_set(), self.out_of_time(elapsed), elapsed], dtype=torch.float64,
                             device=self.device)
        total = self.comm.all_sum(torch.cat([torch.stack([loss_sum, nll_sum]), flags])).tolist()
        loss_total, nll_total, all_tokens = total[0], total[1], int(total[2])
        self.session.stop_requested = self.session.stop_requested or total[3] > 0
        self.session.time_up, elapsed = total[4] > 0, total[5] / self.comm.world
        per_token = (loss_total / max(all_tokens, 1), nll_total / max(all_tokens, 1))
        if not math.isfinite(loss_total):
            return self.skip(f"the loss is {loss_total}", per_token, all_tokens, count=True)
        gnorm = self.normalise_gradients(all_tokens)
        for group_ in self.optimizer.param_groups:
            group_["lr"] = self.learning_rate(self.state.updates + 1, elapsed)
        if self.scaler.is_enabled():
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)  # skips the step when a gradient overflowed
            self.scaler.update()
            if self.scaler.get_scale() < scale:
                return self.skip(f"fp16 gradient overflow; loss scale now {self.scaler.get_scale():g}",
                                 per_token, all_tokens, count=False)
        elif not math.isfinite(gnorm):
            return self.skip(f"the gradient norm is {gnorm}", per_token, all_tokens, count=True)
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.updates += 1
        self.session.bad_updates = 0
        return UpdateStats(*per_token, all_tokens, gnorm, applied=True)

    def accumulate(self, share: list[np.ndarray]) -> tuple[Tensor, Tensor, int]:
        """Forward and backward of each batch; returns summed loss, summed NLL (float64) and target tokens."""
        self.model.train()
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        nll_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        tokens = 0
        for k, indices in enumerate(share):
            batch = collate(self.epoch_data(), indices).to(self.device)
            with self.sync_gradients(k == len(share) - 1):
                with self.autocast():
                    hidden = self.model(batch.src, batch.tgt_in, project=False)  # (B, T, D)
                loss, nll = self.loss(hidden.flatten(0, 1), batch.tgt_out.flatten())
                self.scaler.scale(loss).backward()  # summed: gradients are normalised by the update's token count later
            loss_sum, nll_sum, tokens = loss_sum + loss.detach(), nll_sum + nll.detach(), tokens + batch.tgt_tokens
        return loss_sum, nll_sum, tokens

    def loss(self, hidden: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """Summed label-smoothed loss and NLL of decoder states (N, D) against targets (N,), through the
        tied output projection: fused with it in fp32, under autocast otherwise."""
        weight, bias, eps = self.module.projection, self.module.output_bias, self.cfg.label_smoothing
        if self.precision == "fp32":
            return projected_loss(hidden, weight, target, eps, self.workspace, bias)
        with self.autocast():
            logits = torch.nn.functional.linear(hidden, weight, bias)  # (N, V)
        return label_smoothed_loss(logits, target, eps)

    def normalise_gradients(self, all_tokens: int) -> float:
        """Gradients of the mean loss per target token over all ranks, clipped; returns the norm before clipping."""
        self.scaler.unscale_(self.optimizer)  # no-op unless fp16
        # DDP averaged the ranks' summed gradients; dividing by tokens / world gives sum / all tokens,
        # exactly the single-process normalisation.
        divisor = max(all_tokens, 1) / self.comm.world if self.comm.world > 1 else max(all_tokens, 1)
        for p in self.module.parameters():
            if p.grad is not None:
                p.grad.div_(divisor)
        max_norm = self.cfg.clip_norm if self.cfg.clip_norm > 0 else math.inf  # inf: measure, do not clip
        return float(torch.nn.utils.clip_grad_norm_(self.module.parameters(), max_norm))

    def skip(self, why: str, per_token: tuple[float, float], tokens: int, count: bool) -> UpdateStats:
        """Drop this update's gradients; too many non-finite losses in a row stop training."""
        self.optimizer.zero_grad(set_to_none=True)
        self.session.bad_updates += count
        self.progress(Progress("train", message=f"update {self.state.updates + 1} skipped: {why}"))
        self.log({"update": self.state.updates + 1, "skipped": why})
        if self.session.bad_updates >= self.cfg.max_bad_updates:
            last = (f"the last good checkpoint is {self.session.last_path}; resume from it" if self.session.last_path
                    else "no checkpoint was written yet; start again")
            raise TrainingDiverged(
                f"update {self.state.updates + 1}: the loss was NaN/inf in {self.session.bad_updates} updates in a row "
                f"({ref('max_bad_updates')} {self.cfg.max_bad_updates}), training stopped; {last} with a lower "
                f"{ref('lr_factor')}, a {ref('clip_norm')}, or {ref('precision')} fp32")
        return UpdateStats(*per_token, tokens, math.nan, applied=False)

    def out_of_time(self, elapsed: float) -> bool:
        return self.cfg.max_time > 0 and elapsed >= self.cfg.max_time

    def epoch_data(self) -> Any:
        """This epoch's training pairs: the store, or with --bpe-dropout a fresh segmentation of it."""
        return self.epoch_groups()[0]

    def epoch_groups(self) -> tuple[Any, list[np.ndarray], list[list[int]]]:
        """This epoch's data, batches and update groups: the same on every rank, fixed by (seed, epoch)."""
        if self._epoch_cache[0] != self.state.epoch:
            epoch = self.state.epoch
            data = self.resegmenter.epoch(epoch) if self.resegmenter is not None else self.train_data
            batches = self.epoch_batches(data, epoch)
            self._epoch_cache = (epoch, data, batches, group_updates(batches, data.tgt_lengths, self.cfg.update_tokens))
        return self._epoch_cache[1], self._epoch_cache[2], self._epoch_cache[3]

    def epoch_batches(self, data: Any, epoch: int) -> list[np.ndarray]:
        """The batches of `epoch` (indices of `data`'s pairs): every pair once, or with several language pairs
        in the store each pair's share drawn by --pair-temperature."""
        if len(self.train_data.parts) < 2:
            return make_batches(data.src_lengths, data.tgt_lengths, self.cfg.max_tokens, seed=self.cfg.seed,
                                epoch=epoch)
        drawn = sample_parts([n for _, n in self.train_data.parts], self.cfg.pair_temperature, self.cfg.seed, epoch)
        batches = make_batches(data.src_lengths[drawn], data.tgt_lengths[drawn], self.cfg.max_tokens,
                               seed=self.cfg.seed, epoch=epoch)
        return [drawn[b] for b in batches]

    def finished(self) -> str:
        """Why training is over ('' while it goes on); the same on every rank."""
        cfg = self.cfg
        if self.state.updates >= cfg.max_updates:
            return "max-updates"
        if cfg.max_epochs > 0 and self.state.epoch >= cfg.max_epochs:
            return "max-epochs"
        if self.session.time_up:
            return "max-time"
        if cfg.patience and self.state.bad_validations >= cfg.patience:
            return "patience"
        return ""

    def wrap(self) -> None:
        """DistributedDataParallel over the module when there are several ranks."""
        if self.comm.world > 1 and self.model is self.module:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            # No buffer sync at every forward: the only buffer (sinusoidal positions) is constant.
            # (torch >= 2.13 renames the option; the old name still works there, with a warning.)
            params = inspect.signature(DistributedDataParallel.__init__).parameters
            sync: dict[str, Any]  # keyword arguments of DistributedDataParallel
            sync = {"forward_sync_buffers": False} if "forward_sync_buffers" in params else {"broadcast_buffers": False}
            self.model = DistributedDataParallel(self.module, device_ids=ids, **sync)

    def write_config(self) -> None:
        """RUN/config.toml: the resolved configuration, which `nmt train --config` reads back; also logged."""
        text = to_toml(self.model_cfg, self.cfg)
        with atomic_write(self.out_dir / CONFIG_NAME, "w") as f:  # a full disk: OutputError naming the file
            f.write(text)
        self.progress(Progress("train", message=f"configuration ({self.out_dir / CONFIG_NAME}):\n{text.rstrip()}"))

    def announce(self) -> None:
        backend = f"{self.comm.world} processes ({dist.get_backend()})" if self.comm.world > 1 else "1 process"
        self.progress(Progress("train", message=f"model: {count_parameters(self.module):,} parameters; "
                               f"{len(self.train_data):,} training pairs; device {self.device}, {backend}; "
                               f"precision {self.precision}"))
        warning = precision_warning(self.precision, self.device)
        if warning:
            self.progress(Progress("train", message=warning))

    def run(self) -> TrainResult:
        self.session.started = time.monotonic() - self.state.elapsed  # the clock runs from here (set-up excluded)
        # A run resumed after its --max-time ran out has ended: no update (the saved elapsed time, the same on
        # every rank, decides; a rerun of a finished recipe made one more update and a checkpoint).
        self.session.time_up = self.out_of_time(self.state.elapsed)
        first_update = self.state.updates
        if self.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self.metrics = RunLog(self.out_dir)
            self.write_config()
        self.wrap()
        self.announce()
        tokens_seen, self.session.begun = 0, self.session.elapsed()
        if self.session.last_path is None and self.is_main:
            self.session.last_path = checkpoint.latest(self.out_dir)
        try:
            with self.stop.installed():
                while not self.finished():
                    _, batches, groups = self.epoch_groups()
                    if self.state.position >= len(groups):
                        self.state.epoch, self.state.position = self.state.epoch + 1, 0
                        continue
                    stats = self.update([batches[i] for i in groups[self.state.position]])
                    self.state.position += 1
                    tokens_seen += stats.tokens
                    if stats.applied:
                        self.after_update(stats, tokens_seen, len(groups))
                    if self.session.stop_requested:
                        path = self.save() if self.state.updates > self.session.saved_at else self.session.last_path
                        raise TrainingInterrupted(f"interrupted at update {self.state.updates}; checkpoint {path}; "
                                                  "run the same command to resume", signum=self.stop.signum)
                stopped = self.finished()
                if (self.state.updates > first_update and self.state.updates % self.cfg.valid_interval != 0
                        and stopped != "patience"):
                    self.report_valid(periodic=False)
                if self.state.updates > self.session.saved_at:
                    self.save()
        except KeyboardInterrupt:  # a second Ctrl-C: no time to save
            raise TrainingInterrupted(f"aborted during update {self.state.updates + 1}; newest checkpoint "
                                      f"{self.session.last_path}; "
                                      "run the same command to resume from it") from None
        finally:
            if self.metrics is not None:
                self.metrics.close()
            if self.resegmenter is not None:
                self.resegmenter.close()
        seconds = self.session.elapsed() - self.session.begun
        return TrainResult(self.state.updates, self.state.epoch, self.session.last_path, self.state.valid_loss, seconds,
                           tokens_seen / max(seconds, 1e-9), valid_bleu=self.state.valid_bleu,
                           best_checkpoint=self.session.best_path,
                           stopped=stopped, rank=self.comm.rank, new_updates=self.state.updates - first_update)

    def after_update(self, stats: UpdateStats, tokens_seen: int, n_groups: int) -> None:
        elapsed = self.session.elapsed()
        if self.state.updates % self.cfg.log_interval == 0 or self.state.updates == 1:
            # the figures a progress line at 80 columns keeps first, after the update count and time left
            info = {"loss": stats.loss, "ppl": math.exp(min(stats.nll, 50.0)),
                    "lr": self.learning_rate(self.state.updates, elapsed),
                    "tok/s": tokens_seen / max(elapsed - self.session.begun, 1e-9), "gnorm": stats.gnorm,
                    "epoch": self.state.epoch + 1, "batch": f"{self.state.position}/{n_groups}", "elapsed": elapsed}
            time_left = max(self.cfg.max_time - elapsed, 0.0) if self.cfg.max_time > 0 else None
            self.progress(Progress("train", done=self.state.updates, total=self.cfg.max_updates, unit="updates",
                                   info=info, time_left=time_left))
            self.log({"update": self.state.updates, **info})
        if self.state.updates % self.cfg.valid_interval == 0:
            self.report_valid(periodic=True)
        if self.state.updates % self.cfg.save_interval == 0:
            self.save()

    def report_valid(self, periodic: bool) -> None:
        """Validate on rank 0 (the others wait in the broadcast), then update best/patience on every rank.

        Only periodic validations count towards --patience, so that stopping and resuming does not
        change when early stopping triggers; the final one still updates the best checkpoint.
        """
        if not len(self.validator):
            return
        measured = [math.nan, math.nan]
        if self.is_main:
            loss = self.validator.loss(self.module, self.device, self.autocast)
            assert loss is not None  # the validator has pairs (len above)
            bleu = self.validator.bleu(self.module, self.device, self.autocast)
            measured = [loss, math.nan if bleu is None else bleu]
        loss, bleu = self.comm.broadcast(measured)
        self.state.valid_loss, self.state.valid_bleu = loss, None if math.isnan(bleu) else bleu
        best, now = self.state.best_bleu, self.state.valid_bleu
        improved = now is not None and (best is None or now > best)
        if improved:
            self.state.best_bleu, self.state.bad_validations = self.state.valid_bleu, 0
        elif periodic and self.state.valid_bleu is not None:
            self.state.bad_validations += 1
        record: dict[str, Optional[float]] = {"update": self.state.updates, "valid_loss": loss,
                                              "valid_ppl": math.exp(min(loss, 50.0))}
        text = f"valid | update {self.state.updates} | loss {loss:.3f} | ppl {record['valid_ppl']:.2f}"
        if self.state.valid_bleu is not None:
            record.update(valid_bleu=self.state.valid_bleu, valid_best_bleu=self.state.best_bleu)
            text += f" | BLEU {self.state.valid_bleu:.2f} (best {self.state.best_bleu:.2f})"
        self.log(record, "valid")
        self.progress(Progress("train", message=text, info=record))
        if improved:
            self.save(best=True)
        if self.finished() == "patience":
            self.progress(Progress("train", message=f"early stop: no BLEU improvement in {self.state.bad_validations} "
                                   f"validations ({ref('patience')} {self.cfg.patience}); "
                                   f"best {self.state.best_bleu:.2f}"))
