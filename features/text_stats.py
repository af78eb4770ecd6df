"""Scalar features of a prompt: its size, and precision tags derived from the text.

Sizes use the whole prompt (C-level counts, cheap even at 1 MB); everything else looks
only at the head. Counting is done with str.count and one or two compiled patterns,
not per-character Python loops: this runs on every request, in front of the edge model.
"""
from __future__ import annotations

import re

import numpy as np

STAT_NAMES = (
    "n_chars", "n_lines", "n_spaces", "n_digits", "digit_share", "n_math_ops", "n_latex",
    "n_code_markers", "n_options", "n_questions", "n_sentences", "n_currency",
    "upper_share", "mean_word_len", "ends_with_answer_cue",
)

_DIGITS = "0123456789"
_MATH = "+-*/=^<>%×÷±≤≥"
_CURRENCY = "$€£¥"
_UPPER = re.compile(r"[A-Z]")  # ASCII capitals
_CODE_MARKERS = ("```", "def ", "return ", "import ", "class ", ";\n", "{\n", "=>", "#include", "SELECT ")
_LATEX_MARKERS = ("\\frac", "\\sqrt", "\\sum", "\\int", "\\cdot", "\\times", "\\pi", "^{", "_{")
_SENTENCE_ENDS = (". ", "? ", "! ", ".\n", "?\n", "!\n")
_OPTION = re.compile(r"^\s*\(?[A-Ja-j][.)]\s", re.MULTILINE)
_ANSWER_CUES = ("answer:", "answer :", "a:")


def _count_all(text: str, needles) -> int:
    return sum(map(text.count, needles))


def text_statistics(text: str, head: str) -> list[float]:
    """The STAT_NAMES values for one prompt; `head` is the prefix the patterns scan."""
    n_head = max(len(head), 1)
    n_digits = _count_all(head, _DIGITS)
    head_spaces = head.count(" ")
    words = head_spaces + head.count("\n") + 1 if head.strip() else 0
    return [
        float(len(text)),
        float(text.count("\n") + 1),
        float(text.count(" ")),
        float(n_digits),
        n_digits / n_head,
        float(_count_all(head, _MATH)),
        float(_count_all(head, _LATEX_MARKERS)),
        float(_count_all(head, _CODE_MARKERS)),
        float(len(_OPTION.findall(head))),
        float(head.count("?")),
        float(_count_all(head, _SENTENCE_ENDS) + head.rstrip().endswith((".", "?", "!"))),
        float(_count_all(head, _CURRENCY)),
        len(_UPPER.findall(head)) / n_head,
        (len(head) - head_spaces) / words if words else 0.0,
        # Only the tail: lower-casing a 1 MB prompt would cost more than the rest of routing.
        float(text[-256:].rstrip().lower().endswith(_ANSWER_CUES)),
    ]


def statistics_matrix(texts: list[str], heads: list[str]) -> np.ndarray:
    """STAT_NAMES for many prompts as a float32 matrix."""
    if not texts:
        return np.zeros((0, len(STAT_NAMES)), dtype=np.float32)
    return np.asarray([text_statistics(t, h) for t, h in zip(texts, heads)], dtype=np.float32)
