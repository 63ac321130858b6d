"""Export a checkpoint to another inference engine: CTranslate2 (https://github.com/OpenNMT/CTranslate2).

The exported model computes what nmt computes: the same weights, nmt's own position table (sinusoidal
in either layout, or learned, written into the model rather than CTranslate2's built-in one), pre- or
post-LayerNorm with the final LayerNorm of each pre-LN stack, the feed-forward activation (relu, gelu or
swish), embeddings scaled by sqrt(d_model) or not, one embedding table for the encoder, the decoder and
the output projection (with an imported model's output bias), and nmt's special tokens:

    nmt id   CTranslate2 token   role
    0 PAD    <blank>             padding (never generated)
    1 UNK    <unk>               unknown
    2 BOS    <s>                 decoder start (never generated)
    3 EOS    </s>                end of the source (added by CTranslate2: add_source_eos) and of the output

Every other id i is the subword piece `Tokenizer.vocab()[i]`, youtokentome's or SentencePiece's (a piece
that collides with a special token is renamed `<nmt:i>`), so the CTranslate2 vocabulary index of a token
is its nmt id. The export folder also holds the tokenizer's files (`bpe.model`, or `spm.model`, ...: see
nmt/tokenizer.py) and `nmt_export.json`, so `CTranslate2Translator` needs nothing else.

Conversion is CTranslate2's own protocol: `ctranslate2_converter` is a `ctranslate2.converters.Converter`
whose `_load` returns the spec, and `Converter.convert` validates, quantizes and saves it.
`export_ctranslate2` runs it into a new folder beside OUT and renames that into place when complete.

Search: CTranslate2 ranks finished hypotheses by log P / len^alpha where len excludes EOS by default;
nmt's `--lenpen-type power` counts EOS (as fairseq does). `ctranslate2_options` returns the
`translate_batch` options under which CTranslate2 searches exactly as nmt does (return_end_token=True
makes it count EOS); see docs/benchmarks-translate.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional

from nmt import checkpoint
from nmt.config import to_dict
from nmt.errors import ConfigError, InputError
from nmt.progress import ProgressFn, ignore
from nmt.search import Hypothesis, SearchConfig, length_penalty, max_lengths
from nmt.tokenizer import Tokenizer, load_tokenizer, read_files, save_files
from nmt.translate import Translation, encode_lines, length_sorted_batches
from nmt.vocab import BOS, EOS, PAD, UNK

if TYPE_CHECKING:  # ctranslate2 is optional: imported where it is used
    from ctranslate2.converters import Converter
    from ctranslate2.specs import TransformerSpec

FORMATS = ("ctranslate2",)
EXPORT_FORMAT = "nmt-ctranslate2"
EXPORT_VERSION = 1
META_FILE = "nmt_export.json"
SPECIAL_TOKENS = {PAD: "<blank>", UNK: "<unk>", BOS: "<s>", EOS: "</s>"}
# CTranslate2 stops a sentence as soon as its best beam ends when length_penalty is exactly 0; nmt (like
# fairseq) waits for `beam` finished hypotheses. A penalty this small changes no float32 score
# (len^1e-12 rounds to 1.0) but switches CTranslate2 to waiting, so "no normalisation" searches alike.
NO_PENALTY = 1e-12


def require_ctranslate2():
    """The ctranslate2 module, or a ConfigError saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise ConfigError("CTranslate2 is not installed; run `pip install ctranslate2` "
                          "(or `pip install 'nmt-toolkit[ctranslate2]'`)") from None
    major = int(str(getattr(ctranslate2, "__version__", "0")).split(".")[0] or 0)
    if major < 4:
        raise ConfigError(f"CTranslate2 {ctranslate2.__version__} is too old; run `pip install 'ctranslate2>=4'`")
    return ctranslate2


def ctranslate2_vocabulary(tokenizer: Tokenizer) -> list[str]:
    """CTranslate2 token of each nmt id (index = id): specials renamed, subword pieces otherwise, all distinct."""
    pieces = tokenizer.vocab()
    vocab = [SPECIAL_TOKENS.get(i, p) for i, p in enumerate(pieces)]
    seen: set[str] = set()
    for i, token in enumerate(vocab):
        if token in seen or not token:
            vocab[i] = f"<nmt:{i}>"
        seen.add(vocab[i])
    return vocab


# -- the converter ----------------------------------------------------------------------------------

