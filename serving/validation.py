"""Argument checks shared by every router's public methods."""
from __future__ import annotations

from serving.contract import PRECISIONS


def check_prompt(prompt, name: str = "prompt") -> str:
    if not isinstance(prompt, str):
        raise TypeError(f"{name} must be str, got {type(prompt).__name__}")
    return prompt


def check_precision(precision, name: str = "precision") -> str | None:
    if precision is None:
        return None
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"{name}={precision!r} is not allowed; use one of {', '.join(PRECISIONS)} or None")
    return precision


def check_batch(prompts, precisions) -> tuple[list[str], list[str | None]]:
    if isinstance(prompts, str) or not hasattr(prompts, "__iter__"):
        raise TypeError(f"prompts must be a list of str, got {type(prompts).__name__}")
    prompts = [check_prompt(p, f"prompts[{i}]") for i, p in enumerate(prompts)]
    if precisions is None:
        return prompts, [None] * len(prompts)
    precisions = list(precisions)
    if len(precisions) != len(prompts):
        raise ValueError(f"precisions has {len(precisions)} items for {len(prompts)} prompts")
    return prompts, [check_precision(p, f"precisions[{i}]") for i, p in enumerate(precisions)]
