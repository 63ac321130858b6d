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
nmt/text/tokenizer.py) and `nmt_export.json`, so the engine (`nmt.engines.ct2_engine`) needs nothing else.
Written last, `nmt_manifest.json` records the size and sha256 of every other file and what the folder is a
conversion of (the checkpoint's sha256, the weights' quantization), so that a reader (the cache of conversions,
`nmt.engines.conversions`) can tell a damaged folder or another conversion from the one it wants.

Conversion is CTranslate2's own protocol: `ctranslate2_converter` is a `ctranslate2.converters.Converter`
whose `_load` returns the spec, and `Converter.convert` validates, quantizes and saves it.
`export_ctranslate2` runs it into a new folder beside OUT (`.OUT.PID.RANDOM`: one that a killed export left is
removed by the next export to OUT) and renames that into place when complete.

The engine that translates with an export is `nmt.engines.ct2_engine.CTranslate2Engine`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, cast

import torch

from nmt.config import to_dict
from nmt.core.errors import ConfigError, InputError, OutputError, one_line, ref
from nmt.core.files import atomic_write, owned_prefix, remove_dead_leftovers
from nmt.core.vocab import BOS, EOS, PAD, UNK
from nmt.model import checkpoint
from nmt.model.shortlist import Shortlist
from nmt.text.tags import with_tags
from nmt.text.tokenizer import Tokenizer, load_tokenizer, save_files

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
MANIFEST_FILE = "nmt_manifest.json"
MANIFEST_FORMAT = "nmt-manifest"
MANIFEST_VERSION = 1
SPECIAL_TOKENS = {PAD: "<blank>", UNK: "<unk>", BOS: "<s>", EOS: "</s>"}
VMAP_FILE = "vmap.txt"  # CTranslate2's vocabulary map: a checkpoint's shortlist (translate_batch's use_vmap)


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
    # Defined on first use: ctranslate2 is optional, and nmt.engines.ct2_export must import without it.
    require_ctranslate2()
    from ctranslate2.converters import Converter

    class NmtConverter(Converter):  # type: ignore[misc, unused-ignore]  # ctranslate2 is untyped (Any); only --strict flags this
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
    tokenizer = with_tags(load_tokenizer(ckpt.tokenizer, str(path)), ckpt.data)
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
    spec.decoder.projection.weight = embed if model.output_weight is None else _np(model.output_weight)
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
    remove_dead_leftovers(out_dir.parent, out_dir.name)  # of killed exports to OUT: also when this one is refused
    _check_output_dir(out_dir, force)
    converter = ctranslate2_converter(model_path)
    try:
        with _staging_dir(out_dir) as staging:
            model_dir = staging / "model"
            _convert(converter, model_dir, quantization)
            checkpoint_sha256 = checkpoint_sha256 or file_sha256(Path(model_path))
            files = _write_nmt_files(model_dir, converter.checkpoint, Path(model_path), quantization, checkpoint_sha256)
            write_manifest(model_dir, identity(checkpoint_sha256, quantization), files)
            _check_output_dir(out_dir, force)  # again: the conversion of a large model takes a while
            _move_into_place(model_dir, out_dir, staging / "replaced")
    except OSError as e:  # disk full, read-only folder: the user's to fix, not a bug
        raise OutputError(f"{out_dir}: cannot write the export ({e.strerror or e}); "
                         "free disk space or choose a writable folder") from e
    vocab_size = converter.checkpoint.model_config.vocab_size  # = the tokenizer's vocabulary (build_spec checks)
    return ExportResult(out_dir, vocab_size, quantization, _megabytes(out_dir))


def export(fmt: str, model_path: Path, out_dir: Path, **kwargs: Any) -> ExportResult:
    if fmt != "ctranslate2":
        raise ConfigError(f"{ref('format')} {fmt!r}: use one of {', '.join(FORMATS)}")
    return export_ctranslate2(model_path, out_dir, **kwargs)


def _check_quantization(quantization: Optional[str]) -> None:
    """Refuse an unknown type before the slow conversion; the list is the installed CTranslate2's."""
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    if quantization is not None and quantization not in ACCEPTED_MODEL_TYPES:
        raise ConfigError(f"{ref('quantization')} {quantization!r}: use one of {', '.join(ACCEPTED_MODEL_TYPES)}")


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
        raise InputError(f"{out_dir}: folder exists and is not empty; choose another or pass {ref('force')} to "
                         "replace it")


