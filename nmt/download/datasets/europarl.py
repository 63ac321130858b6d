"""Europarl v7 English-French alone (the WMT14 archive's fr-en corpus), with held-out valid and test sets."""

from __future__ import annotations

from nmt.download.spec import GB, DatasetSpec, Holdout, RemoteFile, Source, Split

# About 0.6 GB upstream; no published checksum (the computed sha256 goes to the manifest).
ARCHIVE = RemoteFile("https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz", limit=2 * GB)
MEMBER = "training/europarl-v7.fr-en.{lang}"
HOLDOUT = Holdout(every=1000)


def _europarl(src: str, tgt: str) -> DatasetSpec:
    sides = {lang: (Source(ARCHIVE, MEMBER.format(lang=lang)),) for lang in ("en", "fr")}
    return DatasetSpec(
        name=f"europarl-{src}-{tgt}",
        family="europarl",
        src=src,
        tgt=tgt,
        description="Europarl v7 English-French (European Parliament proceedings, about 2M "
        "pairs): pairs 500, 1500, 2500, ... are valid, pairs 1000, 2000, ... are test (about "
        "2,000 each), the rest is train, less any pair equal to a valid or test pair",
        licence="no copyright restrictions stated upstream (European Parliament proceedings), "
        "see https://www.statmt.org/europarl/",
        homepage="https://www.statmt.org/europarl/",
        approx_size="about 0.6 GB, one archive",
        splits=tuple(
            Split(name, sides[src], sides[tgt], holdout=HOLDOUT) for name in ("train", "valid", "test")
        ),
    )


SPECS = (_europarl("en", "fr"), _europarl("fr", "en"))
