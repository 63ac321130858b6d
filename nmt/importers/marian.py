"""Import a Hugging Face Marian folder (an OPUS-MT model of Helsinki-NLP) as a self-contained nmt checkpoint.

The folder, as `hf download Helsinki-NLP/opus-mt-en-de FILES... --local-dir DIR` leaves it (`get_one`):

    config.json               the architecture (model_type "marian") and the special ids
    model.safetensors         the weights (or pytorch_model.bin: older folders)
    source.spm, target.spm    SentencePiece models of each side
    vocab.json                the one vocabulary both sides share: piece -> Marian id
    tokenizer_config.json     the languages (optional)
    generation_config.json    the search defaults (optional; else config.json's)

Read with json, torch (`weights_only`), safetensors and SentencePiece (through nmt.text.spm): transformers is
not needed. The model is nmt's Transformer with Marian's switches (`ModelConfig`): post-LayerNorm, the
feed-forward activation of config.json (swish for OPUS-MT), sinusoidal positions in halves (the sines,
then the cosines), embeddings scaled by sqrt(d_model) or not, and the output bias (final_logits_bias).

nmt's special ids are fixed (PAD 0, UNK 1, BOS 2, EOS 3: nmt/core/vocab.py); Marian's are eos 0, unk 1 and pad
last, and its decoder starts from pad. The import renumbers the vocabulary, permuting the rows of the
embedding table and of the output bias:

    nmt id   Marian row            output bias
    0 PAD    pad                   Marian's - 10000
    1 UNK    unk                   Marian's
    2 BOS    decoder start (pad)   Marian's - 10000
    3 EOS    eos                   Marian's
    4 ...    every other id, in order

PAD and BOS stand for one Marian row (the decoder starts from BOS, so from the pad row, as in Marian).
Neither is ever generated (nmt's search never emits them), and the lowered bias keeps them out of the
softmax's normaliser: the log-probabilities are those of Marian, and of transformers' generate with the
`bad_words_ids` and `renormalize_logits` that OPUS-MT's generation configs set (its pad logit, often the
largest, leaves the softmax).

A multilingual model (opus-mt-en-ROMANCE, opus-mt-en-mul, ...) has OPUS-MT's target-language pieces in
vocab.json (`>>fra<<`, as transformers' MarianTokenizer finds them: `>>...<<`), one of which begins every source:
it imports as a model of the directions (src, t) for each such target t, whose tag is the piece's nmt id
(`nmt.core.identity.multilingual`). The embeddings must be one table (nmt's model ties the source's, the
target's and the output's): separate ones are refused, whatever config.json's flags say.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from nmt.config import ModelConfig, Overrides, TrainConfig, named_as_fields
from nmt.core.errors import ConfigError, InputError, one_line
from nmt.core.identity import DataIdentity, multilingual
from nmt.core.vocab import BOS, EOS, PAD, UNK
from nmt.importers.hf_folder import (
    TARGET_LANGUAGE_TOKEN,
    find_languages,
    find_source,
    find_targets,
    float_value,
    get_one,
    int_value,
    not_a_folder,
    parse_json,
    read_bounded,
    search_defaults,
    shown,
)
from nmt.model.checkpoint import Checkpoint, load_failure
from nmt.model.transformer import NEVER_GENERATED_BIAS, Transformer
from nmt.text.tokenizer import SENTENCEPIECE, digest, load_tokenizer

KIND = "marian"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # as transformers saves them; the first is read
FOLDER_FILES = ("config.json", *WEIGHT_FILES, "source.spm", "target.spm", "vocab.json", "tokenizer_config.json",
                "generation_config.json")  # all that an import may read
# What `get_one` downloads: all that an import reads, of the weights model.safetensors only (a folder may hold
# the same weights three times more: pytorch_model.bin, tf_model.h5, rust_model.ot); `no weights` asks for
# pytorch_model.bin where a model has no model.safetensors.
DOWNLOADED = tuple(name for name in FOLDER_FILES if name != "pytorch_model.bin")
FAMILY = "Helsinki-NLP/opus-mt-SRC-TGT"  # OPUS-MT's models on the Hub (`get_one`)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}  # transformers' name -> nmt's
# What a file of the folder may hold: OPUS-MT's configs are a few kB, vocab.json about 1 MB (65,000 pieces),
# each .spm about 800 kB; a file beyond is refused before it is read (and a size before it is allocated).
MAX_BYTES = {"vocab.json": 16 << 20, "source.spm": 16 << 20, "target.spm": 16 << 20}
MAX_CONFIG_BYTES = 1 << 20  # config.json, tokenizer_config.json, generation_config.json
MAX_POSITIONS = 32768  # max_position_embeddings (OPUS-MT's: 512, tc-big's 1024): nmt computes that table

# nmt's part of each Marian layer part (the same parameter names below them: weight, bias).
ENCODER_PARTS = {"self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
                 "self_attn.v_proj": "self_attn.v_proj", "self_attn.out_proj": "self_attn.out_proj",
                 "self_attn_layer_norm": "attn_block.norm", "fc1": "ffn.fc1", "fc2": "ffn.fc2",
                 "final_layer_norm": "ffn_block.norm"}
DECODER_PARTS = {**{k: v for k, v in ENCODER_PARTS.items() if k != "self_attn_layer_norm"},
                 "self_attn_layer_norm": "self_block.norm",
                 **{f"encoder_attn.{p}_proj": f"cross_attn.{p}_proj" for p in ("q", "k", "v", "out")},
                 "encoder_attn_layer_norm": "cross_block.norm"}
# The names the shared embedding table goes by (transformers saves the tied ones once or several times).
EMBEDDINGS = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight")
FLAGS = ("share_encoder_decoder_embeddings", "tie_word_embeddings")  # false: the tables above may differ
IGNORED = re.compile(r"^(encoder|decoder)\.embed_positions\.weight$")  # sinusoids, recomputed

# Fine-tuning defaults stored with an imported model (`nmt train --init-from` starts from them; options win).
# OPUS-MT models were trained by Marian at 3e-4 with an inverse-square-root decay after 16k warmup updates, so
# they end near 5e-5 after the few hundred thousand updates such a model trains for; fine-tuning continues at
# about that rate (a rate the size of a new model's would overwrite what the model knows, on little data),
# after a short warmup for Adam's fresh moments. See docs/pretrained.md.
FINE_TUNING_PEAK_LR = 5e-5
FINE_TUNING = dict(warmup=200, label_smoothing=0.1, max_tokens=4096, update_tokens=8192, max_updates=2000,
                   save_interval=200, valid_interval=200, keep_last=5, valid_bleu_sentences=500, patience=3)


@dataclass
class Imported:
    """An imported model: the checkpoint, and what the import decided that the user should know."""

    checkpoint: Checkpoint
    folder: Path
    weights_file: Path
    notes: list[str] = field(default_factory=list)


def import_marian(folder: Path | str, src: Optional[str] = None, tgt: Optional[str] = None) -> Imported:
    """The Marian folder `folder` as an nmt checkpoint (not written: `nmt.model.checkpoint.save` it). `src`, `tgt`:
    the languages (default: tokenizer_config.json's, else the folder's name, opus-mt-SRC-TGT)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(not_a_folder(folder, DOWNLOADED, FAMILY, "nmt import marian"))
    config_path = folder / "config.json"
    config = read_json(config_path)
    check_marian(config, config_path)
    tok_config = read_json(folder / "tokenizer_config.json", required=False)
    notes: list[str] = []
    vocab = read_vocab(folder, tok_config)
    tag_pieces = [p for p, _ in sorted(vocab.items(), key=lambda item: item[1]) if TARGET_LANGUAGE_TOKEN.match(p)]
    if tag_pieces:
        source = find_source(folder, tok_config, src, tgt, notes)
        targets = find_targets(tag_pieces, source, folder / "vocab.json", notes)
        languages = (source, "+".join(targets))
    else:
        languages = find_languages(folder, tok_config, src, tgt, notes)
    size = int_value(config, "vocab_size", config_path)
    if len(vocab) != size:
        raise InputError(f"{folder / 'vocab.json'}: {len(vocab)} pieces, but config.json's vocab_size is {size}; "
                         "the folder mixes files of two models: download it again")
    specials = special_ids(config, config_path, vocab, tok_config)
    rows = nmt_rows(size, specials)
    table = pieces(vocab, rows)
    model_cfg = model_config(config, config_path, len(rows))
    weights_file, marian = read_weights(folder, get_one(folder, ("pytorch_model.bin",), FAMILY))
    check_sizes(model_cfg, marian, weights_file, config_path)
    if embedding_table(marian, weights_file, config, config_path)[1] is not None:  # an lm_head of its own
        model_cfg = dataclasses.replace(model_cfg, tied_output=False)
    weights = nmt_weights(marian, model_cfg, rows, weights_file, config_path, config)
    tokenizer = spm_tokenizer_data(folder, table)
    generation = read_json(folder / "generation_config.json", required=False)
    search = search_defaults(config, generation, folder, specials["pad"], notes)
    data = DataIdentity(*languages, len(rows), SENTENCEPIECE, digest(tokenizer))
    if tag_pieces:
        ids = {piece: i for i, piece in enumerate(table)}
        pairs = [[languages[0], t] for t in targets]
        data = multilingual(data, pairs, {t: ids[piece] for t, piece in targets.items()}, str(folder / "vocab.json"))
    ckpt = Checkpoint(model_cfg, fine_tuning_config(model_cfg), data, tokenizer, weights, search=search)
    ckpt.build_model(weights_file)  # the weights fit the architecture
    return Imported(ckpt, folder, weights_file, notes)


