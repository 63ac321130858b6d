"""Sentence segmenters compared for `nmt.text.sentences`: accuracy, speed and package facts (docs/segmenters.md).

Run by hand:

    .venv/bin/python benchmarks/segmenters.py --data ../shared/data/multi30k

(--data: a Multi30k folder with test_2016_flickr.{en,de,fr,cs}.gz). Each segmenter that is installed is
measured; the others are listed as missing. Install them all with

    .venv/bin/pip install pysbd sentencex blingfire syntok sentence-splitter nupunkt icu4py choppa-srx segtok

Accuracy, per language (en, de, fr, cs):
  - Multi30k: --paragraphs paragraphs (200) of 2, 3, 4, 5, 2, ... consecutive test_2016_flickr captions joined
    by one space, a final period added to a caption that has no final punctuation; a paragraph counts as right
    when it comes back as exactly its captions.
  - Hard cases: the table HARD_CASES below (abbreviations, ordinals, numbers, ellipses, quotes and brackets
    after the period, "?!", no final punctuation, URLs and e-mail addresses, initials).
  Sentences are compared by where they end in the text's non-space characters, so a segmenter that changes
  whitespace is not penalised; "merged" counts boundaries it missed (two sentences given as one), "split"
  boundaries it invented, "lost" texts whose characters did not all come back.

Robustness: --fuzz seeded random strings of punctuation, quotes, whitespace and control characters, and four
long repetitive strings (ADVERSARIAL), each call stopped after --limit seconds.

Speed, one thread: every test_2016_flickr line of the four languages one call each (as `nmt translate` sees
its input lines), and the Multi30k paragraphs one call each; sentences per second, best of --rounds. The row
`nmt split_sentences` is nmt's own function (the chosen segmenter behind a fast path and offset mapping).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import platform
import random
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nmt.core.files import read_lines  # noqa: E402

LANGS = ("en", "de", "fr", "cs")
ENDS = (".", "!", "?", "…")
CLOSERS = "\"'”’»)]"

# (text, the sentences it holds) per language: the cases a translation paragraph is likely to hold that a
# naive "split after . ! ?" gets wrong, and the easy ones it must not break.
HARD_CASES: dict[str, list[tuple[str, list[str]]]] = {
    "en": [
        ("Mr. Smith arrived. He sat down.", ["Mr. Smith arrived.", "He sat down."]),
        ("Dr. Brown met Mrs. Green on Friday. They talked.", ["Dr. Brown met Mrs. Green on Friday.", "They talked."]),
        ("Bring a tool, e.g. a hammer. It helps.", ["Bring a tool, e.g. a hammer.", "It helps."]),
        ("The price rose 3.5 percent. Analysts were surprised.", ["The price rose 3.5 percent.", "Analysts were surprised."]),
        ("He hesitated... Then he left.", ["He hesitated...", "Then he left."]),
        ('She said "Stop." Then she ran.', ['She said "Stop."', "Then she ran."]),
        ("(He left early.) Nobody noticed.", ["(He left early.)", "Nobody noticed."]),
        ("Really?! I had no idea.", ["Really?!", "I had no idea."]),
        ("A man walking a dog", ["A man walking a dog"]),
        ("Two men are talking. One laughs", ["Two men are talking.", "One laughs"]),
        ("Visit www.example.com or write to info@example.org. We answer quickly.",
         ["Visit www.example.com or write to info@example.org.", "We answer quickly."]),
        ("J. R. R. Tolkien wrote The Hobbit. It appeared in 1937.", ["J. R. R. Tolkien wrote The Hobbit.", "It appeared in 1937."]),
        ("The meeting starts at 10 a.m. tomorrow. Be on time.", ["The meeting starts at 10 a.m. tomorrow.", "Be on time."]),
        ("See Fig. 3 for details. The results are clear.", ["See Fig. 3 for details.", "The results are clear."]),
        ("Two men are talking. One laughs! Another asks why?", ["Two men are talking.", "One laughs!", "Another asks why?"]),
        ("Two men sit on a bench. 3 dogs run on the beach.", ["Two men sit on a bench.", "3 dogs run on the beach."]),
        ("A man is walking past a large sign that says E.S.E. Electronics.",
         ["A man is walking past a large sign that says E.S.E. Electronics."]),
    ],
    "de": [
        ("Herr Dr. Müller kommt morgen. Er bringt Kuchen mit.", ["Herr Dr. Müller kommt morgen.", "Er bringt Kuchen mit."]),
        ("Wir brauchen Obst, z. B. Äpfel und Birnen. Der Markt ist offen.",
         ["Wir brauchen Obst, z. B. Äpfel und Birnen.", "Der Markt ist offen."]),
        ("Am 1. Mai ist ein Feiertag. Viele Menschen haben frei.", ["Am 1. Mai ist ein Feiertag.", "Viele Menschen haben frei."]),
        ("Er wurde am 3. Oktober 1990 geboren. Das war ein Mittwoch.",
         ["Er wurde am 3. Oktober 1990 geboren.", "Das war ein Mittwoch."]),
        ("Version 3.5 ist da. Sie ist schnell.", ["Version 3.5 ist da.", "Sie ist schnell."]),
        ("Er zögerte... Dann ging er.", ["Er zögerte...", "Dann ging er."]),
        ("Sie rief: „Komm her!“ Dann lachte sie.", ["Sie rief: „Komm her!“", "Dann lachte sie."]),
        ("(Er ging früh.) Niemand merkte es.", ["(Er ging früh.)", "Niemand merkte es."]),
        ("Wirklich?! Das wusste ich nicht.", ["Wirklich?!", "Das wusste ich nicht."]),
        ("Ein Mann mit einem Hund", ["Ein Mann mit einem Hund"]),
        ("Schreiben Sie an info@beispiel.de oder besuchen Sie www.beispiel.de. Wir antworten schnell.",
         ["Schreiben Sie an info@beispiel.de oder besuchen Sie www.beispiel.de.", "Wir antworten schnell."]),
        ("J. R. R. Tolkien schrieb den Hobbit. Das Buch erschien 1937.",
         ["J. R. R. Tolkien schrieb den Hobbit.", "Das Buch erschien 1937."]),
        ("Das gilt u. a. für Kinder. Erwachsene zahlen voll.", ["Das gilt u. a. für Kinder.", "Erwachsene zahlen voll."]),
        ("Prof. Dr. Schmidt hält die Rede. Alle hören zu.", ["Prof. Dr. Schmidt hält die Rede.", "Alle hören zu."]),
        ("Das kostet ca. 20 Euro. Das ist günstig.", ["Das kostet ca. 20 Euro.", "Das ist günstig."]),
        ("Er wurde im 2. Rennen Dritter. Er freut sich.", ["Er wurde im 2. Rennen Dritter.", "Er freut sich."]),
        ("Zwei Männer sitzen auf einer Bank. 3 Hunde rennen am Strand.", ["Zwei Männer sitzen auf einer Bank.", "3 Hunde rennen am Strand."]),
    ],
    "fr": [
        ("M. Dupont est arrivé. Il s'est assis.", ["M. Dupont est arrivé.", "Il s'est assis."]),
        ("Mme Martin et M. Durand parlent. Ils rient.", ["Mme Martin et M. Durand parlent.", "Ils rient."]),
        ("La version 3.5 est sortie. Elle est rapide.", ["La version 3.5 est sortie.", "Elle est rapide."]),
        ("Il hésita... Puis il partit.", ["Il hésita...", "Puis il partit."]),
        ("Vraiment ?! Je ne savais pas.", ["Vraiment ?!", "Je ne savais pas."]),
        ("Il a dit : « C'est fini. » Puis il est sorti.", ["Il a dit : « C'est fini. »", "Puis il est sorti."]),
        ("(Il est parti tôt.) Personne ne l'a vu.", ["(Il est parti tôt.)", "Personne ne l'a vu."]),
        ("Un homme avec un chien", ["Un homme avec un chien"]),
        ("Écrivez à info@exemple.fr ou visitez www.exemple.fr. Nous répondons vite.",
         ["Écrivez à info@exemple.fr ou visitez www.exemple.fr.", "Nous répondons vite."]),
        ("J. R. R. Tolkien a écrit Le Hobbit. Il est paru en 1937.", ["J. R. R. Tolkien a écrit Le Hobbit.", "Il est paru en 1937."]),
        ("Il aime les fruits, p. ex. les pommes. Il mange bien.", ["Il aime les fruits, p. ex. les pommes.", "Il mange bien."]),
        ("Le Dr. Bernard est là. Il attend.", ["Le Dr. Bernard est là.", "Il attend."]),
        ("Il est né le 1er mai. C'était un lundi.", ["Il est né le 1er mai.", "C'était un lundi."]),
        ("Où vas-tu ? Je rentre.", ["Où vas-tu ?", "Je rentre."]),
        ("Attention ! Le chien mord.", ["Attention !", "Le chien mord."]),
        ("Deux hommes sont assis sur un banc. 3 chiens courent sur la plage.",
         ["Deux hommes sont assis sur un banc.", "3 chiens courent sur la plage."]),
    ],
    "cs": [
        ("Pan Novák přišel. Posadil se.", ["Pan Novák přišel.", "Posadil se."]),
        ("Potřebujeme ovoce, např. jablka a hrušky. Trh je otevřený.",
         ["Potřebujeme ovoce, např. jablka a hrušky.", "Trh je otevřený."]),
        ("Narodil se 1. května 1990. Byla to středa.", ["Narodil se 1. května 1990.", "Byla to středa."]),
        ("Verze 3.5 je venku. Je rychlá.", ["Verze 3.5 je venku.", "Je rychlá."]),
        ("Váhal... Pak odešel.", ["Váhal...", "Pak odešel."]),
        ("Opravdu?! To jsem nevěděl.", ["Opravdu?!", "To jsem nevěděl."]),
        ("Řekla: „Pojď sem!“ Pak se zasmála.", ["Řekla: „Pojď sem!“", "Pak se zasmála."]),
        ("(Odešel brzy.) Nikdo ho neviděl.", ["(Odešel brzy.)", "Nikdo ho neviděl."]),
        ("Muž se psem", ["Muž se psem"]),
        ("Pište na info@priklad.cz nebo navštivte www.priklad.cz. Odpovíme rychle.",
         ["Pište na info@priklad.cz nebo navštivte www.priklad.cz.", "Odpovíme rychle."]),
        ("J. R. R. Tolkien napsal Hobita. Kniha vyšla v roce 1937.", ["J. R. R. Tolkien napsal Hobita.", "Kniha vyšla v roce 1937."]),
        ("Ing. Novák přijde zítra. Těší se.", ["Ing. Novák přijde zítra.", "Těší se."]),
        ("Dr. Svoboda je tady. Čeká na vás.", ["Dr. Svoboda je tady.", "Čeká na vás."]),
        ("Skončil na 2. místě. Byl spokojený.", ["Skončil na 2. místě.", "Byl spokojený."]),
        ("Stojí to cca 20 Kč, tj. málo. Kupte to.", ["Stojí to cca 20 Kč, tj. málo.", "Kupte to."]),
        ("Bydlí v ul. Dlouhá. Je to blízko.", ["Bydlí v ul. Dlouhá.", "Je to blízko."]),
        ("Dva muži sedí na lavičce. 3 psi běží po pláži.", ["Dva muži sedí na lavičce.", "3 psi běží po pláži."]),
    ],
}


def captions(data: Path, lang: str) -> list[str]:
    """The test_2016_flickr captions of `lang`, each ending in sentence punctuation (a period added where not)."""
    lines = [line.strip() for line in read_lines(data / f"test_2016_flickr.{lang}.gz")]
    return [line if line.rstrip(CLOSERS).endswith(ENDS) else line + "." for line in lines]


def multi30k_paragraphs(data: Path, lang: str, count: int) -> list[tuple[str, list[str]]]:
    """`count` paragraphs of 2, 3, 4, 5, 2, ... consecutive captions joined by a space, with their captions."""
    lines, out, at = captions(data, lang), [], 0
    for i in range(count):
        group = lines[at : at + 2 + i % 4]
        at += len(group)
        out.append((" ".join(group), group))
    return out


# Each segmenter: (package to install, module to import, factory lang -> (text -> sentences)).
def _pysbd(lang: str) -> Callable[[str], list[str]]:
    import pysbd
    from pysbd.languages import LANGUAGE_CODES

    seg = pysbd.Segmenter(language=lang if lang in LANGUAGE_CODES else "en", clean=False)
    return lambda text: [str(s) for s in seg.segment(text)]


def _sentencex(lang: str) -> Callable[[str], list[str]]:
    import sentencex

    return lambda text: list(sentencex.segment(lang, text))


def _blingfire(lang: str) -> Callable[[str], list[str]]:
    import blingfire

    return lambda text: blingfire.text_to_sentences(text).split("\n")


def _syntok(lang: str) -> Callable[[str], list[str]]:
    from syntok import segmenter

    def split(text: str) -> list[str]:
        return [text[s[0].offset : s[-1].offset + len(s[-1].value)] for p in segmenter.analyze(text) for s in p]

    return split


def _sentence_splitter(lang: str) -> Callable[[str], list[str]]:
    import warnings

    from sentence_splitter import SentenceSplitter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        splitter = SentenceSplitter(language=lang)
    return lambda text: [str(s) for s in splitter.split(text)]


def _nupunkt(lang: str) -> Callable[[str], list[str]]:
    import nupunkt

    return lambda text: [str(s) for s in nupunkt.sent_tokenize(text)]


def _icu(lang: str) -> Callable[[str], list[str]]:
    from icu4py.breakers import SentenceBreaker

    # ss=standard: ICU's list of abbreviations after which a period ends no sentence ("Mr.", "z.B.").
    locale = f"{lang}@ss=standard"
    return lambda text: list(SentenceBreaker(text, locale))


def _choppa(lang: str) -> Callable[[str], list[str]]:
    from choppa import DEFAULT_SRX_RULESET, SrxDocument, SrxTextIterator

    document = SrxDocument(ruleset=str(DEFAULT_SRX_RULESET))
    return lambda text: list(SrxTextIterator(document, f"{lang}_one", text))


def _segtok(lang: str) -> Callable[[str], list[str]]:
    from segtok.segmenter import split_single

    return lambda text: list(split_single(text))


def _nmt(lang: str) -> Callable[[str], list[str]]:
    from nmt.text.sentences import split_sentences

    def split(text: str) -> list[str]:
        # Each sentence with the gap before it, the last gap with the last: the text as the others give it
        # (a text without letters or digits is no sentence, only a gap).
        got = split_sentences(text, lang)
        pieces = [gap + sentence for gap, sentence in zip(got.gaps, got.sentences)] or [""]
        return pieces[:-1] + [pieces[-1] + got.gaps[-1]]

    return split


SEGMENTERS: dict[str, tuple[str, str, Callable[[str], Callable[[str], list[str]]]]] = {
    "pysbd": ("pysbd", "pysbd", _pysbd),
    "sentencex": ("sentencex", "sentencex", _sentencex),
    "blingfire": ("blingfire", "blingfire", _blingfire),
    "syntok": ("syntok", "syntok", _syntok),
    "sentence-splitter": ("sentence-splitter", "sentence_splitter", _sentence_splitter),
    "nupunkt": ("nupunkt", "nupunkt", _nupunkt),
    "icu4py (ICU)": ("icu4py", "icu4py", _icu),
    "choppa-srx (LanguageTool)": ("choppa-srx", "choppa", _choppa),
    "segtok": ("segtok", "segtok", _segtok),
    "nmt split_sentences": ("", "nmt.text.sentences", _nmt),
}


def ends(text: str, sentences: list[str]) -> tuple[set[int], bool]:
    """Where the sentences end, counted in non-space characters (the last end left out), and whether they
    hold exactly the text's non-space characters."""
    bounds, at = set(), 0
    for s in sentences:
        at += sum(not c.isspace() for c in s)
        bounds.add(at)
    whole = "".join(text.split()) == "".join("".join(sentences).split())
    return bounds - {at}, whole


