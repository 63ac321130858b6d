"""Target-language tags: the token put first in every source of a multilingual model to ask for a target.

A tag is an id, never text: `nmt prepare --pair en-de --pair en-fr` gives each target language an id after the
subword model's (a youtokentome model of 8,000 pieces: >>de<< 8000, >>fr<< 8001), and an imported OPUS-MT model
has its `>>fra<<` pieces in its vocabulary already. So no input text can become a tag (a user's ">>fr<<" is
translated as text), and the subword model stays the one `nmt bpe` wrote. The model's record of its languages
(`nmt.core.identity.DataIdentity`: pairs, tags) says which id asks for which target.

A model trained on tagged synthetic pairs (`nmt prepare --synthetic`, tagged back-translation) has one more id of
the same kind, after the target tags: the synthetic tag, put first in the sources of its synthetic pairs, named
`<BT>` where a token needs a name, and never put in a source to translate.

`Tagged` is the tokenizer of such a model as the engines see it: the model's whole vocabulary (the tags' pieces
named as OPUS-MT writes them, `>>de<<`), decoding that drops tags (a model may emit one; it is never text).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Optional

from nmt.core.identity import SYNTHETIC_PIECE, DataIdentity, tag_piece
from nmt.text.tokenizer import Seed, Tokenizer


class Tagged:
    """A tokenizer and the tags of a model (`Tokenizer`'s interface): `vocab_size` counts the tags after the
    tokenizer's ids, `decode` leaves every tag out, `pieces` and `vocab` name them (its target languages' tags, and
    its `synthetic` tag where it has one)."""

    def __init__(self, inner: Tokenizer, tags: Sequence[tuple[str, int]], synthetic: Optional[int] = None):
        self.inner = inner
        self.kind, self.name = inner.kind, inner.name
        self.tag_ids = {i: tag_piece(lang) for lang, i in tags}  # id -> its piece
        if synthetic is not None:
            self.tag_ids[synthetic] = SYNTHETIC_PIECE
        self.vocab_size = max(inner.vocab_size, *(i + 1 for i in self.tag_ids))

    def encode(self, lines: Sequence[str], side: str = "source", threads: int = -1, dropout: float = 0.0,
               seed: Seed = 0) -> list[list[int]]:
        """The subword model's ids (a tag is never text)."""
        return self.inner.encode(lines, side, threads, dropout, seed)

    def decode(self, ids: Iterable[Iterable[int]], side: str = "target") -> list[str]:
        """Text of each sequence, its tags left out."""
        return self.inner.decode([[i for i in seq if int(i) not in self.tag_ids] for seq in ids], side)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        ids = [int(i) for i in ids]
        inner = iter(self.inner.pieces([i for i in ids if i not in self.tag_ids]))
        return [self.tag_ids[i] if i in self.tag_ids else next(inner) for i in ids]

    def vocab(self) -> list[str]:
        pieces = self.inner.vocab()
        pieces += [""] * (self.vocab_size - len(pieces))
        for i, piece in self.tag_ids.items():
            pieces[i] = piece
        return pieces

    def to_data(self) -> dict[str, Any]:
        """The subword model's data: the tags are the model's record of its languages, not the tokenizer's."""
        return self.inner.to_data()


def with_tags(tokenizer: Tokenizer, data: DataIdentity) -> Tokenizer:
    """`tokenizer` as a model of `data` sees it: `Tagged` where the model has target-language tags or a synthetic
    tag."""
    if data.tags or data.synthetic is not None:
        return Tagged(tokenizer, data.tags, data.synthetic)
    return tokenizer