def describe(imported: Imported, out: Path) -> str:
    """One line on what was written."""
    cfg, ckpt = imported.checkpoint.model_config, imported.checkpoint
    params = sum(t.numel() for name, t in ckpt.weights.items() if name != "output_bias")
    data = ckpt.data
    direction = f"{data.src} into {len(data.targets)} languages" if data.tags else data.direction
    return (f"imported {imported.folder} ({direction}, {cfg.encoder_layers}+{cfg.decoder_layers} layers, "
            f"d_model {cfg.d_model}, {cfg.activation}, {params / 1e6:.1f}M parameters, {cfg.vocab_size:,} tokens) "
            f"into {out}")


# -- the files -------------------------------------------------------------------------------------


def read_json(path: Path, required: bool = True) -> dict[str, Any]:
    """A JSON object from `path` ({} for a missing optional file); InputError naming the file otherwise."""
    if not path.is_file():
        if not required:
            return {}
        raise InputError(f"{path}: no such file; a Marian (OPUS-MT) folder has config.json, the weights, "
                         f"source.spm, target.spm and vocab.json: {get_one(path.parent, DOWNLOADED, FAMILY)}")
    return parse_json(path, MAX_BYTES.get(path.name, MAX_CONFIG_BYTES))


def check_marian(config: dict[str, Any], path: Path) -> None:
    model_type = config.get("model_type")
    if model_type != "marian":
        what = f"a {shown(model_type)} model" if model_type else "a config without model_type"
        raise InputError(f"{path}: {what}, not Marian; `nmt import marian` reads Marian (OPUS-MT) models only")
    for key in FLAGS:
        if not isinstance(config.get(key, True), bool):
            raise InputError(f"{path}: {key} is {shown(config[key])}, not true or false; download the folder again")
    vocab, decoder_vocab = int_value(config, "vocab_size", path, low=1), config.get("decoder_vocab_size")
    if decoder_vocab is not None and decoder_vocab != vocab:
        raise InputError(f"{path}: decoder_vocab_size {shown(decoder_vocab)} differs from vocab_size {shown(vocab)}: "
                         "separate vocabularies, which nmt cannot import yet")


