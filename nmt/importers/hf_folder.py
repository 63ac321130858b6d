"""The files of a Hugging Face model folder, read within bounds: a file no larger than such a file ever is,
JSON that cannot exhaust the parser, each value of a config of its type and range, checked before anything
of the size it names is allocated; what they record of the model's languages (tokenizer_config.json, the
folder's name, OPUS-MT's target-language tokens) and of its search (generation_config.json). Every failure is
an InputError naming the file (and the key). Where a folder is missing, `download_command` says how to get it
with huggingface_hub's `hf`.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from nmt.config import INT_MAX, MAX_BEAM, MAX_LENPEN, Overrides, SearchConfig, named_as_fields
from nmt.core.errors import ConfigError, InputError, one_line
from nmt.core.identity import LANGUAGE

AGAIN = "download the folder again"
TARGET_LANGUAGE_TOKEN = re.compile(r"^>>(.+)<<$")  # MarianTokenizer's supported_language_codes (OPUS-MT's)
FOLDER_LANGUAGES = re.compile(r"(?:^|[-_])([a-z]{2,3})-([a-z]{2,3})$")  # opus-mt-en-de, opus-mt-tc-big-en-fr
FOLDER_SOURCE = re.compile(r"(?:^|[-_])([a-z]{2,3})-[a-z]+$")  # a multilingual model's: opus-mt-en-romance
# A model of the Hugging Face Hub as a user names it: owner/name (Helsinki-NLP/opus-mt-fr-en).
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


def download_command(repo: str, files: Sequence[str], local_dir: str) -> str:
    """The command of huggingface_hub's CLI (`hf`, huggingface_hub >= 1.0; it replaced `huggingface-cli`) that
    downloads `files` of the Hub model `repo` into the folder `local_dir`. Named files (not --include patterns,
    whose second pattern `hf` would read as a file name) come from one revision; a file the model lacks is
    skipped (`hf download --help`: FILENAMES...; --local-dir)."""
    return " ".join(["hf download", shlex.quote(repo), *files, "--local-dir", shlex.quote(local_dir)])


def hub_id(given: Path) -> Optional[str]:
    """`given` as the Hub model it names (owner/name) where it is no path here: not there, and its first part no
    folder either (models/x, with models/ a folder, is a missing folder)."""
    text = given.as_posix()
    if given.exists() or given.is_absolute() or not HUB_ID.fullmatch(text) or given.parent.is_dir():
        return None
    return text


def get_one(folder: Path, files: Sequence[str], family: str) -> str:
    """How to download into `folder` the Hub model it names: `family` is the family's models' name
    (Helsinki-NLP/opus-mt-SRC-TGT), and a folder named as they are (opus-mt-fr-en) is one of them
    (Helsinki-NLP/opus-mt-fr-en)."""
    owner, _, name = family.partition("/")
    ours = folder.name.lower().startswith(name.split("SRC")[0].lower())
    return f"download it with `{download_command(f'{owner}/{folder.name}' if ours else family, files, str(folder))}`"


def not_a_folder(folder: Path, files: Sequence[str], family: str, command: str) -> str:
    """The message of `command` (nmt import marian) for a FOLDER that is none: a file, a Hub model's id
    (Helsinki-NLP/opus-mt-fr-en: the command for it, into a folder of its name), or missing."""
    repo = hub_id(folder)
    if folder.exists() or repo is None:
        what = "not a folder" if folder.exists() else "no such folder"
        return f"{folder}: {what}; `{command}` reads a model's folder: {get_one(folder, files, family)}"
    local = repo.split("/")[1]
    return (f"{folder}: no such folder; a model of the Hugging Face Hub is imported from a folder it is downloaded "
            f"into: `{download_command(repo, files, local)}`, then `{command} {local}`")


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of `path`; InputError naming it when it holds more than `limit` (never read whole then)."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})") from None
    if len(data) > limit:
        raise InputError(f"{path}: larger than {limit / 2**20:g} MiB, more than a model folder's {path.name} ever "
                         f"is; {AGAIN}")
    return data


def parse_json(path: Path, limit: int) -> dict[str, Any]:
    """The JSON object in `path`, a file of at most `limit` bytes."""
    try:
        data = json.loads(read_bounded(path, limit).decode("utf-8"))
    except (ValueError, RecursionError) as e:  # bad UTF-8 or JSON, a 5,000-digit number, nesting 100,000 deep
        digits = "integer string conversion" in str(e)
        why = f"a number of more than {sys.get_int_max_str_digits()} digits" if digits else one_line(e)
        raise InputError(f"{path}: not valid JSON ({why}); {AGAIN}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object; {AGAIN}")
    return data


def shown(value: object) -> str:
    """A value read from a file, for a message: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def int_value(config: dict[str, Any], key: str, path: Path, default: Optional[int] = None, low: int = 0,
              high: int = INT_MAX) -> int:
    """config's whole number `key` (or a list of one), from `low` to `high`."""
    value = config.get(key, default)
    if isinstance(value, list) and len(value) == 1:  # eos_token_id may be a list of one
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InputError(f"{path}: {key} is {shown(value)}, not a whole number from {low} to {high}; {AGAIN}")
    return value


