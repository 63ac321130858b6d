"""A vocabulary shortlist: the target tokens a model may output for the source tokens of a batch, as a checkpoint
stores it (`nmt shortlist` learns it; CTranslate2 calls the same restriction a vocabulary map, vmap.txt).

For each source id a row of up to K target ids, and F frequent target ids (the specials among them) that are
always allowed. A batch may output the union of the frequent ids and the rows of every id of its sources,
the union over the whole batch, as CTranslate2 takes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from nmt.core.errors import CheckpointError
from nmt.core.vocab import SPECIALS

NONE = -1  # a row's unused places


@dataclass(eq=False)  # tensors: compare their contents, not the objects
class Shortlist:
    """table (V, K) int32: row s holds the target ids allowed when source id s is in a batch, NONE after them;
    frequent (F,) int32: the target ids always allowed, the specials first."""

    table: Tensor
    frequent: Tensor

    @property
    def top(self) -> int:
        return int(self.table.size(1))

    def rows(self) -> list[list[int]]:
        """Each source id's allowed target ids (empty for an id without a row)."""
        return [[t for t in row if t != NONE] for row in self.table.tolist()]

    def candidates(self, sources: Tensor) -> Tensor:
        """The sorted target ids a batch may output: the frequent ids and the rows of every id in `sources`
        (any shape of ids; PAD and EOS have empty rows, so padding adds nothing). (C,) long"""
        found = self.table[sources.reshape(-1).long().cpu()].reshape(-1)
        ids = torch.cat([self.frequent, found[found != NONE]]).long()
        unique: Tensor = torch.unique(ids)  # sorted, as CTranslate2 orders its candidates
        return unique

    def to_payload(self) -> dict[str, Any]:
        return {"table": self.table, "frequent": self.frequent}

    @classmethod
    def from_payload(cls, data: object, vocab_size: int, path: Path | str) -> Shortlist:
        """The shortlist a checkpoint stores, checked against its model's `vocab_size`; CheckpointError otherwise."""
        def bad(why: str) -> CheckpointError:
            return CheckpointError(f"{path}: its vocabulary shortlist is malformed ({why}); attach one again with "
                                   "`nmt shortlist`")

        if not (isinstance(data, dict) and set(data) == {"table", "frequent"}):
            raise bad(f"not a table and frequent ids: {data!r:.60}")
        table, frequent = data["table"], data["frequent"]
        for name, value, dims in (("table", table, 2), ("frequent", frequent, 1)):
            if not (isinstance(value, Tensor) and value.dim() == dims and value.dtype == torch.int32):
                raise bad(f"its {name} is not a {dims}-d int32 tensor")
        if table.size(0) != vocab_size:
            raise bad(f"{table.size(0)} rows for a vocabulary of {vocab_size}")
        if table.numel() and not (int(table.min()) >= NONE and int(table.max()) < vocab_size):
            raise bad("a target id outside the vocabulary")
        if (table[list(SPECIALS)] != NONE).any():
            raise bad("a row for a special token")
        if not (frequent.numel() and int(frequent.min()) >= 0 and int(frequent.max()) < vocab_size
                and set(SPECIALS) <= set(frequent.tolist())):
            raise bad("frequent ids outside the vocabulary, or without the special tokens")
        return cls(table, frequent)
