"""Cross-attention heatmaps: which source pieces each output piece attended to, per layer and head.

The weights come from a teacher-forced pass over the translation the search chose (the same
weights the decoder computed while generating it, without dropout). Plotting needs matplotlib,
an optional extra: `pip install 'nmt-toolkit[plot]'`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import torch
from torch import Tensor

from nmt.core.errors import InputError, ref
from nmt.core.files import atomic_write
from nmt.core.identity import TAG_PIECE
from nmt.core.vocab import BOS, EOS

if TYPE_CHECKING:
    from nmt.model.transformer import Transformer
    from nmt.text.tokenizer import Tokenizer

EOS_LABEL = "</s>"


@dataclass
class AttentionMaps:
    """Cross-attention of one sentence pair."""

    source: list[str]  # S source pieces, EOS included
    target: list[str]  # T output pieces, EOS included
    weights: Tensor  # (L, H, T, S), rows sum to 1

    @property
    def layers(self) -> int:
        return self.weights.size(0)

    @property
    def heads(self) -> int:
        return self.weights.size(1)


@torch.no_grad()
def attention_maps(model: Transformer, tokenizer: Tokenizer, src_ids: list[int], out_ids: list[int]) -> AttentionMaps:
    """Teacher-forced cross-attention of `model` for source ids (EOS included) and output ids (without EOS)."""
    device = next(model.parameters()).device
    model.eval()
    src = torch.tensor([src_ids], dtype=torch.long, device=device)  # (1, S)
    tgt_in = torch.tensor([[BOS] + list(out_ids)], dtype=torch.long, device=device)  # (1, T): predicts out_ids + EOS
    per_layer = model.cross_attention_weights(src, tgt_in)  # L x (1, H, T, S)
    weights = torch.stack([w[0].float().cpu() for w in per_layer])  # (L, H, T, S)

    def labels(ids: list[int]) -> list[str]:
        return [EOS_LABEL if i == EOS else p for i, p in zip(ids, tokenizer.pieces(ids))]

    return AttentionMaps(labels(list(src_ids)), labels(list(out_ids) + [EOS]), weights)


WORD_START = "\u2581"  # youtokentome's word-start mark, "▁"


def word_of_each_piece(pieces: list[str]) -> list[int]:
    """The word (0-based) each piece belongs to; a word starts at a "▁" piece. EOS and a multilingual model's
    target tag (the first piece, >>de<<) get -1: neither is a word of the text."""
    words, word = [], -1
    for i, piece in enumerate(pieces):
        if piece == EOS_LABEL or (i == 0 and TAG_PIECE.fullmatch(piece)):
            words.append(-1)
            continue
        if piece.startswith(WORD_START) or word < 0:
            word += 1
        words.append(word)
    return words


def word_alignment(weights: Tensor, source: list[str], target: list[str]) -> list[tuple[int, int]]:
    """Source-target word pairs from cross-attention weights (T, S): each output piece is aligned to the
    source piece it attends to most (EOS on neither side counts), and pieces map to their words, as
    fairseq's --print-alignment does from attention. Sorted, without repeats."""
    src_words, tgt_words = word_of_each_piece(source), word_of_each_piece(target)
    real_src = torch.tensor([w >= 0 for w in src_words])
    if not real_src.any():
        return []
    best = weights.masked_fill(~real_src, float("-inf")).argmax(-1).tolist()  # (T,)
    return sorted({(src_words[j], tgt_words[i]) for i, j in enumerate(best) if tgt_words[i] >= 0})


def alignments(maps: AttentionMaps, layer: int = -1) -> list[tuple[int, int]]:
    """Word alignment of one sentence pair from `layer`'s cross-attention, averaged over its heads."""
    return word_alignment(maps.weights[layer].mean(0), maps.source, maps.target)


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    """Pharaoh format: "0-0 1-2 ..." (source word - target word, 0-based)."""
    return " ".join(f"{s}-{t}" for s, t in pairs)


def require_matplotlib() -> Any:
    """matplotlib.pyplot with a file-only backend; a one-line error when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        raise InputError(f"{ref('attention')} needs matplotlib, which is not installed; "
                         "install it with: pip install 'nmt-toolkit[plot]' (or pip install matplotlib)") from None
    matplotlib.use("Agg")  # files only: no display needed, works over ssh and in CI
    import matplotlib.pyplot as plt
    return plt


def plot_layer(maps: AttentionMaps, layer: int, path: Path, title: str = "") -> Path:
    """One PNG with a heatmap per head of `layer`: source pieces on x, output pieces on y."""
    plt = require_matplotlib()
    heads = maps.heads
    cols = min(heads, 4)
    rows = math.ceil(heads / cols)
    S, T = len(maps.source), len(maps.target)
    cell = 0.28  # inches per token: labels stay readable for sentences of ~40 pieces
    fig, axes = plt.subplots(rows, cols, squeeze=False,
                             figsize=(cols * max(3.0, S * cell + 1.0), rows * max(3.0, T * cell + 1.0)))
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= heads:
            ax.axis("off")
            continue
        ax.imshow(maps.weights[layer, h].numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(S), maps.source, rotation=90, fontsize=8)
        ax.set_yticks(range(T), maps.target, fontsize=8)
        ax.set_title(f"layer {layer + 1}, head {h + 1}", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return path


def write_heatmaps(maps: AttentionMaps, out_dir: Path, line: int, sentence: Optional[int] = None) -> list[Path]:
    """`out_dir`/line{N:05d}.layer{L}.png for every decoder layer (line{N:05d}.s{S}.layer{L}.png for sentence S
    of a line that holds several); N, S and L count from 1."""
    out_dir.mkdir(parents=True, exist_ok=True)
    part = "" if sentence is None else f".s{sentence + 1}"
    where = f"line {line + 1}" + ("" if sentence is None else f", sentence {sentence + 1}")
    return [plot_layer(maps, layer, out_dir / f"line{line + 1:05d}{part}.layer{layer + 1}.png",
                       title=f"{where}: cross-attention, layer {layer + 1}")
            for layer in range(maps.layers)]