def float_value(config: dict[str, Any], key: str, path: Path, default: float, low: float = -math.inf,
                high: float = math.inf) -> float:
    """config's finite number `key`, from `low` to `high`."""
    value = config.get(key, default)
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or not low <= value <= high):
        where = f" from {low:g} to {high:g}" if math.isfinite(low) or math.isfinite(high) else ""
        raise InputError(f"{path}: {key} is {shown(value)}, not a number{where}; {AGAIN}")
    return float(value)


def search_defaults(config: dict[str, Any], generation: dict[str, Any], folder: Path, pad: int,
                    notes: list[str]) -> Overrides[SearchConfig]:
    """The beam, length penalty, length limit and early stopping of a model's generation_config.json (`generation`,
    else of its `config`; `pad`: its pad id), as nmt's search options for transformers' generate: it divides a
    hypothesis' log-probability by len^length_penalty, len counting the generated tokens with EOS (nmt's
    --lenpen-type power), stops at max_length tokens with the decoder start, forcing EOS on the last (nmt's limit
    max_length - 2, + EOS, whatever the source's length), and its beam search goes on without early stopping
    (early_stopping false, its default: nmt's --no-early-stopping, `nmt.engines.search.beam_done`)."""
    where = folder / ("generation_config.json" if generation else "config.json")
    settings = {**config, **generation}
    values: dict[str, Any] = {"lenpen_type": "power", "lenpen": float_value(settings, "length_penalty", where, 1.0,
                                                                            -MAX_LENPEN, MAX_LENPEN)}
    if "num_beams" in settings:
        values["beam"] = int_value(settings, "num_beams", where, low=1, high=MAX_BEAM)
    if "max_length" in settings:
        values.update(max_len_a=0.0, max_len_b=max(int_value(settings, "max_length", where) - 2, 1))
    stopping = settings.get("early_stopping", False)
    if stopping not in (True, False, "never"):
        raise InputError(f"{where}: early_stopping is {shown(stopping)}, not true, false or \"never\"; download the "
                         "folder again")
    values["early_stopping"] = stopping is True
    ignored = [key for key, off in (("no_repeat_ngram_size", 0), ("repetition_penalty", 1.0), ("min_length", 0),
                                    ("do_sample", False)) if settings.get(key, off) not in (off, None)]
    bad = settings.get("bad_words_ids")
    if bad not in (None, [[pad]]):
        ignored.append("bad_words_ids (nmt never generates the pad piece; the others it does not ban)")
    if stopping == "never":
        ignored.append("early_stopping \"never\" (searched as false)")
    if "forced_eos_token_id" in settings and settings["forced_eos_token_id"] is None:
        ignored.append("no forced_eos_token_id (nmt ends a translation at its length limit with EOS)")
    if ignored:
        notes.append(f"note: {where.name} sets {', '.join(ignored)}, which nmt's search does not have; ignored")
    try:
        search = Overrides(SearchConfig, values)
        search.apply()
    except ConfigError as e:
        raise InputError(f"{where}: {named_as_fields(str(e), SearchConfig)}") from None
    return search


