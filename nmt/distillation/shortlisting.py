"""`nmt shortlist`: a vocabulary shortlist learnt from the data a model was trained on (`cooccurrence`), measured on
its valid split and attached to a copy of the checkpoint (`nmt.model.shortlist`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmt.core.errors import ConfigError, ref
from nmt.core.files import is_checkpoint_file, same_file
from nmt.core.outputs import claim_file
from nmt.data.dataset import ParallelDataset, data_identity
from nmt.distillation.cooccurrence import NONE, learn_shortlist
from nmt.engines.ct2_export import ctranslate2_vocabulary, holds_space
from nmt.model import checkpoint
from nmt.model.shortlist import Shortlist
from nmt.text.tags import with_tags
from nmt.text.tokenizer import load_tokenizer


def check_fits(ckpt: checkpoint.Checkpoint, model: Path, data: Path) -> None:
    """ConfigError unless the store `data` is the model's: its tokenizer (kind and sha256), vocabulary and
    languages, as fine-tuning checks them."""
    identity = data_identity(data)
    if (ckpt.data.tokenizer, ckpt.data.tokenizer_sha256) != (identity.tokenizer, identity.tokenizer_sha256):
        raise ConfigError(f"{data} and {model} use different tokenizers (vocabularies); learn the shortlist from "
                          f"data prepared with the model's: nmt prepare --bpe {model} ...")
    if (ckpt.data.directions, ckpt.data.tags, ckpt.data.vocab_size) != (identity.directions, identity.tags,
                                                                         identity.vocab_size):
        raise ConfigError(f"{data} holds {identity.direction} data, {model} translates {ckpt.data.direction}; learn "
                          "the shortlist from the model's own languages")


def without_spaced_tokens(table: np.ndarray, frequent: np.ndarray, vocab: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The table and frequent ids without the tokens whose name holds white space: CTranslate2's vmap.txt cannot
    name them, and both engines must restrict alike."""
    spaced = np.array([holds_space(token) for token in vocab] + [False])  # [-1]: NONE
    table = np.where(spaced[table], NONE, table)
    table[spaced[:-1]] = NONE
    order = np.argsort(table == NONE, axis=1, kind="stable")  # each row's ids first, in their order
    return np.take_along_axis(table, order, axis=1), frequent[~spaced[frequent]]


def coverage(shortlist: Shortlist, data: Path) -> dict[str, Any]:
    """On the valid split of `data`: the fraction of reference target tokens inside their sentence's candidates,
    and the candidates per sentence (the output layer's rows); None where the store has no valid split."""
    meta = ParallelDataset(data, "train").meta
    if "valid" not in meta["splits"]:
        return {"coverage": None, "candidates_per_sentence": None}
    valid = ParallelDataset(data, "valid")
    inside = total = sizes = 0
    for i in range(len(valid)):
        src, tgt = (torch.from_numpy(side.astype(np.int64)) for side in valid[i])
        allowed = shortlist.candidates(src)
        inside += int(torch.isin(tgt, allowed).sum())
        total += tgt.numel()
        sizes += allowed.numel()
    return {"coverage": round(inside / max(total, 1), 4),
            "candidates_per_sentence": round(sizes / max(len(valid), 1), 1)}


def attach_shortlist(model: Path, data: Path, out: Path, top: int = 50, frequent: int = 100) -> dict[str, Any]:
    """Write `out`: the checkpoint `model` with the shortlist learnt from the store `data` (each source token's
    `top` likeliest targets and the `frequent` most frequent ones); returns the report `nmt shortlist` prints."""
    if same_file(model, out):
        raise ConfigError(f"{ref('out')} {out} is {ref('model')}: write the checkpoint with its shortlist to "
                          "another file")
    claim_file(out, ref("out"), is_checkpoint_file, "a checkpoint")  # (a store's train.bin, say)
    ckpt = checkpoint.load(model)
    check_fits(ckpt, model, data)
    table, always = learn_shortlist(ParallelDataset(data, "train"), top, frequent)
    vocab = ctranslate2_vocabulary(with_tags(load_tokenizer(ckpt.tokenizer, str(model)), ckpt.data))
    table, always = without_spaced_tokens(table, always, vocab)
    shortlist = Shortlist(torch.from_numpy(table), torch.from_numpy(always))
    checkpoint.save(out, dataclasses.replace(ckpt, shortlist=shortlist))
    rows = (table != NONE).sum(1)
    return {"out": str(out), "top": int(table.shape[1]), "frequent": int(always.size),
            "targets_per_source": round(float(rows[rows > 0].mean()) if rows.any() else 0.0, 1),
            "sources": int((rows > 0).sum()), **coverage(shortlist, data)}
