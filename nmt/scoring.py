"""Scoring with sacreBLEU, below everything that scores (training's validation, eval, distillation, the benchmarks):
BLEU (13a and intl tokenisation, cased and uncased), chrF and TER with their signatures, against one or several
references; sacreBLEU's paired bootstrap resampling between systems; one sentence's chrF or BLEU."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Optional, cast

from nmt.core.errors import InputError, ref

if TYPE_CHECKING:  # sacrebleu is imported where it is used
    from sacrebleu.metrics.base import Metric
    from sacrebleu.significance import Result


@dataclass
class Score:
    metric: str  # e.g. "BLEU 13a cased"
    score: float
    signature: str  # sacreBLEU's, which pins down how the number was computed
    detail: str  # sacreBLEU's own formatted result (n-gram precisions, BP, ...)


@dataclass
class PairedScore:
    """One system's score in a paired bootstrap test against the first (baseline) system."""

    system: str
    metric: str
    score: float
    mean: float  # over the bootstrap resamples
    ci: float  # half-width of the 95% confidence interval of the mean
    p_value: Optional[float]  # that the difference to the baseline is by chance; None for the baseline


def check_parallel(hyps: list[str], refs: list[str], hyp_name: str, ref_name: str) -> None:
    if len(hyps) != len(refs):
        raise InputError(f"{hyp_name} has {len(hyps)} lines but {ref_name} has {len(refs)}; "
                         "hypotheses and references must be line-parallel")
    if not refs:
        raise InputError(f"{ref_name} is empty; nothing to score")


def reference_sets(refs: Sequence[str] | Sequence[Sequence[str]]) -> list[list[str]]:
    """One reference (a list of lines) or several (a list of such lists), as a list of reference sets."""
    if not refs or isinstance(refs[0], str):
        return [list(cast("Sequence[str]", refs))]
    return [list(r) for r in refs]


# TER's edit distance takes time and memory quadratic in a line's words (5,000 words: about 4 s and
# 0.4 GB; 20,000: 50 s and 6 GB), so over longer lines it is left out rather than exhausting the machine.
MAX_TER_WORDS = 5000


def ter_left_out(systems: Sequence[tuple[str, Sequence[str]]], sets: Sequence[Sequence[str]],
                 ref_names: Sequence[str] = ()) -> Optional[str]:
    """Why TER is left out of these scores (a line too long for it), or None."""
    named = list(systems) + [(ref_names[i] if i < len(ref_names) else "the references", r) for i, r in enumerate(sets)]
    for name, lines in named:
        for i, line in enumerate(lines):
            words = len(line.split())
            if words > MAX_TER_WORDS:
                return (f"TER left out: line {i + 1} of {name} has {words:,} words; TER's cost grows with the square "
                        f"of a line's length, and nmt computes it for lines of up to {MAX_TER_WORDS:,} words")
    return None


def metrics(ter: bool = True) -> list[tuple[str, Metric]]:
    from sacrebleu.metrics.bleu import BLEU
    from sacrebleu.metrics.chrf import CHRF
    from sacrebleu.metrics.ter import TER

    return [
        ("BLEU 13a cased", BLEU(tokenize="13a")),
        ("BLEU 13a uncased", BLEU(tokenize="13a", lowercase=True)),
        ("BLEU intl cased", BLEU(tokenize="intl")),
        ("BLEU intl uncased", BLEU(tokenize="intl", lowercase=True)),
        ("chrF", CHRF()),
    ] + ([("TER", TER())] if ter else [])


def score(hyps: list[str], refs: Sequence[str] | Sequence[Sequence[str]], hyp_name: str = "hypotheses",
          ref_name: str | Sequence[str] = "references") -> list[Score]:
    """Corpus-level scores of `hyps` against one reference per line, or several (multi-reference); TER
    only where `ter_left_out` finds no line too long for it."""
    sets = reference_sets(refs)
    names = [ref_name] * len(sets) if isinstance(ref_name, str) else list(ref_name)
    for r, name in zip(sets, names):
        check_parallel(hyps, r, hyp_name, name)
    scores = []
    for name, metric in metrics(ter=ter_left_out([(hyp_name, hyps)], sets) is None):
        result = metric.corpus_score(hyps, sets)
        scores.append(Score(name, round(result.score, 2), str(metric.get_signature()), str(result)))
    return scores


