"""Learning-rate schedule (no data needed); then short runs of a tiny model: validation BLEU, best
checkpoint, patience, NaN handling, TensorBoard, precision, the CLI (nmt.training.launch and nmt.training.trainer)."""

import json
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import prepare_sample

import nmt.training.trainer as trainer_module
import nmt.training.validation as validation_module
from nmt.config import TrainConfig, from_dict, to_dict
from nmt.core.errors import ConfigError, OutputError, TrainingDiverged
from nmt.model import checkpoint
from nmt.training.launch import train
from nmt.training.schedule import learning_rate, tail_factor


@pytest.mark.parametrize(
    "update, d_model, factor, warmup, expected",
    [
        # warmup phase: factor * d^-0.5 * step * warmup^-1.5
        (1, 512, 1.0, 4000, 512 ** -0.5 * 1 * 4000 ** -1.5),
        (1000, 512, 1.0, 4000, 512 ** -0.5 * 1000 * 4000 ** -1.5),
        # the peak at step == warmup: both branches agree, 7.0e-4 for the base model
        (4000, 512, 1.0, 4000, 6.987712429686844e-04),
        # decay: factor * d^-0.5 * step^-0.5
        (16000, 512, 1.0, 4000, 512 ** -0.5 / 4 / math.sqrt(1000)),
        (100, 64, 2.0, 200, 2.0 * 64 ** -0.5 * 100 * 200 ** -1.5),
        (0, 512, 1.0, 4000, 512 ** -0.5 * 4000 ** -1.5),  # step 0 is treated as step 1
    ],
)
def test_learning_rate_values(update, d_model, factor, warmup, expected):
    assert learning_rate(update, d_model, factor, warmup) == pytest.approx(expected, rel=1e-9)


def test_learning_rate_peaks_at_warmup():
    rates = [learning_rate(s, 512, 1.0, 4000) for s in range(1, 20000, 7)]
    peak_step = 1 + 7 * int(np.argmax(rates))
    assert abs(peak_step - 4000) <= 7


@pytest.mark.parametrize("kind, progress, share, expected", [
    ("none", 0.99, 0.2, 1.0),  # the paper's schedule: no tail
    ("linear", 0.5, 0.2, 1.0), ("linear", 0.8, 0.2, 1.0),  # before the tail
    ("linear", 0.9, 0.2, 0.5), ("linear", 1.0, 0.2, 0.0), ("linear", 1.3, 0.2, 0.0),  # down to 0 at the end
    ("cosine", 0.8, 0.2, 1.0), ("cosine", 0.9, 0.2, 0.5), ("cosine", 0.85, 0.2, 0.5 * (1 + math.cos(math.pi / 4))),
    ("cosine", 1.0, 0.2, 0.0), ("linear", 0.5, 1.0, 0.5),  # a tail over the whole run
])
def test_tail_factor(kind, progress, share, expected):
    assert tail_factor(kind, progress, share) == pytest.approx(expected, abs=1e-12)


# -- training runs on a tiny model (one CPU thread) ----------------------------------------------

