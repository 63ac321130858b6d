"""The decoding options, each described once: for every field of `SearchConfig` (nmt/config/sections.py), the
functions of the torch search (`nmt.engines.search`) that read it, the `translate_batch` keyword that
CTranslate2 takes it as (or what the CTranslate2 engine does with it itself), whether CTranslate2 searches
otherwise than torch with it, and whether a server request may set it.

The CTranslate2 engine (`nmt.engines.ct2_engine.ctranslate2_options`), the choice of engine
(`nmt.engines.choice`: can CTranslate2 do what is asked?) and the server (`nmt.serve.schemas`: the search
settings a request may give; `nmt.serve.service`: their checks; `nmt.serve.backend`: the search the server
reports) read OPTIONS; none of them lists the decoding options again.

Adding a decoding option (a repetition penalty, say):
1. a field of `SearchConfig` in nmt/config/sections.py, with its default (the value that changes nothing),
   help and range: the commands get its --option from it;
2. its effect in the torch search, nmt/engines/search.py (a function that reads `cfg.<field>`);
3. its row in OPTIONS below: `torch=` names that function; `ct2="repetition_penalty"`, CTranslate2's
   `translate_batch` keyword for the value (`ct2_value=` where CTranslate2 counts otherwise). Without a
   keyword (and without `ct2_engine=`), CTranslate2 cannot do it: under --engine auto torch translates
   whenever it is not at its default, and --engine ctranslate2 refuses it. `request=` lets a server request
   set it (the text is its description on /docs); `shown=True` puts it in the model's identity.
tests/test_search.py checks that every field has exactly one row and that its `torch` functions read it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional

from nmt.config import SearchConfig
from nmt.core.errors import ref


@dataclass(frozen=True)
class Decoding:
    """How the engines and the server treat one field of `SearchConfig`."""

    field: str  # the SearchConfig field
    torch: tuple[str, ...]  # the functions of nmt.engines.search that read it
    ct2: str = ""  # ctranslate2.Translator.translate_batch's keyword for it
    ct2_value: Optional[Callable[[SearchConfig], Any]] = None  # the keyword's value, where not the field's own
    sampling_only: bool = False  # the keyword is given to sampling only
    ct2_engine: str = ""  # no keyword: what CTranslate2Engine does with the field itself
    differs: str = ""  # why CTranslate2's results differ from torch's where the field is not its default
    note: str = ""  # said on stderr when --engine ctranslate2 is asked for what `differs` from torch
    request: str = ""  # a server request may set it: its description in POST /v1/translate
    shown: bool = False  # in the search the server reports with the model (/health, /v1/translate)

    @property
    def ct2_can(self) -> bool:
        """CTranslate2 searches with this field's values (through a keyword or in the engine)."""
        return bool(self.ct2 or self.ct2_engine)

    def ct2_options(self, cfg: SearchConfig) -> dict[str, Any]:
        """This field's `translate_batch` keyword and value for the search `cfg` (none without a keyword)."""
        if not self.ct2 or (self.sampling_only and not cfg.sampling):
            return {}
        return {self.ct2: self.ct2_value(cfg) if self.ct2_value else getattr(cfg, self.field)}


OPTIONS: tuple[Decoding, ...] = (
    Decoding("beam", torch=("search", "beam_search"), ct2="beam_size",
             ct2_value=lambda cfg: 1 if cfg.sampling else cfg.beam,
             request="beam width for this request (default: the server's)", shown=True),
    Decoding("lenpen", torch=("finalize", "one_by_one"), ct2_engine="rank_hypotheses: nmt's length penalty",
             shown=True),
    Decoding("lenpen_type", torch=("finalize", "one_by_one"), ct2_engine="rank_hypotheses: nmt's length penalty",
             shown=True),
    Decoding("max_len_a", torch=("beam_search", "one_by_one"), ct2_engine="search_batch: each sentence's limit",
             shown=True),
    Decoding("max_len_b", torch=("beam_search", "one_by_one"), ct2_engine="search_batch: each sentence's limit",
             shown=True),
    # beam search: CTranslate2 returns the K likeliest finished hypotheses, which rank_hypotheses ranks as nmt does
    Decoding("nbest", torch=("search", "beam_search", "sample_search"), ct2="num_hypotheses",
             ct2_value=lambda cfg: cfg.nbest if cfg.sampling else cfg.beam,
             request="N best translations per line, each with its score", shown=True),
    Decoding("sampling", torch=("search",), ct2_engine="beam_size 1 and the sampling_* keywords",
             differs=f"CTranslate2 draws other samples than torch ({ref('engine')} ctranslate2 for its own)",
             note=f"note: {ref('engine')} ctranslate2 draws its own samples: the same {ref('seed')} gives other "
                  f"samples than {ref('engine')} torch (each engine's are reproducible)"),
    Decoding("topk", torch=("sampling_probs",), ct2="sampling_topk", sampling_only=True),
    Decoding("topp", torch=("sampling_probs",), ct2="sampling_topp", sampling_only=True),
    Decoding("temperature", torch=("sampling_probs",), ct2="sampling_temperature", sampling_only=True),
    Decoding("seed", torch=("sample_search",), ct2_engine="ctranslate2.set_random_seed when the engine loads"),
    # CTranslate2 has early stopping only: without, torch searches (auto), or CTranslate2 with its rule (a note)
    Decoding("early_stopping", torch=("beam_search", "finalize", "beam_done"),
             ct2_engine="its beam search ends a line once beam hypotheses have ended",
             differs=f"CTranslate2's beam search always stops early; {ref('early_stopping', off=True)} (transformers' "
                     "rule, an imported model's default) runs on torch",
             note=f"note: {ref('engine')} ctranslate2 ends a line's beam search once {ref('beam')} hypotheses have "
                  f"ended ({ref('early_stopping')}), whatever {ref('early_stopping', off=True)} asks; "
                  f"{ref('engine')} torch searches as transformers' generate does"),
)

REQUEST_OPTIONS = tuple(o for o in OPTIONS if o.request)  # what a server request may set, in this order
SHOWN = frozenset(o.field for o in OPTIONS if o.shown)


def changed(cfg: SearchConfig) -> list[Decoding]:
    """The rows of the fields that `cfg` sets to other values than their defaults."""
    defaults = {f.name: f.default for f in dataclasses.fields(SearchConfig)}
    return [o for o in OPTIONS if getattr(cfg, o.field) != defaults[o.field]]
