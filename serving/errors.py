"""Every exception the SDK raises, in one place: `except serving.errors.RouterError` catches them all.

Each class stays in the module that raises it and is importable from there, from its package (the
tree's headings) and from here. Each also keeps the standard base code caught before RouterError
existed, given in brackets: a bad file or input is a ValueError, a failure while running a
RuntimeError, an unreachable or slow upstream a ConnectionError or TimeoutError. A wrong argument (a
non-str prompt, an unknown precision) is Python's own TypeError or ValueError, not a RouterError.

    RouterError
    │   importable from `serving`:
    ├── BundleError [RuntimeError]              a bundle missing, tampered or invalid (Router.load(strict=True))
    ├── ManifestError [ValueError]              a manifest value is wrong (a BundleError when a bundle loads)
    ├── SigningError [ValueError]               a public key or a bundle's signature is bad
    ├── DownloadError [RuntimeError]            a bundle could not be fetched (BundleURLWatcher)
    ├── EndpointSpecError [ValueError]          an endpoint spec that cannot be used
    ├── LanguageDetectorMissing [RuntimeError]  endpoints declare languages; the `languages` extra is missing
    ├── CloudCallError [RuntimeError]           the cloud failed, after any fallback (.edge_error, .steps)
    │   └── EndpointsFailed                     no endpoint of an N-endpoint cascade served (.tried)
    ├── EdgeBusy [RuntimeError]                 no edge worker came free (execute() falls back to the cloud)
    ├── RecordError [ValueError]                an outcome record the log does not write
    │   └── UndeclaredText                      a string where STRING_FIELDS declares none
    ├── DriftInputError [ValueError]            records or a drift reference drift_report cannot read
    ├── ConversationStoreError                  the conversation store could not be read or written (a turn is then decided on its own)
    ├── TurnEvidenceError [ValueError]          a bundle's turn_evidence.json that cannot be used (a BundleError when a bundle loads)
    │   from `serving.policy`:
    ├── PolicyError [RuntimeError]              a request the policy leaves no way to serve (.rules)
    │   ├── NoFeasibleEndpoint                  the rules or the request's needs leave no endpoint
    │   └── FallbackForbidden                   the allowed endpoint failed and a rule forbids the rest
    ├── PolicyFileError [ValueError]            a policy file that cannot be used
    │   from `serving.chat` (what each means for the fallback: docs/clients.md):
    ├── UpstreamError                           an endpoint gave no usable answer (.endpoint)
    │   ├── UpstreamUnreachable [ConnectionError]
    │   ├── UpstreamTimeout [TimeoutError]
    │   │   └── SlowFirstToken
    │   ├── UpstreamHTTPError                   an HTTP error status (.status, .detail)
    │   ├── UpstreamMalformed
    │   └── StreamInterrupted
    │   from `serving.dashboard`:
    ├── RecordShapeError [ValueError]           a record the dashboard cannot read
    │   from `serving.proxy._config` and `serving.proxy._app` (the `server` extra):
    ├── ConfigError [ValueError]                a proxy option is missing or wrong
    └── RequestError                            a request the proxy answers with an HTTP error (kept inside)

RouterError itself lives in serving/_router_error.py, a module importing nothing, which every
module above imports; this one loads the others only when one of their names is asked for, so
`import serving.errors` stays as light as `import serving` (RequestError's module needs the `server` extra).
tests/test_sdk_face.py checks that every exception class in serving/ is a RouterError and is here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from serving._router_error import RouterError

if TYPE_CHECKING:
    from serving.bundle._bundle import BundleError
    from serving.bundle._download import DownloadError
    from serving.bundle._manifest import ManifestError
    from serving.bundle._signing import SigningError
    from serving.chat._errors import (
        SlowFirstToken,
        StreamInterrupted,
        UpstreamError,
        UpstreamHTTPError,
        UpstreamMalformed,
        UpstreamTimeout,
        UpstreamUnreachable,
    )
    from serving.conversations._evidence import TurnEvidenceError
    from serving.conversations._store import ConversationStoreError
    from serving.dashboard._summary import RecordShapeError
    from serving.endpoints._record import EndpointSpecError
    from serving.execution._steps import CloudCallError, EdgeBusy, EndpointsFailed
    from serving.features._language import LanguageDetectorMissing
    from serving.monitoring._drift import DriftInputError
    from serving.monitoring._outcome_log import RecordError, UndeclaredText
    from serving.policy._errors import FallbackForbidden, NoFeasibleEndpoint, PolicyError
    from serving.policy._rules import PolicyFileError
    from serving.proxy._app import RequestError
    from serving.proxy._config import ConfigError

_HOMES = {  # each name's defining module, imported on first use
    name: home
    for home, names in {
        "serving.bundle._bundle": "BundleError",
        "serving.bundle._download": "DownloadError",
        "serving.bundle._manifest": "ManifestError",
        "serving.bundle._signing": "SigningError",
        "serving.chat._errors": "SlowFirstToken StreamInterrupted UpstreamError UpstreamHTTPError UpstreamMalformed UpstreamTimeout UpstreamUnreachable",
        "serving.conversations._evidence": "TurnEvidenceError",
        "serving.conversations._store": "ConversationStoreError",
        "serving.dashboard._summary": "RecordShapeError",
        "serving.endpoints._record": "EndpointSpecError",
        "serving.execution._steps": "CloudCallError EdgeBusy EndpointsFailed",
        "serving.features._language": "LanguageDetectorMissing",
        "serving.monitoring._drift": "DriftInputError",
        "serving.monitoring._outcome_log": "RecordError UndeclaredText",
        "serving.policy._errors": "FallbackForbidden NoFeasibleEndpoint PolicyError",
        "serving.policy._rules": "PolicyFileError",
        "serving.proxy._app": "RequestError",
        "serving.proxy._config": "ConfigError",
    }.items()
    for name in names.split()
}

__all__ = [
    "BundleError", "CloudCallError", "ConfigError", "ConversationStoreError", "DownloadError", "DriftInputError",
    "EdgeBusy", "EndpointSpecError", "EndpointsFailed", "FallbackForbidden", "LanguageDetectorMissing",
    "ManifestError", "NoFeasibleEndpoint", "PolicyError", "PolicyFileError", "RecordError", "RecordShapeError",
    "RequestError", "RouterError", "SigningError", "SlowFirstToken", "StreamInterrupted", "TurnEvidenceError", "UndeclaredText",
    "UpstreamError", "UpstreamHTTPError", "UpstreamMalformed", "UpstreamTimeout", "UpstreamUnreachable",
]  # fmt: skip


def __getattr__(name: str) -> type[RouterError]:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found: type[RouterError] = getattr(importlib.import_module(home), name)
    globals()[name] = found  # the next lookup does not come here
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
