"""Scalar features of an edge answer, for the acceptance check (serving.scoring._acceptance).

What a reader looks at to doubt an answer, none specific to one dataset:
- size: length, lines, and length against the prompt's;
- arithmetic it states: `a op b = c` steps and `<<expr=value>>` calculator annotations
  whose result is wrong (recomputed here, only + - * / on small numbers);
- an answer at the end: a final-answer marker ("####", "the answer is", "\\boxed{"), a
  number or option letter in the last line, how many distinct numbers it juggles;
- doubt: hedging, apology and refusal phrases, self-corrections ("wait", "actually");
- degeneration: repeated word trigrams, repeated lines;
- truncation: no closing punctuation, an unclosed code fence;
- grounding: how many of the prompt's numbers the answer uses, how many of its own numbers come from nowhere;
- token log-probabilities when the edge runtime returns them (NaN otherwise; the trees treat NaN as missing).

The answer is cut to `max_chars` first, keeping its end (which carries the final answer and the
truncation), so the cost is bounded whatever the edge returned.
"""

from __future__ import annotations

import ast
import math
import re
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

RESPONSE_FEATURES = (
    "log_chars", "log_lines", "log_length_ratio", "n_steps", "n_wrong_steps", "wrong_step_share",
    "has_final_marker", "last_line_has_answer", "final_number_derived", "final_number_fractional",
    "log_distinct_numbers", "hedges", "refusals", "self_corrections", "repeated_trigram_share",
    "repeated_line_share", "ends_open", "open_code_fence", "prompt_numbers_used", "unexplained_numbers",
    "logprob_mean", "logprob_min",
)  # fmt: skip
DEFAULT_MAX_RESPONSE_CHARS = 2000

_NUMBER = r"\$?\d[\d,]*(?:\.\d+)?%?"
_OPERAND = rf"\(*{_NUMBER}\)*"
# A whole chain such as "16 - 3 - 4 = 9" or "(2 + 3) x $4 = $20", not the tail of one. The
# lookahead lets the regex engine skip every position that cannot start a number (4x faster).
_STEP = re.compile(rf"(?=[\d($])(?<![\d.,*/+\-x×÷(])((?:{_OPERAND}\s*[-+*/x×÷]\s*)+{_OPERAND})\s*=\s*(-?{_NUMBER})")
_BINARY = re.compile(r"\s*(\d[\d,]*(?:\.\d+)?)\s*([-+*/x×÷])\s*(\d[\d,]*(?:\.\d+)?)\s*")
_PERCENT = re.compile(r"(\d[\d,]*(?:\.\d+)?)%")
_CALCULATOR = re.compile(r"<<([^<>=]{1,80})=([^<>]{1,40})>>")
_NUMBERS = re.compile(r"\d[\d,]*(?:\.\d+)?")
# Matched on the lower-cased answer (IGNORECASE would make each scan several times slower).
_FINAL_MARKERS = ("####", "\\boxed{", "answer is", "answer:", "final answer")  # substring tests: one C scan each
_LAST_LINE_ANSWER = re.compile(r"\d|\(?\b[A-J]\)|\b[A-J]\.?$")
# Doubt, in one scan: hedging, apologies and refusals, self-corrections.
_PHRASES = re.compile(
    r"\b(?:(?P<hedge>(?:not sure|might be|may be|perhaps|possibly|probably|approximately|i think|i believe|"
    r"it seems|unclear|assum(?:e|ing)|cannot be determined|not enough information|hard to say|i guess)\b)"
    r"|(?P<refusal>(?:i'?m sorry|i apologi[sz]e|as an ai|i cannot|i can'?t|i am unable|i'?m unable|"
    r"unable to (?:provide|answer|help))\b)"
    r"|(?P<correction>wait|actually|oops|mistake|correction|let me re|recalculat|re-?evaluat|i made an error|"
    r"that'?s not right))"
)
MAX_STEPS = 32  # arithmetic steps recomputed per answer (the last ones: the end carries the result)
_WORDS = re.compile(r"\w+")
_CLOSERS = tuple(".!?)]}\"'`*|>$") + ("。", "！", "？", "」", "）")
_OPS = {ast.Add: float.__add__, ast.Sub: float.__sub__, ast.Mult: float.__mul__, ast.Div: float.__truediv__}


