"""What a model was trained on, as checkpoints record it and data stores declare it: the languages, the
vocabulary size and the tokenizer (its kind and sha256). Resuming, fine-tuning, ensembles and averages
compare it, so that models and data that do not fit together are refused."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from nmt.core.errors import ConfigError, DataError, ref

# The key of a tokenizer's digest for the kinds nmt had before it knew several: the records of older stores
# and checkpoints carry it, and an older nmt reads it. This is the records' format, not the kinds' behaviour:
# every later kind is recorded under "tokenizer" and "tokenizer_sha256", and adding one changes nothing here.
LEGACY_KEYS = {"youtokentome": "bpe_sha256"}
# A language code as nmt keeps it, lower-cased: ISO 639 (en, eng), with subtags (pt-br, zh_hant), OPUS-MT's groups
# (mul, gmw). Never a "+": a multilingual model's side joins its codes with it.
LANGUAGE = re.compile(r"[a-z]{2,8}(?:[-_][a-z0-9]{1,8}){0,3}")


TAG_PIECE = re.compile(r">>[^<>\s]+<<")


def tag_piece(lang: str) -> str:
    """How a target-language tag is written where a token needs a name (vocabularies, CTranslate2): OPUS-MT's."""
    return f">>{lang}<<"


# How the synthetic tag (tagged back-translation, Caswell et al. 2019: put first in the sources of the synthetic
# pairs a model was trained on) is written where a token needs a name; an id of its own, never text.
SYNTHETIC_PIECE = "<BT>"


def legacy_identity(kind: str, sha256: str) -> dict[str, str]:
    """The record of a tokenizer under its kind's legacy key (see LEGACY_KEYS); {} for the other kinds."""
    return {LEGACY_KEYS[kind]: sha256} if kind in LEGACY_KEYS else {}


def tokenizer_identity(kind: str, sha256: str) -> dict[str, str]:
    """How a store or checkpoint records a tokenizer. For youtokentome the key nmt has always used
    ("bpe_sha256"), so that older stores and checkpoints still match."""
    return legacy_identity(kind, sha256) or {"tokenizer": kind, "tokenizer_sha256": sha256}


@dataclass(frozen=True)
class DataIdentity:
    """What a checkpoint remembers of its data, to refuse resuming (or fine-tuning, or ensembling) on what
    does not fit: the languages, the vocabulary size and the tokenizer's kind and sha256."""

    src: str
    tgt: str
    vocab_size: int
    tokenizer: str  # its kind: youtokentome or sentencepiece
    tokenizer_sha256: str
    # A multilingual model: every direction it was trained on, in order (() for the one direction src-tgt; then
    # src and tgt are the sides' codes joined with "+", e.g. "de+fr+cs"), and the token id put first in every
    # source to ask for each target language (() where there is one target: nothing to choose).
    pairs: tuple[tuple[str, str], ...] = ()
    tags: tuple[tuple[str, int], ...] = ()
    # The id put first in the sources of the synthetic pairs the model learnt from (`nmt prepare --synthetic`,
    # tagged back-translation); None: no synthetic pairs, or untagged. Never put in a source to translate.
    synthetic: Optional[int] = None

    def to_dict(self) -> dict[str, Any]:
        """As stored in checkpoints (a youtokentome digest under the key nmt has always used, bpe_sha256)."""
        extra: dict[str, Any] = {}
        if self.pairs:
            extra["pairs"] = [list(p) for p in self.pairs]
        if self.tags:
            extra["tags"] = dict(self.tags)
        if self.synthetic is not None:
            extra["synthetic_tag"] = self.synthetic
        return {"src": self.src, "tgt": self.tgt, "vocab_size": self.vocab_size,
                **tokenizer_identity(self.tokenizer, self.tokenizer_sha256), **extra}

    @property
    def directions(self) -> tuple[tuple[str, str], ...]:
        """Every (source, target) the model translates."""
        return self.pairs or ((self.src, self.tgt),)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t for _, t in self.directions))

    def choose(self, src: Optional[str], tgt: Optional[str], where: str) -> tuple[str, str]:
        """The direction (source, target) that `src` and `tgt` (either may be None: the only one) pick among the
        model's; ConfigError naming `where` (the model) and the directions it knows otherwise."""
        for name, code in (("src_lang", src), ("tgt_lang", tgt)):
            if code is not None and not isinstance(code, str):
                raise ConfigError(f"{ref(name)} {code!r:.40}: give a language code, a str such as 'fr'")
        src, tgt = (None if code is None else code.strip().lower() for code in (src, tgt))
        known = ", ".join(f"{s}-{t}" for s, t in self.directions)
        tgt = primary(tgt, self.targets)
        if tgt is None:
            if len(self.targets) > 1:
                raise ConfigError(f"{where} translates into {', '.join(self.targets)}: choose one with "
                                  f"{ref('tgt_lang')}")
            tgt = self.targets[0]
        if tgt not in self.targets:
            raise ConfigError(f"{ref('tgt_lang')} {tgt!r:.40}: {where} translates {known} only")
        sources = [s for s, t in self.directions if t == tgt]
        src = primary(src, sources)
        if src is not None and src not in sources:
            raise ConfigError(f"{ref('src_lang')} {src!r:.40}: {where} translates {known} only")
        return src or (sources[0] if len(sources) == 1 else "+".join(sources)), tgt

    def tag(self, tgt: str) -> Optional[int]:
        """The token id that asks for target `tgt` (None: the model has one target)."""
        return dict(self.tags).get(tgt)

    @classmethod
    def from_dict(cls, data: object, where: str) -> DataIdentity:
        """From `to_dict`'s form; DataError naming `where` for anything else."""
        fields = data if isinstance(data, dict) else {}
        legacy = next((kind for kind, key in LEGACY_KEYS.items() if key in fields), None)
        kind = legacy if legacy is not None else fields.get("tokenizer")
        sha = fields[LEGACY_KEYS[legacy]] if legacy is not None else fields.get("tokenizer_sha256")
        found = cls(fields.get("src"), fields.get("tgt"), fields.get("vocab_size"), kind, sha)  # type: ignore[arg-type]
        if not (all(isinstance(v, str) and v for v in (found.src, found.tgt, found.tokenizer, found.tokenizer_sha256))
                and isinstance(found.vocab_size, int) and not isinstance(found.vocab_size, bool)
                and found.vocab_size > 0):
            raise DataError(f"{where}: its record of the data (languages, vocabulary size, tokenizer) is malformed "
                            f"({data!r:.120}); the file is damaged")
        if "pairs" in fields or "tags" in fields:
            found = multilingual(found, fields.get("pairs"), fields.get("tags"), where)
        if "synthetic_tag" in fields:
            found = synthetic(found, fields["synthetic_tag"], where)
        return found

    @property
    def direction(self) -> str:
        return f"{self.src}-{self.tgt}"