def read_vocab(folder: Path, tok_config: dict[str, Any]) -> dict[str, int]:
    """vocab.json: each piece's Marian id, the ids 0..V-1 each once; one vocabulary for both sides."""
    for name in ("source.spm", "target.spm"):
        if not (folder / name).is_file():
            raise InputError(f"{folder / name}: no such file; nmt imports Marian models whose tokenizer is "
                             f"SentencePiece (source.spm and target.spm), as OPUS-MT's are: "
                             f"{get_one(folder, DOWNLOADED, FAMILY)}")
    if tok_config.get("separate_vocabs") or (folder / "target_vocab.json").is_file():
        raise InputError(f"{folder / 'target_vocab.json'}: separate source and target vocabularies "
                         "(separate_vocabs), which nmt cannot import yet")
    path = folder / "vocab.json"
    vocab = read_json(path)
    ids = list(vocab.values())
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids) or sorted(ids) != list(range(len(ids))):
        raise InputError(f"{path}: not a table of pieces to the ids 0..{len(ids) - 1}, each once; download the "
                         "folder again")
    return vocab


def special_ids(config: dict[str, Any], path: Path, vocab: dict[str, int],
                tok_config: dict[str, Any]) -> dict[str, int]:
    """Marian's pad, unk, eos and decoder-start ids."""
    last = len(vocab) - 1
    unk_token = tok_config.get("unk_token", "<unk>")
    if isinstance(unk_token, dict):  # an AddedToken, serialised
        unk_token = unk_token.get("content")
    if not isinstance(unk_token, str) or unk_token not in vocab:
        raise InputError(f"{path.parent / 'vocab.json'}: no unknown-word piece {shown(unk_token)}; download the "
                         "folder again")
    pad = int_value(config, "pad_token_id", path, high=last)
    ids = {"pad": pad, "unk": vocab[unk_token], "eos": int_value(config, "eos_token_id", path, high=last),
           "start": int_value(config, "decoder_start_token_id", path, pad, high=last)}
    if len({ids["pad"], ids["unk"], ids["eos"]}) < 3:
        raise InputError(f"{path}: pad, unk and eos share ids ({ids}); nmt needs them distinct")
    return ids