MODEL = dict(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64)
# One batch per update (update_tokens 1), so the n-th loss computed belongs to the n-th update attempt.
TRAIN = dict(max_tokens=256, update_tokens=1, warmup=10, log_interval=1, valid_interval=1000, save_interval=1000,
             valid_bleu_sentences=10)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A prepared store from the first 300 training and 20 validation pairs of the sample corpus."""
    return prepare_sample(tmp_path_factory.mktemp("train_data"), 300, 20)


def run(data: Path, out: Path, progress=None, **overrides):
    events = [] if progress is None else progress
    return train(data, out, preset="tiny", model_overrides=MODEL, train_overrides={**TRAIN, **overrides},
                 progress=events.append)


def log_records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]


def test_validation_bleu_and_best_checkpoint(data, tmp_path):
    result = run(data, tmp_path, max_updates=4, valid_interval=2, save_interval=2)
    valid = [r for r in log_records(tmp_path) if "valid_loss" in r]
    assert [r["update"] for r in valid] == [2, 4]
    assert all(0.0 <= r["valid_bleu"] <= 100.0 and r["valid_ppl"] > 1.0 for r in valid)
    best = tmp_path / checkpoint.BEST_NAME
    assert result.best_checkpoint == best and checkpoint.load(best).state.updates in (2, 4)
    assert result.valid_bleu == valid[-1]["valid_bleu"]
    # checkpoint_best.pt is no step checkpoint: averaging and pruning leave it alone.
    assert not checkpoint.STEP_PATTERN.search(best.name)
    assert [p.name for p in checkpoint.step_checkpoints(tmp_path)] == ["checkpoint_00000002.pt", "checkpoint_00000004.pt"]
    train_records = [r for r in log_records(tmp_path) if "loss" in r]
    assert {"loss", "ppl", "lr", "gnorm", "tok/s"} <= set(train_records[0])


def test_patience_stops_after_validations_without_improvement(data, tmp_path, monkeypatch):
    scores = iter([10.0, 12.0, 11.0, 12.0, 30.0])  # best at the 2nd validation; the 3rd and 4th do not beat it
    monkeypatch.setattr(validation_module, "corpus_bleu", lambda hyps, refs: next(scores))
    events = []
    result = run(data, tmp_path, events, max_updates=50, valid_interval=1, patience=2)
    assert result.updates == 4 and result.stopped == "patience"
    assert checkpoint.load(tmp_path / checkpoint.BEST_NAME).state.updates == 2
    assert any("early stop" in (e.message or "") for e in events)
    assert checkpoint.latest(tmp_path).name == "checkpoint_00000004.pt"


def poisoned_loss(bad_calls):
    """Trainer.loss that returns NaN on the listed calls (1-based)."""
    real = trainer_module.Trainer.loss
    calls = {"n": 0}

    def loss(self, hidden, target):
        calls["n"] += 1
        value, nll = real(self, hidden, target)
        return (value * float("nan"), nll) if calls["n"] in bad_calls else (value, nll)

    return loss


def test_a_nan_loss_skips_the_update(data, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_module.Trainer, "loss", poisoned_loss({3}))
    events = []
    result = run(data, tmp_path, events, max_updates=5, valid_bleu_sentences=0)
    assert result.updates == 5
    assert [r for r in log_records(tmp_path) if "skipped" in r] == [{"update": 3, "skipped": "the loss is nan"}]
    assert any(e.message == "update 3 skipped: the loss is nan" for e in events)
    ckpt = checkpoint.load(result.checkpoint)
    assert all(torch.isfinite(t).all() for t in ckpt.weights.values())
    assert ckpt.resumable.optimizer["state"][0]["step"].item() == 5  # Adam stepped 5 times, not 6


def test_a_persistent_nan_stops_training_naming_the_last_good_checkpoint(data, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_module.Trainer, "loss", poisoned_loss(set(range(3, 100))))
    with pytest.raises(TrainingDiverged) as caught:
        run(data, tmp_path, max_updates=20, save_interval=1, max_bad_updates=3)
    message = str(caught.value)
    assert message.startswith("update 3: the loss was NaN/inf in 3 updates in a row (`max_bad_updates` 3)")
    assert str(tmp_path / "checkpoint_00000002.pt") in message and "\n" not in message
    assert checkpoint.latest(tmp_path).name == "checkpoint_00000002.pt"
    assert all(torch.isfinite(t).all() for t in checkpoint.load(checkpoint.latest(tmp_path)).weights.values())


def test_metrics_go_to_tensorboard_when_it_is_installed(data, tmp_path, monkeypatch):
    written: list[tuple[str, float, int]] = []

    class FakeWriter:
        def __init__(self, log_dir):
            self.log_dir = log_dir

        def add_scalar(self, tag, value, step):
            written.append((tag, value, step))

        def flush(self):
            pass

        def close(self):
            written.append(("closed", 0.0, 0))

    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = FakeWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    run(data, tmp_path, max_updates=2, valid_interval=2)
    tags = {tag for tag, _, _ in written}
    assert {"train/loss", "train/ppl", "train/lr", "train/gnorm", "train/tok_per_s", "valid/loss", "valid/ppl",
            "valid/bleu"} <= tags
    assert ("train/loss", log_records(tmp_path)[0]["loss"], 1) in written
    assert written[-1][0] == "closed"


def test_without_tensorboard_only_the_log_is_written(data, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails, as when not installed
    run(data, tmp_path, max_updates=1)
    assert log_records(tmp_path)[0]["update"] == 1
    assert not (tmp_path / "tensorboard").exists()


def test_bf16_autocast_trains_on_the_cpu(data, tmp_path):
    result = run(data, tmp_path, max_updates=2, precision="bf16", valid_bleu_sentences=2)
    ckpt = checkpoint.load(result.checkpoint)
    assert ckpt.train_config.precision == "bf16" and ckpt.state.updates == 2
    assert all(t.dtype == torch.float32 and torch.isfinite(t).all() for t in ckpt.weights.values())


def test_new_options_are_checked_and_old_configs_still_load():
    with pytest.raises(ConfigError, match="`patience` .* needs `valid_bleu_sentences` above 0"):
        TrainConfig(patience=3, valid_bleu_sentences=0).validate()
    with pytest.raises(ConfigError, match="`precision` 'fp8'"):
        TrainConfig(precision="fp8").validate()
    with pytest.raises(ConfigError, match="`valid_beam` must be at least 1"):
        TrainConfig(valid_beam=0).validate()
    old = {k: v for k, v in to_dict(TrainConfig()).items()
           if k not in ("precision", "max_bad_updates", "valid_bleu_sentences", "valid_beam", "patience")}
    assert from_dict(TrainConfig, old) == TrainConfig()


def test_cli_train_with_the_new_options(data, tmp_path):
    from typer.testing import CliRunner

    from nmt.cli.main import app

    args = ["train", "--data", str(data), "--out", str(tmp_path), "--preset", "tiny", "--d-model", "32", "--heads", "2",
            "--layers", "1", "--d-ff", "64", "--max-tokens", "256", "--update-tokens", "1", "--max-updates", "2",
            "--valid-interval", "2", "--valid-beam", "2", "--valid-bleu-sentences", "3", "--patience", "4",
            "--max-bad-updates", "7", "--precision", "fp32", "--nproc", "1", "--threads", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    stored = to_dict(checkpoint.load(checkpoint.latest(tmp_path)).train_config)
    assert (stored["valid_beam"], stored["valid_bleu_sentences"], stored["patience"], stored["max_bad_updates"],
            stored["precision"]) == (2, 3, 4, 7, "fp32")
    assert "valid_bleu" in log_records(tmp_path)[-1]


def test_unwritable_config_is_a_one_line_error(data, tmp_path):
    (tmp_path / "config.toml").mkdir()  # the file cannot be written: a folder is in the way
    with pytest.raises(OutputError, match="config.toml: is a folder"):
        run(data, tmp_path, max_updates=1)


def test_a_tail_ends_the_schedule_at_max_updates(data, tmp_path):
    """--lr-tail linear over the last half: the logged rate falls linearly to (nearly) 0 at the last update,
    and the first half follows the paper's schedule."""
    run(data, tmp_path, max_updates=8, lr_tail="linear", lr_tail_share=0.5)
    rates = [r["lr"] for r in log_records(tmp_path) if "lr" in r]
    paper = [learning_rate(u, 32, 2.0, 10) for u in range(1, 9)]  # tiny preset: lr_factor 2.0
    assert rates[:5] == pytest.approx(paper[:5])  # progress (u - 1) / 8 <= 0.5
    assert rates[5:] == pytest.approx([paper[5] * 0.75, paper[6] * 0.5, paper[7] * 0.25])


def test_a_tail_without_a_schedule_end_is_refused():
    with pytest.raises(ConfigError, match="`lr_tail_share` only applies with `lr_tail`"):
        from nmt.config import Overrides

        Overrides(TrainConfig, {"lr_tail_share": 0.3}).apply()
