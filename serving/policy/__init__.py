"""The policy layer: what runs before the model and the model must not override (docs/policies.md):
content detectors (`detect`, `any_detected`), declarative policy files of ordered rules the Router
applies (`PolicySet`; `Router.load(bundle, policy="policy.json")`), and the budgets' ledger, in this
process (`Spending`, the Router's default) or shared through Redis (`RedisSpending`).
"""

from serving.policy._budgets import RedisSpending, Spending
from serving.policy._detectors import DETECTORS, Detector, Finding, any_detected, detect
from serving.policy._errors import FallbackForbidden, NoFeasibleEndpoint, PolicyError
from serving.policy._rules import ENDPOINTS, PolicyFileError, PolicySet, Rule, Verdict
from serving.routing._validation import check_metadata

__all__ = [
    "DETECTORS",
    "ENDPOINTS",
    "Detector",
    "FallbackForbidden",
    "Finding",
    "NoFeasibleEndpoint",
    "PolicyError",
    "PolicyFileError",
    "PolicySet",
    "RedisSpending",
    "Rule",
    "Spending",
    "Verdict",
    "any_detected",
    "check_metadata",
    "detect",
]
