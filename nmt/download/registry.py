"""Finding a dataset: every known spec by name, by family and language pair (`--pair`)."""

from __future__ import annotations

import functools
import re

from nmt.core.errors import InputError
from nmt.download.datasets import ALL
from nmt.download.spec import DatasetSpec, check_spec

_PAIR_SYNTAX = re.compile(r"[a-z]{2,3}-[a-z]{2,3}")


@functools.cache
def registry() -> dict[str, DatasetSpec]:
    """Every known dataset by name, in the order of `nmt.download.datasets.ALL`, each checked."""
    for spec in ALL:
        check_spec(spec)
    return {spec.name: spec for spec in ALL}


def families() -> dict[str, dict[str, DatasetSpec]]:
    """Family -> language pair -> dataset, in registry order (the first pair is the default)."""
    out: dict[str, dict[str, DatasetSpec]] = {}
    for spec in registry().values():
        out.setdefault(spec.group, {})[spec.pair] = spec
    return out


def _family_pair(family: str, pairs: dict[str, DatasetSpec], pair: str | None) -> DatasetSpec:
    """The dataset of `family` for `pair` (None: the family's first pair)."""
    if pair is None:
        return next(iter(pairs.values()))
    wanted = pair.strip().lower()
    if not _PAIR_SYNTAX.fullmatch(wanted):
        raise InputError(
            f"`pair` {pair!r}: not a language pair; write SOURCE-TARGET, for {family} one of: "
            f"{', '.join(pairs)}"
        )
    if wanted not in pairs:
        raise InputError(f"`pair` {pair}: {family} has no {wanted} data; choose one of: {', '.join(pairs)}")
    return pairs[wanted]


def resolve(name: str | DatasetSpec, pair: str | None = None) -> DatasetSpec:
    """The dataset that NAME and `--pair` designate; InputError naming the choices otherwise.

    NAME is a family (`wmt14`, with `pair` or its default pair), a full name (`wmt14-en-fr`;
    `wmt14-en-de` is `wmt14`), or a DatasetSpec. A `pair` that contradicts a full name is an error.
    """
    if isinstance(name, DatasetSpec):
        check_spec(name)
        spec = name
    else:
        groups = families()
        if name in groups:
            return _family_pair(name, groups[name], pair)
        full = {f"{s.group}-{s.pair}": s for s in registry().values()}
        found = registry().get(name) or full.get(name)
        if found is None:
            paired = sorted(g for g, pairs in groups.items() if len(pairs) > 1)  # the families `pair` completes
            raise InputError(
                f"unknown dataset {name!r}; choose one of: {', '.join(paired)} "
                f"(with `pair`), or {', '.join(n for n in registry() if n not in paired)} "
                "(see nmt download --list)"
            )
        spec = found
    if pair is not None and pair.strip().lower() != spec.pair:
        raise InputError(
            f"`pair` {pair}: dataset {spec.name} is {spec.pair}; drop `pair`, or name the family: "
            f"nmt download {spec.group} --pair {pair}"
        )
    return spec
