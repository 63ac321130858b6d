"""Training throughput (target tokens/s) of the presets, next to the machine's arithmetic limit.

Run by hand (results go to docs/benchmarks.md):

    .venv/bin/python benchmarks/train_throughput.py --presets tiny small base --vocab 8000 --len 16 --steps 5

For each preset: one optimiser update = forward + backward + Adam over a synthetic batch of
`--tokens` target tokens (sentences of `--len` tokens each side), timed over `--steps` updates after
one warm-up. The arithmetic limit is measured on the same machine as the fp32 matmul rate of a large
square `torch.mm`, and the model's FLOPs per target token are counted from its matmul shapes
(3x the forward pass for training), so `achieved / limit` is the model FLOPs utilisation (MFU).

One process, fp32, no gradient all-reduce: `nmt train --gpus N` / `--nproc N` / torchrun runs N such
processes, each on its share of an update's batches, plus one gradient all-reduce per update.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from nmt.config import from_preset
from nmt.model.loss import label_smoothed_loss
from nmt.model.transformer import Transformer, count_parameters


def matmul_flops(n: int = 2048, repeat: int = 5, device: str = "cpu") -> float:
    """Sustained fp32 FLOP/s of an n x n matmul: the practical arithmetic limit of this machine."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    torch.mm(a, b)
    start = time.perf_counter()
    for _ in range(repeat):
        torch.mm(a, b)
    if device == "cuda":
        torch.cuda.synchronize()
    return 2 * n ** 3 * repeat / (time.perf_counter() - start)


def training_flops_per_target_token(d: int, d_ff: int, enc: int, dec: int, vocab: int, S: int, T: int) -> float:
    """Matmul FLOPs of one training step (3x forward) per target token, for S source and T target tokens."""
    enc_per_src = enc * (2 * (4 * d * d + 2 * d * d_ff) + 2 * 2 * S * d)
    dec_per_tgt = dec * (2 * (6 * d * d + 2 * d * d_ff) + 2 * 2 * T * d + 2 * 2 * S * d) + 2 * d * vocab
    cross_kv_per_src = dec * 2 * (2 * d * d)
    forward = S * (enc_per_src + cross_kv_per_src) + T * dec_per_tgt
    return 3 * forward / T


def bench_preset(name: str, vocab: int, length: int, tokens: int, steps: int, device: str) -> dict:
    model_cfg, train_cfg = from_preset(name, {"vocab_size": vocab}, {})
    torch.manual_seed(0)
    model = Transformer(model_cfg).to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    B = max(1, tokens // length)
    src = torch.randint(4, vocab, (B, length), device=device)
    tgt = torch.randint(4, vocab, (B, length + 1), device=device)

    def update() -> None:
        logits = model(src, tgt[:, :-1])
        loss, _ = label_smoothed_loss(logits.flatten(0, 1), tgt[:, 1:].flatten(), 0.1)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    update()  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        update()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / steps
    tok_s = B * length / seconds
    flops = training_flops_per_target_token(model_cfg.d_model, model_cfg.d_ff, model_cfg.encoder_layers,
                                            model_cfg.decoder_layers, vocab, length, length)
    return {"preset": name, "parameters": count_parameters(model), "batch": f"{B}x{length}",
            "seconds_per_update": round(seconds, 4), "target_tokens_per_s": round(tok_s),
            "gflop_per_target_token": round(flops / 1e9, 4), "achieved_gflops": round(tok_s * flops / 1e9, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["tiny", "small", "base"])
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--len", type=int, default=16, dest="length", help="tokens per sentence, each side")
    parser.add_argument("--tokens", type=int, default=4096, help="target tokens per update")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    limit = matmul_flops(device=args.device)
    print(f"# {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}, "
          f"device {args.device}")
    print(f"# fp32 matmul limit (2048^3 mm): {limit / 1e9:.1f} GFLOP/s")
    print("| preset | parameters | batch | s/update | target tok/s | GFLOP/token | achieved GFLOP/s | MFU | tok/s at limit |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.presets:
        r = bench_preset(name, args.vocab, args.length, args.tokens, args.steps, args.device)
        mfu = r["achieved_gflops"] * 1e9 / limit
        at_limit = limit / (r["gflop_per_target_token"] * 1e9)
        print(f"| {name} | {r['parameters']:,} | {r['batch']} | {r['seconds_per_update']:.3f} | {r['target_tokens_per_s']:,} | "
              f"{r['gflop_per_target_token']:.4f} | {r['achieved_gflops']:.1f} | {mfu:.0%} | {at_limit:,.0f} |")
        print(json.dumps({**r, "limit_gflops": round(limit / 1e9, 1), "mfu": round(mfu, 3)}), file=__import__("sys").stderr)


if __name__ == "__main__":
    main()
