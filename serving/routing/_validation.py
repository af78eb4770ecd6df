"""Argument checks shared by every router's public methods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from serving._contract import PRECISIONS

if TYPE_CHECKING:
    from collections.abc import Iterable


def check_prompt(prompt: object, name: str = "prompt") -> str:
    if not isinstance(prompt, str):
        raise TypeError(f"{name} must be str, got {type(prompt).__name__}")
    return prompt


def check_precision(precision: object, name: str = "precision") -> str | None:
    if precision is None:
        return None
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"{name}={precision!r} is not allowed; use one of {', '.join(PRECISIONS)} or None")
    return precision


def check_batch(prompts: Iterable[object], precisions: Iterable[object] | None) -> tuple[list[str], list[str | None]]:
    if isinstance(prompts, str) or not hasattr(prompts, "__iter__"):
        raise TypeError(f"prompts must be a list of str, got {type(prompts).__name__}")
    checked = [check_prompt(p, f"prompts[{i}]") for i, p in enumerate(prompts)]
    if precisions is None:
        return checked, [None] * len(checked)
    tags = list(precisions)
    if len(tags) != len(checked):
        raise ValueError(f"precisions has {len(tags)} items for {len(checked)} prompts")
    return checked, [check_precision(p, f"precisions[{i}]") for i, p in enumerate(tags)]


def check_metadata(metadata: object) -> Mapping[str, str] | None:
    """The app's request metadata as given: None, or a mapping of str to str; TypeError otherwise."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a dict of str to str, got {type(metadata).__name__}")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            from serving.features._documents import quoted

            raise TypeError(
                f"metadata must be a dict of str to str: {quoted(key)} -> {type(value).__name__}"
                if isinstance(key, str)
                else f"metadata keys must be str, got {type(key).__name__}"
            )
    return metadata
