"""Checkpoints: averaging, atomic saving, safe and checked loading, and run-folder helpers."""

from __future__ import annotations

import dataclasses
import os
import pickle
import random
import re
from pathlib import Path

import pytest
import torch

from nmt.core.errors import CheckpointError, InputError
from nmt.engines.search import SearchConfig
from nmt.engines.torch_engine import TorchEngine
from nmt.model import checkpoint


@pytest.fixture(scope="module")
def steps(tiny_run) -> list[Path]:
    found = checkpoint.step_checkpoints(tiny_run)
    assert [p.name for p in found] == ["checkpoint_00000010.pt", "checkpoint_00000020.pt", "checkpoint_00000030.pt"]
    return found


# -- averaging -------------------------------------------------------------------------------------


def test_average_is_elementwise_mean(steps, tmp_path):
    a, b, c = (checkpoint.load(p) for p in steps)
    avg = checkpoint.average(steps)
    assert set(avg.weights) == set(a.weights)
    differs = 0
    for k, v in avg.weights.items():
        expected = (a.weights[k].double() + b.weights[k].double() + c.weights[k].double()) / 3
        assert v.dtype == a.weights[k].dtype and v.shape == a.weights[k].shape, k
        torch.testing.assert_close(v.double(), expected, atol=1e-6, rtol=0)
        differs += not torch.equal(a.weights[k], c.weights[k])
    assert differs > 0  # the checkpoints really differ, so the mean is not trivially any of them
    # Everything needed for inference is kept, from the first checkpoint.
    for key in ("model_config", "train_config", "data", "tokenizer", "state"):
        assert getattr(avg, key) == getattr(a, key), key
    assert avg.averaged == [str(p) for p in steps]
    assert avg.resumable is None  # an inference checkpoint

    out = tmp_path / "averaged.pt"
    checkpoint.save(out, avg)
    stored = torch.load(out, weights_only=True)
    assert stored["format"] == checkpoint.FORMAT and stored["version"] == checkpoint.VERSION
    assert "optimizer" not in stored and stored["averaged"] == [str(p) for p in steps]
    assert checkpoint.load(out).averaged == avg.averaged
    translator = TorchEngine(out, SearchConfig(beam=2))
    [t] = translator.translate_chunk(["A man is riding a bicycle."])
    assert isinstance(t.text, str)


def test_average_of_one_is_identity(steps):
    one = checkpoint.load(steps[1])
    avg = checkpoint.average([steps[1]])
    assert set(avg.weights) == set(one.weights)
    for k, v in avg.weights.items():
        assert v.dtype == one.weights[k].dtype
        assert torch.equal(v, one.weights[k]), k


def test_average_of_nothing_is_an_input_error():
    with pytest.raises(InputError):
        checkpoint.average([])


@pytest.mark.parametrize("change, words", [("model_config", "model config"), ("tokenizer", "tokenizer"),
                                           ("data", "data (de -> en vs en -> de)")])
def test_average_refuses_mismatched_checkpoints(steps, tmp_path, change, words):
    other = checkpoint.load(steps[0])
    if change == "model_config":
        other.model_config = dataclasses.replace(other.model_config, dropout=0.3)
    elif change == "tokenizer":
        other.tokenizer = {**other.tokenizer, "source": other.tokenizer["source"] + b"\n"}
    else:  # a model of the other direction over the same vocabulary
        other.data = dataclasses.replace(other.data, src=other.data.tgt, tgt=other.data.src)
    odd = tmp_path / "odd.pt"
    checkpoint.save(odd, other)
    with pytest.raises(CheckpointError) as e:
        checkpoint.average([steps[1], odd])
    assert str(odd) in str(e.value) and words in str(e.value)


