#!/usr/bin/env python3
"""Write fabricated WMT14 English-French archives, laid out like the upstream ones, into a folder.

For `nmt download wmt14 --pair en-fr --mirror DIR` (and `europarl`) without network: the tests and
the end-to-end example of docs/recipe-wmt14-en-fr.md use it. The file names and the member names
inside each archive are those of the upstream files (statmt.org listings, as used by sacreBLEU,
tensor2tensor's translate_enfr.py and fairseq's prepare-wmt14en2fr.sh); they are written out here
rather than read from nmt's registry, so that a wrong name in the registry fails the tests. Each
archive also holds a few members nmt must leave alone (other language pairs, annotations).

The text is synthetic, Europarl-like English and its French translation, from a small hand-written
grammar (seeded, deterministic). Some pairs are Europarl's recurring one-liners ("The debate is
closed."), and every `blank_every`-th pair has an empty French side, as in the real corpus.

    python tools/fake_enfr_archives.py --out /tmp/enfr-mirror --europarl 50000

Only the standard library is used. The SGML test sets have the real line counts (newstest2013:
3,000, newstest2014: 3,003), which nmt checks.
"""

from __future__ import annotations

import argparse
import gzip
import io
import random
import tarfile
from pathlib import Path
from typing import Optional

# --------------------------------------------------------------------------------------------
# Europarl-like sentence pairs
# --------------------------------------------------------------------------------------------

SUBJECTS = [  # (English, French, plural)
    ("the Commission", "la Commission", False),
    ("the Council", "le Conseil", False),
    ("Parliament", "le Parlement", False),
    ("the rapporteur", "le rapporteur", False),
    ("my group", "mon groupe", False),
    ("the Presidency", "la présidence", False),
    ("the Member States", "les États membres", True),
    ("the citizens of Europe", "les citoyens européens", True),
]
VERBS = [  # (English singular, plural, French singular, plural)
    ("supports", "support", "soutient", "soutiennent"),
    ("rejects", "reject", "rejette", "rejettent"),
    ("welcomes", "welcome", "salue", "saluent"),
    ("examines", "examine", "examine", "examinent"),
    ("adopts", "adopt", "adopte", "adoptent"),
    ("criticises", "criticise", "critique", "critiquent"),
    ("proposes", "propose", "propose", "proposent"),
    ("defends", "defend", "défend", "défendent"),
]
OBJECTS = [
    ("the proposal", "la proposition"),
    ("the report", "le rapport"),
    ("this amendment", "cet amendement"),
    ("the budget", "le budget"),
    ("the directive", "la directive"),
    ("the resolution", "la résolution"),
    ("the agreement", "l'accord"),
    ("the new regulation", "le nouveau règlement"),
    ("the common position", "la position commune"),
]
TOPICS = [
    ("fisheries", "la pêche"),
    ("energy", "l'énergie"),
    ("transport", "les transports"),
    ("human rights", "les droits de l'homme"),
    ("the environment", "l'environnement"),
    ("agriculture", "l'agriculture"),
    ("the internal market", "le marché intérieur"),
    ("food safety", "la sécurité alimentaire"),
    ("immigration", "l'immigration"),
]
OPENINGS = [("Today, ", "Aujourd'hui, "), ("This week, ", "Cette semaine, "), ("Once again, ", "Une fois de plus, ")]
REASONS = [
    (", because it is urgent", ", parce que c'est urgent"),
    (", because it is a priority", ", parce que c'est une priorité"),
    (", because it is necessary", ", parce que c'est nécessaire"),
]
ONE_LINERS = [
    ("The debate is closed.", "Le débat est clos."),
    ("The vote will take place tomorrow at 12 noon.", "Le vote aura lieu demain à 12 heures."),
    ("(Applause)", "(Applaudissements)"),
]


def _cap(text: str) -> str:
    return text[0].upper() + text[1:]


def sentence_pair(rng: random.Random) -> tuple[str, str]:
    """One English sentence and its French translation."""
    if rng.random() < 0.03:
        return rng.choice(ONE_LINERS)
    if rng.random() < 0.1:
        topic = rng.choice(TOPICS)
        return (f"Mr President, I would like to thank the rapporteur for his work on {topic[0]}.",
                f"Monsieur le Président, je voudrais remercier le rapporteur pour son travail sur {topic[1]}.")
    subj_en, subj_fr, plural = rng.choice(SUBJECTS)
    verb = rng.choice(VERBS)
    obj_en, obj_fr = rng.choice(OBJECTS)
    en = f"{subj_en} {verb[1] if plural else verb[0]} {obj_en}"
    fr = f"{subj_fr} {verb[3] if plural else verb[2]} {obj_fr}"
    if rng.random() < 0.7:
        topic = rng.choice(TOPICS)
        en, fr = f"{en} on {topic[0]}", f"{fr} sur {topic[1]}"
    if rng.random() < 0.3:
        reason = rng.choice(REASONS)
        en, fr = en + reason[0], fr + reason[1]
    if rng.random() < 0.4:
        if rng.random() < 0.5:
            year = rng.randint(1999, 2013)
            opening = (f"In {year}, ", f"En {year}, ")
        else:
            opening = rng.choice(OPENINGS)
        return opening[0] + en + ".", opening[1] + fr + "."
    return _cap(en) + ".", _cap(fr) + "."


def sentence_pairs(n: int, seed: int, blank_every: int = 0) -> tuple[list[str], list[str]]:
    """n pairs (English lines, French lines); pair k (1-based) has an empty French side when
    blank_every divides k."""
    rng = random.Random(seed)
    en, fr = [], []
    for k in range(1, n + 1):
        e, f = sentence_pair(rng)
        en.append(e)
        fr.append("" if blank_every and k % blank_every == 0 else f)
    return en, fr


