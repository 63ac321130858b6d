"""benchmarks/gpu_check.py (`make gpu-check`): its CPU smoke mode end to end, how it judges loss curves,
translations and speed against its tolerances, and its one line on a machine without CUDA.

Nothing here runs on a GPU: the GPU mode runs the same code with more work and more precisions.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import benchmark_script


@pytest.fixture(scope="module")
def gpu_check():
    """The script, imported as a module."""
    with benchmark_script("gpu_check") as module:
        yield module


def summary_table(report: str) -> dict[str, str]:
    """{check: result} from the report's first table."""
    rows = {}
    for line in report.split("\n## ")[0].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3 and cells[0] != "check":
            rows[cells[0]] = cells[1]
    return rows


@pytest.mark.slow
@pytest.mark.long
def test_cpu_smoke_lists_every_check_and_a_failed_tolerance_fails_the_run(gpu_check, tmp_path, capsys):
    # --min-loss-drop 0.99 cannot be met: the precision check fails, the others pass, the exit code says so.
    work, report = tmp_path / "work", tmp_path / "report.md"
    code = gpu_check.main(["--cpu", "--work", str(work), "--report", str(report), "--min-loss-drop", "0.99"])
    out = capsys.readouterr().out
    assert code == 1
    text = report.read_text(encoding="utf-8")
    assert summary_table(text) == {"data": "PASS", "precision": "FAIL", "torchrun": "PASS", "translate": "PASS",
                                   "throughput": "PASS"}
    assert "(--min-loss-drop 0.99)" in text
    assert text.count("needs a CUDA GPU") == 6  # bf16 and fp16 of the training, translation and throughput checks
    for command in ("-m nmt bpe", "-m nmt prepare", "-m nmt train", "-m torch.distributed.run --standalone",
                    "-m nmt translate"):
        assert command in text
    assert "FAIL  precision" in out and "gpu-check: FAIL (4 passed, 1 failed, 0 skipped)" in out
    # The same run passes the default tolerance of the smoke test.
    curve = gpu_check.read_curve(work / "train-fp32" / "log.jsonl")
    tol = gpu_check.Tolerances(min_loss_drop=gpu_check.CPU.min_loss_drop)
    assert gpu_check.judge_precisions({"fp32": curve}, tol) == {"fp32": ("PASS", "")}


def curve_of(gpu_check, losses: list[float]):
    return gpu_check.Curve(updates=list(range(1, len(losses) + 1)), losses=losses)


LEARNS = [7.0, 4.0, 2.0, 2.0]  # the final loss is the last quarter's mean: here the last value


@pytest.mark.parametrize("runs, expected", [
    ({"fp32": LEARNS, "bf16": [7.0, 4.1, 2.1, 2.09], "fp16": [7.0, 3.9, 1.9, 1.91]},
     {"fp32": "PASS", "bf16": "PASS", "fp16": "PASS"}),  # +4.5% and -4.5%
    ({"fp32": LEARNS, "bf16": [7.0, 4.0, 2.2, 2.12]}, {"fp32": "PASS", "bf16": "FAIL"}),  # +6%
    ({"fp32": LEARNS, "fp16": [7.0, math.nan, 2.0, 2.0]}, {"fp32": "PASS", "fp16": "FAIL"}),  # NaN, however close the end
    ({"fp32": [7.0, 6.0, 5.0, 4.0], "bf16": [7.0, 6.0, 5.0, 4.0]}, {"fp32": "FAIL", "bf16": "PASS"}),  # fp32 fell 43% < 50%
    ({"fp32": [7.0, math.inf, 2.0, 2.0], "bf16": LEARNS}, {"fp32": "FAIL", "bf16": "FAIL"}),  # nothing sound to compare with
    ({"bf16": LEARNS}, {"bf16": "FAIL"}),
])
def test_loss_curves_are_judged_against_fp32(gpu_check, runs, expected):
    curves = {p: curve_of(gpu_check, losses) for p, losses in runs.items()}
    verdicts = gpu_check.judge_precisions(curves, gpu_check.Tolerances())
    assert {p: status for p, (status, _) in verdicts.items()} == expected
    assert all(bool(why) == (status == "FAIL") for status, why in verdicts.values())


