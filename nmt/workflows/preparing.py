"""`nmt prepare`'s tokenizer: a model file, or a checkpoint's own (to fine-tune it on new data); the
data is then binarized by nmt.data.dataset.prepare."""

from __future__ import annotations

from pathlib import Path

from nmt.core.files import is_checkpoint_file
from nmt.text.tokenizer import Tokenizer, load_tokenizer


def tokenizer_source(bpe_model: Path) -> Path | Tokenizer:
    """A tokenizer model file as it is, or the tokenizer stored in a checkpoint."""
    if not is_checkpoint_file(bpe_model):
        return bpe_model
    from nmt.model.checkpoint import tokenizer_data  # torch: only for a checkpoint (prepare needs none)

    return load_tokenizer(tokenizer_data(bpe_model), str(bpe_model))