def bleu(hyps: list[str], refs: list[str], hyp_name: str = "hypotheses", ref_name: str = "references") -> float:
    """sacreBLEU 13a cased, the first figure of the table, alone (validation needs no more)."""
    from sacrebleu.metrics.bleu import BLEU

    check_parallel(hyps, refs, hyp_name, ref_name)
    return round(float(BLEU(tokenize="13a").corpus_score(hyps, [refs]).score), 2)  # a float: float() tells mypy


PAIRED_METRICS = ("BLEU 13a cased", "chrF", "TER")


def paired_bootstrap(systems: list[tuple[str, list[str]]], refs: Sequence[str] | Sequence[Sequence[str]],
                     n_samples: int = 1000) -> tuple[list[PairedScore], dict[str, str]]:
    """sacreBLEU's paired bootstrap resampling of `systems` (name, lines) against the first one, the
    baseline, for BLEU, chrF and TER; its seed is fixed (SACREBLEU_SEED, default 12345), so results
    repeat. Returns the scores and each metric's signature."""
    from sacrebleu.significance import PairedTest

    if len(systems) < 2:
        raise InputError(f"{ref('paired_bs')} compares systems with a baseline: give two or more (the first is the "
                         "baseline)")
    if n_samples < 1:
        raise InputError(f"{ref('paired_bs_n')} must be at least 1, got {n_samples}")
    sets = reference_sets(refs)
    for name, hyps in systems:
        for r in sets:
            check_parallel(hyps, r, name, "the references")
    chosen = {name: metric for name, metric in metrics(ter=ter_left_out(systems, sets) is None)
              if name in PAIRED_METRICS}
    named: list[tuple[str, Sequence[str]]] = list(systems)  # PairedTest's type: a list is invariant
    test = PairedTest(named, chosen, sets, test_type="bs", n_samples=n_samples)
    signatures, results = test()
    keys = [k for k in results if k != "System"]  # sacreBLEU's metric names, in the order of `chosen`
    # The "System" column holds the names, every other column a Result per system.
    names = cast("list[str]", results["System"])
    out = []
    for metric_name, key in zip(chosen, keys):
        for system, res in zip(names, cast("list[Result]", results[key])):
            assert res.mean is not None and res.ci is not None  # a bootstrap test (n_samples >= 1) sets both
            out.append(PairedScore(system, metric_name, round(float(res.score), 2), round(float(res.mean), 2),
                                   round(float(res.ci), 2),
                                   None if res.p_value is None else round(float(res.p_value), 4)))
    return out, {name: str(sig) for name, sig in zip(chosen, signatures.values())}


def to_json(scores: list[Score], **extra: Any) -> dict[str, Any]:
    return {**extra, "scores": [asdict(s) for s in scores]}


SENTENCE_METRICS = ("chrf", "bleu")


@cache
def _sentence_metric(name: str) -> Any:
    from sacrebleu.metrics.bleu import BLEU  # sacrebleu loads its tokenizers: only when asked
    from sacrebleu.metrics.chrf import CHRF

    if name == "chrf":
        return CHRF()
    if name == "bleu":
        return BLEU(effective_order=True)  # sentence BLEU: n-gram orders a short line lacks are left out
    raise ValueError(f"unknown metric {name!r}; one of {', '.join(SENTENCE_METRICS)}")


def sentence_score(hypothesis: str, reference: str, metric: str) -> float:
    """sacreBLEU's sentence chrF or BLEU of one hypothesis against one reference (0 to 100)."""
    return float(_sentence_metric(metric).sentence_score(hypothesis, [reference]).score)