# The values of the architecture options that `_transformer_spec` maps. Any other value (an option added
# to nmt's model later) would be converted into a model that computes something else, so it is refused.
EXPORTABLE = {"norm": ("pre", "post"), "positions": ("sinusoidal", "sinusoidal-halves", "learned"),
              "activation": ("relu", "gelu", "swish")}


def ctranslate2_converter(model_path: Path | str) -> Converter:
    """A `ctranslate2.converters.Converter` for the nmt checkpoint `model_path`.

    `convert(output_dir, quantization=..., force=...)` writes the CTranslate2 model files (not nmt's
    tokenizer files and nmt_export.json: `export_ctranslate2` adds those); afterwards `.checkpoint` holds the
    loaded checkpoint. An unsupported architecture raises NotImplementedError, as Converter documents.
    """
    return _converter_class()(Path(model_path))


@functools.cache
def _converter_class() -> type:
    # Defined on first use: ctranslate2 is optional, and nmt.export must import without it.
    require_ctranslate2()
    from ctranslate2.converters import Converter

    class NmtConverter(Converter):
        """Converts an nmt checkpoint: `_load` builds the spec; `Converter.convert` validates, quantizes and saves it."""

        def __init__(self, model_path: Path):
            self.model_path = model_path
            self.checkpoint: Optional[checkpoint.Checkpoint] = None

        def _load(self) -> TransformerSpec:
            # Loaded here, not in __init__: convert checks its output folder first, as CTranslate2's own converters do.
            self.checkpoint = checkpoint.load(self.model_path)
            return build_spec(self.checkpoint, self.model_path)

    return NmtConverter


def build_spec(ckpt: checkpoint.Checkpoint, path: Path | str = "checkpoint") -> TransformerSpec:
    """The checkpoint's model as a `ctranslate2.specs.TransformerSpec`, nmt's vocabulary registered on both sides."""
    model = ckpt.build_model(path)
    _check_exportable(model.cfg)
    tokenizer = load_tokenizer(ckpt.tokenizer, str(path))
    if tokenizer.vocab_size != model.cfg.vocab_size:
        raise InputError(f"{path}: the tokenizer has {tokenizer.vocab_size} tokens but the model "
                         f"{model.cfg.vocab_size}; the checkpoint is inconsistent")
    spec = _transformer_spec(model)
    vocab = ctranslate2_vocabulary(tokenizer)
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)  # the same list: CTranslate2 saves it once, as shared_vocabulary.json
    return spec


def _check_exportable(cfg: Any) -> None:
    unsupported = [f"{name} {getattr(cfg, name)!r}" for name, values in EXPORTABLE.items()
                   if getattr(cfg, name) not in values]
    if unsupported:
        raise NotImplementedError(f"no CTranslate2 equivalent for {', '.join(unsupported)}")


def _transformer_spec(model: Any) -> TransformerSpec:
    """The weights and layout of nmt's `Transformer` in a CTranslate2 TransformerSpec (no vocabulary yet)."""
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.cfg
    pre = cfg.norm == "pre"
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,  # erf, as torch's
                  "swish": common_spec.Activation.SWISH}[cfg.activation]
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers), cfg.n_heads, pre_norm=pre, activation=activation)
    spec.config.layer_norm_epsilon = model.encoder_norm.eps if pre else model.decoder[0].ffn_block.norm.eps
    spec.config.add_source_eos = True  # nmt's source is `pieces + [EOS]`
    spec.config.decoder_start_token = SPECIAL_TOKENS[BOS]

    embed = _np(model.embed.weight)
    positions = _np(model.pos_embed.weight if model.pos_embed is not None else model.pos_table)  # row p = position p
    for stack in (spec.encoder, spec.decoder):
        emb = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
        emb.weight = embed
        stack.scale_embeddings = cfg.scale_embeddings  # x * sqrt(d_model) (or x), then + positions
        stack.position_encodings.encodings = positions
    spec.decoder.projection.weight = embed  # tied output projection
    if model.output_bias is not None:
        spec.decoder.projection.bias = _np(model.output_bias)
    if pre:
        _norm(spec.encoder.layer_norm, model.encoder_norm)
        _norm(spec.decoder.layer_norm, model.decoder_norm)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.attn_block.norm)
        _ffn(layer_spec.ffn, layer)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.self_block.norm)
        _cross_attention(layer_spec.attention, layer.cross_attn, layer.cross_block.norm)
        _ffn(layer_spec.ffn, layer)
    return spec


