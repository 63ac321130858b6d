"""The bodies the server reads and writes, as pydantic models (they also make the OpenAPI page at /docs)."""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

Text = Union[StrictStr, list[StrictStr]]


class TranslateRequest(BaseModel):
    """POST /v1/translate."""

    model_config = ConfigDict(extra="forbid")
    text: Text = Field(description="a line, or a list of lines; each gives one translation")
    beam: Optional[StrictInt] = Field(None, description="beam width for this request (default: the server's)")
    nbest: Optional[StrictInt] = Field(None, description="N best translations per line, each with its score")
    api_key: Optional[StrictStr] = Field(None, description="needed when the server was started with --api-keys")


class Scored(BaseModel):
    text: str
    score: float


class Model(BaseModel):
    """The model's identity."""

    name: str
    src: str
    tgt: str
    sha256: str
    search: dict
    engine: str = Field("", description="the engine that translates: torch or ctranslate2")


class TranslateResponse(BaseModel):
    translations: Union[list[str], list[list[Scored]]] = Field(
        description="one per line, in order; with nbest > 1 a list of {text, score}, best first")
    model: Model


class LibreRequest(BaseModel):
    """POST /translate (LibreTranslate), as JSON or as form fields."""

    model_config = ConfigDict(extra="ignore")
    q: Text = Field(description="text, or a list of texts; a text's lines are translated one by one")
    source: StrictStr = Field("auto", description="the model's source language, or auto")
    target: StrictStr = Field(description="the model's target language")
    format: StrictStr = Field("text", description="text (html is not supported)")
    alternatives: int = Field(0, ge=0, description="other translations to add, best first")
    api_key: Optional[StrictStr] = Field(None, description="needed when the server was started with --api-keys")


class Detected(BaseModel):
    language: str
    confidence: float = Field(description="0 to 100")


class LibreResponse(BaseModel):
    translatedText: Union[str, list[str]]
    detectedLanguage: Optional[Union[Detected, list[Detected]]] = Field(None, description="with source auto")
    alternatives: Optional[Union[list[str], list[list[str]]]] = Field(None, description="with alternatives > 0")


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
    status: str
    model: Model
    queued_lines: int


class ErrorBody(BaseModel):
    """Every error answer."""

    error: str


ERRORS: dict[int | str, dict[str, Any]] = {status: {"model": ErrorBody} for status in (400, 403, 413, 422, 503, 504)}
