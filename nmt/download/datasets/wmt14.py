"""WMT14 news task: English with German or French, either way round.

Training archives: the official statmt.org URLs, as in sacreBLEU's and tensor2tensor's lists and
fairseq's prepare-wmt14en2fr.sh. en-de: Europarl v7 + Common Crawl + News Commentary v9; en-fr:
Europarl v7 + Common Crawl + UN + News Commentary v9 + the 10^9 corpus. No published checksum is
recorded for them: the computed sha256 goes to the manifest, and LIMIT bounds each download.

Valid is newstest2013 and test newstest2014 (all 3,003 lines: sacreBLEU's wmt14/full, the set
papers report), with the URL, md5 and SGML members of sacreBLEU's registry (wmt13 and
wmt14/full), so that test.TGT is the reference `sacrebleu -t wmt14/full -l SRC-TGT` scores.
"""

from __future__ import annotations

from nmt.download.spec import GB, DatasetSpec, RemoteFile, Source, Split

LIMIT = 8 * GB  # the largest archive, the 10^9 corpus, is about 2.6 GB
EUROPARL = RemoteFile("https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz", limit=LIMIT)
COMMONCRAWL = RemoteFile("https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz", limit=LIMIT)
NEWSCOMM9 = RemoteFile("https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz", limit=LIMIT)
UN = RemoteFile("https://www.statmt.org/wmt13/training-parallel-un.tgz", limit=LIMIT)
GIGA = RemoteFile("https://www.statmt.org/wmt10/training-giga-fren.tar", limit=LIMIT)  # a plain tar of .gz files

# The training members of each pair (named by its other language), in order of concatenation;
# {lang} is a language code.
TRAIN: dict[str, tuple[tuple[RemoteFile, str], ...]] = {
    "de": (
        (EUROPARL, "training/europarl-v7.de-en.{lang}"),
        (COMMONCRAWL, "commoncrawl.de-en.{lang}"),
        (NEWSCOMM9, "training/news-commentary-v9.de-en.{lang}"),
    ),
    "fr": (
        (EUROPARL, "training/europarl-v7.fr-en.{lang}"),
        (COMMONCRAWL, "commoncrawl.fr-en.{lang}"),
        (UN, "un/undoc.2000.fr-en.{lang}"),
        (NEWSCOMM9, "training/news-commentary-v9.fr-en.{lang}"),
        (GIGA, "giga-fren.release2.fixed.{lang}.gz"),
    ),
}

# The SGML test sets: archive, and the members of the source and reference sides, where {src} and
# {tgt} are the direction's languages and {pair} the pair without its dash, English last ("fren").
NEWSTEST2013 = RemoteFile("https://statmt.org/wmt13/test.tgz", md5="48eca5d02f637af44e85186847141f67", limit=GB)
NEWSTEST2014 = RemoteFile("https://statmt.org/wmt14/test-full.tgz", md5="a8cd784e006feb32ac6f3d9ec7eb389a", limit=GB)
TEST_SETS = {
    "valid": (NEWSTEST2013, "test/newstest2013-src.{src}.sgm", "test/newstest2013-src.{tgt}.sgm", 3000),
    "test": (NEWSTEST2014, "test-full/newstest2014-{pair}-src.{src}.sgm",
             "test-full/newstest2014-{pair}-ref.{tgt}.sgm", 3003),
}

ABOUT = {  # other language -> (pair in words, training pairs, download size)
    "de": ("English-German", "about 4.5M training pairs", "about 1.6 GB of archives"),
    "fr": (
        "English-French",
        (
            "about 36M training pairs (the paper's count; the 10^9 French-English corpus and UN "
            "are most of them)"
        ),
        "several GB of archives",
    ),
}
LANGUAGE = {"en": "English", "de": "German", "fr": "French"}


def _test_split(name: str, src: str, tgt: str) -> Split:
    file, src_member, ref_member, lines = TEST_SETS[name]
    names = {"src": src, "tgt": tgt, "pair": f"{src if tgt == 'en' else tgt}en"}
    return Split(name, (Source(file, src_member.format(**names), "sgm"),),
                 (Source(file, ref_member.format(**names), "sgm"),), lines)


def _wmt14(src: str, tgt: str) -> DatasetSpec:
    other = src if tgt == "en" else tgt
    sides = {lang: tuple(Source(file, member.format(lang=lang)) for file, member in TRAIN[other])
             for lang in (src, tgt)}
    pair_name, train_size, size = ABOUT[other]
    direction = f"{LANGUAGE[src]}-{LANGUAGE[tgt]}" if src != "en" else pair_name
    return DatasetSpec(
        name="wmt14" if (src, tgt) == ("en", "de") else f"wmt14-{src}-{tgt}",
        family="wmt14",
        src=src,
        tgt=tgt,
        description=f"WMT14 {direction} news task: {train_size}; valid newstest2013, test "
        "newstest2014 (all 3,003 lines: sacreBLEU's wmt14/full)",
        licence="research use under the WMT14 terms of each corpus, "
        "see https://www.statmt.org/wmt14/translation-task.html",
        homepage="https://www.statmt.org/wmt14/translation-task.html",
        approx_size=size,
        splits=(Split("train", sides[src], sides[tgt]), _test_split("valid", src, tgt), _test_split("test", src, tgt)),
    )


SPECS = (_wmt14("en", "de"), _wmt14("de", "en"), _wmt14("en", "fr"), _wmt14("fr", "en"))
