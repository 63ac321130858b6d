"""Multi30k task 1 (Flickr30K captions), English-German, from the raw gzipped files upstream.

29,000 / 1,014 / 1,000 caption pairs (test = test_2016_flickr), plus three extra test sets.
"""

from __future__ import annotations

from nmt.download.spec import DatasetSpec, Split, parallel_files, swapped

RAW = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/"
# sha256 and size of the upstream files, computed from a copy of the repository's files. The
# 2017/2018 extra test sets have no recorded checksum: their sha256 goes to the manifest, and
# LIMIT bounds them (each is about 20 kB).
SUMS: dict[str, tuple[str | None, int | None]] = {
    "train.en.gz": ("d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f", 568929),
    "train.de.gz": ("726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6", 637044),
    "val.en.gz": ("14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28", 21650),
    "val.de.gz": ("f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a", 24681),
    "test_2016_flickr.en.gz": ("611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9", 21077),
    "test_2016_flickr.de.gz": ("9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8", 22890),
}
LIMIT = 16 * 1000**2
# (split, file stem, lines, extra test set)
SPLITS = (
    ("train", "train", 29000, False),
    ("valid", "val", 1014, False),
    ("test", "test_2016_flickr", 1000, False),
    ("test2017", "test_2017_flickr", 1000, True),
    ("test2017mscoco", "test_2017_mscoco", 461, True),
    ("test2018", "test_2018_flickr", 1071, True),
)


def _split(name: str, stem: str, lines: int, extra: bool) -> Split:
    return parallel_files(name, RAW, f"{stem}.en.gz", f"{stem}.de.gz", lines, SUMS, extra, LIMIT)


EN_DE = DatasetSpec(
    name="multi30k",
    src="en",
    tgt="de",
    description="Multi30k task 1: image captions, 29k training pairs (small, for quick runs)",
    licence="research use; no licence file upstream (Flickr30K terms apply), "
    "see https://github.com/multi30k/dataset",
    homepage="https://github.com/multi30k/dataset",
    splits=tuple(_split(*row) for row in SPLITS),
)
SPECS = (EN_DE, swapped(EN_DE, "multi30k-de-en"))