# --------------------------------------------------------------------------------------------
# Archives
# --------------------------------------------------------------------------------------------


def text(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def tar_bytes(members: dict[str, bytes], mode: str = "w:gz") -> bytes:
    """A tar archive (gzipped for "w:gz", plain for "w") of `members`, in order, with fixed times."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_400_000_000
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sgm(lines: list[str], lang: str, kind: str, setid: str) -> bytes:
    """WMT's SGML: `kind` is "src" (srcset) or "ref" (refset)."""
    segs = "".join(f'<seg id="{i + 1}">{line}</seg>\n' for i, line in enumerate(lines))
    tag = "srcset" if kind == "src" else "refset"
    head = f'<{tag} setid="{setid}" srclang="any" trglang="{lang}">\n<doc sysid="{kind}" docid="d1" origlang="en">\n'
    return (head + segs + f"</doc>\n</{tag}>\n").encode("utf-8")


def corpus(n: int, seed: int, tag: str, blank_every: int = 0) -> tuple[bytes, bytes]:
    """English and French files of n pairs; `tag` starts every line so corpora can be told apart."""
    en, fr = sentence_pairs(n, seed, blank_every)
    return text([f"{tag} {e}" for e in en]), text([f"{tag} {f}" if f else "" for f in fr])


def write_archives(out: Path, sizes: Optional[dict[str, int]] = None, seed: int = 1,
                   blank_every: int = 997) -> dict[str, int]:
    """Write the seven upstream archives of WMT14 en-fr into `out`; return their sizes in bytes.

    `sizes` sets the pairs of each training corpus: europarl, commoncrawl, un, nc, giga.
    """
    n = {"europarl": 2000, "commoncrawl": 300, "un": 200, "nc": 100, "giga": 400, **(sizes or {})}
    out.mkdir(parents=True, exist_ok=True)
    other = text(["ignored"])  # other language pairs and annotations: present, never used
    ep_en, ep_fr = corpus(n["europarl"], seed, "ep", blank_every)
    cc_en, cc_fr = corpus(n["commoncrawl"], seed + 1, "cc")
    un_en, un_fr = corpus(n["un"], seed + 2, "un")
    nc_en, nc_fr = corpus(n["nc"], seed + 3, "nc")
    gi_en, gi_fr = corpus(n["giga"], seed + 4, "giga")
    test_en, test_fr = sentence_pairs(3003, seed + 5)
    dev_en, dev_fr = sentence_pairs(3000, seed + 6)
    gz = lambda data: gzip.compress(data, mtime=0)  # noqa: E731
    archives = {
        "training-parallel-europarl-v7.tgz": tar_bytes({
            "training/europarl-v7.de-en.de": other, "training/europarl-v7.de-en.en": other,
            "training/europarl-v7.fr-en.en": ep_en, "training/europarl-v7.fr-en.fr": ep_fr,
        }),
        "training-parallel-commoncrawl.tgz": tar_bytes({
            "commoncrawl.de-en.de": other, "commoncrawl.de-en.en": other,
            "commoncrawl.fr-en.annotation": other,
            "commoncrawl.fr-en.en": cc_en, "commoncrawl.fr-en.fr": cc_fr,
        }),
        "training-parallel-un.tgz": tar_bytes({
            "un/undoc.2000.es-en.en": other, "un/undoc.2000.es-en.es": other,
            "un/undoc.2000.fr-en.en": un_en, "un/undoc.2000.fr-en.fr": un_fr,
        }),
        "training-parallel-nc-v9.tgz": tar_bytes({
            "training/news-commentary-v9.de-en.de": other, "training/news-commentary-v9.de-en.en": other,
            "training/news-commentary-v9.fr-en.en": nc_en, "training/news-commentary-v9.fr-en.fr": nc_fr,
        }),
        # a plain tar whose two members are gzipped text
        "training-giga-fren.tar": tar_bytes({
            "giga-fren.release2.fixed.en.gz": gz(gi_en), "giga-fren.release2.fixed.fr.gz": gz(gi_fr),
        }, mode="w"),
        "test.tgz": tar_bytes({  # sacreBLEU's wmt13: newstest2013
            "test/newstest2013-src.en.sgm": sgm(dev_en, "en", "src", "newstest2013"),
            "test/newstest2013-src.fr.sgm": sgm(dev_fr, "fr", "src", "newstest2013"),
            "test/newstest2013-src.de.sgm": sgm(["ignored"], "de", "src", "newstest2013"),
        }),
        "test-full.tgz": tar_bytes({  # sacreBLEU's wmt14/full: newstest2014
            "test-full/newstest2014-fren-src.en.sgm": sgm(test_en, "en", "src", "newstest2014"),
            "test-full/newstest2014-fren-ref.fr.sgm": sgm(test_fr, "fr", "ref", "newstest2014"),
            "test-full/newstest2014-fren-src.fr.sgm": sgm(test_fr, "fr", "src", "newstest2014"),
            "test-full/newstest2014-fren-ref.en.sgm": sgm(test_en, "en", "ref", "newstest2014"),
        }),
    }
    for name, data in archives.items():
        (out / name).write_bytes(data)
    return {name: len(data) for name, data in archives.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="Folder for the archives (a --mirror for nmt download).")
    ap.add_argument("--europarl", type=int, default=2000, help="Europarl pairs.")
    ap.add_argument("--others", type=int, default=300, help="Pairs of each other training corpus.")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    sizes = {"europarl": args.europarl, **{k: args.others for k in ("commoncrawl", "un", "nc", "giga")}}
    for name, size in write_archives(args.out, sizes, args.seed).items():
        print(f"{args.out / name}\t{size:,} bytes")


if __name__ == "__main__":
    main()
