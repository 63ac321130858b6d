"""Translation of many lines: streaming chunks, length-sorted batches, order restored, one output per input."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Optional

import torch

from nmt import checkpoint
from nmt.bpe import Tokenizer
from nmt.errors import ConfigError
from nmt.progress import Progress, ProgressFn, ignore
from nmt.search import LENPEN_TYPES, Hypothesis, SearchConfig, search
from nmt.vocab import EOS, PAD


@dataclass
class Translation:
    text: str
    hypotheses: list[tuple[str, Hypothesis]]  # (text, hypothesis), best first; empty for an empty input
    source: str = ""  # the input line


def check_search_config(cfg: SearchConfig) -> SearchConfig:
    if cfg.beam < 1:
        raise ConfigError(f"--beam must be at least 1, got {cfg.beam}")
    if not 1 <= cfg.nbest <= cfg.beam:
        raise ConfigError(f"--nbest {cfg.nbest} must be between 1 and --beam {cfg.beam}")
    if cfg.lenpen_type not in LENPEN_TYPES:
        raise ConfigError(f"--lenpen-type {cfg.lenpen_type!r}: use one of {', '.join(LENPEN_TYPES)}")
    if cfg.max_len_a < 0 or cfg.max_len_b < 0:
        raise ConfigError("--max-len-a and --max-len-b must not be negative")
    return cfg


PRECISIONS = ("fp32", "fp16", "bf16", "int8")


def check_precision(precision: str, device: torch.device) -> None:
    """fp16/bf16 run on CUDA, int8 (dynamic quantisation) on the CPU; fp32 anywhere."""
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    if precision in ("fp16", "bf16") and device.type != "cuda":
        raise ConfigError(f"--precision {precision} needs a GPU (--gpus 1); on the CPU use --int8 or fp32")
    if precision == "int8" and device.type != "cpu":
        raise ConfigError("--int8 (dynamic int8 quantisation) runs on the CPU only; on a GPU use --precision fp16 or bf16")
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        raise ConfigError("--precision bf16: this GPU does not support bfloat16; use --precision fp16")


def prepare_model(model, precision: str = "fp32", device: str | torch.device = "cpu", int8_output: bool = True,
                  pack: bool = True):
    """Move a model (in eval mode) to `device` and make it ready for inference in `precision`.

    fp32 on the CPU: the linear layers and the tied output projection get oneDNN pre-packed weights
    (`PackedLinear`, same function, faster matrix products) when torch has oneDNN and `pack`.
    int8: dynamic quantisation of every nn.Linear (weights int8 per output channel, activations
    quantised on the fly), and, with `int8_output`, of the tied output projection too (through an
    int8 copy of the embedding table; the embedding lookups stay fp32).
    fp16 / bf16 (CUDA): the whole model in that precision; log-probabilities and scores stay fp32.
    The model is for inference only afterwards.
    """
    device = torch.device(device)
    check_precision(precision, device)
    model = model.to(device).eval()
    if precision == "fp16":
        model = model.half()
    elif precision == "bf16":
        model = model.to(torch.bfloat16)
    elif precision == "int8":
        model = quantize_int8(model, output=int8_output)
    elif device.type == "cpu" and pack and onednn_available():
        model.use_output_projection()
        replace_linears(model, PackedLinear.from_linear)
    return model


def onednn_available() -> bool:
    """Whether this torch can run `PackedLinear` (oneDNN pre-packed fp32 linear layers)."""
    try:
        return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


class PackedLinear(torch.nn.Module):
    """`nn.Linear` for CPU inference with its weight pre-packed in oneDNN's blocked layout.

    The same function (fp32, results equal to rounding); faster because oneDNN's matrix product with a
    pre-packed weight runs about twice as fast as torch's default BLAS path on the CPUs we measured
    (docs/benchmarks-translate.md). No autograd, no state dict entries: build it from a trained layer.
    """

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None):
        super().__init__()
        self.in_features, self.out_features = weight.size(1), weight.size(0)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().float().contiguous())
        self.bias = None if bias is None else bias.detach().float().contiguous()

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> "PackedLinear":
        return cls(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def replace_linears(module: torch.nn.Module, make) -> None:
    """Replace every nn.Linear below `module` (in place) by `make(linear)`."""
    replace_modules(module, torch.nn.Linear, make)


def replace_modules(module: torch.nn.Module, kind: type, make) -> None:
    """Replace every module of exactly type `kind` below `module` (in place) by `make(it)`."""
    for name, child in module.named_children():
        if type(child) is kind:
            setattr(module, name, make(child))
        else:
            replace_modules(child, kind, make)


def int8_engines() -> tuple[str, str]:
    """The quantised-kernel backends for --int8: (output projection, other linear layers).

    Measured on an AVX-512 VNNI CPU (docs/benchmarks-translate.md): oneDNN is fastest for the wide
    output projection (d_model x vocabulary), fbgemm ("x86") for the d_model-sized layers at the
    batch sizes of decoding. Either falls back to the other when this torch lacks it.
    """
    engines = torch.backends.quantized.supported_engines
    have = [e for e in ("onednn", "x86", "fbgemm") if e in engines]
    if not have:
        raise ConfigError("--int8: this torch build has no x86 int8 kernels (onednn/fbgemm); translate without --int8")
    small = next(e for e in ("x86", "fbgemm", "onednn") if e in have)
    return have[0], small


def quantize_int8(model, output: bool = True):
    """Dynamic int8 quantisation (torch.ao.quantization.quantize_dynamic) of the linear layers, in place."""
    import warnings

    from torch import nn

    try:
        import torch.ao.nn.quantized.dynamic as nnqd
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError:  # a torch without eager-mode quantisation
        raise ConfigError(f"--int8: this torch ({torch.__version__}) has no dynamic quantisation; "
                          "translate without --int8") from None
    wide, small = int8_engines()
    before = torch.backends.quantized.engine
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        try:  # the packed weights keep the backend they were made with
            if output:
                model.use_output_projection()
                torch.backends.quantized.engine = wide
                model.output_proj.qconfig = per_channel_dynamic_qconfig
                model.output_proj = nnqd.Linear.from_float(model.output_proj)
            torch.backends.quantized.engine = small
            model = quantize_dynamic(model, {nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
        finally:
            torch.backends.quantized.engine = before
    replace_modules(model, nnqd.Linear, Int8Linear.from_quantized)  # the output projection too
    return model


class Int8Linear(torch.nn.Module):
    """A dynamically quantised linear layer (weights int8, activations quantised per call), calling the
    kernel directly: torch's own module goes through Python-level checks on every call that cost
    as much as a small layer's arithmetic during decoding."""

    def __init__(self, packed, in_features: int, out_features: int):
        super().__init__()
        self.packed, self.in_features, self.out_features = packed, in_features, out_features
        overload = torch.ops.quantized.linear_dynamic.default
        self.op = getattr(overload, "_op", overload)  # the C++ callable, past the Python-level checks

    @classmethod
    def from_quantized(cls, module) -> "Int8Linear":
        return cls(module._packed_params._packed_params, module.in_features, module.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x, self.packed, True)  # reduce_range=True, as torch's module (quantisation version 4)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


