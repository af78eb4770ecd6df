"""Embedded routing SDK: decides edge / edge-with-cloud-fallback / cloud per request.

Runtime dependencies: numpy, onnxruntime, tokenizers, google-re2. Guide: docs/sdk.md.

Every name the guides use is importable from here, or from its subpackage: `serving.chat` (the
routed chat client), `serving.policy`, `serving.dashboard`, `serving.testing` (test doubles);
`serving.proxy` is the server. Every exception is a `RouterError`; `serving.errors` lists them
all. The outcome log, drift and download names load their modules when first used, so
`import serving` loads what routing needs and no more.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from serving.bundle import BundleError, read_bundle
from serving.capabilities import Needs, needs_of
from serving.decision import Decision
from serving.endpoints import Capabilities, Endpoint, EndpointSpecError, Price, load_endpoints, parse_endpoints
from serving.execute import EdgePool, Routable
from serving.execution import CloudCallError, EdgeBusy, EndpointsFailed, Execution, Step
from serving.language import LanguageDetectorMissing
from serving.manifest import ManifestError
from serving.request import Request
from serving.router import Router, Update
from serving.router_error import RouterError
from serving.routing import RouteStages
from serving.rules import RuleRouter
from serving.watcher import BundleURLWatcher, BundleWatcher, PolicyWatcher

if TYPE_CHECKING:
    from serving.bundle_download import DownloadError
    from serving.drift import DriftInputError, DriftReference, DriftThresholds, drift_report, read_records
    from serving.outcome_log import OutcomeLog, RecordError, UndeclaredText
    from serving.signing import SigningError

# Names whose modules `import serving` does not load: each name's module, imported on first use.
_LAZY = {
    "DownloadError": "serving.bundle_download",
    "DriftInputError": "serving.drift",
    "DriftReference": "serving.drift",
    "DriftThresholds": "serving.drift",
    "OutcomeLog": "serving.outcome_log",
    "RecordError": "serving.outcome_log",
    "SigningError": "serving.signing",
    "UndeclaredText": "serving.outcome_log",
    "drift_report": "serving.drift",
    "read_records": "serving.drift",
}

__all__ = [
    "BundleError",
    "BundleURLWatcher",
    "BundleWatcher",
    "Capabilities",
    "CloudCallError",
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
    "Needs",
    "OutcomeLog",
    "PolicyWatcher",
    "Price",
    "RecordError",
    "Request",
    "Routable",
    "RouteStages",
    "Router",
    "RouterError",
    "RuleRouter",
    "SigningError",
    "Step",
    "UndeclaredText",
    "Update",
    "drift_report",
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
