"""`nmt train`: train a Transformer, or resume a run."""

from __future__ import annotations

from nmt.cli.options import with_config_options
from nmt.cli.stdio import write_stdout
from nmt.config import ModelConfig, Overrides, TrainConfig
from nmt.config.command_options import TrainRunOptions
from nmt.config.flags import as_flags

EPILOG = ("Example: nmt train --data run/data --out run --preset base --gpus 8   "
          "(multi-node: torchrun ... -m nmt train ..., see docs/training.md)")


@with_config_options({"run": TrainRunOptions, "model": ModelConfig, "train": TrainConfig})
def train_command(run: Overrides[TrainRunOptions], model: Overrides[ModelConfig],
                  train: Overrides[TrainConfig]) -> None:
    """Train a Transformer (or resume the run in --out), on the CPU, GPUs or several machines."""
    from nmt.cli.console import progress_display, say
    from nmt.training.launch import train as train_run
    from nmt.workflows.training_run import resolved_toml, summary, train_plan

    o = run.apply()
    chosen = train_plan(o.data, o.config, o.preset, model, train, o.layers, o.threads, o.print_config)
    if o.print_config:
        write_stdout(resolved_toml(o.data, o.out, chosen))
        return
    with progress_display() as report:
        result = train_run(o.data, o.out, chosen.preset, chosen.model, chosen.train, gpus=o.gpus, progress=report,
                           nproc=o.nproc, threads=o.threads)
    if result.rank == 0:  # under torchrun every process returns here; rank 0 speaks for the run
        say(as_flags(summary(result, o.out)))