class Translator:
    """A checkpoint made ready to translate: model, tokenizer and search settings.

    `precision`: fp32; fp16 or bf16 on CUDA; int8 on the CPU. `pack`: oneDNN pre-packed fp32 weights
    on the CPU (see `prepare_model`).
    """

    def __init__(self, model_path: Path, search_cfg: SearchConfig = SearchConfig(), device: str = "cpu",
                 max_tokens: int = 4096, max_sentences: int = 128, progress: ProgressFn = ignore,
                 precision: str = "fp32", pack: bool = True):
        self.search_cfg = check_search_config(search_cfg)
        self.device = torch.device(device)
        check_precision(precision, self.device)
        ckpt = checkpoint.load(model_path)
        self.model = prepare_model(checkpoint.build_model(ckpt, model_path), precision, self.device, pack=pack)
        self.precision = precision
        self.tokenizer = Tokenizer.from_bytes(ckpt["bpe_model"])
        self.data = ckpt["data"]
        self.max_positions = self.model.cfg.max_positions
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.progress = progress

    def encode(self, lines: list[str], first_line: int) -> list[list[int]]:
        """BPE ids + EOS per line, truncated (with a warning) to fit the model's positions."""
        return encode_lines(self.tokenizer, lines, self.max_positions, first_line, self.progress)

    def batches(self, encoded: list[list[int]]) -> Iterator[list[int]]:
        """Indices of non-empty lines in length-sorted batches of at most max_tokens (padded) source tokens."""
        return length_sorted_batches(encoded, self.max_tokens, self.max_sentences)

    def translate_chunk(self, lines: list[str], first_line: int = 0) -> list[Translation]:
        """Translations of `lines`, in their order."""
        encoded = self.encode(lines, first_line)
        # An empty line translates to an empty line: N empty hypotheses, so --nbest always gives N rows.
        empty = [("", Hypothesis([], 0.0, 0.0))] * self.search_cfg.nbest
        results = [Translation("", empty, line) for line in lines]
        for batch in self.batches(encoded):
            width = max(len(encoded[i]) for i in batch)
            src = torch.full((len(batch), width), PAD, dtype=torch.long)
            for row, i in enumerate(batch):
                src[row, : len(encoded[i])] = torch.tensor(encoded[i])
            hyps = search(self.model, src.to(self.device), self.search_cfg, self.max_positions)
            for i, sentence_hyps in zip(batch, hyps):
                texts = self.tokenizer.decode([h.tokens for h in sentence_hyps])
                results[i] = Translation(texts[0] if texts else "", list(zip(texts, sentence_hyps)), lines[i])
        return results

    def attention(self, line: str, hypothesis: Hypothesis, line_index: int = 0):
        """Cross-attention maps (`nmt.attention.AttentionMaps`) of `line` and one of its hypotheses."""
        from nmt.attention import attention_maps

        src_ids = self.encode([line], line_index)[0]
        return attention_maps(self.model, self.tokenizer, src_ids, hypothesis.tokens)

    def translate(self, chunks: Iterable[list[str]]) -> Iterator[Translation]:
        """Translate a stream of chunks of lines, yielding one Translation per line, in order."""
        seen = 0
        for chunk in chunks:
            yield from self.translate_chunk(chunk, seen)
            seen += len(chunk)


