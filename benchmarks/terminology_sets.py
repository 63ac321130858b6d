"""Two terminology test sets from a parallel training corpus, made without the test references' help.

- easy: each frequent source word (in 30+ training pairs) with its dominant target noun (capitalised: German nouns
  are), kept where their Dice coefficient over the training pairs is 0.6 or more (dog -> Hund);
- hard: the same words with another target noun that the training pairs use *instead of* the dominant one (in 80% or
  more of the 5+ pairs holding the source word and it, the dominant noun is absent; Dice 0.1 or more): a valid but
  non-dominant translation (shirt -> Oberteil, sidewalk -> Bürgersteig), so that a model which ignores the glossary
  fails. The selection is automatic: some of these are other words, not translations (plate -> Home, of home plate).

Each set is written as a glossary (OUT/easy.tsv, OUT/hard.tsv) with the test lines whose source holds one of its
terms (OUT/easy.SRC, OUT/easy.TGT, ...), ready for `nmt eval --glossary`. The hard set's references use the
dominant nouns, so a translation that obeys its glossary loses BLEU against them by construction; OUT/hard.termref.TGT
is a second reference for it: each reference with the dominant noun of a term its source holds replaced by the term's
target (whole words, as written; the articles and endings around it are left as they were, so it is an
approximation of what a glossary-obeying translator would write).

    python benchmarks/terminology_sets.py --train multi30k/train --test multi30k/test --src en --tgt de --out terms
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

from nmt.text.glossary import Glossary

WORD = re.compile(r"\w+(?:['’-]\w+)*")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("train", "test", "src", "tgt", "out"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    source = Path(f"{args.train}.{args.src}").read_text(encoding="utf-8").splitlines()
    target = Path(f"{args.train}.{args.tgt}").read_text(encoding="utf-8").splitlines()
    pairs = [({w.lower() for w in WORD.findall(a)}, set(WORD.findall(b))) for a, b in zip(source, target)]
    df_src, df_tgt, both = collections.Counter(), collections.Counter(), collections.Counter()
    for words, tgt in pairs:
        nouns = {w for w in tgt if w[:1].isupper()}
        df_src.update(words)
        df_tgt.update(nouns)
        both.update((w, n) for w in words if len(w) > 2 for n in nouns)
    candidates = collections.defaultdict(list)
    for (w, n), c in both.items():
        if df_src[w] >= 30 and df_tgt[n] >= 10:
            candidates[w].append((2 * c / (df_src[w] + df_tgt[n]), n))
    easy, hard = {}, {}
    for w, found in candidates.items():
        found.sort(reverse=True)
        dice, best = found[0]
        if dice < 0.6:
            continue
        easy[w] = best
        for d, other in found[1:]:
            if d < 0.1 or other.lower().startswith(best.lower()[:4]) or best.lower().startswith(other.lower()[:4]):
                continue
            holding = [tgt for words, tgt in pairs if w in words and other in tgt]
            if len(holding) >= 5 and sum(best not in tgt for tgt in holding) >= 0.8 * len(holding):
                hard[w] = other
            break
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    test_src = Path(f"{args.test}.{args.src}").read_text(encoding="utf-8").splitlines()
    test_tgt = Path(f"{args.test}.{args.tgt}").read_text(encoding="utf-8").splitlines()
    for name, terms in (("easy", easy), ("hard", hard)):
        (out / f"{name}.tsv").write_text("".join(f"{w}\t{n}\n" for w, n in sorted(terms.items())), encoding="utf-8")
        glossary = Glossary.read(out / f"{name}.tsv")
        keep = [i for i, line in enumerate(test_src) if glossary.matches(line)]
        for lang, lines in ((args.src, test_src), (args.tgt, test_tgt)):
            (out / f"{name}.{lang}").write_text("".join(lines[i] + "\n" for i in keep), encoding="utf-8")
        found = sum(len(glossary.matches(test_src[i])) for i in keep)
        print(f"{name}: {len(terms)} terms, {len(keep)} test lines, {found} term occurrences")
        if name == "hard":
            refs, replaced = [], 0
            for i in keep:
                line = test_tgt[i]
                for match in glossary.matches(test_src[i]):
                    dominant = easy[match.term.source.lower()]
                    line, n = re.subn(rf"(?<!\w){re.escape(dominant)}(?!\w)", match.term.target, line)
                    replaced += n
                refs.append(line)
            (out / f"hard.termref.{args.tgt}").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
            print(f"hard.termref.{args.tgt}: {replaced} dominant nouns replaced by their term")


if __name__ == "__main__":
    main()
