"""What `nmt download --list` shows: one summary per dataset, and its table row."""

from __future__ import annotations

from dataclasses import dataclass

from nmt.download.registry import registry
from nmt.download.spec import DatasetSpec


@dataclass
class DatasetInfo:
    """What `nmt download --list` shows about one dataset."""

    name: str
    langs: str  # "en-de"; a monolingual dataset's "en, de"
    description: str
    splits: dict[str, int | None]  # standard split -> expected lines (None: not fixed)
    extra_splits: dict[str, int | None]  # fetched with --extra-tests
    download_bytes: int | None  # total of the standard files, None when a size is unknown
    size: str  # human-readable download size ("1.3 MB", "about 1.6 GB of archives", "unknown")
    licence: str
    sources: tuple[str, ...]  # URLs of every file, extra test sets included
    homepage: str
    monolingual: bool = False  # its splits' lines are those each language reads, before deduplication


def human_bytes(n: float) -> str:
    """1296271 -> '1.3 MB'."""
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def dataset_info(spec: DatasetSpec) -> DatasetInfo:
    """Summarise a spec for listing."""
    sizes = [f.size for f in spec.files(spec.selected(False))]
    total = None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)
    return DatasetInfo(
        name=spec.name,
        langs=f"{spec.src}, {spec.tgt}" if spec.monolingual else spec.pair,
        description=spec.description,
        splits={s.name: s.lines for s in spec.splits if not s.extra},
        extra_splits={s.name: s.lines for s in spec.splits if s.extra},
        download_bytes=total,
        size=human_bytes(total) if total is not None else (spec.approx_size or "unknown"),
        licence=spec.licence,
        sources=tuple(f.url for f in spec.files(spec.splits)),
        homepage=spec.homepage,
        monolingual=spec.monolingual,
    )


def list_datasets() -> list[DatasetInfo]:
    """Every dataset `download` knows, for `nmt download --list`."""
    return [dataset_info(spec) for spec in registry().values()]


def _splits_text(splits: dict[str, int | None]) -> str:
    """{"train": 29000, "valid": None} -> "train 29,000, valid ?"."""
    return ", ".join(f"{name} {n:,}" if n is not None else f"{name} ?" for name, n in splits.items())


def describe(info: DatasetInfo) -> tuple[str, str, str, str, str]:
    """One `--list` table row: (name, languages, size, licence, description with its splits)."""
    text = f"{info.description}. Lines: {_splits_text(info.splits)}"
    if info.monolingual:
        text += " a language, before deduplication"
    if info.extra_splits:
        text += f"; with `extra_tests` also {_splits_text(info.extra_splits)}"
    return info.name, info.langs, info.size, info.licence, text
