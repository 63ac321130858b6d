"""Translation speed of an imported Marian (OPUS-MT) model: nmt against transformers' `generate`, on the CPU.

    .venv/bin/python benchmarks/marian_speed.py --work /tmp/marian-speed --threads 1 --rounds 3 \\
        --engines torch ctranslate2 --precisions fp32 int8

No model is downloaded: a random Marian model of OPUS-MT's size (d_model 512, 6+6 layers, 8 heads, d_ff 2048,
swish, scaled embeddings, a vocabulary of 58,101 pieces) is built with transformers in --work (once; kept for
later runs), with SentencePiece models learned on the bundled sample corpus, a vocab.json of their pieces padded
to OPUS-MT's size with pieces no text produces, and OPUS-MT's generation config. A random model's translations
loop to the length limit, so EOS is made likelier along the positions (as in tests/test_import_marian.py): the
translations end after about --length tokens, as a real model's of these sentences would. The model is then
imported with `nmt import marian`. nmt runs on each of --engines (the CTranslate2 engine converts the imported
checkpoint on first use, as `nmt translate --engine ctranslate2` does).

Both engines translate the first --sentences lines of the sample corpus's test set, in chunks of --batch-sizes
lines (one `Translator.translate_chunk` call, one `generate` call per chunk), with beam 4 and greedy search;
timed: tokenisation, search and detokenisation, model loading excluded. transformers runs OPUS-MT's generation
config (bad_words_ids, renormalize_logits, forced EOS at max_length 512) with early_stopping=True, nmt's rule
(a sentence's search ends when `beam` hypotheses have ended; transformers' default keeps searching for better
ones), so that both do the same work and give the same translations, which the table checks. Rounds interleave
the engines; the table gives the median time of the rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLE = ROOT / "nmt" / "sample_data"
VOCAB = 58101  # OPUS-MT en-de's
ARCHITECTURE = dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                    decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, max_position_embeddings=512,
                    activation_function="swish", scale_embedding=True, dropout=0.1)


def lines(split: str, lang: str, n: int | None = None) -> list[str]:
    return (SAMPLE / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()[:n]


def spm_model(text: list[str], size: int) -> bytes:
    import sentencepiece as spm

    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=buffer, vocab_size=size,
                                   hard_vocab_limit=False, num_threads=1, character_coverage=1.0, minloglevel=2)
    return buffer.getvalue()


def build(folder: Path, length: float, seed: int = 0) -> None:
    """A random OPUS-MT-size Marian folder (see the module's docstring)."""
    import sentencepiece as spm
    import torch
    import transformers

    folder.mkdir(parents=True)
    source, target = spm_model(lines("train", "en"), 8000), spm_model(lines("train", "de"), 8000)
    pieces: list[str] = []
    for model in (source, target):
        sp = spm.SentencePieceProcessor(model_proto=model)
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                   if not (sp.is_control(i) or sp.is_unknown(i)) and sp.id_to_piece(i) not in pieces]
    real = len(pieces)
    pieces += [f"\u2581unseen{i}" for i in range(VOCAB - 3 - real)]
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}, "<pad>": VOCAB - 1}
    (folder / "source.spm").write_bytes(source)
    (folder / "target.spm").write_bytes(target)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de"}))
    pad = VOCAB - 1
    config = transformers.MarianConfig(vocab_size=VOCAB, decoder_vocab_size=VOCAB, pad_token_id=pad, eos_token_id=0,
                                       decoder_start_token_id=pad, forced_eos_token_id=0, **ARCHITECTURE)
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    tok = transformers.MarianTokenizer(*(str(folder / name) for name in ("source.spm", "target.spm", "vocab.json")))
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.5)
        model.final_logits_bias[0, real + 2 : pad] -= 4.0  # the padding pieces: rare, as rare pieces are
        # EOS likelier along the positions: its (tied) embedding row along the direction of the decoder's final
        # states that best predicts the position (least squares), its bias such that it wins near `length`.
        batch = tok(lines("train", "en", 512), text_target=lines("train", "de", 512), return_tensors="pt",
                    padding=True)
        states = model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             decoder_input_ids=model.prepare_decoder_input_ids_from_labels(batch["labels"]))[0]
        real = batch["labels"] != pad
        x = torch.cat([states[real], torch.ones(int(real.sum()), 1)], dim=1)
        positions = torch.arange(real.size(1), dtype=torch.float32).expand_as(real)[real]
        w = torch.linalg.lstsq(x, positions[:, None]).solution[:, 0]
        model.model.shared.weight[0] = 2.0 * w[:-1]
        model.final_logits_bias[0, 0] = 2.0 * (w[-1] - length)
    model.save_pretrained(folder)
    (folder / "generation_config.json").write_text(json.dumps({  # OPUS-MT's
        "bad_words_ids": [[pad]], "decoder_start_token_id": pad, "eos_token_id": 0, "forced_eos_token_id": 0,
        "max_length": 512, "num_beams": 4, "pad_token_id": pad, "renormalize_logits": True}))


