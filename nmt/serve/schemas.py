"""The bodies the server reads and writes, as pydantic models (they also make the OpenAPI page at /docs)."""

from __future__ import annotations

import typing
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, create_model

from nmt.config import SearchConfig, field_types
from nmt.documents.texts import Format
from nmt.engines.decoding import REQUEST_OPTIONS

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
    api_key=(Optional[StrictStr], Field(None, description="needed when the server was started with --api-keys")))


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
                                                  "nbest: the search (twice as wide) found no more")


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
