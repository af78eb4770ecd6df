"""The hand rule table (shared docs/baseline.md), exactly: the baseline and the degraded mode."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from serving._contract import CLOUD, DEFAULT_MAX_CHARS, EDGE, FALLBACK, zone_for
from serving.features._extractor import encodable
from serving.routing._decision import Decision
from serving.routing._validation import check_batch, check_precision, check_prompt

if TYPE_CHECKING:
    from collections.abc import Sequence

    from serving.features._tokenizer import FastTokenizer

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


def infer_rule_domain(text: str, *, head_chars: int = DEFAULT_MAX_CHARS) -> str | None:
    """finance / medical / legal by keyword count in the text's head; None if no keyword."""
    head = text[:head_chars]
    counts = {d: len(r.findall(head)) for d, r in _DOMAIN_RE.items()}
    best = max(counts, key=counts.__getitem__)
    return best if counts[best] > 0 else None


def rule_score(seq_len: float, domain: str | None, precision: str | None) -> float:
    """Complexity score of the rule table, capped at 1.0; summed in tenths and divided once (0.4 + 0.3
    in floats is 0.7000000000000001, which would wrongly leave the inclusive 0.3-0.7 band)."""
    tenths = (
        (4 if seq_len > LONG_PROMPT_TOKENS else 0)
        + (3 if domain in RULE_DOMAINS else 0)
        + (3 if precision == "exact" else 0)
    )
    return min(tenths, 10) / 10


def as_policy() -> dict[str, object]:
    """The rule table as a policy document (serving.policy._rules, docs/policies.md): applied to a learned router's
    decisions, its route rules give every prompt the rule table's zone. The first matching rule decides: all three
    signals (score 1.0) -> cloud; any one or two (0.3-0.7, inclusive) -> edge with cloud fallback; none -> edge."""
    keywords = {"pattern": sorted(_DOMAIN_WORDS.values()), "head_chars": DEFAULT_MAX_CHARS}
    long = {"min_tokens": LONG_PROMPT_TOKENS + 1}
    exact = {"precision": "exact"}
    fallback = {"then": "route", "zone": FALLBACK}
    return {
        "description": "The hand rule table (serving/routing/_rule_table.py): long prompt +0.4, finance/medical/legal +0.3, "
        f"exact precision +0.3; below {RULE_LO} edge, above {RULE_HI} cloud, in between edge with cloud fallback.",
        "rules": [
            {
                "name": "rule-table-cloud",
                "when": {**long, "matches": keywords, **exact},
                "then": "route",
                "zone": CLOUD,
            },
            {"name": "rule-table-long", "when": long, **fallback},
            {"name": "rule-table-domain", "when": {"matches": keywords}, **fallback},
            {"name": "rule-table-exact", "when": exact, **fallback},
            {"name": "rule-table-edge", "then": "route", "zone": EDGE},
        ],
    }


class RuleRouter:
    """The rule table behind the Router interface. Domain comes from the text (keywords),
    token count from the bundle's tokenizer when there is one, else ~4 characters a token."""

    model_version = "rule-table"

    def __init__(self, tokenizer: FastTokenizer | None = None, *, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.tokenizer, self.max_chars = tokenizer, max_chars

    def count_tokens(self, prompt: str) -> int:
        head = prompt[: self.max_chars]
        if self.tokenizer is None or not head:
            return -(-len(prompt) // 4)
        n = len(self.tokenizer.ids([encodable(head)], add_special_tokens=False)[0])
        return round(n * len(prompt) / len(head))

    def decide(self, prompt: str, precision: str | None, *, degraded: bool = False, note: str = "") -> Decision:
        n_tokens = self.count_tokens(prompt)
        domain = infer_rule_domain(prompt)
        score = rule_score(n_tokens, domain, precision)
        parts = [f"rule table score {score:.1f}"]
        if n_tokens > LONG_PROMPT_TOKENS:
            parts.append(f"~{n_tokens} tokens > {LONG_PROMPT_TOKENS}")
        if domain:
            parts.append(f"{domain} domain")
        if precision == "exact":
            parts.append("exact precision")
        reason = ", ".join(parts) + (f" ({note})" if note else "")
        return Decision.of_zone(
            zone_for(score, RULE_LO, RULE_HI),
            score=score,
            reason=reason,
            degraded=degraded,
            model_version=self.model_version,
            precision=precision,
            n_tokens=n_tokens,
            truncated=len(prompt) > self.max_chars,
        )

    def route(self, prompt: str, *, precision: str | None = None) -> Decision:
        """Decision of the rule table for one prompt."""
        return self.decide(check_prompt(prompt), check_precision(precision))

    def route_batch(self, prompts: Sequence[str], precisions: Sequence[str | None] | None = None) -> list[Decision]:
        """Decisions for many prompts."""
        prompts, precisions = check_batch(prompts, precisions)
        return [self.decide(p, q) for p, q in zip(prompts, precisions)]