def encode_lines(tokenizer: Tokenizer, lines: list[str], max_positions: int, first_line: int = 0,
                 progress: ProgressFn = ignore) -> list[list[int]]:
    """BPE ids + EOS per line, truncated (with a warning) to fit `max_positions`."""
    limit = max_positions - 1
    encoded = tokenizer.encode(lines)
    for i, ids in enumerate(encoded):
        if len(ids) > limit:
            progress(Progress("translate", message=f"warning: line {first_line + i + 1} has {len(ids)} BPE tokens, "
                                                   f"more than the model's {limit}; translating its first {limit}"))
            encoded[i] = ids[:limit]
    return [ids + [EOS] for ids in encoded]


def length_sorted_batches(encoded: list[list[int]], max_tokens: int, max_sentences: int) -> Iterator[list[int]]:
    """Indices of non-empty lines in length-sorted batches of at most `max_tokens` padded source
    tokens and `max_sentences` lines (a line longer than `max_tokens` goes alone)."""
    order = sorted((i for i, ids in enumerate(encoded) if len(ids) > 1), key=lambda i: len(encoded[i]))
    batch: list[int] = []
    for i in order:
        width = len(encoded[i])  # sorted, so the newest line is the longest
        if batch and (width * (len(batch) + 1) > max_tokens or len(batch) >= max_sentences):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def read_chunks(stream: BinaryIO, max_lines: int = 512, progress: ProgressFn = ignore) -> Iterator[list[str]]:
    """Lines of a byte stream in chunks of what has arrived so far (at most `max_lines` each).

    Reads with os.read, which returns as soon as some input is available, so a pipe that delivers
    a line at a time gets its translations a line at a time; a file is read in large blocks.
    Invalid UTF-8 is replaced (with a warning), so that every input line still gets its output line.
    """
    fd = stream.fileno()
    pending = b""
    line_no = 0

    def decode(raw: list[bytes]) -> list[str]:
        nonlocal line_no
        out = []
        for b in raw:
            line_no += 1
            try:
                out.append(b.decode("utf-8"))
            except UnicodeDecodeError:
                progress(Progress("translate", message=f"warning: input line {line_no} is not valid UTF-8; undecodable bytes replaced"))
                out.append(b.decode("utf-8", errors="replace"))
        return [s.rstrip("\r") for s in out]

    while True:
        block = os.read(fd, 1 << 16)
        if not block:
            break
        pending += block
        *complete, pending = pending.split(b"\n")
        for start in range(0, len(complete), max_lines):
            yield decode(complete[start : start + max_lines])
    if pending:
        yield decode([pending])


def format_nbest(line_index: int, translation: Translation) -> list[str]:
    """N-best lines: `LINE<TAB>RANK<TAB>SCORE<TAB>LOGPROB<TAB>TEXT` (line and rank 0-based)."""
    if not translation.hypotheses:
        return [f"{line_index}\t0\t0.0000\t0.0000\t"]
    return [f"{line_index}\t{rank}\t{h.score:.4f}\t{h.log_prob:.4f}\t{text}"
            for rank, (text, h) in enumerate(translation.hypotheses)]


def translate_file(translator: Translator, path: Optional[Path], lines: Optional[list[str]] = None) -> list[str]:
    """Best translations of a file's lines (or of `lines`), in order."""
    from nmt.files import read_lines

    source = lines if lines is not None else list(read_lines(path))
    return [t.text for t in translator.translate([source])]
