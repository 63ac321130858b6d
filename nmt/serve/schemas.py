"""The bodies the server reads and writes, as pydantic models (they also make the OpenAPI page at /docs), and a
request's own glossary, read and bounded (`request_glossary`)."""

from __future__ import annotations

import json
import typing
import unicodedata
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, create_model

from nmt.config import SearchConfig, field_types
from nmt.core.errors import InputError
from nmt.documents.texts import Format
from nmt.engines.decoding import REQUEST_OPTIONS
from nmt.serve.http_errors import RequestError, TooLarge, shown
from nmt.text.glossary import MAX_WORDS, Glossary, Term, folded, words_of

Text = Union[StrictStr, list[StrictStr]]
# A request's search setting is its SearchConfig field's type, taken as JSON gives it (no "4" for 4)
STRICT: dict[Any, Any] = {int: StrictInt, float: Union[StrictFloat, StrictInt], bool: StrictBool, str: StrictStr}


def search_settings() -> dict[str, Any]:
    """The search settings a request may give (beam, nbest, ...: nmt.engines.decoding's REQUEST_OPTIONS),
    each optional (the server's default where left out), as create_model's fields."""
    types = field_types(SearchConfig)

    def strict(kind: Any) -> Any:
        return kind if typing.get_origin(kind) is Literal else STRICT[kind]

    return {o.field: (Optional[strict(types[o.field])], Field(None, description=o.request)) for o in REQUEST_OPTIONS}


# A request's own glossary (its `glossary` field), bounded: the terms it may hold, and the bytes (UTF-8) of their text.
# Checked by `request_glossary` (its bounds, and messages that name the fix), so the body models take any value there
# and only their documentation says what it is.
MAX_REQUEST_TERMS = 1000
MAX_REQUEST_TERM_BYTES = 64 << 10
GLOSSARY_SHAPE = 'give a JSON object of terms, {"source term": "target term", ...}'
GLOSSARY_DOC = ("nmt's terms for this request, {\"source term\": \"target term\", ...} (at most "
                f"{MAX_REQUEST_TERMS:,} terms and {MAX_REQUEST_TERM_BYTES >> 10} KiB of term text): the words of the "
                "translation aligned to a source term found in the text are replaced by its target; over the server's "
                "--glossary of the direction, a request's term winning where both have a source term (case aside); "
                "not with format html")


def glossary_schema(schema: dict[str, Any]) -> None:
    """What the OpenAPI page shows of a `glossary` field: an object of strings (or null)."""
    schema.pop("anyOf", None)
    schema.update(type=["object", "null"], additionalProperties={"type": "string"})


def glossary_field(doc: str = GLOSSARY_DOC) -> Any:
    return Field(None, description=doc, json_schema_extra=glossary_schema)


def settings_of(body: Any) -> dict[str, Any]:
    """The search settings a TranslateRequest gives (the ones left out are None)."""
    return {o.field: getattr(body, o.field) for o in REQUEST_OPTIONS}


# POST /v1/translate: its search settings are read from the table of decoding options, so that a new option
# needs no field here (a class statement would list them)
TranslateRequest = create_model(
    "TranslateRequest", __config__=ConfigDict(extra="forbid"), __doc__="POST /v1/translate.", __module__=__name__,
    text=(Text, Field(description="a text, or a list of texts; each gives one translation (its sentences "
                                  "translated, its lines kept)")),
    source=(Optional[StrictStr], Field(None, description="the source language; needed only when the server "
                                                         "translates more than one direction")),
    target=(Optional[StrictStr], Field(None, description="the target language (as source)")),
    format=(Format, Field("text", description="text, or html (its tags kept)")),
    scores=(StrictBool, Field(False, description="each translation as {text, score}: score the mean log-probability "
                                                 "of its tokens (0 at best)")),
    **search_settings(),
    glossary=(Optional[Any], glossary_field()),
    api_key=(Optional[StrictStr], Field(None, description="needed when the server was started with --api-keys")))


