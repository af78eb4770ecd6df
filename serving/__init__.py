"""Embedded routing SDK: decides edge / edge-with-cloud-fallback / cloud per request. Runtime
dependencies: numpy, onnxruntime, tokenizers, google-re2. Guide: docs/sdk.md.

Every name the guides use is importable from here, or from its subpackage: `serving.chat` (the
routed chat client), `serving.policy`, `serving.dashboard`, `serving.testing` (test doubles);
`serving.proxy` is the server. Every exception is a `RouterError`; `serving.errors` lists them
all. The outcome log, drift and download names load their modules when first used, so
`import serving` loads what routing needs and no more.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from serving._router_error import RouterError
from serving.bundle._bundle import BundleError, read_bundle
from serving.bundle._manifest import ManifestError
from serving.bundle._watcher import BundleURLWatcher, BundleWatcher, PolicyWatcher
from serving.conversations._evidence import TurnEvidenceError
from serving.conversations._state import ConversationState
from serving.conversations._store import ConversationStore, ConversationStoreError, MemoryStore, RedisStore
from serving.conversations._switch import Stickiness
from serving.endpoints._capabilities import Needs, needs_of
from serving.endpoints._record import Capabilities, Endpoint, EndpointSpecError, Price, load_endpoints, parse_endpoints
from serving.execution._execute import EdgePool, Routable, aexecute, execute
from serving.execution._steps import CloudCallError, EdgeBusy, EndpointsFailed, Execution, Step
from serving.features._language import LanguageDetectorMissing
from serving.routing._decision import Decision
from serving.routing._request import Request
from serving.routing._router import Router, Update
from serving.routing._rule_table import RuleRouter
from serving.routing._stages import RouteStages

if TYPE_CHECKING:
    from serving.bundle._download import DownloadError
    from serving.bundle._signing import SigningError
    from serving.monitoring._drift import DriftInputError, DriftReference, DriftThresholds, drift_report, read_records
    from serving.monitoring._outcome_log import OutcomeLog, RecordError, UndeclaredText

_LAZY = {  # the names whose modules are loaded when first used (module doc)
    name: home
    for home, names in {
        "serving.bundle._download": "DownloadError",
        "serving.bundle._signing": "SigningError",
        "serving.monitoring._drift": "DriftInputError DriftReference DriftThresholds drift_report read_records",
        "serving.monitoring._outcome_log": "OutcomeLog RecordError UndeclaredText",
    }.items()
    for name in names.split()
}

__all__ = [
    "BundleError",
    "BundleURLWatcher",
    "BundleWatcher",
    "Capabilities",
    "CloudCallError",
    "ConversationState",
    "ConversationStore",
    "ConversationStoreError",
    "Decision",
    "DownloadError",
    "DriftInputError",
    "DriftReference",
    "DriftThresholds",
    "EdgeBusy",
    "EdgePool",
    "Endpoint",
    "EndpointSpecError",
    "EndpointsFailed",
    "Execution",
    "LanguageDetectorMissing",
    "ManifestError",
    "MemoryStore",
    "Needs",
    "OutcomeLog",
    "PolicyWatcher",
    "Price",
    "RecordError",
    "RedisStore",
    "Request",
    "Routable",
    "RouteStages",
    "Router",
    "RouterError",
    "RuleRouter",
    "SigningError",
    "Step",
    "Stickiness",
    "TurnEvidenceError",
    "UndeclaredText",
    "Update",
    "aexecute",
    "drift_report",
    "execute",
    "load_endpoints",
    "needs_of",
    "parse_endpoints",
    "read_bundle",
    "read_records",
]


def __getattr__(name: str) -> object:
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found: object = getattr(importlib.import_module(home), name)
    globals()[name] = found  # the next lookup does not come here
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
