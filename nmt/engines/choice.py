"""The engines that translate, behind one protocol (`Engine`) that `translate`, `eval` and `serve` use:
torch (`nmt.engines.torch_engine.TorchEngine`) and CTranslate2 (`nmt.engines.ct2_engine.CTranslate2Engine`,
on a conversion of the checkpoint kept in the user's cache). `open_engine` opens the one --engine names, or under auto
CTranslate2 where it is installed and can do what is asked (with the same results as torch), torch
otherwise, and says which (and why) on stderr once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import torch

from nmt.compute.device import native_bf16, precision_warning, resolve_precision, select_device
from nmt.compute.timing import translation_timing
from nmt.config import (
    InferenceConfig,
    ModelConfig,
    Overrides,
    Precision,
    SearchConfig,
    check_field,
    flag_of,
    from_dict,
    overrides,
)
from nmt.core.errors import ConfigError, InputError, OutputError, ref
from nmt.core.progress import Progress, ProgressFn, ignore
from nmt.engines.base import Engine
from nmt.engines.conversions import converted, rebuild
from nmt.engines.ct2_engine import CTranslate2Engine
from nmt.engines.ct2_export import NotExportable, read_meta, require_ctranslate2
from nmt.engines.decoding import changed
from nmt.engines.torch_engine import TorchEngine

ENGINES = ("torch", "ctranslate2")
Given = Union[Overrides[SearchConfig], SearchConfig]  # the options given over the model's defaults, or the search
# CTranslate2's compute type of each of nmt's number formats
COMPUTE_TYPES = {Precision.FP32: "float32", Precision.BF16: "bfloat16", Precision.FP16: "float16",
                 Precision.INT8: "int8"}


@dataclass(frozen=True)
class Needs:
    """What a command asks of an engine besides translations."""

    alignments: bool = False  # --alignments (both engines)
    attention: bool = False  # --attention heatmaps (torch only: CTranslate2 gives one averaged layer)


class Unsupported(Exception):
    """What CTranslate2 cannot do for this request (its message says what): under auto, torch translates."""


def open_engine(paths: Sequence[Path], search: Union[Overrides[SearchConfig], SearchConfig, None] = None,
                inference: Union[Overrides[InferenceConfig], InferenceConfig, None] = None,
                progress: ProgressFn = ignore, needs: Needs = Needs()) -> Engine:
    """The engine of `translate`, `eval` and `serve` for the checkpoint(s) `paths`, with the options the user gave
    (`search`, `inference`; --engine among them). --engine ctranslate2 asked of what it cannot do is a one-line
    ConfigError; auto then opens torch and says why on `progress`."""
    # the one place where what the caller gave is sorted out: the engines are opened with one form of each
    options = inference if isinstance(inference, InferenceConfig) else overrides(InferenceConfig, inference).apply()
    given = search if isinstance(search, SearchConfig) else overrides(SearchConfig, search)
    paths = [Path(p) for p in paths]
    device = select_device(options.gpus)
    if options.engine == "torch":
        return open_torch(paths, given, options, device, progress)
    explicit = options.engine == "ctranslate2"
    try:
        engine = open_ctranslate2(paths, given, options, device, progress, needs, explicit)
    except Unsupported as e:
        if explicit:
            raise ConfigError(f"{ref('engine')} ctranslate2: {e}; use {ref('engine')} torch") from None
        if options.inter_threads > 1:  # an option that would do nothing
            raise ConfigError(f"{ref('inter_threads')} {options.inter_threads} needs the CTranslate2 engine, and "
                              f"{e}; leave {ref('inter_threads')} out") from None
        translator = open_torch(paths, given, options, device, progress)  # its errors first: said once opened
        progress(Progress("engine", message=f"engine: torch (auto: {e})"))
        return translator
    if not explicit:
        progress(Progress("engine", message=f"engine: ctranslate2 (auto; compute type {engine.compute_type})"))
    return engine


def open_torch(paths: list[Path], given: Given, options: InferenceConfig, device: torch.device,
               progress: ProgressFn) -> TorchEngine:
    """The torch engine of the checkpoint(s) `paths`; a precision that is slow here is warned about on `progress`."""
    warning = precision_warning(options.requested_precision, device)
    if warning:
        progress(Progress("translate", message=warning))
    return TorchEngine(paths, given, device=str(device), max_tokens=options.max_tokens,
                       max_sentences=options.batch_size, progress=progress, precision=options.requested_precision,
                       shortlist=options.shortlist)


def open_ctranslate2(paths: list[Path], given: Given, options: InferenceConfig, device: torch.device,
                     progress: ProgressFn, needs: Needs, explicit: bool) -> CTranslate2Engine:
    """The CTranslate2 engine of the checkpoint `paths[0]`, converted on first use; Unsupported for what it
    cannot do (under auto also for what it does otherwise than torch: its samples)."""
    ct2 = ctranslate2_for(paths, needs)
    if isinstance(given, Overrides):  # a value out of range is the user's error before any conversion
        for name, value in given.values.items():
            check_field(SearchConfig, name, value)
    supported = set(ct2.get_supported_compute_types(device.type))
    requested = options.requested_precision
    compute_type = None if requested is Precision.AUTO else compute_type_of(requested, device, supported)
    entry = conversion(paths[0], progress, explicit)
    meta = read_meta(entry)
    search_cfg = given.validate() if isinstance(given, SearchConfig) else given.apply(
        Overrides(SearchConfig, meta.get("search") or {}).apply())
    check_decoding(search_cfg, options, progress, explicit)
    if compute_type is None:
        model_cfg = from_dict(ModelConfig, meta["model_config"], str(entry))
        compute_type = auto_compute_type(device, supported, model_cfg)

    def torch_engine() -> TorchEngine:
        return TorchEngine(paths, search_cfg, device=str(device), max_tokens=options.max_tokens,
                          max_sentences=options.batch_size, progress=progress, precision=Precision.FP32,
                          shortlist=options.shortlist)

    def load(folder: Path) -> CTranslate2Engine:
        return CTranslate2Engine(folder, search_cfg, device=device.type, compute_type=compute_type,
                                     threads=options.threads or torch.get_num_threads(), max_tokens=options.max_tokens,
                                     max_sentences=options.batch_size, progress=progress, fallback=torch_engine,
                                     inter_threads=options.inter_threads, shortlist=options.shortlist)

    try:
        return load(entry)
    except InputError as e:  # files as written, yet CTranslate2 cannot load them (another CTranslate2?): once again
        progress(Progress("ctranslate2", message=f"warning: {e}; converting the model again"))
        return load(rebuild(entry, paths[0], progress))


def ctranslate2_for(paths: list[Path], needs: Needs) -> Any:
    """The ctranslate2 module, where it can translate with the model(s) `paths` what `needs` asks; Unsupported
    otherwise."""
    try:
        ct2 = require_ctranslate2()
    except ConfigError:
        raise Unsupported("CTranslate2 is not installed (pip install 'nmt-toolkit[ct2]')") from None
    if len(paths) > 1:
        raise Unsupported(f"an ensemble ({len(paths)} {ref('model')}) runs on torch only")
    if needs.attention:
        raise Unsupported(f"{ref('attention')} heatmaps need every layer's and head's attention, which CTranslate2 "
                          "does not give")
    return ct2


def conversion(model_path: Path, progress: ProgressFn, explicit: bool) -> Path:
    """The CTranslate2 conversion of the checkpoint (made now if missing); Unsupported where there can be none
    (and, under auto, where it cannot be written)."""
    try:
        return converted(model_path, progress)
    except NotExportable as e:
        raise Unsupported(str(e).split("; translate with")[0]) from None
    except OutputError as e:
        if explicit:
            raise
        raise Unsupported(f"the CTranslate2 conversion cannot be written: {e}") from None


def check_decoding(search_cfg: SearchConfig, options: InferenceConfig, progress: ProgressFn, explicit: bool) -> None:
    """Unsupported for a decoding option that CTranslate2 cannot search with (see nmt.engines.decoding), and
    under auto for one with which it searches otherwise than torch (--sampling); --engine ctranslate2 says
    so on `progress`."""
    beam = search_cfg.beam > 1 and not search_cfg.sampling  # early stopping is beam search's: greedy has none
    asked = [o for o in changed(search_cfg) if beam or o.field != "early_stopping"]
    for option in asked:
        if not option.ct2_can:
            raise Unsupported(f"{flag_of(SearchConfig, option.field)}: CTranslate2 has no such option")
        if option.differs and not explicit:
            raise Unsupported(f"{flag_of(SearchConfig, option.field)}: {option.differs}")
    if search_cfg.sampling and options.inter_threads > 1:
        raise ConfigError(f"{ref('inter_threads')} {options.inter_threads} with {ref('sampling')}: which replica "
                          f"draws a batch's samples changes from run to run, so {ref('seed')} would not give the "
                          f"same samples; use {ref('inter_threads')} 1")
    for option in asked:  # never a silent difference between the engines
        if option.differs and option.note:
            progress(Progress("engine", message=option.note))


def compute_type_of(precision: Precision, device: torch.device, supported: set[str]) -> str:
    """CTranslate2's compute type for --precision (or --int8) on `device`; Unsupported where it has none."""
    precision = resolve_precision(precision, device)  # the errors of both engines (fp16 on a CPU, ...)
    name = COMPUTE_TYPES[precision]
    if name not in supported:
        raise Unsupported(f"{ref('precision')} {precision}: CTranslate2 has no {name} on this {device.type} "
                          f"(it has {', '.join(sorted(supported))})")
    return name


def auto_compute_type(device: torch.device, supported: set[str], model: ModelConfig) -> str:
    """--precision auto on CTranslate2, decided as for torch: on CUDA bf16 where native, else fp16; on the CPU
    bf16 where CTranslate2 has it and the timing of the model's layers (`resolve_precision`) prefers it."""
    if device.type == "cuda":
        wanted = "bfloat16" if native_bf16() and "bfloat16" in supported else "float16"
        return wanted if wanted in supported else "float32"
    if "bfloat16" not in supported:
        return "float32"
    return COMPUTE_TYPES[resolve_precision(Precision.AUTO, device, timing=translation_timing(model))]