def _np(t):
    return t.detach().float().cpu().contiguous().numpy()


def _linear(spec, weight, bias=None) -> None:
    spec.weight = _np(weight)
    if bias is not None:
        spec.bias = _np(bias)


def _fused(spec, layers) -> None:
    """One linear layer whose output is the concatenation of `layers`' outputs (CTranslate2 fuses q|k|v, k|v)."""
    import torch

    _linear(spec, torch.cat([m.weight for m in layers]), torch.cat([m.bias for m in layers]))


def _norm(spec, module) -> None:
    spec.gamma = _np(module.weight)
    spec.beta = _np(module.bias)


def _self_attention(spec, att, norm) -> None:
    _norm(spec.layer_norm, norm)
    _fused(spec.linear[0], [att.q_proj, att.k_proj, att.v_proj])
    _linear(spec.linear[1], att.out_proj.weight, att.out_proj.bias)


def _cross_attention(spec, att, norm) -> None:
    _norm(spec.layer_norm, norm)
    _linear(spec.linear[0], att.q_proj.weight, att.q_proj.bias)
    _fused(spec.linear[1], [att.k_proj, att.v_proj])
    _linear(spec.linear[2], att.out_proj.weight, att.out_proj.bias)


def _ffn(spec, layer) -> None:
    _norm(spec.layer_norm, layer.ffn_block.norm)
    _linear(spec.linear_0, layer.ffn.fc1.weight, layer.ffn.fc1.bias)
    _linear(spec.linear_1, layer.ffn.fc2.weight, layer.ffn.fc2.bias)


# -- writing the export folder ----------------------------------------------------------------------


@dataclass
class ExportResult:
    out_dir: Path
    vocab_size: int
    quantization: Optional[str]
    megabytes: float


def export_ctranslate2(model_path: Path, out_dir: Path, quantization: Optional[str] = None,
                       force: bool = False) -> ExportResult:
    """Write the checkpoint `model_path` as a CTranslate2 model folder `out_dir` (with the tokenizer's files and
    nmt_export.json).

    `quantization` stores the weights as int8, float16, ... (CTranslate2 can also quantise at load time
    with `compute_type`). The folder is converted beside `out_dir` and renamed into place when complete.
    """
    require_ctranslate2()
    _check_quantization(quantization)
    out_dir = Path(out_dir)
    _check_output_dir(out_dir, force)
    converter = ctranslate2_converter(model_path)
    try:
        with _staging_dir(out_dir) as staging:
            model_dir = staging / "model"
            _convert(converter, model_dir, quantization)
            _write_nmt_files(model_dir, converter.checkpoint, Path(model_path), quantization)
            _check_output_dir(out_dir, force)  # again: the conversion of a large model takes a while
            _move_into_place(model_dir, out_dir, staging / "replaced")
    except OSError as e:  # disk full, read-only folder: the user's to fix, not a bug
        raise InputError(f"{out_dir}: cannot write the export ({e.strerror or e}); "
                         "free disk space or choose a writable folder") from e
    vocab_size = converter.checkpoint.model_config.vocab_size  # = the tokenizer's vocabulary (build_spec checks)
    return ExportResult(out_dir, vocab_size, quantization, _megabytes(out_dir))


def export(fmt: str, model_path: Path, out_dir: Path, **kwargs) -> ExportResult:
    if fmt != "ctranslate2":
        raise ConfigError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    return export_ctranslate2(model_path, out_dir, **kwargs)


def _check_quantization(quantization: Optional[str]) -> None:
    """Refuse an unknown type before the slow conversion; the list is the installed CTranslate2's."""
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    if quantization is not None and quantization not in ACCEPTED_MODEL_TYPES:
        raise ConfigError(f"--quantization {quantization!r}: use one of {', '.join(ACCEPTED_MODEL_TYPES)}")


def _check_output_dir(out_dir: Path, force: bool) -> None:
    """nmt's rule: an empty folder may be written into; a non-empty one is replaced only with --force.

    (Converter.convert refuses any existing folder and, with force, deletes it before writing; the
    conversion runs into a new folder instead, so this rule is checked here.)
    """
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a folder; choose another output folder")
    if not force and any(out_dir.iterdir()):
        raise InputError(f"{out_dir}: folder exists and is not empty; choose another or pass --force to replace it")


