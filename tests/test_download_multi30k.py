"""Multi30k in every pair of English, German, French and Czech, either way round (`nmt download multi30k --pair`).

No network: fabricated files laid out like upstream's data/task1/raw/ go through the local HTTP server of
test_download; the real files, where a copy of them lies beside the repository, through a local --mirror folder
and over HTTP.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import json
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from itertools import permutations

import pytest
from test_cli import nmt, ok
from test_download import FAST, SHARED_M30K, serve, server  # noqa: F401  (server: the fixture)

from nmt import download as dl
from nmt.core.errors import InputError
from nmt.download import DatasetSpec, RemoteFile, Source
from nmt.download.datasets import multi30k

LANGS = ("en", "de", "fr", "cs")
PAIRS = [f"{a}-{b}" for a, b in permutations(LANGS, 2)]
STANDARD = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
EXTRA = {"test2017": "test_2017_flickr", "test2017mscoco": "test_2017_mscoco", "test2018": "test_2018_flickr"}
STEMS = {**STANDARD, **EXTRA}
NO_CZECH = {"test2017", "test2017mscoco"}  # upstream has these in en, de and fr only
FAKE_LINES = {"train": 40, "val": 6, "test_2016_flickr": 5, "test_2017_flickr": 4, "test_2017_mscoco": 3,
              "test_2018_flickr": 2}
needs_copy = pytest.mark.skipif(not SHARED_M30K.is_dir(), reason=f"{SHARED_M30K} not present")


def expected_splits(pair: str) -> set[str]:
    return set(STANDARD) | set(EXTRA) - (NO_CZECH if "cs" in pair.split("-") else set())


def caption(stem: str, lang: str, i: int) -> str:
    word = {"en": "a dog", "de": "ein Hund", "fr": "un chien", "cs": "pes běží"}[lang]
    return f"{stem} {i}: {word} ä é ř"


@functools.cache
def fake_files() -> dict[str, bytes]:
    """Every file the registry names, fabricated (a few captions each, text tagged with file and language)."""
    names = {f.name for spec in dl.registry().values() if spec.group == "multi30k" for f in spec.files(spec.splits)}
    out = {}
    for name in sorted(names):
        stem, lang, _ = name.split(".")
        text = "".join(caption(stem, lang, i) + "\n" for i in range(FAKE_LINES[stem]))
        out[name] = gzip.compress(text.encode("utf-8"), mtime=0)
    return out


def fabricated(spec: DatasetSpec) -> DatasetSpec:
    """The registry's spec with the fabricated files' line counts and no checksum (they cannot match upstream's)."""
    def bare(s: Source) -> Source:
        return dataclasses.replace(s, file=RemoteFile(s.file.url, limit=10**6))

    splits = tuple(dataclasses.replace(sp, src=tuple(map(bare, sp.src)), tgt=tuple(map(bare, sp.tgt)),
                                       lines=FAKE_LINES[sp.src[0].file.name.split(".")[0]]) for sp in spec.splits)
    return dataclasses.replace(spec, splits=splits)


# --- the registry ----------------------------------------------------------------------------


@pytest.mark.parametrize("pair", PAIRS)
def test_every_pair_is_registered_by_family_and_pair_and_by_full_name(pair):
    src, tgt = pair.split("-")
    spec = dl.resolve("multi30k", pair)
    assert (spec.src, spec.tgt, spec.group) == (src, tgt, "multi30k")
    assert spec.name == ("multi30k" if pair == "en-de" else f"multi30k-{pair}")
    assert dl.resolve(f"multi30k-{pair}") is spec and dl.resolve(pair=pair.upper(), name="multi30k") is spec
    splits = {s.name: s for s in spec.splits}
    assert set(splits) == expected_splits(pair)
    assert {n for n, s in splits.items() if s.extra} == set(EXTRA) & set(splits)
    for name, split in splits.items():
        stem = STEMS[name]
        assert [s.file.name for s in split.src + split.tgt] == [f"{stem}.{src}.gz", f"{stem}.{tgt}.gz"]
        assert all(s.file.url == multi30k.RAW + s.file.name for s in split.src + split.tgt)
        # every upstream file has its recorded checksum and size: every Multi30k download is verified
        assert all(s.file.sha256 and s.file.size for s in split.src + split.tgt)
    assert [splits[n].lines for n in ("train", "valid", "test")] == [29000, 1014, 1000]


def test_the_family_lists_twelve_pairs_en_de_first():
    assert list(dl.families()["multi30k"]) == ["en-de", "de-en", "en-fr", "fr-en", "en-cs", "cs-en", "de-fr",
                                               "fr-de", "de-cs", "cs-de", "fr-cs", "cs-fr"]
    assert dl.resolve("multi30k").name == "multi30k" and dl.resolve("multi30k-en-de").name == "multi30k"
    infos = {i.name: i for i in dl.list_datasets()}
    for pair in PAIRS:
        info = infos["multi30k" if pair == "en-de" else f"multi30k-{pair}"]
        assert info.langs == pair and info.splits == {"train": 29000, "valid": 1014, "test": 1000}
        assert info.download_bytes is not None and info.size.endswith("MB")
    assert infos["multi30k-cs-fr"].extra_splits == {"test2018": 1071}
    with pytest.raises(InputError, match="multi30k has no en-ru data; choose one of: en-de, de-en, en-fr"):
        dl.resolve("multi30k", "en-ru")


@needs_copy
def test_the_recorded_checksums_are_those_of_the_local_copy():
    for path in sorted(SHARED_M30K.glob("*.gz")):
        data = path.read_bytes()
        assert multi30k.SUMS[path.name] == (hashlib.sha256(data).hexdigest(), len(data)), path.name


# --- downloads -------------------------------------------------------------------------------


@pytest.mark.parametrize("pair", PAIRS)
def test_every_pair_downloads_over_http_with_its_extra_tests(server, tmp_path, pair):  # noqa: F811
    """Through --mirror URL, as `nmt download multi30k --pair PAIR --mirror URL --extra-tests` fetches."""
    src, tgt = pair.split("-")
    base = serve(server, fake_files(), "/m30k/")
    spec = fabricated(dl.resolve("multi30k", pair))
    result = dl.download(spec, tmp_path, mirror=base, extra_tests=True, **FAST)
    wanted = expected_splits(pair)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file() and not p.name.startswith(".")) == sorted(
        ["MANIFEST.json"] + [f"{split}.{lang}" for split in wanted for lang in (src, tgt)])
    for split in wanted:
        stem = STEMS[split]
        for lang in (src, tgt):
            text = (tmp_path / f"{split}.{lang}").read_text(encoding="utf-8")
            assert text.splitlines() == [caption(stem, lang, i) for i in range(FAKE_LINES[stem])]
    assert sorted(result.fetched) == sorted(f"{STEMS[split]}.{lang}.gz" for split in wanted
                                           for lang in (src, tgt))
    manifest = json.loads((tmp_path / "MANIFEST.json").read_text(encoding="utf-8"))
    assert (manifest["dataset"], manifest["family"], manifest["src"], manifest["tgt"]) == (spec.name, "multi30k",
                                                                                          src, tgt)
    assert dl.download(spec, tmp_path, mirror=base, extra_tests=True, **FAST).up_to_date