@pytest.mark.parametrize("precision, differing, score, expected", [
    ("fp32", 0, 100.0, "PASS"),
    ("fp32", 10, 97.0, "PASS"),  # 2% of 500 lines
    ("fp32", 11, 97.0, "FAIL"),
    ("fp16", 60, 95.0, "PASS"),  # fp16/bf16: BLEU against the CPU output decides
    ("bf16", 20, 94.9, "FAIL"),
])
def test_translations_are_judged_against_the_cpu(gpu_check, precision, differing, score, expected):
    status, why = gpu_check.judge_translation(precision, differing, 500, score, gpu_check.Tolerances())
    assert status == expected and bool(why) == (status == "FAIL")


def test_line_comparison(gpu_check):
    differing, agreement, score = gpu_check.compare_lines(["Ein Hund läuft .", "Zwei Katzen"], ["Ein Hund läuft .", "Eine Katze"])
    assert (differing, agreement) == (1, 0.5) and 0 < score < 100
    assert gpu_check.compare_lines(["a b c d"], ["a b c d"]) == (0, 1.0, 100.0)


def test_a_logged_nan_fails_an_fp16_overflow_does_not(gpu_check, tmp_path):
    # As nmt.training.trainer logs them: applied updates, skipped ones (with the reason) and the validation.
    records = ['{"update": 1, "loss": 7.0, "elapsed": 0.1, "tok/s": 10.0}',
               '{"update": 2, "skipped": "fp16 gradient overflow; loss scale now 32768"}',
               '{"update": 2, "loss": 6.0, "elapsed": 0.2, "tok/s": 10.0}',
               '{"update": 2, "valid_loss": 5.5, "valid_ppl": 244.7}']
    (tmp_path / "log.jsonl").write_text("\n".join(records) + "\n")
    curve = gpu_check.read_curve(tmp_path / "log.jsonl")
    assert (curve.updates, curve.losses, curve.skipped, curve.valid_loss) == ([1, 2], [7.0, 6.0], 1, 5.5)
    assert curve.first_bad() is None
    more = ['{"update": 3, "skipped": "the loss is nan"}', '{"update": 4, "valid_loss": NaN}']
    (tmp_path / "log.jsonl").write_text("\n".join(records + more) + "\n")
    curve = gpu_check.read_curve(tmp_path / "log.jsonl")
    assert curve.skipped == 2 and curve.bad_skips == [3] and curve.first_bad() == 3
    (tmp_path / "log.jsonl").write_text("\n".join(records + more[1:]) + "\n")
    assert gpu_check.read_curve(tmp_path / "log.jsonl").first_bad() == 4


def test_steady_speed_leaves_out_the_warm_up(gpu_check):
    # nmt logs the cumulative tok/s since the start: 2,000 tokens in the first 2 s (warm-up), then 4,000 in 2 s.
    curve = gpu_check.Curve([1, 10, 20], [7.0, 6.0, 5.0], speed=[(1, 0.5, 400.0), (10, 2.0, 1000.0), (20, 4.0, 1500.0)])
    assert gpu_check.steady_speed(curve, 10) == pytest.approx((2000.0, 0.2))
    assert gpu_check.steady_speed(curve, 20) is None  # one point times nothing


def test_without_cuda_one_line_says_how_to_run_the_smoke_test(gpu_check, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--report", str(tmp_path / "report.md")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert "no CUDA GPU found" in captured.err and "gpu_check.py --cpu" in captured.err
    assert not (tmp_path / "report.md").exists()


def test_a_used_work_folder_is_refused(gpu_check, tmp_path, capsys):
    (tmp_path / "old-run").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main(["--cpu", "--work", str(tmp_path), "--report", str(tmp_path / "report.md")])
    assert exit_info.value.code == 2 and "not an empty folder" in capsys.readouterr().err
