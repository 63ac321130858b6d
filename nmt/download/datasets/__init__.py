"""The datasets `nmt download` knows, one module each: data only (URLs, checksums, members, splits).

Adding a dataset is a module here with a `SPECS` tuple of `DatasetSpec`s, added to `ALL`. The
first spec of a family is the one `nmt download FAMILY` gets without `--pair`.
"""

from __future__ import annotations

from nmt.download.datasets import europarl, multi30k, wmt14
from nmt.download.spec import DatasetSpec

ALL: tuple[DatasetSpec, ...] = (*multi30k.SPECS, *wmt14.SPECS, *europarl.SPECS)