@needs_copy
@pytest.mark.parametrize("pair", ["en-fr", "fr-en", "en-cs", "cs-en", "de-fr", "fr-de", "de-cs", "cs-de", "fr-cs",
                                  "cs-fr"])
def test_the_real_files_of_every_new_pair_from_a_local_mirror(tmp_path, pair):
    src, tgt = pair.split("-")
    result = dl.download("multi30k", tmp_path, pair=pair, mirror=str(SHARED_M30K))
    assert result.unverified == []
    for split, n in {"train": 29000, "valid": 1014, "test": 1000}.items():
        stem = STANDARD[split]
        for lang in (src, tgt):
            with gzip.open(SHARED_M30K / f"{stem}.{lang}.gz", "rb") as f:
                assert (tmp_path / f"{split}.{lang}").read_bytes() == f.read()
            assert result.written[f"{split}.{lang}"] == n
    manifest = json.loads((tmp_path / "MANIFEST.json").read_text(encoding="utf-8"))
    assert all(s["verified"] for s in manifest["sources"].values()) and len(manifest["sources"]) == 6


@pytest.fixture
def directory_server():
    """A plain HTTP server of the local copy (no Range, as a static web host may be)."""
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(SHARED_M30K))
    handler.log_message = lambda *a, **k: None
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()
    srv.server_close()


@needs_copy
def test_the_real_files_over_http_verified(directory_server, tmp_path):
    result = dl.download("multi30k", tmp_path, pair="cs-fr", mirror=directory_server, **FAST)
    assert sorted(result.fetched) == sorted(f"{stem}.{lang}.gz" for stem in STANDARD.values() for lang in ("cs", "fr"))
    assert result.unverified == [] and result.written == {f"{split}.{lang}": n for split, n in
                                                          {"train": 29000, "valid": 1014, "test": 1000}.items()
                                                          for lang in ("cs", "fr")}


@needs_copy
def test_the_command_downloads_a_pair_and_lists_every_pair(tmp_path):
    r = ok(nmt("download", "multi30k", "--pair", "fr-cs", "--out", tmp_path / "m", "--mirror", SHARED_M30K))
    assert r.stdout == "" and "multi30k-fr-cs: downloaded 6 file(s)" in r.stderr
    written = sorted(p.name for p in (tmp_path / "m").iterdir() if not p.name.startswith(".") and p.is_file())
    assert written == sorted(["MANIFEST.json"] + [f"{split}.{lang}" for split in STANDARD for lang in ("fr", "cs")])
    listing = ok(nmt("download", "--list"))
    for pair in PAIRS[1:]:
        assert f"multi30k-{pair}" in listing.stdout
    assert "multi30k (en-de, de-en, en-fr, fr-en, en-cs, cs-en, de-fr, fr-de, de-cs, cs-de, fr-cs, cs-fr)" in \
        listing.stderr
