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

Search: `ctranslate2_options` returns the `translate_batch` options under which CTranslate2 searches as
nmt does, and `CTranslate2Translator` ranks what it returns with nmt's own length penalty (GNMT or
power), so that both engines give the same translations (see `ctranslate2_options` for the one case
where CTranslate2 cannot: a beam search that reaches its sentence's length limit).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import torch

from nmt import checkpoint
from nmt.attention import EOS_LABEL, word_alignment
from nmt.config import Overrides, to_dict
from nmt.errors import ConfigError, InputError, OutputError, one_line
from nmt.progress import ProgressFn, ignore
from nmt.search import Hypothesis, SearchConfig, best_hypotheses, length_penalty, max_lengths
from nmt.tokenizer import Tokenizer, load_tokenizer, read_files, save_files
from nmt.translate import BatchTranslator
from nmt.vocab import BOS, EOS, PAD, UNK

if TYPE_CHECKING:  # ctranslate2 is optional: imported where it is used
    from ctranslate2.converters import Converter
    from ctranslate2.specs import TransformerSpec

FORMATS = ("ctranslate2",)
EXPORT_FORMAT = "nmt-ctranslate2"
# 2: the decoder's attention for alignments averages every head of the last layer (as nmt's --alignments
# does); nmt_export.json records the checkpoint's sha256 and search defaults and the files' sizes and sha256.
EXPORT_VERSION = 2
READABLE_VERSIONS = (1, 2)
META_FILE = "nmt_export.json"
SPECIAL_TOKENS = {PAD: "<blank>", UNK: "<unk>", BOS: "<s>", EOS: "</s>"}
# CTranslate2 stops a sentence as soon as its best beam ends when length_penalty is exactly 0; nmt (like
# fairseq) waits for `beam` finished hypotheses. A penalty this small changes no float32 score
# (len^1e-12 rounds to 1.0) but switches CTranslate2 to waiting, so "no normalisation" searches alike.
NO_PENALTY = 1e-12


class NotExportable(ConfigError):
    """The checkpoint uses an option that CTranslate2 cannot express."""


def require_ctranslate2() -> Any:
    """The ctranslate2 module, or a ConfigError saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise ConfigError("CTranslate2 is not installed; run `pip install 'nmt-toolkit[ct2]'` "
                          "(or `pip install ctranslate2`)") from None
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
        """Converts an nmt checkpoint: `_load` builds the spec; `Converter.convert` validates, quantizes and
        saves it."""

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
        (cfg.encoder_layers, cfg.decoder_layers), cfg.n_heads, pre_norm=pre, activation=activation,
        alignment_layer=-1, alignment_heads=0)  # attention for alignments: the last layer, every head averaged
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


def _np(t: torch.Tensor) -> Any:
    return t.detach().float().cpu().contiguous().numpy()


def _linear(spec: Any, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> None:
    spec.weight = _np(weight)
    if bias is not None:
        spec.bias = _np(bias)


def _fused(spec: Any, layers: list[torch.nn.Linear]) -> None:
    """One linear layer whose output is the concatenation of `layers`' outputs (CTranslate2 fuses q|k|v, k|v)."""
    _linear(spec, torch.cat([m.weight for m in layers]), torch.cat([m.bias for m in layers]))


def _norm(spec: Any, module: torch.nn.LayerNorm) -> None:
    spec.gamma = _np(module.weight)
    spec.beta = _np(module.bias)


def _self_attention(spec: Any, att: Any, norm: torch.nn.LayerNorm) -> None:
    _norm(spec.layer_norm, norm)
    _fused(spec.linear[0], [att.q_proj, att.k_proj, att.v_proj])
    _linear(spec.linear[1], att.out_proj.weight, att.out_proj.bias)


def _cross_attention(spec: Any, att: Any, norm: torch.nn.LayerNorm) -> None:
    _norm(spec.layer_norm, norm)
    _linear(spec.linear[0], att.q_proj.weight, att.q_proj.bias)
    _fused(spec.linear[1], [att.k_proj, att.v_proj])
    _linear(spec.linear[2], att.out_proj.weight, att.out_proj.bias)


def _ffn(spec: Any, layer: Any) -> None:
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
                       force: bool = False, checkpoint_sha256: Optional[str] = None) -> ExportResult:
    """Write the checkpoint `model_path` as a CTranslate2 model folder `out_dir` (with the tokenizer's files and
    nmt_export.json).

    `quantization` stores the weights as int8, float16, ... (CTranslate2 can also quantise at load time
    with `compute_type`). The folder is converted beside `out_dir` and renamed into place when complete.
    `checkpoint_sha256`: the checkpoint file's, if known (computed otherwise).
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
            _write_nmt_files(model_dir, converter.checkpoint, Path(model_path), quantization,
                             checkpoint_sha256 or file_sha256(Path(model_path)))
            _check_output_dir(out_dir, force)  # again: the conversion of a large model takes a while
            _move_into_place(model_dir, out_dir, staging / "replaced")
    except OSError as e:  # disk full, read-only folder: the user's to fix, not a bug
        raise OutputError(f"{out_dir}: cannot write the export ({e.strerror or e}); "
                         "free disk space or choose a writable folder") from e
    vocab_size = converter.checkpoint.model_config.vocab_size  # = the tokenizer's vocabulary (build_spec checks)
    return ExportResult(out_dir, vocab_size, quantization, _megabytes(out_dir))


def export(fmt: str, model_path: Path, out_dir: Path, **kwargs: Any) -> ExportResult:
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
        raise NotExportable(f"{path}: cannot be exported to CTranslate2 ({one_line(e)}); "
                          "translate with `nmt translate` instead") from e
    except ValueError as e:  # validate/optimize: a spec left incomplete (a bug of ours or an unsupported version)
        raise ConfigError(f"{path}: CTranslate2 rejected the converted model ({one_line(e)}); "
                          "check that ctranslate2>=4 is installed") from e


def _write_nmt_files(model_dir: Path, ckpt: checkpoint.Checkpoint, model_path: Path, quantization: Optional[str],
                     checkpoint_sha256: str) -> None:
    """What `CTranslate2Translator` needs besides the model: the tokenizer, how the export maps nmt's ids, the
    checkpoint's search defaults; and the size and sha256 of every file, to tell a damaged folder."""
    tokenizer = save_files(ckpt.tokenizer, model_dir)
    files = {p.name: {"bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in sorted(model_dir.iterdir())
             if p.is_file()}
    meta = {
        "format": EXPORT_FORMAT, "version": EXPORT_VERSION, "checkpoint": str(model_path),
        "checkpoint_sha256": checkpoint_sha256,
        "model_config": to_dict(ckpt.model_config), "data": ckpt.data.to_dict(), "updates": ckpt.state.updates,
        "search": dict(ckpt.search.values),  # translate's defaults that the checkpoint brings (an imported model)
        "quantization": quantization, "special_tokens": {tok: i for i, tok in SPECIAL_TOKENS.items()},
        "source_ends_with": SPECIAL_TOKENS[EOS], "decoder_start": SPECIAL_TOKENS[BOS],
        "tokenizer": tokenizer,  # kind, files, sha256 (none in exports made before SentencePiece: bpe.model)
        "files": files,
    }
    (model_dir / META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def read_meta(model_dir: Path) -> dict[str, Any]:
    """The export's nmt_export.json, checked to be one this nmt reads; InputError naming the folder otherwise."""
    meta_path = Path(model_dir) / META_FILE
    if not meta_path.is_file():
        raise InputError(f"{model_dir}: no {META_FILE}; export the model with `nmt export --format ctranslate2`")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{meta_path}: cannot be read ({e}); export the model again") from None
    known = isinstance(meta, dict) and meta.get("format") == EXPORT_FORMAT
    if not known or meta.get("version") not in READABLE_VERSIONS:
        raise InputError(f"{meta_path}: not an nmt CTranslate2 export of version {EXPORT_VERSION}; export it again")
    return meta


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
    """`Translator.translate_batch` options under which CTranslate2 searches as nmt does with `cfg`; add
    max_decoding_length (a sentence's limit + 1) and rank the hypotheses it returns as `rank_hypotheses` does.

    - Ranking: both keep the K likeliest finished hypotheses of a beam search (num_hypotheses=K; the
      length penalty 1e-12 (NO_PENALTY) ranks by log-probability and is no early exit: CTranslate2 stops a
      sentence at its first finished beam when length_penalty is exactly 0, nmt waits for K), then rank them
      by nmt's length penalty, GNMT's ((5 + len) / 6)^alpha or len^alpha, where len counts EOS
      (return_end_token=True: the "</s>" that CTranslate2 then returns is dropped).
    - min_decoding_length=0: nmt allows an empty output; max_input_length=0: nmt cuts long sources itself.
    - PAD and BOS: nmt never generates them and leaves the other tokens' log-probabilities as they are;
      CTranslate2's suppress_sequences would renormalise the rest, shifting every score a little. So they
      are not suppressed unless `suppress_specials`: a trained model gives them ~0 probability, and a
      hypothesis holding one is searched again by nmt (CTranslate2Translator's `fallback`).
    - The length limit: nmt's is per sentence (a * |x| + b) and forces EOS there; CTranslate2's is per
      batch and stops without EOS. Greedy search and sampling: each output is cut to its own limit and
      scored again (score_batch): the same as nmt's. Beam search: a sentence whose search reaches its
      limit can end otherwise, so CTranslate2Translator searches such sentences again with nmt.
    - Sampling: sampling_topk, sampling_topp and sampling_temperature mean what --topk, --topp and
      --temperature mean, but CTranslate2 draws other random numbers: other samples than nmt's.
    """
    common = dict(return_end_token=True, min_decoding_length=0, return_scores=True, max_input_length=0)
    if cfg.sampling:
        return dict(beam_size=1, num_hypotheses=cfg.nbest, sampling_topk=cfg.topk, sampling_topp=cfg.topp,
                    sampling_temperature=cfg.temperature, length_penalty=NO_PENALTY, **common)
    options: dict[str, Any] = dict(beam_size=cfg.beam, num_hypotheses=cfg.beam, length_penalty=NO_PENALTY, **common)
    if suppress_specials:
        options["suppress_sequences"] = [[SPECIAL_TOKENS[PAD]], [SPECIAL_TOKENS[BOS]]]
    return options


def rank_hypotheses(hyps: list[Hypothesis], cfg: SearchConfig) -> list[Hypothesis]:
    """A sentence's hypotheses (log-probabilities, EOS included; score unset) scored and ranked as nmt's
    search ranks them: scores with nmt's length penalty; beam search keeps the K likeliest, then the
    nbest best by score."""
    scored = [Hypothesis(h.tokens, h.log_prob / float(length_penalty(len(h.tokens) + 1, cfg.lenpen, cfg.lenpen_type)),
                         h.log_prob) for h in hyps]
    if cfg.sampling:
        return sorted(scored, key=lambda h: -h.score)
    return best_hypotheses(scored, cfg.beam, cfg.nbest)


class Fallback:
    """The torch engine of the same checkpoint, loaded on first use (shared by the copies `with_search`
    makes): it searches the sentences that CTranslate2 cannot search as nmt does."""

    def __init__(self, make: Callable[[], BatchTranslator]):
        self.make, self.sentences = make, 0
        self.engine: Optional[BatchTranslator] = None
        self.lock = threading.Lock()  # batches searched at once (--inter-threads) share it
        self.threads = torch.get_num_threads()

    def search_batch(self, encoded: list[list[int]], keys: list[int], cfg: SearchConfig) -> list[list[Hypothesis]]:
        with self.lock:
            # a batch's own thread starts with OpenMP's default (every core), whatever this thread was given
            torch.set_num_threads(self.threads)
            if self.engine is None:
                self.engine = self.make()
            self.sentences += len(encoded)
            return self.engine.with_search(cfg).search_batch(encoded, keys)


class CTranslate2Translator(BatchTranslator):
    """The CTranslate2 engine: an exported model (a folder from `export_ctranslate2`) made ready to translate,
    like `nmt.translate.Translator` and with the same results (see `ctranslate2_options`).

    Tokenisation, length-sorted batching, length limits, ranking and output order are nmt's; the network
    and the search run in CTranslate2. `compute_type`: CTranslate2's (float32, int8, bfloat16, ...);
    `threads`: its intra_threads; `inter_threads`: batches translated at once (each by a replica of the model
    with `threads` threads); `fallback`: the torch engine of the same model (loaded on first use), which
    searches the few sentences CTranslate2 cannot search exactly as nmt (float32 only: other number formats
    round differently anyway); `suppress_specials`: see `ctranslate2_options`.
    """

    name = "ctranslate2"

    def __init__(self, model_dir: Path, search_cfg: SearchConfig | Overrides[SearchConfig] = SearchConfig(),
                 device: str = "cpu", compute_type: str = "default", threads: int = 0, max_tokens: int = 4096,
                 max_sentences: int = 128, progress: ProgressFn = ignore, suppress_specials: bool = False,
                 fallback: Optional[Callable[[], BatchTranslator]] = None, inter_threads: int = 1):
        ct2 = require_ctranslate2()
        self.model_dir = model_dir = Path(model_dir)
        self.meta = meta = read_meta(model_dir)
        defaults = Overrides(SearchConfig, meta.get("search") or {})
        self.suppress_specials = suppress_specials
        self.search_cfg = self.check_search(search_cfg if isinstance(search_cfg, SearchConfig)
                                            else search_cfg.apply(defaults.apply()))
        try:
            self.tokenizer = load_tokenizer(read_files(model_dir, meta.get("tokenizer")), str(model_dir))
        except OSError as e:
            raise InputError(f"{model_dir}: cannot read the tokenizer ({e.strerror or e}); export the model "
                             "again") from None
        self.vocab = ctranslate2_vocabulary(self.tokenizer)
        self.ids = {tok: i for i, tok in enumerate(self.vocab)}
        data = meta.get("data") or {}
        self.languages = (str(data.get("src", "")), str(data.get("tgt", "")))
        self.max_positions = int(meta["model_config"]["max_positions"])
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.progress = progress
        self.compute_type = compute_type
        self.fallback = Fallback(fallback) if fallback is not None else None
        if self.search_cfg.sampling:
            # CTranslate2 seeds each of its threads' generators once, at their first draw: the same seed, input
            # and batches give the same draws (per process; `with_search` cannot seed again)
            ct2.set_random_seed(self.search_cfg.seed)
        try:
            self.engine = ct2.Translator(str(model_dir), device=device, compute_type=compute_type,
                                         inter_threads=inter_threads, intra_threads=threads)
            self.parallel = inter_threads  # its translate_batch releases the GIL: one Python thread per replica
        except (RuntimeError, ValueError) as e:
            raise InputError(f"{model_dir}: CTranslate2 cannot load it ({str(e).splitlines()[0]})") from None

    def check_search(self, search_cfg: SearchConfig) -> SearchConfig:
        search_cfg = search_cfg.validate()
        self.options = ctranslate2_options(search_cfg, self.suppress_specials)
        return search_cfg

    def with_search(self, search_cfg: SearchConfig) -> "CTranslate2Translator":
        other = copy.copy(self)
        other.search_cfg = other.check_search(search_cfg)  # options of its own: this one's stay
        return other

    def search_batch(self, encoded: list[list[int]], keys: list[int]) -> list[list[Hypothesis]]:
        cfg = self.search_cfg
        src = torch_lengths(encoded)
        limits = max_lengths(src, cfg.max_len_a, cfg.max_len_b, self.max_positions).tolist()
        sources = [[self.vocab[t] for t in ids[:-1]] for ids in encoded]  # CTranslate2 adds </s>
        out = self.engine.translate_batch(sources, max_decoding_length=max(limits) + 1, **self.options)
        results: list[list[Hypothesis]] = []
        again: set[int] = set()  # sentences whose search differs from nmt's: searched with nmt
        rescore: list[tuple[int, int]] = []  # (sentence, hypothesis) to score with nmt's forced EOS
        beam = not cfg.sampling and cfg.beam > 1
        for row, (limit, res) in enumerate(zip(limits, out)):
            hyps: list[Hypothesis] = []
            for tokens, log_prob in zip(res.hypotheses, res.scores):
                ids = [self.ids[t] for t in tokens]
                ended = bool(ids) and ids[-1] == EOS
                if ended:
                    ids.pop()
                specials = any(t in (PAD, BOS) for t in ids)  # never generated by nmt
                if (specials and not cfg.sampling) or (beam and (not ended or len(ids) >= limit)):
                    # nmt would have chosen another token, or ended every beam at the limit with EOS
                    again.add(row)
                if specials or not ended or len(ids) > limit:  # nmt ends this output at its limit, with EOS
                    ids = [t for t in ids if t not in (PAD, BOS)][:limit]
                    rescore.append((row, len(hyps)))
                hyps.append(Hypothesis(ids, 0.0, log_prob))
            results.append(hyps)
        if cfg.sampling and cfg.temperature != 1.0:  # CTranslate2 scores the tempered distribution
            rescore = [(row, j) for row, hyps in enumerate(results) for j in range(len(hyps))]
        if self.fallback is None or self.compute_type not in ("float32", "default") or cfg.sampling:
            again = set()  # other number formats round otherwise anyway: CTranslate2's output, cut at the limit
        rescore = [(row, j) for row, j in rescore if row not in again]
        if rescore:
            scored = self.engine.score_batch([sources[row] for row, _ in rescore],
                                             [[self.vocab[t] for t in results[row][j].tokens] for row, j in rescore],
                                             max_input_length=0)
            for (row, j), res in zip(rescore, scored):
                results[row][j] = Hypothesis(results[row][j].tokens, 0.0, float(sum(res.log_probs)))
        ranked = [rank_hypotheses(dedupe(hyps), cfg) for hyps in results]
        if again and self.fallback is not None:
            rows = sorted(again)
            redone = self.fallback.search_batch([encoded[row] for row in rows], [keys[row] for row in rows], cfg)
            for row, hyps in zip(rows, redone):
                ranked[row] = hyps
        return ranked

    def alignment(self, line: str, hypothesis: Hypothesis, line_index: int = 0) -> list[tuple[int, int]]:
        """From CTranslate2's cross-attention of the last layer, every head averaged, over the hypothesis
        forced as the output (the same weights as nmt's teacher-forced pass)."""
        if not hypothesis.tokens:
            return []
        if self.meta.get("version", 1) < 2:
            raise ConfigError(f"{self.model_dir}: exported by an older nmt, whose model gives one head's attention; "
                              "export it again for --alignments")
        src_ids = self.encode([line], line_index)[0]
        source = [self.vocab[t] for t in src_ids[:-1]]
        prefix = [self.vocab[t] for t in hypothesis.tokens]
        res = self.engine.translate_batch([source], [prefix], beam_size=1, return_attention=True,
                                          return_end_token=True, max_decoding_length=len(prefix) + 1,
                                          min_decoding_length=0, max_input_length=0)[0]
        # (T, S - 1): a row per output piece and EOS; CTranslate2 leaves out the column of the source's EOS,
        # which no alignment takes (a column of zeros stands for it)
        weights = torch.tensor(res.attention[0])[: len(prefix) + 1]
        weights = torch.cat([weights, weights.new_zeros(weights.size(0), 1)], dim=1)
        labels = self.tokenizer.pieces
        return word_alignment(weights, labels(src_ids[:-1]) + [EOS_LABEL],
                              labels(list(hypothesis.tokens)) + [EOS_LABEL])


def torch_lengths(encoded: list[list[int]]) -> torch.Tensor:
    """A (B, S) tensor whose non-PAD positions are the sources' (for `max_lengths`, which counts them)."""
    src = torch.full((len(encoded), max(len(ids) for ids in encoded)), PAD, dtype=torch.long)
    for row, ids in enumerate(encoded):
        src[row, : len(ids)] = EOS
    return src


def dedupe(hyps: list[Hypothesis]) -> list[Hypothesis]:
    """Hypotheses with the same tokens once (the likeliest): outputs cut at their limit can coincide."""
    seen: dict[tuple[int, ...], Hypothesis] = {}
    for h in hyps:
        if tuple(h.tokens) not in seen or h.log_prob > seen[tuple(h.tokens)].log_prob:
            seen[tuple(h.tokens)] = h
    return list(seen.values()) if len(seen) < len(hyps) else hyps


def describe(result: ExportResult) -> str:
    q = f", weights {result.quantization}" if result.quantization else ""
    return (f"CTranslate2 model written to {result.out_dir} ({result.megabytes:.1f} MB, "
            f"{result.vocab_size:,} tokens{q})")