def test_average_refuses_other_architecture(steps, tmp_path):
    """A checkpoint of a differently shaped model must not be averaged (nor crash with a shape error)."""
    other = checkpoint.load(steps[0])
    other.model_config = dataclasses.replace(other.model_config, d_model=32, d_ff=64)
    other.weights = {k: v[..., :1].clone() for k, v in other.weights.items()}
    odd = tmp_path / "small.pt"
    checkpoint.save(odd, other)
    with pytest.raises(CheckpointError):
        checkpoint.average([steps[0], odd])


def best_of(step: Path, out: Path, how: str) -> Path:
    """checkpoint_best.pt as training writes it beside `step`: the same weights and update, saved at the
    validation (so with its BLEU in the state: other bytes), or a byte copy."""
    if how == "copy":
        out.write_bytes(step.read_bytes())
    else:
        ckpt = checkpoint.load(step)
        ckpt.state = dataclasses.replace(ckpt.state, valid_bleu=12.5, best_bleu=12.5)
        checkpoint.save(out, ckpt)
    return out


@pytest.mark.parametrize("how", ["saved at the validation", "copy"])
@pytest.mark.parametrize("order", ["best last", "best first"])
def test_average_refuses_a_checkpoint_that_duplicates_another(steps, tmp_path, how, order):
    """`nmt average RUN/*.pt` takes checkpoint_best.pt beside the step it copies: decided by the weights and
    the update they record (not by the name), refused in one line naming both files, as a file given twice is."""
    run = tmp_path / "run"
    run.mkdir()
    for step in steps:
        (run / step.name).write_bytes(step.read_bytes())
    best = best_of(run / steps[1].name, run / ("checkpoint_best.pt" if order == "best last" else "a-copy.pt"), how)
    given = sorted(run.iterdir())  # what the shell's RUN/*.pt gives
    with pytest.raises(CheckpointError) as e:
        checkpoint.average(given)
    message = str(e.value)
    assert "\n" not in message and str(best) in message and str(run / steps[1].name) in message
    assert "twice" in message and "update 20" in message


def test_average_takes_checkpoints_of_one_update_with_other_weights(steps, tmp_path):
    """The update alone is no duplicate: a checkpoint of update 20 with other weights counts as itself."""
    other = checkpoint.load(steps[1])
    other.weights = {k: v + 0.5 if v.is_floating_point() else v for k, v in other.weights.items()}
    checkpoint.save(tmp_path / "other-20.pt", other)
    avg = checkpoint.average([*steps, tmp_path / "other-20.pt"])
    assert len(avg.averaged) == 4


def test_average_refuses_an_average_with_its_own_checkpoints(steps, tmp_path):
    checkpoint.save(tmp_path / "averaged.pt", checkpoint.average(steps[1:]))
    for given in ([tmp_path / "averaged.pt", *steps], [*steps, tmp_path / "averaged.pt"]):
        with pytest.raises(CheckpointError) as e:
            checkpoint.average(given)
        assert "\n" not in str(e.value) and f"{tmp_path / 'averaged.pt'} is an average of {steps[1]}" in str(e.value)


# -- atomic save -----------------------------------------------------------------------------------


