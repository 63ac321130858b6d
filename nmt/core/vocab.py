"""The special symbols every vocabulary of nmt has, in youtokentome's default places.

Defined here, below the tokenizers, so that the model, search and batching layers know them
without importing a tokenizer library.
"""

from __future__ import annotations

from collections.abc import Iterable

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = (PAD, UNK, BOS, EOS)


def cut_at_eos(ids: Iterable[int]) -> list[int]:
    """The ids before the first EOS, without PAD and BOS: what a tokenizer decodes of a model's output."""
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        if i != PAD and i != BOS:
            out.append(i)
    return out
