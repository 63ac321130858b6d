"""Download corpora and lay them out for training: the library behind `nmt download`.

Every parallel dataset ends up the same way: `OUT/{train,valid,test}.{SRC,TGT}` named with real
language codes (`train.en`, `train.de`), plain UTF-8 text with one sentence a line, and
`OUT/MANIFEST.json` (sources, checksums, line counts); a monolingual one as `OUT/mono.{SRC,TGT}`.
Raw downloads stay in `OUT/.cache/` so that a re-run fetches nothing. The library never prints
and never exits: it reports through a `ProgressFn` and raises `DownloadError` / `InputError`.

One module per concept:
- `spec`: the data types of a dataset (files, sources, splits); `datasets/`: the datasets, as data;
  `registry`: finding one by name and `--pair`; `listing`: what `--list` shows.
- `fetch`: HTTP with one retry policy, Range resume, stall detection and a size bound; `mirror`:
  `--mirror`, base URLs or local folders, looked in in order; `store`: verified copies in `OUT/.cache/`.
- `archives`: safe tar extraction; `formats`: plain text, WMT's SGML, TSV; `splits`: writing the
  output files (a monolingual dataset's too: `mono.SRC`, `mono.TGT`, deduplicated, held-out sentences
  dropped); `manifest`: MANIFEST.json; `events`: progress; `pipeline`: `download()`, which ties them
  together.
"""

from __future__ import annotations

from nmt.download.archives import safe_extract
from nmt.download.fetch import fetch_url
from nmt.download.listing import DatasetInfo, describe, human_bytes, list_datasets
from nmt.download.manifest import MANIFEST, read_manifest, verify_outputs
from nmt.download.mirror import Mirror
from nmt.download.pipeline import DownloadResult, download, summary
from nmt.download.registry import families, registry, resolve
from nmt.download.spec import (
    DatasetSpec,
    Holdout,
    Mono,
    RemoteFile,
    Source,
    Split,
    check_spec,
    parallel_files,
)
from nmt.download.store import CACHE, file_digests, verify

__all__ = [
    "CACHE", "MANIFEST", "DatasetInfo", "DatasetSpec", "DownloadResult", "Holdout", "Mirror", "Mono", "RemoteFile",
    "Source", "Split", "check_spec", "describe", "download", "families", "fetch_url", "file_digests",
    "human_bytes", "list_datasets", "parallel_files", "read_manifest", "registry", "resolve", "safe_extract",
    "summary", "verify", "verify_outputs",
]
