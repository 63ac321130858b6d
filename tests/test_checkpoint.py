"""Checkpoints: averaging, atomic saving, safe and checked loading, and run-folder helpers."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import pytest
import torch

from nmt import checkpoint
from nmt.errors import CheckpointError, InputError
from nmt.search import SearchConfig
from nmt.translate import Translator




@pytest.fixture(scope="module")
def steps(tiny_run) -> list[Path]:
    found = checkpoint.step_checkpoints(tiny_run)
    assert [p.name for p in found] == ["checkpoint_00000010.pt", "checkpoint_00000020.pt", "checkpoint_00000030.pt"]
    return found


# -- averaging -------------------------------------------------------------------------------------


def test_average_is_elementwise_mean(steps, tmp_path):
    a, b, c = (checkpoint.load(p) for p in steps)
    avg = checkpoint.average(steps)
    assert set(avg["model"]) == set(a["model"])
    differs = 0
    for k, v in avg["model"].items():
        expected = (a["model"][k].double() + b["model"][k].double() + c["model"][k].double()) / 3
        assert v.dtype == a["model"][k].dtype and v.shape == a["model"][k].shape, k
        torch.testing.assert_close(v.double(), expected, atol=1e-6, rtol=0)
        differs += not torch.equal(a["model"][k], c["model"][k])
    assert differs > 0  # the checkpoints really differ, so the mean is not trivially any of them
    # Everything needed for inference is kept, from the first checkpoint.
    for key in ("model_config", "train_config", "data", "tokenizer"):
        assert avg[key] == a[key], key
    assert avg["averaged"] == [str(p) for p in steps]
    assert "optimizer" not in avg  # an inference checkpoint

    out = tmp_path / "averaged.pt"
    checkpoint.save(out, avg)
    loaded = checkpoint.load(out)
    assert loaded["format"] == checkpoint.FORMAT and loaded["version"] == checkpoint.VERSION
    translator = Translator(out, SearchConfig(beam=2))
    [t] = translator.translate_chunk(["A man is riding a bicycle."])
    assert isinstance(t.text, str)


def test_average_of_one_is_identity(steps):
    one = checkpoint.load(steps[1])
    avg = checkpoint.average([steps[1]])
    assert set(avg["model"]) == set(one["model"])
    for k, v in avg["model"].items():
        assert v.dtype == one["model"][k].dtype
        assert torch.equal(v, one["model"][k]), k


def test_average_of_nothing_is_an_input_error():
    with pytest.raises(InputError):
        checkpoint.average([])


@pytest.mark.parametrize("change", ["model_config", "tokenizer"])
def test_average_refuses_mismatched_checkpoints(steps, tmp_path, change):
    other = checkpoint.load(steps[0])
    other.pop("format"), other.pop("version")
    if change == "model_config":
        other["model_config"] = {**other["model_config"], "dropout": 0.3}
    else:
        other["tokenizer"] = {**other["tokenizer"], "source": other["tokenizer"]["source"] + b"\n"}
    odd = tmp_path / "odd.pt"
    checkpoint.save(odd, other)
    with pytest.raises(CheckpointError) as e:
        checkpoint.average([steps[1], odd])
    assert str(odd) in str(e.value)


def test_average_refuses_other_architecture(steps, tmp_path):
    """A checkpoint of a differently shaped model must not be averaged (nor crash with a shape error)."""
    other = checkpoint.load(steps[0])
    other.pop("format"), other.pop("version")
    other["model_config"] = {**other["model_config"], "d_model": 32, "d_ff": 64}
    other["model"] = {k: v[..., :1].clone() for k, v in other["model"].items()}
    odd = tmp_path / "small.pt"
    checkpoint.save(odd, other)
    with pytest.raises(CheckpointError):
        checkpoint.average([steps[0], odd])


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
    assert checkpoint.load(path)["updates"] == payload["updates"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]  # no temporary file left


def test_save_failure_leaves_no_file_when_none_existed(tmp_path, monkeypatch):
    def failing_save(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise RuntimeError("boom")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(RuntimeError):
        checkpoint.save(tmp_path / "new.pt", {"model": {}})
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


def test_load_wrong_version(tiny_checkpoint, tmp_path):
    ckpt = checkpoint.load(tiny_checkpoint)
    ckpt["version"] = checkpoint.VERSION + 1
    path = tmp_path / "future.pt"
    torch.save(ckpt, path)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(path)
    assert str(path) in str(e.value) and str(checkpoint.VERSION + 1) in str(e.value)


def test_load_missing_keys(tiny_checkpoint, tmp_path):
    ckpt = checkpoint.load(tiny_checkpoint)
    del ckpt["tokenizer"]
    path = tmp_path / "damaged.pt"
    torch.save(ckpt, path)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(path)
    assert str(path) in str(e.value) and "tokenizer" in str(e.value)


def test_load_round_trip_keeps_everything(tiny_checkpoint):
    ckpt = checkpoint.load(tiny_checkpoint)
    for key in checkpoint.INFERENCE_KEYS + ("optimizer", "rng", "position"):
        assert key in ckpt, key
    assert ckpt["updates"] == 30
    model = checkpoint.build_model(ckpt, tiny_checkpoint)
    assert not model.training


def test_build_model_with_mismatched_weights(tiny_checkpoint):
    ckpt = checkpoint.load(tiny_checkpoint)
    ckpt["model_config"] = {**ckpt["model_config"], "d_ff": 64}
    with pytest.raises(CheckpointError) as e:
        checkpoint.build_model(ckpt, tiny_checkpoint)
    assert str(tiny_checkpoint) in str(e.value)


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


# -- checkpoints of version 1 (before nmt.tokenizer) ----------------------------------------------------


def version_1(new: Path, path: Path) -> Path:
    """`new` as nmt wrote checkpoints before SentencePiece came: version 1, the youtokentome model's bytes
    under "bpe_model"."""
    ckpt = torch.load(new, weights_only=True)
    ckpt["bpe_model"] = ckpt.pop("tokenizer")["source"]
    ckpt["version"] = 1
    torch.save(ckpt, path)
    return path


def test_version_1_checkpoints_still_work_everywhere(steps, tiny_data, tiny_corpus, tmp_path):
    from nmt.dataset import data_identity, prepare
    from nmt.tokenizer import load_tokenizer
    from nmt.train import plan

    old = version_1(steps[-1], tmp_path / "old.pt")
    loaded, new = checkpoint.load(old), checkpoint.load(steps[-1])
    assert loaded["version"] == checkpoint.VERSION == 2 and "bpe_model" not in loaded
    assert loaded["tokenizer"] == new["tokenizer"] and loaded["data"] == new["data"]
    # translate and average (an old checkpoint with a new one of the same run)
    lines = ["A man is riding a bicycle .", "Two dogs play in the snow ."]
    assert ([t.text for t in Translator(old).translate_chunk(lines)]
            == [t.text for t in Translator(steps[-1]).translate_chunk(lines)])
    avg = checkpoint.average([version_1(steps[0], tmp_path / "old10.pt"), steps[1]])
    assert avg["tokenizer"] == new["tokenizer"]
    # `nmt prepare --bpe old.pt`, and fine-tuning on that data from the old checkpoint
    prepare(load_tokenizer(checkpoint.tokenizer_data(old), str(old)), tmp_path / "data", "en", "de",
            tiny_corpus / "train")
    assert data_identity(tmp_path / "data") == loaded["data"]
    plan(tmp_path / "data", tmp_path / "tuned", None, {}, {"init_from": str(old)})
    # resuming a run whose newest checkpoint is of version 1
    run = tmp_path / "run"
    run.mkdir()
    version_1(steps[-1], run / steps[-1].name)
    assert plan(tiny_data, run, None, {}, {})[2] == run / steps[-1].name


def test_version_1_export(steps, tmp_path):
    pytest.importorskip("ctranslate2")
    from nmt.export import export_ctranslate2

    old = version_1(steps[-1], tmp_path / "old.pt")
    export_ctranslate2(old, tmp_path / "ct2")
    assert (tmp_path / "ct2" / "bpe.model").read_bytes() == checkpoint.load(old)["tokenizer"]["source"]