def nmt_rows(size: int, specials: dict[str, int]) -> list[int]:
    """The Marian id (row) of each nmt id: the specials in nmt's places, then every other id in order."""
    rows = [0] * 4
    rows[PAD], rows[UNK], rows[BOS], rows[EOS] = specials["pad"], specials["unk"], specials["start"], specials["eos"]
    taken = {specials["pad"], specials["unk"], specials["eos"]}
    return rows + [i for i in range(size) if i not in taken]


def pieces(vocab: dict[str, int], rows: list[int]) -> list[str]:
    """The piece of each nmt id; BOS, which repeats the decoder-start row, gets a name of its own."""
    piece_of = {i: p for p, i in vocab.items()}
    table = [piece_of[r] for r in rows]
    table[BOS] = next(name for name in ("<s>", "<nmt:bos>", f"<nmt:{BOS}>") if name not in vocab)
    return table


def model_config(config: dict[str, Any], path: Path, vocab_size: int) -> ModelConfig:
    """nmt's ModelConfig of config.json's Marian architecture."""
    sizes = {key: int_value(config, key, path, low=1) for key in (
        "d_model", "encoder_attention_heads", "decoder_attention_heads", "encoder_layers", "decoder_layers",
        "encoder_ffn_dim", "decoder_ffn_dim")}
    for ours, enc, dec in (("number of heads", "encoder_attention_heads", "decoder_attention_heads"),
                           ("feed-forward width", "encoder_ffn_dim", "decoder_ffn_dim")):
        if sizes[enc] != sizes[dec]:
            raise InputError(f"{path}: {enc} {sizes[enc]} differs from {dec} {sizes[dec]}; nmt's encoder "
                             f"and decoder share one {ours}")
    if sizes["d_model"] % sizes["encoder_attention_heads"]:
        raise InputError(f"{path}: encoder_attention_heads {sizes['encoder_attention_heads']} does not divide "
                         f"d_model {sizes['d_model']}; download the folder again")
    activation = config.get("activation_function", "gelu")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise InputError(f"{path}: activation_function {shown(activation)} has no nmt equivalent (nmt has "
                         f"{', '.join(sorted(ACTIVATIONS))})")
    values = dict(
        vocab_size=vocab_size, d_model=sizes["d_model"], n_heads=sizes["encoder_attention_heads"],
        encoder_layers=sizes["encoder_layers"], decoder_layers=sizes["decoder_layers"], d_ff=sizes["encoder_ffn_dim"],
        **{key: float_value(config, key, path, default, low=0.0, high=1.0)
           for key, default in (("dropout", 0.1), ("attention_dropout", 0.0), ("activation_dropout", 0.0))},
        max_positions=int_value(config, "max_position_embeddings", path, low=1, high=MAX_POSITIONS),
        positions="sinusoidal-halves", norm="post", activation=ACTIVATIONS[activation],
        scale_embeddings=bool(config.get("scale_embedding", False)), output_bias=True)
    try:
        return Overrides(ModelConfig, values).apply()
    except ConfigError as e:
        raise InputError(f"{path}: {named_as_fields(str(e), ModelConfig)}") from None


def fine_tuning_config(model_cfg: ModelConfig) -> TrainConfig:
    """The training recipe stored with an imported model: FINE_TUNING, with the learning-rate factor that
    peaks at FINE_TUNING_PEAK_LR after the warmup (lr = factor * d_model^-0.5 * warmup^-0.5 there)."""
    factor = FINE_TUNING_PEAK_LR * math.sqrt(model_cfg.d_model * FINE_TUNING["warmup"])
    return Overrides(TrainConfig, {**FINE_TUNING, "lr_factor": round(factor, 6)}).apply()