class Hf:
    name = "transformers"

    def __init__(self, folder: Path):
        import transformers

        self.model = transformers.MarianMTModel.from_pretrained(folder).eval()
        self.tok = transformers.MarianTokenizer.from_pretrained(folder)

    def translate(self, chunk: list[str], beam: int) -> list[str]:
        import torch

        with torch.inference_mode():
            out = self.model.generate(**self.tok(chunk, return_tensors="pt", padding=True), num_beams=beam,
                                      early_stopping=True)
        return self.tok.batch_decode(out, skip_special_tokens=True, use_source_tokenizer=False)


class Nmt:
    """nmt's engine as `nmt translate --engine ENGINE --precision PRECISION --threads N` opens it."""

    def __init__(self, model: Path, engine: str, precision: str, threads: int):
        from nmt.config import InferenceConfig, Overrides, SearchConfig
        from nmt.engines.choice import open_engine

        self.name = f"nmt-{precision}" if engine == "torch" else f"nmt-{engine}-{precision}"
        self.translator = open_engine([model], Overrides(SearchConfig), Overrides(InferenceConfig, {
            "engine": engine, "precision": precision, "threads": threads}))

    def translate(self, chunk: list[str], beam: int) -> list[str]:
        """With the model's own search defaults (transformers', from the folder) but `beam`."""
        search = dataclasses.replace(self.translator.search_cfg, beam=beam)
        return [t.text for t in self.translator.with_search(search).translate_chunk(chunk)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/marian-speed"), help="where the model is built")
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--beams", type=int, nargs="+", default=[4, 1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--length", type=float, default=12.0, help="about where the random model's outputs end")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "int8"],
                        help="nmt's precisions (bf16: on a CPU with native bf16; torch only)")
    parser.add_argument("--engines", nargs="+", default=["torch", "ctranslate2"], choices=["torch", "ctranslate2"],
                        help="nmt's engines (--engine); each runs every precision it has")
    args = parser.parse_args()

    import torch

    from nmt.importers.marian import import_marian
    from nmt.model import checkpoint

    torch.set_num_threads(args.threads)
    folder, model = args.work / "opus-mt-random-en-de", args.work / "opus-mt-random-en-de.pt"
    if not folder.is_dir():
        print(f"building {folder} ...", file=sys.stderr)
        build(folder, args.length)
    if not model.is_file():
        checkpoint.save(model, import_marian(folder).checkpoint)
    engines = [*(Nmt(model, e, p, args.threads) for e in args.engines for p in args.precisions
                 if not (e == "ctranslate2" and p == "bf16")), Hf(folder)]  # CTranslate2's CPU build: no bf16
    source = lines("test", "en", args.sentences)
    runs = [(beam, size) for beam in args.beams for size in args.batch_sizes]
    times: dict[tuple, list[float]] = {(e.name, *run): [] for e in engines for run in runs}
    outputs: dict[tuple, list[str]] = {}
    for r in range(args.rounds):
        for beam, size in runs:
            for engine in engines:
                start = time.process_time()
                out = [t for i in range(0, len(source), size) for t in engine.translate(source[i : i + size], beam)]
                times[(engine.name, beam, size)].append(time.process_time() - start)
                outputs[(engine.name, beam, size)] = out
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    lengths = {beam: [len(t.hypotheses[0][1].tokens) for t in engines[0].translator.with_search(dataclasses.replace(
        engines[0].translator.search_cfg, beam=beam)).translate_chunk(source)] for beam in args.beams}
    print(f"CPU: {cpu_name()}; {args.threads} thread(s); torch {torch.__version__}; "
          f"transformers {__import__('transformers').__version__}; {args.sentences} sentences, "
          f"{statistics.mean(lengths[args.beams[0]]):.1f} tokens per translation; CPU seconds, median of "
          f"{args.rounds} rounds; same: translations identical to transformers'\n")
    nmts = [e.name for e in engines[:-1]]
    print("| search | batch | transformers (s) | " + " | ".join(f"{n} (s) | faster | same" for n in nmts) + " |")
    print("|---|---|---|" + "---|---|---|" * len(nmts))
    for beam, size in runs:
        theirs = statistics.median(times[("transformers", beam, size)])
        cells = []
        for name in nmts:
            ours = statistics.median(times[(name, beam, size)])
            a, b = outputs[(name, beam, size)], outputs[("transformers", beam, size)]
            cells.append(f"{ours:.2f} | {theirs / ours:.2f}x | {sum(x == y for x, y in zip(a, b))}/{len(a)}")
        print(f"| {'greedy' if beam == 1 else f'beam {beam}'} | {size} | {theirs:.2f} | " + " | ".join(cells) + " |")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