def find_source(folder: Path, tok_config: dict[str, Any], src: Optional[str], tgt: Optional[str],
                notes: list[str]) -> str:
    """A multilingual model's source: --src, else tokenizer_config.json's source_lang, else the folder's name
    (opus-mt-en-ROMANCE); lower-cased, a language code (an OPUS-MT group such as mul or gem is one). Its targets
    are its tags' (`find_targets`): --tgt is refused, for a translation chooses its target (--tgt-lang)."""
    if tgt is not None:
        raise InputError(f"`tgt` {shown(tgt)}: {folder} is a multilingual model, whose targets are its vocab.json's "
                         ">>xxx<< tokens (each translation chooses one: nmt translate --tgt-lang); leave `tgt` out")
    given, where = src, "`src`"
    if given is None and isinstance(tok_config.get("source_lang"), str) and tok_config["source_lang"]:
        given, where = tok_config["source_lang"], f"{folder / 'tokenizer_config.json'}: source_lang"
    named = FOLDER_SOURCE.search(folder.resolve().name.lower())
    if given is None and named is not None:
        given, where = named.group(1), str(folder)
        notes.append(f"note: source language {given} taken from the folder's name; give `src` to set it")
    if given is None:
        raise InputError(f"{folder}: the source language is not recorded (tokenizer_config.json has no "
                         "source_lang); give it: `src` en")
    if not LANGUAGE.fullmatch(given.lower()):
        raise InputError(f"{where} {shown(given)}: not a language code (such as en, eng or pt-br); give `src`")
    return given.lower()


def find_targets(pieces: list[str], src: str, path: Path, notes: list[str]) -> dict[str, str]:
    """A multilingual model's targets, in the order of their ids: language code (lower-cased) -> its tag piece
    (>>fra<< -> fra). A piece whose code is no language code, repeats one in other case or is the source's, is
    left out (a note says so); fewer than two targets are refused (nmt asks for a target only among several)."""
    targets: dict[str, str] = {}
    left: list[str] = []
    for piece in pieces:
        code = piece[2:-2].lower()  # a TARGET_LANGUAGE_TOKEN: >>code<<
        if LANGUAGE.fullmatch(code) and code not in targets and code != src:
            targets[code] = piece
        else:
            left.append(piece)
    if left:
        notes.append(f"note: {path.name}'s {', '.join(left[:3])}{' ...' if len(left) > 3 else ''} left out of the "
                     "target languages (not a language code, twice, or the source's)")
    if len(targets) < 2:
        raise InputError(f"{path}: target-language tokens {', '.join(pieces[:3])} give {len(targets)} target "
                         "language(s); nmt imports a multilingual model of two targets or more")
    notes.append(f"note: a multilingual model: {src} into {len(targets)} languages ({', '.join(list(targets)[:8])}"
                 f"{' ...' if len(targets) > 8 else ''}); choose one with nmt translate --tgt-lang")
    return targets


def find_languages(folder: Path, tok_config: dict[str, Any], src: Optional[str], tgt: Optional[str],
                   notes: list[str]) -> tuple[str, str]:
    """--src/--tgt, else tokenizer_config.json's source_lang/target_lang, else the folder's name (opus-mt-en-de);
    lower-cased (EN is en), each a language code (`LANGUAGE`), the two different."""
    found = {"src": src, "tgt": tgt}
    given = {key: f"`{key}`" for key, value in found.items() if value is not None}
    for key, config_key in (("src", "source_lang"), ("tgt", "target_lang")):
        if found[key] is None and isinstance(tok_config.get(config_key), str) and tok_config[config_key]:
            found[key] = tok_config[config_key]
            given[key] = f"{folder / 'tokenizer_config.json'}: {config_key}"
    named = FOLDER_LANGUAGES.search(folder.resolve().name.lower())
    from_name = (found["src"] is None or found["tgt"] is None) and named is not None
    if named and from_name:
        found = {"src": found["src"] or named.group(1), "tgt": found["tgt"] or named.group(2)}
    if found["src"] is None or found["tgt"] is None:
        raise InputError(f"{folder}: the languages are not recorded (tokenizer_config.json has no source_lang and "
                         "target_lang); give them: `src` en `tgt` de")
    src, tgt = found["src"].lower(), found["tgt"].lower()
    for key, value in (("src", src), ("tgt", tgt)):
        if not LANGUAGE.fullmatch(value):
            raise InputError(f"{given.get(key, folder)} {shown(found[key])}: not a language code (such as en, eng or "
                             f"pt-br); give `{key}`")
    if src == tgt:
        raise InputError(f"`src` and `tgt` are both {src!r}: a model translates between two languages; give them: "
                         "`src` en `tgt` de")
    if from_name:
        notes.append(f"note: languages {src}-{tgt} taken from the folder's name; give `src` and `tgt` to set them")
    return src, tgt