class Terms(BaseModel):
    """The terms of a request's glossary (its own and the direction's) in the sentences of its texts."""

    found: int = Field(description="terms found in the sources")
    placed: int = Field(description="terms put in the translations (the others were aligned to no word, or to words "
                                    "another term took)")


class Scored(BaseModel):
    text: str
    score: float


class Model(BaseModel):
    """The model's identity."""

    name: str
    src: str
    tgt: str
    sha256: str
    search: dict[str, Any]
    engine: str = Field("", description="the engine that translates: torch or ctranslate2")


class TranslateResponse(BaseModel):
    translations: Union[list[str], list[Scored], list[list[Scored]]] = Field(
        description="one per text, in order; with scores a {text, score}; with nbest > 1 a list of {text, score}, "
                    "best first")
    model: Optional[Model] = Field(description="the model that translated (null where source and target are one "
                                               "language: the texts come back as they were)")
    untranslated: bool = Field(False, description="true where source and target are one language")
    note: Optional[str] = Field(None, description="with nbest > 1, where a text has fewer distinct translations than "
                                                  "nbest: the search (twice as wide) found no more, or the text came "
                                                  "back as it was (already in the target language)")
    terms: Optional[Terms] = Field(None, description="where a glossary applied (the request's or the direction's): "
                                                     "its terms found and placed")


class LibreRequest(BaseModel):
    """POST /translate (LibreTranslate), as JSON or as form fields."""

    model_config = ConfigDict(extra="ignore")
    q: Text = Field(description="text, or a list of texts; a text's sentences and lines are kept")
    source: StrictStr = Field("auto", description="a served source language, or auto (detected among them)")
    target: StrictStr = Field(description="a served target language")
    format: StrictStr = Field("text", description="text or html")
    alternatives: int = Field(0, ge=0, description="other translations to add, best first")
    scores: bool = Field(False, description="nmt's extension: add `scores`, each translation's mean token "
                                            "log-probability (0 at best)")
    detectEach: bool = Field(False, description="nmt's extension: with source auto, detect each text's language "
                                                "(LibreTranslate detects one for the whole list)")
    glossary: Optional[Any] = glossary_field("nmt's extension: " + GLOSSARY_DOC + "; in a form, the object as a JSON "
                                             "string")
    api_key: Optional[StrictStr] = Field(None, description="needed when the server was started with --api-keys")


class Detected(BaseModel):
    language: str
    confidence: float = Field(description="0 to 100")


class LibreResponse(BaseModel):
    translatedText: Union[str, list[str]]
    detectedLanguage: Optional[Union[Detected, list[Detected]]] = Field(None, description="with source auto")
    alternatives: Optional[Union[list[str], list[list[str]]]] = Field(None, description="with alternatives > 0")
    scores: Optional[Union[float, list[float]]] = Field(None, description="with scores (nmt's extension)")
    untranslated: Optional[Union[bool, list[bool]]] = Field(
        None, description="nmt's extension, where a text was in the target language already (given or detected): "
                          "true for it, its text given back as it was")
    note: Optional[str] = Field(None, description="nmt's extension, where a text has fewer distinct alternatives than "
                                                  "asked: the search (twice as wide) found no more")
    terms: Optional[Terms] = Field(None, description="nmt's extension, where a glossary applied: its terms found and "
                                                     "placed")


class DetectRequest(BaseModel):
    """POST /detect (LibreTranslate), as JSON or as form fields."""

    model_config = ConfigDict(extra="ignore")
    q: Text
    api_key: Optional[StrictStr] = None


class Language(BaseModel):
    code: str
    name: str
    targets: list[str]


class LanguageRef(BaseModel):
    code: str
    name: str


class FrontendLanguages(BaseModel):
    source: LanguageRef
    target: LanguageRef


