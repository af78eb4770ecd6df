"""The hand rule table (shared docs/baseline.md), exactly: the baseline and the degraded mode."""
from __future__ import annotations

import re

RULE_DOMAINS = frozenset({"finance", "medical", "legal"})
LONG_PROMPT_TOKENS = 1024
RULE_LO, RULE_HI = 0.3, 0.7

# Keyword detector for when no domain label exists (serving sees text only).
_DOMAIN_WORDS = {
    "finance": r"financ|invest|stock|bond|loan|interest rate|tax|accounting|revenue|budget|"
               r"portfolio|dividend|inflation|gdp|bank|mortgage|profit|asset|liabilit|equity",
    "medical": r"patient|diagnos|symptom|disease|clinical|medic|drug|dose|therap|surgery|"
               r"physician|hospital|syndrome|infection|cancer|blood|nerve|anatom|vaccine|virus",
    "legal": r"\blaw\b|legal|court|statute|contract|plaintiff|defendant|attorney|lawsuit|"
             r"jurisdiction|constitution|liabilit|tort|felony|verdict|judge|regulation|legislat",
}
_DOMAIN_RE = {d: re.compile(p, re.IGNORECASE) for d, p in _DOMAIN_WORDS.items()}


def infer_rule_domain(text: str, *, head_chars: int = 4096) -> str | None:
    """finance / medical / legal by keyword count in the text's head; None if no keyword."""
    head = text[:head_chars]
    counts = {d: len(r.findall(head)) for d, r in _DOMAIN_RE.items()}
    best = max(counts, key=counts.get)
    return best if counts[best] > 0 else None


def rule_score(seq_len: float, domain: str | None, precision: str | None) -> float:
    """Complexity score of the rule table, capped at 1.0.

    Summed in tenths and divided once: 0.4 + 0.3 in floats is 0.7000000000000001, which
    would wrongly leave the inclusive 0.3-0.7 band.
    """
    tenths = (4 if seq_len > LONG_PROMPT_TOKENS else 0) \
        + (3 if domain in RULE_DOMAINS else 0) + (3 if precision == "exact" else 0)
    return min(tenths, 10) / 10
