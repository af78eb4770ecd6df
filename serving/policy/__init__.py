"""The policy layer: what runs before the model and the model must not override (docs/policies.md).

- `detectors.py`: content detectors (personal data, national ids, credentials), local and linear
  in the prompt's length.
- `rules.py`: declarative policy files of ordered rules that force, forbid or prefer endpoints by
  request metadata, detected content, prompt size and declared precision; the Router applies
  them (`Router.load(bundle, policy="policy.json")`), and serving.bundle._watcher.PolicyWatcher reloads them.
- `budgets.py`: what each budget holder spent: in this process (`Spending`, the Router's default) or
  shared by every process through Redis (`RedisSpending`: `router.spending = RedisSpending(url)`).
"""

from serving.policy._budgets import RedisSpending, Spending
from serving.policy._detectors import DETECTORS, Detector, Finding, any_detected, detect
from serving.policy._errors import FallbackForbidden, NoFeasibleEndpoint, PolicyError
from serving.policy._rules import (
    ENDPOINTS,
    PolicyFileError,
    PolicySet,
    Rule,
    Verdict,
)
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
