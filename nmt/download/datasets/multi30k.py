"""Multi30k (Flickr30K image captions), from the raw gzipped files upstream: task 1 and task 2.

Task 1, parallel: 29,000 / 1,014 / 1,000 caption pairs (test = test_2016_flickr) in every pair of English,
German, French and Czech, either way round, plus the extra test sets that upstream has in both languages of
the pair.

Task 2, monolingual (`multi30k-mono`): five English and five German captions of each of task 1's 29,000
training images, one file per caption number (145,000 lines a language), written independently, not
translations of each other. One download gives `mono.en` and `mono.de`, each without repeats and without the
sentences of task 1's validation and test sets in its language (its extra test sets too, with extra tests),
read from task 1's files as declared here.
"""

from __future__ import annotations

from itertools import combinations

from nmt.download.spec import DatasetSpec, Mono, Source, Split, parallel_files, remote_file

RAW = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/"
TASK2 = "https://github.com/multi30k/dataset/raw/master/data/task2/raw/"
LANGS = ("en", "de", "fr", "cs")  # the first pair, en-de, is the family's default
LICENCE = "research use; no licence file upstream (Flickr30K terms apply), see https://github.com/multi30k/dataset"
LANGUAGE = {"en": "English", "de": "German", "fr": "French", "cs": "Czech"}
# sha256 and size of every upstream file, computed from the repository's files (data/task1/raw/, unchanged
# since November 2020); the train, val and test_2016_flickr ones also agree with a separate copy of them.
SUMS: dict[str, tuple[str | None, int | None]] = {
    "train.en.gz": ("d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f", 568929),
    "train.de.gz": ("726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6", 637044),
    "train.fr.gz": ("622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c", 604242),
    "train.cs.gz": ("a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077", 593827),
    "val.en.gz": ("14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28", 21650),
    "val.de.gz": ("f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a", 24681),
    "val.fr.gz": ("ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9", 23001),
    "val.cs.gz": ("b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc", 22096),
    "test_2016_flickr.en.gz": ("611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9", 21077),
    "test_2016_flickr.de.gz": ("9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8", 22890),
    "test_2016_flickr.fr.gz": ("6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90", 22310),
    "test_2016_flickr.cs.gz": ("200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1", 22572),
    "test_2017_flickr.en.gz": ("76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074", 19138),
    "test_2017_flickr.de.gz": ("a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee", 21471),
    "test_2017_flickr.fr.gz": ("3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496", 20434),
    "test_2017_mscoco.en.gz": ("aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58", 8844),
    "test_2017_mscoco.de.gz": ("799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338", 10230),
    "test_2017_mscoco.fr.gz": ("754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0", 9751),
    "test_2018_flickr.en.gz": ("ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d", 23514),
    "test_2018_flickr.de.gz": ("ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608", 26461),
    "test_2018_flickr.fr.gz": ("fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501", 25321),
    "test_2018_flickr.cs.gz": ("7d0a9db904f94c554a8c58049a9f3a5357c27f46cc3d710d70cb0b4a2585b8c2", 25181),
}
# The same for task 2's files (data/task2/raw/): train.N.LANG.gz holds caption N of each training image.
TASK2_SUMS: dict[str, tuple[str | None, int | None]] = {
    "train.1.en.gz": ("a0e057f07a9733199c0d755d77f6d583dc6f40a3180734b1130a216e2fdf3a3b", 867789),
    "train.2.en.gz": ("d79dd70a9eafb2d1fe40151621278c4ae69b3c148c5052a53d7c7a41bf3ba023", 666845),
    "train.3.en.gz": ("86e16fdcc699bcb6bca0f87c3cf1051f7de5ee3674dd588cedc5200194282749", 555423),
    "train.4.en.gz": ("3771b84e010ad6197806d2a1188cb07c12149e3e0d178dd5966dee5763733686", 465845),
    "train.5.en.gz": ("73988689307fe836994eae59735dc840c15da9775455fa76e6ed22606a042a91", 375613),
    "train.1.de.gz": ("0002241b52aba5160c08d644ea0d64a9bf46a2dfffcf619c9e3cdaa55b357004", 456594),
    "train.2.de.gz": ("ac7c29258b90aec0b64d677c5bfc831fc402e6296d0aa9cc7a3433ddbff85c37", 496731),
    "train.3.de.gz": ("ec5e6508813814aa31311b34e26e24f903dd7701f8d0668313259b7f975d7aa0", 536471),
    "train.4.de.gz": ("bcee8ac6eb47d8a7dc8cff47d9a0fbd80b4363cfda22021bacd297f9604221a4", 598066),
    "train.5.de.gz": ("dccb0ca6ff25e0b1f0d385f59fb809184e0db89622d88371725e3ec46d43bfc0", 658679),
}
CAPTIONS = 5  # task 2's captions of each image, train.1 .. train.5, 29,000 lines each
# Bounds a file missing from SUMS (none is; each is under 1 MB).
LIMIT = 16 * 1000**2
# (split, file stem, lines, extra test set, the languages upstream has it in). Upstream has no Czech
# test_2017_flickr or test_2017_mscoco, so a pair with Czech has only test2018 as an extra test set.
SPLITS = (
    ("train", "train", 29000, False, LANGS),
    ("valid", "val", 1014, False, LANGS),
    ("test", "test_2016_flickr", 1000, False, LANGS),
    ("test2017", "test_2017_flickr", 1000, True, ("en", "de", "fr")),
    ("test2017mscoco", "test_2017_mscoco", 461, True, ("en", "de", "fr")),
    ("test2018", "test_2018_flickr", 1071, True, LANGS),
)


