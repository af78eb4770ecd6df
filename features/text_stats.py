"""Scalar features of a prompt: its size, and precision tags derived from the text.

Sizes use the whole prompt (cheap C-level counts); pattern counts look only at the
head (`head_chars`), so a 1 MB prompt costs no more than a long normal one.
"""
from __future__ import annotations

import re

import numpy as np

_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_MATH_OP = re.compile(r"[+\-*/=^<>%×÷±≤≥]")
_LATEX = re.compile(r"\\(?:frac|sqrt|sum|int|cdot|times|pi|alpha|beta|theta|le|ge)|\$[^$]+\$")
_CODE = re.compile(r"```|\bdef |\bclass |\breturn\b|\bimport |#include|\bfunction\b|;\s*$|\{\s*$|=>|\bSELECT\b",
                   re.MULTILINE)
_OPTION = re.compile(r"^\s*\(?[A-Ja-j][.)]\s", re.MULTILINE)
_CURRENCY = re.compile(r"[$€£¥]|\b(?:USD|EUR|dollars?|cents?|percent)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")
_DIGIT = re.compile(r"\d")
_UPPER = re.compile(r"[A-Z]")

STAT_NAMES = (
    "n_chars", "n_lines", "n_spaces", "n_numbers", "digit_share", "n_math_ops", "n_latex",
    "n_code_markers", "n_options", "n_questions", "n_sentences", "n_currency",
    "upper_share", "mean_word_len", "ends_with_answer_cue",
)


def text_statistics(text: str, head: str) -> list[float]:
    """The STAT_NAMES values for one prompt; `head` is the prefix the patterns scan."""
    n_head = max(len(head), 1)
    words = head.split()
    return [
        float(len(text)),
        float(text.count("\n") + 1),
        float(text.count(" ")),
        float(len(_NUMBER.findall(head))),
        len(_DIGIT.findall(head)) / n_head,
        float(len(_MATH_OP.findall(head))),
        float(len(_LATEX.findall(head))),
        float(len(_CODE.findall(head))),
        float(len(_OPTION.findall(head))),
        float(head.count("?")),
        float(len(_SENTENCE_END.findall(head))),
        float(len(_CURRENCY.findall(head))),
        len(_UPPER.findall(head)) / n_head,  # ASCII capitals
        (sum(len(w) for w in words) / len(words)) if words else 0.0,
        # Only the tail: lower-casing a 1 MB prompt would cost more than the rest of routing.
        float(text[-256:].rstrip().lower().endswith(("answer:", "answer :", "a:"))),
    ]


def statistics_matrix(texts: list[str], heads: list[str]) -> np.ndarray:
    """STAT_NAMES for many prompts as a float32 matrix."""
    if not texts:
        return np.zeros((0, len(STAT_NAMES)), dtype=np.float32)
    return np.asarray([text_statistics(t, h) for t, h in zip(texts, heads)], dtype=np.float32)
