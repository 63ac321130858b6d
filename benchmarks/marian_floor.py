"""How much faster than transformers' `generate` any fp32 engine could be on this CPU, for an OPUS-MT-size model.

    .venv/bin/python benchmarks/marian_floor.py --work /tmp/marian-speed --sentences 32 --threads 1

The question behind it: can an engine that gives transformers' translations (fp32 weights, the same
products) be 3x faster than `generate`? Each decoding step reads every decoder weight and the output
projection (58,101 x 512) once, whatever the engine: about 207 MB in fp32 for OPUS-MT's size, far more than the
caches. This script measures, on the random OPUS-MT-size model of benchmarks/marian_speed.py (built in --work
the same way when missing):

- transformers' CPU time per chunk of --batch-sizes sentences, with beam 4 and greedy search (as marian_speed.py
  runs it), and the decoding steps each chunk took (the length of the longest output);
- the read floor: one thread's time to read the decoder's weights once (a sum over them, the fastest pass over
  memory torch has), and to multiply them by `beam` rows (`linear`, the products a step needs at least);
- the compute floor: the multiply-adds of every row a step must compute (each sentence's `beam` rows for as many
  steps as its output is long), at the rate of a large fp32 matrix product on one thread.

A step cannot take less than the larger of its two floors, and the encoder, the attention over the cache and
the search are left out (each costs more): `bound` = transformers' time / the floor is more than any fp32
engine can gain. Rounds interleave; medians are reported.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import marian_speed  # noqa: E402  (the same model and the same transformers run)


def timed(fn, repeats: int) -> float:
    """Median CPU seconds of `fn()` over `repeats` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/marian-speed"))
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--beams", type=int, nargs="+", default=[4, 1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--length", type=float, default=12.0)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    folder = args.work / "opus-mt-random-en-de"
    if not folder.is_dir():
        marian_speed.build(folder, args.length)
    hf = marian_speed.Hf(folder)
    decoder = hf.model.model.decoder
    weights = [m.weight for m in decoder.modules() if isinstance(m, torch.nn.Linear)
               # the cross-attention's keys and values are projected once per sentence, not per step
               and not any(m is getattr(layer.encoder_attn, p) for layer in decoder.layers for p in ("k_proj", "v_proj"))]
    weights.append(hf.model.lm_head.weight)
    macs_per_row = sum(w.numel() for w in weights)
    megabytes = sum(w.numel() * w.element_size() for w in weights) / 1e6

    with torch.inference_mode():
        read = timed(lambda: [w.sum() for w in weights], 10)
        products = {beam: timed(lambda b=beam: [torch.nn.functional.linear(torch.randn(b, w.size(1)), w)
                                                for w in weights], 10) for beam in args.beams}
        a, b = torch.randn(512, 512), torch.randn(512, 8192)
        flops_per_s = 2 * 512 * 512 * 8192 / timed(lambda: a @ b, 10)

    source = marian_speed.lines("test", "en", args.sentences)
    rows = []
    for beam in args.beams:
        for size in args.batch_sizes:
            times = []
            for _ in range(args.rounds):
                start, steps, row_steps = time.process_time(), 0, 0
                for i in range(0, len(source), size):
                    chunk = source[i : i + size]
                    with torch.inference_mode():
                        out = hf.model.generate(**hf.tok(chunk, return_tensors="pt", padding=True), num_beams=beam,
                                                early_stopping=True)
                    steps += out.size(1) - 1
                    row_steps += beam * int(((out[:, 1:] != hf.model.config.pad_token_id).sum(1)).sum())
                times.append(time.process_time() - start)
            theirs = statistics.median(times)
            floor = max(steps * min(read, products[beam]), row_steps * 2 * macs_per_row / flops_per_s)
            rows.append((beam, size, theirs, steps, floor))

    print(f"CPU: {marian_speed.cpu_name()}; {args.threads} thread(s); torch {torch.__version__}; "
          f"transformers {__import__('transformers').__version__}; {args.sentences} sentences; CPU seconds, "
          f"median of {args.rounds} rounds (transformers) or 10 (floors)\n")
    print(f"Per decoding step: {megabytes:.0f} MB of fp32 weights, read in {read * 1e3:.1f} ms "
          f"({megabytes / 1e3 / read:.1f} GB/s); multiplied by the beam's rows: "
          + ", ".join(f"beam {b} {t * 1e3:.1f} ms" for b, t in products.items())
          + f"; a large fp32 matrix product runs at {flops_per_s / 1e9:.0f} GFLOP/s\n")
    print("| search | batch | transformers (s) | decoding steps | transformers per step (ms) | floor (s) | bound |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for beam, size, theirs, steps, floor in rows:
        print(f"| {'greedy' if beam == 1 else f'beam {beam}'} | {size} | {theirs:.2f} | {steps} | "
              f"{theirs / steps * 1e3:.1f} | {floor:.2f} | {theirs / floor:.2f}x |")


if __name__ == "__main__":
    main()
