"""`nmt train`: plan a run (new, or resumed from the newest checkpoint of its folder) and start its
processes, each of which trains one rank with a `nmt.training.trainer.Trainer`.

One code path serves every layout: a single process is a world of size 1, `--nproc N` / `--gpus N`
spawn N workers (`nmt.training.distributed.spawn`), and under torchrun each process trains the rank that
torchrun gave it.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Union

from nmt.config import PRESETS, ModelConfig, Overrides, TrainConfig, from_preset, overrides, to_dict
from nmt.core.errors import ConfigError, TrainingInterrupted, ref
from nmt.core.files import LOCK_NAME, folder_lock, remove_stale_temporaries, same_file
from nmt.core.identity import DataIdentity
from nmt.core.outputs import claim_folder
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.data.dataset import data_identity, longest_pair, read_tokenizer
from nmt.data.regularization import check_sampling
from nmt.model import checkpoint
from nmt.training.distributed import Comm, StopSignal, process_group, spawn, torchrun_env, workers
from nmt.training.runlog import CONFIG_NAME, LOG_NAME, TENSORBOARD_DIR
from nmt.training.trainer import Trainer, TrainResult

ModelOverrides = Union[Overrides[ModelConfig], Mapping[str, Any], None]
TrainOverrides = Union[Overrides[TrainConfig], Mapping[str, Any], None]


def plan(data_dir: Path, out_dir: Path, preset: Optional[str], model: ModelOverrides = None,
         train: TrainOverrides = None, progress: ProgressFn = ignore
         ) -> tuple[ModelConfig, TrainConfig, Optional[Path]]:
    """Final configs and the checkpoint to resume from (None for a new run), from the options given
    (`model`, `train`: the fields the user set).

    On resume the stored configs are the base: options given now change the training recipe
    (e.g. a larger --max-updates), but a model or data that differs from the stored one is an error.
    Newer checkpoints that cannot resume (a crash truncated them) are set aside, with a warning.
    """
    identity = data_identity(data_dir)
    model_given = overrides(ModelConfig, model) | Overrides(ModelConfig, {"vocab_size": identity.vocab_size})
    train_given = overrides(TrainConfig, train)
    resume, ckpt, notes = checkpoint.latest_resumable(out_dir)
    for note in notes:
        progress(Progress("train", message=note))
    init_from = train_given.get("init_from")
    if resume is None and init_from:
        model_cfg, train_cfg = plan_fine_tuning(data_dir, identity, preset, model_given, train_given)
        check_positions(data_dir, model_cfg, f"{ref('init_from')} {init_from}: its max_positions")
        return model_cfg, train_cfg, None
    if resume is None:
        model_cfg, train_cfg = from_preset(preset or "base", model_given, train_given)
        given = "" if "max_positions" in model_given else f"the preset {preset or 'base'}'s "
        check_positions(data_dir, model_cfg, f"{given}max_positions")
        return model_cfg, train_cfg, None
    assert ckpt is not None
    stored_init = ckpt.train_config.init_from
    if init_from and not (stored_init and (stored_init == init_from or same_file(stored_init, init_from))):
        started = f", started from {stored_init}" if stored_init else ""
        raise ConfigError(f"{ref('init_from')} {init_from}: {out_dir} holds another run (newest checkpoint "
                          f"{resume.name}{started}), which this command would resume, not start from {init_from}; "
                          f"choose a new {ref('out')} to fine-tune, or drop {ref('init_from')} to resume that run")
    if ckpt.data != identity:
        raise ConfigError(f"{out_dir} holds a run on other data ({ckpt.data.direction}, tokenizer "
                          f"{ckpt.data.tokenizer_sha256[:12]}); use a new {ref('out')} or the same {ref('data')}")
    stored_model, stored_train = ckpt.model_config, ckpt.train_config
    if preset is not None:
        model_cfg, train_cfg = from_preset(preset, model_given, train_given)
    else:
        model_cfg, train_cfg = model_given.apply(stored_model), train_given.apply(stored_train)
    differ = [f"{k} {getattr(stored_model, k)} -> {getattr(model_cfg, k)}"
              for k in to_dict(stored_model) if getattr(stored_model, k) != getattr(model_cfg, k)]
    if differ:
        raise ConfigError(f"{out_dir} holds a run with another model ({'; '.join(differ)}); "
                          f"use a new {ref('out')}, or drop the options that change the model")
    check_positions(data_dir, model_cfg, f"{resume}: the run's max_positions")
    return model_cfg, train_cfg, resume


def check_positions(data_dir: Path, model_cfg: ModelConfig, source: str) -> None:
    """ConfigError before training when the longest training pair (+ EOS or BOS) does not fit the model's
    positions (it would fail mid-run); `source` says where max_positions came from."""
    longest = longest_pair(data_dir)
    if longest + 1 > model_cfg.max_positions:
        raise ConfigError(f"{data_dir}: its longest training sentence has {longest} BPE tokens, but {source} "
                          f"{model_cfg.max_positions} takes {model_cfg.max_positions - 1} (+ EOS); raise "
                          f"max_positions to at least {longest + 1}, or prepare the data again with {ref('max_len')} "
                          f"{model_cfg.max_positions - 1}")


# Model fields that fine-tuning may change: the rest define the architecture the weights were trained for.
FINE_TUNING_MODEL_FIELDS = ("dropout", "attention_dropout", "activation_dropout")


def plan_fine_tuning(data_dir: Path, identity: DataIdentity, preset: Optional[str], model: Overrides[ModelConfig],
                     train: Overrides[TrainConfig]) -> tuple[ModelConfig, TrainConfig]:
    """Configs of a new run that starts from checkpoint `init_from`: its architecture (dropout may change),
    and its training recipe (or --preset's) with the options given now. The data must be encoded with
    the checkpoint's tokenizer, and go in the checkpoint's direction."""
    init = Path(train.get("init_from"))
    ckpt = checkpoint.load(init)
    if ckpt.data.pairs and (ckpt.data.directions, ckpt.data.tags) != (identity.directions, identity.tags):
        pairs = " ".join(f"--pair {s}-{t}" for s, t in ckpt.data.directions)
        raise ConfigError(f"{ref('init_from')} {init} is a model of {len(ckpt.data.directions)} language pairs, each "
                          f"target with its tag id; prepare the data with the same pairs in the same order: "
                          f"nmt prepare --bpe {init} {pairs} ...")
    if ckpt.languages != (identity.src, identity.tgt):
        raise ConfigError(f"{ref('init_from')} {init} translates {ckpt.data.src} -> {ckpt.data.tgt}, but {data_dir} "
                          f"holds {identity.src} -> {identity.tgt} data; fine-tune a model of the data's direction")
    if (ckpt.data.tokenizer, ckpt.data.tokenizer_sha256) != (identity.tokenizer, identity.tokenizer_sha256):
        raise ConfigError(f"{data_dir} and {init} use different tokenizers (vocabularies); encode the "
                          f"new data with the checkpoint's: nmt prepare --bpe {init} ...")
    stored = ckpt.model_config
    differ = [f"{k} {getattr(stored, k)} -> {v}" for k, v in model.values.items()
              if k not in FINE_TUNING_MODEL_FIELDS and getattr(stored, k) != v]
    if differ:
        raise ConfigError(f"{ref('init_from')} {init}: the options change its architecture ({'; '.join(differ)}); "
                          "drop them (only the dropouts can change when fine-tuning)")
    base = from_preset(preset)[1] if preset else ckpt.train_config
    return model.only(*FINE_TUNING_MODEL_FIELDS).apply(stored), train.apply(base)


@dataclass
class TrainJob:
    """Everything a worker process needs to train its rank (picklable: it crosses the spawn)."""

    data_dir: Path
    out_dir: Path
    preset: Optional[str] = None
    model_overrides: Overrides[ModelConfig] = field(default_factory=lambda: Overrides(ModelConfig))
    train_overrides: Overrides[TrainConfig] = field(default_factory=lambda: Overrides(TrainConfig))
    model_cfg: Optional[ModelConfig] = None  # None until planned
    train_cfg: Optional[TrainConfig] = None
    resume: Optional[Path] = None
    use_cuda: bool = False
    threads: int = 0
    world: int = 1

    def planned(self, progress: ProgressFn = ignore) -> TrainJob:
        model_cfg, train_cfg, resume = plan(self.data_dir, self.out_dir, self.preset, self.model_overrides,
                                            self.train_overrides, progress)
        return replace(self, model_cfg=model_cfg, train_cfg=train_cfg, resume=resume)


def run_rank(rank: int, init_method: Optional[str], progress: ProgressFn, stop: StopSignal, job: TrainJob,
             local_rank: Optional[int] = None) -> TrainResult:
    """Train rank `rank` of `job.world` in this process (the entry point of spawned workers too)."""
    local_rank = rank if local_rank is None else local_rank
    with process_group(rank, job.world, local_rank, job.use_cuda, init_method, job.threads) as comm:
        if job.model_cfg is None:
            # rank 0 decides what to resume: its folder is authoritative
            job = comm.from_rank0(lambda: job.planned(progress))
        trainer = comm.all_succeed(lambda: start_rank(job, comm, progress, stop))
        return trainer.run()


def start_rank(job: TrainJob, comm: Comm, progress: ProgressFn, stop: StopSignal) -> Trainer:
    """This rank's Trainer: new, resumed from `job.resume`, or started from --init-from."""
    assert job.model_cfg is not None and job.train_cfg is not None  # run_rank has planned the job
    trainer = Trainer(job.data_dir, job.out_dir, job.model_cfg, job.train_cfg, comm.device, progress, comm, stop)
    if job.resume is not None:
        check_resumable_here(job.resume, comm.rank)
        trainer.restore(job.resume)
        trainer.progress(Progress("train", message=f"resuming from {job.resume} (update {trainer.state.updates})"))
    elif job.train_cfg.init_from:
        trainer.progress(Progress("train", message=trainer.start_from(Path(job.train_cfg.init_from))))
    elif job.preset is not None:
        trainer.search = PRESETS[job.preset].search  # a student preset's greedy search goes into its checkpoints
    return trainer


def check_resumable_here(path: Path, rank: int) -> None:
    """Rank 0 chose `path` in its --out; every other rank (on other machines too) reads the same path."""
    if rank > 0 and not path.is_file():
        raise ConfigError(f"{path}: rank 0 resumes from this checkpoint, which this machine does not have; "
                          f"{ref('out')} must be one folder that every machine sees at the same path (a shared "
                          "filesystem), or copy the checkpoint to the same path on every machine")


def train(data_dir: Path, out_dir: Path, preset: Optional[str] = None, model_overrides: ModelOverrides = None,
          train_overrides: TrainOverrides = None, gpus: int = 0, progress: ProgressFn = ignore, *,
          nproc: int = 1, threads: int = 0) -> TrainResult:
    """Train (or resume) a model on a prepared dataset; checkpoints go to `out_dir`. `model_overrides`
    and `train_overrides` are the fields the user set (over the preset, or the resumed run's configs).

    `gpus` N > 0 trains on N GPUs of this machine, `nproc` N > 1 on N CPU processes; under torchrun
    the processes are torchrun's and this call trains one rank (on GPU LOCAL_RANK when gpus > 0).
    """
    job = TrainJob(Path(data_dir), Path(out_dir), preset, overrides(ModelConfig, model_overrides),
                   overrides(TrainConfig, train_overrides), threads=threads)
    env = torchrun_env()
    if env is not None:
        rank, world, local_rank = env
        if nproc > 1:
            raise ConfigError(f"{ref('nproc')} {nproc}: torchrun already started the processes; drop "
                              f"{ref('nproc')} (use torchrun --nproc-per-node)")
        job = replace(job, use_cuda=workers(min(gpus, 1), 1)[1], world=world)
        with run_folder(job.out_dir, progress) if rank == 0 else contextlib.nullcontext():
            return run_rank(rank, "env://", progress if rank == 0 else ignore, StopSignal(escalate=world == 1), job,
                            local_rank=local_rank)
    world, use_cuda = workers(gpus, nproc)
    with run_folder(job.out_dir, progress):
        return launch(job, world, use_cuda, progress)


@contextlib.contextmanager
def run_folder(out_dir: Path, progress: ProgressFn) -> Iterator[None]:
    """Hold the run folder's lock (a second `nmt train` on it would interleave two runs' checkpoints and
    log) and delete the temporary files a killed run left behind."""
    claim_folder(out_dir, ref("out"), (CONFIG_NAME, LOG_NAME, TENSORBOARD_DIR, "checkpoint_*.pt*"), "nmt train")
    created = not out_dir.exists()
    with folder_lock(out_dir):
        try:
            for path in remove_stale_temporaries(out_dir):
                progress(Progress("train", message=f"removed {path.name}, left behind by an interrupted run"))
            yield
        except BaseException:
            if created and [p.name for p in out_dir.iterdir()] == [LOCK_NAME]:  # a run that never began
                shutil.rmtree(out_dir, ignore_errors=True)
            raise


def launch(job: TrainJob, world: int, use_cuda: bool, progress: ProgressFn) -> TrainResult:
    """Plan `job` and train it in this process, or in `world` spawned workers."""
    job = replace(job.planned(progress), use_cuda=use_cuda, world=world)  # config errors surface before any spawn
    if world > 1 and job.train_cfg is not None:  # before the spawn: a worker's error comes with torch's noise
        check_sampling(read_tokenizer(job.data_dir), job.train_cfg.bpe_dropout)
    if world == 1:
        return run_rank(0, None, progress, StopSignal(), job)
    try:
        result: Optional[TrainResult] = spawn(run_rank, (job,), world, progress)  # rank 0's run_rank result
    except KeyboardInterrupt:  # a second Ctrl-C: the workers were killed
        raise TrainingInterrupted(f"aborted; newest checkpoint {checkpoint.latest(job.out_dir)}; "
                                  "run the same command to resume from it") from None
    if result is None:
        raise TrainingInterrupted("the workers stopped before training started; run the same command to start again")
    return result