def _number(text: str) -> float | None:
    try:
        value = float(text.replace("$", "").replace(",", "").rstrip("%"))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _arithmetic(expr: str) -> float | None:
    """The value of + - * / over numbers and parentheses (nothing else is evaluated), or None."""
    simple = _BINARY.fullmatch(expr)
    if simple:  # most steps: one operation, computed without parsing
        left, op, right = float(simple[1].replace(",", "")), simple[2], float(simple[3].replace(",", ""))
        if op in "/÷":
            return left / right if right else None
        return left + right if op == "+" else left - right if op == "-" else left * right
    try:
        tree = ast.parse(expr.replace(",", "").replace("x", "*").replace("×", "*").replace("÷", "/"), mode="eval")
    except (SyntaxError, ValueError):
        return None

    def value(node: ast.expr) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError("not plain arithmetic")

    try:
        result = value(tree.body)
    except (ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    return result if math.isfinite(result) else None


def _wrong(stated: float, computed: float) -> bool:
    """Whether a stated result misses the computed one beyond rounding (1% or 0.01)."""
    return abs(stated - computed) > max(0.01, 0.01 * abs(computed))


def _steps(text: str) -> tuple[int, int, list[float]]:
    """(arithmetic steps the answer states, how many of them are wrong, their stated results);
    at most MAX_STEPS of each kind, the last ones. Only lines holding "=" are scanned."""
    stated = "\n".join(line for line in text.splitlines() if "=" in line)
    parsed = [(_arithmetic(expr), _number(result.strip())) for expr, result in _CALCULATOR.findall(stated)[-MAX_STEPS:]]
    for expr, result in _STEP.findall(_CALCULATOR.sub(" ", stated))[-MAX_STEPS:]:
        expr = expr.replace("$", "")
        parsed.append((_arithmetic(_PERCENT.sub(r"(\1/100)", expr) if "%" in expr else expr), _number(result)))
    checked = [(computed, stated) for computed, stated in parsed if computed is not None and stated is not None]
    return len(checked), sum(_wrong(stated, computed) for computed, stated in checked), [s for _, s in checked]


def response_features(
    prompt: str,
    response: str,
    *,
    logprob_mean: float | None = None,
    logprob_min: float | None = None,
    max_chars: int = DEFAULT_MAX_RESPONSE_CHARS,
) -> NDArray[np.float32]:
    """RESPONSE_FEATURES of one answer to `prompt`, as float32 (see the module doc)."""
    n_chars = len(response)
    text = response[-max_chars:] if n_chars > max_chars else response
    stripped = text.rstrip()
    lines = stripped.splitlines() or [""]
    last_line = lines[-1].strip()
    lower = text.lower()
    words = _WORDS.findall(lower)
    phrases = [m.lastgroup for m in _PHRASES.finditer(lower)]
    numbers = {n.replace(",", "") for n in _NUMBERS.findall(text)}
    prompt_numbers = {n.replace(",", "") for n in _NUMBERS.findall(prompt[:max_chars])}
    n_steps, n_wrong, results = _steps(text)
    last_numbers = _NUMBERS.findall(last_line)
    final = _number(last_numbers[-1]) if last_numbers else None
    trigrams = list(zip(words, words[1:], words[2:]))
    long_lines = [line.strip() for line in lines if len(line.strip()) > 8]
    values = (
        math.log1p(n_chars),
        math.log1p(len(lines)),
        math.log((n_chars + 1) / (len(prompt) + 1)),
        n_steps,
        n_wrong,
        n_wrong / n_steps if n_steps else 0.0,
        float(any(marker in lower for marker in _FINAL_MARKERS)),
        float(bool(_LAST_LINE_ANSWER.search(last_line))),
        float(final is not None and any(not _wrong(final, r) for r in results)),
        float(final is not None and abs(final - round(final)) > 1e-9),
        math.log1p(len(numbers)),
        phrases.count("hedge"),
        phrases.count("refusal"),
        phrases.count("correction"),
        1.0 - len(set(trigrams)) / len(trigrams) if trigrams else 0.0,
        1.0 - len(set(long_lines)) / len(long_lines) if long_lines else 0.0,
        float(bool(stripped) and not stripped.endswith(_CLOSERS)),
        float(text.count("```") % 2 == 1),
        len(prompt_numbers & numbers) / len(prompt_numbers) if prompt_numbers else 0.0,
        len(numbers - prompt_numbers) / len(numbers) if numbers else 0.0,
        math.nan if logprob_mean is None else float(logprob_mean),
        math.nan if logprob_min is None else float(logprob_min),
    )
    return np.asarray(values, dtype=np.float32)