def score(split: Callable[[str], list[str]], cases: list[tuple[str, list[str]]]) -> dict[str, int]:
    """Cases split exactly right, boundaries missed (merged) and invented (split), texts with characters lost."""
    right = merged = extra = lost = 0
    for text, expected in cases:
        want, _ = ends(text, expected)
        got, whole = ends(text, [s for s in split(text) if s.strip()])
        right += got == want and whole
        merged += len(want - got)
        extra += len(got - want)
        lost += not whole
    return {"right": right, "of": len(cases), "merged": merged, "split": extra, "lost": lost}


def speed(splitters: dict[str, Callable[[str], list[str]]], texts: list[tuple[str, str]], rounds: int,
          sentences: int) -> tuple[float, float]:
    """Sentences per second (`sentences`: how many the texts hold) and microseconds per text, best of
    `rounds`, the texts one call each."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for lang, text in texts:
            splitters[lang](text)
        best = min(best, time.perf_counter() - start)
    return sentences / best, 1e6 * best / len(texts)


# Robustness: seeded random strings over an alphabet of punctuation, quotes, whitespace and control characters,
# and long repetitive strings that make a backtracking regular expression take quadratic time or worse.
FUZZ_ALPHABET = "abcXYZ .!?;…\"')(»«„“\n\t\r\x00\x1c\u2028\u00a0。！？1234567890-,:_é漢"
ADVERSARIAL = ["a. " * 3000, ". . " * 5000, "!" * 20000, " " * 20000 + "a"]


class TimeLimit(Exception):
    """A call ran past the time limit."""


def robustness(split: Callable[[str], list[str]], count: int, limit: float) -> str:
    """How `split` copes with `count` random strings and ADVERSARIAL: calls that raised, that lost or added
    non-space characters, that ran past `limit` seconds (stopped there), and the slowest of the others."""
    rng = random.Random(0)
    texts = ["".join(rng.choice(FUZZ_ALPHABET) for _ in range(rng.randint(0, 80))) for _ in range(count)] + ADVERSARIAL

    def alarm(signum: int, frame: object) -> None:
        raise TimeLimit

    errors, changed, hung, slowest = 0, 0, 0, 0.0
    previous = signal.signal(signal.SIGALRM, alarm)
    try:
        for text in texts:
            start = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                out = split(text)
            except TimeLimit:
                hung += 1
                continue
            except Exception:
                errors += 1
                continue
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            slowest = max(slowest, time.perf_counter() - start)
            changed += "".join(text.split()) != "".join("".join(out).split())
    finally:
        signal.signal(signal.SIGALRM, previous)
    return (f"robustness: {len(texts)} hostile texts: {errors} raised, {changed} changed the text, {hung} ran past"
            f" {limit:g} s, slowest of the others {1000 * slowest:.1f} ms")


def facts(package: str) -> str:
    """Version, licence, wheel tag and installed size of `package`, from its installed metadata."""
    if not package:
        return ""
    dist = importlib.metadata.distribution(package)
    meta = dist.metadata
    licence = next(iter(meta.get_all("License-Expression") or []), None) or next(
        (c.split(" :: ")[-1] for c in meta.get_all("Classifier") or [] if c.startswith("License ::")), "?")
    tag = next((line.split(": ", 1)[1] for line in (dist.read_text("WHEEL") or "").splitlines() if line.startswith("Tag:")), "?")
    size = sum(f.size or 0 for f in dist.files or [])  # the wheel's RECORD: its bundled libraries too
    return f"{dist.version}, {licence}, {tag}, {size / 2**20:.1f} MiB installed"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="a Multi30k folder (test_2016_flickr.{en,de,fr,cs}.gz)")
    ap.add_argument("--paragraphs", type=int, default=200, help="Multi30k paragraphs per language")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds (the best is shown)")
    ap.add_argument("--only", nargs="*", help="measure only these segmenters (names as in the table)")
    ap.add_argument("--fuzz", type=int, default=2000, help="random strings for the robustness check")
    ap.add_argument("--limit", type=float, default=2.0, help="seconds a robustness call may take")
    args = ap.parse_args()

    print(f"CPU: {platform.processor() or platform.machine()}, Python {platform.python_version()}, one thread")
    paragraphs = {lang: multi30k_paragraphs(args.data, lang, args.paragraphs) for lang in LANGS}
    lines = [(lang, line) for lang in LANGS for line in read_lines(args.data / f"test_2016_flickr.{lang}.gz")]
    paras = [(lang, text) for lang in LANGS for text, _ in paragraphs[lang]]
    held = sum(len(group) for lang in LANGS for _, group in paragraphs[lang])
    for name, (package, module, factory) in SEGMENTERS.items():
        if args.only and name not in args.only:
            continue
        try:
            importlib.import_module(module)
        except ImportError:
            print(f"\n{name}: not installed (pip install {package})")
            continue
        splitters = {lang: factory(lang) for lang in LANGS}
        print(f"\n{name}: {facts(package)}")
        for lang in LANGS:
            m, h = score(splitters[lang], paragraphs[lang]), score(splitters[lang], HARD_CASES[lang])
            print(f"  {lang}: Multi30k {m['right']}/{m['of']} right (merged {m['merged']}, split {m['split']}, lost {m['lost']});"
                  f" hard cases {h['right']}/{h['of']} (merged {h['merged']}, split {h['split']}, lost {h['lost']})")
        (line_rate, line_us), (para_rate, para_us) = speed(splitters, lines, args.rounds, len(lines)), speed(splitters, paras, args.rounds, held)
        print(f"  speed: {line_rate:,.0f} sentences/s on {len(lines)} lines one by one ({line_us:.1f} µs a line);"
              f" {para_rate:,.0f} sentences/s on {len(paras)} paragraphs of {held} sentences ({para_us:.1f} µs a paragraph)")
        print(f"  {robustness(splitters['en'], args.fuzz, args.limit)}", flush=True)


if __name__ == "__main__":
    main()