class FrontendSettings(BaseModel):
    """GET /frontend/settings (LibreTranslate): what a LibreTranslate web page asks first."""

    charLimit: int
    frontendTimeout: int
    apiKeys: bool
    keyRequired: bool
    suggestions: bool
    filesTranslation: bool
    supportedFilesFormat: list[str]
    language: FrontendLanguages


class Health(BaseModel):
    status: str = Field(description="ok (LibreTranslate's answer) once every model is ready")
    model: Model = Field(description="the first direction's model")
    models: list[Model] = Field(description="every direction's model")
    queued_lines: int


class ErrorBody(BaseModel):
    """Every error answer."""

    error: str


ERRORS: dict[int | str, dict[str, Any]] = {status: {"model": ErrorBody} for status in (400, 403, 413, 422, 503, 504)}


def request_glossary(value: Any, status: int) -> Optional[Glossary]:
    """A request's `glossary` field as a Glossary (None: none given, or {}): a JSON object {"source term": "target
    term"}, or a string holding one (a form's field). `status` for one that is no such object, or whose terms break
    a glossary file's rules (`nmt.text.glossary`: an empty side, a line break or tab, a source term of no word or
    more than MAX_WORDS, one source term twice, case aside, with two targets); 413 beyond MAX_REQUEST_TERMS terms or
    MAX_REQUEST_TERM_BYTES bytes of their text. Messages quote a client's terms through `shown` only."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise RequestError(f"glossary: not JSON; {GLOSSARY_SHAPE}", status) from None
    if not isinstance(value, dict):
        raise RequestError(f"glossary: a JSON {json_type(value)}; {GLOSSARY_SHAPE}", status)
    if not value:  # (a client that always sends the field: none given)
        return None
    if len(value) > MAX_REQUEST_TERMS:
        raise TooLarge(f"glossary: {len(value):,} terms; at most {MAX_REQUEST_TERMS:,} per request")
    for source, target in value.items():
        if not isinstance(target, str):
            raise RequestError(f"glossary: the target of '{shown(source)}' is a JSON {json_type(target)}; give "
                               '"source term": "target term", both strings', status)
    size = sum(len(side.encode("utf-8", "surrogatepass")) for pair in value.items() for side in pair)
    if size > MAX_REQUEST_TERM_BYTES:
        raise TooLarge(f"glossary: {size:,} bytes of terms (UTF-8); at most {MAX_REQUEST_TERM_BYTES:,} per request")
    terms: dict[str, Term] = {}  # by folded source
    for source, target in value.items():
        for side, text in (("source", source), ("target", target)):
            if not text.strip():
                raise RequestError(f"glossary: an empty {side} term ('{shown(source)}': '{shown(target)}'); give "
                                   "both terms", status)
            bad = next((c for c in text if unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp")), None)
            if bad is not None:
                what = "a lone surrogate" if unicodedata.category(bad) == "Cs" else "a control character or line break"
                raise RequestError(f"glossary: the {side} term '{shown(text)}' holds {what} ({ascii(bad)}); a term is "
                                   "one line of text", status)
        words = len(words_of(source))
        if not words or words > MAX_WORDS:
            raise RequestError(f"glossary: the source term '{shown(source)}' has {words or 'no'} word"
                               f"{'' if words == 1 else 's'}; give 1 to {MAX_WORDS}", status)
        term = Term(source.strip(), target.strip(), f"glossary['{shown(source)}']")
        known = terms.setdefault(folded(term.source), term)
        if known.target != term.target:
            raise RequestError(f"glossary: the source terms '{shown(known.source)}' and '{shown(term.source)}' are one "
                               "term (case aside) with two targets; keep one of them", status)
    try:
        return Glossary(list(terms.values()))
    except InputError as e:  # (a rule the checks above do not know yet: its message names the term, as shown)
        raise RequestError(str(e), status) from None


def json_type(value: Any) -> str:
    """What JSON calls the type of a value read from it."""
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")
