"""What a request needs of the endpoint that serves it (images, tools, JSON output, a language),
and which endpoints lack it (docs/policies.md#capabilities, #languages).

    needs = needs_of(messages, params)        # Needs(images=True, tools=False, json=False)
    router.route(prompt, needs=needs)         # endpoints whose spec lacks images are never chosen

`needs_of` is the one place a chat-completions request is read for this (its shape, never its
text). An endpoint lacking a needed capability is ruled out like a forbidden one, under the
built-in rule `needs:<capability>` (RULE_PREFIX). Capabilities not declared (None) are no
constraint, nor is a spec without `languages` on the language; an unknown language rules nothing out."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from serving.endpoints._record import CAPABILITY_FLAGS, Capabilities
from serving.features._language import check_language, declared_language, serves

if TYPE_CHECKING:
    from serving.features._language import LanguageDetector

CAPABILITIES = CAPABILITY_FLAGS  # in the order reasons and rule names take them
LANGUAGE = "language"  # a lacked language, after the flags: language=pt (rule needs:language=pt)
RULE_PREFIX = "needs:"  # the built-in rule that rules an endpoint out for a capability: needs:images
IMAGE_PARTS = ("image_url", "input_image", "image")
TOOL_PARAMS = ("tools", "functions", "tool_choice", "function_call")
JSON_FORMATS = ("json_object", "json_schema")


@dataclass(frozen=True, slots=True)
class Needs:
    """The capabilities one request needs; Needs() needs none. `language`: the request's
    language, an ISO 639-1 code (kept as its primary subtag: "pt-BR" -> "pt"), None when unknown."""

    images: bool = False
    tools: bool = False
    json: bool = False
    language: str | None = None

    def __post_init__(self) -> None:
        for name in CAPABILITIES:
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Needs.{name} must be True or False, got {getattr(self, name)!r}")
        if self.language is not None:
            object.__setattr__(self, "language", check_language(self.language, "Needs.language"))

    @property
    def names(self) -> tuple[str, ...]:
        """The needed capabilities' names, in CAPABILITIES order."""
        return tuple(name for name in CAPABILITIES if getattr(self, name))

    def __bool__(self) -> bool:
        return self.images or self.tools or self.json or self.language is not None

    def lacking(self, capabilities: Capabilities | None) -> tuple[str, ...]:
        """The needed capabilities an endpoint of these `capabilities` lacks (a language as
        language=<code>); () when it has them all, or when its capabilities are unknown (None)."""
        if capabilities is None:
            return ()
        missing = tuple(name for name in self.names if not getattr(capabilities, name))
        if self.language is None or serves(capabilities.languages, self.language):
            return missing
        return (*missing, f"{LANGUAGE}={self.language}")


NO_NEEDS = Needs()


def check_needs(needs: object) -> Needs | None:
    """`needs` as given: None, or a Needs (an empty one reads as None); TypeError otherwise."""
    if needs is None:
        return None
    if not isinstance(needs, Needs):
        raise TypeError(f"needs must be a serving.endpoints._capabilities.Needs or None, got {type(needs).__name__}")
    return needs if needs else None


def needs_of(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> Needs:
    """What a chat-completions request needs (module doc); `messages` as checked by
    serving.chat._conversation.check_messages, `params` the other parameters."""
    images = any(_has_image(message.get("content")) for message in messages if isinstance(message, Mapping))
    tools = any(params.get(name) is not None for name in TOOL_PARAMS)
    response_format = params.get("response_format")
    json = isinstance(response_format, Mapping) and response_format.get("type") in JSON_FORMATS
    return Needs(images=images, tools=tools, json=json) if images or tools or json else NO_NEEDS


def with_language(
    needs: Needs | None, prompt: str, metadata: Mapping[str, str] | None, detector: LanguageDetector
) -> Needs | None:
    """`needs` with the request's language: the one `needs` declares, else its metadata's
    (serving.features._language.METADATA_KEY), else the one `detector` reads in `prompt` (None below its
    floor). ValueError naming metadata.language for a declaration that is not a language code."""
    if needs is not None and needs.language is not None:
        return needs
    language = declared_language(metadata) or detector.language(prompt)
    if language is None:
        return needs
    return Needs(language=language) if needs is None else replace(needs, language=language)


def _has_image(content: object) -> bool:
    return isinstance(content, list) and any(
        isinstance(part, Mapping) and part.get("type") in IMAGE_PARTS for part in content
    )


def ruled_out(
    needs: Needs, capabilities: Mapping[str, Capabilities | None], names: Sequence[str]
) -> dict[str, tuple[str, ...]]:
    """name -> the needed capabilities it lacks, for each of `names` that lacks one (names without
    an entry in `capabilities` are not a constraint)."""
    return {name: missing for name in names if (missing := needs.lacking(capabilities.get(name)))}


def rule_name(lacking: Mapping[str, tuple[str, ...]]) -> str:
    """The built-in rule's name for what ruled endpoints out: the first capability (CAPABILITIES
    order, a language last) any of them lacks, e.g. needs:images, needs:language=pt."""
    lacked = [c for missing in lacking.values() for c in missing]
    flags = [CAPABILITIES.index(c) for c in lacked if c in CAPABILITIES]
    if flags or not lacked:
        return RULE_PREFIX + CAPABILITIES[min(flags, default=0)]
    return RULE_PREFIX + lacked[0]


def lacking_text(lacking: Mapping[str, tuple[str, ...]]) -> str:
    """e.g. "phone-3b lacks images, tools; cloud-mid lacks images" (declared codes only)."""
    return "; ".join(f"{name} lacks {', '.join(missing)}" for name, missing in lacking.items())


def declares_languages(capabilities: Mapping[str, Capabilities | None]) -> bool:
    """Whether any endpoint in `capabilities` declares its languages (only then is a request's language read)."""
    return any(caps is not None and caps.languages is not None for caps in capabilities.values())


def check_capabilities(capabilities: object) -> Mapping[str, Capabilities | None] | None:
    """Endpoint name -> its serving.endpoints._record.Capabilities (None: unknown), as given; TypeError otherwise."""
    if capabilities is None:
        return None
    if not isinstance(capabilities, Mapping) or not all(
        isinstance(name, str) and (caps is None or isinstance(caps, Capabilities))
        for name, caps in capabilities.items()
    ):
        raise TypeError("capabilities must map endpoint names to serving.endpoints._record.Capabilities (or None)")
    return capabilities
