"""What a model was trained on, as checkpoints record it and data stores declare it: the languages, the
vocabulary size and the tokenizer (its kind and sha256). Resuming, fine-tuning, ensembles and averages
compare it, so that models and data that do not fit together are refused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nmt.core.errors import DataError

# The key of a tokenizer's digest for the kinds nmt had before it knew several: the records of older stores
# and checkpoints carry it, and an older nmt reads it. This is the records' format, not the kinds' behaviour:
# every later kind is recorded under "tokenizer" and "tokenizer_sha256", and adding one changes nothing here.
LEGACY_KEYS = {"youtokentome": "bpe_sha256"}


def legacy_identity(kind: str, sha256: str) -> dict[str, str]:
    """The record of a tokenizer under its kind's legacy key (see LEGACY_KEYS); {} for the other kinds."""
    return {LEGACY_KEYS[kind]: sha256} if kind in LEGACY_KEYS else {}


def tokenizer_identity(kind: str, sha256: str) -> dict[str, str]:
    """How a store or checkpoint records a tokenizer. For youtokentome the key nmt has always used
    ("bpe_sha256"), so that older stores and checkpoints still match."""
    return legacy_identity(kind, sha256) or {"tokenizer": kind, "tokenizer_sha256": sha256}


@dataclass(frozen=True)
class DataIdentity:
    """What a checkpoint remembers of its data, to refuse resuming (or fine-tuning, or ensembling) on what
    does not fit: the languages, the vocabulary size and the tokenizer's kind and sha256."""

    src: str
    tgt: str
    vocab_size: int
    tokenizer: str  # its kind: youtokentome or sentencepiece
    tokenizer_sha256: str

    def to_dict(self) -> dict[str, Any]:
        """As stored in checkpoints (a youtokentome digest under the key nmt has always used, bpe_sha256)."""
        return {"src": self.src, "tgt": self.tgt, "vocab_size": self.vocab_size,
                **tokenizer_identity(self.tokenizer, self.tokenizer_sha256)}

    @classmethod
    def from_dict(cls, data: object, where: str) -> DataIdentity:
        """From `to_dict`'s form; DataError naming `where` for anything else."""
        fields = data if isinstance(data, dict) else {}
        legacy = next((kind for kind, key in LEGACY_KEYS.items() if key in fields), None)
        kind = legacy if legacy is not None else fields.get("tokenizer")
        sha = fields[LEGACY_KEYS[legacy]] if legacy is not None else fields.get("tokenizer_sha256")
        found = cls(fields.get("src"), fields.get("tgt"), fields.get("vocab_size"), kind, sha)  # type: ignore[arg-type]
        if not (all(isinstance(v, str) and v for v in (found.src, found.tgt, found.tokenizer, found.tokenizer_sha256))
                and isinstance(found.vocab_size, int) and not isinstance(found.vocab_size, bool)
                and found.vocab_size > 0):
            raise DataError(f"{where}: its record of the data (languages, vocabulary size, tokenizer) is malformed "
                            f"({data!r:.120}); the file is damaged")
        return found

    @property
    def direction(self) -> str:
        return f"{self.src}-{self.tgt}"