def pair_splits(src: str, tgt: str) -> tuple[Split, ...]:
    """The splits of the direction src -> tgt: those whose files upstream has in both languages."""
    return tuple(
        parallel_files(name, RAW, f"{stem}.{src}.gz", f"{stem}.{tgt}.gz", lines, SUMS, extra, LIMIT)
        for name, stem, lines, extra, langs in SPLITS
        if src in langs and tgt in langs
    )


def _multi30k(src: str, tgt: str) -> DatasetSpec:
    return DatasetSpec(
        name="multi30k" if (src, tgt) == ("en", "de") else f"multi30k-{src}-{tgt}",
        family="multi30k",
        src=src,
        tgt=tgt,
        description=f"Multi30k task 1 {LANGUAGE[src]}-{LANGUAGE[tgt]}: image captions, 29k training pairs "
        "(small, for quick runs)",
        licence=LICENCE,
        homepage="https://github.com/multi30k/dataset",
        splits=pair_splits(src, tgt),
    )


def _captions(lang: str) -> tuple[Source, ...]:
    """Task 2's caption files of one language, in order."""
    return tuple(Source(remote_file(TASK2, f"train.{i}.{lang}.gz", TASK2_SUMS, LIMIT)) for i in range(1, CAPTIONS + 1))


MONO = DatasetSpec(
    name="multi30k-mono",
    src="en",
    tgt="de",
    description="Multi30k task 2 English and German image captions, monolingual (for back-translation): five "
    "independent captions of each training image a language, repeats and task 1's validation and test sentences "
    "removed",
    licence=LICENCE,
    homepage="https://github.com/multi30k/dataset",
    # held out: task 1's en-de splits but train (valid, test; with extra tests test2017, test2017mscoco, test2018)
    splits=(Split("mono", _captions("en"), _captions("de"), lines=CAPTIONS * 29000,
                  mono=Mono(tuple(s for s in pair_splits("en", "de") if s.name != "train"))),),
)

# en-de, de-en, en-fr, fr-en, en-cs, cs-en, de-fr, fr-de, de-cs, cs-de, fr-cs, cs-fr; then task 2
SPECS = (*(spec for a, b in combinations(LANGS, 2) for spec in (_multi30k(a, b), _multi30k(b, a))), MONO)