def read_weights(folder: Path, how: str) -> tuple[Path, dict[str, torch.Tensor]]:
    """A folder's weights (`WEIGHT_FILES`, the first there), by their transformers names without the "model."
    prefix, as finite float32 tensors; `how`: how to download them, for the message where there are none."""
    found = [folder / name for name in WEIGHT_FILES if (folder / name).is_file()]
    if not found:
        raise InputError(f"{folder}: no model weights ({' or '.join(WEIGHT_FILES)}); nmt reads the PyTorch or "
                         f"safetensors weights: {how}")
    path = found[0]
    if path.suffix != ".safetensors":
        return read_weights_file(path)
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ImportError:
        if len(found) > 1:  # the folder has pytorch_model.bin too
            return read_weights_file(found[1])
        raise ConfigError(f"{path}: reading safetensors weights needs the safetensors package: "
                          "pip install 'nmt-toolkit[import]'") from None
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise InputError(f"{path}: not readable safetensors weights ({one_line(e, 160)}); download it again") from None
    return path, by_marian_name(state, path)


def read_weights_file(path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    """pytorch_model.bin, as data only (`weights_only`: a file from the internet never runs code)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # weights_only refuses code, so any failure here means a bad file
        raise InputError(f"{path}: not readable PyTorch weights ({load_failure(e)}); download it again") from None
    return path, by_marian_name(state, path)


def by_marian_name(state: object, path: Path) -> dict[str, torch.Tensor]:
    """The tensors by their names without the "model." prefix, as finite float32."""
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InputError(f"{path}: not a table of tensors; download it again")
    out = {}
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise InputError(f"{path}: {name} holds NaN or infinite values; download it again")
        out[name[len("model."):] if name.startswith("model.") else name] = tensor.float()
    return out


def check_sizes(cfg: ModelConfig, marian: dict[str, torch.Tensor], path: Path, config_path: Path) -> None:
    """config.json's sizes against the weights' (which the file's size bounds), before nmt's model of them is
    built: the layers of each stack, the width and the feed-forward width."""
    held = {key: len({name.split(".")[2] for name in marian if name.startswith(f"{stack}.layers.")})
            for key, stack in (("encoder_layers", "encoder"), ("decoder_layers", "decoder"))}
    table = next((marian[name] for name in EMBEDDINGS if name in marian), None)
    fc1 = marian.get("encoder.layers.0.fc1.weight")
    if table is not None and table.dim() == 2:
        held["d_model"] = table.shape[1]
    if fc1 is not None and fc1.dim() == 2:
        held["encoder_ffn_dim"] = fc1.shape[0]
    given = {"encoder_layers": cfg.encoder_layers, "decoder_layers": cfg.decoder_layers, "d_model": cfg.d_model,
             "encoder_ffn_dim": cfg.d_ff}
    for key, size in held.items():
        if given[key] != size:
            raise InputError(f"{config_path}: {key} is {given[key]}, but the weights of {path} have {size}; the "
                             "folder mixes files of two models: download it again")


def marian_name(nmt_name: str) -> Optional[str]:
    """The transformers name (without "model.") of an nmt layer weight, e.g. decoder.0.cross_block.norm.weight
    -> decoder.layers.0.encoder_attn_layer_norm.weight; None for the others."""
    stack, _, rest = nmt_name.partition(".")
    index, _, rest = rest.partition(".")
    part, _, param = rest.rpartition(".")
    parts = {"encoder": ENCODER_PARTS, "decoder": DECODER_PARTS}.get(stack)
    if parts is None or not index.isdigit():
        return None
    theirs = {ours: marian for marian, ours in parts.items()}.get(part)
    return None if theirs is None else f"{stack}.layers.{index}.{theirs}.{param}"


def embedding_table(marian: dict[str, torch.Tensor], path: Path, config: dict[str, Any],
                    config_path: Path) -> tuple[torch.Tensor, Optional[torch.Tensor], list[str]]:
    """The input table of nmt's model (the source's and the target's embeddings), the output projection where it
    is not that table (None: tied), and the names they have in the weights. transformers takes the source's and
    the target's from `shared`, or with share_encoder_decoder_embeddings false from `encoder.embed_tokens` and
    `decoder.embed_tokens`, and the output's from the target's, or with tie_word_embeddings false from `lm_head`
    (OPUS-MT's tc-big models): the input tables that the weights hold must be one table, and those the flags name
    must be there (transformers would start them at random)."""
    embeddings = [name for name in EMBEDDINGS if name in marian]
    if not embeddings or embeddings == [EMBEDDINGS[3]]:
        raise InputError(f"{path}: no embedding table ({', '.join(EMBEDDINGS[:3])}); not the weights of a Marian "
                         "model")
    for key, names in zip(FLAGS, (EMBEDDINGS[1:3], EMBEDDINGS[3:])):
        lacking = [name for name in names if config.get(key, True) is False and name not in marian]
        if lacking:
            raise InputError(f"{path}: lacks {lacking[0]}, which {config_path.name}'s {key} false asks for; "
                             "download the folder again")
    table = marian[embeddings[0]]
    for name in embeddings[1:]:
        if name != EMBEDDINGS[3] and not torch.equal(marian[name], table):
            raise InputError(f"{path}: {name} differs from {embeddings[0]}: a source and a target embedding table "
                             f"of their own ({FLAGS[0]} false), which nmt's model (one input table) cannot express")
    head = marian.get(EMBEDDINGS[3])
    untied = head is not None and not (head.shape == table.shape and torch.equal(head, table))
    if untied and config.get(FLAGS[1], True) is not False:  # transformers ties them: it would not read this lm_head
        raise InputError(f"{path}: {EMBEDDINGS[3]} differs from {embeddings[0]}, though tied by its config "
                         f"({config_path.name} has no {FLAGS[1]} false); the folder mixes files of two models")
    return table, head if untied else None, embeddings


def nmt_weights(marian: dict[str, torch.Tensor], cfg: ModelConfig, rows: list[int], path: Path,
                config_path: Path, config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """nmt's state dict from Marian's weights: layers renamed, embedding rows and output bias renumbered."""
    with torch.device("meta"):  # the shapes only: nothing allocated before they match the weights on disk
        expected = Transformer(cfg).state_dict()
    table, head, embeddings = embedding_table(marian, path, config, config_path)
    size = len(rows) - 1  # nmt repeats the decoder-start row as BOS
    for name, matrix in (("the embedding table", table), ("lm_head", head)):
        if matrix is not None and tuple(matrix.shape) != (size, cfg.d_model):
            raise InputError(f"{path}: {name} is {tuple(matrix.shape)}, but {config_path} says "
                             f"({size}, {cfg.d_model}); the folder mixes files of two models")
    index = torch.tensor(rows)
    bias = marian.get("final_logits_bias", torch.zeros(1, size)).reshape(-1)
    if bias.numel() != size:
        raise InputError(f"{path}: final_logits_bias has {bias.numel()} entries, the vocabulary {size}")
    out = {"embed.weight": table[index].clone(), "output_bias": bias[index].clone()}
    if head is not None:
        out["output_weight"] = head[index].clone()  # the untied output projection (cfg.tied_output false)
    out["output_bias"][[PAD, BOS]] += NEVER_GENERATED_BIAS
    used = set(embeddings) | {"final_logits_bias"}
    for name, like in expected.items():
        if name in out:
            continue
        theirs = marian_name(name)
        if theirs is None or theirs not in marian:
            raise InputError(f"{path}: lacks {theirs or name}; not the weights of the Marian model {config_path} "
                             "describes")
        if marian[theirs].shape != like.shape:
            raise InputError(f"{path}: {theirs} is {tuple(marian[theirs].shape)}, but {config_path} makes it "
                             f"{tuple(like.shape)}; the folder mixes files of two models")
        out[name] = marian[theirs]
        used.add(theirs)
    unknown = sorted(k for k in marian if k not in used and not IGNORED.match(k))
    if unknown:
        raise InputError(f"{path}: weights nmt's Marian model has no place for ({', '.join(unknown[:3])}"
                         f"{' ...' if len(unknown) > 3 else ''}); not a Marian model nmt can import")
    return out


def spm_tokenizer_data(folder: Path, table: list[str]) -> dict[str, Any]:
    """nmt's tokenizer data form: the two SentencePiece models over the table of pieces, each checked."""
    data: dict[str, Any] = {"kind": SENTENCEPIECE, "version": 1}
    for side, name in (("source", "source.spm"), ("target", "target.spm")):
        path = folder / name
        model = read_bounded(path, MAX_BYTES[name])
        try:
            load_tokenizer({**data, "source": model, "pieces": table}, str(path))
        except InputError:
            raise InputError(f"{path}: not a SentencePiece model; nmt imports Marian models whose tokenizer is "
                             "SentencePiece (source.spm and target.spm), as OPUS-MT's are") from None
        data[side] = model
    data["pieces"] = table
    load_tokenizer(data, str(folder))
    return data