@pytest.mark.parametrize("exc", [RuntimeError("disk full"), OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_save_is_atomic(steps, tmp_path, monkeypatch, exc):
    path = tmp_path / "model.pt"
    payload = checkpoint.load(steps[0])
    checkpoint.save(path, payload)
    before = path.read_bytes()

    def failing_save(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise exc

    monkeypatch.setattr(torch, "save", failing_save)
    # An OSError (disk full) is the user's to fix: a CheckpointError naming the file, not a traceback.
    expected = CheckpointError if isinstance(exc, OSError) else type(exc)
    with pytest.raises(expected) as raised:
        checkpoint.save(path, payload)
    monkeypatch.undo()
    if expected is CheckpointError:
        assert str(path) in str(raised.value) and "No space left on device" in str(raised.value)

    assert path.read_bytes() == before
    assert checkpoint.load(path).state.updates == payload.state.updates
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]  # no temporary file left


def test_save_failure_leaves_no_file_when_none_existed(tiny_checkpoint, tmp_path, monkeypatch):
    def failing_save(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise RuntimeError("boom")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(RuntimeError):
        checkpoint.save(tmp_path / "new.pt", checkpoint.load(tiny_checkpoint))
    assert list(tmp_path.iterdir()) == []


# -- loading ---------------------------------------------------------------------------------------


class MakesMarker:
    """Unpickling this runs os.mkdir(marker): what a malicious checkpoint would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_load_missing_file(tmp_path):
    path = tmp_path / "nope.pt"
    with pytest.raises(InputError) as e:
        checkpoint.load(path)
    assert str(path) in str(e.value)


def test_load_directory(tmp_path):
    with pytest.raises(InputError) as e:
        checkpoint.load(tmp_path)
    assert str(tmp_path) in str(e.value)


def test_load_truncated(tiny_checkpoint, tmp_path):
    data = tiny_checkpoint.read_bytes()
    path = tmp_path / "truncated.pt"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("damage", ["truncated", "text", "empty"])
def test_load_with_mmap_tells_a_damaged_file_as_load_does(tiny_checkpoint, tmp_path, damage):
    """`nmt serve -m A -m B` reads directions with mmap=True: a damaged file gets the same one-line error."""
    data = tiny_checkpoint.read_bytes()
    path = tmp_path / "damaged.pt"
    path.write_bytes({"truncated": data[: len(data) // 2], "text": b"x\n", "empty": b""}[damage])
    with pytest.raises(CheckpointError) as plain:
        checkpoint.load(path)
    with pytest.raises(CheckpointError) as mapped:
        checkpoint.load(path, mmap=True)
    assert str(mapped.value) == str(plain.value)


def test_load_with_mmap_gives_the_same_checkpoint(tiny_checkpoint):
    plain, mapped = checkpoint.load(tiny_checkpoint), checkpoint.load(tiny_checkpoint, mmap=True)
    assert mapped.languages == plain.languages and mapped.model_config == plain.model_config
    assert all(torch.equal(mapped.weights[k], plain.weights[k]) for k in plain.weights)


def test_load_empty_file(tmp_path):
    path = tmp_path / "empty.pt"
    path.write_bytes(b"")
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(path)
    assert str(path) in str(e.value)


def _random_bytes(seed: int, n: int = 4096) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.randrange(256) for _ in range(n))


@pytest.mark.parametrize("data", [
    _random_bytes(0),
    _random_bytes(1),
    b"PK\x03\x04" + _random_bytes(2, 500),  # looks like a zip
    b"\x80\x02" + _random_bytes(3, 500),  # looks like a pickle
    b"garbage\n",
    # Short pickle streams on which torch's weights-only unpickler raises IndexError / KeyError
    # (stack underflow, missing memo entry) rather than UnpicklingError:
    b"e.",
    b"\x80\x02h\x05.",
], ids=["random0", "random1", "zip-like", "pickle-like", "text", "pickle-stack-underflow", "pickle-bad-memo"])
def test_load_random_bytes(tmp_path, data):
    path = tmp_path / "noise.pt"
    path.write_bytes(data)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(path)
    assert str(path) in str(e.value)


def test_load_plain_dict_without_header(tmp_path):
    path = tmp_path / "foreign.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "updates": 3}, path)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(path)
    assert str(path) in str(e.value) and checkpoint.FORMAT in str(e.value)


@pytest.mark.parametrize("obj", ["list", "tensor"])
def test_load_other_torch_data(tmp_path, obj):
    path = tmp_path / "foreign.pt"
    torch.save([1, 2, 3] if obj == "list" else torch.ones(3), path)
    with pytest.raises(CheckpointError):
        checkpoint.load(path)


@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
def test_load_never_runs_pickled_code(tmp_path, writer):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    if writer == "pickle":
        path.write_bytes(pickle.dumps(MakesMarker(marker), protocol=2))
    else:
        torch.save(MakesMarker(marker), path)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(path)
    assert str(path) in str(e.value)
    assert not marker.exists()
    # The payload is live: an unrestricted unpickler does run it (so the check above means something).
    if writer == "pickle":
        pickle.loads(path.read_bytes())
    else:
        torch.load(path, weights_only=False)
    assert marker.is_dir()


def torch_message(path: Path) -> str:
    try:
        torch.load(path, weights_only=True)
    except Exception as e:
        return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(e)).split())
    raise AssertionError(f"{path} loads")


@pytest.mark.parametrize("content", ["pickled code", "truncated zip", "random bytes", "pickle stack underflow", "empty"])
@pytest.mark.parametrize("reader", ["checkpoint", "marian weights"])
def test_a_failed_torch_load_is_told_in_whole_sentences(tiny_checkpoint, tmp_path, content, reader):
    """torch's reason is quoted as a whole sentence (not cut mid-word, without its terminal colours), and its
    advice to load a file of pickled code unsafely never: nmt says that in its own words."""
    from nmt.core.errors import NmtError
    from nmt.importers.marian import read_weights_file

    path = tmp_path / "pytorch_model.bin"
    if content == "pickled code":
        torch.save({"w": torch.zeros(2), "x": MakesMarker(tmp_path / "pwned")}, path)
    elif content == "truncated zip":
        data = tiny_checkpoint.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes({"random bytes": _random_bytes(0), "pickle stack underflow": b"e.", "empty": b""}[content])
    with pytest.raises(NmtError) as e:
        checkpoint.load(path) if reader == "checkpoint" else read_weights_file(path)
    message = str(e.value)
    assert re.match(f"{re.escape(str(path))}: not (a )?readable", message) and "\n" not in message
    assert "\x1b" not in message
    assert "weights_only" not in message and "trust" not in message and not (tmp_path / "pwned").exists()
    reason = message[message.index("(") + 1: message.rindex(")")]
    original = torch_message(path)
    if "Weights only load failed" in original:  # torch's advice: nmt's own words instead
        assert reason in ("it calls Python code (posix.mkdir), which nmt never runs: it loads tensors and plain data "
                          "only", "not a pickle of tensors and plain data: damaged or foreign"), reason
        assert ("posix.mkdir" in reason) == (content == "pickled code")
    elif original:
        assert reason.endswith(" ...") or re.search(re.escape(reason) + r"(\.|$)(\s|$)", original), (reason, original)


def test_load_wrong_version(tiny_checkpoint, tmp_path):
    ckpt = torch.load(tiny_checkpoint, weights_only=True)
    ckpt["version"] = checkpoint.VERSION + 1
    path = tmp_path / "future.pt"
    torch.save(ckpt, path)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(path)
    assert str(path) in str(e.value) and str(checkpoint.VERSION + 1) in str(e.value)


def test_load_missing_keys(tiny_checkpoint, tmp_path):
    ckpt = torch.load(tiny_checkpoint, weights_only=True)
    del ckpt["tokenizer"]
    path = tmp_path / "damaged.pt"
    torch.save(ckpt, path)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(path)
    assert str(path) in str(e.value) and "tokenizer" in str(e.value)


def test_load_round_trip_keeps_everything(tiny_checkpoint, tmp_path):
    ckpt = checkpoint.load(tiny_checkpoint)
    assert ckpt.resumable is not None and ckpt.state.updates == 30 and ckpt.state.position > 0
    assert ckpt.languages == ("en", "de")
    model = ckpt.build_model(tiny_checkpoint)
    assert not model.training
    checkpoint.save(tmp_path / "again.pt", ckpt)
    again = checkpoint.load(tmp_path / "again.pt")
    for key in ("model_config", "train_config", "data", "tokenizer", "state", "search", "averaged"):
        assert getattr(again, key) == getattr(ckpt, key), key
    assert all(torch.equal(again.weights[k], v) for k, v in ckpt.weights.items())
    assert again.resumable.optimizer["param_groups"] == ckpt.resumable.optimizer["param_groups"]


def test_build_model_with_mismatched_weights(tiny_checkpoint):
    ckpt = checkpoint.load(tiny_checkpoint)
    ckpt.model_config = dataclasses.replace(ckpt.model_config, d_ff=64)
    with pytest.raises(CheckpointError) as e:
        ckpt.build_model(tiny_checkpoint)
    assert str(tiny_checkpoint) in str(e.value)


@pytest.mark.parametrize("where, change, words", [
    ("model_config", {"d_model": "512"}, "ModelConfig: d_model '512': should be a whole number"),
    ("model_config", {"d_model": 512, "n_heads": 7}, "d_model 512 is not divisible by n_heads 7"),
    ("train_config", {"warmpu": 3}, "unknown TrainConfig fields ['warmpu']"),
    ("data", {"vocab_size": "1000"}, "record of the data"),
    ("state", {"updates": "30"}, "training state updates '30': should be a whole number"),
    ("state", {"future_field": 1}, "unknown training state fields ['future_field']"),
    ("model", [1, 2], "its weights are a list"),
    ("search", {"beam": 0}, "beam must be at least 1, got 0"),
])
def test_damaged_contents_are_named(tiny_checkpoint, tmp_path, where, change, words):
    """A value of the wrong type or range inside a checkpoint is a one-line error naming the file and the
    field (not an option the user never gave), never a TypeError deep inside."""
    payload = torch.load(tiny_checkpoint, weights_only=True)
    payload[where] = {**payload[where], **change} if isinstance(change, dict) and isinstance(payload[where], dict) else change
    path = tmp_path / "damaged.pt"
    torch.save(payload, path)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(path).search.apply()
    assert str(path) in str(e.value) and words in str(e.value) and "--" not in str(e.value)


# -- run folders -----------------------------------------------------------------------------------


def make_run(tmp_path: Path, updates: list[int]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for u in updates:
        (run / checkpoint.STEP_NAME.format(u)).write_bytes(b"x")
    # Things that are not step checkpoints:
    for name in ("averaged.pt", "checkpoint_1.pt", "checkpoint_00000005.pt.bak", ".checkpoint_00000009.pt.abc123.tmp",
                 "log.jsonl"):
        (run / name).write_bytes(b"y")
    return run


def test_step_checkpoints_sorted_and_filtered(tmp_path):
    run = make_run(tmp_path, [300, 20, 1000, 100])
    assert [p.name for p in checkpoint.step_checkpoints(run)] == [
        "checkpoint_00000020.pt", "checkpoint_00000100.pt", "checkpoint_00000300.pt", "checkpoint_00001000.pt"]
    assert checkpoint.latest(run) == run / "checkpoint_00001000.pt"


def test_step_checkpoints_of_missing_or_empty_folder(tmp_path):
    assert checkpoint.step_checkpoints(tmp_path / "nope") == []
    assert checkpoint.latest(tmp_path / "nope") is None
    assert checkpoint.step_checkpoints(tmp_path) == []
    assert checkpoint.latest(tmp_path) is None


def test_step_checkpoints_ignore_look_alike_names(tmp_path):
    """A user's copy such as best_checkpoint_00000100.pt is not a step checkpoint: prune must not delete it."""
    run = make_run(tmp_path, [10, 20, 30])
    keep = run / "best_checkpoint_00000020.pt"
    keep.write_bytes(b"precious")
    assert keep not in checkpoint.step_checkpoints(run)
    checkpoint.prune(run, 1)
    assert keep.exists()


def test_prune_keeps_newest(tmp_path):
    run = make_run(tmp_path, [10, 20, 30, 40, 50])
    deleted = checkpoint.prune(run, 2)
    assert [p.name for p in deleted] == ["checkpoint_00000010.pt", "checkpoint_00000020.pt", "checkpoint_00000030.pt"]
    assert [p.name for p in checkpoint.step_checkpoints(run)] == ["checkpoint_00000040.pt", "checkpoint_00000050.pt"]
    for name in ("averaged.pt", "checkpoint_1.pt", "log.jsonl"):
        assert (run / name).exists()
    assert checkpoint.prune(run, 2) == []
    assert checkpoint.prune(run, 10) == []
    assert len(checkpoint.step_checkpoints(run)) == 2


def test_resolve_average_inputs_run_folder(tmp_path):
    run = make_run(tmp_path, [10, 20, 30])
    names = lambda paths: [p.name for p in paths]  # noqa: E731
    assert names(checkpoint.resolve_average_inputs([run], None)) == [
        "checkpoint_00000010.pt", "checkpoint_00000020.pt", "checkpoint_00000030.pt"]
    assert names(checkpoint.resolve_average_inputs([run], 2)) == ["checkpoint_00000020.pt", "checkpoint_00000030.pt"]
    assert names(checkpoint.resolve_average_inputs([run], 3)) == [
        "checkpoint_00000010.pt", "checkpoint_00000020.pt", "checkpoint_00000030.pt"]


def test_resolve_average_inputs_last_too_large(tmp_path):
    run = make_run(tmp_path, [10, 20, 30])
    with pytest.raises(InputError) as e:
        checkpoint.resolve_average_inputs([run], 4)
    assert "3" in str(e.value)


@pytest.mark.parametrize("last", [0, -1])
def test_resolve_average_inputs_last_not_positive(tmp_path, last):
    """--last 0 or a negative --last is a user error (not 'all' and not 'all but the oldest')."""
    run = make_run(tmp_path, [10, 20, 30])
    with pytest.raises(InputError):
        checkpoint.resolve_average_inputs([run], last)


def test_resolve_average_inputs_empty_folder(tmp_path):
    with pytest.raises(InputError) as e:
        checkpoint.resolve_average_inputs([tmp_path], None)
    assert str(tmp_path) in str(e.value)


def test_resolve_average_inputs_files(tmp_path):
    run = make_run(tmp_path, [10, 20])
    files = [run / "checkpoint_00000020.pt", run / "averaged.pt"]
    assert checkpoint.resolve_average_inputs(files, None) == files
    with pytest.raises(InputError):
        checkpoint.resolve_average_inputs(files, 2)  # --last goes with a run folder only
    with pytest.raises(InputError) as e:
        checkpoint.resolve_average_inputs([files[0], run / "missing.pt"], None)
    assert "missing.pt" in str(e.value)
    with pytest.raises(InputError):
        checkpoint.resolve_average_inputs([run, run], None)  # two folders: not files


# -- older versions ------------------------------------------------------------------------------------

DATA = Path(__file__).resolve().parent / "data"


def version_1(new: Path, path: Path) -> Path:
    """`new` as nmt wrote checkpoints at version 1: the youtokentome model's bytes under "bpe_model", the
    TrainState fields at the top level, rank 0's generators under "rng" (the others' under "rng_ranks")."""
    ckpt = torch.load(new, weights_only=True)
    ckpt["bpe_model"] = ckpt.pop("tokenizer")["source"]
    ckpt.update(ckpt.pop("state"))
    ckpt.pop("elapsed"), ckpt.pop("search")
    if "rng" in ckpt:
        rng = ckpt["rng"]
        ckpt["rng"] = rng[0]
        if len(rng) > 1:
            ckpt["rng_ranks"] = rng
    ckpt["version"] = 1
    torch.save(ckpt, path)
    return path


def test_a_committed_version_1_checkpoint_translates_as_it_did(tmp_path):
    """tests/data/v1-averaged.pt was written by nmt at commit cae6bc4 (checkpoint version 1), and
    v1-averaged.beam2.de is what that nmt translated with it (beam 2, the first 5 test lines)."""
    from conftest import SAMPLE_DIR

    lines = (SAMPLE_DIR / "test.en").read_text(encoding="utf-8").splitlines()[:5]
    assert torch.load(DATA / "v1-averaged.pt", weights_only=True)["version"] == 1
    ckpt = checkpoint.load(DATA / "v1-averaged.pt")
    assert ckpt.languages == ("en", "de") and ckpt.tokenizer["kind"] == "youtokentome" and ckpt.resumable is None
    assert len(ckpt.averaged) == 2
    translations = [t.text for t in TorchEngine(DATA / "v1-averaged.pt", SearchConfig(beam=2)).translate_chunk(lines)]
    assert translations == (DATA / "v1-averaged.beam2.de").read_text(encoding="utf-8").splitlines()


def test_a_committed_version_1_step_checkpoint_resumes(tmp_path):
    """The run of tests/data/v1-step-00000002.pt goes on from update 2 with today's nmt, on the same data."""
    from conftest import prepare_sample

    from nmt.training.launch import train

    (tmp_path / "corpus").mkdir()
    data = prepare_sample(tmp_path / "corpus", 200, 10)
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint_00000002.pt").write_bytes((DATA / "v1-step-00000002.pt").read_bytes())
    old = checkpoint.load(run / "checkpoint_00000002.pt")
    assert old.state.updates == 2 and old.resumable is not None and len(old.resumable.rng) == 1
    result = train(data, run, train_overrides={"max_updates": 3})
    assert result.updates == 3
    new = checkpoint.load(run / "checkpoint_00000003.pt")
    assert new.model_config == old.model_config and new.resumable.optimizer["state"][0]["step"] == 3




def test_version_1_checkpoints_still_work_everywhere(steps, tiny_data, tiny_corpus, tmp_path):
    from nmt.data.dataset import data_identity, prepare
    from nmt.text.tokenizer import load_tokenizer
    from nmt.training.launch import plan

    old = version_1(steps[-1], tmp_path / "old.pt")
    loaded, new = checkpoint.load(old), checkpoint.load(steps[-1])
    for key in ("model_config", "train_config", "data", "tokenizer"):
        assert getattr(loaded, key) == getattr(new, key), key
    assert dataclasses.replace(loaded.state, elapsed=new.state.elapsed) == new.state  # v1 kept no clock
    assert len(loaded.resumable.rng) == len(new.resumable.rng) == 1
    # translate and average (an old checkpoint with a new one of the same run)
    lines = ["A man is riding a bicycle .", "Two dogs play in the snow ."]
    assert ([t.text for t in TorchEngine(old).translate_chunk(lines)]
            == [t.text for t in TorchEngine(steps[-1]).translate_chunk(lines)])
    avg = checkpoint.average([version_1(steps[0], tmp_path / "old10.pt"), steps[1]])
    assert avg.tokenizer == new.tokenizer
    # `nmt prepare --bpe old.pt`, and fine-tuning on that data from the old checkpoint
    prepare(load_tokenizer(checkpoint.tokenizer_data(old), str(old)), tmp_path / "data", "en", "de",
            tiny_corpus / "train")
    assert data_identity(tmp_path / "data") == loaded.data
    plan(tmp_path / "data", tmp_path / "tuned", None, {}, {"init_from": str(old)})
    # resuming a run whose newest checkpoint is of version 1
    run = tmp_path / "run"
    run.mkdir()
    version_1(steps[-1], run / steps[-1].name)
    assert plan(tiny_data, run, None, {}, {})[2] == run / steps[-1].name


def test_version_1_export(steps, tmp_path):
    pytest.importorskip("ctranslate2")
    from nmt.engines.ct2_export import export_ctranslate2

    old = version_1(steps[-1], tmp_path / "old.pt")
    export_ctranslate2(old, tmp_path / "ct2")
    assert (tmp_path / "ct2" / "bpe.model").read_bytes() == checkpoint.load(old).tokenizer["source"]