@contextlib.contextmanager
def _staging_dir(out_dir: Path) -> Iterator[Path]:
    """A private folder beside `out_dir` (the same file system, so renaming out of it is atomic), removed on exit;
    named with this process's pid, so that the next export removes the folders of exports that were killed."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_leftovers(out_dir.parent, out_dir.name)
    staging = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=owned_prefix(out_dir.name)))
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
                     checkpoint_sha256: str) -> dict[str, dict[str, Any]]:
    """What the engine (`CTranslate2Engine`) needs besides the model: the tokenizer, how the export maps
    nmt's ids, the checkpoint's search defaults; and the size and sha256 of every file, to tell a damaged folder.
    Returns the size and sha256 of every file of `model_dir`, nmt_export.json included."""
    tokenizer = save_files(ckpt.tokenizer, model_dir)
    if ckpt.shortlist is not None:
        vocab = ctranslate2_vocabulary(with_tags(load_tokenizer(ckpt.tokenizer, str(model_path)), ckpt.data))
        (model_dir / VMAP_FILE).write_text(vmap_text(ckpt.shortlist, vocab, model_path), encoding="utf-8")
    files = {p.name: file_record(p) for p in sorted(model_dir.iterdir()) if p.is_file()}
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
    return {**files, META_FILE: file_record(model_dir / META_FILE)}


def holds_space(token: str) -> bool:
    """Whether `token` holds white space, which vmap.txt cannot name (CTranslate2 splits its lines at spaces)."""
    return token != "".join(token.split())


def vmap_text(shortlist: Shortlist, vocab: list[str], model_path: Path) -> str:
    """vmap.txt, as CTranslate2's VocabularyMap reads it: a line `SOURCE<TAB>TARGET TARGET ...` per source token with
    a row, and first the frequent tokens under the empty source (always candidates, as are <unk>, <s> and </s>)."""
    rows, frequent = shortlist.rows(), shortlist.frequent.tolist()
    used = {*frequent, *(s for s, row in enumerate(rows) if row), *(t for row in rows for t in row)}
    spaced = next((vocab[i] for i in sorted(used) if holds_space(vocab[i])), None)
    if spaced is not None:  # CTranslate2 splits lines at spaces: the map would mean other tokens
        raise NotExportable(f"{model_path}: its shortlist names the token {spaced!r}, which vmap.txt cannot hold "
                            "(white space); attach it again with `nmt shortlist`, which leaves such tokens out")
    lines = ["\t" + " ".join(vocab[t] for t in frequent)]
    lines += [vocab[s] + "\t" + " ".join(vocab[t] for t in row) for s, row in enumerate(rows) if row]
    return "\n".join(lines) + "\n"


def identity(checkpoint_sha256: str, quantization: Optional[str]) -> dict[str, Any]:
    """What an export folder is a conversion of, as its manifest records it."""
    return {"checkpoint_sha256": checkpoint_sha256, "quantization": quantization, "export_version": EXPORT_VERSION}


def file_record(path: Path) -> dict[str, Any]:
    return {"bytes": path.stat().st_size, "sha256": file_sha256(path)}


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    """The one spelling of a manifest (sorted keys, no spaces): a reader compares the file with it, so that any
    byte changed, removed or added is seen, even one that leaves the JSON readable and its values equal."""
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii") + b"\n"


def write_manifest(model_dir: Path, what: Mapping[str, Any], files: Mapping[str, Mapping[str, Any]]) -> None:
    """nmt_manifest.json: `what` the folder is a conversion of and the size and sha256 of its `files`; written
    last and atomically (a temporary file renamed), so a folder with a manifest was written whole."""
    manifest = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "identity": dict(what),
                "files": {name: dict(record) for name, record in files.items()}}
    with atomic_write(model_dir / MANIFEST_FILE) as f:
        f.write(manifest_bytes(manifest))


def read_manifest(model_dir: Path) -> Optional[dict[str, Any]]:
    """The folder's manifest, or None when it is missing, unreadable or not exactly as `write_manifest` writes."""
    try:
        raw = (Path(model_dir) / MANIFEST_FILE).read_bytes()
        manifest = json.loads(raw)
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest_bytes(manifest) != raw:
        return None
    if manifest.get("format") != MANIFEST_FORMAT or manifest.get("version") != MANIFEST_VERSION:
        return None
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(r, dict) for r in files.values()):
        return None
    return manifest


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
    return cast(dict[str, Any], meta)  # a dict: `known` checked it


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


def describe(result: ExportResult) -> str:
    q = f", weights {result.quantization}" if result.quantization else ""
    return (f"CTranslate2 model written to {result.out_dir} ({result.megabytes:.1f} MB, "
            f"{result.vocab_size:,} tokens{q})")

