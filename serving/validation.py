"""Argument checks shared by every router's public methods."""

from __future__ import annotations

from typing import TYPE_CHECKING

from serving.contract import PRECISIONS

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