def primary(code: Optional[str], known: Sequence[str]) -> Optional[str]:
    """`code`, or its primary subtag where only that is known (fr-fr, fr_ca -> fr): what people type for a language
    that a model names without a region."""
    if code is None or code in known:
        return code
    first = re.split(r"[-_]", code, maxsplit=1)[0]
    return first if first in known else code


def synthetic(identity: DataIdentity, tag: object, where: str) -> DataIdentity:
    """`identity` with the synthetic tag `tag`, checked: an id of the vocabulary that is no target's tag."""
    if not (isinstance(tag, int) and not isinstance(tag, bool) and 0 <= tag < identity.vocab_size
            and tag not in dict(identity.tags).values()):
        raise DataError(f"{where}: its synthetic tag {tag!r:.40} is no id of its own in the vocabulary of "
                        f"{identity.vocab_size}; the file is damaged")
    return dataclasses.replace(identity, synthetic=tag)


def multilingual(identity: DataIdentity, pairs: object, tags: object, where: str) -> DataIdentity:
    """`identity` with the directions `pairs` ([[src, tgt], ...]) and the target tags `tags` ({tgt: id}), checked:
    distinct language codes, src and tgt the sides' codes joined with "+", a tag for every target (when there
    are several), ids inside the vocabulary and distinct. DataError naming `where` otherwise."""
    def bad(why: str) -> DataError:
        return DataError(f"{where}: its record of a multilingual model's languages is malformed ({why}); the file "
                         "is damaged")

    def is_pair(p: object) -> bool:
        return (isinstance(p, (list, tuple)) and len(p) == 2 and p[0] != p[1]
                and all(isinstance(c, str) and LANGUAGE.fullmatch(c) for c in p))

    if not (isinstance(pairs, list) and pairs and all(is_pair(p) for p in pairs)):
        raise bad(f"pairs {pairs!r:.80}")
    found = tuple((str(s), str(t)) for s, t in pairs)
    if len(set(found)) != len(found):
        raise bad("a direction twice")
    sources, targets = (tuple(dict.fromkeys(p[i] for p in found)) for i in (0, 1))
    if (identity.src, identity.tgt) != ("+".join(sources), "+".join(targets)):
        raise bad(f"src {identity.src!r} and tgt {identity.tgt!r} are not the pairs' languages")
    tags = {} if tags is None else tags
    if not (isinstance(tags, dict) and all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                           and 0 <= v < identity.vocab_size for k, v in tags.items())):
        raise bad(f"tags {tags!r:.80}")
    if (set(tags) != set(targets) if len(targets) > 1 else tags) or len(set(tags.values())) != len(tags):
        raise bad("not one distinct tag per target language")
    return DataIdentity(identity.src, identity.tgt, identity.vocab_size, identity.tokenizer, identity.tokenizer_sha256,
                        found, tuple((t, tags[t]) for t in targets if t in tags))
