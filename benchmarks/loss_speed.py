"""Training update time with the fused label-smoothed loss vs plain autograd through log_softmax.

Run by hand (results go to docs/benchmarks.md):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/loss_speed.py --presets multi30k small --rounds 5

One update = forward + loss + backward + Adam on a synthetic batch (`--sentences` x `--len` tokens
each side, vocabulary `--vocab`). The two losses alternate within each round, so both see the same
machine load; the table gives the median seconds per update over the rounds and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import Tensor

from nmt.config import from_preset
from nmt.core.vocab import PAD
from nmt.model.loss import label_smoothed_loss
from nmt.model.transformer import Transformer


def autograd_loss(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """The same loss written with autograd ops (nmt's implementation before the fused one)."""
    log_probs = logits.float().log_softmax(-1)  # (N, V)
    nll = -log_probs.gather(1, target[:, None]).squeeze(1)  # (N,)
    smooth = -log_probs.mean(-1)  # (N,)
    real = target != PAD
    return ((1.0 - epsilon) * nll + epsilon * smooth)[real].sum(), nll[real].sum()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", nargs="+", default=["multi30k", "small"])
    ap.add_argument("--vocab", type=int, default=6000)
    ap.add_argument("--sentences", type=int, default=240)
    ap.add_argument("--len", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); batch {args.sentences} x {args.len} "
          f"target tokens, vocabulary {args.vocab}\n")
    print("| preset | autograd loss s/update | fused loss s/update | speed-up |")
    print("|---|---:|---:|---:|")
    for name in args.presets:
        model_cfg, train_cfg = from_preset(name, {"vocab_size": args.vocab})
        torch.manual_seed(0)
        model = Transformer(model_cfg).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        src = torch.randint(4, args.vocab, (args.sentences, args.len))
        tgt = torch.randint(4, args.vocab, (args.sentences, args.len))

        def update(loss_fn) -> float:
            start = time.perf_counter()
            logits = model(src, tgt)
            loss, _ = loss_fn(logits.flatten(0, 1), tgt.flatten(), train_cfg.label_smoothing)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return time.perf_counter() - start

        update(autograd_loss), update(label_smoothed_loss)  # warm-up
        times = {"autograd": [], "fused": []}
        for _ in range(args.rounds):
            times["autograd"].append(update(autograd_loss))
            times["fused"].append(update(label_smoothed_loss))
        a, f = statistics.median(times["autograd"]), statistics.median(times["fused"])
        print(f"| {name} | {a:.3f} | {f:.3f} | {a / f:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
