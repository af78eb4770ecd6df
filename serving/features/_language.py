"""A request's language, for endpoints whose spec declares the languages they serve: where it comes
from (the app's Needs, the request metadata's `language`, else detected here, only when some endpoint
declares languages) and why codes compare by their primary subtag: docs/policies.md#languages.

    detector = LanguageDetector.load()       # py3langid's model, shipped in its package
    detector.detect("Wie spät ist es?")      # ("de", 0.95)
    detector.language("hi")                  # None: below the confidence floor, unknown

The detector is py3langid (BSD-3; numpy only; its model inside the package, never downloaded), the
`languages` extra; without it, LanguageDetector.load raises LanguageDetectorMissing, naming the extra.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Mapping

from serving._router_error import RouterError

EXTRA = "languages"  # pyproject.toml's optional dependencies that bring the detector
CONFIDENCE_FLOOR = 0.5  # below it a detection is unknown (make language-eval: the figures at this floor)
MAX_CHARS = 128  # of the prompt read: the language shows early (make language-eval: the same figures at 64,
# 128, 256 and all characters), and the cost grows with the text
CODE_SHAPE = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})?")  # en, pt-BR; endpoint specs check with it too
METADATA_KEY = "language"  # a request's declared language in its metadata (RoutedChat, the proxy)
# The detector's codes for a variety of an ISO 639-1 language: Moroccan and Egyptian Arabic,
# Cantonese and Wu Chinese, Southern Uzbek.
VARIETIES = {"ary": "ar", "arz": "ar", "yue": "zh", "wuu": "zh", "uzs": "uz"}
NOT_A_LANGUAGE = "zxx"  # the detector's "no linguistic content" (code, numbers): unknown


class LanguageDetectorMissing(RouterError, RuntimeError):
    """Detection is needed (an endpoint declares languages) and the `languages` extra is not installed."""


def primary(code: str) -> str:
    """The primary subtag, lower case: "pt-BR" -> "pt"."""
    return code.split("-", 1)[0].lower()


def check_language(code: object, where: str) -> str:
    """A declared language's primary subtag ("pt-BR" -> "pt"); ValueError naming `where` otherwise."""
    if not isinstance(code, str) or not CODE_SHAPE.fullmatch(code):
        raise ValueError(f"{where} must be a language code such as 'en' or 'pt-BR', got {code!r}")
    return primary(code)


def serves(languages: tuple[str, ...] | None, code: str) -> bool:
    """Whether an endpoint declaring `languages` (None: not declared) serves the language `code`."""
    return languages is None or primary(code) in {primary(served) for served in languages}


def declared_language(metadata: Mapping[str, str] | None) -> str | None:
    """The language a request's metadata declares (METADATA_KEY), checked; None when it declares none."""
    if not metadata or METADATA_KEY not in metadata:
        return None
    return check_language(metadata[METADATA_KEY], f"metadata.{METADATA_KEY}")


class LanguageDetector:
    """py3langid's naive Bayes identifier (97 languages and some varieties), probabilities normalised; a
    detection below `floor` is unknown. Thread-safe: classification reads the model only."""

    def __init__(self, identifier: Any, *, floor: float = CONFIDENCE_FLOOR, max_chars: int = MAX_CHARS) -> None:
        if not 0.0 <= floor < 1.0:
            raise ValueError(f"floor must be in [0, 1), got {floor!r}")
        if max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars!r}")
        self._identifier, self.floor, self.max_chars = identifier, floor, max_chars

    @classmethod
    def load(cls, *, floor: float = CONFIDENCE_FLOOR, max_chars: int = MAX_CHARS) -> LanguageDetector:
        """The detector with py3langid's packaged model (about a second); LanguageDetectorMissing without it."""
        try:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier  # type: ignore[import-untyped]
        except ImportError as exc:
            raise LanguageDetectorMissing(
                "an endpoint declares `languages`, so each request's language is detected, and the "
                f"detector is not installed: pip install 'edge-cloud-router[{EXTRA}]' (py3langid), "
                "or remove `languages` from the endpoint specs"
            ) from exc
        return cls(LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True), floor=floor, max_chars=max_chars)

    def detect(self, text: str) -> tuple[str, float]:
        """(ISO 639-1 code where there is one, probability) of the text's first max_chars characters."""
        code, confidence = self._identifier.classify(text[: self.max_chars])
        return VARIETIES.get(code, code), float(confidence)

    def language(self, text: str) -> str | None:
        """The text's language, or None when unknown (below the floor, or no language at all)."""
        return language_at(*self.detect(text), self.floor)


def language_at(code: str, confidence: float, floor: float) -> str | None:
    """A detection's language at the confidence `floor`: None below it, or for no language at all."""
    return code if confidence >= floor and code != NOT_A_LANGUAGE else None


_shared: LanguageDetector | None = None
_shared_lock = threading.Lock()


def shared_detector() -> LanguageDetector:
    """One LanguageDetector per process, loaded on first use (LanguageDetector.load)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LanguageDetector.load()
        return _shared