@contextlib.contextmanager
def _staging_dir(out_dir: Path) -> Iterator[Path]:
    """A private folder beside `out_dir` (the same file system, so renaming out of it is atomic), removed on exit."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _convert(converter: Converter, model_dir: Path, quantization: Optional[str]) -> None:
    """`converter.convert` into `model_dir`, a path that does not exist yet, with its errors as one-line NmtErrors.

    (Its RuntimeError for an existing output folder cannot happen here; nmt's rule is `_check_output_dir`.)
    """
    path = converter.model_path
    try:
        converter.convert(str(model_dir), quantization=quantization)
    except NotImplementedError as e:  # _load: an architecture this converter cannot express
        raise ConfigError(f"{path}: cannot be exported to CTranslate2 ({_one_line(e)}); "
                          "translate with `nmt translate` instead") from e
    except ValueError as e:  # validate/optimize: a spec left incomplete (a bug of ours or an unsupported version)
        raise ConfigError(f"{path}: CTranslate2 rejected the converted model ({_one_line(e)}); "
                          "check that ctranslate2>=4 is installed") from e


def _one_line(e: Exception) -> str:
    # CTranslate2's messages may list reasons on several lines; the CLI shows one.
    return " ".join(str(e).split()) or type(e).__name__


def _write_nmt_files(model_dir: Path, ckpt: checkpoint.Checkpoint, model_path: Path, quantization: Optional[str]) -> None:
    """What `CTranslate2Translator` needs besides the model: the tokenizer and how the export maps nmt's ids."""
    tokenizer = save_files(ckpt.tokenizer, model_dir)
    meta = {
        "format": EXPORT_FORMAT, "version": EXPORT_VERSION, "checkpoint": str(model_path),
        "model_config": to_dict(ckpt.model_config), "data": ckpt.data.to_dict(), "updates": ckpt.state.updates,
        "quantization": quantization, "special_tokens": {tok: i for i, tok in SPECIAL_TOKENS.items()},
        "source_ends_with": SPECIAL_TOKENS[EOS], "decoder_start": SPECIAL_TOKENS[BOS],
        "tokenizer": tokenizer,  # kind, files, sha256 (none in exports made before SentencePiece: bpe.model)
    }
    (model_dir / META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")


def _move_into_place(new: Path, out_dir: Path, aside: Path) -> None:
    """Rename `new` to `out_dir`. An existing `out_dir` is renamed to `aside` first rather than deleted, so a
    failed rename puts it back whole; the caller removes `aside`."""
    if out_dir.exists():
        out_dir.rename(aside)
    try:
        new.rename(out_dir)
    except OSError:
        if aside.exists():
            aside.rename(out_dir)
        raise


def _megabytes(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) / 1e6


# -- translating with the exported model ------------------------------------------------------------


def ctranslate2_options(cfg: SearchConfig, suppress_specials: bool = False) -> dict[str, Any]:
    """`Translator.translate_batch` options under which CTranslate2 searches as nmt does with `cfg`.

    - length normalisation: CTranslate2 divides by len^alpha, nmt's `power`; return_end_token=True makes
      CTranslate2 count EOS in len as nmt does (the "</s>" it then returns is dropped by the caller).
      nmt's GNMT penalty has no CTranslate2 equivalent. lenpen 0: see NO_PENALTY.
    - min_decoding_length=0: nmt allows an empty output.
    - PAD and BOS: nmt never generates them and leaves the other tokens' log-probabilities as they
      are; CTranslate2's suppress_sequences would renormalise the rest, shifting every score a little
      (by log(1 - P(PAD) - P(BOS)) per token). So they are not suppressed unless `suppress_specials`:
      a trained model gives them ~0 probability, and nmt's decoding drops them from the text anyway.
    - the length limit is per batch in CTranslate2 (max_decoding_length), per sentence in nmt; the
      caller passes the batch's largest nmt limit + 1 and cuts each output to its own limit. nmt
      forces EOS at the limit, CTranslate2 stops without it: greedy outputs agree, beam search may
      rank hypotheses that reach the limit differently.
    """
    if cfg.lenpen != 0 and cfg.lenpen_type != "power":
        raise ConfigError(f"CTranslate2 has no {cfg.lenpen_type!r} length penalty; use --lenpen-type power "
                          "(log P / len^alpha) or --lenpen 0")
    options = dict(beam_size=cfg.beam, num_hypotheses=cfg.nbest, length_penalty=cfg.lenpen or NO_PENALTY,
                   return_end_token=True, min_decoding_length=0, return_scores=True, max_input_length=0)
    if suppress_specials:
        options["suppress_sequences"] = [[SPECIAL_TOKENS[PAD]], [SPECIAL_TOKENS[BOS]]]
    return options


class CTranslate2Translator:
    """An exported model (folder from `export_ctranslate2`) made ready to translate, like `nmt.translate.Translator`.

    Tokenisation, length-sorted batching, length limits and output order are nmt's; the network and the
    search run in CTranslate2 (`suppress_specials`: see `ctranslate2_options`).
    """

    def __init__(self, model_dir: Path, search_cfg: SearchConfig = SearchConfig(), device: str = "cpu",
                 compute_type: str = "default", threads: int = 0, max_tokens: int = 4096,
                 max_sentences: int = 128, progress: ProgressFn = ignore, suppress_specials: bool = False):
        ct2 = require_ctranslate2()
        model_dir = Path(model_dir)
        meta_path = model_dir / META_FILE
        if not meta_path.is_file():
            raise InputError(f"{model_dir}: no {META_FILE}; export the model with `nmt export --format ctranslate2`")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != EXPORT_FORMAT or meta.get("version") != EXPORT_VERSION:
            raise InputError(f"{meta_path}: not an nmt CTranslate2 export of version {EXPORT_VERSION}; export it again")
        self.search_cfg = search_cfg.validate()
        self.options = ctranslate2_options(self.search_cfg, suppress_specials)
        try:
            self.tokenizer = load_tokenizer(read_files(model_dir, meta.get("tokenizer")), str(model_dir))
        except OSError as e:
            raise InputError(f"{model_dir}: cannot read the tokenizer ({e.strerror or e}); export the model again") from None
        self.vocab = ctranslate2_vocabulary(self.tokenizer)
        self.ids = {tok: i for i, tok in enumerate(self.vocab)}
        self.max_positions = int(meta["model_config"]["max_positions"])
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.progress = progress
        try:
            self.engine = ct2.Translator(str(model_dir), device=device, compute_type=compute_type,
                                         inter_threads=1, intra_threads=threads)
        except (RuntimeError, ValueError) as e:
            raise InputError(f"{model_dir}: CTranslate2 cannot load it ({str(e).splitlines()[0]})") from None

    def translate_chunk(self, lines: list[str], first_line: int = 0):
        import torch

        cfg = self.search_cfg
        encoded = encode_lines(self.tokenizer, lines, self.max_positions, first_line, self.progress)
        results = [Translation("", []) for _ in lines]
        for batch in length_sorted_batches(encoded, self.max_tokens, self.max_sentences):
            lengths = torch.tensor([len(encoded[i]) for i in batch])
            src = torch.zeros(len(batch), int(lengths.max()), dtype=torch.long)
            for row, n in enumerate(lengths.tolist()):
                src[row, :n] = EOS  # max_lengths only counts non-PAD tokens
            limits = max_lengths(src, cfg.max_len_a, cfg.max_len_b, self.max_positions).tolist()
            sources = [[self.vocab[t] for t in encoded[i][:-1]] for i in batch]  # CTranslate2 adds </s>
            out = self.engine.translate_batch(sources, max_decoding_length=max(limits) + 1, **self.options)
            for i, limit, res in zip(batch, limits, out):
                hyps = []
                for tokens, score in zip(res.hypotheses, res.scores):
                    ids = [self.ids[t] for t in tokens]
                    if ids and ids[-1] == EOS:
                        ids.pop()
                    ids = [t for t in ids if t not in (PAD, BOS)]  # not generated by a trained model; never by nmt
                    ids = ids[:limit]  # nmt's per-sentence limit (nmt would end there with a forced EOS)
                    lp = length_penalty(len(ids) + 1, cfg.lenpen, "power") if cfg.lenpen else 1.0
                    hyps.append(Hypothesis(ids, score, score * lp))
                texts = self.tokenizer.decode([h.tokens for h in hyps])
                results[i] = Translation(texts[0] if texts else "", list(zip(texts, hyps)))
        return results

    def translate(self, chunks: Iterable[list[str]]) -> Iterator:
        seen = 0
        for chunk in chunks:
            yield from self.translate_chunk(chunk, seen)
            seen += len(chunk)


def describe(result: ExportResult) -> str:
    q = f", weights {result.quantization}" if result.quantization else ""
    return (f"CTranslate2 model written to {result.out_dir} ({result.megabytes:.1f} MB, "
            f"{result.vocab_size:,} tokens{q})")

