"""Fine-tuning through the real CLI: `nmt prepare --bpe CKPT` encodes new data with a checkpoint's BPE model,
`nmt train --init-from CKPT` starts a new run from its weights, and in-domain BLEU rises.

The two "domains" of the bundled sample corpus: statements ("A man is riding a bicycle.") and questions
("Is a man riding a bicycle?"), whose word order differs in German ("Fährt ein Mann ...?").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import BPE_MODELS, SAMPLE_DIR
from test_cli import assert_user_error, nmt, ok

from nmt.model import checkpoint
from nmt.training.schedule import learning_rate

TRAIN = ["--preset", "tiny", "--warmup", "100",
         "--valid-interval", "1000", "--valid-bleu-sentences", "0", "--save-interval", "1000", "--threads", "1"]
BASE_UPDATES, TUNE_UPDATES = 120, 30


def split_by_domain(split: str, limit: int) -> dict[str, tuple[list[str], list[str]]]:
    en = (SAMPLE_DIR / f"{split}.en").read_text(encoding="utf-8").splitlines()
    de = (SAMPLE_DIR / f"{split}.de").read_text(encoding="utf-8").splitlines()
    domains: dict[str, tuple[list[str], list[str]]] = {"statements": ([], []), "questions": ([], [])}
    for e, d in zip(en, de):
        src, tgt = domains["questions" if e.endswith("?") else "statements"]
        if len(src) < limit:
            src.append(e)
            tgt.append(d)
    return domains


def write_pair(prefix: Path, pair: tuple[list[str], list[str]]) -> Path:
    for lang, lines in zip(("en", "de"), pair):
        prefix.with_name(f"{prefix.name}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return prefix


@pytest.fixture(scope="module")
def domains(tmp_path_factory) -> dict[str, Path]:
    """Raw text of both domains (train: 2,000 pairs each; valid: 150 questions) and the base model:
    the tiny preset trained on statements only."""
    root = tmp_path_factory.mktemp("fine_tuning")
    train, valid = split_by_domain("train", 2000), split_by_domain("valid", 150)
    paths = {name: write_pair(root / f"train-{name}", pair) for name, pair in train.items()}
    paths["valid"] = write_pair(root / "valid-questions", valid["questions"])
    shutil.copyfile(BPE_MODELS[1000], root / "bpe.model")
    ok(nmt("prepare", "--bpe", root / "bpe.model", "--train", paths["statements"], "--src", "en", "--tgt", "de",
           "--out", root / "data-statements", "--threads", "1"))
    ok(nmt("train", "--data", root / "data-statements", "--out", root / "base", "--max-updates", BASE_UPDATES, *TRAIN))
    return {**paths, "root": root, "base": checkpoint.latest(root / "base")}


def question_bleu(model: Path, domains: dict[str, Path]) -> float:
    r = ok(nmt("eval", "-m", model, "--src", f"{domains['valid']}.en", "--ref", f"{domains['valid']}.de",
               "--beam", "1", "--json", "--threads", "1"))
    return next(s["score"] for s in json.loads(r.stdout)["scores"] if s["metric"] == "BLEU 13a cased")


@pytest.mark.long
def test_fine_tuning_on_questions_raises_their_bleu(domains):
    root = domains["root"]
    # The new data is encoded with the checkpoint's own BPE model, read from the checkpoint.
    ok(nmt("prepare", "--bpe", domains["base"], "--train", domains["questions"], "--valid", domains["valid"],
           "--src", "en", "--tgt", "de", "--out", root / "data-questions", "--threads", "1"))
    assert (root / "data-questions" / "bpe.model").read_bytes() == checkpoint.load(domains["base"]).tokenizer["source"]
    r = ok(nmt("train", "--data", root / "data-questions", "--out", root / "tuned", "--init-from", domains["base"],
               "--max-updates", TUNE_UPDATES, *TRAIN))
    assert f"fine-tuning from {domains['base']}" in r.stderr and "took its weights" in r.stderr
    tuned = checkpoint.latest(root / "tuned")
    ckpt = checkpoint.load(tuned)
    assert ckpt.state.updates == TUNE_UPDATES and ckpt.train_config.init_from == str(domains["base"])
    # The same budget from scratch, for comparison: what the base model's weights are worth.
    ok(nmt("train", "--data", root / "data-questions", "--out", root / "scratch", "--max-updates", TUNE_UPDATES, *TRAIN))
    before, after = question_bleu(domains["base"], domains), question_bleu(tuned, domains)
    scratch = question_bleu(checkpoint.latest(root / "scratch"), domains)
    print(f"question BLEU: base {before:.2f}, fine-tuned {after:.2f}, from scratch {scratch:.2f}")
    assert after > before + 5 and after > scratch + 5


@pytest.mark.long
def test_fine_tuning_keeps_or_resets_the_optimizer_and_schedule(domains, tmp_path):
    base = checkpoint.load(domains["base"])
    data = tmp_path / "data"
    ok(nmt("prepare", "--bpe", domains["base"], "--train", domains["questions"], "--src", "en", "--tgt", "de",
           "--out", data, "--threads", "1"))
    ok(nmt("train", "--data", data, "--out", tmp_path / "kept", "--init-from", domains["base"], "--max-updates", 1,
           "--no-reset-optimizer", "--no-reset-lr-scheduler", *TRAIN))
    kept = checkpoint.load(checkpoint.latest(tmp_path / "kept"))
    assert kept.state.lr_offset == BASE_UPDATES
    # Adam's step counts go on from the base run's, and the learning rate is the schedule's at update 101.
    assert kept.resumable.optimizer["state"][0]["step"] == base.resumable.optimizer["state"][0]["step"] + 1
    assert kept.resumable.optimizer["param_groups"][0]["lr"] == pytest.approx(learning_rate(BASE_UPDATES + 1, 64, 2.0, 100))
    ok(nmt("train", "--data", data, "--out", tmp_path / "fresh", "--init-from", domains["base"], "--max-updates", 1,
           *TRAIN))
    fresh = checkpoint.load(checkpoint.latest(tmp_path / "fresh"))
    assert fresh.state.lr_offset == 0 and fresh.resumable.optimizer["state"][0]["step"] == 1
    assert fresh.resumable.optimizer["param_groups"][0]["lr"] == pytest.approx(learning_rate(1, 64, 2.0, 100))
    # The weights started from the base model's, not from a fresh initialisation: one small update away.
    name = "encoder.0.ffn.fc1.weight"
    assert torch.allclose(fresh.weights[name], base.weights[name], atol=0.05)


def test_fine_tuning_refuses_data_of_another_bpe_model(domains, tmp_path):
    shutil.copyfile(BPE_MODELS[300], tmp_path / "other-bpe.model")
    ok(nmt("prepare", "--bpe", tmp_path / "other-bpe.model", "--train", domains["questions"], "--src", "en",
           "--tgt", "de", "--out", tmp_path / "data", "--threads", "1"))
    r = nmt("train", "--data", tmp_path / "data", "--out", tmp_path / "run", "--init-from", domains["base"], *TRAIN)
    assert_user_error(r, str(tmp_path / "data"), str(domains["base"]), "different tokenizers", "nmt prepare --bpe")
    r = nmt("train", "--data", domains["root"] / "data-statements", "--out", tmp_path / "run2",
            "--init-from", domains["base"], "--d-model", "128", *TRAIN)
    assert_user_error(r, "d_model 64 -> 128", "architecture")
